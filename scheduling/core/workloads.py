"""Derived per-workload data the cycle needs (Kueue ``pkg/workload/workload.go`` ``Info``).

A ``WorkloadInfo`` is computed once per workload: total requests per pod set (per-pod
requests times count, or the admission's resource usage for an admitted workload), the
quota it holds, and its scheduling-equivalence hash. ``AssignmentState`` is the flavor
scan progress (Kueue's ``LastAssignment``) that a pending workload carries between cycles.

``held_admission`` and ``held_usage`` are the one definition of the quota a workload
holds: every reader (the cycle's snapshot, the API status, the UI, metrics, history)
computes usage through them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduling.core.lifecycle import counted_pods
from scheduling.core.resources import FlavorResource, FlavorResourceQuantities
from scheduling.core.types import Admission, PodSetAssignment, Workload

__all__ = [
    "AssignmentState",
    "PodSetResources",
    "WorkloadInfo",
    "held_admission",
    "held_usage",
    "scheduling_hash",
]


@dataclass(frozen=True, slots=True)
class PodSetResources:
    """Total requests of a pod set for ``count`` pods, and its flavors once admitted."""

    name: str
    count: int
    requests: Mapping[str, int]
    flavors: Mapping[str, str]

    def scaled_to(self, new_count: int) -> PodSetResources:
        """The same pod set resized to ``new_count`` pods (Kueue ``ScaledTo``).

        Totals are divided by the old count then multiplied, as Kueue does, which is
        exact because totals are always a multiple of the count.
        """
        if self.count == 0 or self.count == new_count:
            return self
        requests = {r: v // self.count * new_count for r, v in self.requests.items()}
        return PodSetResources(self.name, new_count, requests, self.flavors)


def scheduling_hash(workload: Workload) -> str:
    """The scheduling-equivalence hash: same priority and pod set shapes, same hash.

    Mirrors ``computeSchedulingHash``: workloads with equal hashes get the same flavor
    assignment from the same cluster state, so the queue can park them together.
    """
    if workload.shape_hash:
        return workload.shape_hash
    shape = (
        workload.priority,
        tuple(
            (ps.name, ps.count, ps.min_count, tuple(sorted(ps.requests.items())))
            for ps in workload.pod_sets
        ),
    )
    digest = hashlib.sha256(repr(shape).encode()).hexdigest()[:16]
    # Workloads are immutable, so the hash is cached on the instance.
    object.__setattr__(workload, "shape_hash", digest)
    return digest


class WorkloadInfo:
    """A workload plus what the cycle derives from it; built once, then read-only.

    ``cluster_queue`` is the queue holding its quota (admitted) or the queue it is being
    scheduled into (pending head). ``usage`` is the quota an admitted workload holds.
    """

    __slots__ = (
        "cluster_queue",
        "flavor_resources",
        "key",
        "priority",
        "total_requests",
        "usage",
        "workload",
        "_hash",
    )

    def __init__(self, workload: Workload, cluster_queue: str | None = None) -> None:
        self.workload = workload
        self.key = workload.key
        self.priority = workload.priority
        admission = workload.admission
        self._hash: str | None = None
        if admission is not None:
            self.cluster_queue = cluster_queue or admission.cluster_queue
            self.total_requests = _requests_from_admission(workload)
        else:
            self.cluster_queue = cluster_queue or ""
            self.total_requests = _requests_from_pod_sets(workload)
        self.usage = _usage(self.total_requests)
        # Every (flavor, resource) named by the admission, even with a zero request;
        # Kueue's WorkloadUsesResources looks at the flavor map, not the amounts.
        self.flavor_resources = frozenset(
            FlavorResource(flavor, resource)
            for ps in self.total_requests for resource, flavor in ps.flavors.items())

    @property
    def hash(self) -> str:
        """Scheduling-equivalence hash, computed on first use."""
        if self._hash is None:
            self._hash = scheduling_hash(self.workload)
        return self._hash

    def __repr__(self) -> str:
        return f"WorkloadInfo({self.key!r}, cq={self.cluster_queue!r})"


def _requests_from_pod_sets(workload: Workload) -> tuple[PodSetResources, ...]:
    return tuple(
        PodSetResources(
            ps.name,
            ps.count,
            {r: max(0, v) * ps.count for r, v in ps.requests.items()},
            {},
        )
        for ps in workload.pod_sets
    )


def _requests_from_admission(workload: Workload) -> tuple[PodSetResources, ...]:
    assert workload.admission is not None
    return _assigned_requests(workload.admission)


def _assigned_requests(admission: Admission) -> tuple[PodSetResources, ...]:
    return tuple(
        PodSetResources(psa.name, psa.count, dict(psa.resource_usage), dict(psa.flavors))
        for psa in admission.pod_sets
    )


def _usage(pod_sets: tuple[PodSetResources, ...]) -> FlavorResourceQuantities:
    """Quota per flavor and resource of pod sets with flavors (an unassigned resource
    holds none)."""
    usage: FlavorResourceQuantities = {}
    for ps in pod_sets:
        for resource, value in ps.requests.items():
            assigned = ps.flavors.get(resource)
            if assigned is not None:
                fr = FlavorResource(assigned, resource)
                usage[fr] = usage.get(fr, 0) + value
    return usage


def held_admission(
    admission: Admission, spec_counts: Mapping[str, int], reclaimable: Mapping[str, int],
) -> Admission:
    """The admission as it holds quota now (Kueue ``totalRequestsFromAdmission``).

    ``status.admission`` never changes while set, but a pod set holds quota only for the
    pods it still has: its spec count (smaller after an elastic scale-down in place) less
    the pods its job declared reclaimable. A pod set with fewer pods than admitted holds
    the per-pod usage times that count (``PodSetResources.scaled_to``); the others hold
    what the admission says. ``spec_counts`` and ``reclaimable`` are by pod set name.
    """
    assignments = []
    for psa in admission.pod_sets:
        count = counted_pods(psa.count, spec_counts.get(psa.name, psa.count),
                             reclaimable.get(psa.name, 0))
        if count < psa.count:
            scaled = PodSetResources(psa.name, psa.count, psa.resource_usage,
                                     psa.flavors).scaled_to(count)
            psa = PodSetAssignment(psa.name, psa.flavors, count, scaled.requests)
        assignments.append(psa)
    return Admission(admission.cluster_queue, tuple(assignments))


def held_usage(admission: Admission) -> FlavorResourceQuantities:
    """Quota per flavor and resource that ``admission`` (a ``held_admission``) holds."""
    return _usage(_assigned_requests(admission))


@dataclass(frozen=True, slots=True)
class AssignmentState:
    """Flavor-scan progress carried by a pending workload (Kueue ``AssignmentClusterQueueState``).

    ``last_tried_flavor_idx[i][resource]`` is the index of the last flavor examined for
    pod set ``i``, or -1 when the scan reached the end (so the next scan starts over).
    The state is dropped when the workload's shape changed, or when it is older than the
    previous cycle and the cluster queue's allocatable generation moved on.
    """

    last_tried_flavor_idx: tuple[Mapping[str, int], ...]
    cluster_queue_generation: int
    scheduling_cycle: int
    scheduling_hash: str

    def pending_flavors(self) -> bool:
        """Whether some resource still has untried flavors."""
        return any(idx != -1 for m in self.last_tried_flavor_idx for idx in m.values())

    def next_flavor_to_try(self, pod_set: int, resource: str) -> int:
        """Index of the first flavor to examine for this pod set and resource."""
        if pod_set >= len(self.last_tried_flavor_idx):
            return 0
        idx = self.last_tried_flavor_idx[pod_set].get(resource)
        return 0 if idx is None else idx + 1

    def is_outdated(self, cq_generation: int, cycle: int, current_hash: str) -> bool:
        """Kueue ``lastAssignmentOutdated`` with FlavorFungibilityPreserveScanProgress on."""
        if self.scheduling_hash != current_hash:
            return True
        # Progress from this or the previous cycle survives generation bumps, which a
        # busy cohort produces on every admission.
        if cycle - self.scheduling_cycle <= 1:
            return False
        return cq_generation > self.cluster_queue_generation

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form for persistence."""
        return {
            "lastTriedFlavorIdx": [dict(m) for m in self.last_tried_flavor_idx],
            "clusterQueueGeneration": self.cluster_queue_generation,
            "schedulingCycle": self.scheduling_cycle,
            "schedulingHash": self.scheduling_hash,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AssignmentState:
        """Inverse of ``to_dict``."""
        return cls(
            tuple(
                {str(k): int(v) for k, v in m.items()} for m in data.get("lastTriedFlavorIdx", [])
            ),
            int(data.get("clusterQueueGeneration", 0)),
            int(data.get("schedulingCycle", 0)),
            str(data.get("schedulingHash", "")),
        )
