"""Live updates: after a transaction commits, tell the browsers watching a scheduling domain
that something in it changed; pages then re-fetch the parts they show.

One Channels group per domain (``domain.<cluster id>``). A notification carries no data, so
nothing leaks to a socket that could not read it and a missed one costs nothing but a
delay; the consumer coalesces bursts (``kueueweb.consumers.LiveConsumer``).

The committing thread does not send: it hands the domains over to the process's sender
(``_Sender``) and goes on. The sender throttles them per domain and sends on one event loop
for the life of the process, so the channel layer keeps its connections (channels_redis
pools them per loop) instead of opening one, in a new thread and loop, for every send. In
a process that serves the sockets, that loop is the server's own (the consumer names it,
``serve_on``): the in-memory layer of embedded mode hands messages to the sockets' queues,
which only that loop may touch. Elsewhere (a Celery worker, a management command) it is a
loop in a daemon thread of the sender's, drained when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
import time

from channels.layers import get_channel_layer
from django.db import transaction

from kueueweb.cooldown import Cooldown

logger = logging.getLogger(__name__)

# A notification is worth little: a send that takes longer is given up.
SEND_TIMEOUT_SECONDS = 2.0
# After a failure (Redis down), this process sends none for a while rather than piling up
# sends that time out; browsers catch up when their socket reconnects.
LAYER_DOWN_BACKOFF_SECONDS = 5.0
_layer_down = Cooldown(LAYER_DOWN_BACKOFF_SECONDS)
# Per process and domain, at most one send per THROTTLE_SECONDS: the first change goes out at
# once, later ones in the window become one send at its end. A burst of thousands of commits
# a second then costs the channel layer (and every socket) a few messages, not thousands.
THROTTLE_SECONDS = 0.1
# A trailing send this late has lost its loop (a server that stopped, a test's loop that
# ended): the window is over and the next change is sent as a first one.
STALE_TRAILING_SECONDS = 1.0


def group_name(cluster_id: int) -> str:
    return f"domain.{int(cluster_id)}"


async def _group_send(cluster_ids: list[int]) -> None:
    layer = get_channel_layer()
    if layer is None or _layer_down.active:
        return
    try:
        for cluster_id in cluster_ids:
            for attempt in range(2):
                try:
                    await asyncio.wait_for(
                        layer.group_send(group_name(cluster_id),
                                         {"type": "domain.changed", "cluster": cluster_id}),
                        timeout=SEND_TIMEOUT_SECONDS,
                    )
                    break
                except TimeoutError:
                    raise  # Redis hangs: no second wait
                except Exception:
                    # A broken pooled connection fails at once and is dropped: seen after a
                    # loop that had sent was closed ("Connection closed by server"). One
                    # more try on a fresh one before the cooldown silences the process.
                    if attempt:
                        raise
    except Exception as error:  # a broken channel layer must not break the sender
        _layer_down.trip()
        logger.warning("live update for domains %s not sent (%s: %s)", cluster_ids,
                       type(error).__name__, error)


class _Sender:
    """The process's notification sender (one, ``_sender``).

    ``changed`` is called from the committing threads. It decides there, under a lock, what
    the throttle lets through, so that a commit inside a window costs a dictionary lookup:
    the loop is woken only to send, or to set the window's trailing send.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Start afresh: also in a forked child, whose copy of the state names the parent's
        loops, timers and tasks (and whose lock another thread may have held at the fork)."""
        self._lock = threading.Lock()
        self._server: asyncio.AbstractEventLoop | None = None
        self._own: asyncio.AbstractEventLoop | None = None
        self._last_sent: dict[int, float] = {}
        self._trailing: dict[int, float] = {}  # due at the end of their window: when
        self._timers: dict[int, asyncio.TimerHandle] = {}  # the loop's, for those
        self._sending: set[asyncio.Task[None]] = set()

    def serve_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send on ``loop`` from now on: the loop of the server whose sockets are notified."""
        self._server = loop

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop to send on: the server's while it runs, else the sender's own (started
        on first use)."""
        server = self._server
        if server is not None and server.is_running():
            return server
        with self._lock:
            if self._own is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="kueueweb-live",
                                 daemon=True).start()
                self._own = loop
            return self._own

    def changed(self, cluster_ids: set[int]) -> None:
        """``cluster_ids`` changed (committed): send now, or at the end of the window."""
        now = time.monotonic()
        due: list[int] = []
        later: list[tuple[int, float]] = []
        with self._lock:
            for cluster_id in sorted(cluster_ids):
                trailing = self._trailing.get(cluster_id)
                if trailing is not None and now < trailing + STALE_TRAILING_SECONDS:
                    continue  # already due at the end of the window
                wait = self._last_sent.get(cluster_id, -THROTTLE_SECONDS) + THROTTLE_SECONDS - now
                if wait <= 0:
                    self._trailing.pop(cluster_id, None)
                    self._last_sent[cluster_id] = now
                    due.append(cluster_id)
                else:
                    self._trailing[cluster_id] = now + wait
                    later.append((cluster_id, wait))
        if not due and not later:
            return
        loop = self.loop()
        try:
            if due:
                loop.call_soon_threadsafe(self._start, loop, due)
            for cluster_id, wait in later:
                loop.call_soon_threadsafe(self._set_timer, loop, cluster_id, wait)
        except RuntimeError:  # the loop is closed: the process is going away
            with self._lock:
                for cluster_id, _ in later:
                    self._trailing.pop(cluster_id, None)
            logger.debug("live update for domains %s not sent: no loop", sorted(cluster_ids))

    def _set_timer(self, loop: asyncio.AbstractEventLoop, cluster_id: int, wait: float) -> None:
        self._timers[cluster_id] = loop.call_later(wait, self._send_trailing, loop, cluster_id)

    def _send_trailing(self, loop: asyncio.AbstractEventLoop, cluster_id: int) -> None:
        self._timers.pop(cluster_id, None)
        with self._lock:
            self._trailing.pop(cluster_id, None)
            self._last_sent[cluster_id] = time.monotonic()
        self._start(loop, [cluster_id])

    def _start(self, loop: asyncio.AbstractEventLoop, cluster_ids: list[int]) -> None:
        task = loop.create_task(_group_send(cluster_ids))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        for cluster_id, timer in list(self._timers.items()):
            timer.cancel()
            self._send_trailing(loop, cluster_id)
        await asyncio.gather(*self._sending, return_exceptions=True)

    def drain(self) -> None:
        """Send what is due at the end of its window now, and wait for the sends under way
        (bounded): at exit, so that a process that exits right after a commit (a command, a
        worker shutting down) still tells the browsers. The server's loop is left alone: it
        stops with the server."""
        loop = self._own
        if loop is None or not loop.is_running():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._drain(), loop).result(
                timeout=SEND_TIMEOUT_SECONDS + 1)
        except Exception as error:  # exiting anyway
            logger.debug("live updates not drained at exit (%s)", type(error).__name__)


_sender = _Sender()
atexit.register(_sender.drain)
os.register_at_fork(after_in_child=_sender._reset)  # Celery's prefork pool


def serve_on(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the live-update consumer from the server's loop (see the module's doc)."""
    _sender.serve_on(loop)


def notify(cluster_id: int | None) -> None:
    """Browsers watching ``cluster_id`` refresh once the current transaction commits.

    Call it once per service call or reconciler pass that changed something, not per row.
    """
    if cluster_id is None:
        return
    ids = {int(cluster_id)}
    transaction.on_commit(lambda: _sender.changed(ids))
