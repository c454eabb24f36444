"""Use cases on Kueue manifests: apply a set of them to a domain in one transaction, export a
domain as manifests that apply back to the same state, and create, replace or delete one
object (the REST API). Besides Kueue's kinds, a simulated cluster's core/v1 Nodes apply and
export the same way (``multicluster.manifests.NodeKind``).

An apply runs in three steps: read every document on its own (``read_document``),
check what needs the domain (flavors exist, no cohort cycle, immutable fields) against the
stored objects overlaid with the documents, then write kind by kind in dependency order —
whatever the order of the documents. Any error rejects the whole apply: nothing is written.

From Python (the demo command, tests)::

    apply_manifests([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                      "metadata": {"name": "default-flavor"}}], cluster="manager")
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from django.db import IntegrityError, models, transaction
from django.utils import timezone

from multicluster.choices import ClusterRole
from multicluster.manifests import (
    ADMISSION_CHECK,
    GANG_WORKLOAD,
    MULTIKUEUE_CLUSTER,
    MULTIKUEUE_CONFIG,
    NODE,
    PROVISIONING_REQUEST_CONFIG,
)
from multicluster.models import Cluster, MultiKueueConfig
from scheduling.manifests.cluster_objects import (
    CLUSTER_OBJECT_KINDS,
    LIMIT_RANGE,
    PRIORITY_CLASS,
    RUNTIME_CLASS,
    ClusterObjectKind,
)
from scheduling.manifests.codec import (
    API_GROUP,
    CLUSTER_QUEUE,
    COHORT,
    DEFAULT_NAMESPACE,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    WORKLOAD_PRIORITY_CLASS,
    Conflict,
    Kind,
    Manifest,
    ManifestInvalid,
    Plan,
    Reader,
    WriteContext,
    read_manifest,
)
from scheduling.models import ClusterQueue, Cohort, ResourceFlavor
from scheduling.scheduler import admission
from scheduling.validation import FieldError

# Every kind apply accepts, in the order it writes them: what is referenced comes first.
# Node, Kubernetes' scheduling.k8s.io Workload (keyed by its group, since Kueue has a
# Workload too) and the cluster's own PriorityClasses, LimitRanges and RuntimeClasses
# (simulated clusters only) refer to nothing and nothing refers to them, so they go last: an
# export lists a domain's Kueue objects first, in the order they always had.
KINDS: dict[str, Kind[Any]] = {
    kind.kind: kind
    for kind in (
        RESOURCE_FLAVOR, COHORT, CLUSTER_QUEUE, LOCAL_QUEUE, WORKLOAD_PRIORITY_CLASS,
        ADMISSION_CHECK, MULTIKUEUE_CLUSTER, MULTIKUEUE_CONFIG, PROVISIONING_REQUEST_CONFIG,
        NODE, GANG_WORKLOAD, PRIORITY_CLASS, LIMIT_RANGE, RUNTIME_CLASS,
    )
}
# Kinds that are not Kueue's, by their API group: printed "node/n1",
# "workload.scheduling.k8s.io/w" (its key holds its group) and
# "priorityclass.scheduling.k8s.io/high", not "node.kueue.x-k8s.io/n1".
OTHER_GROUPS = {NODE.kind: "", GANG_WORKLOAD.kind: "",
                **{kind.kind: kind.api_group for kind in CLUSTER_OBJECT_KINDS}}
# Kinds that are no quota: their writes change no cluster queue.
CORE_KINDS = frozenset(OTHER_GROUPS)


def resource_name(kind: str) -> str:
    """``clusterqueues.kueue.x-k8s.io``, ``nodes``, ``priorityclasses.scheduling.k8s.io``."""
    group = OTHER_GROUPS.get(kind, API_GROUP)
    plural = KINDS[kind].plural
    return f"{plural}.{group}" if group else plural


Action = Literal["created", "updated", "unchanged"]


class UnknownCluster(LookupError):
    """``?cluster=NAME`` / ``--cluster NAME`` names no cluster."""


@dataclass(frozen=True)
class AppliedObject:
    kind: str
    name: str
    namespace: str
    action: Action
    # Created as a side effect (a cohort a ClusterQueue or Cohort names but no document has).
    implicit: bool = False

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "name": self.name}
        if self.namespace:
            data["namespace"] = self.namespace
        if self.implicit:
            data["implicit"] = True
        return data

    def line(self) -> str:
        """kubectl's line: ``clusterqueue.kueue.x-k8s.io/cluster-queue created``."""
        where = f" (namespace {self.namespace})" if self.namespace else ""
        implicit = " (implicit)" if self.implicit else ""
        group = OTHER_GROUPS.get(self.kind, API_GROUP)
        kind = f"{self.kind.lower()}.{group}" if group else self.kind.lower()
        return f"{kind}/{self.name}{where} {self.action}{implicit}"


