"""The queue manager: heads, StrictFIFO vs BestEffortFIFO, parking and unparking."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduling.core import (
    AssignmentState,
    LabelSelector,
    LabelSelectorRequirement,
    QueueingStrategy,
    QueueManager,
    RequeueReason,
    SelectorOperator,
)
from tests.builders import cluster_queue, workload

BEST = QueueingStrategy.BEST_EFFORT_FIFO
STRICT = QueueingStrategy.STRICT_FIFO


def _manager(*strategies: tuple[str, QueueingStrategy, str | None]) -> QueueManager:
    qm = QueueManager()
    for name, strategy, cohort_name in strategies:
        qm.add_or_update_cluster_queue(
            cluster_queue(
                name, quotas={"default": {"cpu": "1"}}, cohort=cohort_name, strategy=strategy
            )
        )
        qm.add_or_update_local_queue("default", f"lq-{name}", name)
        if cohort_name:
            qm.add_or_update_cohort(cohort_name)
    return qm


def _heads(qm: QueueManager) -> list[str]:
    return [h.workload.name for h in qm.heads()]


def test_heads_are_one_per_queue_in_queue_order() -> None:
    qm = _manager(("a", BEST, None), ("b", BEST, None))
    qm.add_or_update_workload(workload("a-old", queue="lq-a", created=1, cpu="1"), now=0)
    qm.add_or_update_workload(
        workload("a-urgent", queue="lq-a", priority=9, created=5, cpu="1"), now=0
    )
    qm.add_or_update_workload(workload("b-only", queue="lq-b", cpu="1"), now=0)
    assert _heads(qm) == ["a-urgent", "b-only"]
    # popped heads are in flight: nothing else comes until they are requeued
    assert _heads(qm) == ["a-old"]
    assert qm.pending_counts("a") == (2, 0)


def test_inactive_queue_yields_no_head() -> None:
    qm = QueueManager()
    qm.add_or_update_cluster_queue(
        cluster_queue("held", quotas={"default": {"cpu": "1"}}), inactive_reason="Stopped"
    )
    qm.add_or_update_local_queue("default", "lq", "held")
    qm.add_or_update_workload(workload("w", cpu="1"), now=0)
    assert qm.heads() == []
    assert qm.pending_counts("held") == (1, 0)


@pytest.mark.parametrize(
    ("strategy", "reason", "want_next_head", "want_parked"),
    [
        pytest.param(BEST, RequeueReason.NO_FIT, "second", True, id="best-effort-parks-no-fit"),
        pytest.param(
            BEST,
            RequeueReason.PREEMPTION_NO_CANDIDATES,
            "second",
            True,
            id="best-effort-parks-no-candidates",
        ),
        pytest.param(
            BEST,
            RequeueReason.FAILED_AFTER_NOMINATION,
            "first",
            False,
            id="best-effort-keeps-skipped-head",
        ),
        pytest.param(
            BEST, RequeueReason.PENDING_PREEMPTION, "first", False, id="best-effort-keeps-preemptor"
        ),
        pytest.param(STRICT, RequeueReason.NO_FIT, "first", False, id="strict-keeps-its-head"),
        pytest.param(
            STRICT,
            RequeueReason.NAMESPACE_MISMATCH,
            "second",
            True,
            id="strict-parks-namespace-mismatch",
        ),
    ],
)
def test_requeue_by_strategy_and_reason(
    strategy: QueueingStrategy, reason: RequeueReason, want_next_head: str, want_parked: bool
) -> None:
    qm = _manager(("q", strategy, None))
    first = workload("first", queue="lq-q", created=1, cpu="2")
    qm.add_or_update_workload(first, now=0)
    qm.add_or_update_workload(workload("second", queue="lq-q", created=2, cpu="1"), now=0)
    [head] = qm.heads()
    qm.requeue_workload(head.workload, reason, now=0)
    assert _heads(qm) == [want_next_head]
    assert qm.is_parked("default/first") is want_parked


def test_same_shape_workloads_are_parked_together() -> None:
    qm = _manager(("q", BEST, None))
    for i in range(3):
        qm.add_or_update_workload(workload(f"big-{i}", queue="lq-q", created=i, cpu="4"), now=0)
    qm.add_or_update_workload(workload("small", queue="lq-q", created=9, cpu="1"), now=0)
    [head] = qm.heads()
    qm.requeue_workload(head.workload, RequeueReason.NO_FIT, now=0)
    # the two other identical workloads are parked without being tried
    assert _heads(qm) == ["small"]
    assert qm.pending_counts("q") == (1, 3)
    # a newly arriving workload of the same shape is parked straight away
    qm.add_or_update_workload(workload("big-late", queue="lq-q", created=10, cpu="4"), now=0)
    assert qm.is_parked("default/big-late") is True


def test_capacity_freed_anywhere_in_the_tree_unparks_every_queue() -> None:
    qm = _manager(("a", BEST, "child"), ("b", BEST, "root"), ("solo", BEST, None))
    qm.add_or_update_cohort("child", "root")
    for q in ("a", "solo"):
        qm.add_or_update_workload(workload(f"w-{q}", queue=f"lq-{q}", cpu="1"), now=0)
    for head in qm.heads():
        qm.requeue_workload(head.workload, RequeueReason.NO_FIT, now=0)
    assert qm.heads() == []
    # a workload left queue b, which shares the root with a
    moved = qm.queue_inadmissible_workloads(["b"], now=0)
    assert moved == 1
    assert _heads(qm) == ["w-a"]
    assert qm.is_parked("default/w-solo") is True


def test_unparked_during_the_cycle_goes_straight_back() -> None:
    qm = _manager(("q", BEST, None))
    qm.add_or_update_workload(workload("w", queue="lq-q", cpu="1"), now=0)
    [head] = qm.heads()
    # capacity was freed while the head was being scheduled
    qm.queue_inadmissible_workloads(["q"], now=0)
    qm.requeue_workload(head.workload, RequeueReason.NO_FIT, now=0)
    assert qm.is_parked("default/w") is False


def test_untried_flavors_keep_the_workload_active() -> None:
    qm = _manager(("q", BEST, None))
    qm.add_or_update_workload(workload("w", queue="lq-q", cpu="1"), now=0)
    [head] = qm.heads()
    progress = AssignmentState(({"cpu": 0},), 0, 1, "hash")
    qm.requeue_workload(head.workload, RequeueReason.NO_FIT, now=0, last_assignment=progress)
    [again] = qm.heads()
    assert again.last_assignment == progress


def test_sticky_preemptor_stays_ahead_of_higher_priority() -> None:
    qm = _manager(("q", BEST, None))
    qm.add_or_update_workload(workload("preemptor", queue="lq-q", priority=0, cpu="1"), now=0)
    [head] = qm.heads()
    qm.requeue_workload(head.workload, RequeueReason.PENDING_PREEMPTION, now=0)
    qm.add_or_update_workload(workload("vip", queue="lq-q", priority=100, cpu="1"), now=0)
    [next_head] = qm.heads()
    assert next_head.workload.name == "preemptor"
    assert next_head.is_preemptor is True


def test_backoff_keeps_workloads_parked_until_it_expires() -> None:
    qm = _manager(("q", BEST, None))
    waiting = replace(workload("w", queue="lq-q", cpu="1"), requeue_at=60.0)
    qm.add_or_update_workload(waiting, now=0)
    assert qm.heads() == []
    assert qm.queue_inadmissible_workloads(["q"], now=30) == 0
    assert qm.queue_inadmissible_workloads(["q"], now=60) == 1
    assert _heads(qm) == ["w"]


def test_unparking_rechecks_the_namespace_selector() -> None:
    qm = QueueManager()
    selector = LabelSelector(
        match_expressions=(LabelSelectorRequirement("dep", SelectorOperator.IN, ("eng",)),)
    )
    qm.add_or_update_cluster_queue(
        replace(cluster_queue("q", quotas={"default": {"cpu": "1"}}), namespace_selector=selector)
    )
    qm.add_or_update_local_queue("sales", "lq", "q")
    qm.set_namespaces({"sales": {"dep": "sales"}})
    qm.add_or_update_workload(workload("w", namespace="sales", cpu="1"), now=0)
    [head] = qm.heads()
    qm.requeue_workload(head.workload, RequeueReason.NAMESPACE_MISMATCH, now=0)
    assert qm.queue_inadmissible_workloads(["q"], now=0) == 0
    qm.set_namespaces({"sales": {"dep": "eng"}})
    assert qm.queue_inadmissible_workloads(["q"], now=0) == 1


def test_workloads_wait_for_their_cluster_queue() -> None:
    qm = QueueManager()
    qm.add_or_update_local_queue("default", "lq", "later")
    assert qm.add_or_update_workload(workload("w", cpu="1"), now=0) is False
    qm.add_or_update_cluster_queue(cluster_queue("later", quotas={"default": {"cpu": "1"}}))
    assert _heads(qm) == ["w"]


def test_admitted_workloads_leave_the_queue() -> None:
    qm = _manager(("q", BEST, None))
    qm.add_or_update_workload(workload("w", queue="lq-q", cpu="1"), now=0)
    qm.heads()
    qm.delete_workload("default/w")
    assert qm.pending_counts("q") == (0, 0)
    assert qm.tracked_workload("default/w") is None


def test_visibility_lists_everything_in_queue_order() -> None:
    qm = _manager(("q", BEST, None))
    qm.add_or_update_workload(workload("low", queue="lq-q", priority=0, cpu="1"), now=0)
    qm.add_or_update_workload(workload("high", queue="lq-q", priority=5, cpu="1"), now=0)
    [head] = qm.heads()
    qm.requeue_workload(head.workload, RequeueReason.NO_FIT, now=0)
    assert [p.workload.name for p in qm.pending_workloads("q")] == ["high", "low"]


def test_parking_a_shape_drops_its_heap_entries_and_keeps_the_order() -> None:
    qm = _manager(("q", BEST, None))
    for i in range(30):
        qm.add_or_update_workload(workload(f"big-{i}", queue="lq-q", created=i, cpu="4"), now=0)
    for i, priority in enumerate((1, 3, 2)):
        qm.add_or_update_workload(
            workload(f"small-{i}", queue="lq-q", priority=priority, created=50 + i, cpu="1"),
            now=0,
        )
    # Same priority for the big ones; the smalls' priorities put them first.
    order = []
    for _ in range(3):
        [head] = qm.heads()
        order.append(head.workload.name)
        qm.requeue_workload(head.workload, RequeueReason.PENDING_PREEMPTION, now=0)
        qm.delete_workload(head.workload.key)
    assert order == ["small-1", "small-2", "small-0"]
    [head] = qm.heads()
    qm.requeue_workload(head.workload, RequeueReason.NO_FIT, now=0)
    assert qm.pending_counts("q") == (0, 30)
    # The parked shape's entries no longer sit in the heap.
    assert len(qm._cqs["q"].heap) <= 8
    assert qm.heads() == []
    qm.queue_inadmissible_workloads(["q"], now=0)
    names = []
    while heads := qm.heads():
        names.append(heads[0].workload.name)
        qm.delete_workload(heads[0].workload.key)
    assert names == [f"big-{i}" for i in range(30)]
