"""The benchmark's simulated cluster (tools.bench.cluster)."""

from __future__ import annotations

import heapq
import time

from django.utils import timezone

from scheduling.scheduler import admission
from tools.bench.cluster import TICK_SECONDS, SimulatedCluster, _Run


def test_the_cluster_wakes_when_a_run_ends_not_at_the_next_tick() -> None:
    cluster = SimulatedCluster(1, expected=3)
    assert cluster._pause() == TICK_SECONDS  # nothing running: look again in a tick

    now = time.monotonic()
    heapq.heappush(cluster._due, _Run(now + 10 * TICK_SECONDS, 1, 1))
    assert cluster._pause() == TICK_SECONDS  # ends after the next tick
    heapq.heappush(cluster._due, _Run(now + TICK_SECONDS / 4, 2, 1))
    assert 0 < cluster._pause() <= TICK_SECONDS / 4  # the soonest end, not a whole tick
    heapq.heappush(cluster._due, _Run(now - 1.0, 3, 1))
    assert cluster._pause() == 0.0  # overdue: at once


def test_the_cluster_looks_for_admissions_only_after_a_cycle_committed(
        manager, make_queue, make_workload, django_assert_num_queries) -> None:
    make_queue("cq", {"cpu": "2"})
    make_workload("a", "lq-cq", {"cpu": "1"})
    cluster = SimulatedCluster(manager.pk, expected=2)
    cluster._start_admitted()  # before the domain's first cycle: it looks, finds nothing
    assert cluster.stats.started == 0

    admission.run_admission_cycle(manager.pk, now=timezone.now())
    cluster._start_admitted()
    assert cluster.stats.started == 1
    with django_assert_num_queries(1):
        cluster._start_admitted()  # no cycle since: only the count of cycles is read
    assert cluster.stats.started == 1

    make_workload("b", "lq-cq", {"cpu": "1"})
    admission.run_admission_cycle(manager.pk, now=timezone.now())
    cluster._start_admitted()
    assert cluster.stats.started == 2
