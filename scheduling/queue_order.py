"""Kueue's queue order of a cluster queue's pending workloads, on rows.

The order is defined once, in the engine (``core.ordering.QUEUE_ORDER`` and
``queue_order_key``: the sticky preemptor, higher priority, the earlier queue-order
timestamp, UID). Here each criterion is a ``Workload`` column, and this module gives it
in the three forms the database side needs: the index and ORM ordering
(``QUEUE_ORDER_EXPRESSIONS``), raw SQL (``queue_order_sql``) and sort keys for rows read
in Python (``row_order_key``, ``tuple_order_key``). Head selection (``admission.select_heads``), the pending
lists (``visibility``) and the heap index (``models.Workload``) all use them.

The queue-order timestamp is stored: ``queued_at`` is the creation time, or the
eviction time where Kueue's ``requeuingTimestamp`` makes it so (``admission.release_quota``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db.models import F, OrderBy

from scheduling.core.ordering import QUEUE_ORDER

__all__ = [
    "QUEUE_ORDER_COLUMNS",
    "QUEUE_ORDER_EXPRESSIONS",
    "queue_order_sql",
    "row_order_key",
    "tuple_order_key",
]

_COLUMN = {
    "sticky_preemptor": "preempting",
    "priority": "priority",
    "queue_order_timestamp": "queued_at",
    "uid": "uid",
}

# (column, descending), most significant first.
QUEUE_ORDER_COLUMNS: tuple[tuple[str, bool], ...] = tuple(
    (_COLUMN[criterion], descending) for criterion, descending in QUEUE_ORDER)

# For ``order_by`` and the heap index (an ascending column stays a bare ``F``, as the index
# was declared).
QUEUE_ORDER_EXPRESSIONS: tuple[F | OrderBy, ...] = tuple(
    F(column).desc() if descending else F(column) for column, descending in QUEUE_ORDER_COLUMNS)


# The order the Python sort keys below spell out; a change to the order must change them.
_SPELLED_OUT = (("preempting", True), ("priority", True), ("queued_at", False), ("uid", False))
if QUEUE_ORDER_COLUMNS != _SPELLED_OUT:
    raise ImportError("scheduling.queue_order: the sort keys no longer spell out QUEUE_ORDER")


def queue_order_sql(alias: str, *, after: str | None = None) -> str:
    """The ORDER BY list for table ``alias``; ``after`` a column: only the criteria that
    follow it (the order among rows equal up to that column, such as one shape's rows)."""
    columns = list(QUEUE_ORDER_COLUMNS)
    if after is not None:
        columns = columns[[c for c, _ in columns].index(after) + 1:]
    return ", ".join(f"{alias}.{column} {'DESC' if descending else 'ASC'}"
                     for column, descending in columns)


def tuple_order_key(columns: Sequence[str], *, group: str | None = None,
                    ) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """A sort key, in queue order, for rows read as tuples of ``columns`` (which hold the
    order's columns and ``created_at``: a row without ``queued_at`` queues by it); with
    ``group``, rows sort by that column first (each cluster queue's rows in queue order).

    The key spells the order out, as head selection sorts thousands of keys per cycle and
    a loop over the criteria cost three times as much (``_SPELLED_OUT`` keeps the two
    together)."""
    preempting, priority, queued_at, uid, created_at = (
        columns.index(c) for c in ("preempting", "priority", "queued_at", "uid", "created_at"))
    if group is not None:
        first = columns.index(group)

        def grouped(row: Sequence[Any]) -> tuple[Any, ...]:
            return (row[first], not row[preempting], -row[priority],
                    row[queued_at] or row[created_at], str(row[uid]))

        return grouped

    def key(row: Sequence[Any]) -> tuple[Any, ...]:
        return (not row[preempting], -row[priority], row[queued_at] or row[created_at],
                str(row[uid]))

    return key


def row_order_key(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """Sort key of a values() row in queue order (spelled out as ``tuple_order_key``)."""
    return (not row["preempting"], -row["priority"], row["queued_at"] or row["created_at"],
            str(row["uid"]))