@dataclass
class ApplyResult:
    cluster: str
    objects: list[AppliedObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def _with(self, action: Action) -> list[AppliedObject]:
        return [obj for obj in self.objects if obj.action == action]

    @property
    def created(self) -> list[AppliedObject]:
        return self._with("created")

    @property
    def updated(self) -> list[AppliedObject]:
        return self._with("updated")

    @property
    def unchanged(self) -> list[AppliedObject]:
        return self._with("unchanged")

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "created": [obj.as_dict() for obj in self.created],
            "updated": [obj.as_dict() for obj in self.updated],
            "unchanged": [obj.as_dict() for obj in self.unchanged],
            "warnings": list(self.warnings),
        }


class ApplyError(Exception):
    """Documents Kueue would refuse; nothing of the apply was written."""

    def __init__(self, documents: Sequence[ManifestInvalid]) -> None:
        self.documents = list(documents)
        super().__init__("\n".join(document.message() for document in self.documents))

    def as_dict(self) -> dict[str, Any]:
        return {
            "detail": self.documents[0].message() if self.documents else "invalid manifests",
            "documents": [document.as_dict() for document in self.documents],
        }


def resolve_cluster(cluster: Cluster | str | None) -> Cluster:
    """The domain named ``cluster`` (the manager when None)."""
    if isinstance(cluster, Cluster):
        return cluster
    if cluster:
        found = Cluster.objects.filter(name=cluster).first()
        if found is None:
            raise UnknownCluster(f'cluster "{cluster}" does not exist')
        return found
    manager = Cluster.objects.filter(role=ClusterRole.MANAGER).first()
    if manager is None:
        raise UnknownCluster("there is no manager cluster")
    return manager


# --- apply -------------------------------------------------------------------------------------


def apply_manifests(
    documents: Iterable[Any], *, cluster: Cluster | str | None = None
) -> ApplyResult:
    """Create or update every object of ``documents`` (Kueue manifests as dicts, v1beta1 or
    v1beta2) in ``cluster``'s domain, in one transaction. Raises ApplyError naming each bad
    document (index, kind, name, field) and UnknownCluster; writes nothing then."""
    domain = resolve_cluster(cluster)
    manifests: list[Manifest] = []
    invalid: list[ManifestInvalid] = []
    for index, document in enumerate(documents):
        try:
            manifests.append(read_document(document, index=index))
        except ManifestInvalid as exc:
            invalid.append(exc)
    if invalid:
        raise ApplyError(invalid)
    result, _ = _apply(manifests, domain)
    return result


def apply_object(
    document: Any,
    *,
    kind: str,
    cluster: Cluster,
    instance: models.Model | None = None,
    namespace: str | None = None,
) -> tuple[Any, ApplyResult]:
    """Create (``instance`` None) or replace the spec of one object, as the REST API does.

    The body may leave out apiVersion and kind; its name and namespace must match the URL's.
    Raises ManifestInvalid (field errors, no document index) and Conflict (creating an
    object that exists).
    """
    manifest = read_document(document, default_kind=kind,
                             default_namespace=namespace or DEFAULT_NAMESPACE)
    errors = []
    url_name = getattr(instance, "name", None)
    if url_name is not None and manifest.name != url_name:
        errors.append(FieldError("metadata.name", f'the name of the object ("{manifest.name}") '
                                                  f'does not match the name in the URL '
                                                  f'("{url_name}")'))
    if namespace is not None and manifest.namespace != namespace:
        errors.append(FieldError("metadata.namespace", f'the namespace of the object '
                                                       f'("{manifest.namespace}") does not match '
                                                       f'the namespace in the URL ("{namespace}")'))
    if errors:
        raise ManifestInvalid(errors, kind=kind, name=manifest.name, namespace=manifest.namespace)
    try:
        result, written = _apply([manifest], cluster, create_only=instance is None)
    except ApplyError as exc:
        raise exc.documents[0] from None
    return written[0], result


