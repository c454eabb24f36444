"""The embedded reconciler loop runs the same task functions Celery would."""

from __future__ import annotations

import threading
import time

import pytest

from kueueweb import embedded


@pytest.mark.django_db(transaction=True)
def test_loop_runs_periodic_and_requested_tasks_and_survives_failures(manager, make_queue,
                                                                     make_workload) -> None:
    from scheduling.models import Workload

    make_queue("cq", {"cpu": "2"})
    wl = make_workload("a", "lq-cq", {"cpu": "1"})
    embedded.submit("no.such.task", ())  # a failing request must not stop the loop
    stop = threading.Event()
    thread = threading.Thread(target=embedded.run_forever, kwargs={"stop": stop, "tick": 0.05})
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if Workload.objects.get(pk=wl.pk).phase == "Admitted":
                break
            time.sleep(0.1)
        assert Workload.objects.get(pk=wl.pk).phase == "Admitted"
        assert thread.is_alive()
    finally:
        stop.set()
        thread.join(timeout=10)


def test_delayed_requests_run_when_due_and_not_before() -> None:
    from celery import current_app

    calls: list[float] = []

    @current_app.task(name="tests.embedded.record")
    def record() -> None:
        calls.append(time.monotonic())

    stop = threading.Event()
    thread = threading.Thread(target=embedded.run_forever, kwargs={"stop": stop, "tick": 0.02})
    thread.start()
    try:
        submitted = time.monotonic()
        embedded.submit("tests.embedded.record", (), delay=0.5)
        time.sleep(0.3)
        assert calls == []
        deadline = time.monotonic() + 5
        while not calls and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(calls) == 1
        assert calls[0] - submitted >= 0.5
    finally:
        stop.set()
        thread.join(timeout=10)


@pytest.mark.django_db(transaction=True)
def test_loop_keeps_its_database_connection_between_tasks(settings) -> None:
    from celery import current_app
    from django.db import connection

    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        pytest.skip("Django never closes an in-memory SQLite connection")
    assert settings.DATABASES["default"]["CONN_MAX_AGE"] == 0  # Django closes after each
    seen: list[object] = []

    @current_app.task(name="tests.embedded.connection")
    def record(n: int) -> None:
        connection.ensure_connection()
        seen.append(connection.connection)

    stop = threading.Event()
    thread = threading.Thread(target=embedded.run_forever, kwargs={"stop": stop, "tick": 0.02})
    thread.start()
    try:
        for n in range(3):
            embedded.submit("tests.embedded.connection", (n,))
            deadline = time.monotonic() + 5
            while len(seen) <= n and time.monotonic() < deadline:
                time.sleep(0.02)
        assert len(seen) == 3
        assert seen[0] is seen[1] is seen[2]
    finally:
        stop.set()
        thread.join(timeout=10)
    # A stopped loop leaves no connection open behind it.
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                       " AND pid <> pg_backend_pid()")
        assert cursor.fetchone()[0] == 0
