"""The quota tree a cycle works on (Kueue ``pkg/cache/scheduler``).

Every ClusterQueue and Cohort is a *resource node* with, per (flavor, resource):

* ``quotas``: its own nominal quota and borrowing/lending limits;
* ``subtree_quota``: a queue's nominal, or a cohort's own nominal plus what its children
  lend it (their subtree quota minus the part they keep local);
* ``usage``: a queue's admitted usage, or for a cohort the usage that spills out of each
  child's local (non-lendable) quota.

The formulas follow ``resource_node.go`` exactly; ``available`` and
``potential_available`` walk up to the root, honouring borrowing limits on the way.
A ``Snapshot`` is mutated while a cycle simulates preemptions and admissions; the
``simulate_*`` context managers always restore it, so no search leaks state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from scheduling.core.resources import PODS, FlavorResource, FlavorResourceQuantities
from scheduling.core.types import (
    ClusterQueueSpec,
    CohortSpec,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    Workload,
)
from scheduling.core.workloads import WorkloadInfo

__all__ = [
    "ClusterQueueNode",
    "CohortNode",
    "QuotaNode",
    "Snapshot",
    "available",
    "borrowed",
    "borrowing_with",
    "find_height_of_lowest_subtree_that_fits",
    "has_child_over_nominal",
    "is_within_nominal",
    "local_available",
    "local_quota",
    "potential_available",
    "quantities_fit_in_quota",
    "usage_in_parent",
]

# Reasons a ClusterQueue is left out of scheduling (its usage still counts in its cohort).
INACTIVE_STOPPED = "Stopped"
INACTIVE_FLAVOR_NOT_FOUND = "FlavorNotFound"
INACTIVE_HAS_CYCLE = "HasCycle"


class QuotaNode:
    """State shared by queues and cohorts: quotas, subtree quota, usage, parent."""

    __slots__ = ("fair_weight", "name", "parent", "quotas", "subtree_quota", "usage")

    name: str
    parent: CohortNode | None
    quotas: dict[FlavorResource, ResourceQuota]
    subtree_quota: FlavorResourceQuantities
    usage: FlavorResourceQuantities
    fair_weight: float

    def ancestors(self) -> Iterator[CohortNode]:
        """Cohorts from the parent up to the root."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent

    def root(self) -> QuotaNode:
        """The root of this node's tree (the node itself when it has no parent)."""
        node: QuotaNode = self
        while node.parent is not None:
            node = node.parent
        return node


class CohortNode(QuotaNode):
    """A cohort in the snapshot; children are the active queues and acyclic cohorts."""

    __slots__ = ("child_cohorts", "child_cqs", "height", "lendable", "over_nominal", "spec")

    spec: CohortSpec
    child_cohorts: list[CohortNode]
    child_cqs: list[ClusterQueueNode]
    height: int
    # Per flavor-resource: how many children (queues, active or not, and cohorts) use
    # more than their subtree quota. ``add_usage`` and ``remove_usage`` keep it as usage
    # changes, so a preemption search can tell that no child of a cohort borrows
    # without looking at each of them (``has_child_over_nominal``).
    over_nominal: dict[FlavorResource, int]
    # Per resource name: what this cohort could lend if the whole tree were empty. It
    # depends on quotas only, so it is computed once and shared by clones (DRS input).
    lendable: dict[str, int]

    def subtree_cluster_queues(self) -> list[ClusterQueueNode]:
        """Every active queue below this cohort, depth first in name order."""
        out = list(self.child_cqs)
        for child in self.child_cohorts:
            out.extend(child.subtree_cluster_queues())
        return out

    def __repr__(self) -> str:
        return f"CohortNode({self.name!r})"


