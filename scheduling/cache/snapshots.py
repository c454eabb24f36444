"""From database rows to the engine's immutable specs (Kueue's cache → Snapshot).

Everything a cycle needs is read with a fixed number of queries, independent of how many
workloads exist: flavors, cohorts, cluster queues with their quotas, admission checks, and
the workloads holding quota in the domain (read as plain values, not model instances).
Pending heads are selected separately (``admission.select_heads``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from scheduling import core
from scheduling.cache.rows import values_rows
from scheduling.choices import WorkloadPhase
from scheduling.core.quantities import QuantityError, parse_quantity, quantity_to_int
from scheduling.core.resources import FlavorResourceQuantities
from scheduling.core.workloads import WorkloadInfo
from scheduling.jobframework import resources
from scheduling.models import (
    ClusterQueue,
    Cohort,
    FlavorQuota,
    ResourceFlavor,
    Workload,
    name_order,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

# Workload columns read for the snapshot; kept narrow, as a domain may hold tens of thousands
# of rows.
WORKLOAD_FIELDS = (
    "id", "namespace", "name", "uid", "priority", "queue_name", "pod_sets", "admission",
    "created_at", "quota_reserved_at", "queued_at", "conditions", "active", "requeue_at",
    "reclaimable_pods", "labels", "scheduler_state", "resource_version", "queue_state",
    "preempting", "cluster_queue__name", "priority_class_name", "job_id",
)

# What the rows of workloads holding quota need: ``admitted_workload`` and a preemption's
# write and event. Fewer JSON columns than a head's row: a busy domain has thousands of them.
RESERVING_FIELDS = (
    "id", "namespace", "name", "uid", "priority", "queue_name", "pod_sets", "admission",
    "created_at", "quota_reserved_at", "conditions", "active", "reclaimable_pods",
    "resource_version", "cluster_queue__name", "priority_class_name", "job_id",
)


def epoch(moment: datetime | None) -> float:
    """The engine's clock: float seconds since the epoch (it never reads a clock itself)."""
    return moment.timestamp() if moment is not None else 0.0


@dataclass
class DomainSpecs:
    """The quota tree of one domain, as engine specs, plus lookups the services need."""

    flavors: list[core.types.ResourceFlavorSpec]
    cohorts: list[core.types.CohortSpec]
    cluster_queues: list[core.types.ClusterQueueSpec]
    cluster_queue_ids: dict[str, int]
    # Queues inactive for reasons the engine cannot see (a missing admission check).
    inactive: dict[str, str] = field(default_factory=dict)
    # Admission checks each queue requires: [(check name, flavors or empty = all)].
    admission_checks: dict[str, list[tuple[str, tuple[str, ...]]]] = field(default_factory=dict)

    @functools.cached_property
    def fingerprint(self) -> str:
        """A digest of everything here: equal specs, equal fingerprint (computed once, as the
        specs are reused while their rows do not change)."""
        return hashlib.sha256(repr((
            self.flavors, self.cohorts, self.cluster_queues, self.inactive,
            sorted(self.admission_checks.items()),
        )).encode()).hexdigest()


def _quota(value: str | None, resource: str) -> int | None:
    return None if value is None else quantity_to_int(resource, value)


def _resource_groups(rows: Iterable[FlavorQuota]) -> tuple[core.types.ResourceGroup, ...]:
    groups: dict[int, dict[str, dict[str, core.types.ResourceQuota]]] = defaultdict(dict)
    covered: dict[int, list[str]] = defaultdict(list)
    for row in rows:
        flavors = groups[row.resource_group]
        flavors.setdefault(row.flavor.name, {})[row.resource] = core.types.ResourceQuota(
            nominal=quantity_to_int(row.resource, row.nominal_quota),
            borrowing_limit=_quota(row.borrowing_limit, row.resource),
            lending_limit=_quota(row.lending_limit, row.resource),
        )
        if row.resource not in covered[row.resource_group]:
            covered[row.resource_group].append(row.resource)
    return tuple(
        core.types.ResourceGroup(
            covered_resources=tuple(covered[index]),
            flavors=tuple(
                core.types.FlavorQuotas(name=name, resources=resources)
                for name, resources in groups[index].items()
            ),
        )
        for index in sorted(groups)
    )