def read_document(
    document: Any,
    *,
    index: int | None = None,
    default_kind: str | None = None,
    default_namespace: str = DEFAULT_NAMESPACE,
) -> Manifest:
    """``read_manifest`` with every kind of KINDS: a Node (core/v1, whose apiVersion is not
    Kueue's) is read by its own codec, the Kueue kinds by ``read_manifest``."""
    named = document.get("kind") if isinstance(document, Mapping) else None
    if (default_kind or named) == NODE.kind:
        return NODE.read_document(document, index=index, default_kind=default_kind)
    api_version = document.get("apiVersion") if isinstance(document, Mapping) else None
    if default_kind == GANG_WORKLOAD.kind or (named == "Workload" and isinstance(
            api_version, str) and api_version.startswith("scheduling.k8s.io/")):
        return GANG_WORKLOAD.read_document(document, index=index,
                                           default_namespace=default_namespace)
    codec = KINDS.get(str(default_kind or named))
    if isinstance(codec, ClusterObjectKind):
        return codec.read_document(document, index=index, default_kind=default_kind,
                                   default_namespace=default_namespace)
    return read_manifest(document, KINDS, index=index, default_kind=default_kind,
                         default_namespace=default_namespace)


def _apply(
    manifests: list[Manifest], domain: Cluster, *, create_only: bool = False
) -> tuple[ApplyResult, list[Any]]:
    """Check and write read manifests; returns the result and the objects, in input order."""
    # 1. Group by kind, in write order; parents before child cohorts.
    _refuse_duplicates(manifests)
    by_kind: dict[str, list[Manifest]] = {name: [] for name in KINDS}
    for manifest in manifests:
        by_kind[manifest.kind].append(manifest)
    by_kind["Cohort"] = _parents_first(by_kind["Cohort"])
    result = ApplyResult(cluster=domain.name)
    written: dict[tuple[str, str, str], Any] = {}
    try:
        with transaction.atomic():
            # 2. Check what needs the domain, against stored objects overlaid with the batch.
            existing = {name: KINDS[name].existing(domain, items) if items else {}
                        for name, items in by_kind.items()}
            _check(by_kind, _plan(domain, by_kind), existing, create_only=create_only)
            # 3. Write what changed, kind by kind.
            ctx = WriteContext(domain)
            for name, items in by_kind.items():
                for manifest in items:
                    obj = existing[name].get((manifest.namespace, manifest.name))
                    written[manifest.key] = _write(KINDS[name], manifest, obj, ctx, result)
            # 4. After commit, let the admission cycle see the new quota.
            _requeue_after_change(domain, result, written)
    except IntegrityError as exc:
        # Another writer created the same object between our read and our write.
        raise Conflict(f"a concurrent change conflicted with this apply; retry it ({exc})") from exc
    return result, [written[manifest.key] for manifest in manifests]


def _write(codec: Kind[Any], manifest: Manifest, obj: Any, ctx: WriteContext,
           result: ApplyResult) -> Any:
    action: Action
    if obj is not None and codec.state_of(obj) == codec.state_of_manifest(manifest):
        action = "unchanged"  # no write: the resourceVersion stays
    else:
        action = "created" if obj is None else "updated"
        implicit_before = len(ctx.implicit)
        obj = codec.write(manifest, obj, ctx)
        for kind, implicit_name in ctx.implicit[implicit_before:]:
            result.objects.append(AppliedObject(kind, implicit_name, "", "created",
                                                implicit=True))
    result.objects.append(AppliedObject(manifest.kind, manifest.name, manifest.namespace, action))
    # A single object (the REST API) needs no "documents[i]" prefix.
    prefix = f"{manifest.describe()}: " if manifest.index is not None else ""
    result.warnings.extend(prefix + warning for warning in manifest.warnings)
    return obj


