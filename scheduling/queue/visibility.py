"""Pending workloads in queue order, with positions and why each one waits (Kueue's
visibility API, ``pkg/visibility/storage``).

The list of a cluster queue holds every pending workload queued in it — heads, queued and
parked alike — sorted as its queue sorts them (``scheduling.queue_order``). Positions come from walking the queue's (id, local
queue) pairs up to the page's end, without loading the rows before it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db.models import QuerySet

from kueueweb.pagination import MAX_OFFSET
from scheduling.choices import QueueState, StopPolicy, WorkloadPhase
from scheduling.models import ClusterQueue, LocalQueue, ParkedShape, Workload
from scheduling.queue_order import QUEUE_ORDER_EXPRESSIONS
from scheduling.workload.conditions import find, timestamp

DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


def _queue_order(cluster_queue: ClusterQueue) -> QuerySet[Workload, tuple[int, int]]:
    """(id, local queue id) of the cluster queue's pending workloads, in queue order."""
    return (
        Workload.objects.filter(
            local_queue__cluster_queue=cluster_queue,
            local_queue__stop_policy=StopPolicy.NONE,
            phase=WorkloadPhase.PENDING,
            active=True,
        )
        .order_by(*QUEUE_ORDER_EXPRESSIONS)
        .values_list("id", "local_queue_id")
    )


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