def _weight(value: str | None) -> float:
    if value is None:
        return 1.0
    try:
        return float(parse_quantity(value))
    except QuantityError:
        return 1.0


def label_selector(selector: Mapping[str, Any] | None) -> core.types.LabelSelector | None:
    """A Kubernetes label selector dict as the engine's; None stays None (matches nothing)."""
    return None if selector is None else core.types.LabelSelector.from_document(selector)


def cluster_queue_spec(cq: ClusterQueue, rows: Iterable[FlavorQuota]) -> core.types.ClusterQueueSpec:
    t = core.types
    return t.ClusterQueueSpec(
        name=cq.name,
        resource_groups=_resource_groups(rows),
        cohort=cq.cohort.name if cq.cohort is not None else None,
        queueing_strategy=t.QueueingStrategy(cq.queueing_strategy),
        namespace_selector=label_selector(cq.namespace_selector),
        preemption=t.PreemptionPolicy(
            within_cluster_queue=t.WithinClusterQueuePolicy(cq.within_cluster_queue),
            reclaim_within_cohort=t.ReclaimWithinCohortPolicy(cq.reclaim_within_cohort),
            borrow_within_cohort=t.BorrowWithinCohort(
                policy=t.BorrowWithinCohortPolicy(cq.borrow_within_cohort_policy),
                max_priority_threshold=cq.borrow_within_cohort_max_priority_threshold,
            ),
        ),
        flavor_fungibility=t.FlavorFungibility(
            when_can_borrow=t.FungibilityPolicy(cq.when_can_borrow),
            when_can_preempt=t.FungibilityPolicy(cq.when_can_preempt),
            preference=(
                t.FungibilityPreference(cq.fungibility_preference)
                if cq.fungibility_preference else None
            ),
        ),
        fair_weight=_weight(cq.fair_sharing_weight),
        stop_policy=t.StopPolicy(cq.stop_policy),
    )


# Columns the specs never read and reconcilers write all the time; a change to them keeps
# the memo of ``load_domain_specs``. Every other column of a spec table is compared, and
# so are an admission check's conditions: its Active condition decides whether the queues
# that require it are active.
_STATUS_COLUMNS = frozenset({"updated_at", "resource_version", "conditions",
                             "allocatable_generation", "requeue_due_at"})
# The last specs built per domain, with the rows they were built from.
_SPECS_MEMO: dict[int, tuple[tuple[Any, ...], DomainSpecs]] = {}


def _spec_rows(cluster_id: int) -> tuple[Any, ...]:
    """Every spec column of the domain's flavors, quotas, cohorts, cluster queues and
    admission checks, as the database returns them (no model instances, no JSON parsing):
    what ``load_domain_specs`` compares to know whether its last specs still hold."""
    from django.db import connection

    from multicluster.models import AdmissionCheck

    quote = connection.ops.quote_name
    cq_table = quote(ClusterQueue._meta.db_table)
    cohort_table = quote(Cohort._meta.db_table)
    rows: list[Any] = []
    with connection.cursor() as cursor:
        for model in (ResourceFlavor, Cohort, ClusterQueue, AdmissionCheck, FlavorQuota):
            unread = _STATUS_COLUMNS - {"conditions"} if model is AdmissionCheck else _STATUS_COLUMNS
            columns = ", ".join(f"t.{quote(f.column)}" for f in model._meta.concrete_fields
                                if f.column not in unread)
            table = quote(model._meta.db_table)
            if model is FlavorQuota:
                where = (f"t.cluster_queue_id IN (SELECT id FROM {cq_table} WHERE cluster_id = %s)"
                         f" OR t.cohort_id IN (SELECT id FROM {cohort_table} WHERE cluster_id = %s)")
                params: list[Any] = [cluster_id, cluster_id]
            else:
                where, params = "t.cluster_id = %s", [cluster_id]
            cursor.execute(f"SELECT {columns} FROM {table} t WHERE {where} ORDER BY t.id", params)
            rows.append(tuple(cursor.fetchall()))
    return tuple(rows)