class ClusterQueueNode(QuotaNode):
    """A cluster queue in the snapshot, with the workloads holding its quota."""

    __slots__ = (
        "allocatable_generation",
        "covers_pods",
        "path",
        "rg_by_resource",
        "spec",
        "workloads",
    )

    spec: ClusterQueueSpec
    workloads: dict[str, WorkloadInfo]
    rg_by_resource: dict[str, ResourceGroup]
    covers_pods: bool
    allocatable_generation: int
    # "/root/.../queue", used in preemption messages.
    path: str

    def quota_for(self, fr: FlavorResource) -> ResourceQuota:
        """The queue's own quota for ``fr`` (zero nominal when the flavor lacks it)."""
        return self.quotas.get(fr, _ZERO_QUOTA)

    def borrowing(self, fr: FlavorResource) -> bool:
        """Usage above nominal."""
        return borrowing_with(self, fr, 0)

    def __repr__(self) -> str:
        return f"ClusterQueueNode({self.name!r})"


_ZERO_QUOTA = ResourceQuota(0)


# --- formulas of resource_node.go -------------------------------------------------


def local_quota(node: QuotaNode, fr: FlavorResource) -> int:
    """The part of the node's subtree quota it never lends to its parent."""
    quota = node.quotas.get(fr)
    if quota is None or quota.lending_limit is None:
        return 0
    return max(0, node.subtree_quota.get(fr, 0) - quota.lending_limit)


def local_available(node: QuotaNode, fr: FlavorResource) -> int:
    """Unused local (non-lendable) quota."""
    return max(0, local_quota(node, fr) - node.usage.get(fr, 0))


def available(node: QuotaNode, fr: FlavorResource) -> int:
    """Capacity usable right now without preemption (Kueue ``available``; may be < 0)."""
    parent = node.parent
    if parent is None:
        # The root owns everything below it: what is left of its subtree quota.
        return node.subtree_quota.get(fr, 0) - node.usage.get(fr, 0)
    # Otherwise: unused local quota plus whatever the parent can still give.
    parent_available = available(parent, fr)
    quota = node.quotas.get(fr)
    lq = local_quota(node, fr)
    usage = node.usage.get(fr, 0)
    if quota is not None and quota.borrowing_limit is not None:
        # What this node keeps in the parent, minus what it already uses there, plus
        # what it may borrow on top: the parent's capacity is capped by that.
        stored_in_parent = node.subtree_quota.get(fr, 0) - lq
        used_in_parent = max(0, usage - lq)
        parent_available = min(
            stored_in_parent - used_in_parent + quota.borrowing_limit, parent_available
        )
    return max(0, lq - usage) + parent_available


