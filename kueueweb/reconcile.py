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
from django.db import transaction

from kueueweb import embedded
from kueueweb.cooldown import Cooldown

logger = logging.getLogger(__name__)

BROKER_DOWN_BACKOFF_SECONDS = 5.0
_broker_down = Cooldown(BROKER_DOWN_BACKOFF_SECONDS)


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

    def send() -> None:
        if settings.RECONCILER_MODE == "celery":
            send_to_celery(task_name, list(args), delay)
        elif embedded.is_running():
            embedded.submit(task_name, args, delay=delay)

    transaction.on_commit(send)


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