def load_domain_specs(cluster_id: int) -> DomainSpecs:
    """Flavors, cohorts and cluster queues of a domain, as engine specs.

    Every admission cycle needs them and they rarely change, so the specs last built for
    the domain are kept with the rows they came from and reused while those rows read the
    same (five plain queries). The check is against the database on every call, so a
    change made by any process, through any write path, is seen by the next cycle. The
    specs are shared: callers must not change them.
    """
    rows = _spec_rows(cluster_id)
    memo = _SPECS_MEMO.get(cluster_id)
    if memo is not None and memo[0] == rows:
        return memo[1]
    specs = _build_domain_specs(cluster_id)
    _SPECS_MEMO[cluster_id] = (rows, specs)
    return specs


def _build_domain_specs(cluster_id: int) -> DomainSpecs:
    """Flavors, cohorts and cluster queues of a domain (five queries)."""
    from multicluster.models import AdmissionCheck

    flavors = [
        core.types.ResourceFlavorSpec(name=f.name, node_labels=f.node_labels or {})
        for f in ResourceFlavor.objects.filter(cluster_id=cluster_id)
    ]
    quota_rows: dict[tuple[str, int | None], list[FlavorQuota]] = defaultdict(list)
    for row in (
        FlavorQuota.objects.filter(
            models_owner_in_domain(cluster_id)
        ).select_related("flavor").order_by("resource_group", "position", "id")
    ):
        owner = ("cq", row.cluster_queue_id) if row.cluster_queue_id else ("cohort", row.cohort_id)
        quota_rows[owner].append(row)
    cohorts = [
        core.types.CohortSpec(
            name=c.name,
            parent=c.parent.name if c.parent is not None else None,
            resource_groups=_resource_groups(quota_rows.get(("cohort", c.pk), [])),
            fair_weight=_weight(c.fair_sharing_weight),
        )
        for c in Cohort.objects.filter(cluster_id=cluster_id).select_related("parent")
    ]
    cqs = list(ClusterQueue.objects.filter(cluster_id=cluster_id).select_related("cohort"))
    checks = {
        c.name: c for c in AdmissionCheck.objects.filter(cluster_id=cluster_id)
    }
    specs = DomainSpecs(
        flavors=flavors,
        cohorts=cohorts,
        cluster_queues=[cluster_queue_spec(cq, quota_rows.get(("cq", cq.pk), [])) for cq in cqs],
        cluster_queue_ids={cq.name: cq.pk for cq in cqs},
    )
    for cq in cqs:
        required = [
            (entry["name"], tuple(entry.get("onFlavors") or ()))
            for entry in cq.admission_checks or ()
        ]
        specs.admission_checks[cq.name] = required
        missing = [name for name, _ in required if name not in checks]
        if missing:
            specs.inactive[cq.name] = "AdmissionCheckNotFound"
            continue
        reason = _admission_check_problem(required, checks)
        if reason:
            specs.inactive[cq.name] = reason
    return specs


def _admission_check_problem(required: list[tuple[str, tuple[str, ...]]],
                             checks: Mapping[str, Any]) -> str:
    """Why a queue's admission checks make it inactive (Kueue clusterqueue.go), or "":
    a check whose Active condition is False, more than one MultiKueue check, or a
    MultiKueue check restricted to some flavors."""
    from multicluster.choices import MULTIKUEUE_CONTROLLER_NAME

    multikueue = [(name, on) for name, on in required
                  if checks[name].controller_name == MULTIKUEUE_CONTROLLER_NAME]
    if any(c.get("type") == "Active" and c.get("status") == "False"
           for name, _ in required for c in checks[name].conditions or ()):
        return "AdmissionCheckInactive"
    if len(multikueue) > 1:
        return "MultipleMultiKueueAdmissionChecks"
    if any(on for _, on in multikueue):
        return "MultiKueueAdmissionCheckAppliedPerFlavor"
    return ""


