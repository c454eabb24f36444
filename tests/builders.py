"""Short keyword builders for engine objects and scenario documents.

The Python counterpart of Kueue's ``pkg/util/testing/v1beta2/wrappers.go``: tests say
``cluster_queue("cq", quotas={"default": {"cpu": "4"}})`` instead of spelling every
dataclass. Quantities are Kubernetes strings and are converted exactly like the loader
does. Extend a builder rather than building objects by hand in a test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduling.core import (
    Admission,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohortPolicy,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    StopPolicy,
    WithinClusterQueuePolicy,
    Workload,
    quantity_to_int,
)
from scheduling.core.workloads import WorkloadInfo

# A quota is "4" (nominal only) or (nominal, borrowingLimit, lendingLimit) with None gaps.
QuotaArg = str | int | tuple[str | int | None, ...]
# flavor -> resource -> quota; one mapping per resource group.
Quotas = Mapping[str, Mapping[str, QuotaArg]]


def quota(resource: str, value: QuotaArg) -> ResourceQuota:
    """A ``ResourceQuota`` from "4" or ("4", borrowingLimit, lendingLimit)."""
    if not isinstance(value, tuple):
        return ResourceQuota(quantity_to_int(resource, value))
    nominal, *rest = value
    limits = [*rest, None, None][:2]
    return ResourceQuota(
        quantity_to_int(resource, nominal if nominal is not None else 0),
        None if limits[0] is None else quantity_to_int(resource, limits[0]),
        None if limits[1] is None else quantity_to_int(resource, limits[1]),
    )


def resource_group(flavors: Mapping[str, Mapping[str, QuotaArg]]) -> ResourceGroup:
    """One resource group; flavors keep the mapping's (preference) order."""
    covered: list[str] = []
    for resources in flavors.values():
        for res in resources:
            if res not in covered:
                covered.append(res)
    return ResourceGroup(
        tuple(covered),
        tuple(
            FlavorQuotas(name, {r: quota(r, q) for r, q in resources.items()})
            for name, resources in flavors.items()
        ),
    )


def cluster_queue(
    name: str,
    *,
    quotas: Quotas | None = None,
    groups: Sequence[Quotas] = (),
    cohort: str | None = None,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    within: WithinClusterQueuePolicy = WithinClusterQueuePolicy.NEVER,
    reclaim: ReclaimWithinCohortPolicy = ReclaimWithinCohortPolicy.NEVER,
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER,
    threshold: int | None = None,
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH,
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR,
    preference: FungibilityPreference | None = None,
    weight: float = 1.0,
    namespace_selector: LabelSelector | None = None,
    stop_policy: StopPolicy = StopPolicy.NONE,
) -> ClusterQueueSpec:
    """A ClusterQueue; ``quotas`` is a single resource group, ``groups`` several."""
    all_groups = ([quotas] if quotas is not None else []) + list(groups)
    return ClusterQueueSpec(
        name=name,
        resource_groups=tuple(resource_group(g) for g in all_groups),
        cohort=cohort,
        queueing_strategy=strategy,
        namespace_selector=namespace_selector
        if namespace_selector is not None
        else LabelSelector(),
        preemption=PreemptionPolicy(
            within, reclaim, BorrowWithinCohort(borrow_within_cohort, threshold)
        ),
        flavor_fungibility=FlavorFungibility(when_can_borrow, when_can_preempt, preference),
        fair_weight=weight,
        stop_policy=stop_policy,
    )


def cohort(
    name: str, *, parent: str | None = None, quotas: Quotas | None = None, weight: float = 1.0
) -> CohortSpec:
    """A Cohort, optionally with its own quota and parent."""
    groups = (resource_group(quotas),) if quotas is not None else ()
    return CohortSpec(name, parent, groups, weight)


def flavors(*names: str) -> list[ResourceFlavorSpec]:
    """ResourceFlavors by name."""
    return [ResourceFlavorSpec(n) for n in names]


def pod_set(
    name: str = "main", count: int = 1, *, min_count: int | None = None, **requests: str | int
) -> PodSet:
    """A pod set with per-pod requests; ``example_com__gpu`` spells ``example.com/gpu``."""
    reqs = {_resource_name(k): quantity_to_int(_resource_name(k), v) for k, v in requests.items()}
    return PodSet(name, count, reqs, min_count)


def _resource_name(key: str) -> str:
    return key.replace("__", "/").replace("_", ".")


