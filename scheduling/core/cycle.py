"""One admission cycle (Kueue ``pkg/scheduler/scheduler.go`` ``schedule``).

``run_cycle`` takes the snapshot and the head of every active cluster queue and decides,
for each head, whether it is admitted, issues preemptions, or waits, with the reason an
operator reads as "why pending". Side effects are left to the caller: the snapshot passed
in is mutated (usage of admissions and reservations), nothing else is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from scheduling.core.fair_sharing import DRS, compare_drs, dominant_resource_share
from scheduling.core.flavors import Assignment, AssignmentMode, FlavorAssigner
from scheduling.core.ordering import entry_sort_key, queue_order_timestamp
from scheduling.core.podset_reducer import search_partial_counts
from scheduling.core.preemption import (
    DEFAULT_FAIR_SHARING_STRATEGIES,
    Preemptor,
    Target,
    preemption_message,
)
from scheduling.core.resources import FlavorResource, FlavorResourceQuantities
from scheduling.core.snapshot import (
    ClusterQueueNode,
    CohortNode,
    QuotaNode,
    Snapshot,
    add_usage,
    available,
)
from scheduling.core.types import (
    Admission,
    ApiEnum,
    FairSharingStrategy,
    QueueingStrategy,
    ReclaimWithinCohortPolicy,
    RequeuingTimestamp,
    Workload,
)
from scheduling.core.workloads import AssignmentState, WorkloadInfo

__all__ = [
    "CyclePolicy",
    "CycleResult",
    "Decision",
    "Head",
    "HeadResult",
    "PreemptionTarget",
    "RequeueReason",
    "requeue_immediately",
    "run_cycle",
]


class RequeueReason(ApiEnum):
    """Why a head goes back to its queue (Kueue ``queue.RequeueReason``)."""

    GENERIC = ""
    FAILED_AFTER_NOMINATION = "FailedAfterNomination"
    NAMESPACE_MISMATCH = "NamespaceMismatch"
    PENDING_PREEMPTION = "PendingPreemption"
    PREEMPTION_FAILED = "PreemptionFailed"
    NO_FIT = "NoFit"
    PREEMPTION_NO_CANDIDATES = "PreemptionNoCandidates"


class Decision(ApiEnum):
    """What happened to a head in the cycle."""

    ADMITTED = "Admitted"
    # Victims were marked for eviction; the head stays pending until they release quota.
    PREEMPTING = "Preempting"
    # Fits once preemptions issued earlier in this cycle complete (Kueue DeferredFit).
    WAITING_FOR_PREEMPTIONS = "WaitingForPreemptions"
    # Capacity or victims were taken by an entry processed earlier in the cycle.
    SKIPPED = "Skipped"
    NO_FIT = "NoFit"
    # Needs preemption but no victim qualifies.
    NO_CANDIDATES = "NoCandidates"
    # Failed the checks before flavor assignment (inactive queue, namespace, ...).
    INADMISSIBLE = "Inadmissible"


# QuotaReserved=False reasons (granular ones, UnadmittedWorkloadsObservability).
QR_WAITING_FOR_QUOTA = "WaitingForQuota"
QR_WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"
QR_SUSPENDED = "Suspended"
QR_MISCONFIGURED = "Misconfigured"
QR_PENDING = "Pending"


@dataclass(frozen=True, slots=True)
class CyclePolicy:
    """Scheduler configuration the cycle needs (built by the caller from settings)."""

    fair_sharing: bool = False
    fair_sharing_strategies: tuple[FairSharingStrategy, ...] = DEFAULT_FAIR_SHARING_STRATEGIES
    partial_admission: bool = True
    requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION


@dataclass(frozen=True, slots=True)
class Head:
    """The workload popped from a cluster queue for this cycle.

    ``last_assignment`` is the flavor-scan progress carried from earlier cycles;
    ``is_preemptor`` marks the queue's sticky preemptor (informational). ``replaces`` is
    the key of the admitted workload slice this one scales up (Kueue's
    ``workload-slice-replacement-for``): when that slice holds quota in the same queue,
    only the extra pods are checked, on the flavors it holds.
    """

    workload: Workload
    cluster_queue: str
    last_assignment: AssignmentState | None = None
    is_preemptor: bool = False
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class PreemptionTarget:
    """A victim the cycle marks for eviction (Evicted=Preempted, Preempted=<reason>)."""

    workload_key: str
    cluster_queue: str
    reason: str
    message: str
    # Already evicted before this cycle: no new eviction is issued for it.
    already_evicted: bool = False
    # The queue of the workload that preempts.
    preempting_cluster_queue: str = ""


@dataclass(frozen=True, slots=True)
class HeadResult:
    """The decision for one head.

    ``requeue_immediately`` says whether Kueue puts the head straight back in the active
    heap (StrictFIFO, or a transient reason) or parks it as inadmissible until capacity
    frees in its cohort tree (BestEffortFIFO); ``QueueManager.requeue`` applies it.
    """

    workload: Workload
    cluster_queue: str
    decision: Decision
    message: str
    quota_reserved_reason: str
    requeue_reason: RequeueReason
    requeue_immediately: bool
    admission: Admission | None = None
    preemption_targets: tuple[PreemptionTarget, ...] = ()
    last_assignment: AssignmentState | None = None
    borrowing: int = 0
    # The workload slice this admission replaces (finished as WorkloadSliceReplaced).
    replaced_slice: str = ""

    @property
    def key(self) -> str:
        """The head's ``namespace/name``."""
        return self.workload.key

    @property
    def admitted(self) -> bool:
        """Whether the head was admitted (quota reserved) in this cycle."""
        return self.decision is Decision.ADMITTED

    @property
    def parked(self) -> bool:
        """Whether the head would be parked as inadmissible rather than stay at the head."""
        if self.admitted or self.requeue_immediately:
            return False
        return not (self.last_assignment is not None and self.last_assignment.pending_flavors())