def models_owner_in_domain(cluster_id: int) -> Any:
    from django.db.models import Q

    return Q(cluster_queue__cluster_id=cluster_id) | Q(cohort__cluster_id=cluster_id)


def per_pod_requests(pod_set: Mapping[str, Any]) -> dict[str, int]:
    """Per-pod requests of a pod set, as the engine counts them (CPU in millis).

    Pod sets made by kueueweb carry their template; requests follow Kueue's effective pod
    request rules (``scheduling.jobframework.pod_set_requests``).
    """
    from scheduling.jobframework import pod_set_requests

    return {
        resource: quantity_to_int(resource, quantity)
        for resource, quantity in pod_set_requests(pod_set).items()
    }


def _admission_from_json(data: Mapping[str, Any]) -> core.types.Admission:
    return core.types.Admission(
        cluster_queue=data["clusterQueue"],
        pod_sets=tuple(
            core.types.PodSetAssignment(
                name=ps["name"],
                flavors=dict(ps.get("flavors") or {}),
                count=int(ps.get("count", 0)),
                resource_usage={
                    r: quantity_to_int(r, q) for r, q in (ps.get("resourceUsage") or {}).items()
                },
            )
            for ps in data.get("podSetAssignments") or ()
        ),
    )


def held_admission(row: Mapping[str, Any]) -> core.types.Admission:
    """The admission of a workload holding quota as it counts now (``core.held_admission``:
    less its reclaimable pods and the pods an elastic scale-down removed), from a row with
    its ``admission``, ``reclaimable_pods`` and ``pod_sets``."""
    return _held(_admission_from_json(row["admission"]), row)


def _held(admitted: core.types.Admission, row: Mapping[str, Any]) -> core.types.Admission:
    reclaimable = {r["name"]: int(r["count"]) for r in row.get("reclaimable_pods") or ()}
    spec_counts = {ps.get("name", "main"): int(ps.get("count", 1)) for ps in row["pod_sets"]}
    return core.held_admission(admitted, spec_counts, reclaimable)


def held_usage(row: Mapping[str, Any]) -> FlavorResourceQuantities:
    """The quota a workload holds per flavor and resource (CPU in millis), from a row with
    its ``admission``, ``reclaimable_pods`` and ``pod_sets``: what the cycle's snapshot
    counts, and what every status, page, metric and sample reports."""
    return core.held_usage(held_admission(row))