def workload(
    name: str,
    *,
    namespace: str = "default",
    queue: str | None = "lq",
    priority: int = 0,
    created: float = 0.0,
    uid: str | None = None,
    pod_sets: Sequence[PodSet] | None = None,
    count: int = 1,
    min_count: int | None = None,
    evicted: str | None = None,
    **requests: str | int,
) -> Workload:
    """A pending workload; without ``pod_sets`` a single ``main`` pod set of ``requests``."""
    sets = (
        tuple(pod_sets)
        if pod_sets is not None
        else (pod_set("main", count, min_count=min_count, **requests),)
    )
    return Workload(
        namespace=namespace,
        name=name,
        pod_sets=sets,
        queue_name=queue,
        priority=priority,
        creation_time=created,
        uid=uid if uid is not None else name,
        evicted_reason=evicted,
        evicted_time=0.0 if evicted else None,
    )


def admitted(
    name: str,
    cq: str,
    flavor: str | Mapping[str, str] = "default",
    *,
    namespace: str = "default",
    priority: int = 0,
    admitted_at: float = 0.0,
    count: int = 1,
    pod_sets: Sequence[PodSet] | None = None,
    evicted: str | None = None,
    **requests: str | int,
) -> Workload:
    """A workload holding quota in ``cq``; ``flavor`` is one flavor or resource -> flavor."""
    base = workload(
        name,
        namespace=namespace,
        queue=None,
        priority=priority,
        pod_sets=pod_sets,
        count=count,
        evicted=evicted,
        **requests,
    )
    assignments = []
    for ps in base.pod_sets:
        flv = {r: flavor for r in ps.requests} if isinstance(flavor, str) else dict(flavor)
        usage = {r: v * ps.count for r, v in ps.requests.items() if r in flv}
        if "pods" in flv:
            usage["pods"] = ps.count
        assignments.append(PodSetAssignment(ps.name, flv, ps.count, usage))
    return Workload(
        namespace=base.namespace,
        name=base.name,
        pod_sets=base.pod_sets,
        priority=priority,
        uid=base.uid,
        admission=Admission(cq, tuple(assignments)),
        quota_reserved_time=admitted_at,
        evicted_reason=evicted,
        evicted_time=base.evicted_time,
    )


def snapshot(
    cluster_queues: Iterable[ClusterQueueSpec],
    *,
    cohorts: Iterable[CohortSpec] = (),
    admitted_workloads: Iterable[Workload | WorkloadInfo] = (),
    flavor_names: Iterable[str] | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    generations: Mapping[str, int] | None = None,
) -> Snapshot:
    """A snapshot; flavors default to every flavor the queues and cohorts mention."""
    cqs = list(cluster_queues)
    cohort_list = list(cohorts)
    if flavor_names is None:
        names: set[str] = set()
        for spec in [*cqs, *cohort_list]:
            for rg in spec.resource_groups:
                names.update(rg.flavor_names)
        flavor_names = sorted(names)
    return Snapshot.build(
        flavors=flavors(*flavor_names),
        cohorts=cohort_list,
        cluster_queues=cqs,
        admitted=list(admitted_workloads),
        namespaces=namespaces,
        generations=generations,
    )


# --- scenario documents (the conformance YAML shape) ------------------------------


def doc_quota(
    name: str, nominal: str | int, bl: str | int | None = None, ll: str | int | None = None
) -> dict[str, Any]:
    """A resource entry of a scenario flavor."""
    return {
        "name": name,
        "nominalQuota": str(nominal),
        "borrowingLimit": None if bl is None else str(bl),
        "lendingLimit": None if ll is None else str(ll),
    }


def doc_group(*flavor_entries: tuple[str, Sequence[dict[str, Any]]]) -> dict[str, Any]:
    """A scenario resource group from (flavor, [doc_quota(...)]) pairs."""
    covered: list[str] = []
    for _, resources in flavor_entries:
        for r in resources:
            if r["name"] not in covered:
                covered.append(r["name"])
    return {
        "coveredResources": covered,
        "flavors": [{"name": f, "resources": list(rs)} for f, rs in flavor_entries],
    }


