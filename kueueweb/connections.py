"""Database connections of reconciler processes: kept from one task to the next.

A reconciler (the embedded loop, a Celery worker) runs thousands of short tasks a minute,
and opening a connection costs about as much as one of them: SQLite registers Django's
functions and runs the PRAGMAs, PostgreSQL starts a backend and authenticates.

Django closes a connection after a request once it is older than ``CONN_MAX_AGE``
(``DB_CONN_MAX_AGE``, 0 by default, which suits the ASGI web process). Celery's Django
fix-up goes further: before and after every task it closes every connection, whatever
``CONN_MAX_AGE`` says, unless ``CELERY_DB_REUSE_MAX`` is set. So in a reconciler:

* a connection gets ``RECONCILER_CONN_MAX_AGE_SECONDS`` (or ``CONN_MAX_AGE``, if longer)
  from the end of the task that opened it;
* around each task, ``release`` does what Django does around a request: a connection that
  an error left unusable, or that outlived its age, is closed, and ``CONN_HEALTH_CHECKS``
  makes the next task's first query replace one that died meanwhile (a restarted
  database, a terminated backend);
* ``CELERY_DB_REUSE_MAX`` (settings) leaves the fix-up's own closing to once in that many
  tasks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import connections

RECONCILER_CONN_MAX_AGE_SECONDS = 60.0
_kept = threading.local()  # per alias, the DB-API connection whose deadline was set


def release(sender: Any = None, **kwargs: Any) -> None:
    """At a task's boundary: keep this thread's connections for the reconciler's age, and
    close those that are unusable or obsolete (a receiver of Celery's task signals).

    A task run eagerly runs inside its caller (a test's transaction): nothing is closed."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    kept: dict[str, object] = _kept.__dict__.setdefault("by_alias", {})
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and kept.get(conn.alias) is not conn.connection:
            kept[conn.alias] = conn.connection
            if conn.close_at is not None:
                conn.close_at = max(conn.close_at,
                                    time.monotonic() + RECONCILER_CONN_MAX_AGE_SECONDS)
        conn.close_if_unusable_or_obsolete()


def keep_in_worker() -> None:
    """A Celery worker, before its pool forks: ``release`` around every task."""
    from celery.signals import task_postrun, task_prerun

    task_prerun.connect(release, dispatch_uid="kueueweb.connections.prerun", weak=False)
    task_postrun.connect(release, dispatch_uid="kueueweb.connections.postrun", weak=False)
