"""Flavor assignment (Kueue ``pkg/scheduler/flavorassigner/flavorassigner.go``).

For every pod set and every resource group it needs, flavors are tried in the queue's
order (resuming after the last flavor tried in an earlier cycle). Each flavor gets a
*granular mode* per resource: fit (possibly borrowing), reclaim or preempt (a preemption
simulation found victims), no preemption candidates, or no fit. The fungibility knobs
decide whether to stop at a flavor or keep looking, and when the scan runs out the best
flavor seen wins. The result is an ``Assignment`` whose ``message()`` is the "why
pending" text Kueue writes into the QuotaReserved condition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Protocol

from scheduling.core.quantities import format_amount
from scheduling.core.resources import PODS, FlavorResource, FlavorResourceQuantities
from scheduling.core.snapshot import (
    ClusterQueueNode,
    available,
    find_height_of_lowest_subtree_that_fits,
    potential_available,
)
from scheduling.core.types import (
    Admission,
    BorrowWithinCohortPolicy,
    FlavorFungibility,
    FungibilityPolicy,
    FungibilityPreference,
    PodSetAssignment,
    ReclaimWithinCohortPolicy,
    ResourceFlavorSpec,
)
from scheduling.core.workloads import AssignmentState, PodSetResources, WorkloadInfo

__all__ = [
    "Assignment",
    "AssignmentMode",
    "FlavorAssigner",
    "FlavorAssignment",
    "PodSetAssignmentResult",
    "PreemptionOracle",
    "PreemptionPossibility",
    "REASON_EXCEEDS_MAX_QUOTA",
    "REASON_NO_MATCHING_FLAVOR",
    "REASON_WAITING_FOR_QUOTA",
]

# QuotaReserved=False reasons for a NoFit assignment, most severe last.
REASON_WAITING_FOR_QUOTA = "WaitingForQuota"
REASON_EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
REASON_NO_MATCHING_FLAVOR = "NoMatchingFlavor"
_SEVERITY = {REASON_WAITING_FOR_QUOTA: 2, REASON_EXCEEDS_MAX_QUOTA: 3, REASON_NO_MATCHING_FLAVOR: 4}


def _most_severe(a: str, b: str) -> str:
    return a if _SEVERITY.get(a, 0) >= _SEVERITY.get(b, 0) else b


class AssignmentMode(IntEnum):
    """How a flavor can be assigned; ordered so the best mode is the ``max()``."""

    NO_FIT = 0
    PREEMPT = 1
    # Fits once preemptions issued earlier in the same cycle complete.
    DEFERRED_FIT = 2
    FIT = 3


class PreemptionPossibility(IntEnum):
    """Outcome of a preemption simulation for one flavor-resource."""

    NO_CANDIDATES = 0
    PREEMPT = 1
    # All targets are in other queues of the cohort.
    RECLAIM = 2


class _Granular(IntEnum):
    # Kueue's internal preemptionMode, finer than AssignmentMode.
    NO_FIT = 0
    NO_CANDIDATES = 1
    PREEMPT = 2
    RECLAIM = 3
    FIT = 4

    def assignment_mode(self) -> AssignmentMode:
        if self is _Granular.NO_FIT:
            return AssignmentMode.NO_FIT
        if self is _Granular.FIT:
            return AssignmentMode.FIT
        return AssignmentMode.PREEMPT


_FROM_POSSIBILITY = {
    PreemptionPossibility.NO_CANDIDATES: _Granular.NO_CANDIDATES,
    PreemptionPossibility.PREEMPT: _Granular.PREEMPT,
    PreemptionPossibility.RECLAIM: _Granular.RECLAIM,
}

_INFINITE_LEVEL = 1 << 62


@dataclass(frozen=True, slots=True)
class _Mode:
    mode: _Granular
    borrowing_level: int


_WORST = _Mode(_Granular.NO_FIT, _INFINITE_LEVEL)
_BEST = _Mode(_Granular.FIT, 0)


def _is_preferred(a: _Mode, b: _Mode, fungibility: FlavorFungibility) -> bool:
    """Whether ``a`` beats ``b`` (``isPreferred``)."""
    if a.mode is _Granular.NO_FIT:
        return False
    if b.mode is _Granular.NO_FIT:
        return True
    # A flavor without preemption candidates cannot admit now: below any viable mode.
    a_nc = a.mode is _Granular.NO_CANDIDATES
    b_nc = b.mode is _Granular.NO_CANDIDATES
    if a_nc != b_nc:
        return not a_nc
    # PreemptionOverBorrowing ranks by borrowing level first; the default
    # (BorrowingOverPreemption) ranks fit > reclaim > preempt first.
    if fungibility.preference is FungibilityPreference.PREEMPTION_OVER_BORROWING:
        if a.borrowing_level != b.borrowing_level:
            return a.borrowing_level < b.borrowing_level
        return a.mode > b.mode
    if a.mode != b.mode:
        return a.mode > b.mode
    return a.borrowing_level < b.borrowing_level


def _should_try_next_flavor(mode: _Mode, fungibility: FlavorFungibility) -> bool:
    if mode.mode in (_Granular.NO_FIT, _Granular.NO_CANDIDATES):
        return True
    if (
        mode.mode in (_Granular.PREEMPT, _Granular.RECLAIM)
        and fungibility.when_can_preempt is FungibilityPolicy.TRY_NEXT_FLAVOR
    ):
        return True
    return (
        mode.borrowing_level > 0
        and fungibility.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR
    )


class PreemptionOracle(Protocol):
    """Answers "could preemption free ``quantity`` of ``fr`` for this workload?"."""

    def simulate_preemption(
        self, cq: ClusterQueueNode, info: WorkloadInfo, fr: FlavorResource, quantity: int
    ) -> tuple[PreemptionPossibility, int]:
        """The possibility and the borrowing level once the victims are gone."""
        ...


@dataclass(frozen=True, slots=True)
class FlavorAssignment:
    """The flavor chosen for one resource of a pod set."""

    flavor: str
    mode: AssignmentMode
    tried_flavor_idx: int
    borrow: int


@dataclass(frozen=True, slots=True)
class _Attempt:
    mode: AssignmentMode
    no_fit_reason: str


@dataclass(frozen=True, slots=True)
class PodSetAssignmentResult:
    """Flavors, count and reasons for one pod set; ``requests`` are totals (with ``pods``)."""

    name: str
    flavors: Mapping[str, FlavorAssignment]
    reasons: tuple[str, ...]
    requests: Mapping[str, int]
    count: int
    attempts: Mapping[str, _Attempt] = field(default_factory=dict)

    def mode(self) -> AssignmentMode:
        """Worst mode over the pod set's flavors (Fit when nothing failed)."""
        if not self.reasons:
            return AssignmentMode.FIT
        if not self.flavors:
            return AssignmentMode.NO_FIT
        return min(fa.mode for fa in self.flavors.values())

    def message(self) -> str:
        """Reasons, sorted and comma separated as in Kueue."""
        return ", ".join(sorted(self.reasons))


