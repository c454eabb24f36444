"""Small benchmark shapes for the tests: one cohort, one cluster queue, one workload set."""

from __future__ import annotations

from typing import Any

from tools.bench.shape import Shape, read_shape


def one_queue_shape(
    count: int,
    *,
    interval_ms: int = 100,
    runtime_ms: int = 1000,
    nominal: int = 1,
    name: str = "t",
    lower_bound_wall_ms: int | None = None,
) -> Shape:
    """``count`` small workloads of 1 cpu, one every ``interval_ms`` (the first one interval
    after the start), in a cluster queue of ``nominal`` cpu."""
    queues_set = {
        "className": "cq",
        "count": 1,
        "nominalQuota": nominal,
        "workloadsSets": [
            {
                "count": count,
                "creationIntervalMs": interval_ms,
                "workloads": [{"className": "small", "runtimeMs": runtime_ms, "request": 1}],
            }
        ],
    }
    doc: dict[str, Any] = {
        "name": name,
        "cohorts": [{"className": "cohort", "count": 1, "queuesSets": [queues_set]}],
    }
    if lower_bound_wall_ms is not None:
        doc["lowerBoundWallMs"] = lower_bound_wall_ms
    return read_shape(doc)