@dataclass(frozen=True, slots=True)
class CycleResult:
    """Everything decided in one cycle, in processing order (failed nominations last)."""

    cycle: int
    results: tuple[HeadResult, ...] = field(default_factory=tuple)

    @property
    def admitted(self) -> tuple[HeadResult, ...]:
        """Heads admitted in this cycle."""
        return tuple(r for r in self.results if r.admitted)

    @property
    def pending(self) -> tuple[HeadResult, ...]:
        """Heads that stay pending."""
        return tuple(r for r in self.results if not r.admitted)

    @property
    def preemption_targets(self) -> tuple[PreemptionTarget, ...]:
        """Every victim marked for eviction in this cycle."""
        return tuple(t for r in self.results for t in r.preemption_targets)


def requeue_immediately(strategy: QueueingStrategy, reason: RequeueReason) -> bool:
    """Whether a head goes straight back to the heap (``RequeueIfNotPresent``).

    StrictFIFO keeps its head for every reason but a namespace mismatch; BestEffortFIFO
    only for transient reasons, and parks the rest so the next workload gets a turn.
    """
    if strategy is QueueingStrategy.STRICT_FIFO:
        return reason is not RequeueReason.NAMESPACE_MISMATCH
    return reason in (
        RequeueReason.FAILED_AFTER_NOMINATION,
        RequeueReason.PENDING_PREEMPTION,
        RequeueReason.PREEMPTION_FAILED,
    )


