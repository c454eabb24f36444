"""Choosing preemption victims (Kueue ``pkg/scheduler/preemption``).

Two algorithms share one entry point, ``Preemptor.get_targets``:

* **classical** (``classical/``): candidates from the preemptor's own queue
  (``withinClusterQueue``) and from queues of its cohort tree that use more than their
  nominal quota (``reclaimWithinCohort``, ``borrowWithinCohort``); victims are removed in
  candidate order until the workload fits, then the set is minimised by adding victims
  back when the workload still fits without them ("fill back").
* **fair sharing** (``fairsharing/``): target queues are picked by highest dominant
  resource share and a candidate is only preempted when a strategy says sharing becomes
  fairer.

Every simulation removes workloads from the snapshot and restores them before returning.
The same code answers the flavor assigner's "could preemption help here?" question
(``simulate_preemption``, Kueue's ``preemption_oracle.go``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum

from scheduling.core.fair_sharing import DRS, NEGATIVE_DRS, compare_drs, dominant_resource_share
from scheduling.core.flavors import Assignment, PreemptionPossibility
from scheduling.core.ordering import candidate_sort_key, queue_order_timestamp
from scheduling.core.resources import FlavorResource, FlavorResourceQuantities
from scheduling.core.snapshot import (
    ClusterQueueNode,
    CohortNode,
    QuotaNode,
    Snapshot,
    add_usage,
    available,
    borrowing_with,
    find_height_of_lowest_subtree_that_fits,
    has_child_over_nominal,
    is_within_nominal,
    quantities_fit_in_quota,
    remove_usage,
)
from scheduling.core.types import (
    BorrowWithinCohortPolicy,
    FairSharingStrategy,
    ReclaimWithinCohortPolicy,
    RequeuingTimestamp,
    WithinClusterQueuePolicy,
    Workload,
)
from scheduling.core.workloads import WorkloadInfo

__all__ = [
    "DEFAULT_FAIR_SHARING_STRATEGIES",
    "HUMAN_READABLE_REASONS",
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "Preemptor",
    "Target",
    "preemption_message",
    "satisfies_preemption_policy",
]

# Reasons of the Preempted condition a victim receives.
IN_CLUSTER_QUEUE = "InClusterQueue"
IN_COHORT_RECLAMATION = "InCohortReclamation"
IN_COHORT_FAIR_SHARING = "InCohortFairSharing"
IN_COHORT_RECLAIM_WHILE_BORROWING = "InCohortReclaimWhileBorrowing"

HUMAN_READABLE_REASONS = {
    IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue",
    IN_COHORT_RECLAMATION: "reclamation within the cohort",
    IN_COHORT_FAIR_SHARING: "Fair Sharing within the cohort",
    IN_COHORT_RECLAIM_WHILE_BORROWING: "reclamation within the cohort while borrowing",
}

DEFAULT_FAIR_SHARING_STRATEGIES = (
    FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,
    FairSharingStrategy.LESS_THAN_INITIAL_SHARE,
)


@dataclass(frozen=True, slots=True)
class Target:
    """A workload to preempt, why, and the queue it holds quota in."""

    info: WorkloadInfo
    reason: str
    cluster_queue: str


def preemption_message(
    preemptor: Workload, reason: str, preemptor_path: str, preemptee_path: str
) -> str:
    """The message of the victim's Preempted condition, worded as Kueue does."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, "
        f"JobUID: {preemptor.job_uid or 'UNKNOWN'}) due to "
        f"{HUMAN_READABLE_REASONS.get(reason, 'UNKNOWN')}; preemptor path: "
        f"{preemptor_path or 'UNKNOWN'}; preemptee path: {preemptee_path or 'UNKNOWN'}"
    )


def satisfies_preemption_policy(
    preemptor: Workload,
    candidate: Workload,
    policy: str,
    requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION,
) -> bool:
    """Kueue ``SatisfiesPreemptionPolicy``; ``policy`` is the API spelling.

    LowerPriority: strictly lower priority. LowerOrNewerEqualPriority: also an equal
    priority that queued later than the preemptor. Any: always. Never: never.
    """
    lower = preemptor.priority > candidate.priority
    if policy == "LowerPriority":
        return lower
    if policy == "LowerOrNewerEqualPriority":
        newer_equal = preemptor.priority == candidate.priority and queue_order_timestamp(
            preemptor, requeuing_timestamp
        ) < queue_order_timestamp(candidate, requeuing_timestamp)
        return lower or newer_equal
    return policy == "Any"