def doc_cluster_queue(
    name: str,
    *groups: dict[str, Any],
    cohort: str | None = None,
    strategy: str = "BestEffortFIFO",
    within: str = "Never",
    reclaim: str = "Never",
    bwc: str = "Never",
    threshold: int | None = None,
    when_can_borrow: str = "Borrow",
    when_can_preempt: str = "TryNextFlavor",
    preference: str | None = None,
    weight: str | None = None,
    namespace_label: str | None = None,
) -> dict[str, Any]:
    """A scenario ClusterQueue; ``namespace_label`` selects namespaces with ``dep=<value>``."""
    doc: dict[str, Any] = {
        "name": name,
        "cohort": cohort,
        "queueingStrategy": strategy,
        "preemption": {
            "withinClusterQueue": within,
            "reclaimWithinCohort": reclaim,
            "borrowWithinCohort": {"policy": bwc, "maxPriorityThreshold": threshold},
        },
        "flavorFungibility": {"whenCanBorrow": when_can_borrow, "whenCanPreempt": when_can_preempt},
        "resourceGroups": list(groups),
    }
    if preference:
        doc["flavorFungibility"]["preference"] = preference
    if weight is not None:
        doc["fairSharing"] = {"weight": weight}
    if namespace_label is not None:
        doc["namespaceSelector"] = {
            "matchExpressions": [{"key": "dep", "operator": "In", "values": [namespace_label]}]
        }
    return doc


def doc_cohort(name: str, parent: str | None = None, *groups: dict[str, Any]) -> dict[str, Any]:
    """A scenario Cohort."""
    doc: dict[str, Any] = {"name": name, "parent": parent}
    if groups:
        doc["resourceGroups"] = list(groups)
    return doc


def doc_pod_set(
    name: str, count: int, min_count: int | None = None, **requests: str | int
) -> dict[str, Any]:
    """A scenario pod set (``example_com__gpu`` spells ``example.com/gpu``)."""
    doc: dict[str, Any] = {
        "name": name,
        "count": count,
        "requests": {_resource_name(k): str(v) for k, v in requests.items()},
    }
    if min_count is not None:
        doc["minCount"] = min_count
    return doc


def doc_workload(
    name: str,
    namespace: str,
    queue: str | None = None,
    *,
    priority: int = 0,
    created: float | None = None,
    uid: str | None = None,
    pod_sets: Sequence[dict[str, Any]] | None = None,
    admission: tuple[str, Mapping[str, str]] | None = None,
    admitted_at: float | None = None,
    **requests: str | int,
) -> dict[str, Any]:
    """A scenario workload; ``admission`` = (cluster queue, resource -> flavor) for all pod sets."""
    doc: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "queue": queue,
        "priority": priority,
    }
    if created is not None:
        doc["created"] = created
    if uid is not None:
        doc["uid"] = uid
    doc["podSets"] = list(pod_sets) if pod_sets else [doc_pod_set("main", 1, **requests)]
    if admission is not None:
        cq, flv = admission
        doc["admission"] = {
            "clusterQueue": cq,
            "podSets": [
                {"name": p["name"], "flavors": dict(flv), "count": p["count"]}
                for p in doc["podSets"]
            ],
        }
        if admitted_at is not None:
            doc["admittedAt"] = admitted_at
    return doc


def doc_admission(cq: str, *pod_sets: tuple[str, Mapping[str, str], int]) -> dict[str, Any]:
    """An expected admission: (pod set, resource -> flavor, count) triples."""
    return {
        "clusterQueue": cq,
        "podSets": [{"name": n, "flavors": dict(f), "count": c} for n, f, c in pod_sets],
    }


def doc_scenario(
    *,
    cluster_queues: Sequence[dict[str, Any]],
    local_queues: Sequence[tuple[str, str, str]],
    flavors: Sequence[str],
    cohorts: Sequence[dict[str, Any]] = (),
    admitted: Sequence[dict[str, Any]] = (),
    pending: Sequence[dict[str, Any]] = (),
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    fair_sharing: bool = False,
    partial_admission: bool = True,
    until_stable: bool = False,
    name: str = "case",
) -> dict[str, Any]:
    """A whole scenario document; local queues are (namespace, name, cluster queue)."""
    doc: dict[str, Any] = {
        "name": name,
        "flavors": [{"name": f} for f in flavors],
        "cohorts": list(cohorts),
        "clusterQueues": list(cluster_queues),
        "localQueues": [
            {"namespace": ns, "name": n, "clusterQueue": cq} for ns, n, cq in local_queues
        ],
        "config": {"fairSharing": fair_sharing, "partialAdmission": partial_admission},
        "admitted": list(admitted),
        "pending": list(pending),
    }
    if namespaces is not None:
        doc["namespaces"] = [{"name": k, "labels": dict(v)} for k, v in namespaces.items()]
    if until_stable:
        doc["cycles"] = "until-stable"
    return doc
