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

    def send() -> None:
        if settings.RECONCILER_MODE == "celery":
            from kueueweb.celery import app

            app.send_task(task_name, args=list(args))
        elif embedded.is_running():
            embedded.submit(task_name, args)

    transaction.on_commit(send)