class _Variant(IntEnum):
    # How a candidate may be preempted (classical/hierarchical_preemption.go).
    NEVER = 0
    WITHIN_CQ = 1
    # The preemptor's subtree owns the contested quota.
    HIERARCHICAL_RECLAIM = 2
    # Only if the preemptor ends up not borrowing.
    RECLAIM_WITHOUT_BORROWING = 3
    RECLAIM_WHILE_BORROWING = 4

    def reason(self) -> str:
        if self is _Variant.WITHIN_CQ:
            return IN_CLUSTER_QUEUE
        if self is _Variant.RECLAIM_WHILE_BORROWING:
            return IN_COHORT_RECLAIM_WHILE_BORROWING
        return IN_COHORT_RECLAMATION


@dataclass(frozen=True, slots=True)
class _Candidate:
    info: WorkloadInfo
    # Lowest common ancestor of the candidate's and the preemptor's queues.
    lca: CohortNode | None
    variant: _Variant


# What a search depends on besides the snapshot: preemptor, queue, contested
# flavor-resources and the requests.
_SearchKey = tuple[str, str, frozenset[FlavorResource], frozenset[tuple[FlavorResource, int]]]


@dataclass(frozen=True, slots=True)
class _Ctx:
    preemptor: WorkloadInfo
    cq: ClusterQueueNode
    frs: frozenset[FlavorResource]
    requests: FlavorResourceQuantities


