"""Who may use the admin console, and the pages for users and namespace grants."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from kueueweb.models import NamespaceGrant


@pytest.fixture
def superuser_browser(client: Client, make_user: Callable[..., User]) -> Client:
    client.force_login(make_user("root", "superuser"))
    return client


@pytest.fixture
def admin_browser(client: Client, admin_user: User) -> Client:
    client.force_login(admin_user)
    return client


def test_admin_role_manages_namespace_grants(admin_browser: Client, operator: User) -> None:
    assert admin_browser.get(reverse("admin:kueueweb_namespacegrant_changelist")).status_code == 200
    response = admin_browser.post(reverse("admin:kueueweb_namespacegrant_add"), {
        "user": operator.pk, "namespace": "research", "pod_security_level": "restricted",
        "allowed_service_accounts": "trainer, builder", "allowed_priority_classes": "low"})
    assert response.status_code == 302
    assert sorted(operator.namespace_grants.values_list("namespace", flat=True)) == [
        "research", "team-a"]
    grant = operator.namespace_grants.get(namespace="research")
    assert grant.pod_security_level == "restricted"
    assert grant.service_accounts == {"trainer", "builder"}
    assert grant.priority_classes == {"low"}


def test_a_new_grant_defaults_to_baseline_and_every_priority_class(operator: User) -> None:
    grant = operator.namespace_grants.get()
    assert grant.pod_security_level == "baseline"
    assert grant.service_accounts == frozenset()
    assert grant.allows_priority_class("anything")


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"namespace": "kube-system"}, "namespace", "Kubernetes system namespace"),
    ({"allowed_service_accounts": "ok, Not_OK"}, "allowed_service_accounts", "not a valid name"),
    ({"allowed_priority_classes": "*, low"}, "allowed_priority_classes", "give it alone"),
    ({"pod_security_level": "open"}, "pod_security_level", "not one of the available choices"),
])
def test_invalid_grant_limits_are_refused_by_field(
    admin_browser: Client, operator: User, fields: dict[str, str], field: str, message: str
) -> None:
    data = {"user": operator.pk, "namespace": "research", "pod_security_level": "baseline",
            "allowed_service_accounts": "", "allowed_priority_classes": "*", **fields}
    response = admin_browser.post(reverse("admin:kueueweb_namespacegrant_add"), data)
    assert response.status_code == 200
    assert message in " ".join(response.context["adminform"].form.errors[field])
    assert NamespaceGrant.objects.filter(user=operator).count() == 1


def test_invalid_namespace_grant_is_refused(admin_browser: Client, operator: User) -> None:
    response = admin_browser.post(reverse("admin:kueueweb_namespacegrant_add"),
                                  {"user": operator.pk, "namespace": "Team_B",
                                   "pod_security_level": "baseline"})
    assert response.status_code == 200
    assert "is not a valid namespace" in response.content.decode()
    assert NamespaceGrant.objects.filter(user=operator).count() == 1


def test_admin_role_alone_cannot_edit_users(admin_browser: Client, operator: User) -> None:
    # Editing users includes making a superuser: that stays with superusers.
    response = admin_browser.get(reverse("admin:auth_user_change", args=[operator.pk]))
    assert response.status_code == 403


def test_user_page_has_the_namespace_grants_inline(superuser_browser: Client,
                                                   operator: User) -> None:
    response = superuser_browser.get(reverse("admin:auth_user_change", args=[operator.pk]))
    assert response.status_code == 200
    assert "Namespace grants (operators act only in these namespaces" in response.content.decode()
    assert 'value="team-a"' in response.content.decode()


def test_user_put_in_the_admin_group_becomes_staff(superuser_browser: Client,
                                                   viewer: User) -> None:
    admin_group = Group.objects.get(name="admin")
    response = superuser_browser.post(
        reverse("admin:auth_user_change", args=[viewer.pk]),
        {"username": viewer.username, "is_active": "on", "groups": [admin_group.pk],
         "date_joined_0": "2026-01-01", "date_joined_1": "00:00:00",
         "namespace_grants-TOTAL_FORMS": 0, "namespace_grants-INITIAL_FORMS": 0,
         "namespace_grants-MIN_NUM_FORMS": 0, "namespace_grants-MAX_NUM_FORMS": 1000},
    )
    assert response.status_code == 302
    viewer.refresh_from_db()
    assert viewer.is_staff
    assert list(viewer.groups.values_list("name", flat=True)) == ["admin"]


def test_staff_without_the_admin_role_sees_no_models(client: Client, viewer: User) -> None:
    viewer.is_staff = True
    viewer.save()
    client.force_login(viewer)
    response = client.get(reverse("admin:index"))
    assert response.status_code == 200
    assert response.context["app_list"] == []
    assert client.get(reverse("admin:scheduling_clusterqueue_changelist")).status_code == 403


@pytest.mark.django_db
def test_anonymous_admin_requests_go_to_the_login_page(client: Client) -> None:
    response = client.get(reverse("admin:index"))
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_user_list_shows_roles(superuser_browser: Client, operator: User, viewer: User) -> None:
    response = superuser_browser.get(reverse("admin:auth_user_changelist"))
    assert response.status_code == 200
    rows = {user.username: user for user in response.context["cl"].result_list}
    admin_site_user = response.context["cl"].model_admin
    assert admin_site_user.roles(rows["otto"]) == "operator"
    assert admin_site_user.roles(rows["vera"]) == "viewer"
