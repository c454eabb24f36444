from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import path
from django.utils.functional import SimpleLazyObject

from kueueweb import urls as site_urls
from kueueweb.views import server_error


@pytest.mark.django_db
def test_root_redirects_anonymous_users_to_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


@pytest.mark.django_db
def test_login_page_renders(client: Client) -> None:
    response = client.get("/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content


@pytest.mark.django_db
def test_health_check_is_open_and_reports_ok(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


# --- error pages: the site's own, with DEBUG off ---------------------------------------------


def _boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("kw-internal-detail-4f1c")


urlpatterns = [path("boom/", _boom), *site_urls.urlpatterns]
handler500 = site_urls.handler500


@pytest.mark.django_db
def test_an_unknown_page_is_the_site_s_404_showing_anonymous_visitors_nothing(
        client: Client, viewer_ui: Client) -> None:
    anonymous = client.get("/no/such/page/")
    signed_in = viewer_ui.get("/no/such/page/")

    assert anonymous.status_code == signed_in.status_code == 404
    for response in (anonymous, signed_in):
        assert "Page not found" in response.content.decode()
    page = anonymous.content.decode()
    assert 'nav aria-label="Main"' not in page
    for leak in ("/workloads/", "/admin/", "/api/", "urlpatterns", "URLconf", "/no/such/page/"):
        assert leak not in page, leak
    assert 'nav aria-label="Main"' in signed_in.content.decode()
    assert "/workloads/" in signed_in.content.decode()


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_server_error_is_the_site_s_500_without_its_details(viewer: User) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(viewer)

    response = client.get("/boom/")

    assert response.status_code == 500
    page = response.content.decode()
    assert "Server error" in page
    assert '<link rel="stylesheet"' in page  # the site's layout
    assert "kw-internal-detail-4f1c" not in page
    assert "Traceback" not in page


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_the_500_page_shows_the_navigation_of_the_signed_in_user(viewer: User) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(viewer)

    page = client.get("/boom/").content.decode()

    assert 'nav aria-label="Main"' in page
    assert f"Log out {viewer.get_username()}" in page


def test_the_500_page_renders_without_the_request_when_that_fails(rf: RequestFactory) -> None:
    request = rf.get("/boom/")

    def broken_user() -> User:
        raise OperationalError("the database went away")

    request.user = SimpleLazyObject(broken_user)  # type: ignore[assignment]

    response = server_error(request)

    assert response.status_code == 500
    page = response.content.decode()
    assert "Server error" in page
    assert 'nav aria-label="Main"' not in page
