"""Sort keys: queue order, preemption candidates, cycle entries."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core import (
    QueueingStrategy,
    candidate_sort_key,
    entry_sort_key,
    queue_order_key,
    queue_order_timestamp,
)
from scheduling.core.workloads import WorkloadInfo
from tests.builders import admitted, workload


def test_queue_order_is_priority_then_time_then_uid() -> None:
    early_low = workload("a", priority=0, created=1)
    late_high = workload("b", priority=5, created=9)
    early_high = workload("c", priority=5, created=2)
    same_time = workload("d", priority=5, created=2)
    ordered = sorted([early_low, late_high, early_high, same_time], key=queue_order_key)
    assert [w.name for w in ordered] == ["c", "d", "b", "a"]


def test_sticky_preemptor_goes_first_only_with_best_effort_fifo() -> None:
    wl = workload("p", priority=-10)
    assert queue_order_key(wl, sticky_preemptor=True)[0] == 0
    assert queue_order_key(wl, QueueingStrategy.STRICT_FIFO, sticky_preemptor=True)[0] == 1


def test_pods_ready_timeout_requeues_by_eviction_time() -> None:
    wl = replace(workload("w", created=1), evicted_reason="PodsReadyTimeout", evicted_time=50.0)
    assert queue_order_timestamp(wl) == 50.0
    preempted = replace(wl, evicted_reason="Preempted")
    assert queue_order_timestamp(preempted) == 1


def test_candidates_evicted_then_other_queues_then_low_priority_then_recent() -> None:
    def info(name: str, cq: str, **kw: object) -> WorkloadInfo:
        return WorkloadInfo(admitted(name, cq, cpu="1", **kw))  # type: ignore[arg-type]

    candidates = [
        info("own-low", "mine", priority=-5),
        info("other-high", "theirs", priority=5),
        info("other-low-old", "theirs", priority=-5, admitted_at=1.0),
        info("other-low-new", "theirs", priority=-5, admitted_at=9.0),
        info("own-evicted", "mine", priority=9, evicted="Preempted"),
    ]
    ordered = sorted(
        candidates, key=lambda c: candidate_sort_key(c, preemptor_cq="mine", now=100.0)
    )
    assert [c.workload.name for c in ordered] == [
        "own-evicted",
        "other-low-new",
        "other-low-old",
        "other-high",
        "own-low",
    ]


def test_entries_not_borrowing_come_first() -> None:
    borrowing_high = entry_sort_key(workload("a", priority=100), 1)
    nominal_low = entry_sort_key(workload("b", priority=0), 0)
    assert nominal_low < borrowing_high