# Kinds whose changes can let a parked workload fit, or make it need another queue.
_QUOTA_KINDS = {"ResourceFlavor", "Cohort", "LocalQueue", "AdmissionCheck", "MultiKueueConfig",
                "ProvisioningRequestConfig"}


def _requeue_after_change(
    domain: Cluster, result: ApplyResult, written: Mapping[tuple[str, str, str], Any]
) -> None:
    """Kueue requeues a cohort tree's inadmissible workloads when a queue, cohort or flavor
    changes (its ClusterQueue and Cohort reconcilers call QueueInadmissibleWorkloads); the
    same here, then a cycle is requested once the apply commits."""
    requeue_for_cluster_objects(domain, [obj for obj in result.objects
                                         if obj.action != "unchanged"])
    # Nodes are no quota: their writes ask the simulated cluster to place pods instead.
    changed = [obj for obj in result.objects
               if obj.action != "unchanged" and obj.kind not in CORE_KINDS]
    if not changed:
        return
    if any(obj.kind in _QUOTA_KINDS for obj in changed):
        queue_ids: Iterable[int] = ClusterQueue.objects.filter(cluster=domain) \
            .values_list("pk", flat=True)
    else:
        queue_ids = [written[("ClusterQueue", "", obj.name)].pk for obj in changed
                     if obj.kind == "ClusterQueue" and ("ClusterQueue", "", obj.name) in written]
    admission.on_quota_released(domain.pk, list(queue_ids), now=timezone.now())


def requeue_for_cluster_objects(domain: Cluster, changed: Iterable[AppliedObject]) -> None:
    """A LimitRange or RuntimeClass changed: what pending workloads ask for may have, so
    the parked ones go back to their queues (Kueue's workload controller re-adds the
    pending workloads of the LimitRange's namespace, or of those naming the RuntimeClass)."""
    namespaces: set[str] = set()
    everywhere = False
    for obj in changed:
        if obj.kind == LIMIT_RANGE.kind:
            namespaces.add(obj.namespace)
        elif obj.kind == RUNTIME_CLASS.kind:
            everywhere = True
    if everywhere or namespaces:
        admission.requeue_pending_of(domain.pk, None if everywhere else namespaces,
                                     now=timezone.now())


def _refuse_duplicates(manifests: Sequence[Manifest]) -> None:
    first: dict[tuple[str, str, str], Manifest] = {}
    invalid = []
    for manifest in manifests:
        other = first.setdefault(manifest.key, manifest)
        if other is not manifest:
            invalid.append(ManifestInvalid(
                [FieldError("metadata.name", f"{manifest.kind} \"{manifest.name}\" is also defined "
                                         f"by documents[{other.index}]")],
                index=manifest.index, kind=manifest.kind, name=manifest.name,
                namespace=manifest.namespace,
            ))
    if invalid:
        raise ApplyError(invalid)


def _parents_first(cohorts: list[Manifest]) -> list[Manifest]:
    """Cohorts ordered so a parent defined in the same apply is written before its children
    (cycles are refused later; they keep document order here)."""
    by_name = {m.name: m for m in cohorts}
    ordered: list[Manifest] = []
    placed: set[str] = set()

    def place(manifest: Manifest, visiting: set[str]) -> None:
        if manifest.name in placed or manifest.name in visiting:
            return
        parent = by_name.get(manifest.spec.get("parentName") or "")
        if parent is not None:
            place(parent, visiting | {manifest.name})
        placed.add(manifest.name)
        ordered.append(manifest)

    for manifest in cohorts:
        place(manifest, set())
    return ordered


def _plan(domain: Cluster, by_kind: Mapping[str, list[Manifest]]) -> Plan:
    plan = Plan(domain=domain)
    plan.flavors = set(ResourceFlavor.objects.filter(cluster=domain).values_list("name", flat=True))
    plan.flavors |= {m.name for m in by_kind["ResourceFlavor"]}
    plan.cluster_queues = set(
        ClusterQueue.objects.filter(cluster=domain).values_list("name", flat=True)
    )
    plan.cluster_queues |= {m.name for m in by_kind["ClusterQueue"]}
    plan.cohort_parents = dict(
        Cohort.objects.filter(cluster=domain).values_list("name", "parent__name")
    )
    for manifest in by_kind["Cohort"]:
        plan.cohort_parents[manifest.name] = manifest.spec.get("parentName")
    return plan


