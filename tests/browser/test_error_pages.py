"""The 404 and 500 pages, DEBUG off as in production: inside the app's layout, with the
navigation of the signed-in user."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.utils.crypto import get_random_string

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]


@pytest.fixture
def daphne_env() -> dict[str, str]:
    """The server in production mode, over plain HTTP (the test has no TLS), with the
    failing page of ``tests.urls``."""
    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DEBUG": "false",
        "SECRET_KEY": get_random_string(64),
        "KUEUEWEB_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
    }


def open_error_page(page: Any, path: str, status: int, title: str, user: Any) -> None:
    """``path`` answers ``status`` with the page titled ``title``, inside the layout with the
    navigation of ``user``, and shows nothing of Django's debug pages."""
    answer = page.goto(path)
    assert answer is not None
    assert answer.status == status
    assert page.locator("h1").inner_text() == title
    nav = page.get_by_role("navigation", name="Main")
    assert nav.get_by_role("link", name="Workloads").is_visible()
    assert f"Log out {user.username}" in nav.inner_text()
    assert page.locator("link[rel=stylesheet]").count() >= 1
    assert "Traceback" not in page.content()


def test_unknown_address_shows_the_in_app_404(
    browser_page: Callable[..., Any], manager: Any, viewer: Any
) -> None:
    open_error_page(browser_page(viewer), "/no/such/page/", 404, "Page not found", viewer)


def test_server_error_shows_the_in_app_500(
    browser_page: Callable[..., Any], manager: Any, viewer: Any
) -> None:
    page = browser_page(viewer)
    open_error_page(page, "/__tests__/server-error/", 500, "Server error", viewer)
    assert "a failure the test provoked" not in page.content()
