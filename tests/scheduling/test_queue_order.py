"""The database side's queue order is the engine's (``core.ordering.queue_order_key``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from itertools import product

import pytest

from scheduling.core.ordering import queue_order_key
from scheduling.core.types import PodSet, Workload
from scheduling.models import Workload as WorkloadRow
from scheduling.queue_order import QUEUE_ORDER_EXPRESSIONS, queue_order_sql, row_order_key

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _cases() -> list[tuple[Workload, bool]]:
    """Every mix of sticky, priority, time and UID, so each criterion decides somewhere."""
    cases = []
    for index, (sticky, priority, at, uid) in enumerate(
            product((False, True), (0, 5), (1.0, 2.0), (1, 2))):
        wl = Workload("ns", f"w{index}", (PodSet("main", 1, {}),), priority=priority,
                      creation_time=at, uid=str(uuid.UUID(int=uid * 100 + index)))
        cases.append((wl, sticky))
    return cases


def _row(wl: Workload, sticky: bool) -> dict[str, object]:
    return {"preempting": sticky, "priority": wl.priority, "uid": uuid.UUID(wl.uid),
            "queued_at": EPOCH + timedelta(seconds=wl.creation_time), "created_at": EPOCH}


def test_rows_sort_as_the_engine_orders_its_heap() -> None:
    cases = _cases()
    engine = sorted(cases, key=lambda c: queue_order_key(c[0], sticky_preemptor=c[1]))
    rows = sorted(cases, key=lambda c: row_order_key(_row(*c)))
    assert [wl.key for wl, _ in rows] == [wl.key for wl, _ in engine]


def test_a_row_not_yet_given_a_queue_time_queues_by_its_creation() -> None:
    late = {"preempting": False, "priority": 0, "uid": "a", "queued_at": None,
            "created_at": EPOCH + timedelta(seconds=5)}
    early = {**late, "uid": "b", "queued_at": EPOCH}
    assert sorted([late, early], key=row_order_key) == [early, late]


def test_sql_order_lists_the_criteria_in_order() -> None:
    assert queue_order_sql("w") == "w.preempting DESC, w.priority DESC, w.queued_at ASC, w.uid ASC"
    # Within one shape (equal sticky flag and priority): time, then UID.
    assert queue_order_sql("c", after="priority") == "c.queued_at ASC, c.uid ASC"


@pytest.mark.django_db
def test_the_database_orders_as_the_engine(manager) -> None:
    cases = _cases()
    WorkloadRow.objects.bulk_create([
        WorkloadRow(cluster=manager, namespace="ns", name=wl.name, pod_sets=[],
                    priority=wl.priority, preempting=sticky, uid=uuid.UUID(wl.uid),
                    queued_at=EPOCH + timedelta(seconds=wl.creation_time))
        for wl, sticky in cases])
    engine = sorted(cases, key=lambda c: queue_order_key(c[0], sticky_preemptor=c[1]))
    ordered = WorkloadRow.objects.filter(cluster=manager).order_by(*QUEUE_ORDER_EXPRESSIONS)
    assert list(ordered.values_list("name", flat=True)) == [wl.name for wl, _ in engine]
