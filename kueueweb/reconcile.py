"""Asking for a reconciler to run: after the current transaction commits, by Celery in
production or by the embedded loop in the web process.

A request is a wake-up, never the only trigger: Celery beat asks every domain on a short
period (the safety net), so a request that cannot be sent is logged and dropped. Sending
must never fail or stall the web request or task that asked: when the broker is down, one
attempt with bounded timeouts fails, and the process sends nothing more for
``BROKER_DOWN_BACKOFF_SECONDS`` rather than paying that wait again on every request.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from kueueweb import embedded
from kueueweb.cooldown import Cooldown

logger = logging.getLogger(__name__)

BROKER_DOWN_BACKOFF_SECONDS = 5.0
_broker_down = Cooldown(BROKER_DOWN_BACKOFF_SECONDS)
# How long a request's mark stands in for the next requests of the same task
# (``request_once``): longer than a message normally waits for a worker, short enough that a
# lost message costs little, and shorter than the cooldown above (a mark left by a failed
# send expires first).
REQUEST_ONCE_SECONDS = 2


def request(task_name: str, *args: Any) -> None:
    """Run task ``task_name`` with ``args`` (ids and primitives) once this transaction commits.

    Outside a running embedded loop and without a broker (tests, management commands) the
    request is dropped: the periodic reconcilers pick the change up on their next pass.
    """
    request_later(task_name, 0.0, *args)


def request_later(task_name: str, delay_seconds: float, *args: Any) -> None:
    """As ``request``, but run no sooner than ``delay_seconds`` after the commit: a
    reconciler asks to be woken at its next deadline (a pod start, a timeout)."""
    delay = max(float(delay_seconds), 0.0)
    transaction.on_commit(lambda: _deliver(task_name, args, delay, once=False))


def request_once(task_name: str, *args: Any) -> None:
    """As ``request``, for a task that calls ``taken`` as it starts, before it reads
    anything (an admission cycle): while an earlier request's message still waits for a
    worker, no other is sent.

    That message's run starts after this transaction committed, so it sees this change too;
    another message would only run the task again on the same state. Celery runs every
    message it holds, so in production the first request of a burst marks the task as
    waiting (a key in the cache, which is Redis, for ``REQUEST_ONCE_SECONDS``) and the
    requests after it find the mark; ``taken`` clears it. A message that is never run (a
    host lost with it) leaves its mark: the requests of the next ``REQUEST_ONCE_SECONDS`` at
    most are dropped, and the periodic pass serves them, as it serves those dropped while
    the broker is down. A mark that expires early costs one run more. The embedded loop
    runs requests that piled up once anyway."""
    transaction.on_commit(lambda: _deliver(task_name, args, 0.0, once=True))


def _deliver(task_name: str, args: tuple[Any, ...], delay: float, *, once: bool) -> None:
    """After the commit: send the request to Celery in production, or queue it for the
    embedded loop if it runs (else drop it). ``once``: see ``request_once``; a send that
    fails leaves the mark to expire, before the broker's cooldown ends."""
    if settings.RECONCILER_MODE == "celery":
        if once and (_broker_down.active or not _mark_waiting(task_name, args)):
            return
        send_to_celery(task_name, list(args), delay)
    elif embedded.is_running():
        embedded.submit(task_name, args, delay=delay)


def taken(task_name: str, *args: Any) -> None:
    """Called by a task of ``request_once`` as it starts, before it reads anything: the
    requests from now on are sent again, since this run may read before their changes."""
    if settings.RECONCILER_MODE != "celery" or _broker_down.active:
        return
    try:
        cache.delete(_waiting_key(task_name, args))
    except Exception as error:  # noqa: BLE001 - Redis is down; the mark expires on its own
        _broker_down.trip()
        logger.warning("the request mark of %s%r was not cleared (%s: %s)",
                       task_name, tuple(args), type(error).__name__, error)


def _waiting_key(task_name: str, args: tuple[Any, ...]) -> str:
    return ":".join(["kueueweb:waiting", task_name, *map(str, args)])


def _mark_waiting(task_name: str, args: tuple[Any, ...]) -> bool:
    """Mark the task as waiting; False if it already was (a message is on its way) or if
    Redis failed (then the broker is down too: the request is dropped, as
    ``send_to_celery`` drops it, and the periodic reconcilers catch up)."""
    try:
        return bool(cache.add(_waiting_key(task_name, args), 1, timeout=REQUEST_ONCE_SECONDS))
    except Exception as error:  # noqa: BLE001 - any Redis failure
        _broker_down.trip()
        logger.warning("task %s not sent (%s: %s); the periodic reconcilers will catch up",
                       task_name, type(error).__name__, error)
        return False


def max_countdown() -> float:
    """The longest countdown sent: half the broker's visibility timeout. Redis redelivers a
    message still unacknowledged after that timeout, and a worker holds a countdown message
    unacknowledged until it runs; waking a reconciler early is harmless (it computes its
    next deadline again)."""
    timeout = float(settings.CELERY_VISIBILITY_TIMEOUT_SECONDS)
    return max(timeout / 2, 1.0)


def send_to_celery(task_name: str, args: list[Any], delay: float) -> bool:
    """Send the task now; False (logged) if the broker could not take it."""
    if _broker_down.active:
        return False
    from kueueweb.celery import app

    countdown = min(delay, max_countdown()) or None
    try:
        app.send_task(task_name, args=args, countdown=countdown)
    except Exception as error:  # noqa: BLE001 - any broker failure: the safety net covers it
        _broker_down.trip()
        logger.warning("task %s not sent (%s: %s); the periodic reconcilers will catch up",
                       task_name, type(error).__name__, error)
        return False
    return True