class _Entry:
    # Kueue's scheduler entry: a head plus its nomination and processing state.
    __slots__ = (
        "admission",
        "assignment",
        "cq",
        "decision",
        "head",
        "info",
        "issued",
        "last_assignment",
        "message",
        "qr_reason",
        "replaced",
        "requeue_reason",
        "skipped",
        "targets",
    )

    def __init__(self, head: Head) -> None:
        self.head = head
        self.info = WorkloadInfo(head.workload, head.cluster_queue)
        self.cq: ClusterQueueNode | None = None
        self.assignment: Assignment | None = None
        self.targets: list[Target] = []
        self.last_assignment = head.last_assignment
        self.message = ""
        self.qr_reason = ""
        self.requeue_reason = RequeueReason.GENERIC
        self.decision = Decision.INADMISSIBLE
        self.skipped = False
        self.admission: Admission | None = None
        self.issued: tuple[PreemptionTarget, ...] = ()
        # The admitted slice this head scales up, when it holds quota in the same queue.
        self.replaced: WorkloadInfo | None = None

    def replace_slice(self, old: WorkloadInfo) -> None:
        """Schedule only the pods added to ``old`` (Kueue ``ReplacedWorkloadSlice``)."""
        self.replaced = old
        counts = {ps.name: ps.count for ps in old.total_requests}
        delta = tuple(
            replace(ps, count=max(ps.count - counts.get(ps.name, 0), 0), min_count=None)
            for ps in self.head.workload.pod_sets
        )
        self.info = WorkloadInfo(replace(self.head.workload, pod_sets=delta),
                                 self.head.cluster_queue)

    def full_admission(self, admission: Admission) -> Admission:
        """The admission of a replacement slice: the old slice's pods plus the new ones."""
        if self.replaced is None:
            return admission
        old = {ps.name: ps for ps in self.replaced.total_requests}
        pod_sets = []
        for psa in admission.pod_sets:
            before = old.get(psa.name)
            if before is None:
                pod_sets.append(psa)
                continue
            usage = dict(psa.resource_usage)
            for resource, value in before.requests.items():
                if resource in psa.flavors:
                    usage[resource] = usage.get(resource, 0) + value
            pod_sets.append(replace(psa, count=psa.count + before.count, resource_usage=usage))
        return replace(admission, pod_sets=tuple(pod_sets))

    def record(self, assignment: Assignment, targets: list[Target]) -> None:
        self.assignment = assignment
        self.targets = targets
        self.message = assignment.message()
        self.last_assignment = assignment.last_state


