"""Which pages may open a WebSocket: those of this site, as Django's CSRF check decides for a
form.

A browser sends every WebSocket handshake with the Origin of the page that opened it, and the
socket carries the user's session cookie whatever that page was, so the origin must be ours:
the scheme's host *and port* the socket was opened to (the Host header, itself one of
``ALLOWED_HOSTS``), or one of ``CSRF_TRUSTED_ORIGINS`` (a proxy that rewrites Host). Another
port on the same host is another site (another program's page). A handshake without an
Origin, or with one that is not ``http(s)://host[:port]``, is refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def _origin(value: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an Origin header, or None when it is no web origin."""
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def origin_allowed(origin: str | None, host: str | None) -> bool:
    """Whether a page of ``origin`` may open a socket sent with this Host header."""
    parsed = _origin(origin) if origin else None
    if parsed is None:
        return False
    scheme, hostname, port = parsed
    netloc = hostname if port == DEFAULT_PORTS[scheme] else f"{hostname}:{port}"
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        trusted_parts = urlsplit(trusted)
        if trusted_parts.scheme == scheme and is_same_domain(netloc, trusted_parts.netloc):
            return True
    if not host:
        return False
    domain, host_port = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    try:
        expected_port = int(host_port) if host_port else DEFAULT_PORTS[scheme]
    except ValueError:
        return False
    return domain.strip("[]") == hostname.strip("[]") and expected_port == port


class SameOriginValidator:
    """ASGI middleware refusing a WebSocket handshake from another site's page before any
    consumer or session lookup sees it."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(
                _header(scope, b"origin"), _header(scope, b"host")):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
