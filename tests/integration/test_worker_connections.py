"""Reconciler processes keep their database connection between tasks (``kueueweb.connections``).

The embedded loop's side is tested in ``test_embedded``; here a real Celery worker process
on PostgreSQL, where Celery's Django fix-up would otherwise close the connection around
every task.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from kueueweb.celery import app
from multicluster.models import Cluster
from scheduling.models import AdmissionLease
from scheduling.scheduler.admission import ADMISSION_TASK
from tests.fixtures.processes import Processes, wait_for, worker_only

pytestmark = [pytest.mark.production, pytest.mark.slow]


@pytest.fixture
def worker(transactional_db: None, settings: Any, tmp_path: Path) -> Iterator[Processes]:
    """One Celery worker with one pool process, and no beat: only the tasks a test sends."""
    if not settings.REDIS_URL or connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL and Redis")
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    try:
        with worker_only(settings.REDIS_URL, tmp_path, concurrency=1) as processes:
            yield processes
    finally:
        redis.Redis.from_url(settings.REDIS_URL).flushdb()


def _other_backends() -> set[int]:
    """The server processes of the connections to this database other than ours."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                       " AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
        return {pid for (pid,) in cursor.fetchall()}


def _run_cycle(domain: Cluster, processes: Processes) -> None:
    """Send one admission cycle to the worker and wait until it has been applied."""
    before = AdmissionLease.objects.filter(cluster_id=domain.pk).values_list(
        "cycle", flat=True).first() or 0
    app.send_task(ADMISSION_TASK, args=[domain.pk])
    wait_for(lambda: AdmissionLease.objects.filter(cluster_id=domain.pk, cycle__gt=before,
                                                   holder="").exists(),
             timeout=60, what="the admission cycle applied", processes=processes,
             interval=0.02)


def test_a_worker_keeps_its_connection_and_replaces_one_that_died(
    worker: Processes, manager: Cluster,
) -> None:
    ours = _other_backends()  # left by the test's own setup, if any
    _run_cycle(manager, worker)
    kept = _other_backends() - ours
    assert len(kept) == 1, f"the worker's connection was not kept: {kept}"
    for _ in range(3):
        _run_cycle(manager, worker)
        assert _other_backends() - ours == kept  # the same server process each time

    # The database ends that connection (a restart, an administrator): the next task still
    # runs, on a new connection, and nothing fails.
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [next(iter(kept))])
    _run_cycle(manager, worker)
    replaced = _other_backends() - ours
    assert len(replaced) == 1
    assert replaced != kept
    assert "Traceback" not in worker.logs()