def potential_available(node: QuotaNode, fr: FlavorResource) -> int:
    """Capacity the node could reach if every other workload were gone."""
    parent = node.parent
    if parent is None:
        return node.subtree_quota.get(fr, 0)
    # Same shape as ``available`` with every usage taken as zero.
    avail = local_quota(node, fr) + potential_available(parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        avail = min(node.subtree_quota.get(fr, 0) + quota.borrowing_limit, avail)
    return avail


def add_usage(node: QuotaNode, fr: FlavorResource, value: int) -> None:
    """Add usage; what exceeds the node's unused local quota also lands in the parent."""
    while True:
        used = node.usage.get(fr, 0)
        free_local = max(0, local_quota(node, fr) - used)
        node.usage[fr] = used + value
        parent = node.parent
        if parent is None:
            return
        _count_over_nominal(node, parent, fr, used, used + value)
        if value <= free_local:
            return
        value -= free_local
        node = parent


def remove_usage(node: QuotaNode, fr: FlavorResource, value: int) -> None:
    """Remove usage; the parent gives back at most what this node had stored there."""
    while True:
        used = node.usage.get(fr, 0)
        # Local quota is consumed first when adding, so it is released last: only
        # usage beyond it was ever charged to the parent.
        stored_in_parent = used - local_quota(node, fr)
        node.usage[fr] = used - value
        parent = node.parent
        if parent is None:
            return
        _count_over_nominal(node, parent, fr, used, used - value)
        if stored_in_parent <= 0:
            return
        value = min(value, stored_in_parent)
        node = parent


def _count_over_nominal(
    node: QuotaNode, parent: CohortNode, fr: FlavorResource, before: int, after: int
) -> None:
    # Keeps ``parent.over_nominal`` in step with the node's usage of ``fr``.
    quota = node.subtree_quota.get(fr, 0)
    over = after > quota
    if (before > quota) is not over:
        counts = parent.over_nominal
        counts[fr] = counts.get(fr, 0) + (1 if over else -1)


def has_child_over_nominal(cohort: CohortNode, frs: Iterable[FlavorResource]) -> bool:
    """Whether some child of ``cohort`` uses more than its subtree quota on one of ``frs``.

    False means ``is_within_nominal`` holds for every child, so a search for queues
    above nominal can skip the cohort's children; it costs a lookup per flavor-resource
    instead of a check per child (a cohort may have hundreds of queues).
    """
    counts = cohort.over_nominal
    return any(counts.get(fr, 0) > 0 for fr in frs)


def usage_in_parent(node: QuotaNode, fr: FlavorResource) -> int:
    """Usage beyond the node's local (guaranteed, non-lendable) quota: what its parent sees."""
    return max(0, node.usage.get(fr, 0) - local_quota(node, fr))


def borrowed(node: QuotaNode, fr: FlavorResource) -> int:
    """Usage above the subtree quota, as Kueue reports ``borrowed`` (0 without a parent)."""
    if node.parent is None:
        return 0
    return max(0, node.usage.get(fr, 0) - node.subtree_quota.get(fr, 0))


def borrowing_with(node: QuotaNode, fr: FlavorResource, value: int) -> bool:
    """Whether usage plus ``value`` exceeds the node's subtree quota."""
    return node.subtree_quota.get(fr, 0) < node.usage.get(fr, 0) + value


def is_within_nominal(node: QuotaNode, frs: Iterable[FlavorResource]) -> bool:
    """No usage above subtree quota on any of ``frs``."""
    # A plain loop: preemption calls this for every cluster queue of a cohort per
    # preemptor, and a generator inside all() costs more than the comparisons.
    quota, usage = node.subtree_quota, node.usage
    for fr in frs:  # noqa: SIM110 - see above
        if quota.get(fr, 0) < usage.get(fr, 0):
            return False
    return True


def quantities_fit_in_quota(
    node: QuotaNode, requests: Mapping[FlavorResource, int]
) -> tuple[bool, FlavorResourceQuantities]:
    """Whether ``requests`` fit in the node's own subtree quota, and what must come from above."""
    fits = True
    remaining: FlavorResourceQuantities = {}
    for fr, value in requests.items():
        if node.subtree_quota.get(fr, 0) < node.usage.get(fr, 0) + value:
            fits = False
        remaining[fr] = max(0, value - local_available(node, fr))
    return fits, remaining


# --- the snapshot -----------------------------------------------------------------


def _quotas_of(groups: Iterable[ResourceGroup]) -> dict[FlavorResource, ResourceQuota]:
    out: dict[FlavorResource, ResourceQuota] = {}
    for rg in groups:
        for flavor in rg.flavors:
            for resource, quota in flavor.resources.items():
                out[FlavorResource(flavor.name, resource)] = quota
    return out


class Snapshot:
    """Quota tree + admitted workloads for one cycle.

    Build it with ``Snapshot.build`` from specs and the workloads holding quota, or
    ``clone()`` a long-lived one (usage maps are copied, quotas are shared). Only active
    queues take part in scheduling, but inactive ones keep counting in their cohort.
    """

    __slots__ = (
        "_all_cqs",
        "cluster_queues",
        "cohorts",
        "flavors",
        "inactive",
        "namespaces",
    )

    cluster_queues: dict[str, ClusterQueueNode]
    cohorts: dict[str, CohortNode]
    flavors: dict[str, ResourceFlavorSpec]
    inactive: dict[str, str]
    namespaces: dict[str, Mapping[str, str]] | None
    _all_cqs: dict[str, ClusterQueueNode]

    @classmethod
    def build(
        cls,
        *,
        flavors: Iterable[ResourceFlavorSpec],
        cohorts: Iterable[CohortSpec],
        cluster_queues: Iterable[ClusterQueueSpec],
        admitted: Iterable[Workload | WorkloadInfo] = (),
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        generations: Mapping[str, int] | None = None,
        inactive: Mapping[str, str] | None = None,
    ) -> Snapshot:
        """Build the tree like Kueue's cache + ``Cache.Snapshot``.

        ``namespaces`` maps namespace names to their labels; ``None`` means every
        namespace exists with no labels. ``generations`` are the queues' allocatable
        resource generations (bumped by the caller whenever a workload leaves a queue
        or its quota changes). ``inactive`` marks queues the caller knows are inactive
        for other reasons (e.g. a missing admission check), name -> reason.
        Admitted workloads naming an unknown queue are ignored. An admitted workload may
        come as the ``WorkloadInfo`` of one (read-only, so a caller may keep it from one
        snapshot to the next instead of deriving it again).
        """
        snap = cls.__new__(cls)
        snap.flavors = {f.name: f for f in flavors}
        snap.namespaces = dict(namespaces) if namespaces is not None else None
        snap.inactive = dict(inactive or {})
        cq_specs = {spec.name: spec for spec in cluster_queues}
        cohort_specs = {c.name: c for c in cohorts}
        # Cohorts only named by a queue or as a parent exist implicitly, without quota.
        for spec in cq_specs.values():
            if spec.cohort and spec.cohort not in cohort_specs:
                cohort_specs[spec.cohort] = CohortSpec(spec.cohort)
        for c in list(cohort_specs.values()):
            if c.parent and c.parent not in cohort_specs:
                cohort_specs[c.parent] = CohortSpec(c.parent)
        # A cohort whose parent chain loops is left out entirely and its queues are
        # inactive until the loop is broken (Kueue: HasCycle).
        cyclic = _cohorts_in_cycles(cohort_specs)

        snap.cohorts = {}
        for name in sorted(cohort_specs):
            if name in cyclic:
                continue
            snap.cohorts[name] = _new_cohort(cohort_specs[name])
        for name in sorted(snap.cohorts):
            cohort = snap.cohorts[name]
            if cohort.spec.parent:
                parent = snap.cohorts[cohort.spec.parent]
                cohort.parent = parent
                parent.child_cohorts.append(cohort)

        # Every queue gets a node so its usage counts in its cohort; only active
        # ones are offered to the scheduler in ``cluster_queues``.
        gens = generations or {}
        snap._all_cqs = {}
        snap.cluster_queues = {}
        for name in sorted(cq_specs):
            cq_spec = cq_specs[name]
            cq = _new_cluster_queue(cq_spec, gens.get(name, 0))
            reason = snap.inactive.get(name)
            if reason is None:
                if cq_spec.stop_policy is not StopPolicy.NONE:
                    reason = INACTIVE_STOPPED
                elif any(f not in snap.flavors for f in cq_spec.flavor_names()):
                    reason = INACTIVE_FLAVOR_NOT_FOUND
                elif cq_spec.cohort and cq_spec.cohort in cyclic:
                    reason = INACTIVE_HAS_CYCLE
            if cq_spec.cohort and cq_spec.cohort not in cyclic:
                cq.parent = snap.cohorts[cq_spec.cohort]
            snap._all_cqs[name] = cq
            if reason is None:
                snap.cluster_queues[name] = cq
            else:
                snap.inactive[name] = reason

        for item in admitted:
            wl = item.workload if isinstance(item, WorkloadInfo) else item
            if wl.admission is None:
                continue
            holder = snap._all_cqs.get(wl.admission.cluster_queue)
            if holder is None:
                continue
            info = item if isinstance(item, WorkloadInfo) else WorkloadInfo(wl)
            holder.workloads[info.key] = info
            for fr, value in info.usage.items():
                holder.usage[fr] = holder.usage.get(fr, 0) + value

        # Cohort quota and usage are aggregated bottom-up over *all* member queues,
        # active or not (Kueue computes them in the cache, before the snapshot drops
        # inactive queues), while only active queues become scheduling children.
        members: dict[str, list[ClusterQueueNode]] = {}
        for cq in snap._all_cqs.values():
            if cq.parent is not None:
                members.setdefault(cq.parent.name, []).append(cq)
                if cq.name in snap.cluster_queues:
                    cq.parent.child_cqs.append(cq)
        for root in [c for c in snap.cohorts.values() if c.parent is None]:
            _accumulate(root, members)
        for cohort in snap.cohorts.values():
            for child in [*cohort.child_cohorts, *members.get(cohort.name, ())]:
                for fr, used in child.usage.items():
                    if used > child.subtree_quota.get(fr, 0):
                        cohort.over_nominal[fr] = cohort.over_nominal.get(fr, 0) + 1
        for cohort in snap.cohorts.values():
            cohort.height = _height(cohort)
        for cohort in snap.cohorts.values():
            cohort.lendable = _lendable(cohort)
        for cq in snap._all_cqs.values():
            parts = [cq.name] + [a.name for a in cq.ancestors()]
            cq.path = "/" + "/".join(reversed(parts))
        return snap

    def clone(self) -> Snapshot:
        """A copy whose usage and workload maps can be mutated independently."""
        # Quotas, subtree quotas and lendable capacity never change during a cycle,
        # so they are shared; only usage and workload membership are copied (what
        # Kueue's resourceNode.Clone() copies too).
        snap = Snapshot.__new__(Snapshot)
        snap.flavors = self.flavors
        snap.namespaces = self.namespaces
        snap.inactive = self.inactive
        cohorts: dict[str, CohortNode] = {}
        for name, old in self.cohorts.items():
            node = CohortNode()
            node.name = name
            node.spec = old.spec
            node.quotas = old.quotas
            node.subtree_quota = old.subtree_quota
            node.usage = dict(old.usage)
            node.fair_weight = old.fair_weight
            node.height = old.height
            node.lendable = old.lendable
            node.over_nominal = dict(old.over_nominal)
            node.child_cohorts = []
            node.child_cqs = []
            node.parent = None
            cohorts[name] = node
        for name, old in self.cohorts.items():
            node = cohorts[name]
            if old.parent is not None:
                node.parent = cohorts[old.parent.name]
            node.child_cohorts = [cohorts[c.name] for c in old.child_cohorts]
        all_cqs: dict[str, ClusterQueueNode] = {}
        for name, old_cq in self._all_cqs.items():
            cq = ClusterQueueNode()
            cq.name = name
            cq.spec = old_cq.spec
            cq.quotas = old_cq.quotas
            cq.subtree_quota = old_cq.subtree_quota
            cq.usage = dict(old_cq.usage)
            cq.fair_weight = old_cq.fair_weight
            cq.workloads = dict(old_cq.workloads)
            cq.rg_by_resource = old_cq.rg_by_resource
            cq.covers_pods = old_cq.covers_pods
            cq.allocatable_generation = old_cq.allocatable_generation
            cq.path = old_cq.path
            cq.parent = cohorts[old_cq.parent.name] if old_cq.parent is not None else None
            all_cqs[name] = cq
        for name, old in self.cohorts.items():
            cohorts[name].child_cqs = [all_cqs[c.name] for c in old.child_cqs]
        snap.cohorts = cohorts
        snap._all_cqs = all_cqs
        snap.cluster_queues = {n: all_cqs[n] for n in self.cluster_queues}
        return snap

    # --- workload bookkeeping -----------------------------------------------------

    def cluster_queue(self, name: str) -> ClusterQueueNode | None:
        """An active queue by name."""
        return self.cluster_queues.get(name)

    def any_cluster_queue(self, name: str) -> ClusterQueueNode | None:
        """A queue by name, active or not."""
        return self._all_cqs.get(name)

    def add_workload(self, info: WorkloadInfo) -> None:
        """Account a workload holding quota in ``info.cluster_queue``."""
        cq = self._all_cqs[info.cluster_queue]
        cq.workloads[info.key] = info
        for fr, value in info.usage.items():
            add_usage(cq, fr, value)

    def remove_workload(self, info: WorkloadInfo) -> None:
        """Stop accounting a workload (inverse of ``add_workload``)."""
        cq = self._all_cqs[info.cluster_queue]
        cq.workloads.pop(info.key, None)
        for fr, value in info.usage.items():
            remove_usage(cq, fr, value)

    def release_workload(self, key: str, cluster_queue: str) -> WorkloadInfo | None:
        """A workload really left the queue: remove it and bump the queue's generation."""
        cq = self._all_cqs.get(cluster_queue)
        if cq is None:
            return None
        info = cq.workloads.get(key)
        if info is None:
            return None
        self.remove_workload(info)
        cq.allocatable_generation += 1
        return info

    @contextmanager
    def simulate_usage_removal(self, infos: Iterable[WorkloadInfo]) -> Iterator[None]:
        """Temporarily drop the usage of ``infos`` (they stay listed in their queues)."""
        removed = list(infos)
        for info in removed:
            cq = self._all_cqs[info.cluster_queue]
            for fr, value in info.usage.items():
                remove_usage(cq, fr, value)
        try:
            yield
        finally:
            for info in removed:
                cq = self._all_cqs[info.cluster_queue]
                for fr, value in info.usage.items():
                    add_usage(cq, fr, value)

    @contextmanager
    def simulate_workload_removal(self, infos: Iterable[WorkloadInfo]) -> Iterator[None]:
        """Temporarily remove ``infos`` entirely (usage and queue membership)."""
        removed = list(infos)
        for info in removed:
            self.remove_workload(info)
        try:
            yield
        finally:
            for info in removed:
                self.add_workload(info)

    @contextmanager
    def simulate_usage_addition(
        self, cq: ClusterQueueNode, usage: Mapping[FlavorResource, int]
    ) -> Iterator[None]:
        """Temporarily charge ``usage`` to ``cq`` (bubbling up to its cohorts)."""
        for fr, value in usage.items():
            add_usage(cq, fr, value)
        try:
            yield
        finally:
            for fr, value in usage.items():
                remove_usage(cq, fr, value)

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """Labels of a namespace, or None when it does not exist."""
        if self.namespaces is None:
            return {"kubernetes.io/metadata.name": namespace}
        return self.namespaces.get(namespace)


def _new_cohort(spec: CohortSpec) -> CohortNode:
    node = CohortNode()
    node.name = spec.name
    node.spec = spec
    node.parent = None
    node.quotas = _quotas_of(spec.resource_groups)
    node.subtree_quota = {}
    node.usage = {}
    node.fair_weight = spec.fair_weight
    node.child_cohorts = []
    node.child_cqs = []
    node.height = 0
    node.lendable = {}
    node.over_nominal = {}
    return node


def _new_cluster_queue(spec: ClusterQueueSpec, generation: int) -> ClusterQueueNode:
    cq = ClusterQueueNode()
    cq.name = spec.name
    cq.spec = spec
    cq.parent = None
    cq.quotas = _quotas_of(spec.resource_groups)
    cq.subtree_quota = {fr: q.nominal for fr, q in cq.quotas.items()}
    cq.usage = {}
    cq.fair_weight = spec.fair_weight
    cq.workloads = {}
    cq.rg_by_resource = {r: rg for rg in spec.resource_groups for r in rg.covered_resources}
    cq.covers_pods = PODS in cq.rg_by_resource
    cq.allocatable_generation = generation
    cq.path = ""
    return cq


def _cohorts_in_cycles(specs: Mapping[str, CohortSpec]) -> set[str]:
    """Cohorts whose parent chain loops (Kueue ``hierarchy.HasCycle``)."""
    bad: set[str] = set()
    good: set[str] = set()
    for start in specs:
        path: list[str] = []
        seen: set[str] = set()
        name: str | None = start
        while name is not None and name not in good and name not in bad:
            if name in seen:
                bad.update(path)
                break
            seen.add(name)
            path.append(name)
            name = specs[name].parent if name in specs else None
        else:
            if name is not None and name in bad:
                bad.update(path)
            else:
                good.update(path)
    return bad


def _accumulate(cohort: CohortNode, members: Mapping[str, list[ClusterQueueNode]]) -> None:
    """Recompute subtree quota and usage of ``cohort`` from its children.

    Mirrors ``updateCohortResourceNode``; ``members`` lists every queue of each cohort,
    active or not.
    """
    cohort.subtree_quota = {fr: q.nominal for fr, q in cohort.quotas.items()}
    cohort.usage = {}
    for child in cohort.child_cohorts:
        _accumulate(child, members)
        _accumulate_from_child(cohort, child)
    for cq in members.get(cohort.name, ()):
        _accumulate_from_child(cohort, cq)


def _accumulate_from_child(parent: CohortNode, child: QuotaNode) -> None:
    # The parent only sees what a child lends (its subtree quota minus the local
    # part) and only the usage that spills out of the child's local quota.
    for fr, quota in child.subtree_quota.items():
        parent.subtree_quota[fr] = parent.subtree_quota.get(fr, 0) + quota - local_quota(child, fr)
    for fr, used in child.usage.items():
        spill = max(0, used - local_quota(child, fr))
        parent.usage[fr] = parent.usage.get(fr, 0) + spill


def _height(cohort: CohortNode) -> int:
    """Distance to the furthest leaf: 1 for a cohort of queues (``getNodeHeight``)."""
    height = min(len(cohort.child_cohorts) + len(cohort.child_cqs), 1)
    for child in cohort.child_cohorts:
        height = max(height, _height(child) + 1)
    return height


def _lendable(cohort: CohortNode) -> dict[str, int]:
    """Per resource name, the potential capacity of ``cohort`` over all flavors of the tree."""
    # The root's subtree quota names every flavor-resource of the tree (zeros
    # included), so summing over it covers all flavors of each resource.
    root = cohort.root()
    out: dict[str, int] = {}
    for fr in root.subtree_quota:
        out[fr.resource] = out.get(fr.resource, 0) + potential_available(cohort, fr)
    return out


def find_height_of_lowest_subtree_that_fits(
    cq: ClusterQueueNode, fr: FlavorResource, value: int
) -> tuple[int, bool]:
    """Borrowing level of ``value`` more of ``fr`` in ``cq``, and whether reclaim may help.

    Level 0 means the queue's own nominal quota suffices. Otherwise walk up from the
    parent to the first cohort whose subtree quota covers what the levels below cannot
    provide and return its height; the flag says that cohort still has a parent, so
    quota above it could be reclaimed (``FindHeightOfLowestSubtreeThatFits``).
    """
    parent = cq.parent
    if parent is None or not borrowing_with(cq, fr, value):
        return 0, parent is not None
    remaining = value - local_available(cq, fr)
    node: CohortNode | None = parent
    while node is not None:
        if not borrowing_with(node, fr, remaining):
            return node.height, node.parent is not None
        remaining -= local_available(node, fr)
        node = node.parent
    root = parent.root()
    assert isinstance(root, CohortNode)
    return root.height, False