class Preemptor:
    """Finds preemption targets against one snapshot (also the flavor assigner's oracle)."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        fair_sharing: bool,
        strategies: Sequence[FairSharingStrategy] = DEFAULT_FAIR_SHARING_STRATEGIES,
        now: float,
        requeuing_timestamp: RequeuingTimestamp = RequeuingTimestamp.EVICTION,
    ) -> None:
        self.snapshot = snapshot
        self.fair_sharing = fair_sharing
        self.strategies = tuple(strategies) or DEFAULT_FAIR_SHARING_STRATEGIES
        self.now = now
        self.requeuing_timestamp = requeuing_timestamp
        # Preemptor key -> the workload slice it replaces: never one of its victims
        # (Kueue keeps the old slice as a pseudo-target and drops it before issuing).
        self.replaced_slices: dict[str, str] = {}
        # Searches answered while the snapshot stands still (``reusing_searches``).
        self._searches: dict[_SearchKey, list[Target]] | None = None

    # --- entry points -----------------------------------------------------------

    def get_targets(self, info: WorkloadInfo, assignment: Assignment) -> list[Target]:
        """Victims that let ``assignment`` fit, or an empty list (``GetTargets``)."""
        cq = self.snapshot.cluster_queues[info.cluster_queue]
        ctx = _Ctx(
            info, cq, assignment.frs_needing_preemption(), assignment.total_requests_for(info)
        )
        return self._targets(ctx)

    def simulate_preemption(
        self, cq: ClusterQueueNode, info: WorkloadInfo, fr: FlavorResource, quantity: int
    ) -> tuple[PreemptionPossibility, int]:
        """Could preemption free ``quantity`` of ``fr``? And the borrowing level after it."""
        preemptor_cq = self.snapshot.cluster_queues[info.cluster_queue]
        targets = self._targets(_Ctx(info, preemptor_cq, frozenset((fr,)), {fr: quantity}))
        if not targets:
            borrow, _ = find_height_of_lowest_subtree_that_fits(cq, fr, quantity)
            return PreemptionPossibility.NO_CANDIDATES, borrow
        with self.snapshot.simulate_usage_removal(t.info for t in targets):
            borrow_after, _ = find_height_of_lowest_subtree_that_fits(cq, fr, quantity)
        if any(t.info.cluster_queue == cq.name for t in targets):
            return PreemptionPossibility.PREEMPT, borrow_after
        return PreemptionPossibility.RECLAIM, borrow_after

    @contextmanager
    def reusing_searches(self) -> Iterator[None]:
        """Answer each distinct search once inside the block.

        The caller promises the snapshot does not change in the block (every search
        restores it). Assigning flavors asks whether preemption could free a flavor's
        request, and the chosen assignment then asks for its victims: for a request of
        one flavor-resource the same search, which costs a walk over the cohort's
        borrowing queues and their workloads.
        """
        self._searches = {}
        try:
            yield
        finally:
            self._searches = None

    def _targets(self, ctx: _Ctx) -> list[Target]:
        searches = self._searches
        if searches is None:
            return self._search(ctx)
        key = (ctx.preemptor.key, ctx.cq.name, ctx.frs, frozenset(ctx.requests.items()))
        found = searches.get(key)
        if found is None:
            found = searches[key] = self._search(ctx)
        return list(found)

    def _search(self, ctx: _Ctx) -> list[Target]:
        if self.fair_sharing:
            return self._fair_preemptions(ctx)
        return self._classical_preemptions(ctx)

    # --- shared helpers -----------------------------------------------------------

    def _fits(self, ctx: _Ctx, allow_borrowing: bool) -> bool:
        """The request fits the preemptor's queue now (``workloadFits``)."""
        cq = ctx.cq
        for fr, value in ctx.requests.items():
            if not allow_borrowing and borrowing_with(cq, fr, value):
                return False
            if value > max(0, available(cq, fr)):
                return False
        return True

    def _remove(self, info: WorkloadInfo) -> None:
        self.snapshot.remove_workload(info)

    def _restore(self, targets: Sequence[Target]) -> None:
        for target in targets:
            self.snapshot.add_workload(target.info)

    def _fill_back(self, ctx: _Ctx, targets: list[Target], allow_borrowing: bool) -> list[Target]:
        """Keep only necessary victims: put each back (newest first) if it still fits.

        The last victim always stays. Kept victims are re-removed; dropped ones are left
        in the snapshot, so afterwards only the returned targets are missing.
        """
        for i in range(len(targets) - 2, -1, -1):
            self.snapshot.add_workload(targets[i].info)
            if self._fits(ctx, allow_borrowing):
                targets[i] = targets[-1]
                targets.pop()
            else:
                self._remove(targets[i].info)
        return targets

    def _sort_key(
        self, cq_name: str
    ) -> Callable[[WorkloadInfo], tuple[int, int, int, float, str, str]]:
        now = self.now

        def key(info: WorkloadInfo) -> tuple[int, int, int, float, str, str]:
            return candidate_sort_key(info, preemptor_cq=cq_name, now=now)

        return key

    def _satisfies(self, ctx: _Ctx, candidate: WorkloadInfo, policy: str) -> bool:
        if self.replaced_slices.get(ctx.preemptor.key) == candidate.key:
            return False
        return satisfies_preemption_policy(
            ctx.preemptor.workload, candidate.workload, policy, self.requeuing_timestamp
        )

    # --- classical ----------------------------------------------------------------

    def _classical_preemptions(self, ctx: _Ctx) -> list[Target]:
        cq = ctx.cq
        same_queue = self._same_queue_candidates(ctx)
        hierarchical, priority_based = self._cohort_candidates(ctx)
        key = self._sort_key(cq.name)
        same_queue.sort(key=lambda c: key(c.info))
        hierarchical.sort(key=lambda c: key(c.info))
        priority_based.sort(key=lambda c: key(c.info))
        # Already-evicted candidates of every kind come first: they free quota anyway.
        evicted = [
            c
            for lst in (hierarchical, priority_based, same_queue)
            for c in lst
            if c.info.workload.is_evicted
        ]
        rest = [
            c
            for lst in (hierarchical, priority_based, same_queue)
            for c in lst
            if not c.info.workload.is_evicted
        ]
        candidates = evicted + rest
        no_other_queues = not hierarchical and not priority_based

        # Which passes to try (Kueue classicalPreemptions): a pass that allows the
        # preemptor to end up borrowing, and/or one that does not. Without
        # borrowWithinCohort, reclaiming from other queues only makes sense when the
        # preemptor ends within nominal, so that pass goes first when it is possible.
        bwc_forbidden = (
            cq.spec.preemption.borrow_within_cohort.policy is BorrowWithinCohortPolicy.NEVER
        )
        attempts: tuple[bool, ...]
        if no_other_queues or (bwc_forbidden and not self._strictly_under_nominal(ctx)):
            attempts = (True,)
        elif bwc_forbidden and not hierarchical:
            attempts = (False, True)
        else:
            attempts = (True, False)

        for allow_borrowing in attempts:
            # Remove candidates one by one (cheapest first) until the workload fits.
            targets: list[Target] = []
            for candidate in candidates:
                # Validity is re-checked as victims are removed: a queue that dropped
                # back within nominal stops being a source of victims.
                if not self._candidate_valid(ctx, candidate, allow_borrowing):
                    continue
                self._remove(candidate.info)
                targets.append(
                    Target(candidate.info, candidate.variant.reason(), candidate.info.cluster_queue)
                )
                if self._fits(ctx, allow_borrowing):
                    targets = self._fill_back(ctx, targets, allow_borrowing)
                    self._restore(targets)
                    return targets
            self._restore(targets)
        return []

    def _strictly_under_nominal(self, ctx: _Ctx) -> bool:
        cq = ctx.cq
        return all(cq.quota_for(fr).nominal > cq.usage.get(fr, 0) for fr in ctx.frs)

    def _classify(self, ctx: _Ctx, info: WorkloadInfo, advantage: bool) -> _Variant:
        # Only workloads using a contested flavor-resource can free anything useful.
        if not (info.flavor_resources & ctx.frs):
            return _Variant.NEVER
        preemption = ctx.cq.spec.preemption
        same_queue = info.cluster_queue == ctx.cq.name
        policy = (
            preemption.within_cluster_queue.value
            if same_queue
            else preemption.reclaim_within_cohort.value
        )
        if not self._satisfies(ctx, info, policy):
            return _Variant.NEVER
        if same_queue:
            return _Variant.WITHIN_CQ
        if advantage:
            return _Variant.HIERARCHICAL_RECLAIM
        # Without a hierarchical advantage, a victim in another queue may only be
        # taken while the preemptor borrows if borrowWithinCohort allows it: lower
        # priority than the preemptor and not above the threshold.
        bwc = preemption.borrow_within_cohort
        if bwc.policy is BorrowWithinCohortPolicy.NEVER:
            return _Variant.RECLAIM_WITHOUT_BORROWING
        incoming = ctx.preemptor.priority
        if info.priority >= incoming or (
            bwc.max_priority_threshold is not None and info.priority > bwc.max_priority_threshold
        ):
            return _Variant.RECLAIM_WITHOUT_BORROWING
        return _Variant.RECLAIM_WHILE_BORROWING

    def _candidates_from(
        self, ctx: _Ctx, cq: ClusterQueueNode, lca: CohortNode | None, advantage: bool
    ) -> list[_Candidate]:
        out: list[_Candidate] = []
        for info in cq.workloads.values():
            variant = self._classify(ctx, info, advantage)
            if variant is not _Variant.NEVER:
                out.append(_Candidate(info, lca, variant))
        return out

    def _same_queue_candidates(self, ctx: _Ctx) -> list[_Candidate]:
        if ctx.cq.spec.preemption.within_cluster_queue is WithinClusterQueuePolicy.NEVER:
            return []
        return self._candidates_from(ctx, ctx.cq, None, False)

    def _cohort_candidates(self, ctx: _Ctx) -> tuple[list[_Candidate], list[_Candidate]]:
        """Candidates from other queues, split by hierarchical advantage.

        Walking up from the preemptor's parent, each ancestor's subtree (minus the part
        already visited) is searched for queues above nominal. Once the request fits in
        some ancestor's subtree quota the preemptor has an advantage over everything
        using that quota (``collectCandidatesForHierarchicalReclaim``).
        """
        hierarchical: list[_Candidate] = []
        priority_based: list[_Candidate] = []
        cq = ctx.cq
        if cq.parent is None or (
            cq.spec.preemption.reclaim_within_cohort is ReclaimWithinCohortPolicy.NEVER
        ):
            return hierarchical, priority_based
        advantage, remaining = quantities_fit_in_quota(cq, ctx.requests)
        previous: CohortNode | None = None
        for subtree_root in cq.ancestors():
            target_list = hierarchical if advantage else priority_based
            self._collect_in_subtree(
                ctx, subtree_root, subtree_root, previous, advantage, target_list
            )
            fits, remaining = quantities_fit_in_quota(subtree_root, remaining)
            advantage = advantage or fits
            previous = subtree_root
        return hierarchical, priority_based

    def _collect_in_subtree(
        self,
        ctx: _Ctx,
        cohort: CohortNode,
        subtree_root: CohortNode,
        skip: CohortNode | None,
        advantage: bool,
        out: list[_Candidate],
    ) -> None:
        # Only children above nominal are searched: when none is, skip the loops over
        # every child (the common case once a cohort is full without borrowing).
        if not has_child_over_nominal(cohort, ctx.frs):
            return
        for child in cohort.child_cohorts:
            if child is skip or is_within_nominal(child, ctx.frs):
                continue
            self._collect_in_subtree(ctx, child, subtree_root, skip, advantage, out)
        for child_cq in cohort.child_cqs:
            if child_cq is ctx.cq or is_within_nominal(child_cq, ctx.frs):
                continue
            out.extend(self._candidates_from(ctx, child_cq, subtree_root, advantage))

    def _candidate_valid(self, ctx: _Ctx, candidate: _Candidate, allow_borrowing: bool) -> bool:
        if candidate.info.cluster_queue == ctx.cq.name:
            return True
        if allow_borrowing and candidate.variant is _Variant.RECLAIM_WITHOUT_BORROWING:
            return False
        cand_cq = self.snapshot.cluster_queues.get(candidate.info.cluster_queue)
        if cand_cq is None or is_within_nominal(cand_cq, ctx.frs):
            return False
        # Only take from nodes that borrow, up to (not including) the common ancestor.
        for node in cand_cq.ancestors():
            if node is candidate.lca:
                break
            if is_within_nominal(node, ctx.frs):
                return False
        return True

    # --- fair sharing -------------------------------------------------------------

    def _fair_preemptions(self, ctx: _Ctx) -> list[Target]:
        candidates = self._fair_candidates(ctx)
        if not candidates:
            return []
        candidates.sort(key=self._sort_key(ctx.cq.name))
        # Shares are compared as they would be after admission, so the incoming
        # usage is charged to the preemptor's queue for the whole search.
        with self.snapshot.simulate_usage_addition(ctx.cq, ctx.requests):
            fits, targets, retry = self._first_fs_strategy(ctx, candidates, self.strategies[0])
            if not fits and len(self.strategies) > 1:
                fits = self._second_fs_strategy(ctx, retry, targets)
        if not fits:
            self._restore(targets)
            return []
        targets = self._fill_back(ctx, targets, True)
        self._restore(targets)
        return targets

    def _fair_candidates(self, ctx: _Ctx) -> list[WorkloadInfo]:
        cq = ctx.cq
        preemption = cq.spec.preemption
        out: list[WorkloadInfo] = []
        if preemption.within_cluster_queue is not WithinClusterQueuePolicy.NEVER:
            policy = preemption.within_cluster_queue.value
            out.extend(
                info
                for info in cq.workloads.values()
                if info.flavor_resources & ctx.frs and self._satisfies(ctx, info, policy)
            )
        if cq.parent is not None and (
            preemption.reclaim_within_cohort is not ReclaimWithinCohortPolicy.NEVER
        ):
            policy = preemption.reclaim_within_cohort.value
            root = cq.root()
            assert isinstance(root, CohortNode)
            for other in root.subtree_cluster_queues():
                if other is cq or not any(other.borrowing(fr) for fr in ctx.frs):
                    continue
                out.extend(
                    info
                    for info in other.workloads.values()
                    if info.flavor_resources & ctx.frs and self._satisfies(ctx, info, policy)
                )
        return out

    def _fits_fair(self, ctx: _Ctx) -> bool:
        # The incoming usage was added for share computations; take it out to test fit.
        cq = ctx.cq
        for fr, value in ctx.requests.items():
            remove_usage(cq, fr, value)
        try:
            return self._fits(ctx, True)
        finally:
            for fr, value in ctx.requests.items():
                add_usage(cq, fr, value)

    def _preempt(self, targets: list[Target], info: WorkloadInfo, reason: str) -> None:
        self._remove(info)
        targets.append(Target(info, reason, info.cluster_queue))

    def _first_fs_strategy(
        self, ctx: _Ctx, candidates: list[WorkloadInfo], strategy: FairSharingStrategy
    ) -> tuple[bool, list[Target], list[WorkloadInfo]]:
        ordering = _TargetQueueOrdering(self, ctx, candidates)
        targets: list[Target] = []
        retry: list[WorkloadInfo] = []
        # FairSharingPreemptWithinNominal: a preemptor that stays within its nominal
        # quota (with the incoming workload) reclaims without comparing shares.
        within_nominal = not any(ctx.cq.borrowing(fr) for fr in ctx.frs)
        for target in ordering:
            if target.cq is ctx.cq:
                self._preempt(targets, target.pop(), IN_CLUSTER_QUEUE)
                if self._fits_fair(ctx):
                    return True, targets, []
                continue
            if within_nominal:
                self._preempt(targets, target.pop(), IN_COHORT_RECLAMATION)
                if self._fits_fair(ctx):
                    return True, targets, []
                continue
            # Share comparison happens at the children of the lowest common ancestor
            # of both queues (the "almost LCA").
            preemptor_new, target_old = target.shares()
            if preemptor_new.weighted_share() == float(
                "inf"
            ) and target_old.weighted_share() != float("inf"):
                # A zero-weight preemptor that would borrow can never win a comparison.
                while target.has_workload():
                    retry.append(target.pop())
                continue
            while target.has_workload():
                info = target.pop()
                target_new = target.share_after_removal(info)
                if _strategy_passes(strategy, preemptor_new, target_old, target_new):
                    self._preempt(targets, info, IN_COHORT_FAIR_SHARING)
                    if self._fits_fair(ctx):
                        return True, targets, []
                    # Shares changed: pick the target queue again.
                    break
                retry.append(info)
        return False, targets, retry

    def _second_fs_strategy(
        self, ctx: _Ctx, retry: list[WorkloadInfo], targets: list[Target]
    ) -> bool:
        """At most one more victim per queue, judged against its share before removal."""
        ordering = _TargetQueueOrdering(self, ctx, retry)
        for target in ordering:
            preemptor_new, target_old = target.shares()
            info = target.pop()
            if compare_drs(preemptor_new, target_old) < 0:
                self._preempt(targets, info, IN_COHORT_FAIR_SHARING)
                if self._fits_fair(ctx):
                    return True
            ordering.drop(target.cq)
        return False


