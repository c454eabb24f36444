"""Documented, deterministic orderings as plain sort keys.

* Queue order (Kueue ``pkg/cache/queue/cluster_queue.go`` ``baseCompareFunc``).
* Preemption candidate order (``pkg/scheduler/preemption/common/ordering.go``).
* Classical entry order within a cycle (``pkg/scheduler/scheduler.go``
  ``makeClassicalIterator``).

Each key is a tuple whose ascending order is the order Kueue processes things in; the
criteria appear in the tuple in the order the docstring lists them. Kueue breaks final
ties by UID; the workload key is appended so equal UIDs still order deterministically.
"""

from __future__ import annotations

from scheduling.core.types import QueueingStrategy, RequeuingTimestamp, Workload
from scheduling.core.workloads import WorkloadInfo

__all__ = [
    "EVICTED_BY_ADMISSION_CHECK",
    "EVICTED_BY_PODS_READY_TIMEOUT",
    "EVICTED_BY_PREEMPTION",
    "QUEUE_ORDER",
    "candidate_sort_key",
    "entry_sort_key",
    "queue_order_key",
    "queue_order_timestamp",
]

EVICTED_BY_PREEMPTION = "Preempted"
EVICTED_BY_PODS_READY_TIMEOUT = "PodsReadyTimeout"
EVICTED_BY_ADMISSION_CHECK = "AdmissionCheck"


def queue_order_timestamp(
    workload: Workload, requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION
) -> float:
    """The time a workload queues by (``Ordering.GetQueueOrderTimestamp``).

    A workload evicted for a PodsReady timeout (when the requeuing strategy uses the
    eviction time) or by an admission check queues from its eviction, so it goes to the
    back of its priority level; everything else queues from its creation.
    """
    if workload.evicted_time is not None:
        if (
            requeuing_timestamp is RequeuingTimestamp.EVICTION
            and workload.evicted_reason == EVICTED_BY_PODS_READY_TIMEOUT
        ):
            return workload.evicted_time
        if workload.evicted_reason == EVICTED_BY_ADMISSION_CHECK:
            return workload.evicted_time
    return workload.creation_time


# The queue order's criteria, most significant first, each with whether it sorts
# descending: what ``queue_order_key`` computes, for the callers that sort rows in the
# database (``scheduling.queue_order`` maps each criterion to its column).
QUEUE_ORDER: tuple[tuple[str, bool], ...] = (
    ("sticky_preemptor", True),
    ("priority", True),
    ("queue_order_timestamp", False),
    ("uid", False),
)


def queue_order_key(
    workload: Workload,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    *,
    sticky_preemptor: bool = False,
    requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION,
) -> tuple[int, int, float, str, str]:
    """Position in a ClusterQueue's heap, smallest first.

    1. (BestEffortFIFO) the queue's sticky preemptor, waiting for its victims, first;
    2. higher effective priority first;
    3. earlier queue-order timestamp first;
    4. UID, then key.
    """
    sticky = sticky_preemptor and strategy is QueueingStrategy.BEST_EFFORT_FIFO
    return (
        0 if sticky else 1,
        -workload.priority,
        queue_order_timestamp(workload, requeuing_timestamp),
        workload.uid,
        workload.key,
    )


def candidate_sort_key(
    info: WorkloadInfo, *, preemptor_cq: str, now: float
) -> tuple[int, int, int, float, str, str]:
    """Preemption candidates, the first ones preempted first.

    1. workloads already evicted first (their quota is being released anyway);
    2. workloads of other ClusterQueues before the preemptor's own;
    3. lower priority first;
    4. more recently admitted (quota reserved) first, a missing time counting as ``now``;
    5. UID, then key.
    """
    wl = info.workload
    reserved = wl.quota_reserved_time if wl.quota_reserved_time is not None else now
    return (
        0 if wl.is_evicted else 1,
        1 if info.cluster_queue == preemptor_cq else 0,
        info.priority,
        -reserved,
        wl.uid,
        info.key,
    )


def entry_sort_key(
    workload: Workload,
    borrowing_level: int,
    requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION,
) -> tuple[int, int, float, str, str]:
    """Order of nominated heads in a classical (non fair-sharing) cycle.

    1. lower borrowing level first (0 = fits in the queue's own nominal quota);
    2. higher priority first (PrioritySortingWithinCohort);
    3. earlier queue-order timestamp first;
    4. UID, then key (Kueue leaves full ties unordered).
    """
    return (
        borrowing_level,
        -workload.priority,
        queue_order_timestamp(workload, requeuing_timestamp),
        workload.uid,
        workload.key,
    )
