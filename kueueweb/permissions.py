"""API permissions: viewer reads, operator acts on workloads in granted namespaces, admin
manages quotas and clusters. Every endpoint refuses anonymous requests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rest_framework.permissions import SAFE_METHODS, BasePermission

from kueueweb.roles import Role, can_operate_in, role_of

if TYPE_CHECKING:  # rest_framework.views imports this module through the settings
    from rest_framework.request import Request
    from rest_framework.views import APIView


class RolePermission(BasePermission):
    """Reads need the viewer role; writes need the view's ``write_role`` (admin by default).

    Views whose objects live in namespaces set ``write_role = Role.OPERATOR``; the operator
    must then also be granted the object's namespace (checked per object, and for creation
    from the ``namespace`` URL argument).
    """

    message = "You do not have the role this action needs."

    def has_permission(self, request: Request, view: APIView) -> bool:
        role = role_of(request.user)
        if request.method in SAFE_METHODS:
            return role >= Role.VIEWER
        needed: Role = getattr(view, "write_role", Role.ADMIN)
        if role < needed:
            return False
        namespace = view.kwargs.get("namespace") if hasattr(view, "kwargs") else None
        if needed == Role.OPERATOR and namespace:
            return can_operate_in(request.user, namespace)
        return True

    def has_object_permission(self, request: Request, view: APIView, obj: Any) -> bool:
        if request.method in SAFE_METHODS:
            return True
        needed: Role = getattr(view, "write_role", Role.ADMIN)
        namespace = getattr(obj, "namespace", None)
        if needed == Role.OPERATOR and namespace is not None:
            return can_operate_in(request.user, namespace)
        return role_of(request.user) >= needed
