"""Asking for a reconciler to run: after the current transaction commits, by Celery in
production or by the embedded loop in the web process."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from kueueweb import embedded


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
            from kueueweb.celery import app

            app.send_task(task_name, args=list(args), countdown=delay or None)
        elif embedded.is_running():
            embedded.submit(task_name, args, delay=delay)

    transaction.on_commit(send)