@dataclass(frozen=True, slots=True)
class Assignment:
    """A workload's flavor assignment in one queue (Kueue ``flavorassigner.Assignment``).

    ``borrowing`` is the highest borrowing level over the assigned flavors, ``usage``
    the quota it would take, ``last_state`` the scan progress to carry to later cycles.
    """

    pod_sets: tuple[PodSetAssignmentResult, ...]
    borrowing: int
    usage: Mapping[FlavorResource, int]
    last_state: AssignmentState
    mode: AssignmentMode
    no_fit_reason: str = ""

    def with_mode(self, mode: AssignmentMode) -> Assignment:
        """The same assignment with another representative mode (e.g. DeferredFit)."""
        return replace(self, mode=mode)

    def message(self) -> str:
        """Kueue's "couldn't assign flavors to pod set ..." text; empty when everything fits."""
        parts = [
            f"couldn't assign flavors to pod set {ps.name}: {ps.message()}"
            for ps in self.pod_sets
            if ps.reasons
        ]
        return "; ".join(parts)

    def frs_needing_preemption(self) -> frozenset[FlavorResource]:
        """Flavor-resources assigned in Preempt mode (where victims must be found)."""
        return frozenset(
            FlavorResource(fa.flavor, resource)
            for ps in self.pod_sets
            for resource, fa in ps.flavors.items()
            if fa.mode is AssignmentMode.PREEMPT
        )

    def total_requests_for(self, info: WorkloadInfo) -> FlavorResourceQuantities:
        """Quota the workload needs at the assigned counts (``TotalRequestsFor``).

        Unlike ``usage`` this leaves out the automatic ``pods`` resource and zero
        requests, exactly as Kueue's preemption input does.
        """
        out: FlavorResourceQuantities = {}
        for ps_req, ps in zip(info.total_requests, self.pod_sets, strict=False):
            scaled = ps_req.scaled_to(ps.count)
            for resource, value in scaled.requests.items():
                if value == 0:
                    continue
                fa = ps.flavors.get(resource)
                if fa is None:
                    continue
                fr = FlavorResource(fa.flavor, resource)
                out[fr] = out.get(fr, 0) + value
        return out

    def to_admission(self, cluster_queue: str) -> Admission:
        """The ``status.admission`` this assignment becomes when admitted."""
        return Admission(
            cluster_queue,
            tuple(
                PodSetAssignment(
                    ps.name,
                    {r: fa.flavor for r, fa in ps.flavors.items()},
                    ps.count,
                    {r: ps.requests.get(r, 0) for r in ps.flavors},
                )
                for ps in self.pod_sets
            ),
        )

    def flavor_mapping(self) -> dict[str, dict[str, str]]:
        """Pod set name -> resource -> flavor, used to pin flavors when recomputing."""
        return {ps.name: {r: fa.flavor for r, fa in ps.flavors.items()} for ps in self.pod_sets}