def _strategy_passes(
    strategy: FairSharingStrategy, preemptor_new: DRS, target_old: DRS, target_new: DRS
) -> bool:
    if strategy is FairSharingStrategy.LESS_THAN_OR_EQUAL_TO_FINAL_SHARE:
        # Rule S2-a: preempt while the preemptor stays at or below the target's new share.
        return compare_drs(preemptor_new, target_new) <= 0
    # Rule S2-b: preempt while the preemptor is below the target's current share.
    return compare_drs(preemptor_new, target_old) < 0


class _TargetQueue:
    """A queue yielding fair-sharing victims (``fairsharing/target.go``)."""

    __slots__ = ("cq", "ordering")

    def __init__(self, ordering: _TargetQueueOrdering, cq: ClusterQueueNode) -> None:
        self.ordering = ordering
        self.cq = cq

    def has_workload(self) -> bool:
        return self.ordering.has_workload(self.cq)

    def pop(self) -> WorkloadInfo:
        return self.ordering.pop(self.cq)

    def _almost_lcas(self) -> tuple[QuotaNode, QuotaNode]:
        # The children of the lowest common ancestor on each side.
        preemptor_cq = self.ordering.ctx.cq
        lca: CohortNode | None = None
        for ancestor in self.cq.ancestors():
            if ancestor.name in self.ordering.preemptor_ancestors:
                lca = ancestor
                break
        assert lca is not None, "queues of one cohort tree always share an ancestor"
        return _almost_lca(preemptor_cq, lca), _almost_lca(self.cq, lca)

    def shares(self) -> tuple[DRS, DRS]:
        """(preemptor's new share, target's current share) at the almost-LCA level."""
        preemptor_side, target_side = self._almost_lcas()
        return dominant_resource_share(preemptor_side), dominant_resource_share(target_side)

    def share_after_removal(self, info: WorkloadInfo) -> DRS:
        """The target side's share if ``info`` were gone (usage removed at the queue)."""
        with self.ordering.preemptor.snapshot.simulate_usage_removal((info,)):
            _, target_side = self._almost_lcas()
            return dominant_resource_share(target_side)


