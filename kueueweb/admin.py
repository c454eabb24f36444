"""The admin console's access rule, shared by every app's admin, and the user pages.

Django admin lets in staff users only (``is_staff``); members of the ``admin`` group are staff.
Inside, the kueueweb role decides: the ``admin`` role (or a superuser) may manage quotas,
clusters and namespace grants; Django's per-model permissions still apply to anyone else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin
from django.contrib.auth.admin import UserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import Model
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from kueueweb.models import NamespaceGrant
from kueueweb.roles import GROUP_NAMES, Role, role_of

if TYPE_CHECKING:
    # django-stubs makes these generic; at run time they are plain classes.
    ModelAdmin = admin.ModelAdmin[Any]
    TabularInline = admin.TabularInline[Any, Any]
    ModelForm = forms.ModelForm[Any]
    InlineFormSet = BaseInlineFormSet[Any, Any, Any]
    BaseUserAdmin = UserAdmin[User]
else:
    ModelAdmin = admin.ModelAdmin
    TabularInline = admin.TabularInline
    ModelForm = forms.ModelForm
    InlineFormSet = BaseInlineFormSet
    BaseUserAdmin = UserAdmin

admin.site.site_header = "kueueweb admin"
admin.site.site_title = "kueueweb admin"
admin.site.index_title = "Quotas, clusters and access"
admin.site.site_url = "/"


def is_kueueweb_admin(request: HttpRequest) -> bool:
    return bool(request.user.is_active and request.user.is_staff) and role_of(request.user) >= Role.ADMIN


class RoleAdminMixin:
    """Grants everything on a model to users with the kueueweb ``admin`` role.

    Other staff users fall back to Django's model permissions. Subclasses narrow it further
    (read-only status objects return False for add/change).
    """

    def has_module_permission(self, request: HttpRequest) -> bool:
        return is_kueueweb_admin(request) or super().has_module_permission(request)  # type: ignore[misc]

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return is_kueueweb_admin(request) or super().has_view_permission(request, obj)  # type: ignore[misc]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        # Inlines receive the parent object as a second argument, model admins do not.
        return is_kueueweb_admin(request) or super().has_add_permission(request, *args)  # type: ignore[misc]

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return is_kueueweb_admin(request) or super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return is_kueueweb_admin(request) or super().has_delete_permission(request, obj)  # type: ignore[misc]


class ReadOnlyAdminMixin:
    """Objects written only by the reconcilers: listed and shown, never added or edited."""

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class NamespaceGrantInline(RoleAdminMixin, TabularInline):
    model = NamespaceGrant
    fields = ["namespace", "pod_security_level", "allowed_service_accounts",
              "allowed_priority_classes"]
    extra = 1
    verbose_name = "namespace grant"
    verbose_name_plural = 'namespace grants (operators act only in these namespaces; "*" = all)'


@admin.register(NamespaceGrant)
class NamespaceGrantAdmin(RoleAdminMixin, ModelAdmin):
    list_display = ["user", "namespace", "pod_security_level", "allowed_service_accounts",
                    "allowed_priority_classes"]
    list_filter = ["namespace", "pod_security_level"]
    search_fields = ["user__username", "namespace"]
    list_select_related = ["user"]


class KueuewebUserAdmin(BaseUserAdmin):
    """Django's user admin with the user's namespace grants on the same page.

    Only superusers (or holders of Django's auth permissions) edit users: an ``admin`` role
    alone must not be able to make itself a superuser.
    """

    inlines = [*UserAdmin.inlines, NamespaceGrantInline]
    list_display = ["username", "email", "is_staff", "is_superuser", "roles", "is_active"]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("groups")

    @admin.display(description="roles")
    def roles(self, obj: User) -> str:
        known = set(GROUP_NAMES.values())
        return ", ".join(g.name for g in obj.groups.all() if g.name in known) or "-"

    def save_related(
        self, request: HttpRequest, form: ModelForm, formsets: Any, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        # Members of the admin group are staff, so they can sign in to this console.
        user = form.instance
        if not user.is_staff and user.groups.filter(name=GROUP_NAMES[Role.ADMIN]).exists():
            user.is_staff = True
            user.save(update_fields=["is_staff"])


admin.site.unregister(User)
admin.site.register(User, KueuewebUserAdmin)
# Groups are the three roles, created by a migration; renaming them would break role_of.
admin.site.unregister(Group)
