"""Pending workloads in queue order, with positions and why each one waits (Kueue's
visibility API, ``pkg/visibility/storage``).

The list of a cluster queue holds every pending workload queued in it — heads, queued and
parked alike — sorted as its queue sorts them (``scheduling.queue_order``). Positions come from walking the queue's (id, local
queue) pairs up to the page's end, without loading the rows before it.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from functools import reduce
from typing import Any, NamedTuple

from django.db.models import Count, Q, QuerySet

from kueueweb.pagination import MAX_OFFSET
from scheduling.choices import QueueState, StopPolicy, WorkloadPhase
from scheduling.models import ClusterQueue, LocalQueue, ParkedShape, Workload
from scheduling.queue_order import QUEUE_ORDER_COLUMNS, QUEUE_ORDER_EXPRESSIONS
from scheduling.workload.conditions import find, timestamp

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


def _pending_of(cluster_queue_id: int) -> QuerySet[Workload]:
    """The workloads queued in a cluster queue: pending, active, through a running
    LocalQueue."""
    return Workload.objects.filter(
        local_queue__cluster_queue_id=cluster_queue_id,
        local_queue__stop_policy=StopPolicy.NONE,
        phase=WorkloadPhase.PENDING,
        active=True,
    )


def _queue_order(cluster_queue: ClusterQueue) -> QuerySet[Workload, tuple[int, int]]:
    """(id, local queue id) of the cluster queue's pending workloads, in queue order."""
    return (_pending_of(cluster_queue.pk).order_by(*QUEUE_ORDER_EXPRESSIONS)
            .values_list("id", "local_queue_id"))


# What ``_item`` and ``why_pending`` read.
_ITEM_FIELDS = ("name", "namespace", "created_at", "priority", "conditions", "queue_state",
                "preempting", "pod_sets_hash", "queue_name", "local_queue__name", "job__name",
                "job__uid", "job__api_version", "job__kind")


def _load(positions: dict[int, tuple[int, int]]) -> list[Workload]:
    """The rows of a page, in the order of their positions, with only the columns an item
    shows (a row's other JSON columns and its job's manifest are most of its size)."""
    rows = (Workload.objects.filter(pk__in=positions).select_related("local_queue", "job")
            .only(*_ITEM_FIELDS))
    page = sorted(rows, key=lambda w: positions[w.pk])
    for wl in page:
        wl.position_in_cluster_queue, wl.position_in_local_queue = positions[wl.pk]  # type: ignore[attr-defined]
    return page


def clamp(offset: int, limit: int) -> tuple[int, int]:
    # An offset past any queue's end reads an empty page, however large it was asked.
    return min(max(offset, 0), MAX_OFFSET), min(max(limit, 0), MAX_LIMIT)


