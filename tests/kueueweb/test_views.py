from __future__ import annotations

import pytest
from django.test import Client


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
