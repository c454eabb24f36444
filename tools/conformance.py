"""Run the conformance scenarios (the ``simulate`` command's logic).

A scenario (``shared/conformance/README.md``) is loaded into engine specs with errors
that name the file and the field. ``run_scenario`` runs it through the production
admission path: the scenario becomes the rows of a throw-away domain, the reconciler's
cycle (``admission.run_admission_cycle``) runs once or until nothing changes, and the
outcome is read back from the rows; the transaction is rolled back, so nothing stays.

``run_scenario_in_engine`` runs the same scenario through the pure engine alone (a
``Snapshot`` and a ``QueueManager``, no database): the reference the differential test
holds the production path to.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.db import transaction

from multicluster.models import Cluster
from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.core import (
    Admission,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    CyclePolicy,
    CycleResult,
    FairSharingStrategy,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    LabelSelectorRequirement,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    QuantityError,
    QueueingStrategy,
    QueueManager,
    ReclaimWithinCohortPolicy,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    SelectorOperator,
    Snapshot,
    StopPolicy,
    WithinClusterQueuePolicy,
    Workload,
    WorkloadInfo,
    parse_quantity,
    quantity_to_int,
    run_cycle,
)
from scheduling.core.ordering import EVICTED_BY_PREEMPTION, queue_order_timestamp
from scheduling.core.quantities import int_to_quantity
from scheduling.core.resources import PODS
from scheduling.models import (
    ClusterQueue,
    Cohort,
    FlavorQuota,
    LocalQueue,
    ParkedShape,
    ResourceFlavor,
)
from scheduling.models import Workload as WorkloadRow
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

__all__ = [
    "LocalQueueSpec",
    "Scenario",
    "ScenarioError",
    "check_outcome",
    "load_scenario",
    "load_scenario_file",
    "outcome_to_json",
    "run_scenario",
    "scenario_paths",
]

# Cap for until-stable runs: far above what any scenario needs, so a bug cannot hang.
MAX_CYCLES = 10_000


class ScenarioError(ValueError):
    """A scenario that cannot be loaded; the message names the file and the field."""

    def __init__(self, source: str, field_path: str, message: str) -> None:
        self.source = source
        self.field_path = field_path
        location = f"{source}: {field_path}" if field_path else source
        super().__init__(f"{location}: {message}")


@dataclass(frozen=True, slots=True)
class LocalQueueSpec:
    """A LocalQueue: namespace, name and the ClusterQueue it points at."""

    namespace: str
    name: str
    cluster_queue: str


@dataclass(frozen=True)
class Scenario:
    """A loaded scenario, ready to run."""

    name: str
    source: str
    until_stable: bool
    flavors: tuple[ResourceFlavorSpec, ...]
    cohorts: tuple[CohortSpec, ...]
    cluster_queues: tuple[ClusterQueueSpec, ...]
    local_queues: tuple[LocalQueueSpec, ...]
    namespaces: Mapping[str, Mapping[str, str]]
    policy: CyclePolicy
    admitted: tuple[Workload, ...]
    pending: tuple[Workload, ...]
    expect: Mapping[str, Any] | None = None
    description: str = ""


# --- loading ------------------------------------------------------------------------


class _Reader:
    """Typed access to a YAML tree that reports the failing field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> ScenarioError:
        return ScenarioError(self.source, path, message)

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected a mapping, got {_kind(value)}")
        return value

    def seq(self, value: Any, path: str) -> Sequence[Any]:
        if value is None:
            return ()
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list, got {_kind(value)}")
        return value

    def string(self, obj: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str:
        value = obj.get(key)
        if value is None:
            if required:
                raise self.fail(_join(path, key), "is required")
            return ""
        if not isinstance(value, str) or not value:
            raise self.fail(_join(path, key), f"expected a non-empty string, got {_kind(value)}")
        return value

    def optional_string(self, obj: Mapping[str, Any], key: str, path: str) -> str | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(_join(path, key), f"expected a string or null, got {_kind(value)}")
        return value or None

    def integer(
        self, obj: Mapping[str, Any], key: str, path: str, default: int | None = None
    ) -> int:
        value = obj.get(key)
        if value is None:
            if default is None:
                raise self.fail(_join(path, key), "is required")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(_join(path, key), f"expected an integer, got {_kind(value)}")
        return int(value)

    def number(self, obj: Mapping[str, Any], key: str, path: str, default: float) -> float:
        value = obj.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(_join(path, key), f"expected a number, got {_kind(value)}")
        return float(value)

    def boolean(self, obj: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
        value = obj.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(_join(path, key), f"expected true or false, got {_kind(value)}")
        return value

    def choice(
        self, obj: Mapping[str, Any], key: str, path: str, allowed: Mapping[str, Any], default: Any
    ) -> Any:
        value = obj.get(key)
        if value is None:
            return default
        if not isinstance(value, str) or value not in allowed:
            options = ", ".join(sorted(allowed))
            raise self.fail(_join(path, key), f"{value!r} is not one of {options}")
        return allowed[value]

    def quantity(self, resource: str, value: Any, path: str) -> int:
        try:
            return quantity_to_int(resource, value)
        except QuantityError as exc:
            raise self.fail(path, str(exc)) from None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return type(value).__name__


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _enum_map(enum: Iterable[Any]) -> dict[str, Any]:
    return {member.value: member for member in enum}


_FUNGIBILITY_BORROW = {
    "Borrow": FungibilityPolicy.MAY_STOP_SEARCH,
    "MayStopSearch": FungibilityPolicy.MAY_STOP_SEARCH,
    "TryNextFlavor": FungibilityPolicy.TRY_NEXT_FLAVOR,
}
_FUNGIBILITY_PREEMPT = {
    "Preempt": FungibilityPolicy.MAY_STOP_SEARCH,
    "MayStopSearch": FungibilityPolicy.MAY_STOP_SEARCH,
    "TryNextFlavor": FungibilityPolicy.TRY_NEXT_FLAVOR,
}


def load_scenario_file(path: Path | str) -> Scenario:
    """Load a scenario file; every problem is a ``ScenarioError`` naming file and field."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(source, "", f"cannot read file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(source, "", f"invalid YAML: {where}{problem}") from None
    return load_scenario(data, source=source)


def load_scenario(data: Any, *, source: str = "<scenario>") -> Scenario:
    """Turn a scenario document (already parsed YAML/JSON) into engine specs."""
    r = _Reader(source)
    doc = r.mapping(data, "")
    name = r.string(doc, "name", "")
    cycles = doc.get("cycles")
    if cycles is not None and cycles != "until-stable":
        raise r.fail("cycles", f"{cycles!r} is not supported: omit it or use until-stable")

    flavors = tuple(
        _flavor(r, f, f"flavors[{i}]") for i, f in enumerate(r.seq(doc.get("flavors"), "flavors"))
    )
    cohorts = tuple(
        _cohort(r, c, f"cohorts[{i}]") for i, c in enumerate(r.seq(doc.get("cohorts"), "cohorts"))
    )
    cqs = tuple(
        _cluster_queue(r, c, f"clusterQueues[{i}]")
        for i, c in enumerate(r.seq(doc.get("clusterQueues"), "clusterQueues"))
    )
    _unique(r, [c.name for c in cqs], "clusterQueues")
    _unique(r, [c.name for c in cohorts], "cohorts")
    lqs = tuple(
        _local_queue(r, q, f"localQueues[{i}]")
        for i, q in enumerate(r.seq(doc.get("localQueues"), "localQueues"))
    )
    _unique(r, [f"{q.namespace}/{q.name}" for q in lqs], "localQueues")
    policy = _config(r, doc.get("config"))
    admitted = tuple(
        _workload(r, w, f"admitted[{i}]", admitted=True)
        for i, w in enumerate(r.seq(doc.get("admitted"), "admitted"))
    )
    pending = tuple(
        _workload(r, w, f"pending[{i}]", admitted=False)
        for i, w in enumerate(r.seq(doc.get("pending"), "pending"))
    )
    _unique(r, [w.key for w in admitted + pending], "admitted/pending")
    queue_names = {cq.name for cq in cqs}
    for i, wl in enumerate(admitted):
        assert wl.admission is not None
        if wl.admission.cluster_queue not in queue_names:
            raise r.fail(f"admitted[{i}].admission.clusterQueue",
                         f"{wl.admission.cluster_queue!r} is not in clusterQueues")

    namespaces: dict[str, dict[str, str]] = {}
    for wl in admitted + pending:
        namespaces.setdefault(wl.namespace, {})
    for lq in lqs:
        namespaces.setdefault(lq.namespace, {})
    for i, ns in enumerate(r.seq(doc.get("namespaces"), "namespaces")):
        path = f"namespaces[{i}]"
        obj = r.mapping(ns, path)
        ns_name = r.string(obj, "name", path)
        namespaces[ns_name] = dict(_string_map(r, obj.get("labels"), f"{path}.labels"))
    for ns_name, labels in namespaces.items():
        # Kubernetes labels every namespace with its own name.
        labels.setdefault("kubernetes.io/metadata.name", ns_name)

    expect = doc.get("expect")
    if expect is not None:
        expect = _normalise_expect(r, expect)
    description = doc.get("description")
    return Scenario(
        name=name,
        source=source,
        until_stable=cycles == "until-stable",
        flavors=flavors,
        cohorts=cohorts,
        cluster_queues=cqs,
        local_queues=lqs,
        namespaces=namespaces,
        policy=policy,
        admitted=admitted,
        pending=pending,
        expect=expect,
        description=description if isinstance(description, str) else "",
    )


def _unique(r: _Reader, names: list[str], path: str) -> None:
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise r.fail(path, f"{n!r} is defined more than once")
        seen.add(n)


def _string_map(r: _Reader, value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    obj = r.mapping(value, path)
    out: dict[str, str] = {}
    for k, v in obj.items():
        if not isinstance(k, str) or not isinstance(v, str | int | float) or isinstance(v, bool):
            raise r.fail(f"{path}.{k}", f"expected a string value, got {_kind(v)}")
        out[k] = str(v)
    return out


def _flavor(r: _Reader, value: Any, path: str) -> ResourceFlavorSpec:
    obj = r.mapping(value, path)
    return ResourceFlavorSpec(
        r.string(obj, "name", path), _string_map(r, obj.get("nodeLabels"), f"{path}.nodeLabels")
    )


def _fair_weight(r: _Reader, obj: Mapping[str, Any], path: str) -> float:
    fs = obj.get("fairSharing")
    if fs is None:
        return 1.0
    fs_obj = r.mapping(fs, f"{path}.fairSharing")
    weight = fs_obj.get("weight")
    if weight is None:
        return 1.0
    try:
        return float(parse_quantity(weight))
    except QuantityError as exc:
        raise r.fail(f"{path}.fairSharing.weight", str(exc)) from None


def _resource_groups(r: _Reader, value: Any, path: str) -> tuple[ResourceGroup, ...]:
    groups: list[ResourceGroup] = []
    seen_resources: set[str] = set()
    for i, rg in enumerate(r.seq(value, path)):
        rg_path = f"{path}[{i}]"
        rg_obj = r.mapping(rg, rg_path)
        covered_raw = r.seq(rg_obj.get("coveredResources"), f"{rg_path}.coveredResources")
        covered: list[str] = []
        for j, res in enumerate(covered_raw):
            if not isinstance(res, str) or not res:
                raise r.fail(f"{rg_path}.coveredResources[{j}]", "expected a resource name")
            if res in seen_resources:
                raise r.fail(
                    f"{rg_path}.coveredResources[{j}]", f"{res} is covered by two resource groups"
                )
            seen_resources.add(res)
            covered.append(res)
        flavors: list[FlavorQuotas] = []
        for j, fq in enumerate(r.seq(rg_obj.get("flavors"), f"{rg_path}.flavors")):
            f_path = f"{rg_path}.flavors[{j}]"
            f_obj = r.mapping(fq, f_path)
            f_name = r.string(f_obj, "name", f_path)
            quotas: dict[str, ResourceQuota] = {}
            for k, res_q in enumerate(r.seq(f_obj.get("resources"), f"{f_path}.resources")):
                q_path = f"{f_path}.resources[{k}]"
                q_obj = r.mapping(res_q, q_path)
                res_name = r.string(q_obj, "name", q_path)
                if res_name not in covered:
                    raise r.fail(f"{q_path}.name", f"{res_name} is not in coveredResources")
                if q_obj.get("nominalQuota") is None:
                    raise r.fail(f"{q_path}.nominalQuota", "is required")
                nominal = r.quantity(res_name, q_obj.get("nominalQuota"), f"{q_path}.nominalQuota")
                borrowing = q_obj.get("borrowingLimit")
                lending = q_obj.get("lendingLimit")
                quotas[res_name] = ResourceQuota(
                    nominal,
                    None
                    if borrowing is None
                    else r.quantity(res_name, borrowing, f"{q_path}.borrowingLimit"),
                    None
                    if lending is None
                    else r.quantity(res_name, lending, f"{q_path}.lendingLimit"),
                )
            flavors.append(FlavorQuotas(f_name, quotas))
        groups.append(ResourceGroup(tuple(covered), tuple(flavors)))
    return tuple(groups)


def _cohort(r: _Reader, value: Any, path: str) -> CohortSpec:
    obj = r.mapping(value, path)
    return CohortSpec(
        name=r.string(obj, "name", path),
        parent=r.optional_string(obj, "parent", path),
        resource_groups=_resource_groups(r, obj.get("resourceGroups"), f"{path}.resourceGroups"),
        fair_weight=_fair_weight(r, obj, path),
    )


def _selector(r: _Reader, value: Any, path: str) -> LabelSelector:
    if value is None:
        # The conformance README: an absent selector means every namespace.
        return LabelSelector()
    obj = r.mapping(value, path)
    labels = _string_map(r, obj.get("matchLabels"), f"{path}.matchLabels")
    ops = _enum_map(SelectorOperator)
    exprs: list[LabelSelectorRequirement] = []
    for i, e in enumerate(r.seq(obj.get("matchExpressions"), f"{path}.matchExpressions")):
        e_path = f"{path}.matchExpressions[{i}]"
        e_obj = r.mapping(e, e_path)
        key = r.string(e_obj, "key", e_path)
        op = r.choice(e_obj, "operator", e_path, ops, None)
        if op is None:
            raise r.fail(f"{e_path}.operator", "is required")
        values = tuple(str(v) for v in r.seq(e_obj.get("values"), f"{e_path}.values"))
        exprs.append(LabelSelectorRequirement(key, op, values))
    return LabelSelector(tuple(sorted(labels.items())), tuple(exprs))


def _cluster_queue(r: _Reader, value: Any, path: str) -> ClusterQueueSpec:
    obj = r.mapping(value, path)
    name = r.string(obj, "name", path)
    preemption = PreemptionPolicy()
    if obj.get("preemption") is not None:
        p_path = f"{path}.preemption"
        p = r.mapping(obj["preemption"], p_path)
        bwc = BorrowWithinCohort()
        if p.get("borrowWithinCohort") is not None:
            b_path = f"{p_path}.borrowWithinCohort"
            b = r.mapping(p["borrowWithinCohort"], b_path)
            threshold = b.get("maxPriorityThreshold")
            if threshold is not None and (
                isinstance(threshold, bool) or not isinstance(threshold, int)
            ):
                raise r.fail(
                    f"{b_path}.maxPriorityThreshold", f"expected an integer, got {_kind(threshold)}"
                )
            bwc = BorrowWithinCohort(
                r.choice(
                    b,
                    "policy",
                    b_path,
                    _enum_map(BorrowWithinCohortPolicy),
                    BorrowWithinCohortPolicy.NEVER,
                ),
                threshold,
            )
        preemption = PreemptionPolicy(
            r.choice(
                p,
                "withinClusterQueue",
                p_path,
                _enum_map(WithinClusterQueuePolicy),
                WithinClusterQueuePolicy.NEVER,
            ),
            r.choice(
                p,
                "reclaimWithinCohort",
                p_path,
                _enum_map(ReclaimWithinCohortPolicy),
                ReclaimWithinCohortPolicy.NEVER,
            ),
            bwc,
        )
    fungibility = FlavorFungibility()
    if obj.get("flavorFungibility") is not None:
        f_path = f"{path}.flavorFungibility"
        f = r.mapping(obj["flavorFungibility"], f_path)
        fungibility = FlavorFungibility(
            r.choice(
                f, "whenCanBorrow", f_path, _FUNGIBILITY_BORROW, FungibilityPolicy.MAY_STOP_SEARCH
            ),
            r.choice(
                f, "whenCanPreempt", f_path, _FUNGIBILITY_PREEMPT, FungibilityPolicy.TRY_NEXT_FLAVOR
            ),
            r.choice(f, "preference", f_path, _enum_map(FungibilityPreference), None),
        )
    return ClusterQueueSpec(
        name=name,
        cohort=r.optional_string(obj, "cohort", path) or r.optional_string(obj, "cohortName", path),
        resource_groups=_resource_groups(r, obj.get("resourceGroups"), f"{path}.resourceGroups"),
        queueing_strategy=r.choice(
            obj,
            "queueingStrategy",
            path,
            _enum_map(QueueingStrategy),
            QueueingStrategy.BEST_EFFORT_FIFO,
        ),
        namespace_selector=_selector(r, obj.get("namespaceSelector"), f"{path}.namespaceSelector"),
        preemption=preemption,
        flavor_fungibility=fungibility,
        fair_weight=_fair_weight(r, obj, path),
        stop_policy=r.choice(obj, "stopPolicy", path, _enum_map(StopPolicy), StopPolicy.NONE),
    )


def _local_queue(r: _Reader, value: Any, path: str) -> LocalQueueSpec:
    obj = r.mapping(value, path)
    return LocalQueueSpec(
        r.string(obj, "namespace", path),
        r.string(obj, "name", path),
        r.string(obj, "clusterQueue", path),
    )


def _config(r: _Reader, value: Any) -> CyclePolicy:
    if value is None:
        return CyclePolicy()
    obj = r.mapping(value, "config")
    strategies = tuple(
        r.choice(
            {"s": s},
            "s",
            f"config.fairSharingPreemptionStrategies[{i}]",
            _enum_map(FairSharingStrategy),
            None,
        )
        for i, s in enumerate(
            r.seq(
                obj.get("fairSharingPreemptionStrategies"), "config.fairSharingPreemptionStrategies"
            )
        )
    )
    policy = CyclePolicy(
        fair_sharing=r.boolean(obj, "fairSharing", "config", False),
        partial_admission=r.boolean(obj, "partialAdmission", "config", True),
    )
    if strategies:
        policy = dataclasses.replace(policy, fair_sharing_strategies=strategies)
    return policy


def _workload(r: _Reader, value: Any, path: str, *, admitted: bool) -> Workload:
    obj = r.mapping(value, path)
    name = r.string(obj, "name", path)
    namespace = r.string(obj, "namespace", path)
    pod_sets: list[PodSet] = []
    raw_pod_sets = obj.get("podSets")
    if raw_pod_sets is None:
        raw_pod_sets = [{"name": "main", "count": 1}]
    for i, ps in enumerate(r.seq(raw_pod_sets, f"{path}.podSets")):
        ps_path = f"{path}.podSets[{i}]"
        ps_obj = r.mapping(ps, ps_path)
        count = r.integer(ps_obj, "count", ps_path, default=1)
        if count < 0:
            raise r.fail(f"{ps_path}.count", "must not be negative")
        min_count = ps_obj.get("minCount")
        if min_count is not None:
            min_count = r.integer(ps_obj, "minCount", ps_path)
            if not 0 < min_count <= count:
                raise r.fail(f"{ps_path}.minCount", f"must be between 1 and count ({count})")
        requests_obj = ps_obj.get("requests")
        requests: dict[str, int] = {}
        if requests_obj is not None:
            for res, qty in r.mapping(requests_obj, f"{ps_path}.requests").items():
                requests[str(res)] = r.quantity(str(res), qty, f"{ps_path}.requests.{res}")
        pod_sets.append(
            PodSet(
                r.string(ps_obj, "name", ps_path, required=False) or "main",
                count,
                requests,
                min_count,
            )
        )
    _unique(r, [ps.name for ps in pod_sets], f"{path}.podSets")
    admission: Admission | None = None
    if admitted:
        admission = _admission(r, obj.get("admission"), f"{path}.admission", pod_sets)
    uid = obj.get("uid")
    evicted = obj.get("evicted")
    evicted_reason: str | None = None
    if evicted is not None and evicted is not False:
        # Optional: a workload already marked for eviction (Evicted=True); a string
        # names the eviction reason.
        if evicted is True:
            evicted_reason = EVICTED_BY_PREEMPTION
        elif isinstance(evicted, str) and evicted:
            evicted_reason = evicted
        else:
            raise r.fail(
                f"{path}.evicted", f"expected true, false or a reason, got {_kind(evicted)}"
            )
    return Workload(
        namespace=namespace,
        name=name,
        pod_sets=tuple(pod_sets),
        queue_name=r.optional_string(obj, "queue", path),
        priority=r.integer(obj, "priority", path, default=0),
        creation_time=r.number(obj, "created", path, 0.0),
        uid=str(uid) if uid is not None else "",
        admission=admission,
        quota_reserved_time=r.number(obj, "admittedAt", path, 0.0) if admitted else None,
        evicted_reason=evicted_reason,
        evicted_time=0.0 if evicted_reason is not None else None,
    )


def _admission(r: _Reader, value: Any, path: str, pod_sets: Sequence[PodSet]) -> Admission:
    if value is None:
        raise r.fail(path, "is required for an admitted workload")
    obj = r.mapping(value, path)
    cq = r.string(obj, "clusterQueue", path)
    by_name = {ps.name: ps for ps in pod_sets}
    assignments: list[PodSetAssignment] = []
    for i, psa in enumerate(r.seq(obj.get("podSets"), f"{path}.podSets")):
        a_path = f"{path}.podSets[{i}]"
        a_obj = r.mapping(psa, a_path)
        ps_name = r.string(a_obj, "name", a_path, required=False) or "main"
        ps = by_name.get(ps_name)
        if ps is None:
            raise r.fail(f"{a_path}.name", f"no pod set named {ps_name!r} in podSets")
        flavors = _string_map(r, a_obj.get("flavors"), f"{a_path}.flavors")
        count = r.integer(a_obj, "count", a_path, default=ps.count)
        usage = {res: v * count for res, v in ps.requests.items() if res in flavors}
        if PODS in flavors and PODS not in usage:
            # Kueue charges one pods unit per pod when the queue covers "pods".
            usage[PODS] = count
        assignments.append(PodSetAssignment(ps_name, flavors, count, usage))
    return Admission(cq, tuple(assignments))


def _normalise_expect(r: _Reader, value: Any) -> dict[str, Any]:
    obj = r.mapping(value, "expect")
    admitted: dict[str, Any] = {}
    raw_admitted = obj.get("admitted") or {}
    for key, adm in r.mapping(raw_admitted, "expect.admitted").items():
        a_path = f"expect.admitted.{key}"
        a_obj = r.mapping(adm, a_path)
        pod_sets = []
        for i, ps in enumerate(r.seq(a_obj.get("podSets"), f"{a_path}.podSets")):
            ps_obj = r.mapping(ps, f"{a_path}.podSets[{i}]")
            pod_sets.append(
                {
                    "name": str(ps_obj.get("name", "main")),
                    "flavors": _string_map(
                        r, ps_obj.get("flavors"), f"{a_path}.podSets[{i}].flavors"
                    ),
                    "count": ps_obj.get("count"),
                }
            )
        admitted[str(key)] = {"clusterQueue": a_obj.get("clusterQueue"), "podSets": pod_sets}
    preempted = sorted(str(k) for k in r.seq(obj.get("preempted"), "expect.preempted"))
    pending = sorted(str(k) for k in r.seq(obj.get("pending"), "expect.pending"))
    return {"admitted": admitted, "preempted": preempted, "pending": pending}


def scenario_paths(paths: Iterable[Path | str]) -> list[Path]:
    """Files to run: each file as given, each folder's ``*.yaml`` sorted by name."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(sorted(path.glob("*.yaml")))
        else:
            out.append(path)
    return out


# --- running ------------------------------------------------------------------------


def _admission_json(admission: Admission) -> dict[str, Any]:
    return {
        "clusterQueue": admission.cluster_queue,
        "podSets": [
            {"name": ps.name, "flavors": dict(sorted(ps.flavors.items())), "count": ps.count}
            for ps in admission.pod_sets
        ],
    }


def run_scenario_in_engine(
    scenario: Scenario, *, on_cycle: Callable[[CycleResult], None] | None = None
) -> dict[str, Any]:
    """Run a scenario through the pure engine alone (``QueueManager`` and ``run_cycle``) and
    return its outcome in the ``--json`` shape (without ``name``).

    The reference the production path is compared with (``tests/scheduling/
    test_queue_differential.py``) and what the engine's own case tests run, without a
    database. ``on_cycle`` receives every cycle's full result (decisions with their
    messages).
    """
    state = Snapshot.build(
        flavors=scenario.flavors,
        cohorts=scenario.cohorts,
        cluster_queues=scenario.cluster_queues,
        admitted=scenario.admitted,
        namespaces=scenario.namespaces,
    )
    queues = QueueManager(requeuing_timestamp=scenario.policy.requeuing_timestamp)
    queues.set_namespaces(scenario.namespaces)
    for cohort in scenario.cohorts:
        queues.add_or_update_cohort(cohort.name, cohort.parent)
    for cq in scenario.cluster_queues:
        queues.add_or_update_cluster_queue(cq, inactive_reason=state.inactive.get(cq.name))
    for lq in scenario.local_queues:
        queues.add_or_update_local_queue(lq.namespace, lq.name, lq.cluster_queue)
    now = 0.0
    for wl in scenario.pending:
        queues.add_or_update_workload(wl, now=now)

    admitted: dict[str, Admission] = {}
    preempted: set[str] = set()
    seen: set[Any] = set()
    for cycle in range(1, MAX_CYCLES + 1):
        heads = queues.heads()
        if not heads:
            break
        result = run_cycle(state.clone(), heads, now=now, policy=scenario.policy, cycle=cycle)
        if on_cycle is not None:
            on_cycle(result)
        for head in result.admitted:
            assert head.admission is not None
            admitted[head.key] = head.admission
            holder = dataclasses.replace(
                head.workload, admission=head.admission, quota_reserved_time=now
            )
            state.add_workload(WorkloadInfo(holder))
        targets = result.preemption_targets
        preempted.update(t.workload_key for t in targets)
        queues.apply(result, now=now)
        if not scenario.until_stable:
            break
        # Victims stop, release their quota and are requeued (Requeued=True after a
        # preemption) before the next cycle: no workload finishes otherwise.
        for target in targets:
            info = state.release_workload(target.workload_key, target.cluster_queue)
            admitted.pop(target.workload_key, None)
            if info is not None:
                victim = dataclasses.replace(
                    info.workload,
                    admission=None,
                    quota_reserved_time=None,
                    evicted_reason=EVICTED_BY_PREEMPTION,
                    evicted_time=now,
                    requeued=True,
                )
                queues.add_or_update_workload(victim, now=now)
        if targets:
            queues.queue_inadmissible_workloads({t.cluster_queue for t in targets}, now=now)
        fingerprint = (queues.state(), tuple(sorted(admitted)), tuple(sorted(preempted)))
        if fingerprint in seen:
            break
        seen.add(fingerprint)
        now += 1.0

    # The outcome partitions the pending list: an admitted workload preempted and admitted
    # again is not one of its admissions.
    queued = {w.key for w in scenario.pending}
    return {
        "admitted": {k: _admission_json(admitted[k]) for k in sorted(admitted) if k in queued},
        "preempted": sorted(preempted),
        "pending": sorted(w.key for w in scenario.pending if w.key not in admitted),
    }


def outcome_to_json(name: str, outcome: Mapping[str, Any]) -> str:
    """One ``--json`` line: ``{"name", "admitted", "preempted", "pending"}``."""
    return json.dumps({"name": name, **outcome}, sort_keys=False)


def _comparable_admission(adm: Mapping[str, Any]) -> tuple[Any, ...]:
    pod_sets = sorted(
        (str(ps.get("name")), tuple(sorted(dict(ps.get("flavors") or {}).items())), ps.get("count"))
        for ps in adm.get("podSets", [])
    )
    return (adm.get("clusterQueue"), tuple(pod_sets))


def check_outcome(outcome: Mapping[str, Any], expect: Mapping[str, Any]) -> list[str]:
    """Readable differences between an outcome and a scenario's ``expect`` (empty if equal)."""
    diff: list[str] = []
    got_adm = outcome.get("admitted", {})
    want_adm = expect.get("admitted", {})
    for key in sorted(set(got_adm) | set(want_adm)):
        if key not in got_adm:
            diff.append(
                f"admitted {key}: expected {json.dumps(want_adm[key])}, but it was not admitted"
            )
        elif key not in want_adm:
            diff.append(f"admitted {key}: not expected, got {json.dumps(got_adm[key])}")
        elif _comparable_admission(got_adm[key]) != _comparable_admission(want_adm[key]):
            diff.append(
                f"admitted {key}: expected {json.dumps(want_adm[key])}, got {json.dumps(got_adm[key])}"
            )
    for field_name in ("preempted", "pending"):
        got = set(outcome.get(field_name, []))
        want = set(expect.get(field_name, []))
        missing = sorted(want - got)
        extra = sorted(got - want)
        if missing:
            diff.append(f"{field_name}: expected but missing {missing}")
        if extra:
            diff.append(f"{field_name}: unexpected {extra}")
    return diff


# --- running through the production path ----------------------------------------------

# The moment a scenario's ``created: 0`` stands for; its other times are seconds from it.
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return _EPOCH + timedelta(seconds=seconds)


def run_scenario(scenario: Scenario) -> dict[str, Any]:
    """Run a scenario through the production admission path and return its outcome in the
    ``--json`` shape (without ``name``).

    The scenario becomes real rows of a domain of its own (a ``Cluster``): flavors,
    cohorts, cluster queues with their quotas, local queues, the pending workloads as the
    API leaves them and the admitted ones with their admission. Then the reconciler's own
    cycle runs (``admission.run_admission_cycle``: head selection, the engine, the
    conditional writes; at its start the release of evicted victims and the requeue of
    parked workloads), once, or until the rows stop changing. The scenario's namespace
    labels are handed to the cycle: kueueweb keeps no Namespace objects. The outcome is
    read back from the rows. Everything happens in one transaction that is rolled back:
    no row stays, and the work the cycle asks for after commit (Celery messages, browser
    notifications, metrics) is dropped with it.
    """
    with transaction.atomic():
        cluster = Cluster.objects.create(name=f"simulate-{uuid.uuid4().hex[:16]}")
        try:
            return _run_in_domain(scenario, cluster)
        finally:
            transaction.set_rollback(True)
            snapshots.forget_domain(cluster.pk)


def _run_in_domain(scenario: Scenario, cluster: Cluster) -> dict[str, Any]:
    cluster_queues = _create_specs(scenario, cluster)
    by_key = _create_workloads(scenario, cluster, cluster_queues)
    period = float(settings.KUEUEWEB["REQUEUE_BATCH_PERIOD_SECONDS"])
    now = _at(0)
    preempted: set[str] = set()
    last: tuple[Any, ...] | None = None
    for _ in range(MAX_CYCLES):
        outcome = admission.run_admission_cycle(
            cluster.pk, now=now, policy=scenario.policy,
            max_cycles=None if scenario.until_stable else 1, namespaces=scenario.namespaces)
        preempted.update(outcome.preempted)
        if not scenario.until_stable:
            break
        state = _domain_state(cluster)
        if state == last:
            break
        last = state
        # Past the requeue batch period: a release's requeue is due in the next call.
        now += timedelta(seconds=period + 1)

    rows = WorkloadRow.objects.filter(pk__in=[by_key[w.key] for w in scenario.pending],
                                   phase__in=(WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED))
    admitted = {f"{row.namespace}/{row.name}": _admission_outcome(row.admission or {})
                for row in rows}
    return {
        "admitted": dict(sorted(admitted.items())),
        "preempted": sorted(preempted),
        "pending": sorted(w.key for w in scenario.pending if w.key not in admitted),
    }


def _domain_state(cluster: Cluster) -> tuple[Any, ...]:
    """What a call of the cycle can change: every workload's version, the parked shapes
    and the queues' requeue marks. Equal after a call: the next one decides the same."""
    return (
        tuple(WorkloadRow.objects.filter(cluster=cluster).order_by("pk")
              .values_list("pk", "resource_version")),
        tuple(ParkedShape.objects.filter(cluster_queue__cluster=cluster).order_by("pk")
              .values_list("pk", flat=True)),
        tuple(ClusterQueue.objects.filter(cluster=cluster).order_by("pk")
              .values_list("pk", "requeue_due_at")),
    )


def _admission_outcome(admission: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "clusterQueue": admission.get("clusterQueue"),
        "podSets": [
            {"name": ps["name"], "flavors": dict(sorted(ps["flavors"].items())),
             "count": ps["count"]}
            for ps in admission.get("podSetAssignments", ())
        ],
    }


def _quantity(resource: str, amount: int | None) -> str | None:
    return None if amount is None else int_to_quantity(resource, amount)


def _create_specs(scenario: Scenario, cluster: Cluster) -> dict[str, ClusterQueue]:
    flavors = {
        f.name: ResourceFlavor.objects.create(cluster=cluster, name=f.name,
                                              node_labels=dict(f.node_labels))
        for f in scenario.flavors
    }
    # Kueue accepts a queue that names a flavor that does not exist and keeps it inactive
    # (FlavorNotFound); kueueweb's writes refuse one. Such a quota row points at a flavor of
    # another throw-away domain, which this domain's specs do not read: the queue is then
    # inactive as in Kueue.
    groups = [g for c in scenario.cohorts for g in c.resource_groups]
    groups += [g for cq in scenario.cluster_queues for g in cq.resource_groups]
    named = {fq.name for group in groups for fq in group.flavors}
    if named - set(flavors):
        elsewhere = Cluster.objects.create(name=f"{cluster.name}-absent")
        flavors.update({name: ResourceFlavor.objects.create(cluster=elsewhere, name=name)
                        for name in sorted(named - set(flavors))})
    cohorts = {c.name: Cohort.objects.create(cluster=cluster, name=c.name,
                                             fair_sharing_weight=_weight(c.fair_weight))
               for c in scenario.cohorts}
    for spec in scenario.cohorts:
        if spec.parent is not None:
            if spec.parent not in cohorts:
                cohorts[spec.parent] = Cohort.objects.create(cluster=cluster, name=spec.parent)
            Cohort.objects.filter(pk=cohorts[spec.name].pk).update(parent=cohorts[spec.parent])
    quotas: list[FlavorQuota] = []
    for spec in scenario.cohorts:
        quotas += _flavor_quotas(spec.resource_groups, flavors, cohort=cohorts[spec.name])
    cluster_queues: dict[str, ClusterQueue] = {}
    for cq in scenario.cluster_queues:
        if cq.cohort is not None and cq.cohort not in cohorts:
            cohorts[cq.cohort] = Cohort.objects.create(cluster=cluster, name=cq.cohort)
        preemption, fungibility = cq.preemption, cq.flavor_fungibility
        row = ClusterQueue.objects.create(
            cluster=cluster, name=cq.name,
            cohort=cohorts[cq.cohort] if cq.cohort is not None else None,
            queueing_strategy=cq.queueing_strategy.value,
            namespace_selector=_selector_json(cq.namespace_selector),
            within_cluster_queue=preemption.within_cluster_queue.value,
            reclaim_within_cohort=preemption.reclaim_within_cohort.value,
            borrow_within_cohort_policy=preemption.borrow_within_cohort.policy.value,
            borrow_within_cohort_max_priority_threshold=(
                preemption.borrow_within_cohort.max_priority_threshold),
            when_can_borrow=fungibility.when_can_borrow.value,
            when_can_preempt=fungibility.when_can_preempt.value,
            fungibility_preference=(fungibility.preference.value
                                    if fungibility.preference is not None else ""),
            stop_policy=cq.stop_policy.value,
            fair_sharing_weight=_weight(cq.fair_weight),
        )
        cluster_queues[cq.name] = row
        quotas += _flavor_quotas(cq.resource_groups, flavors, cluster_queue=row)
    FlavorQuota.objects.bulk_create(quotas)
    # A local queue of a cluster queue that does not exist is not created (it could not
    # be): its workloads wait as the workloads of a missing local queue do.
    for lq in scenario.local_queues:
        if lq.cluster_queue in cluster_queues:
            LocalQueue.objects.create(cluster=cluster, namespace=lq.namespace, name=lq.name,
                                      cluster_queue=cluster_queues[lq.cluster_queue])
    return cluster_queues


def _flavor_quotas(groups: Sequence[ResourceGroup], flavors: Mapping[str, ResourceFlavor],
                   **owner: Any) -> list[FlavorQuota]:
    rows = []
    for index, group in enumerate(groups):
        position = 0
        for flavor_quotas in group.flavors:
            for resource in group.covered_resources:
                quota = flavor_quotas.resources.get(resource)
                if quota is None:
                    continue
                rows.append(FlavorQuota(
                    **owner, resource_group=index, position=position,
                    flavor=flavors[flavor_quotas.name], resource=resource,
                    nominal_quota=int_to_quantity(resource, quota.nominal),
                    borrowing_limit=_quantity(resource, quota.borrowing_limit),
                    lending_limit=_quantity(resource, quota.lending_limit)))
                position += 1
    return rows


def _weight(weight: float) -> str | None:
    return None if weight == 1.0 else f"{weight:g}"


def _selector_json(selector: LabelSelector | None) -> dict[str, Any] | None:
    if selector is None:
        return None
    out: dict[str, Any] = {}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    if selector.match_expressions:
        out["matchExpressions"] = [
            {"key": e.key, "operator": e.operator.value, "values": list(e.values)}
            for e in selector.match_expressions
        ]
    return out


def _pod_set_json(pod_set: PodSet) -> dict[str, Any]:
    requests = {res: int_to_quantity(res, v) for res, v in pod_set.requests.items()}
    out: dict[str, Any] = {
        "name": pod_set.name, "count": pod_set.count,
        "template": {"spec": {"containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": requests}}]}},
    }
    if pod_set.min_count is not None:
        out["minCount"] = pod_set.min_count
    return out


