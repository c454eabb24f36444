"""Pending workloads per cluster queue (Kueue ``pkg/cache/queue``), without any I/O.

Each cluster queue keeps an *active* heap in queue order and an *inadmissible* map of
parked workloads. A cycle pops one head per active queue; heads that are not admitted
come back through ``requeue``: StrictFIFO keeps its head, BestEffortFIFO parks it (and
every queued workload with the same scheduling shape) so the next one gets a turn,
until something frees capacity in its cohort tree and ``queue_inadmissible_workloads``
brings them back. All operations cost O(log n) per workload touched; nothing scans the
whole backlog, so a cycle's cost depends on the number of queues, not of pending work.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduling.core.cycle import CycleResult, Head, HeadResult, RequeueReason, requeue_immediately
from scheduling.core.ordering import queue_order_key
from scheduling.core.types import (
    ClusterQueueSpec,
    LabelSelector,
    QueueingStrategy,
    RequeuingTimestamp,
    Workload,
)
from scheduling.core.workloads import AssignmentState, scheduling_hash

__all__ = ["PendingWorkload", "QueueManager", "backoff_expired"]


def backoff_expired(workload: Workload, now: float) -> bool:
    """Requeued is not False and ``requeue_at`` (if any) has passed (``backoffWaitingTimeExpired``)."""
    if workload.requeued is False:
        return False
    return workload.requeue_at is None or now >= workload.requeue_at


@dataclass(slots=True)
class PendingWorkload:
    """A queued workload and the flavor-scan progress it carries."""

    workload: Workload
    hash: str
    last_assignment: AssignmentState | None = None

    @property
    def key(self) -> str:
        """The workload's ``namespace/name``."""
        return self.workload.key


_HeapKey = tuple[int, int, float, str, str]


