"""The embedded reconciler loop: Celery beat and workers inside the web process.

In embedded mode (no REDIS_URL) there is no broker. This loop calls the same task functions
that Celery beat sends in production, on the same periods, and runs the tasks that services
request (``kueueweb.reconcile.request``) as soon as they are committed. It runs in one daemon
thread of the web process, so there is exactly one reconciler and no lease contention.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import connections

from kueueweb import collector
from kueueweb.connections import release as release_connections

logger = logging.getLogger(__name__)

_requests: queue.Queue[tuple[str, tuple[Any, ...]]] = queue.Queue()
# Requests for later: (monotonic due time, sequence, task name, args), under _later_lock.
_later: list[tuple[float, int, str, tuple[Any, ...]]] = []
_later_lock = threading.Lock()
_sequence = 0
_running = threading.Event()

def is_running() -> bool:
    return _running.is_set()


def submit(task_name: str, args: tuple[Any, ...], delay: float = 0.0) -> None:
    """Queue a task for the loop (called after commit by kueueweb.reconcile), now or after
    ``delay`` seconds."""
    global _sequence
    if delay <= 0:
        _requests.put((task_name, args))
        return
    with _later_lock:
        _sequence += 1
        heapq.heappush(_later, (time.monotonic() + delay, _sequence, task_name, args))


def _take_due(now: float) -> list[tuple[str, tuple[Any, ...]]]:
    due = []
    with _later_lock:
        while _later and _later[0][0] <= now:
            _, _, name, args = heapq.heappop(_later)
            due.append((name, args))
    return due


def _call(task_name: str, args: tuple[Any, ...]) -> None:
    try:
        current_app.tasks[task_name].run(*args)
    except Exception:  # the loop must outlive a failing reconcile; the error is logged
        logger.exception("embedded reconciler: %s%r failed", task_name, args)
    finally:
        release_connections()  # kept for the next task unless unusable or too old
        collector.collect_young()


def run_forever(stop: threading.Event | None = None, tick: float = 0.2) -> None:
    """Run periodic tasks on their schedule and requested tasks as they come."""
    # Celery imports the apps' task modules only when a worker starts; the web process is
    # the worker here.
    current_app.loader.import_default_modules()
    # A long-running process now: what is loaded stays, and a call's garbage dies young.
    collector.tune_reconciler()
    _running.set()
    entries: dict[str, dict[str, Any]] = settings.CELERY_BEAT_SCHEDULE
    schedule = {str(entry["task"]): float(entry["schedule"]) for entry in entries.values()}
    next_run = dict.fromkeys(schedule, 0.0)
    try:
        while stop is None or not stop.is_set():
            now = time.monotonic()
            for name, period in schedule.items():
                if now >= next_run[name]:
                    _call(name, ())
                    next_run[name] = now + period
            pending: dict[tuple[str, tuple[Any, ...]], None] = dict.fromkeys(_take_due(now))
            try:
                pending[_requests.get(timeout=tick)] = None
                while True:
                    pending[_requests.get_nowait()] = None
            except queue.Empty:
                pass
            # Identical requests that piled up are run once: reconcilers are level-triggered.
            for name, args in pending:
                _call(name, args)
    finally:
        _running.clear()
        connections.close_all()  # the kept ones: this thread's, and it is done with them


def start_in_thread() -> threading.Thread:
    thread = threading.Thread(target=run_forever, name="kueueweb-reconcilers", daemon=True)
    thread.start()
    return thread