class FlavorAssigner:
    """Assigns flavors to a pending workload in one cluster queue of a snapshot."""

    def __init__(
        self,
        info: WorkloadInfo,
        cq: ClusterQueueNode,
        flavors: Mapping[str, ResourceFlavorSpec],
        *,
        fair_sharing: bool,
        oracle: PreemptionOracle,
        last_assignment: AssignmentState | None,
        scheduling_cycle: int,
        nomination_mapping: Mapping[str, Mapping[str, str]] | None = None,
        slice_flavors: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.info = info
        self.cq = cq
        self.flavors = flavors
        self.fair_sharing = fair_sharing
        self.oracle = oracle
        self.last_assignment = last_assignment
        self.scheduling_cycle = scheduling_cycle
        self.nomination_mapping = nomination_mapping or None
        # A scale-up slice keeps the flavors of the slice it replaces (pod set name ->
        # resource -> flavor); any other flavor is NoFit.
        self.slice_flavors = slice_flavors
        preemption = cq.spec.preemption
        # Preempting while borrowing needs borrowWithinCohort, or fair sharing with a
        # reclaim policy; without it a borrowing request that does not fit is NoFit.
        self._can_preempt_while_borrowing = (
            preemption.borrow_within_cohort.policy is not BorrowWithinCohortPolicy.NEVER
            or (
                fair_sharing
                and preemption.reclaim_within_cohort is not ReclaimWithinCohortPolicy.NEVER
            )
        )

    def assign(self, counts: Sequence[int] | None = None) -> Assignment:
        """Assign flavors for the given pod counts (default: the full counts)."""
        cq = self.cq
        if counts is None:
            requests: Sequence[PodSetResources] = self.info.total_requests
        else:
            requests = [
                ps.scaled_to(c) for ps, c in zip(self.info.total_requests, counts, strict=True)
            ]
        usage: FlavorResourceQuantities = {}
        pod_sets: list[PodSetAssignmentResult] = []
        tried: list[dict[str, int]] = []
        borrowing = 0
        failed = False
        # Pod sets are assigned in order; each one sees the usage the earlier pod
        # sets of the same workload already took in a flavor ("assumed" usage).
        for index, ps in enumerate(requests):
            reqs = dict(ps.requests)
            # A queue covering "pods" charges one unit per pod automatically.
            if cq.covers_pods:
                reqs[PODS] = ps.count
            group_flavors: dict[str, FlavorAssignment] | None = {}
            group_reasons: list[str] = []
            attempts: dict[str, _Attempt] = {}
            # Sorted for determinism (Kueue iterates a map); the order only affects
            # which reasons are reported, never the chosen flavors or modes.
            for resource in sorted(reqs):
                # A zero request for a resource the queue does not cover is ignored.
                if resource not in cq.rg_by_resource and reqs[resource] == 0:
                    continue
                assert group_flavors is not None
                # Resources of one resource group share a flavor: assigned together.
                if resource in group_flavors:
                    continue
                found, reasons = self._find_flavor(index, ps.name, reqs, resource, usage, attempts)
                if not found:
                    group_flavors = None
                    group_reasons = reasons or []
                    break
                group_flavors.update(found)
                if reasons is not None:
                    group_reasons.extend(reasons)
            flavors = {r: fa for r, fa in (group_flavors or {}).items() if r in reqs}
            result = PodSetAssignmentResult(
                ps.name, flavors, tuple(group_reasons), reqs, ps.count, attempts
            )
            pod_sets.append(result)
            idx_map: dict[str, int] = {}
            for resource, fa in flavors.items():
                borrowing = max(borrowing, fa.borrow)
                fr = FlavorResource(fa.flavor, resource)
                usage[fr] = usage.get(fr, 0) + reqs.get(resource, 0)
                idx_map[resource] = fa.tried_flavor_idx
            tried.append(idx_map)
            if reqs and not flavors:
                # Kueue stops at the first pod set it cannot place at all.
                failed = True
                break
        mode = min(ps.mode() for ps in pod_sets) if pod_sets else AssignmentMode.NO_FIT
        state = AssignmentState(
            tuple(tried), cq.allocatable_generation, self.scheduling_cycle, self.info.hash
        )
        no_fit_reason = ""
        if mode is AssignmentMode.NO_FIT or failed:
            no_fit_reason = self._no_fit_reason(pod_sets) if mode is AssignmentMode.NO_FIT else ""
        return Assignment(tuple(pod_sets), borrowing, usage, state, mode, no_fit_reason)

    def _find_flavor(
        self,
        ps_index: int,
        ps_name: str,
        reqs: Mapping[str, int],
        resource: str,
        assignment_usage: Mapping[FlavorResource, int],
        attempts: dict[str, _Attempt],
    ) -> tuple[dict[str, FlavorAssignment], list[str] | None]:
        """Pick one flavor for every resource of ``resource``'s group (``findFlavorForPodSets``).

        Returns the assignment per resource (empty when none) and the reasons, or None
        for the reasons when the chosen flavor fits.
        """
        cq = self.cq
        rg = cq.rg_by_resource.get(resource)
        if rg is None:
            return {}, [f"resource {resource} unavailable in ClusterQueue"]
        fungibility = cq.spec.flavor_fungibility
        covered = [(r, reqs[r]) for r in sorted(reqs) if r in rg.covered_resources]
        reasons: list[str] = []
        best: dict[str, tuple[AssignmentMode, int]] | None = None
        best_flavor = ""
        best_mode = _WORST
        names = rg.flavor_names
        start = (
            self.last_assignment.next_flavor_to_try(ps_index, resource)
            if self.last_assignment is not None
            else 0
        )
        attempted = -1
        for idx in range(start, len(names)):
            attempted = idx
            flavor = names[idx]
            if self.nomination_mapping is not None and (
                self.nomination_mapping.get(ps_name, {}).get(resource) != flavor
            ):
                reasons.append(
                    f"skipping flavor {flavor} as it is not found in the nomination "
                    f"mapping for resource {resource}"
                )
                continue
            if flavor not in self.flavors:
                reasons.append(f"flavor {flavor} not found")
                attempts[flavor] = _Attempt(AssignmentMode.NO_FIT, REASON_NO_MATCHING_FLAVOR)
                continue
            mismatch = self._slice_flavor_mismatch(ps_name, covered, flavor)
            if mismatch:
                reasons.extend(mismatch)
                attempts[flavor] = _Attempt(AssignmentMode.NO_FIT, REASON_NO_MATCHING_FLAVOR)
                continue
            assigned: dict[str, tuple[AssignmentMode, int]] = {}
            representative = _BEST
            flavor_no_fit = ""
            # The flavor's mode is the worst mode over the group's resources; a
            # resource that does not fit disqualifies the flavor.
            for res, value in covered:
                fr = FlavorResource(flavor, res)
                mode, borrow, res_reasons, no_fit = self._fits_resource_quota(
                    fr, assignment_usage.get(fr, 0), value
                )
                if res_reasons:
                    reasons.extend(res_reasons)
                    flavor_no_fit = _most_severe(flavor_no_fit, no_fit)
                current = _Mode(mode, borrow)
                if _is_preferred(representative, current, fungibility):
                    representative = current
                if representative.mode is _Granular.NO_FIT:
                    continue
                assigned[res] = (mode.assignment_mode(), borrow)
            # Remember the outcome per flavor for the NoFit reason.
            previous = attempts.get(flavor)
            attempt = _Attempt(representative.mode.assignment_mode(), flavor_no_fit)
            if previous is not None:
                attempt = _Attempt(
                    min(previous.mode, attempt.mode),
                    _most_severe(previous.no_fit_reason, attempt.no_fit_reason),
                )
            attempts[flavor] = attempt
            # Fungibility: stop at the first acceptable flavor, or keep the best one
            # seen and look further.
            if not _should_try_next_flavor(representative, fungibility):
                best, best_flavor, best_mode = assigned, flavor, representative
                break
            if _is_preferred(representative, best_mode, fungibility):
                best, best_flavor, best_mode = assigned, flavor, representative
        # Remember how far the scan went; -1 restarts it from the first flavor next time.
        tried_idx = -1 if attempted == len(names) - 1 else attempted
        chosen = {
            r: FlavorAssignment(best_flavor, mode, tried_idx, borrow)
            for r, (mode, borrow) in (best or {}).items()
        }
        if best_mode.mode is _Granular.FIT:
            return chosen, None
        return chosen, reasons

    def _slice_flavor_mismatch(
        self, ps_name: str, covered: Sequence[tuple[str, int]], flavor: str
    ) -> list[str]:
        """Kueue's reasons when ``flavor`` is not the one the replaced slice holds."""
        if self.slice_flavors is None:
            return []
        original = self.slice_flavors.get(ps_name, {})
        return [
            f"could not assign {flavor} flavor since the original workload is assigned: "
            f"{original.get(resource, '')}"
            for resource, _ in covered
            if original.get(resource, "") != flavor
        ][:1]

    def _fits_resource_quota(
        self, fr: FlavorResource, assumed: int, request: int
    ) -> tuple[_Granular, int, list[str] | None, str]:
        """Mode, borrowing level, reasons and NoFit reason for one flavor-resource."""
        cq = self.cq
        avail = max(0, available(cq, fr))
        max_capacity = potential_available(cq, fr)
        value = assumed + request
        resource = fr.resource
        if value > max_capacity:
            return (
                _Granular.NO_FIT,
                0,
                [
                    f"insufficient quota for {resource} in flavor {fr.flavor}, previously "
                    f"considered podsets requests ({format_amount(resource, assumed)}) + "
                    f"current podset request ({format_amount(resource, request)}) > maximum "
                    f"capacity ({format_amount(resource, max_capacity)})"
                ],
                REASON_EXCEEDS_MAX_QUOTA,
            )
        # Fits now, possibly borrowing: the level says how far up the tree it borrows.
        borrow, may_reclaim = find_height_of_lowest_subtree_that_fits(cq, fr, value)
        if value <= avail:
            return _Granular.FIT, borrow, None, ""
        reasons = [
            f"insufficient unused quota for {resource} in flavor {fr.flavor}, "
            f"{format_amount(resource, value - avail)} more needed"
        ]
        # Preemption can only help when the request fits in nominal quota, quota can be
        # reclaimed higher in the tree, or the queue may preempt while borrowing.
        if cq.quota_for(fr).nominal >= value or may_reclaim or self._can_preempt_while_borrowing:
            possibility, borrow_after = self.oracle.simulate_preemption(cq, self.info, fr, value)
            return _FROM_POSSIBILITY[possibility], borrow_after, reasons, ""
        return _Granular.NO_FIT, borrow, reasons, REASON_WAITING_FOR_QUOTA

    def _no_fit_reason(self, pod_sets: Sequence[PodSetAssignmentResult]) -> str:
        """QuotaReserved reason of a NoFit assignment (``resolveNoFitReason``).

        Within a resource group flavors are alternatives (take the least severe), across
        groups they are all needed (take the most severe).
        """
        overall = ""
        groups = self.cq.spec.resource_groups
        for ps in pod_sets:
            if ps.mode() is not AssignmentMode.NO_FIT:
                continue
            if not ps.attempts:
                overall = _most_severe(overall, REASON_NO_MATCHING_FLAVOR)
                continue
            rg_min: dict[int, str] = {}
            for i, (flavor, attempt) in enumerate(ps.attempts.items()):
                if attempt.mode is not AssignmentMode.NO_FIT:
                    continue
                indices = [n for n, rg in enumerate(groups) if flavor in rg.flavor_names]
                for rg_idx in indices or [-1 - i]:
                    existing = rg_min.get(rg_idx)
                    if existing is None or _SEVERITY.get(attempt.no_fit_reason, 0) < _SEVERITY.get(
                        existing, 0
                    ):
                        rg_min[rg_idx] = attempt.no_fit_reason
            ps_reason = ""
            for reason in rg_min.values():
                ps_reason = _most_severe(ps_reason, reason)
            # A pod set that failed without any NoFit flavor attempt hit a resource the
            # queue does not cover (Kueue reports NoMatchingFlavor when that resource is
            # looked at first; its map order makes the other outcome incidental).
            overall = _most_severe(overall, ps_reason or REASON_NO_MATCHING_FLAVOR)
        return overall