class _ClusterQueueQueue:
    # One ClusterQueue's pending workloads (cluster_queue.go + pending_workloads.go).
    __slots__ = (
        "active",
        "active_by_hash",
        "bulk_hashes",
        "cohort",
        "counter",
        "heap",
        "inactive_reason",
        "inadmissible",
        "inflight",
        "name",
        "namespace_selector",
        "pop_cycle",
        "preemptor",
        "queue_inadmissible_cycle",
        "strategy",
    )

    def __init__(self, spec: ClusterQueueSpec) -> None:
        self.name = spec.name
        self.strategy = spec.queueing_strategy
        self.namespace_selector: LabelSelector | None = spec.namespace_selector
        self.cohort = spec.cohort
        self.inactive_reason: str | None = None
        # Lazy-deletion heap: entries whose key no longer maps to the same heap key
        # in ``active`` are skipped when popped.
        self.heap: list[tuple[_HeapKey, int, str]] = []
        self.counter = itertools.count()
        self.active: dict[str, tuple[PendingWorkload, _HeapKey]] = {}
        self.active_by_hash: dict[str, set[str]] = {}
        self.inadmissible: dict[str, PendingWorkload] = {}
        self.inflight: dict[str, PendingWorkload] = {}
        self.preemptor: str | None = None
        self.pop_cycle = 0
        self.queue_inadmissible_cycle = -1
        # Scheduling hashes parked as a bulk for NoFit / no candidates (BestEffortFIFO).
        self.bulk_hashes: dict[str, str] = {}

    def update(self, spec: ClusterQueueSpec) -> None:
        self.strategy = spec.queueing_strategy
        self.namespace_selector = spec.namespace_selector
        self.cohort = spec.cohort

    def heap_key(self, item: PendingWorkload, timestamp: RequeuingTimestamp) -> _HeapKey:
        return queue_order_key(
            item.workload,
            self.strategy,
            sticky_preemptor=item.key == self.preemptor,
            requeuing_timestamp=timestamp,
        )

    def push_active(self, item: PendingWorkload, timestamp: RequeuingTimestamp) -> bool:
        key = item.key
        heap_key = self.heap_key(item, timestamp)
        existing = self.active.get(key)
        self.active[key] = (item, heap_key)
        if existing is None:
            self.active_by_hash.setdefault(item.hash, set()).add(key)
        elif existing[0].hash != item.hash:
            self._forget_hash(existing[0].hash, key)
            self.active_by_hash.setdefault(item.hash, set()).add(key)
        if existing is None or existing[1] != heap_key:
            heapq.heappush(self.heap, (heap_key, next(self.counter), key))
        return existing is None

    def _forget_hash(self, h: str, key: str) -> None:
        keys = self.active_by_hash.get(h)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.active_by_hash[h]

    def remove_active(self, key: str) -> PendingWorkload | None:
        entry = self.active.pop(key, None)
        if entry is None:
            return None
        self._forget_hash(entry[0].hash, key)
        return entry[0]

    def drop_stale_entries(self) -> None:
        """Keep only the heap's live entries once stale ones dominate it.

        Parking a shape as a bulk leaves one stale entry per parked workload; popping
        skips them one O(log n) pop at a time, every cycle they stay at the top. The
        filter costs O(heap) and gives the same pop order: heap keys end with the
        workload key, so each workload has one place in the order whichever of its
        entries is kept. The kept entries are reused, not rebuilt, so a rebuild leaves
        no new long-lived objects for the garbage collector.
        """
        active = self.active
        if len(self.heap) <= 2 * len(active) + 8:
            return
        live = []
        for entry in self.heap:
            current = active.get(entry[2])
            if current is not None and current[1] == entry[0]:
                live.append(entry)
        heapq.heapify(live)
        self.heap = live

    def park_shape(self, h: str) -> None:
        """Move every active workload with scheduling hash ``h`` to the parked ones.

        The shape's whole key set is taken at once rather than forgotten key by key:
        a parked shape can be most of a long queue.
        """
        keys = self.active_by_hash.pop(h, None)
        if not keys:
            return
        active, inadmissible = self.active, self.inadmissible
        for key in keys:
            entry = active.pop(key, None)
            if entry is not None:
                inadmissible[key] = entry[0]
        self.drop_stale_entries()

    def pop(self) -> PendingWorkload | None:
        self.pop_cycle += 1
        self.drop_stale_entries()
        while self.heap:
            heap_key, _, key = heapq.heappop(self.heap)
            entry = self.active.get(key)
            if entry is None or entry[1] != heap_key:
                continue
            item = self.remove_active(key)
            assert item is not None
            self.inflight[key] = item
            return item
        # Dropping stale entries keeps the heap from growing without bound.
        return None

    def tracked(self, key: str) -> PendingWorkload | None:
        entry = self.active.get(key)
        if entry is not None:
            return entry[0]
        return self.inadmissible.get(key) or self.inflight.get(key)

    def delete(self, key: str) -> None:
        self.inadmissible.pop(key, None)
        self.remove_active(key)
        self.inflight.pop(key, None)
        if self.preemptor == key:
            self.preemptor = None