def _check(
    by_kind: Mapping[str, list[Manifest]],
    plan: Plan,
    existing: Mapping[str, Mapping[tuple[str, str], Any]],
    *,
    create_only: bool,
) -> None:
    invalid: list[ManifestInvalid] = []
    for name, items in by_kind.items():
        codec = KINDS[name]
        for manifest in items:
            obj = existing[name].get((manifest.namespace, manifest.name))
            if create_only and obj is not None:
                shown = f"{manifest.namespace}/{manifest.name}" if manifest.namespace \
                    else manifest.name
                resource = resource_name(name)
                raise Conflict(f'{resource} "{shown}" already exists')
            r = Reader()
            codec.check(manifest, plan, obj, r)
            manifest.warnings.extend(r.warnings)
            if r.errors:
                invalid.append(ManifestInvalid(r.errors, index=manifest.index, kind=manifest.kind,
                                               name=manifest.name, namespace=manifest.namespace))
    if invalid:
        invalid.sort(key=lambda exc: -1 if exc.index is None else exc.index)
        raise ApplyError(invalid)


# --- delete ------------------------------------------------------------------------------------


def delete_object(kind: str, obj: models.Model) -> None:
    """Delete one object unless it is in use (Kueue's ``resource-in-use`` finalizer):
    raises Conflict with the reason instead."""
    with transaction.atomic():
        reason = KINDS[kind].in_use(obj)
        if reason is not None:
            raise Conflict(reason)
        domain_id = getattr(obj, "cluster_id", None)
        if domain_id is not None:
            # A deleted queue or flavor changes what fits: run a cycle after commit.
            admission.request_admission(domain_id)
        try:
            obj.delete()
            if kind in (LIMIT_RANGE.kind, RUNTIME_CLASS.kind) and domain_id is not None:
                admission.requeue_pending_of(
                    domain_id, [obj.namespace] if kind == LIMIT_RANGE.kind else None,  # type: ignore[attr-defined]
                    now=timezone.now())
        except (models.ProtectedError, models.RestrictedError) as exc:
            # A reference appeared since the check, or one the check does not look at.
            raise Conflict(f'{kind} "{getattr(obj, "name", obj)}" is in use: other objects '
                           "still refer to it") from exc


# --- export ------------------------------------------------------------------------------------


def export_manifests(cluster: Cluster | str | None = None) -> list[dict[str, Any]]:
    """Every Kueue object of a domain as v1beta2 manifests, in apply order, that
    ``apply_manifests`` turns back into the same state (in this or an empty domain)."""
    domain = resolve_cluster(cluster)
    documents: list[dict[str, Any]] = []
    for name, codec in KINDS.items():
        if name == "MultiKueueCluster":
            objects: Iterable[Any] = _referenced_workers(domain)
        elif name == "Cohort":
            objects = _cohorts_parents_first(list(codec.queryset(domain)))
        elif isinstance(codec, ClusterObjectKind):
            objects = codec.exported(domain).order_by(
                *(("namespace", "name") if codec.namespaced else ("name",)))
        else:
            objects = codec.queryset(domain).order_by(
                *(("namespace", "name") if codec.namespaced else ("name",))
            )
        documents.extend(codec.to_manifest(obj, export=True) for obj in objects)
    return documents


def _referenced_workers(domain: Cluster) -> list[Cluster]:
    """Workers named by the domain's MultiKueueConfigs: the MultiKueueClusters a Kueue
    installation of this domain would hold."""
    names = {name for config in MultiKueueConfig.objects.filter(cluster=domain)
             for name in config.clusters}
    return list(Cluster.objects.filter(name__in=names, role=ClusterRole.WORKER).order_by("name"))


def _cohorts_parents_first(cohorts: list[Cohort]) -> list[Cohort]:
    by_name = {c.name: c for c in cohorts}

    def depth(cohort: Cohort) -> int:
        seen = {cohort.name}
        level = 0
        parent = cohort.parent
        while parent is not None and parent.name in by_name and parent.name not in seen:
            seen.add(parent.name)
            level += 1
            parent = by_name[parent.name].parent
        return level

    return sorted(cohorts, key=lambda c: (depth(c), c.name))
