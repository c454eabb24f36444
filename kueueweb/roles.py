"""The three roles and namespace grants, in one place for the API, the UI and WebSockets."""

from __future__ import annotations

from enum import IntEnum

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from kueueweb.models import ALL_NAMESPACES, NamespaceGrant


class Role(IntEnum):
    """Ordered so that a higher role includes everything a lower one may do."""

    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3


GROUP_NAMES = {Role.VIEWER: "viewer", Role.OPERATOR: "operator", Role.ADMIN: "admin"}


def role_of(user: AbstractBaseUser | AnonymousUser) -> Role:
    if not user.is_authenticated:
        return Role.NONE
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    cached: Role | None = getattr(user, "_kueueweb_role", None)
    if cached is not None:
        return cached
    names = set(getattr(user, "groups").values_list("name", flat=True))  # noqa: B009
    role = Role.NONE
    for candidate, group in GROUP_NAMES.items():
        if group in names and candidate > role:
            role = candidate
    setattr(user, "_kueueweb_role", role)  # noqa: B010 (a per-request cache on the user)
    return role


def granted_namespaces(user: AbstractBaseUser | AnonymousUser) -> set[str]:
    if not user.is_authenticated:
        return set()
    grants = getattr(user, "namespace_grants")  # noqa: B009 (reverse relation)
    return set(grants.values_list("namespace", flat=True))


def can_operate_in(user: AbstractBaseUser | AnonymousUser, namespace: str) -> bool:
    """Operators act only in namespaces granted to them; admins act everywhere."""
    role = role_of(user)
    if role >= Role.ADMIN:
        return True
    if role < Role.OPERATOR:
        return False
    grants = granted_namespaces(user)
    return ALL_NAMESPACES in grants or namespace in grants


def submission_grant(
    user: AbstractBaseUser | AnonymousUser | None, namespace: str
) -> NamespaceGrant | None:
    """The grant that bounds what ``user`` submits in ``namespace``; None when nothing does
    (an admin, or kueueweb itself: ``user`` None).

    The grant naming the namespace wins over a ``*`` grant, so an admin can give one
    namespace a stricter or looser level than the rest. A user with no grant at all gets
    the defaults (``baseline``, no service account but ``default``, every priority class);
    ``can_operate_in`` refuses them anyway.
    """
    if user is None or role_of(user) >= Role.ADMIN:
        return None
    if not user.is_authenticated:
        return NamespaceGrant(namespace=namespace)
    found = getattr(user, "namespace_grants")  # noqa: B009 (reverse relation)
    grants = {g.namespace: g for g in found.filter(namespace__in=(namespace, ALL_NAMESPACES))}
    return grants.get(namespace) or grants.get(ALL_NAMESPACES) or NamespaceGrant(namespace=namespace)
