"""The benchmark's simulated cluster (scheduling.bench.cluster)."""

from __future__ import annotations

import heapq
import time

from scheduling.bench.cluster import TICK_SECONDS, SimulatedCluster, _Run


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