def admitted_workload(row: Mapping[str, Any]) -> core.types.Workload:
    """A workload holding quota, from its values() row, with its ``held_admission``."""
    admitted = _admission_from_json(row["admission"])
    admission = _held(admitted, row)
    pod_sets = tuple(
        core.types.PodSet(name=held.name, count=held.count, requests={
            r: (v // granted.count if granted.count else 0)
            for r, v in granted.resource_usage.items()})
        for granted, held in zip(admitted.pod_sets, admission.pod_sets, strict=True)
    )
    evicted = _true_condition(row["conditions"], "Evicted")
    return core.types.Workload(
        **_identity(row),
        pod_sets=pod_sets,
        creation_time=epoch(row["created_at"]),
        admission=admission,
        quota_reserved_time=epoch(row["quota_reserved_at"]),
        evicted_reason=evicted.get("reason") if evicted else None,
        evicted_time=None,
        active=row["active"],
    )


@dataclass(frozen=True)
class ClusterObjects:
    """What a domain's LimitRanges and RuntimeClasses change in its pending workloads'
    requests (Kueue's ``AdjustResources``): each namespace's summed-up LimitRanges, and
    each RuntimeClass's ``overhead.podFixed``."""

    summaries: Mapping[str, resources.Summary] = field(default_factory=dict)
    overheads: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def variant(self, row: Mapping[str, Any]) -> str | None:
        """What of these objects the workload of ``row`` depends on, as text that changes
        when they do (None: nothing, its requests are the pod sets' own)."""
        summary = self.summaries.get(row["namespace"])
        named = (((ps.get("template") or {}).get("spec") or {}).get("runtimeClassName")
                 for ps in row["pod_sets"])
        classes = {str(name) for name in named if name}
        if summary is None and not classes:
            return None
        return repr((summary, sorted((name, sorted(self.overheads.get(name, {}).items()))
                                     for name in classes)))


NO_CLUSTER_OBJECTS = ClusterObjects()


def load_cluster_objects(cluster_id: int) -> ClusterObjects:
    """The domain's LimitRanges, summed up per namespace in name order, and RuntimeClass
    overheads: two small queries per cycle."""
    from scheduling.models import LimitRange, RuntimeClass

    limits: dict[str, list[Any]] = defaultdict(list)
    for namespace, items in LimitRange.objects.filter(cluster_id=cluster_id) \
            .order_by("namespace", "name").values_list("namespace", "limits"):
        limits[namespace].append(items or [])
    overheads = {name: dict(overhead or {}) for name, overhead in RuntimeClass.objects.filter(
        cluster_id=cluster_id).values_list("name", "overhead")}
    return ClusterObjects(
        summaries={namespace: resources.summarize(lists) for namespace, lists in limits.items()},
        overheads=overheads)


def _identity(row: Mapping[str, Any]) -> dict[str, Any]:
    """The engine workload's fields a values() row gives as they are, pending or admitted."""
    return {"namespace": row["namespace"], "name": row["name"],
            "queue_name": row["queue_name"] or None, "priority": row["priority"],
            "uid": str(row["uid"])}


def pending_workload(row: Mapping[str, Any],
                     objects: ClusterObjects = NO_CLUSTER_OBJECTS) -> core.types.Workload:
    """A pending workload (a head), from its values() row, its requests adjusted for the
    domain's cluster ``objects`` as Kueue adjusts them when it queues a workload: the
    stored pod sets stay as they were submitted."""
    pod_sets, inadmissible = engine_pod_sets.get(row, objects)
    return core.types.Workload(
        **_identity(row),
        pod_sets=pod_sets,
        creation_time=epoch(row["queued_at"] or row["created_at"]),
        active=row["active"],
        inadmissible=inadmissible,
    )


_EnginePodSets = tuple[tuple[core.types.PodSet, ...], str | None]


def _engine_pod_sets(row: Mapping[str, Any], objects: ClusterObjects) -> _EnginePodSets:
    """The engine's pod sets of a pending row, adjusted for the cluster ``objects``, and
    why they cannot be admitted (None: they can)."""
    summary = objects.summaries.get(row["namespace"], {})
    adjusted = resources.adjust_pod_sets(row["pod_sets"], summary=summary,
                                         overheads=objects.overheads)
    pod_sets = tuple(
        core.types.PodSet(
            name=ps.get("name", "main"),
            count=int(ps.get("count", 1)),
            requests=per_pod_requests(ps),
            min_count=ps.get("minCount"),
        )
        for ps in adjusted
    )
    return pod_sets, resources.admissibility_error(adjusted, summary)


class EnginePodSetsMemo:
    """``_engine_pod_sets`` made once per distinct stored pod sets and cluster objects.

    The workloads of one job template share their pod sets, and a backlog holds thousands
    of them: adjusting the templates (a deep copy of each) and summing their requests is
    most of the cost of a head seen for the first time, and the same for all of them. A
    row's result is looked up by its ``pod_sets_hash`` (the database's digest of the pod
    sets' text) and by what of the cluster objects it depends on (``ClusterObjects.variant``),
    and taken only if the pod sets kept with it equal the row's, so that a digest collision
    cannot give one workload another's requests. A row without the digest is built. The
    results are shared (immutable engine values); at most ``size`` are kept, all dropped
    when full.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._made: dict[tuple[str, str | None], tuple[Any, _EnginePodSets]] = {}

    def get(self, row: Mapping[str, Any], objects: ClusterObjects) -> _EnginePodSets:
        digest = row.get("pod_sets_hash")
        if not digest:
            return _engine_pod_sets(row, objects)
        key = (digest, objects.variant(row))
        found = self._made.get(key)
        if found is not None and found[0] == row["pod_sets"]:
            return found[1]
        made = _engine_pod_sets(row, objects)
        if len(self._made) >= self.size:
            self._made.clear()
        # Kept with a copy of its pod sets: rows are shared, but this outlives them.
        self._made[key] = (copy.deepcopy(row["pod_sets"]), made)
        return made


engine_pod_sets = EnginePodSetsMemo(size=4096)


def pending_head(cluster_id: int, row: Mapping[str, Any],
                 objects: ClusterObjects) -> core.types.Workload:
    """The engine's workload of a head row: built once per row version and cluster objects
    it depends on (``heads_cache``)."""
    variant = objects.variant(row)
    if variant is None:
        return heads_cache.built(cluster_id, row)
    return heads_cache.built(cluster_id, row, variant=variant,
                             build=lambda r: pending_workload(r, objects))


def namespace_labels(namespaces: Iterable[str]) -> dict[str, dict[str, str]]:
    """Labels of the namespaces in play. kueueweb keeps no Namespace objects; every
    Kubernetes namespace carries ``kubernetes.io/metadata.name``, which selectors use."""
    return {ns: {NAMESPACE_NAME_LABEL: ns} for ns in set(namespaces)}


def _true_condition(conditions: Iterable[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == type_ and condition.get("status") == "True":
            return condition
    return None


_Built = TypeVar("_Built")
_Key = tuple[int, str, int]  # id, uid (hex), resource_version


class RowCache(Generic[_Built]):
    """values() rows of workloads that the last cycle of each domain read, by id, uid and
    ``resource_version``.

    The admission cycle reads the same workloads again and again: every workload holding
    quota, and the heads it loaded last time and did not get to. Their JSON columns (pod
    sets, admission, conditions) are the costly part of reading a row.
    A row asked for again at the version it was read at comes from here; only the others
    are loaded. Every write of a workload bumps its version (``Workload.save``,
    ``bulk.update_versioned``, every queryset update of its columns read here), so a row at
    the same version holds the same values; the uid tells two rows apart that reused an id
    (SQLite reuses the highest id after a delete).

    Beside each row it keeps what ``build`` made of it (the engine's workload), made once.
    It holds what the domain's last read asked for, the rows this process wrote since
    (``add``), and up to ``spare`` rows of earlier reads, the most recently read kept:
    memory follows the working set. Spares serve reads that skip a row and come back to
    it: a head whose shape is parked while its cluster queue is full is not read until
    quota is released, then read again at the same version. It is local to the process;
    another process reads from the database, as this one does on a miss.
    """

    def __init__(self, build: Callable[[Mapping[str, Any]], _Built], *, spare: int = 0) -> None:
        self.build = build
        self.spare = spare
        self._domains: dict[int, dict[_Key, tuple[dict[str, Any], list[tuple[str | None, _Built]]]]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(pk: int, uid: Any, version: int) -> _Key:
        # A UUID from the ORM or PostgreSQL, its 32 hex digits from SQLite's column.
        return (pk, uid.hex if isinstance(uid, uuid.UUID) else str(uid).replace("-", ""),
                version)

    def rows(self, cluster_id: int, wanted: Mapping[int, tuple[Any, int]],
             load: Callable[[Sequence[int]], Iterable[dict[str, Any]]]) -> list[dict[str, Any]]:
        """The rows of the ids in ``wanted`` (each with the uid and version just read): the
        cached ones at that version, the others from ``load(ids)``, which may leave some
        out (gone since) and returns each at the version it finds. The rows are shared:
        callers must not change them."""
        current: dict[_Key, tuple[dict[str, Any], list[tuple[str | None, _Built]]]] = {}
        missing: list[int] = []
        with self._lock:
            cached = self._domains.get(cluster_id, {})
            for pk, (uid, version) in wanted.items():
                key = self.key(pk, uid, version)
                entry = cached.get(key)
                if entry is None:
                    missing.append(pk)
                else:
                    current[key] = entry
        if missing:
            for row in load(missing):
                current[self.key(row["id"], row["uid"], row["resource_version"])] = (row, [])
        rows = [row for row, _ in current.values()]
        with self._lock:
            if not self.spare:
                self._domains[cluster_id] = current
                return rows
            # Insertion order is read order: this read's rows go last, and the spares kept
            # are the last ones read (or added) before them. Moved in place, so that a read
            # costs what it asked for, not what the spares hold.
            kept = self._domains.setdefault(cluster_id, {})
            for key, entry in current.items():
                kept.pop(key, None)
                kept[key] = entry
            excess = len(kept) - len(current) - self.spare
            if excess > 0:
                for key in list(itertools.islice(kept, excess)):
                    del kept[key]
        return rows

    def add(self, cluster_id: int, rows: Iterable[dict[str, Any]]) -> None:
        """Rows this process has just written and committed, each at the version its write
        gave it: the domain's next read takes them from here rather than loading them. A
        row at that version holds exactly these values, since a write conditional on the
        version before is the only way to it."""
        with self._lock:
            cached = self._domains.setdefault(cluster_id, {})
            for row in rows:
                cached[self.key(row["id"], row["uid"], row["resource_version"])] = (row, [])

    def forget(self, cluster_id: int) -> None:
        """Drop every row kept of the domain."""
        with self._lock:
            self._domains.pop(cluster_id, None)

    def built(self, cluster_id: int, row: Mapping[str, Any], *, variant: str | None = None,
              build: Callable[[Mapping[str, Any]], _Built] | None = None) -> _Built:
        """``build(row)``, made once per cached row (a row of the same id, uid and version,
        a copy for one, has the same values). A ``variant`` names what else the result
        depends on (with its own ``build``): a row's result is made again when it changes."""
        build = build or self.build
        with self._lock:
            entry = self._domains.get(cluster_id, {}).get(
                self.key(row["id"], row["uid"], row["resource_version"]))
        if entry is None:
            return build(row)
        made = entry[1]
        if not made or made[0][0] != variant:
            # Two threads may both build: either will do.
            made[:] = [(variant, build(row))]
        return made[0][1]


def admitted_info(row: Mapping[str, Any]) -> WorkloadInfo:
    """What the snapshot holds of a workload holding quota (``admitted_workload``): made
    once per row version, as the snapshot of every cycle needs it."""
    return WorkloadInfo(admitted_workload(row))


# The workloads holding quota of a domain, read by every cycle.
reserving_cache = RowCache(admitted_info)
# The heads a cycle loaded (``admission.select_heads``): those it did not get to, and those
# that stay pending, are read again by the next one, or by a later one once their parked
# shape is requeued. As many spares as a read may ask for (``admission._CANDIDATES``).
heads_cache = RowCache(pending_workload, spare=4000)


def forget_domain(cluster_id: int) -> None:
    """Drop what this process keeps of a domain that is gone (a rolled-back simulation)."""
    _SPECS_MEMO.pop(cluster_id, None)
    reserving_cache.forget(cluster_id)
    heads_cache.forget(cluster_id)


def reserved_row(row: Mapping[str, Any], values: Mapping[str, Any],
                 cluster_queue: str) -> dict[str, Any]:
    """The row ``reserving_rows`` reads of a head (a ``select_heads`` row) once the
    reservation ``values`` (``admission._reservation``) is written over it: one version
    later, in ``cluster_queue``."""
    merged = {**row, **values, "cluster_queue__name": cluster_queue,
              "resource_version": row["resource_version"] + 1}
    return {name: merged[name] for name in RESERVING_FIELDS}


def reserving_rows(cluster_id: int) -> list[dict[str, Any]]:
    """values() rows of every active workload holding quota in the domain, in name order
    (sorted here: see ``models.name_order``). Their ids, uids and versions are one query;
    only rows not read before at that version are loaded (``reserving_cache``)."""
    reserving = Workload.objects.filter(
        cluster_id=cluster_id,
        phase__in=(WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED),
        active=True,  # Kueue's cache drops a deactivated workload's usage at once
    ).order_by()
    wanted = {pk: (uid, version) for pk, uid, version
              in reserving.values_list("id", "uid", "resource_version")}
    rows = reserving_cache.rows(
        cluster_id, wanted, lambda ids: values_rows(reserving.filter(pk__in=ids), RESERVING_FIELDS))
    rows.sort(key=name_order)
    return rows