def pending_in_cluster_queue(
    cluster_queue: ClusterQueue, *, offset: int = 0, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    """Positions come from walking (id, local queue) pairs in queue order up to the page's
    end; only the page's rows are loaded whole."""
    offset, limit = clamp(offset, limit)
    positions: dict[int, tuple[int, int]] = {}
    seen_in_queue: dict[int, int] = defaultdict(int)
    order = _queue_order(cluster_queue)[:offset + limit]
    for position, (pk, lq_id) in enumerate(order.iterator(chunk_size=5000)):
        seen_in_queue[lq_id] += 1
        if position >= offset:
            positions[pk] = (position + 1, seen_in_queue[lq_id])
    parked = parked_shapes(cluster_queue)
    return [_item(wl, cluster_queue, parked) for wl in _load(positions)]


def pending_in_local_queue(
    local_queue: LocalQueue, *, offset: int = 0, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    """Kueue walks the cluster queue's list and keeps this queue's items; so do we, over
    (id, local queue) pairs only and up to the page's end, then load the page's rows."""
    offset, limit = clamp(offset, limit)
    cq = local_queue.cluster_queue
    positions: dict[int, tuple[int, int]] = {}
    seen_in_queue = 0
    for position, (pk, lq_id) in enumerate(_queue_order(cq).iterator(chunk_size=5000)):
        if lq_id != local_queue.pk:
            continue
        if seen_in_queue >= offset + limit:
            break
        if offset <= seen_in_queue:
            positions[pk] = (position + 1, seen_in_queue + 1)
        seen_in_queue += 1
    parked = parked_shapes(cq)
    return [_item(wl, cq, parked) for wl in _load(positions)]


def parked_shapes(cluster_queue: ClusterQueue) -> dict[tuple[int, str], ParkedShape]:
    """The cluster queue's parked shapes by (priority, pod sets hash)."""
    return {(shape.priority, shape.pod_sets_hash): shape
            for shape in ParkedShape.objects.filter(cluster_queue=cluster_queue)}


def parked_shape_of(workload: Workload,
                    shapes: dict[tuple[int, str], ParkedShape]) -> ParkedShape | None:
    """The parked shape the workload waits behind, if any (the sticky preemptor never
    does)."""
    if workload.preempting:
        return None
    return shapes.get((workload.priority, workload.pod_sets_hash))


def why_pending(workload: Workload, cluster_queue: ClusterQueue, ahead: int,
                parked: ParkedShape | None = None) -> str:
    """A sentence an operator understands: the scheduler's own message when it has tried
    the workload, or the message of the head that parked its shape (Kueue's
    GetNoFitReason), otherwise its place in the line."""
    retried = "; it will be retried when quota frees up in its cohort"
    reserved = find(workload.conditions, "QuotaReserved")
    if reserved and reserved.get("status") == "False" and reserved.get("message"):
        message = str(reserved["message"])
        if workload.queue_state == QueueState.INADMISSIBLE or parked is not None:
            return f"{message}{retried}"
        return message
    if parked is not None:
        return f"{parked.message or parked.reason}{retried}"
    if workload.preempting:
        return "Waiting for preempted workloads to release their quota"
    if ahead == 0:
        return f"Next in ClusterQueue {cluster_queue.name}: waiting for the admission cycle"
    plural = "workload" if ahead == 1 else "workloads"
    return f"Waiting for its turn: {ahead} {plural} ahead of it in ClusterQueue {cluster_queue.name}"


def _item(wl: Workload, cluster_queue: ClusterQueue,
          shapes: dict[tuple[int, str], ParkedShape]) -> dict[str, Any]:
    position_cq = wl.position_in_cluster_queue - 1  # type: ignore[attr-defined]
    position_lq = wl.position_in_local_queue - 1  # type: ignore[attr-defined]
    metadata: dict[str, Any] = {
        "name": wl.name,
        "namespace": wl.namespace,
        "creationTimestamp": timestamp(wl.created_at),
    }
    if wl.job is not None:
        metadata["ownerReferences"] = [{
            "apiVersion": wl.job.api_version, "kind": wl.job.kind, "name": wl.job.name,
            "uid": str(wl.job.uid),
        }]
    reserved = find(wl.conditions, "QuotaReserved") or {}
    parked = parked_shape_of(wl, shapes)
    reason = reserved.get("reason") if reserved.get("status") == "False" else None
    return {
        "metadata": metadata,
        "priority": wl.priority,
        "localQueueName": wl.local_queue.name if wl.local_queue else wl.queue_name,
        "positionInClusterQueue": position_cq,
        "positionInLocalQueue": position_lq,
        # Not in Kueue's visibility API: why the workload waits.
        "reason": reason or (parked.reason if parked is not None else "Pending"),
        "message": why_pending(wl, cluster_queue, position_cq, parked),
    }


class QueuePlace(NamedTuple):
    """Where one pending workload stands: 0-based positions as the API gives them, and how
    many workloads each queue holds pending."""

    position_in_cluster_queue: int
    position_in_local_queue: int
    cluster_queue_length: int
    local_queue_length: int


def _ahead_of(wl: Workload) -> Q:
    """The rows sorting before ``wl`` in queue order (``QUEUE_ORDER_COLUMNS``), as one
    lexicographic comparison the queue-order index can serve."""
    queued_at = wl.queued_at or wl.created_at
    values = {"preempting": wl.preempting, "priority": wl.priority, "queued_at": queued_at,
              "uid": wl.uid}
    clauses = []
    equal: dict[str, Any] = {}
    for column, descending in QUEUE_ORDER_COLUMNS:
        lookup = "gt" if descending else "lt"
        clauses.append(Q(**equal, **{f"{column}__{lookup}": values[column]}))
        equal[column] = values[column]
    return reduce(operator.or_, clauses)


def workload_place(wl: Workload) -> QueuePlace | None:
    """The place of ``wl`` in its queues, counted in one query (rows ahead of it and rows in
    all, per queue) rather than walking the queue; None when it is not queued (not pending,
    deactivated, its LocalQueue missing, stopped or bound to no ClusterQueue)."""
    lq = wl.local_queue
    if (wl.phase != WorkloadPhase.PENDING or not wl.active or lq is None
            or lq.cluster_queue_id is None or lq.stop_policy != StopPolicy.NONE):
        return None
    in_lq = Q(local_queue_id=lq.pk)
    ahead = _ahead_of(wl)
    counts = _pending_of(lq.cluster_queue_id).aggregate(
        ahead_cq=Count("id", filter=ahead), ahead_lq=Count("id", filter=ahead & in_lq),
        cq=Count("id"), lq=Count("id", filter=in_lq))
    return QueuePlace(counts["ahead_cq"], counts["ahead_lq"], counts["cq"], counts["lq"])


def workload_positions(wl: Workload) -> tuple[int, int] | None:
    """(positionInClusterQueue, positionInLocalQueue) of ``wl``, 0-based as Kueue's
    visibility API gives them; None when it is not queued."""
    place = workload_place(wl)
    if place is None:
        return None
    return place.position_in_cluster_queue, place.position_in_local_queue