class _Cycle:
    def __init__(self, snapshot: Snapshot, now: float, policy: CyclePolicy, cycle: int) -> None:
        self.snapshot = snapshot
        self.now = now
        self.policy = policy
        self.cycle = cycle
        self.preemptor = Preemptor(
            snapshot,
            fair_sharing=policy.fair_sharing,
            strategies=policy.fair_sharing_strategies,
            now=now,
            requeuing_timestamp=policy.requeuing_timestamp,
        )
        # Victims claimed by earlier entries of this cycle, by workload key.
        self.preempted: dict[str, WorkloadInfo] = {}
        # The same victims by the root of their queue's tree, in claim order: an entry
        # only looks at its own tree's (``_fits``), not at every victim of the cycle.
        self.preempted_by_root: dict[QuotaNode | None, dict[str, WorkloadInfo]] = {}
        # Root of each queue's tree, looked up once per cycle.
        self.roots: dict[str, QuotaNode | None] = {}
        # Slices claimed by their replacements in this cycle: no one else may take them.
        self.replaced: set[str] = set()

    # --- 3. nomination ------------------------------------------------------------

    def nominate(self, heads: Sequence[Head]) -> tuple[list[_Entry], list[_Entry]]:
        """Assign flavors to every admissible head; return (entries, failed heads)."""
        # Kueue's nominate(): cheap admissibility checks first, in Kueue's order, and
        # only then the (expensive) flavor assignment. Every head is assigned against
        # the snapshot as it was at the start of the cycle: nothing is charged yet.
        entries: list[_Entry] = []
        failed: list[_Entry] = []
        for head in heads:
            e = _Entry(head)
            name = head.cluster_queue
            cq = self.snapshot.cluster_queue(name)
            wl = head.workload
            # Held, misconfigured or cyclic queues keep their workloads but admit none.
            if name in self.snapshot.inactive:
                e.message = f"ClusterQueue {name} is inactive"
                e.qr_reason = QR_SUSPENDED
            elif cq is None:
                e.message = f"ClusterQueue {name} not found"
                e.qr_reason = QR_MISCONFIGURED
            else:
                labels = self.snapshot.namespace_labels(wl.namespace)
                selector = cq.spec.namespace_selector
                if labels is None:
                    e.message = f'workload namespace "{wl.namespace}" does not exist'
                    e.qr_reason = QR_MISCONFIGURED
                # A nil selector matches nothing (v1beta2); the mismatch has its own
                # requeue reason so even StrictFIFO parks the head instead of blocking.
                elif selector is None or not selector.matches(labels):
                    e.message = "workload namespace doesn't match ClusterQueue selector"
                    e.qr_reason = QR_MISCONFIGURED
                    e.requeue_reason = RequeueReason.NAMESPACE_MISMATCH
                elif wl.inadmissible is not None:
                    e.message = wl.inadmissible
                    e.qr_reason = QR_MISCONFIGURED
                else:
                    e.cq = cq
                    old = self._replaced_slice(head, cq)
                    if old is not None:
                        e.replace_slice(old)
                        self.preemptor.replaced_slices[wl.key] = old.key
                    assignment, targets = self.get_assignments(e)
                    e.record(assignment, targets)
                    entries.append(e)
                    continue
            failed.append(e)
        return entries, failed

    @staticmethod
    def _replaced_slice(head: Head, cq: ClusterQueueNode) -> WorkloadInfo | None:
        # Only a slice holding quota in the same queue and namespace is replaced;
        # otherwise the head is scheduled like any workload, at its full counts.
        if head.replaces is None:
            return None
        old = cq.workloads.get(head.replaces)
        if old is None or old.workload.namespace != head.workload.namespace:
            return None
        return old

    def get_assignments(
        self, e: _Entry, nomination: Mapping[str, Mapping[str, str]] | None = None
    ) -> tuple[Assignment, list[Target]]:
        """Full assignment, preemption targets, and partial admission as a fallback."""
        cq = e.cq
        assert cq is not None
        info = e.info
        last = e.last_assignment
        if last is not None and last.is_outdated(cq.allocatable_generation, self.cycle, info.hash):
            last = None
            e.last_assignment = None
        assigner = FlavorAssigner(
            info,
            cq,
            self.snapshot.flavors,
            fair_sharing=self.policy.fair_sharing,
            oracle=self.preemptor,
            last_assignment=last,
            scheduling_cycle=self.cycle,
            nomination_mapping=nomination,
            slice_flavors=(
                {ps.name: dict(ps.flavors) for ps in e.replaced.total_requests}
                if e.replaced is not None
                else None
            ),
        )
        # Nothing changes the snapshot until the assignment is chosen: a preemption
        # search asked twice (by the assigner, then for the victims) is done once.
        with self.preemptor.reusing_searches():
            return self._assign(e, assigner)

    def _assign(self, e: _Entry, assigner: FlavorAssigner) -> tuple[Assignment, list[Target]]:
        info = e.info
        # 1. The full pod counts; a Fit is final.
        full = assigner.assign()
        if full.mode is AssignmentMode.FIT:
            return full, []
        # 2. Preempt only counts when victims were actually found.
        if full.mode is AssignmentMode.PREEMPT:
            targets = self.preemptor.get_targets(info, full)
            if targets:
                return full, targets
        # 3. Partial admission: the largest reduced counts that fit or can preempt.
        #    The same assigner is reused so every probe resumes the same flavor scan.
        wl = info.workload
        if self.policy.partial_admission and wl.can_be_partially_admitted():

            def attempt(counts: list[int]) -> tuple[Assignment, list[Target]] | None:
                partial = assigner.assign(counts)
                if partial.mode is AssignmentMode.FIT:
                    return partial, []
                if partial.mode is AssignmentMode.PREEMPT:
                    found = self.preemptor.get_targets(info, partial)
                    if found:
                        return partial, found
                return None

            result = search_partial_counts(wl.pod_sets, attempt)
            if result is not None:
                return result
        # 4. Nothing works: report the full assignment (its message explains why).
        return full, []

    # --- 4. ordering ----------------------------------------------------------------

    def ordered(self, entries: list[_Entry]) -> Iterator[_Entry]:
        """Entries in processing order (classical sort or fair-sharing tournament)."""
        if not self.policy.fair_sharing:
            ts = self.policy.requeuing_timestamp

            def key(e: _Entry) -> tuple[int, int, float, str, str]:
                assert e.assignment is not None
                return entry_sort_key(e.info.workload, e.assignment.borrowing, ts)

            yield from sorted(entries, key=key)
            return
        yield from self._fair_sharing_order(entries)

    def _fair_sharing_order(self, entries: list[_Entry]) -> Iterator[_Entry]:
        """Tournament per root cohort on shares after admission (``fair_sharing_iterator.go``).

        DRS values are recomputed for every pick because processing an entry changes
        usage. Kueue picks the next root cohort arbitrarily; here the queue name decides.
        """
        by_cq: dict[str, list[_Entry]] = {}
        for e in entries:
            assert e.cq is not None
            by_cq.setdefault(e.cq.name, []).append(e)
        while by_cq:
            first = by_cq[min(by_cq)][0]
            assert first.cq is not None
            if first.cq.parent is None:
                yield self._take(by_cq, first)
                continue
            root = first.cq.root()
            assert isinstance(root, CohortNode)
            drs, requested = self._tournament_shares(root, by_cq)
            winner = self._tournament(root, by_cq, drs, requested)
            assert winner is not None
            yield self._take(by_cq, winner)

    @staticmethod
    def _take(by_cq: dict[str, list[_Entry]], e: _Entry) -> _Entry:
        assert e.cq is not None
        queue = by_cq[e.cq.name]
        queue.remove(e)
        if not queue:
            del by_cq[e.cq.name]
        return e

    def _tournament_shares(
        self, root: CohortNode, by_cq: Mapping[str, list[_Entry]]
    ) -> tuple[dict[tuple[str, str], DRS], dict[str, Mapping[FlavorResource, int]]]:
        # For every entry of the tree, the share of each node on its path with the
        # entry's usage added, keyed by (parent cohort, workload).
        drs: dict[tuple[str, str], DRS] = {}
        requested: dict[str, Mapping[FlavorResource, int]] = {}
        for cq in root.subtree_cluster_queues():
            queue = by_cq.get(cq.name)
            if not queue:
                continue
            e = queue[0]
            assert e.assignment is not None
            usage = e.assignment.usage
            requested[e.info.key] = usage
            with self.snapshot.simulate_usage_addition(cq, usage):
                share = dominant_resource_share(cq)
                for ancestor in cq.ancestors():
                    drs[(ancestor.name, e.info.key)] = share
                    share = dominant_resource_share(ancestor)
        return drs, requested

    def _tournament(
        self,
        cohort: CohortNode,
        by_cq: Mapping[str, list[_Entry]],
        drs: Mapping[tuple[str, str], DRS],
        requested: Mapping[str, Mapping[FlavorResource, int]],
    ) -> _Entry | None:
        candidates: list[_Entry] = []
        for child in cohort.child_cohorts:
            winner = self._tournament(child, by_cq, drs, requested)
            if winner is not None:
                candidates.append(winner)
        for cq in cohort.child_cqs:
            queue = by_cq.get(cq.name)
            if queue:
                candidates.append(queue[0])
        if not candidates:
            return None
        best = candidates[0]
        for current in candidates[1:]:
            if self._less(current, best, cohort.name, drs, requested):
                best = current
        return best

    def _less(
        self,
        a: _Entry,
        b: _Entry,
        parent: str,
        drs: Mapping[tuple[str, str], DRS],
        requested: Mapping[str, Mapping[FlavorResource, int]],
    ) -> bool:
        """Tournament order at ``parent``: non-borrowing, lower share, priority, FIFO."""
        a_drs = drs[(parent, a.info.key)]
        b_drs = drs[(parent, b.info.key)]
        # FairSharingPrioritizeNonBorrowing: a subtree not borrowing on what the entry
        # requests wins over one that is.
        a_borrows = a_drs.is_borrowing_on(requested[a.info.key])
        b_borrows = b_drs.is_borrowing_on(requested[b.info.key])
        if a_borrows != b_borrows:
            return not a_borrows
        order = compare_drs(a_drs, b_drs)
        if order != 0:
            return order == -1
        if a.info.priority != b.info.priority:
            return a.info.priority > b.info.priority
        ts = self.policy.requeuing_timestamp
        return queue_order_timestamp(a.info.workload, ts) < queue_order_timestamp(
            b.info.workload, ts
        )

    # --- 5. processing ---------------------------------------------------------------

    def process(self, e: _Entry) -> None:
        """Decide one entry against the snapshot as earlier entries left it."""
        cq = e.cq
        assert cq is not None
        usage, fits = self._update_assignment_if_needed(e)
        assignment = e.assignment
        assert assignment is not None
        mode = assignment.mode
        # The checks below follow Kueue's processEntry() in order; the first that
        # applies decides the entry.
        if mode is AssignmentMode.NO_FIT:
            e.decision = Decision.NO_FIT
            e.requeue_reason = RequeueReason.NO_FIT
            e.qr_reason = assignment.no_fit_reason or QR_PENDING
            return
        if mode is AssignmentMode.PREEMPT and not e.targets:
            e.decision = Decision.NO_CANDIDATES
            e.requeue_reason = RequeueReason.PREEMPTION_NO_CANDIDATES
            e.qr_reason = QR_WAITING_FOR_QUOTA
            # Unless the queue can always reclaim its nominal quota later, hold the
            # capacity so lower-ranked heads of this cycle cannot take it.
            if cq.spec.preemption.reclaim_within_cohort is not ReclaimWithinCohortPolicy.ANY:
                for fr, value in self._resources_to_reserve(e, cq).items():
                    add_usage(cq, fr, value)
            return
        if mode is AssignmentMode.DEFERRED_FIT:
            e.decision = Decision.WAITING_FOR_PREEMPTIONS
            e.message = (
                "Workload has overlapping preemption targets with another workload, "
                "but will fit after these preemptions complete"
            )
            e.qr_reason = QR_WAITING_FOR_PREEMPTED
            e.requeue_reason = RequeueReason.PENDING_PREEMPTION
            # Re-scan every flavor next time: the cluster will have changed.
            e.last_assignment = None
            for fr, value in usage.items():
                add_usage(cq, fr, value)
            return
        # Two preemptors never claim the same victim in one cycle: the later one
        # waits for the next cycle instead of evicting more than needed. A slice being
        # replaced counts as claimed, by its replacement and by any preemptor.
        if any(self._claimed(t.info.key) for t in e.targets) or (
            e.replaced is not None and self._claimed(e.replaced.key)
        ):
            self._skip(e, "Workload has overlapping preemption targets with another workload")
            return
        # Capacity taken by entries processed earlier in this cycle.
        if not fits:
            self._skip(e, "Workload no longer fits after processing another workload")
            return
        # Deviation from Kueue, for the quota invariant: ``fits`` counts the victims
        # claimed earlier in the cycle as gone, but they hold their quota until they have
        # stopped. A workload admitted now must also fit while they still hold it (with the
        # preemptors' places held), or quota would be exceeded until they release it.
        if mode is AssignmentMode.FIT and self.preempted and not self._fits_now(cq, usage):
            self._skip(e, "Workload no longer fits after processing another workload")
            return
        # Claim the victims and charge the usage now, so every later entry of the
        # cycle sees it (a preemptor holds its place while its victims terminate).
        for t in e.targets:
            self.preempted[t.info.key] = t.info
            root = self._root_of(t.info.cluster_queue)
            self.preempted_by_root.setdefault(root, {})[t.info.key] = t.info
        if e.replaced is not None:
            self.replaced.add(e.replaced.key)
        for fr, value in usage.items():
            add_usage(cq, fr, value)
        if mode is AssignmentMode.PREEMPT:
            e.decision = Decision.PREEMPTING
            e.qr_reason = QR_WAITING_FOR_PREEMPTED
            e.issued = tuple(self._issue(e, t) for t in e.targets)
            e.last_assignment = None
            e.message += f". Pending the preemption of {len(e.issued)} workload(s)"
            e.requeue_reason = RequeueReason.PENDING_PREEMPTION
            return
        # Fit: quota is reserved. Admission checks, if any, are the caller's business.
        e.decision = Decision.ADMITTED
        e.admission = e.full_admission(assignment.to_admission(cq.name))
        e.message = f"Quota reserved in ClusterQueue {cq.name}"
        e.qr_reason = ""

    def _claimed(self, key: str) -> bool:
        # A victim or a replaced slice taken by an entry processed earlier.
        return key in self.preempted or key in self.replaced

    def _skip(self, e: _Entry, message: str) -> None:
        # The scan progress is kept (FlavorFungibilityPreserveScanProgress): the entry
        # lost on contention, not on the flavor itself.
        e.decision = Decision.SKIPPED
        e.skipped = True
        e.message = message
        e.qr_reason = QR_WAITING_FOR_QUOTA

    def _issue(self, e: _Entry, target: Target) -> PreemptionTarget:
        assert e.cq is not None
        victim_cq = self.snapshot.any_cluster_queue(target.cluster_queue)
        victim_path = victim_cq.path if victim_cq is not None else ""
        return PreemptionTarget(
            workload_key=target.info.key,
            cluster_queue=target.cluster_queue,
            reason=target.reason,
            message=preemption_message(e.info.workload, target.reason, e.cq.path, victim_path),
            already_evicted=target.info.workload.is_evicted,
            preempting_cluster_queue=e.cq.name,
        )

    def _fits(
        self, cq: ClusterQueueNode, usage: Mapping[FlavorResource, int], targets: list[Target]
    ) -> bool:
        # Fits once every victim claimed so far in the cycle, plus this entry's own,
        # has released its quota (Kueue's ``fits``). Only victims of the queue's own cohort
        # tree change what it can use: the others are left alone, so a cycle with many
        # heads and many victims does not add and remove every victim's usage per head.
        root = cq.root()
        victims = dict(self.preempted_by_root.get(root, {}))
        for t in targets:
            if self._root_of(t.info.cluster_queue) is root:
                victims[t.info.key] = t.info
        in_tree = list(victims.values())
        if not in_tree:
            return self._fits_now(cq, usage)
        with self.snapshot.simulate_usage_removal(in_tree):
            return self._fits_now(cq, usage)

    def _root_of(self, cluster_queue: str) -> QuotaNode | None:
        if cluster_queue in self.roots:
            return self.roots[cluster_queue]
        node = self.snapshot.any_cluster_queue(cluster_queue)
        root = node.root() if node is not None else None
        self.roots[cluster_queue] = root
        return root

    @staticmethod
    def _fits_now(cq: ClusterQueueNode, usage: Mapping[FlavorResource, int]) -> bool:
        """Fits in the snapshot as it stands: victims still holding, reservations held."""
        return all(max(0, available(cq, fr)) >= v for fr, v in usage.items())

    def _update_assignment_if_needed(self, e: _Entry) -> tuple[Mapping[FlavorResource, int], bool]:
        """Recompute when this entry's victims overlap ones already claimed.

        With the other victims removed from the snapshot and flavors pinned to the
        nomination, a Fit result becomes DeferredFit: it will fit once those preemptions
        complete (RecomputeAssignmentUponPreemptionTargetsOverlap).
        """
        cq = e.cq
        assignment = e.assignment
        assert cq is not None
        assert assignment is not None
        usage = assignment.usage
        fits = self._fits(cq, usage, e.targets)
        if not any(t.info.key in self.preempted for t in e.targets):
            return usage, fits
        # Pin the nominated flavors so the recomputation cannot wander to another
        # flavor, and start the scan from the first flavor again.
        nomination = assignment.flavor_mapping()
        e.last_assignment = None
        with self.snapshot.simulate_workload_removal(list(self.preempted.values())):
            new_assignment, new_targets = self.get_assignments(e, nomination)
        if new_assignment.mode is AssignmentMode.FIT:
            new_assignment = new_assignment.with_mode(AssignmentMode.DEFERRED_FIT)
        e.record(new_assignment, new_targets)
        usage = new_assignment.usage
        return usage, self._fits(cq, usage, new_targets)

    def _resources_to_reserve(self, e: _Entry, cq: ClusterQueueNode) -> FlavorResourceQuantities:
        """How much of a Preempt-without-candidates request to hold (``quotaResourcesToReserve``)."""
        assignment = e.assignment
        assert assignment is not None
        out: FlavorResourceQuantities = {}
        for fr, value in assignment.usage.items():
            quota = cq.quota_for(fr)
            used = cq.usage.get(fr, 0)
            # A borrowing request holds up to its borrowing limit; a nominal one only
            # the part of its own nominal quota that is still unused. (Kueue does not
            # clamp the borrowing case at zero; neither do we.)
            if assignment.borrowing > 0:
                if quota.borrowing_limit is None:
                    out[fr] = value
                else:
                    out[fr] = min(value, quota.nominal + quota.borrowing_limit - used)
            else:
                out[fr] = max(0, min(value, quota.nominal - used))
        return out

    # --- 6. results ------------------------------------------------------------------

    def result(self, e: _Entry) -> HeadResult:
        """The immutable report of an entry."""
        # Kueue's requeueAndUpdate(): the requeue reason decides where the head goes
        # (immediately back to the heap or parked) and is reported with the message.
        reason = e.requeue_reason
        if e.skipped and reason is RequeueReason.GENERIC:
            # Failed after nomination is the only generic reason once nominated.
            reason = RequeueReason.FAILED_AFTER_NOMINATION
        cq = self.snapshot.any_cluster_queue(e.head.cluster_queue)
        strategy = (
            cq.spec.queueing_strategy if cq is not None else QueueingStrategy.BEST_EFFORT_FIFO
        )
        assignment = e.assignment
        return HeadResult(
            workload=e.head.workload,
            cluster_queue=e.head.cluster_queue,
            decision=e.decision,
            message=e.message,
            quota_reserved_reason=e.qr_reason,
            requeue_reason=reason,
            requeue_immediately=False
            if e.decision is Decision.ADMITTED
            else requeue_immediately(strategy, reason),
            admission=e.admission,
            preemption_targets=e.issued,
            last_assignment=e.last_assignment,
            borrowing=assignment.borrowing if assignment is not None else 0,
            replaced_slice=(
                e.replaced.key
                if e.replaced is not None and e.decision is Decision.ADMITTED
                else ""
            ),
        )


def run_cycle(
    snapshot: Snapshot,
    heads: Sequence[Head],
    *,
    now: float,
    policy: CyclePolicy | None = None,
    cycle: int = 0,
) -> CycleResult:
    """Run one scheduling cycle over ``heads`` against ``snapshot`` (which it mutates).

    ``now`` is the cycle's time (seconds, the caller's clock); ``cycle`` the scheduling
    cycle number, which ages the flavor-scan progress carried by heads.
    """
    c = _Cycle(snapshot, now, policy or CyclePolicy(), cycle)
    # 3. Nominate every head against the snapshot as it is.
    entries, failed = c.nominate(heads)
    processed: list[_Entry] = []
    # 4 + 5. Process in order; each entry sees the usage of the ones before it.
    for e in c.ordered(entries):
        c.process(e)
        processed.append(e)
    # 6. Report, including heads that failed nomination.
    return CycleResult(cycle, tuple(c.result(e) for e in processed + failed))
