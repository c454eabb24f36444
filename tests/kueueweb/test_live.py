"""Live notifications after commit: throttled per domain, sent on one loop per process,
without making the committing thread wait; a process that exits or forks still sends."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from itertools import count
from typing import Any

import pytest
import redis
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import transaction

from kueueweb import live
from kueueweb.consumers import LiveConsumer
from tests.fixtures.browser import run_elsewhere
from tests.fixtures.loops import run

pytestmark = pytest.mark.django_db(transaction=True)

# Domains no other test notifies: the throttle's windows are per process and domain.
_domains = count(900_000_001)


@pytest.fixture(autouse=True)
def layer_up() -> None:
    """No cooldown left by an earlier test that broke the channel layer on purpose."""
    live._layer_down.reset()


@contextlib.contextmanager
def listening(cluster_id: int, *, serve: bool = True) -> Iterator[Callable[[float], list[float]]]:
    """Listen to the domain's group on an event loop of its own thread, as a socket of the
    server would (``serve``: the loop is named to the sender, as the consumer does). Yields
    ``received(seconds)``: the times (monotonic) of the messages that arrive until
    ``seconds`` have passed with none."""
    ready = threading.Event()
    times: list[float] = []
    listener: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]] = []

    async def receive_all(layer: Any, channel: str) -> None:
        while True:  # one receive at a time, never cancelled until the end
            message = await layer.receive(channel)
            assert message == {"type": "domain.changed", "cluster": cluster_id}
            times.append(time.monotonic())

    async def listen() -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(live.group_name(cluster_id), channel)
        if serve:
            live.serve_on(asyncio.get_running_loop())
        task = asyncio.ensure_future(receive_all(layer, channel))
        listener.append((asyncio.get_running_loop(), task))
        ready.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await layer.group_discard(live.group_name(cluster_id), channel)

    thread = threading.Thread(target=asyncio.run, args=(listen(),), daemon=True)
    thread.start()
    assert ready.wait(10)

    def received(quiet: float) -> list[float]:
        seen = -1
        while seen != len(times):
            seen = len(times)
            time.sleep(quiet)
        return list(times)

    try:
        yield received
    finally:
        loop, task = listener[0]
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)


def test_a_burst_of_commits_is_one_send_now_and_one_at_the_end_of_the_window() -> None:
    cluster_id = next(_domains)
    with listening(cluster_id) as received:
        started = time.monotonic()
        for _ in range(50):
            with transaction.atomic():
                live.notify(cluster_id)
        burst = time.monotonic() - started
        times = received(0.5)
    # The burst took `burst` seconds: one send per throttle window it spans, plus the
    # trailing one.
    assert 2 <= len(times) <= 2 + int(burst / live.THROTTLE_SECONDS)
    assert times[-1] - times[0] >= live.THROTTLE_SECONDS / 2  # less the sends' latency
    assert times[-1] >= started + burst  # the last change of the burst is told


def test_a_trailing_send_whose_loop_ended_does_not_silence_the_domain() -> None:
    """A server (or a test's loop) that stops inside a window takes the window's trailing
    send with it; the domain's next change is sent all the same."""
    cluster_id = next(_domains)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    with listening(cluster_id) as received:
        live.notify(cluster_id)  # sent at once: the window opens
        live.serve_on(loop)
        live.notify(cluster_id)  # due at the end of the window, on that loop ...
        loop.call_soon_threadsafe(loop.stop)  # ... which stops before it fires
        thread.join(5)
        loop.close()
        received(0.3)
    time.sleep(live.STALE_TRAILING_SECONDS)
    with listening(cluster_id) as received:
        live.notify(cluster_id)
        assert len(received(0.3)) == 1


def notify_and_fail(cluster_id: int) -> None:
    with transaction.atomic():
        live.notify(cluster_id)
        raise RuntimeError("rolled back")


def test_nothing_is_sent_for_a_transaction_rolled_back() -> None:
    cluster_id = next(_domains)
    with listening(cluster_id) as received:
        with pytest.raises(RuntimeError):
            notify_and_fail(cluster_id)
        assert received(0.3) == []
        live.notify(cluster_id)  # autocommit: at once
        assert len(received(0.3)) == 1


def test_a_socket_is_told_of_a_change_committed_by_a_plain_thread(
    manager: Any, viewer: Any,
) -> None:
    """The reconcilers commit in threads of their own; the socket is served on the server's
    loop, which is the one the notification goes out on (the in-memory layer of embedded
    mode hands it to the socket's queue, which only that loop may touch)."""

    def commit() -> None:
        with transaction.atomic():
            live.notify(manager.pk)

    async def scenario() -> dict[str, Any]:
        comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/")
        comm.scope["user"] = viewer
        connected, _ = await comm.connect()
        assert connected
        await comm.send_json_to({"subscribe": [manager.pk]})
        assert (await comm.receive_json_from())["type"] == "subscribed"
        thread = threading.Thread(target=commit)
        thread.start()
        await asyncio.get_running_loop().run_in_executor(None, thread.join)
        reply: dict[str, Any] = await comm.receive_json_from(timeout=3)
        await comm.disconnect()
        return reply

    assert run(scenario()) == {"type": "changed", "cluster": manager.pk}


def test_the_committing_thread_does_not_wait_for_a_channel_layer_that_hangs(
    settings: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """A Redis that accepts connections and never answers: a commit goes on at once, and
    the send is given up after ``SEND_TIMEOUT_SECONDS`` and logged."""
    import socket

    from channels.layers import channel_layers

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (in the kernel's backlog), never reads or writes
    port = silent.getsockname()[1]
    settings.CHANNEL_LAYERS = {"default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [f"redis://127.0.0.1:{port}/0"]},
    }}
    channel_layers.backends.clear()
    live._layer_down.reset()
    try:
        cluster_id = next(_domains)
        started = time.monotonic()
        with transaction.atomic():
            live.notify(cluster_id)
        assert time.monotonic() - started < 0.5
        deadline = time.monotonic() + live.SEND_TIMEOUT_SECONDS + 5
        while "not sent" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"live update for domains [{cluster_id}] not sent" in caplog.text
        assert live._layer_down.active
    finally:
        silent.close()
        channel_layers.backends.clear()
        live._layer_down.reset()


@pytest.mark.production
def test_sends_keep_their_connection_to_redis(settings: Any) -> None:
    """One loop for the life of the process: channels_redis keeps its connection, where a
    new loop per send opened a new one every time."""
    cluster_id = next(_domains)
    client = redis.Redis.from_url(settings.REDIS_URL)

    def connections_received() -> int:
        return int(client.info("stats")["total_connections_received"])

    with listening(cluster_id, serve=False) as received:
        live.notify(cluster_id)  # the sender's loop and connection, made once
        assert len(received(0.3)) == 1
        before = connections_received()
        for _ in range(10):
            live.notify(cluster_id)
            time.sleep(live.THROTTLE_SECONDS * 1.5)  # each one its own send
        assert len(received(0.3)) == 11
        assert connections_received() - before <= 1


@pytest.mark.production
def test_a_send_still_arrives_after_redis_closed_the_senders_connection(
    settings: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """The sending loop keeps its connection for the life of the process; Redis closes it
    when it restarts. The next send must not be the one that pays for it."""
    cluster_id = next(_domains)
    client = redis.Redis.from_url(settings.REDIS_URL)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    with listening(cluster_id, serve=False) as received:
        live.notify(cluster_id)
        assert len(received(0.3)) == 1  # the sender's loop holds a connection now
        me = client.client_id()
        killed = sum(client.client_kill_filter(_id=entry["id"])
                     for entry in client.client_list()
                     if int(entry["id"]) != me and int(entry["db"]) == db
                     and "bzpopmin" not in entry["cmd"])  # the listener's
        assert killed >= 1
        time.sleep(live.THROTTLE_SECONDS * 1.5)
        live.notify(cluster_id)
        assert len(received(0.5)) == 2
    assert "not sent" not in caplog.text


@pytest.mark.production
def test_a_process_that_exits_right_after_a_commit_still_sends(settings: Any) -> None:
    cluster_id = next(_domains)
    with listening(cluster_id) as received:
        # The second change falls in the first's window: it is due 0.1 s later, after the
        # script has returned.
        run_elsewhere(settings, "from kueueweb import live\n"
                                f"live.notify({cluster_id})\nlive.notify({cluster_id})\n")
        assert len(received(0.5)) == 2


def _notify_in_child(cluster_id: int) -> None:
    live.notify(cluster_id)
    time.sleep(0.5)  # a Celery child does not run atexit handlers: it must send meanwhile


@pytest.mark.production
def test_a_forked_worker_sends_on_a_loop_of_its_own() -> None:
    """Celery's prefork pool forks a process whose sender already ran: the child has the
    parent's loop but not the thread that runs it."""
    cluster_id = next(_domains)
    with listening(cluster_id, serve=False) as received:
        live.notify(cluster_id)
        assert len(received(0.3)) == 1
        child = multiprocessing.get_context("fork").Process(target=_notify_in_child,
                                                            args=(cluster_id,))
        child.start()
        child.join(20)
        assert child.exitcode == 0
        assert len(received(0.3)) == 2
