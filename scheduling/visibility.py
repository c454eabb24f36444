"""Pending workloads in queue order, with positions and why each one waits (Kueue's
visibility API, ``pkg/visibility/storage``).

The list of a cluster queue holds every pending workload queued in it — heads, queued and
parked alike — sorted as its queue sorts them: the sticky preemptor, then priority, then
the queue-order timestamp, then UID. Positions come from window functions, so a page costs
one query however long the queue is.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, QuerySet, Window
from django.db.models.functions import RowNumber

from scheduling.choices import QueueState, StopPolicy, WorkloadPhase
from scheduling.conditions import find, timestamp
from scheduling.models import ClusterQueue, LocalQueue, Workload

QUEUE_ORDER = [F("preempting").desc(), F("priority").desc(), F("queued_at").asc(), F("uid").asc()]
DEFAULT_LIMIT = 1000
MAX_LIMIT = 100_000


def _pending_in(cluster_queue: ClusterQueue) -> QuerySet[Workload]:
    return (
        Workload.objects.filter(
            local_queue__cluster_queue=cluster_queue,
            local_queue__stop_policy=StopPolicy.NONE,
            phase=WorkloadPhase.PENDING,
            active=True,
        )
        .annotate(
            position_in_cluster_queue=Window(RowNumber(), order_by=QUEUE_ORDER),
            position_in_local_queue=Window(
                RowNumber(), partition_by=[F("local_queue_id")], order_by=QUEUE_ORDER
            ),
        )
        .select_related("local_queue", "job")
        .order_by(*QUEUE_ORDER)
    )


def clamp(offset: int, limit: int) -> tuple[int, int]:
    return max(offset, 0), min(max(limit, 0), MAX_LIMIT)


def pending_in_cluster_queue(
    cluster_queue: ClusterQueue, *, offset: int = 0, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    offset, limit = clamp(offset, limit)
    rows = _pending_in(cluster_queue)[offset:offset + limit]
    return [_item(wl, cluster_queue) for wl in rows]


def pending_in_local_queue(
    local_queue: LocalQueue, *, offset: int = 0, limit: int = DEFAULT_LIMIT
) -> list[dict[str, Any]]:
    """Kueue walks the cluster queue's list and keeps this queue's items; so do we, over
    (id, local queue) pairs only, then load the page's rows."""
    offset, limit = clamp(offset, limit)
    cq = local_queue.cluster_queue
    order = (
        Workload.objects.filter(
            local_queue__cluster_queue=cq, local_queue__stop_policy=StopPolicy.NONE,
            phase=WorkloadPhase.PENDING, active=True,
        )
        .order_by(*QUEUE_ORDER)
        .values_list("id", "local_queue_id")
    )
    positions: dict[int, tuple[int, int]] = {}
    seen_in_queue = 0
    for position, (pk, lq_id) in enumerate(order.iterator(chunk_size=5000)):
        if lq_id != local_queue.pk:
            continue
        if offset <= seen_in_queue < offset + limit:
            positions[pk] = (position + 1, seen_in_queue + 1)
        seen_in_queue += 1
    rows = Workload.objects.filter(pk__in=positions).select_related("local_queue", "job")
    items = []
    for wl in sorted(rows, key=lambda w: positions[w.pk]):
        wl.position_in_cluster_queue, wl.position_in_local_queue = positions[wl.pk]  # type: ignore[attr-defined]
        items.append(_item(wl, cq))
    return items


def why_pending(workload: Workload, cluster_queue: ClusterQueue, ahead: int) -> str:
    """A sentence an operator understands: the scheduler's own message when it has tried
    the workload, otherwise its place in the line."""
    reserved = find(workload.conditions, "QuotaReserved")
    if reserved and reserved.get("status") == "False" and reserved.get("message"):
        message = str(reserved["message"])
        if workload.queue_state == QueueState.INADMISSIBLE:
            return f"{message}; it will be retried when quota frees up in its cohort"
        return message
    if workload.preempting:
        return "Waiting for preempted workloads to release their quota"
    if ahead == 0:
        return f"Next in ClusterQueue {cluster_queue.name}: waiting for the admission cycle"
    plural = "workload" if ahead == 1 else "workloads"
    return f"Waiting for its turn: {ahead} {plural} ahead of it in ClusterQueue {cluster_queue.name}"


def _item(wl: Workload, cluster_queue: ClusterQueue) -> dict[str, Any]:
    position_cq = wl.position_in_cluster_queue - 1  # type: ignore[attr-defined]
    position_lq = wl.position_in_local_queue - 1  # type: ignore[attr-defined]
    metadata: dict[str, Any] = {
        "name": wl.name,
        "namespace": wl.namespace,
        "creationTimestamp": timestamp(wl.created_at),
    }
    if wl.job is not None:
        metadata["ownerReferences"] = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": wl.job.name, "uid": str(wl.job.uid),
        }]
    reserved = find(wl.conditions, "QuotaReserved") or {}
    return {
        "metadata": metadata,
        "priority": wl.priority,
        "localQueueName": wl.local_queue.name if wl.local_queue else wl.queue_name,
        "positionInClusterQueue": position_cq,
        "positionInLocalQueue": position_lq,
        # Not in Kueue's visibility API: why the workload waits.
        "reason": reserved.get("reason") if reserved.get("status") == "False" else "Pending",
        "message": why_pending(wl, cluster_queue, position_cq),
    }
