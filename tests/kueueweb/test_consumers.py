"""The live-update socket: who may connect, what it accepts, and how bursts coalesce."""

from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from kueueweb.consumers import COALESCE_SECONDS, LiveConsumer
from kueueweb.live import group_name

pytestmark = pytest.mark.django_db(transaction=True)


def run(coroutine: Any) -> Any:
    """Run a scenario on its own event loop, in a thread of its own: the browser tests'
    Playwright keeps a loop running in the main thread."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def communicator(user: Any) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/")
    comm.scope["user"] = user
    return comm


def test_anonymous_and_roleless_sockets_are_refused(make_user: Any) -> None:
    async def scenario(user: Any) -> tuple[bool, Any]:
        comm = communicator(user)
        connected, code = await comm.connect()
        await comm.disconnect()
        return connected, code

    assert run(scenario(AnonymousUser())) == (False, 4401)
    assert run(scenario(make_user("nobody"))) == (False, 4401)


def test_subscribe_is_validated_and_joins_existing_domains(manager: Any, viewer: Any) -> None:
    async def scenario() -> list[dict[str, Any]]:
        comm = communicator(viewer)
        connected, _ = await comm.connect()
        assert connected
        replies = []
        for text in ("not json", json.dumps({"subscribe": "all"}),
                     json.dumps({"subscribe": [True]}), "x" * 5000,
                     json.dumps({"subscribe": [manager.pk, 999999]})):
            await comm.send_to(text_data=text)
            replies.append(json.loads(await comm.receive_from()))
        await comm.disconnect()
        return replies

    replies = run(scenario())
    assert [r["type"] for r in replies] == ["error"] * 4 + ["subscribed"]
    assert replies[1]["message"].startswith("subscribe: must be a list")
    assert replies[4]["clusters"] == [manager.pk]


def test_a_burst_of_changes_reaches_the_browser_coalesced(manager: Any, viewer: Any) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], float]:
        comm = communicator(viewer)
        await comm.connect()
        await comm.send_to(text_data=json.dumps({"subscribe": [manager.pk]}))
        await comm.receive_from()
        layer = get_channel_layer()
        started = time.monotonic()
        for _ in range(1000):
            await layer.group_send(group_name(manager.pk),
                                   {"type": "domain.changed", "cluster": manager.pk})
        received = []
        last = started
        while not await comm.receive_nothing(timeout=1.5):
            received.append(json.loads(await comm.receive_from()))
            last = time.monotonic()
        await comm.disconnect()
        return received, last - started

    received, span = run(scenario())
    # At most one per coalescing window while the burst is delivered, plus the first one:
    # a handful, never a thousand.
    assert 1 <= len(received) <= 2 + span / COALESCE_SECONDS
    assert len(received) < 50
    assert {m["type"] for m in received} == {"changed"}
    assert {m["cluster"] for m in received} == {manager.pk}


def test_the_asgi_stack_refuses_a_foreign_origin(manager: Any, viewer: Any) -> None:
    from kueueweb.asgi import application

    async def scenario(origin: bytes) -> bool:
        comm = WebsocketCommunicator(application, "/ws/live/", headers=[(b"origin", origin)])
        connected, _ = await comm.connect()
        await comm.disconnect()
        return connected

    # Anonymous either way, so even the allowed origin is refused by the consumer; the
    # foreign one is refused before it (no session is looked at).
    assert run(scenario(b"http://evil.example")) is False