def _create_workloads(scenario: Scenario, cluster: Cluster,
                      cluster_queues: Mapping[str, ClusterQueue]) -> dict[str, int]:
    """The scenario's workloads as rows: pending in their local queues (as the API leaves
    a new workload), with the scenario's times and identities; the admitted ones hold their
    admission, as a cycle's reservation leaves them.

    Rows, not ``services.create_workloads``: the scenarios name resources as Kueue's tests
    do (``gpu``), which the API rejects for a container."""
    local_queues = {(lq.namespace, lq.name): lq
                    for lq in LocalQueue.objects.filter(cluster=cluster)}
    everything = scenario.admitted + scenario.pending
    # Kueue breaks the last ties by UID; the engine by UID then key. UUIDs in that order,
    # under a prefix of this run's own (the row caches key rows by id, uid and version).
    prefix = uuid.uuid4().int >> 64 << 64
    rank = {wl.key: i for i, wl in enumerate(sorted(everything, key=lambda w: (w.uid, w.key)))}
    timestamp = scenario.policy.requeuing_timestamp
    rows = []
    for wl in everything:
        fields: dict[str, Any] = {}
        if wl.admission is not None:
            fields = _admitted_fields(wl, cluster_queues[wl.admission.cluster_queue])
        rows.append(WorkloadRow(
            cluster=cluster, namespace=wl.namespace, name=wl.name,
            queue_name=wl.queue_name or "",
            local_queue=local_queues.get((wl.namespace, wl.queue_name or "")),
            priority=wl.priority, active=wl.active,
            pod_sets=[_pod_set_json(ps) for ps in wl.pod_sets],
            uid=uuid.UUID(int=prefix | (rank[wl.key] + 1)),
            queued_at=_at(queue_order_timestamp(wl, timestamp)),
            **fields,
        ))
    created = WorkloadRow.objects.bulk_create(rows)
    # ``created_at`` is set on insert (auto_now_add); the scenario's comes after.
    for wl, row in zip(everything, created, strict=True):
        WorkloadRow.objects.filter(pk=row.pk).update(created_at=_at(wl.creation_time))
    return {wl.key: row.pk for wl, row in zip(everything, created, strict=True)}


def _admitted_fields(wl: Workload, cluster_queue: ClusterQueue) -> dict[str, Any]:
    assert wl.admission is not None
    reserved_at = _at(wl.quota_reserved_time or 0.0)
    conditions = cond.set_condition([], "QuotaReserved", True, "QuotaReserved",
                                    f"Quota reserved in ClusterQueue {cluster_queue.name}",
                                    now=reserved_at)
    conditions = cond.set_condition(conditions, "Admitted", True, "Admitted",
                                    "The workload is admitted", now=reserved_at)
    if wl.evicted_reason is not None:
        conditions = cond.set_condition(conditions, "Evicted", True, wl.evicted_reason,
                                        "Evicted", now=_at(wl.evicted_time or 0.0))
    return {
        "phase": WorkloadPhase.ADMITTED,
        "admission": admission.admission_to_json(wl.admission),
        "cluster_queue": cluster_queue,
        "conditions": conditions,
        "quota_reserved_at": reserved_at,
    }