class QueueManager:
    """Queues of every cluster queue, keyed like Kueue's queue manager.

    The caller feeds it cluster queues, cohorts (for the tree walks), local queues,
    namespace labels and workloads; ``heads`` pops one workload per active queue and
    ``apply`` (or ``requeue``) takes a cycle's decisions back.
    """

    def __init__(
        self, *, requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION
    ) -> None:
        self.requeuing_timestamp = requeuing_timestamp
        self._cqs: dict[str, _ClusterQueueQueue] = {}
        self._cohort_parent: dict[str, str | None] = {}
        self._local_queues: dict[str, str] = {}
        self._namespaces: dict[str, Mapping[str, str]] | None = None
        # Workload key -> cluster queue it is queued in.
        self._where: dict[str, str] = {}
        # Workloads of local queues whose cluster queue does not exist (yet).
        self._orphans: dict[str, dict[str, PendingWorkload]] = {}

    # --- configuration ---------------------------------------------------------------

    def add_or_update_cohort(self, name: str, parent: str | None = None) -> None:
        """Record a cohort's parent (used to find a queue's whole tree)."""
        self._cohort_parent[name] = parent

    def add_or_update_cluster_queue(
        self, spec: ClusterQueueSpec, *, inactive_reason: str | None = None
    ) -> None:
        """Add or update a queue; an inactive queue keeps its workloads but yields no head."""
        cq = self._cqs.get(spec.name)
        if cq is None:
            cq = _ClusterQueueQueue(spec)
            self._cqs[spec.name] = cq
        else:
            cq.update(spec)
        cq.inactive_reason = inactive_reason
        if spec.cohort and spec.cohort not in self._cohort_parent:
            self._cohort_parent[spec.cohort] = None
        for lq_key, cq_name in self._local_queues.items():
            if cq_name == spec.name:
                for item in self._orphans.pop(lq_key, {}).values():
                    self._push(cq, item, now=None)

    def delete_cluster_queue(self, name: str) -> None:
        """Forget a queue; its workloads wait in their local queues."""
        cq = self._cqs.pop(name, None)
        if cq is None:
            return
        items = [e[0] for e in cq.active.values()] + list(cq.inadmissible.values())
        items += list(cq.inflight.values())
        for item in items:
            self._where.pop(item.key, None)
            lq = self._lq_key(item.workload)
            self._orphans.setdefault(lq, {})[item.key] = item

    def add_or_update_local_queue(self, namespace: str, name: str, cluster_queue: str) -> None:
        """Map a local queue to its cluster queue."""
        self._local_queues[f"{namespace}/{name}"] = cluster_queue

    def set_namespaces(self, namespaces: Mapping[str, Mapping[str, str]] | None) -> None:
        """Namespace labels, for re-checking selectors when unparking (None: no check)."""
        self._namespaces = dict(namespaces) if namespaces is not None else None

    # --- workloads ---------------------------------------------------------------------

    @staticmethod
    def _lq_key(workload: Workload) -> str:
        return f"{workload.namespace}/{workload.queue_name}"

    def cluster_queue_for(self, workload: Workload) -> str | None:
        """The cluster queue a workload's local queue points at."""
        if workload.queue_name is None:
            return None
        return self._local_queues.get(self._lq_key(workload))

    def add_or_update_workload(
        self,
        workload: Workload,
        *,
        now: float | None = None,
        last_assignment: AssignmentState | None = None,
    ) -> bool:
        """Queue a pending workload (``AddOrUpdateWorkload``); False if it has no queue.

        Flavor-scan progress already tracked for the workload is kept when its shape is
        unchanged, unless ``last_assignment`` is given.
        """
        if workload.admission is not None or not workload.active:
            self.delete_workload(workload.key)
            return False
        key = workload.key
        cq_name = self.cluster_queue_for(workload)
        if cq_name is None:
            return False
        previous = self._where.get(key)
        if previous is not None and previous != cq_name:
            self.delete_workload(key)
        item = PendingWorkload(workload, scheduling_hash(workload), last_assignment)
        cq = self._cqs.get(cq_name)
        if cq is None:
            self._orphans.setdefault(self._lq_key(workload), {})[key] = item
            return False
        tracked = cq.tracked(key)
        if (
            last_assignment is None
            and tracked is not None
            and tracked.last_assignment is not None
            and tracked.hash == item.hash
        ):
            item.last_assignment = tracked.last_assignment
        self._where[key] = cq_name
        self._push(cq, item, now)
        return True

    def _push(self, cq: _ClusterQueueQueue, item: PendingWorkload, now: float | None) -> None:
        # PushOrUpdate: updates of an inflight head are ignored (its requeue handles it);
        # a parked workload stays parked unless something relevant changed.
        key = item.key
        self._where[key] = cq.name
        if key in cq.inflight:
            return
        parked = cq.inadmissible.get(key)
        if parked is not None:
            if _same_for_queueing(parked.workload, item.workload):
                cq.inadmissible[key] = item
                return
            del cq.inadmissible[key]
        in_heap = key in cq.active
        if not in_heap and now is not None and not backoff_expired(item.workload, now):
            cq.inadmissible[key] = item
            return
        if (
            cq.strategy is QueueingStrategy.BEST_EFFORT_FIFO
            and not in_heap
            and item.hash in cq.bulk_hashes
        ):
            cq.inadmissible[key] = item
            return
        cq.push_active(item, self.requeuing_timestamp)

    def delete_workload(self, key: str) -> None:
        """Forget a workload (admitted, finished, deleted or deactivated)."""
        cq_name = self._where.pop(key, None)
        if cq_name is not None:
            cq = self._cqs.get(cq_name)
            if cq is not None:
                cq.delete(key)
        for items in self._orphans.values():
            items.pop(key, None)

    # --- the cycle ----------------------------------------------------------------------

    def heads(self) -> list[Head]:
        """Pop the head of every active queue (``Manager.heads``), in queue name order."""
        out: list[Head] = []
        # Name order makes runs reproducible; Kueue's map order is arbitrary and the
        # cycle orders entries itself.
        for name in sorted(self._cqs):
            cq = self._cqs[name]
            if cq.inactive_reason is not None:
                continue
            item = cq.pop()
            if item is None:
                continue
            out.append(
                Head(
                    item.workload,
                    name,
                    item.last_assignment,
                    is_preemptor=cq.preemptor == item.key,
                )
            )
        return out

    def requeue_workload(
        self,
        workload: Workload,
        reason: RequeueReason,
        *,
        now: float,
        last_assignment: AssignmentState | None = None,
    ) -> bool:
        """Put a head that was not admitted back (``RequeueIfNotPresent``); True if queued.

        It goes back to the heap when its back-off expired and either the strategy says
        so for this reason, capacity was freed in its tree since it was popped, or its
        flavor scan has untried flavors; otherwise it is parked.
        """
        key = workload.key
        cq_name = self._where.get(key) or self.cluster_queue_for(workload)
        cq = self._cqs.get(cq_name) if cq_name is not None else None
        # Deleted, deactivated or meanwhile admitted workloads are not requeued.
        if cq is None or not workload.active or workload.admission is not None:
            return False
        self._where[key] = cq.name
        item = PendingWorkload(workload, scheduling_hash(workload), last_assignment)
        # A head waiting for its victims becomes the queue's preemptor; under
        # BestEffortFIFO it sorts first until admitted (no one overtakes it).
        if reason is RequeueReason.PENDING_PREEMPTION:
            cq.preemptor = key
        cq.inflight.pop(key, None)
        immediate = requeue_immediately(cq.strategy, reason)
        pending_flavors = last_assignment is not None and last_assignment.pending_flavors()
        if backoff_expired(workload, now) and (
            immediate or cq.queue_inadmissible_cycle >= cq.pop_cycle or pending_flavors
        ):
            if key in cq.inadmissible:
                del cq.inadmissible[key]
            elif key in cq.active:
                return False
            return cq.push_active(item, self.requeuing_timestamp)
        if key in cq.inadmissible or key in cq.active:
            return False
        cq.inadmissible[key] = item
        if cq.strategy is QueueingStrategy.BEST_EFFORT_FIFO and reason in (
            RequeueReason.NO_FIT,
            RequeueReason.PREEMPTION_NO_CANDIDATES,
        ):
            # Workloads of the same shape would fail the same way: park them together.
            cq.bulk_hashes[item.hash] = str(reason)
            cq.park_shape(item.hash)
        return True

    def requeue(self, result: HeadResult, *, now: float) -> bool:
        """Requeue a head from a cycle result with its reason and scan progress."""
        return self.requeue_workload(
            result.workload, result.requeue_reason, now=now, last_assignment=result.last_assignment
        )

    def apply(self, result: CycleResult, *, now: float) -> None:
        """Take a cycle back: admitted heads leave the queues, the others are requeued."""
        for head in result.results:
            if head.admitted:
                self.delete_workload(head.key)
            else:
                self.requeue(head, now=now)

    def queue_inadmissible_workloads(self, cluster_queues: Iterable[str], *, now: float) -> int:
        """Unpark workloads after capacity may have freed (``QueueInadmissibleWorkloads``).

        For a queue in a cohort the whole tree from its root is processed. Workloads
        whose namespace no longer matches or whose back-off has not expired stay parked.
        """
        targets: set[str] = set()
        roots: set[str] = set()
        for name in cluster_queues:
            cq = self._cqs.get(name)
            if cq is None:
                continue
            if cq.cohort is None:
                targets.add(name)
            else:
                root = self._root_of(cq.cohort)
                if root is not None:
                    roots.add(root)
        if roots:
            for name, cq in self._cqs.items():
                if cq.cohort is not None and self._root_of(cq.cohort) in roots:
                    targets.add(name)
        moved = 0
        for name in sorted(targets):
            moved += self._unpark(self._cqs[name], now)
        return moved

    def _root_of(self, cohort: str) -> str | None:
        seen: set[str] = set()
        name = cohort
        while True:
            if name in seen:
                return None
            seen.add(name)
            parent = self._cohort_parent.get(name)
            if parent is None:
                return name
            name = parent

    def _unpark(self, cq: _ClusterQueueQueue, now: float) -> int:
        # Heads popped before this point and requeued after it go back to the heap
        # (requeue_workload compares the two counters), and shapes parked as a bulk
        # get a fresh chance.
        cq.queue_inadmissible_cycle = cq.pop_cycle
        cq.bulk_hashes.clear()
        moved = 0
        for key, item in list(cq.inadmissible.items()):
            labels = self._namespace_labels(item.workload.namespace)
            selector = cq.namespace_selector
            if labels is None or selector is None or not selector.matches(labels):
                continue
            if not backoff_expired(item.workload, now):
                continue
            del cq.inadmissible[key]
            cq.push_active(item, self.requeuing_timestamp)
            moved += 1
        return moved

    def _namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        if self._namespaces is None:
            return {"kubernetes.io/metadata.name": namespace}
        return self._namespaces.get(namespace)

    # --- visibility ---------------------------------------------------------------------

    def pending_counts(self, cluster_queue: str) -> tuple[int, int]:
        """(active, inadmissible) pending workloads of a queue, inflight heads counted active."""
        cq = self._cqs.get(cluster_queue)
        if cq is None:
            return 0, 0
        return len(cq.active) + len(cq.inflight), len(cq.inadmissible)

    def pending_workloads(self, cluster_queue: str) -> list[PendingWorkload]:
        """Every pending workload of a queue in queue order (the visibility API's list)."""
        cq = self._cqs.get(cluster_queue)
        if cq is None:
            return []
        items = [e[0] for e in cq.active.values()]
        items += list(cq.inadmissible.values()) + list(cq.inflight.values())
        items.sort(key=lambda it: cq.heap_key(it, self.requeuing_timestamp))
        return items

    def is_parked(self, key: str) -> bool:
        """Whether a workload sits in its queue's inadmissible set."""
        cq_name = self._where.get(key)
        cq = self._cqs.get(cq_name) if cq_name is not None else None
        return cq is not None and key in cq.inadmissible

    def tracked_workload(self, key: str) -> PendingWorkload | None:
        """The queued entry of a workload, wherever it sits."""
        cq_name = self._where.get(key)
        cq = self._cqs.get(cq_name) if cq_name is not None else None
        return cq.tracked(key) if cq is not None else None

    def state(self) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
        """A comparable summary of what is queued where (active, parked), for tests/loops."""
        out = []
        for name in sorted(self._cqs):
            cq = self._cqs[name]
            active = sorted(
                [f"{k}@{_scan(e[0].last_assignment)}" for k, e in cq.active.items()]
                + [f"{k}@{_scan(it.last_assignment)}" for k, it in cq.inflight.items()]
            )
            out.append((name, tuple(active), tuple(sorted(cq.inadmissible))))
        return tuple(out)


def _scan(state: AssignmentState | None) -> str:
    if state is None:
        return "-"
    return repr([sorted(m.items()) for m in state.last_tried_flavor_idx])


def _same_for_queueing(old: Workload, new: Workload) -> bool:
    # The fields whose change takes a parked workload out of the inadmissible set.
    return (
        old.pod_sets == new.pod_sets
        and old.priority == new.priority
        and old.queue_name == new.queue_name
        and old.evicted_reason == new.evicted_reason
        and old.evicted_time == new.evicted_time
        and old.requeued == new.requeued
        and old.requeue_at == new.requeue_at
        and old.active == new.active
    )