def _almost_lca(cq: ClusterQueueNode, lca: CohortNode) -> QuotaNode:
    node: QuotaNode = cq
    for ancestor in cq.ancestors():
        if ancestor is lca:
            return node
        node = ancestor
    raise AssertionError("lca is not an ancestor")


class _TargetQueueOrdering:
    """Yields target queues by descending share (``fairsharing/ordering.go``).

    From the root, repeatedly enter the child with the highest share among children that
    may still yield candidates; non-borrowing queues (other than the preemptor's) and
    queues without candidates are pruned, as are non-borrowing cohorts off the
    preemptor's path. The same queue may be yielded several times in a row.
    """

    def __init__(self, preemptor: Preemptor, ctx: _Ctx, candidates: list[WorkloadInfo]) -> None:
        self.preemptor = preemptor
        self.ctx = ctx
        self.preemptor_ancestors = {a.name for a in ctx.cq.ancestors()}
        self.by_cq: dict[str, list[WorkloadInfo]] = {}
        for info in candidates:
            self.by_cq.setdefault(info.cluster_queue, []).append(info)
        # Read position per queue, so popping is O(1).
        self.pos: dict[str, int] = {}
        self.pruned_cqs: set[str] = set()
        self.pruned_cohorts: set[str] = set()
        self.key = preemptor._sort_key(ctx.cq.name)

    def has_workload(self, cq: ClusterQueueNode) -> bool:
        return self.pos.get(cq.name, 0) < len(self.by_cq.get(cq.name, ()))

    def pop(self, cq: ClusterQueueNode) -> WorkloadInfo:
        i = self.pos.get(cq.name, 0)
        self.pos[cq.name] = i + 1
        return self.by_cq[cq.name][i]

    def _head(self, cq: ClusterQueueNode) -> WorkloadInfo:
        return self.by_cq[cq.name][self.pos.get(cq.name, 0)]

    def drop(self, cq: ClusterQueueNode) -> None:
        self.pruned_cqs.add(cq.name)

    def __iter__(self) -> Iterator[_TargetQueue]:
        cq = self.ctx.cq
        if cq.parent is None:
            while cq.name not in self.pruned_cqs and self.has_workload(cq):
                yield _TargetQueue(self, cq)
            return
        root = cq.root()
        assert isinstance(root, CohortNode)
        while root.name not in self.pruned_cohorts:
            target = self._next_target(root)
            if target is not None:
                yield target

    def _next_target(self, cohort: CohortNode) -> _TargetQueue | None:
        best_cq: ClusterQueueNode | None = None
        best_cq_drs = NEGATIVE_DRS
        for cq in cohort.child_cqs:
            if cq.name in self.pruned_cqs:
                continue
            drs = dominant_resource_share(cq)
            if (not drs.borrowing and cq is not self.ctx.cq) or not self.has_workload(cq):
                self.pruned_cqs.add(cq.name)
                continue
            order = compare_drs(drs, best_cq_drs)
            if order == 0 and best_cq is not None:
                # Equal shares: the queue whose next candidate would be preempted first.
                if self.key(self._head(cq)) < self.key(self._head(best_cq)):
                    best_cq = cq
            elif order == 1:
                best_cq, best_cq_drs = cq, drs
        best_cohort: CohortNode | None = None
        best_cohort_drs = NEGATIVE_DRS
        for child in cohort.child_cohorts:
            if child.name in self.pruned_cohorts:
                continue
            drs = dominant_resource_share(child)
            # A cohort on the preemptor's path stays even when not borrowing: there may
            # be imbalance inside it, or preemption within the preemptor's own queue.
            if not drs.borrowing and child.name not in self.preemptor_ancestors:
                self.pruned_cohorts.add(child.name)
            elif compare_drs(drs, best_cohort_drs) >= 0:
                best_cohort, best_cohort_drs = child, drs
        if best_cohort is None and best_cq is None:
            self.pruned_cohorts.add(cohort.name)
            return None
        # Ties go to the cohort: inside it the most unfair node can be chosen.
        if best_cohort is not None and compare_drs(best_cohort_drs, best_cq_drs) >= 0:
            return self._next_target(best_cohort)
        assert best_cq is not None
        return _TargetQueue(self, best_cq)
