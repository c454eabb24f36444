"""The live-update socket: who may connect, what it accepts, and how bursts coalesce."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from kueueweb.consumers import COALESCE_SECONDS, LiveConsumer
from kueueweb.live import group_name
from tests.fixtures.loops import run

pytestmark = pytest.mark.django_db(transaction=True)


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


HOSTILE_MESSAGES = [
    # (what is sent, the field the error names)
    ("not json", ""),
    ("[" * 3000 + "]" * 0, ""),  # deep nesting: a RecursionError inside json
    ("[" * 2000 + "]" * 2000, ""),
    ("x" * 5000, ""),
    ("é" * 3000, ""),  # 3000 characters, 6000 bytes
    (json.dumps([1, 2]), ""),
    (json.dumps("subscribe"), ""),
    (json.dumps(None), ""),
    (json.dumps({}), "subscribe"),
    (json.dumps({"subscribe": "all"}), "subscribe"),
    (json.dumps({"subscribe": None}), "subscribe"),
    (json.dumps({"subscribe": {"1": 1}}), "subscribe"),
    (json.dumps({"subscribe": list(range(1, 100))}), "subscribe"),
    (json.dumps({"subscribe": [True]}), "subscribe[0]"),
    (json.dumps({"subscribe": [1, "2"]}), "subscribe[1]"),
    (json.dumps({"subscribe": [1.5]}), "subscribe[0]"),
    (json.dumps({"subscribe": [0]}), "subscribe[0]"),
    (json.dumps({"subscribe": [-1]}), "subscribe[0]"),
    (json.dumps({"subscribe": [10**30]}), "subscribe[0]"),
    (json.dumps({"subscribe": [2**63]}), "subscribe[0]"),
    ('{"subscribe": [NaN]}', "subscribe[0]"),
    (json.dumps({"subscribe": [[1]]}), "subscribe[0]"),
    (json.dumps({"subscribe": [1], "type": "admin"}), "type"),
    (json.dumps({"unsubscribe": [1]}), "unsubscribe"),
]


def test_hostile_messages_get_an_error_naming_the_field_and_harm_no_one(
        manager: Any, viewer: Any) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any],
                                  dict[str, Any]]:
        bystander = communicator(viewer)
        assert (await bystander.connect())[0]
        await bystander.send_to(text_data=json.dumps({"subscribe": [manager.pk]}))
        await bystander.receive_from()

        comm = communicator(viewer)
        assert (await comm.connect())[0]
        replies = []
        for text, _ in HOSTILE_MESSAGES:
            await comm.send_to(text_data=text)
            replies.append(json.loads(await comm.receive_from()))
        await comm.send_to(bytes_data=b"\x00\x01binary")
        binary = json.loads(await comm.receive_from())
        # Still serving: a good message works after all that.
        await comm.send_to(text_data=json.dumps({"subscribe": [manager.pk, manager.pk]}))
        good = json.loads(await comm.receive_from())
        # And the other socket was never disturbed.
        await get_channel_layer().group_send(group_name(manager.pk),
                                             {"type": "domain.changed", "cluster": manager.pk})
        other = json.loads(await bystander.receive_from())
        await comm.disconnect()
        await bystander.disconnect()
        return replies, binary, good, other

    replies, binary, good, other = run(scenario())
    for (text, field), reply in zip(HOSTILE_MESSAGES, replies, strict=True):
        assert reply["type"] == "error", text[:40]
        assert reply["field"] == field, text[:40]
        assert reply["message"].startswith(f"{field}: " if field else ""), text[:40]
    assert binary == {"type": "error", "field": "",
                      "message": "messages must be JSON text, not binary"}
    assert good == {"type": "subscribed", "clusters": [manager.pk]}
    assert other == {"type": "changed", "cluster": manager.pk}


def test_a_flood_of_messages_closes_the_socket(manager: Any, viewer: Any) -> None:
    from kueueweb.consumers import CLOSE_TOO_MANY_MESSAGES, MAX_MESSAGES_PER_MINUTE

    async def scenario() -> dict[str, Any]:
        comm = communicator(viewer)
        assert (await comm.connect())[0]
        for _ in range(MAX_MESSAGES_PER_MINUTE):
            await comm.send_to(text_data="{}")
            await comm.receive_from()
        await comm.send_to(text_data="{}")
        closed = await comm.receive_output()
        await comm.disconnect()
        return closed

    assert run(scenario()) == {"type": "websocket.close", "code": CLOSE_TOO_MANY_MESSAGES}


def test_a_user_whose_role_was_taken_away_is_disconnected_on_subscribe(
        manager: Any, viewer: Any) -> None:
    from channels.db import database_sync_to_async

    from kueueweb.consumers import CLOSE_ROLE_REVOKED

    async def scenario() -> dict[str, Any]:
        comm = communicator(viewer)
        assert (await comm.connect())[0]
        await database_sync_to_async(viewer.groups.clear)()
        await comm.send_to(text_data=json.dumps({"subscribe": [manager.pk]}))
        closed = await comm.receive_output()
        await comm.disconnect()
        return closed

    assert run(scenario()) == {"type": "websocket.close", "code": CLOSE_ROLE_REVOKED}


def test_a_notification_due_after_the_page_closed_is_dropped_quietly() -> None:
    """The page closes while a coalesced notification waits for its window: nothing is sent
    on the closed socket, and a send that finds the transport gone fails no task."""

    async def scenario() -> tuple[list[str], list[str]]:
        consumer = LiveConsumer()
        consumer.groups_joined, consumer.last_sent, consumer.scheduled = set(), {}, {}
        consumer.closed = False
        sent: list[str] = []

        async def send(text: str) -> None:
            sent.append(text)
            if consumer.closed:
                raise ConnectionError("Attempt to send on a closed protocol")

        consumer.send = send  # type: ignore[method-assign]
        await consumer.domain_changed({"cluster": 7})  # sent at once
        await consumer.domain_changed({"cluster": 7})  # due at the end of the window
        await consumer.disconnect(1001)
        await asyncio.sleep(COALESCE_SECONDS + 0.2)
        after_close = list(sent)
        # The transport closed before the consumer heard of it: the send fails, quietly.
        consumer.closed = False
        consumer.last_sent.clear()
        consumer.send = lambda text: _raise(ConnectionError("closed"))  # type: ignore[method-assign]
        await consumer.domain_changed({"cluster": 8})
        return after_close, [json.loads(s)["type"] for s in after_close]

    sent, types = run(scenario())
    assert types == ["changed"]  # the first only: the one due later was never tried
    assert json.loads(sent[0])["cluster"] == 7


async def _raise(error: Exception) -> None:
    raise error
