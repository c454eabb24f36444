"""Request bodies larger than any request needs are refused before they are read.

Django's ASGI handler reads a whole request body (into memory, then a temporary file) before
any view or parser sees it, so the parsers' own limit (``KUEUEWEB_MAX_MANIFEST_BYTES``) would
come only after the upload. ``BodySizeLimit`` wraps the ASGI application:

- a declared ``Content-Length`` over the limit is answered 413 at once, naming the limit,
  and the body is never read;
- a body without a length (chunked) is counted as it arrives: past the limit the request is
  ended as a disconnect (Django drops it) and answered 413.

The limit is ``DATA_UPLOAD_MAX_MEMORY_SIZE``: the largest manifest plus room for a form's
other fields. The largest legitimate body is a manifest (apply, job submission, the job form)
or a kubeconfig upload, both far smaller.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def max_body_bytes() -> int:
    return int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)


def too_large_message(size: int | None, limit: int) -> str:
    shown = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return (f"the request body is {shown}; at most {limit} bytes are accepted "
            "(KUEUEWEB_MAX_MANIFEST_BYTES plus 64 KiB)")


class BodySizeLimit:
    """ASGI middleware: refuse HTTP request bodies over ``max_body_bytes()`` with 413."""

    def __init__(self, app: Any) -> None:
        # Any ASGI application (Django's handler types its arguments more narrowly).
        self.app: ASGIApp = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = max_body_bytes()
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, too_large_message(declared, limit))
            return
        received = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counting_receive, tracking_send)
        if exceeded and not started:
            await _refuse(send, too_large_message(None, limit))


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, message: str) -> None:
    body = json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": 413, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]})
    await send({"type": "http.response.body", "body": body})
