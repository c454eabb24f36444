"""The live socket opens only from a page of this site: same host and port, or a trusted
origin."""

from __future__ import annotations

from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client, override_settings

from tests.fixtures.loops import run

pytestmark = pytest.mark.django_db(transaction=True)


def _connects(session: str, origin: str | None, host: str) -> bool:
    from kueueweb.asgi import application

    headers = [(b"host", host.encode()),
               (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))

    async def scenario() -> bool:
        comm = WebsocketCommunicator(application, "/ws/live/", headers=headers)
        connected, _ = await comm.connect()
        await comm.disconnect()
        return bool(connected)

    return bool(run(scenario()))


@pytest.fixture
def session(manager: Any, viewer: Any) -> str:
    client = Client()
    client.force_login(viewer)
    return str(client.cookies[settings.SESSION_COOKIE_NAME].value)


@pytest.mark.parametrize(("origin", "host", "connects"), [
    ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
    ("http://localhost", "localhost", True),
    ("https://localhost", "localhost:443", True),
    ("http://[::1]:8000", "[::1]:8000", True),
    # Another port of the same host is another program's page.
    ("http://127.0.0.1:9999", "127.0.0.1:8000", False),
    ("http://127.0.0.1", "127.0.0.1:8000", False),
    ("http://localhost:8000", "127.0.0.1:8000", False),
    ("http://evil.example", "127.0.0.1:8000", False),
    ("http://evil.example:8000", "evil.example:8000", False),  # not in ALLOWED_HOSTS
    ("null", "127.0.0.1:8000", False),
    ("http://127.0.0.1:8000/path", "127.0.0.1:8000", False),
    ("http://127.0.0.1:99999", "127.0.0.1:8000", False),
    (None, "127.0.0.1:8000", False),
])
def test_a_socket_opens_only_from_this_host_and_port(session: str, origin: str | None,
                                                       host: str, connects: bool) -> None:
    assert _connects(session, origin, host) is connects


def test_a_trusted_origin_opens_a_socket_whatever_host_the_proxy_sends(session: str) -> None:
    origin = "https://kueueweb.example.org"
    refused = _connects(session, origin, "127.0.0.1:8000")
    with override_settings(CSRF_TRUSTED_ORIGINS=[origin]):
        trusted = _connects(session, origin, "127.0.0.1:8000")
        other_scheme = _connects(session, "http://kueueweb.example.org", "127.0.0.1:8000")

    assert (refused, trusted, other_scheme) == (False, True, False)
