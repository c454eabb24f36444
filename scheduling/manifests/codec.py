"""Kueue manifests ⇄ models: the one codec behind ``apply``, ``export``, the REST API and the
admin console, so all of them accept, refuse and print exactly the same objects.

A manifest is read in two steps. ``read_manifest`` checks one document on its own (envelope,
Kueue's field rules with Kueue's field paths, v1beta1 spellings turned into v1beta2) and
gives a ``Manifest`` whose ``spec`` is the normalised, defaulted v1beta2 spec — the same dict
``Kind.spec_of`` computes from a stored object, so "unchanged" is a plain comparison. Checks
that need other objects (a flavor exists, a cohort cycle, an immutable field) run in
``scheduling.manifests.apply`` once every document of an apply is read.

This module holds the scheduling kinds (ResourceFlavor, Cohort, ClusterQueue, LocalQueue,
WorkloadPriorityClass) and the status of queues; ``multicluster.manifests`` holds
AdmissionCheck, MultiKueueConfig, MultiKueueCluster and ProvisioningRequestConfig on the
same ``Kind`` base.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Prefetch

from scheduling.api.base import object_metadata
from scheduling.cache import snapshots
from scheduling.choices import (
    BorrowWithinCohortPolicy,
    FungibilityPolicy,
    FungibilityPreference,
    QueueingStrategy,
    ReclaimWithinCohort,
    StopPolicy,
    WithinClusterQueue,
    WorkloadPhase,
)
from scheduling.core.quantities import (
    QuantityError,
    int_to_quantity,
    parse_quantity,
    quantity_to_int,
)
from scheduling.models import (
    ClusterQueue,
    Cohort,
    FlavorQuota,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
    examples,
)
from scheduling.validation import (
    FieldError,
    resource_groups_from_rows,
    rows_from_resource_groups,
    validate_admission_check_flavors,
    validate_fair_sharing_weight,
    validate_fungibility,
    validate_label_selector,
    validate_preemption,
    validate_resource_groups,
)
from scheduling.validators import (
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_label_value,
    validate_labels,
    validate_qualified_name,
)

if TYPE_CHECKING:
    from multicluster.models import Cluster

API_GROUP = "kueue.x-k8s.io"
V1BETA1 = f"{API_GROUP}/v1beta1"
V1BETA2 = f"{API_GROUP}/v1beta2"
API_VERSIONS = (V1BETA1, V1BETA2)
# Annotations under this prefix carry kueueweb state Kueue has no field for.
ANNOTATION_PREFIX = "kueueweb.io/"
DEFAULT_NAMESPACE = "default"  # kubectl's namespace when a manifest names none

# ObjectMeta set by an API server (``kubectl get -o yaml`` output): accepted so such output
# applies, and ignored, as kubectl apply does.
_SERVER_METADATA = frozenset({
    "uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
    "finalizers", "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds",
    "generateName", "cluster",
})
_INT32 = (-(2**31), 2**31 - 1)

M = TypeVar("M", bound=models.Model)


# --- errors and the read side --------------------------------------------------------------


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@dataclass
class Manifest:
    """One Kueue object read from a document: identity plus its normalised v1beta2 spec.

    ``spec`` holds the top-level ``value``/``description`` for WorkloadPriorityClass, which
    has no spec. ``annotations`` are the ``kueueweb.io/`` annotations that carry state.
    """

    kind: str
    name: str
    namespace: str = ""
    spec: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    index: int | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.namespace, self.name)

    def describe(self) -> str:
        return describe(self.index, self.kind, self.name, self.namespace)


def describe(index: int | None, kind: str | None, name: str | None, namespace: str = "") -> str:
    """``documents[2] (ClusterQueue "team-a")``: how errors and warnings name a document."""
    parts = []
    if index is not None:
        parts.append(f"documents[{index}]")
    if kind:
        shown = f"{namespace}/{name}" if namespace and name else name
        parts.append(f'({kind} "{shown}")' if shown else f"({kind})")
    return " ".join(parts)


class ManifestInvalid(Exception):
    """A document that Kueue would refuse: its field errors, with Kueue's field paths."""

    def __init__(
        self,
        errors: Sequence[FieldError],
        *,
        index: int | None = None,
        kind: str | None = None,
        name: str | None = None,
        namespace: str = "",
    ) -> None:
        self.errors = list(errors)
        self.index = index
        self.kind = kind
        self.name = name
        self.namespace = namespace
        super().__init__(self.message())

    def message(self) -> str:
        where = describe(self.index, self.kind, self.name, self.namespace)
        lines = [f"{e.path}: {e.message}" if e.path else e.message for e in self.errors]
        prefix = f"{where}: " if where else ""
        return "; ".join(prefix + line for line in lines)

    def as_dict(self) -> dict[str, Any]:
        errors: dict[str, list[str]] = {}
        for error in self.errors:
            errors.setdefault(error.path or "non_field_errors", []).append(error.message)
        return {
            "index": self.index,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace or None,
            "errors": errors,
        }


class Conflict(Exception):
    """A write that contradicts stored state: the object exists (create), is gone (update),
    or is still in use (delete, Kueue's ``resource-in-use`` finalizer)."""


class Reader:
    """Reads one document, collecting field errors (Kueue's paths) and warnings."""

    def __init__(self, version: str = V1BETA2) -> None:
        self.version = version
        self.errors: list[FieldError] = []
        self.warnings: list[str] = []

    @property
    def v1beta1(self) -> bool:
        return self.version == V1BETA1

    def error(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def extend(self, errors: Iterable[FieldError]) -> None:
        self.errors.extend(errors)

    def unsupported(self, path: str, why: str = "") -> None:
        reason = f" ({why})" if why else ""
        self.warnings.append(f"{path} is not supported by kueueweb{reason} and was ignored")

    def fields(
        self,
        value: Any,
        path: str,
        known: Collection[str],
        *,
        hints: Mapping[str, str] | None = None,
        ignored: Collection[str] = (),
        unsupported: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """The object at ``path`` without null members (null is "not set", as in Kubernetes'
        omitempty fields), or {} after recording an error when it is not an object.

        Unknown members are errors (kubectl's strict field validation), with a hint when
        the name is another API version's spelling; ``ignored`` members are dropped
        silently and ``unsupported`` ones with a warning.
        """
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(path, f"must be an object, not {_type_name(value)}")
            return {}
        result: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                self.error(path, f"field names must be strings, got {key!r}")
                continue
            sub = join(path, key)
            if key in ignored:
                continue
            if unsupported and key in unsupported:
                if item is not None:
                    self.unsupported(sub, unsupported[key])
                continue
            if key not in known:
                hint = (hints or {}).get(key)
                self.error(sub, f'unknown field "{key}"' + (f" ({hint})" if hint else ""))
                continue
            if item is not None:
                result[key] = item
        return result

    def string(
        self,
        value: Any,
        path: str,
        *,
        required: bool = False,
        choices: Sequence[str] | None = None,
        default: str | None = None,
        max_length: int | None = None,
        name: str | None = None,
    ) -> str | None:
        """A string member: ``choices`` is an enum; ``name`` validates a Kubernetes name
        ("subdomain", "label" or "qualified")."""
        if value is None or value == "":
            if required:
                self.error(path, "Required value")
            return default
        if not isinstance(value, str):
            self.error(path, f"must be a string, not {_type_name(value)}")
            return default
        if choices is not None and value not in choices:
            supported = ", ".join(f'"{c}"' for c in choices)
            self.error(path, f'Unsupported value: "{value}": supported values: {supported}')
            return default
        if max_length is not None and len(value) > max_length:
            self.error(path, f"must have at most {max_length} characters")
            return default
        validator = {
            "subdomain": validate_dns1123_subdomain,
            "label": validate_dns1123_label,
            "qualified": validate_qualified_name,
        }.get(name or "")
        if validator is not None:
            try:
                validator(value)
            except ValidationError as exc:
                self.error(path, exc.messages[0])
                return default
        return value

    def int32(self, value: Any, path: str, *, required: bool = False) -> int | None:
        if value is None:
            if required:
                self.error(path, "Required value")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"must be an integer, not {_type_name(value)}")
            return None
        if not _INT32[0] <= value <= _INT32[1]:
            self.error(path, "must be a 32-bit integer")
            return None
        return int(value)

    def quantity(self, value: Any, path: str) -> str | None:
        """A non-negative quantity, kept as written (``9`` becomes ``"9"``)."""
        try:
            parse_quantity(value)
        except QuantityError as exc:
            self.error(path, str(exc))
            return None
        return quantity_text(value)

    def string_list(
        self, value: Any, path: str, *, name: str | None = None, unique: bool = False,
        max_items: int | None = None, min_items: int = 0,
    ) -> list[str]:
        if value is None:
            value = []
        if not isinstance(value, list):
            self.error(path, f"must be a list, not {_type_name(value)}")
            return []
        if len(value) < min_items:
            self.error(path, f"must have at least {min_items} item{'s' if min_items > 1 else ''}")
        if max_items is not None and len(value) > max_items:
            self.error(path, f"must have at most {max_items} items")
        result: list[str] = []
        for i, item in enumerate(value):
            text = self.string(item, join(path, i), required=True, name=name)
            if text is None:
                continue
            if unique and text in result:
                self.error(join(path, i), f'Duplicate value: "{text}"')
                continue
            result.append(text)
        return result


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def quantity_text(value: Any) -> str:
    """How a quantity is stored and printed: the text as written (numbers as their digits)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


# --- kinds -------------------------------------------------------------------------------------


@dataclass
class Plan:
    """What the domain will hold once an apply is written: the names other objects may
    reference, and every cohort's parent (stored values overlaid with the documents)."""

    domain: Cluster
    flavors: set[str] = field(default_factory=set)
    cluster_queues: set[str] = field(default_factory=set)
    cohort_parents: dict[str, str | None] = field(default_factory=dict)


class WriteContext:
    """Model lookups shared by the writes of one apply, in one domain."""

    def __init__(self, domain: Cluster) -> None:
        self.domain = domain
        self.implicit: list[tuple[str, str]] = []  # (kind, name) created as a side effect
        self._flavors: dict[str, ResourceFlavor] | None = None
        self._cohorts: dict[str, Cohort] | None = None

    def flavor(self, name: str) -> ResourceFlavor:
        if self._flavors is None:
            self._flavors = {f.name: f for f in ResourceFlavor.objects.filter(cluster=self.domain)}
        return self._flavors[name]

    def flavor_written(self, flavor: ResourceFlavor) -> None:
        if self._flavors is not None:
            self._flavors[flavor.name] = flavor

    def cohort(self, name: str | None) -> Cohort | None:
        """The cohort called ``name``, created empty if it does not exist (Kueue treats a
        name no Cohort object has as an implicit cohort with no quota)."""
        if not name:
            return None
        if self._cohorts is None:
            self._cohorts = {c.name: c for c in Cohort.objects.filter(cluster=self.domain)}
        cohort = self._cohorts.get(name)
        if cohort is None:
            cohort = Cohort.objects.create(cluster=self.domain, name=name)
            self._cohorts[name] = cohort
            self.implicit.append(("Cohort", name))
        return cohort

    def cohort_written(self, cohort: Cohort) -> None:
        if self._cohorts is not None:
            self._cohorts[cohort.name] = cohort


class Kind(ABC, Generic[M]):
    """How one Kueue kind is read from a manifest, compared, written and printed."""

    kind: ClassVar[str]
    plural: ClassVar[str]
    model: type[M]
    namespaced: ClassVar[bool] = False
    has_spec: ClassVar[bool] = True
    # The kueueweb.io/ annotations ``read_annotations`` reads; others warn.
    known_annotations: ClassVar[tuple[str, ...]] = ()

    # -- read
    @abstractmethod
    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        """The spec of ``document`` as this kind stores it, errors reported to ``r``."""

    def read_annotations(self, annotations: Mapping[str, str], r: Reader) -> dict[str, str]:
        """The state this kind keeps in ``kueueweb.io/`` annotations, read and checked."""
        return {}

    def check(self, manifest: Manifest, plan: Plan, existing: M | None, r: Reader) -> None:
        """Rules that need other objects of the domain, or the stored version of this one."""

    # -- stored side
    def queryset(self, domain: Cluster) -> models.QuerySet[M]:
        return self.model._default_manager.filter(cluster=domain)

    def existing(self, domain: Cluster, manifests: Sequence[Manifest]) -> dict[tuple[str, str], M]:
        names = {m.name for m in manifests}
        found = self.queryset(domain).filter(name__in=names)
        return {(getattr(obj, "namespace", ""), getattr(obj, "name", "")): obj for obj in found}

    @abstractmethod
    def spec_of(self, obj: M) -> dict[str, Any]:
        """The stored object's spec, in the shape ``read_spec`` returns."""

    def annotations_of(self, obj: M) -> dict[str, str]:
        return {}

    def state_of(self, obj: M) -> Any:
        return (self.spec_of(obj), self.annotations_of(obj))

    def state_of_manifest(self, manifest: Manifest) -> Any:
        return (manifest.spec, manifest.annotations)

    @abstractmethod
    def write(self, manifest: Manifest, obj: M | None, ctx: WriteContext) -> M:
        """Create or update the object for ``manifest`` (``obj`` is the stored one)."""

    def in_use(self, obj: M) -> str | None:
        """Why ``obj`` cannot be deleted now, or None."""
        return None

    # -- print
    def status_of(self, obj: M, computed: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The ``status`` printed by the API (None: the kind has no status in Kueue)."""
        return None

    def to_manifest(
        self, obj: M, *, export: bool = False, status: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The object as Kueue prints it (v1beta2). ``export``: only what ``apply`` reads
        back (no server metadata, no status)."""
        if export:
            metadata: dict[str, Any] = {"name": obj.name}  # type: ignore[attr-defined]
            if self.namespaced:
                metadata["namespace"] = obj.namespace  # type: ignore[attr-defined]
        else:
            metadata = object_metadata(obj, namespaced=self.namespaced)
        annotations = self.annotations_of(obj)
        if annotations:
            metadata["annotations"] = {**metadata.get("annotations", {}), **annotations}
        document: dict[str, Any] = {"apiVersion": V1BETA2, "kind": self.kind, "metadata": metadata}
        spec = self.spec_of(obj)
        if self.has_spec:
            document["spec"] = spec
        else:
            document.update(spec)
        if not export:
            printed = self.status_of(obj, status)
            if printed is not None:
                document["status"] = printed
        return document


def read_manifest(
    document: Any,
    kinds: Mapping[str, Kind[Any]],
    *,
    index: int | None = None,
    default_kind: str | None = None,
    default_namespace: str = DEFAULT_NAMESPACE,
) -> Manifest:
    """Check one document on its own and normalise it (raises ManifestInvalid).

    ``default_kind``: the REST API's endpoint kind, used when the body names none (and the
    kind it must name otherwise); apiVersion then defaults to v1beta2.
    """
    if not isinstance(document, Mapping):
        raise ManifestInvalid(
            [FieldError("", f"a manifest must be an object, not {_type_name(document)}")],
            index=index,
        )
    api_version = document.get("apiVersion")
    kind_name = document.get("kind")
    errors: list[FieldError] = []
    if default_kind is not None:
        api_version = api_version or V1BETA2
        kind_name = kind_name or default_kind
        if kind_name != default_kind:
            errors.append(FieldError("kind", f'must be "{default_kind}" at this endpoint'))
    if api_version not in API_VERSIONS:
        if not api_version:
            errors.append(FieldError("apiVersion", "Required value"))
        else:
            supported = ", ".join(f'"{v}"' for v in API_VERSIONS)
            errors.append(FieldError(
                "apiVersion", f'Unsupported value: "{api_version}": supported values: {supported}'
            ))
    kind = kinds.get(kind_name) if isinstance(kind_name, str) else None
    if kind is None and not errors:
        if not kind_name:
            errors.append(FieldError("kind", "Required value"))
        else:
            supported = ", ".join(f'"{k}"' for k in kinds)
            errors.append(FieldError(
                "kind", f'Unsupported value: "{kind_name}": kueueweb applies {supported}'
            ))
    raw_metadata = document.get("metadata")
    name = raw_metadata.get("name") if isinstance(raw_metadata, Mapping) else None
    shown_name = name if isinstance(name, str) else None
    if errors or kind is None:
        raise ManifestInvalid(errors, index=index, kind=kind_name if isinstance(kind_name, str)
                              else None, name=shown_name)

    r = Reader(str(api_version))
    top_level = {"apiVersion", "kind", "metadata", "status"}
    top_level |= {"spec"} if kind.has_spec else {"value", "description"}
    r.fields(document, "", top_level)
    metadata = r.fields(
        raw_metadata, "metadata", {"name", "namespace", "labels", "annotations"},
        ignored=_SERVER_METADATA,
    )
    name = r.string(metadata.get("name"), "metadata.name", required=True, name="subdomain")
    namespace = ""
    if kind.namespaced:
        namespace = r.string(metadata.get("namespace"), "metadata.namespace",
                             default=default_namespace, name="label") or ""
    if metadata.get("labels"):
        try:
            validate_labels(metadata["labels"])
        except ValidationError as exc:
            r.error("metadata.labels", exc.messages[0])
        r.unsupported("metadata.labels", "these kinds keep no labels")
    annotations = metadata.get("annotations") or {}
    ours: dict[str, str] = {}
    if not isinstance(annotations, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        r.error("metadata.annotations", "must be a map of strings to strings")
    else:
        ours = {k: v for k, v in annotations.items() if k.startswith(ANNOTATION_PREFIX)}
        # kubectl's own bookkeeping (last-applied-configuration) is dropped without a word.
        others = [k for k in annotations
                  if not k.startswith((ANNOTATION_PREFIX, "kubectl.kubernetes.io/"))]
        if others:
            r.unsupported("metadata.annotations", f"only {ANNOTATION_PREFIX} annotations are kept")
    spec = kind.read_spec(document, r)
    stored_annotations = kind.read_annotations(ours, r)
    for key in ours:
        if key not in kind.known_annotations:
            r.unsupported(f"metadata.annotations[{key}]", f"unknown for a {kind.kind}")
    if r.errors:
        raise ManifestInvalid(r.errors, index=index, kind=kind.kind, name=name or shown_name,
                              namespace=namespace)
    return Manifest(
        kind=kind.kind, name=name or "", namespace=namespace, spec=spec,
        annotations=stored_annotations, index=index, warnings=r.warnings,
    )


# --- shared spec pieces ---------------------------------------------------------------------


_GROUP_FIELDS = ("coveredResources", "flavors")
_FLAVOR_FIELDS = ("name", "resources")
_QUOTA_FIELDS = ("name", "nominalQuota", "borrowingLimit", "lendingLimit")


def read_resource_groups(
    value: Any, r: Reader, *, has_parent: bool, parent_field: str, enforce_lending_limit: bool
) -> list[dict[str, Any]]:
    """``spec.resourceGroups`` checked by Kueue's rules and normalised (quantities as text)."""
    path = "spec.resourceGroups"
    if value is None:
        return []
    before = len(r.errors)
    r.extend(validate_resource_groups(
        value, has_parent=has_parent, path=path, parent_field=parent_field,
        enforce_lending_limit=enforce_lending_limit,
    ))
    if not isinstance(value, list):
        return []
    groups: list[dict[str, Any]] = []
    for g, group in enumerate(value):
        gpath = join(path, g)
        raw = r.fields(group, gpath, _GROUP_FIELDS) if isinstance(group, Mapping) else {}
        flavors = []
        for f, flavor in enumerate(_as_list(raw.get("flavors"))):
            fpath = join(join(gpath, "flavors"), f)
            fraw = r.fields(flavor, fpath, _FLAVOR_FIELDS) if isinstance(flavor, Mapping) else {}
            resources = []
            for q, quota in enumerate(_as_list(fraw.get("resources"))):
                qpath = join(join(fpath, "resources"), q)
                qraw = r.fields(quota, qpath, _QUOTA_FIELDS) if isinstance(quota, Mapping) else {}
                entry: dict[str, Any] = {"name": qraw.get("name")}
                for key in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if key in qraw:
                        entry[key] = quantity_text(qraw[key])
                resources.append(entry)
            flavors.append({"name": fraw.get("name"), "resources": resources})
        groups.append({"coveredResources": _as_list(raw.get("coveredResources")),
                       "flavors": flavors})
    return groups if len(r.errors) == before else []


def _as_list(value: Any) -> list[Any]:
    """A list field as a list; any other shape was refused by field already."""
    return list(value) if isinstance(value, list) else []


def flavor_names(groups: Iterable[Mapping[str, Any]]) -> list[str]:
    return [flavor["name"] for group in groups for flavor in group["flavors"]]


def check_flavors_exist(groups: Sequence[Mapping[str, Any]], plan: Plan, r: Reader) -> None:
    for g, group in enumerate(groups):
        for f, flavor in enumerate(group["flavors"]):
            if flavor["name"] not in plan.flavors:
                r.error(f"spec.resourceGroups[{g}].flavors[{f}].name",
                        f'ResourceFlavor "{flavor["name"]}" does not exist in cluster '
                        f'"{plan.domain.name}"')


def read_fair_sharing(value: Any, path: str, r: Reader) -> str | None:
    fair_sharing = r.fields(value, path, ("weight",))
    weight = fair_sharing.get("weight")
    if weight is None:
        return None
    errors = validate_fair_sharing_weight(weight, f"{path}.weight")
    r.extend(errors)
    return None if errors else quantity_text(weight)


def replace_quotas(
    owner: ClusterQueue | Cohort, groups: Sequence[Mapping[str, Any]], ctx: WriteContext
) -> None:
    """Rewrite the FlavorQuota rows of ``owner`` from normalised resource groups."""
    owner.quotas.all().delete()
    owner_field = "cluster_queue" if isinstance(owner, ClusterQueue) else "cohort"
    FlavorQuota.objects.bulk_create(
        FlavorQuota(
            **{owner_field: owner},
            resource_group=row["resource_group"],
            position=row["position"],
            flavor=ctx.flavor(row["flavor_name"]),
            resource=row["resource"],
            nominal_quota=row["nominal_quota"],
            borrowing_limit=row["borrowing_limit"],
            lending_limit=row["lending_limit"],
        )
        for row in rows_from_resource_groups(groups)
    )


def _quotas_prefetch() -> Prefetch[Any]:
    return Prefetch("quotas", queryset=FlavorQuota.objects.select_related("flavor"))


def _assign(obj: models.Model, values: Mapping[str, Any]) -> None:
    for key, value in values.items():
        setattr(obj, key, value)


def _names(kind: str, names: Iterable[str]) -> str:
    quoted = ", ".join(f'"{name}"' for name in sorted(names))
    return f"{kind} {quoted}"


# --- ResourceFlavor --------------------------------------------------------------------------

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
MAX_FLAVOR_ITEMS = 8


def read_taints(value: Any, path: str, r: Reader) -> list[dict[str, Any]]:
    """Node taints as Kubernetes validates them: a key, a label value, a known effect, and
    each (key, effect) pair once."""
    if value is None:
        return []
    if not isinstance(value, list):
        r.error(path, "must be a list")
        return []
    taints: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(value):
        tpath = join(path, i)
        taint = r.fields(raw, tpath, ("key", "value", "effect", "timeAdded"))
        key = r.string(taint.get("key"), join(tpath, "key"), required=True, name="qualified")
        if "value" in taint:
            text = r.string(taint["value"], join(tpath, "value"))
            try:
                validate_label_value(text or "")
            except ValidationError as exc:
                r.error(join(tpath, "value"), exc.messages[0])
        effect = r.string(taint.get("effect"), join(tpath, "effect"), required=True,
                          choices=TAINT_EFFECTS)
        if key and effect:
            if (key, effect) in seen:
                r.error(tpath, "Duplicate value: taints must be unique by key and effect pair")
            seen.add((key, effect))
        taints.append(taint)
    return taints


def read_tolerations(value: Any, path: str, r: Reader) -> list[dict[str, Any]]:
    """Tolerations with the rules of Kueue's ResourceFlavor CEL validations."""
    if value is None:
        return []
    if not isinstance(value, list):
        r.error(path, "must be a list")
        return []
    tolerations: list[dict[str, Any]] = []
    for i, raw in enumerate(value):
        tpath = join(path, i)
        toleration = r.fields(raw, tpath, ("key", "operator", "value", "effect",
                                           "tolerationSeconds"))
        key = r.string(toleration.get("key"), join(tpath, "key"), name="qualified")
        operator = r.string(toleration.get("operator"), join(tpath, "operator"),
                            choices=TOLERATION_OPERATORS)
        effect = r.string(toleration.get("effect"), join(tpath, "effect"), choices=TAINT_EFFECTS)
        if not key and operator != "Exists":
            r.error(join(tpath, "operator"),
                    "operator must be Exists when 'key' is empty, which means 'match all values "
                    "and all keys'")
        if operator == "Exists" and toleration.get("value"):
            r.error(join(tpath, "value"), "a value must be empty when 'operator' is 'Exists'")
        elif "value" in toleration:
            text = r.string(toleration["value"], join(tpath, "value"))
            try:
                validate_label_value(text or "")
            except ValidationError as exc:
                r.error(join(tpath, "value"), exc.messages[0])
        if "tolerationSeconds" in toleration:
            seconds = toleration["tolerationSeconds"]
            if isinstance(seconds, bool) or not isinstance(seconds, int):
                r.error(join(tpath, "tolerationSeconds"), "must be an integer")
            elif effect != "NoExecute":
                r.error(join(tpath, "effect"),
                        "effect must be 'NoExecute' when 'tolerationSeconds' is set")
        tolerations.append(toleration)
    return tolerations


class ResourceFlavorKind(Kind[ResourceFlavor]):
    kind = "ResourceFlavor"
    plural = "resourceflavors"
    model = ResourceFlavor

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        spec = r.fields(document.get("spec"), "spec",
                        ("nodeLabels", "nodeTaints", "tolerations", "topologyName"))
        result: dict[str, Any] = {}
        labels = spec.get("nodeLabels")
        if labels:
            try:
                validate_labels(labels)
            except ValidationError as exc:
                r.error("spec.nodeLabels", exc.messages[0])
            else:
                if len(labels) > MAX_FLAVOR_ITEMS:
                    r.error("spec.nodeLabels", f"must have at most {MAX_FLAVOR_ITEMS} items")
                result["nodeLabels"] = dict(labels)
        for key, reader in (("nodeTaints", read_taints), ("tolerations", read_tolerations)):
            items = reader(spec.get(key), f"spec.{key}", r)
            if len(items) > MAX_FLAVOR_ITEMS:
                r.error(f"spec.{key}", f"must have at most {MAX_FLAVOR_ITEMS} items")
            if items:
                result[key] = items
        topology = r.string(spec.get("topologyName"), "spec.topologyName", name="subdomain")
        if topology:
            if not result.get("nodeLabels"):
                r.error("spec", "at least one nodeLabel is required when topology is set")
            result["topologyName"] = topology
        return result

    def check(self, manifest: Manifest, plan: Plan, existing: ResourceFlavor | None,
              r: Reader) -> None:
        if existing is not None and existing.topology_name and (
            manifest.spec.get("topologyName") != existing.topology_name
        ):
            r.error("spec.topologyName", "topologyName is immutable when topologyName is set")

    def spec_of(self, obj: ResourceFlavor) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if obj.node_labels:
            spec["nodeLabels"] = obj.node_labels
        if obj.node_taints:
            spec["nodeTaints"] = obj.node_taints
        if obj.tolerations:
            spec["tolerations"] = obj.tolerations
        if obj.topology_name:
            spec["topologyName"] = obj.topology_name
        return spec

    def write(self, manifest: Manifest, obj: ResourceFlavor | None,
              ctx: WriteContext) -> ResourceFlavor:
        spec = manifest.spec
        values = {
            "node_labels": spec.get("nodeLabels", {}),
            "node_taints": spec.get("nodeTaints", []),
            "tolerations": spec.get("tolerations", []),
            "topology_name": spec.get("topologyName", ""),
        }
        obj = obj or ResourceFlavor(cluster=ctx.domain, name=manifest.name)
        _assign(obj, values)
        obj.save()
        ctx.flavor_written(obj)
        return obj

    def in_use(self, obj: ResourceFlavor) -> str | None:
        rows = obj.quotas.select_related("cluster_queue", "cohort")
        queues = {q.cluster_queue.name for q in rows if q.cluster_queue is not None}
        cohorts = {q.cohort.name for q in rows if q.cohort is not None}
        if not queues and not cohorts:
            return None
        users = " and ".join(
            part for part in (_names("ClusterQueue", queues) if queues else "",
                              _names("Cohort", cohorts) if cohorts else "") if part
        )
        return (f'ResourceFlavor "{obj.name}" is in use by {users}: remove it from their '
                "resourceGroups first")


# --- Cohort ------------------------------------------------------------------------------------


class CohortKind(Kind[Cohort]):
    kind = "Cohort"
    plural = "cohorts"
    model = Cohort

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        known = {"parentName", "resourceGroups", "fairSharing"}
        if r.v1beta1:
            known.add("parent")  # v1alpha1's spelling, still accepted from older files
        spec = r.fields(document.get("spec"), "spec", known,
                        hints={"parent": 'v1beta2 spells it "parentName"'})
        parent = r.string(spec.get("parentName"), "spec.parentName", name="subdomain")
        alias = r.string(spec.get("parent"), "spec.parent", name="subdomain")
        if alias and parent and alias != parent:
            r.error("spec.parent", "must equal spec.parentName when both are set")
        parent = parent or alias
        result: dict[str, Any] = {}
        if parent:
            result["parentName"] = parent
        groups = read_resource_groups(
            spec.get("resourceGroups"), r, has_parent=bool(parent), parent_field="parent",
            enforce_lending_limit=False,
        )
        if groups:
            result["resourceGroups"] = groups
        weight = read_fair_sharing(spec.get("fairSharing"), "spec.fairSharing", r)
        if weight is not None:
            result["fairSharing"] = {"weight": weight}
        return result

    def check(self, manifest: Manifest, plan: Plan, existing: Cohort | None, r: Reader) -> None:
        check_flavors_exist(manifest.spec.get("resourceGroups", []), plan, r)
        parent = manifest.spec.get("parentName")
        chain: list[str] = []
        seen = {manifest.name}
        current = parent
        while current is not None:
            chain.append(current)
            if current in seen:
                cycle = " → ".join([manifest.name, *chain])
                r.error("spec.parentName", f"cohort cycle: {cycle}")
                return
            seen.add(current)
            current = plan.cohort_parents.get(current)

    def queryset(self, domain: Cluster) -> models.QuerySet[Cohort]:
        return Cohort.objects.filter(cluster=domain).select_related("parent", "cluster") \
            .prefetch_related(_quotas_prefetch())

    def spec_of(self, obj: Cohort) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if obj.parent_id is not None:
            spec["parentName"] = obj.parent.name  # type: ignore[union-attr]
        groups = resource_groups_from_rows(obj.quotas.all())
        if groups:
            spec["resourceGroups"] = groups
        if obj.fair_sharing_weight is not None:
            spec["fairSharing"] = {"weight": obj.fair_sharing_weight}
        return spec

    def write(self, manifest: Manifest, obj: Cohort | None, ctx: WriteContext) -> Cohort:
        spec = manifest.spec
        obj = obj or Cohort(cluster=ctx.domain, name=manifest.name)
        obj.parent = ctx.cohort(spec.get("parentName"))
        obj.fair_sharing_weight = spec.get("fairSharing", {}).get("weight")
        obj.save()
        ctx.cohort_written(obj)
        replace_quotas(obj, spec.get("resourceGroups", []), ctx)
        return obj

    def in_use(self, obj: Cohort) -> str | None:
        queues = list(obj.cluster_queues.values_list("name", flat=True))
        children = list(obj.children.values_list("name", flat=True))
        if not queues and not children:
            return None
        members = " and ".join(
            part for part in (_names("ClusterQueue", queues) if queues else "",
                              _names("Cohort", children) if children else "") if part
        )
        return f'Cohort "{obj.name}" has members: {members}; move or delete them first'

    def status_of(self, obj: Cohort, computed: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"conditions": obj.conditions or []}


# --- ClusterQueue ----------------------------------------------------------------------------

MAX_ADMISSION_CHECKS = 64


class ClusterQueueKind(Kind[ClusterQueue]):
    kind = "ClusterQueue"
    plural = "clusterqueues"
    model = ClusterQueue

    FIELDS = ("resourceGroups", "queueingStrategy", "namespaceSelector", "flavorFungibility",
              "preemption", "admissionChecksStrategy", "stopPolicy", "fairSharing")
    UNSUPPORTED = {
        "admissionScope": "Admission Fair Sharing",
        "concurrentAdmissionPolicy": "the alpha ConcurrentAdmission feature",
    }

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        known = set(self.FIELDS)
        if r.v1beta1:
            known |= {"cohort", "admissionChecks"}
            hints = {"cohortName": 'v1beta1 spells it "cohort"'}
        else:
            known.add("cohortName")
            hints = {
                "cohort": 'v1beta2 spells it "cohortName"',
                "admissionChecks": 'v1beta2 uses "admissionChecksStrategy.admissionChecks"',
            }
        spec = r.fields(document.get("spec"), "spec", known, hints=hints,
                        unsupported=self.UNSUPPORTED)
        cohort_key = "cohort" if r.v1beta1 else "cohortName"
        cohort = r.string(spec.get(cohort_key), f"spec.{cohort_key}", name="subdomain")
        result: dict[str, Any] = {}
        if cohort:
            result["cohortName"] = cohort
        if "namespaceSelector" in spec:
            errors = validate_label_selector(spec["namespaceSelector"], "spec.namespaceSelector")
            r.extend(errors)
            # Stored as given: {} selects every namespace, absent or null none (v1beta2).
            result["namespaceSelector"] = spec["namespaceSelector"]
        result["queueingStrategy"] = r.string(
            spec.get("queueingStrategy"), "spec.queueingStrategy",
            choices=QueueingStrategy.values, default=QueueingStrategy.BEST_EFFORT_FIFO,
        )
        groups = read_resource_groups(
            spec.get("resourceGroups"), r, has_parent=bool(cohort), parent_field="cohort",
            enforce_lending_limit=True,
        )
        if groups:
            result["resourceGroups"] = groups
        result["flavorFungibility"] = self._read_fungibility(spec.get("flavorFungibility"), r)
        result["preemption"] = self._read_preemption(spec.get("preemption"), r)
        checks = self._read_admission_checks(spec, r, flavor_names(groups))
        if checks:
            result["admissionChecksStrategy"] = {"admissionChecks": checks}
        result["stopPolicy"] = r.string(spec.get("stopPolicy"), "spec.stopPolicy",
                                        choices=StopPolicy.values, default=StopPolicy.NONE)
        weight = read_fair_sharing(spec.get("fairSharing"), "spec.fairSharing", r)
        if weight is not None:
            result["fairSharing"] = {"weight": weight}
        return result

    @staticmethod
    def _read_fungibility(value: Any, r: Reader) -> dict[str, Any]:
        path = "spec.flavorFungibility"
        raw = r.fields(value, path, ("whenCanBorrow", "whenCanPreempt", "preference"))
        # v1beta1's deprecated names: Borrow and Preempt both mean MayStopSearch.
        borrow_choices = [*FungibilityPolicy.values, *(["Borrow"] if r.v1beta1 else [])]
        preempt_choices = [*FungibilityPolicy.values, *(["Preempt"] if r.v1beta1 else [])]
        when_borrow = r.string(raw.get("whenCanBorrow"), f"{path}.whenCanBorrow",
                               choices=borrow_choices, default=FungibilityPolicy.MAY_STOP_SEARCH)
        when_preempt = r.string(raw.get("whenCanPreempt"), f"{path}.whenCanPreempt",
                                choices=preempt_choices, default=FungibilityPolicy.TRY_NEXT_FLAVOR)
        preference = r.string(raw.get("preference"), f"{path}.preference",
                              choices=FungibilityPreference.values)
        r.extend(validate_fungibility(
            {"whenCanBorrow": when_borrow, "whenCanPreempt": when_preempt,
             "preference": preference}, path,
        ))
        result: dict[str, Any] = {
            "whenCanBorrow": FungibilityPolicy.MAY_STOP_SEARCH if when_borrow == "Borrow"
            else when_borrow,
            "whenCanPreempt": FungibilityPolicy.MAY_STOP_SEARCH if when_preempt == "Preempt"
            else when_preempt,
        }
        if preference:
            result["preference"] = preference
        return result

    @staticmethod
    def _read_preemption(value: Any, r: Reader) -> dict[str, Any]:
        path = "spec.preemption"
        raw = r.fields(value, path, ("withinClusterQueue", "reclaimWithinCohort",
                                     "borrowWithinCohort"))
        within = r.string(raw.get("withinClusterQueue"), f"{path}.withinClusterQueue",
                          choices=WithinClusterQueue.values, default=WithinClusterQueue.NEVER)
        reclaim = r.string(raw.get("reclaimWithinCohort"), f"{path}.reclaimWithinCohort",
                           choices=ReclaimWithinCohort.values, default=ReclaimWithinCohort.NEVER)
        bpath = f"{path}.borrowWithinCohort"
        borrow = r.fields(raw.get("borrowWithinCohort"), bpath, ("policy", "maxPriorityThreshold"))
        policy = r.string(borrow.get("policy"), f"{bpath}.policy",
                          choices=BorrowWithinCohortPolicy.values,
                          default=BorrowWithinCohortPolicy.NEVER)
        threshold = r.int32(borrow.get("maxPriorityThreshold"), f"{bpath}.maxPriorityThreshold")
        r.extend(validate_preemption(
            {"reclaimWithinCohort": reclaim, "borrowWithinCohort": {"policy": policy}}, path
        ))
        borrow_out: dict[str, Any] = {"policy": policy}
        if threshold is not None:
            borrow_out["maxPriorityThreshold"] = threshold
        return {"withinClusterQueue": within, "reclaimWithinCohort": reclaim,
                "borrowWithinCohort": borrow_out}

    @staticmethod
    def _read_admission_checks(
        spec: Mapping[str, Any], r: Reader, flavors: Sequence[str]
    ) -> list[dict[str, Any]]:
        path = "spec.admissionChecksStrategy.admissionChecks"
        checks: list[dict[str, Any]] = []
        if "admissionChecks" in spec:  # v1beta1: a flat list of names for every flavor
            if "admissionChecksStrategy" in spec:
                r.error("spec.admissionChecks",
                        "may not be set together with spec.admissionChecksStrategy")
            names = r.string_list(spec["admissionChecks"], "spec.admissionChecks",
                                  name="subdomain", unique=True, max_items=MAX_ADMISSION_CHECKS)
            return [{"name": name} for name in names]
        strategy = r.fields(spec.get("admissionChecksStrategy"), "spec.admissionChecksStrategy",
                            ("admissionChecks",))
        if "admissionChecksStrategy" in spec and "admissionChecks" not in strategy:
            r.error(path, "Required value")
        rules = strategy.get("admissionChecks")
        if rules is None:
            return []
        if not isinstance(rules, list):
            r.error(path, "must be a list")
            return []
        if not rules:
            r.error(path, "must have at least 1 item")
        if len(rules) > MAX_ADMISSION_CHECKS:
            r.error(path, f"must have at most {MAX_ADMISSION_CHECKS} items")
        seen: set[str] = set()
        for i, raw_rule in enumerate(rules):
            rpath = join(path, i)
            rule = r.fields(raw_rule, rpath, ("name", "onFlavors"))
            name = r.string(rule.get("name"), join(rpath, "name"), required=True,
                            name="subdomain")
            on_flavors = r.string_list(rule.get("onFlavors"), join(rpath, "onFlavors"),
                                       name="subdomain", unique=True, max_items=64)
            if name is None:
                continue
            if name in seen:
                r.error(join(rpath, "name"), f'Duplicate value: "{name}"')
                continue
            seen.add(name)
            checks.append({"name": name, **({"onFlavors": on_flavors} if on_flavors else {})})
        r.extend(validate_admission_check_flavors(checks, flavors, path))
        return checks

    def check(self, manifest: Manifest, plan: Plan, existing: ClusterQueue | None,
              r: Reader) -> None:
        check_flavors_exist(manifest.spec.get("resourceGroups", []), plan, r)

    def queryset(self, domain: Cluster) -> models.QuerySet[ClusterQueue]:
        return ClusterQueue.objects.filter(cluster=domain).select_related("cohort", "cluster") \
            .prefetch_related(_quotas_prefetch())

    def spec_of(self, obj: ClusterQueue) -> dict[str, Any]:
        spec: dict[str, Any] = {}
        if obj.cohort_id is not None:
            spec["cohortName"] = obj.cohort.name  # type: ignore[union-attr]
        if obj.namespace_selector is not None:
            spec["namespaceSelector"] = obj.namespace_selector
        spec["queueingStrategy"] = obj.queueing_strategy
        groups = resource_groups_from_rows(obj.quotas.all())
        if groups:
            spec["resourceGroups"] = groups
        fungibility: dict[str, Any] = {"whenCanBorrow": obj.when_can_borrow,
                                       "whenCanPreempt": obj.when_can_preempt}
        if obj.fungibility_preference:
            fungibility["preference"] = obj.fungibility_preference
        spec["flavorFungibility"] = fungibility
        borrow: dict[str, Any] = {"policy": obj.borrow_within_cohort_policy}
        if obj.borrow_within_cohort_max_priority_threshold is not None:
            borrow["maxPriorityThreshold"] = obj.borrow_within_cohort_max_priority_threshold
        spec["preemption"] = {"withinClusterQueue": obj.within_cluster_queue,
                              "reclaimWithinCohort": obj.reclaim_within_cohort,
                              "borrowWithinCohort": borrow}
        checks = [
            {"name": check["name"],
             **({"onFlavors": list(check["onFlavors"])} if check.get("onFlavors") else {})}
            for check in obj.admission_checks or ()
        ]
        if checks:
            spec["admissionChecksStrategy"] = {"admissionChecks": checks}
        spec["stopPolicy"] = obj.stop_policy
        if obj.fair_sharing_weight is not None:
            spec["fairSharing"] = {"weight": obj.fair_sharing_weight}
        return spec

    def write(self, manifest: Manifest, obj: ClusterQueue | None,
              ctx: WriteContext) -> ClusterQueue:
        spec = manifest.spec
        fungibility = spec["flavorFungibility"]
        preemption = spec["preemption"]
        borrow = preemption["borrowWithinCohort"]
        values = {
            "cohort": ctx.cohort(spec.get("cohortName")),
            "queueing_strategy": spec["queueingStrategy"],
            "namespace_selector": spec.get("namespaceSelector"),
            "within_cluster_queue": preemption["withinClusterQueue"],
            "reclaim_within_cohort": preemption["reclaimWithinCohort"],
            "borrow_within_cohort_policy": borrow["policy"],
            "borrow_within_cohort_max_priority_threshold": borrow.get("maxPriorityThreshold"),
            "when_can_borrow": fungibility["whenCanBorrow"],
            "when_can_preempt": fungibility["whenCanPreempt"],
            "fungibility_preference": fungibility.get("preference", ""),
            "stop_policy": spec["stopPolicy"],
            "fair_sharing_weight": spec.get("fairSharing", {}).get("weight"),
            "admission_checks": spec.get("admissionChecksStrategy", {}).get("admissionChecks", []),
        }
        obj = obj or ClusterQueue(cluster=ctx.domain, name=manifest.name)
        _assign(obj, values)
        obj.save()
        replace_quotas(obj, spec.get("resourceGroups", []), ctx)
        return obj

    def in_use(self, obj: ClusterQueue) -> str | None:
        reasons = []
        queues = [str(q) for q in obj.local_queues.all()]
        if queues:
            reasons.append(f"LocalQueue {', '.join(sorted(queues))} point to it")
        phases = dict(
            obj.reserving_workloads.order_by().values_list("phase").annotate(n=models.Count("*"))
        )
        holding = phases.get(WorkloadPhase.QUOTA_RESERVED, 0) + phases.get(WorkloadPhase.ADMITTED, 0)
        if holding:
            reasons.append(f"{holding} workload(s) hold quota in it")
        finished = sum(n for phase, n in phases.items()
                       if phase not in (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED))
        if finished:
            reasons.append(f"{finished} finished workload(s) were admitted by it (delete them "
                           "first)")
        if not reasons:
            return None
        return f'ClusterQueue "{obj.name}" is in use: ' + "; ".join(reasons)

    def status_of(self, obj: ClusterQueue, computed: Mapping[str, Any] | None) -> dict[str, Any]:
        computed = computed if computed is not None else cluster_queue_statuses([obj])[obj.pk]
        return {"conditions": obj.conditions or [], **computed}


# --- LocalQueue ----------------------------------------------------------------------------


class LocalQueueKind(Kind[LocalQueue]):
    kind = "LocalQueue"
    plural = "localqueues"
    model = LocalQueue
    namespaced = True

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        spec = r.fields(document.get("spec"), "spec", ("clusterQueue", "stopPolicy", "fairSharing"))
        result: dict[str, Any] = {
            "clusterQueue": r.string(spec.get("clusterQueue"), "spec.clusterQueue",
                                     required=True, name="subdomain"),
            "stopPolicy": r.string(spec.get("stopPolicy"), "spec.stopPolicy",
                                   choices=StopPolicy.values, default=StopPolicy.NONE),
        }
        weight = read_fair_sharing(spec.get("fairSharing"), "spec.fairSharing", r)
        if weight is not None:
            result["fairSharing"] = {"weight": weight}
        return result

    def check(self, manifest: Manifest, plan: Plan, existing: LocalQueue | None,
              r: Reader) -> None:
        name = manifest.spec["clusterQueue"]
        if existing is not None and existing.cluster_queue.name != name:
            r.error("spec.clusterQueue", "field is immutable")
        elif name not in plan.cluster_queues:
            r.error("spec.clusterQueue",
                    f'ClusterQueue "{name}" does not exist in cluster "{plan.domain.name}" (a '
                    "LocalQueue's ClusterQueue must be in its own cluster)")

    def queryset(self, domain: Cluster) -> models.QuerySet[LocalQueue]:
        return LocalQueue.objects.filter(cluster=domain).select_related("cluster_queue", "cluster")

    def spec_of(self, obj: LocalQueue) -> dict[str, Any]:
        spec: dict[str, Any] = {"clusterQueue": obj.cluster_queue.name,
                                "stopPolicy": obj.stop_policy}
        if obj.fair_sharing_weight is not None:
            spec["fairSharing"] = {"weight": obj.fair_sharing_weight}
        return spec

    def write(self, manifest: Manifest, obj: LocalQueue | None, ctx: WriteContext) -> LocalQueue:
        spec = manifest.spec
        obj = obj or LocalQueue(cluster=ctx.domain, namespace=manifest.namespace,
                                name=manifest.name)
        obj.cluster_queue = ClusterQueue.objects.get(cluster=ctx.domain, name=spec["clusterQueue"])
        obj.stop_policy = spec["stopPolicy"]
        obj.fair_sharing_weight = spec.get("fairSharing", {}).get("weight")
        obj.save()
        return obj

    def status_of(self, obj: LocalQueue, computed: Mapping[str, Any] | None) -> dict[str, Any]:
        computed = computed if computed is not None else local_queue_statuses([obj])[obj.pk]
        return {"conditions": obj.conditions or [], **computed}


# --- WorkloadPriorityClass --------------------------------------------------------------------


class WorkloadPriorityClassKind(Kind[WorkloadPriorityClass]):
    kind = "WorkloadPriorityClass"
    plural = "workloadpriorityclasses"
    model = WorkloadPriorityClass
    has_spec = False

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        result: dict[str, Any] = {"value": r.int32(document.get("value"), "value", required=True)}
        description = r.string(document.get("description"), "description", max_length=2048)
        if description:
            result["description"] = description
        return result

    def spec_of(self, obj: WorkloadPriorityClass) -> dict[str, Any]:
        spec: dict[str, Any] = {"value": obj.value}
        if obj.description:
            spec["description"] = obj.description
        return spec

    def write(self, manifest: Manifest, obj: WorkloadPriorityClass | None,
              ctx: WriteContext) -> WorkloadPriorityClass:
        obj = obj or WorkloadPriorityClass(cluster=ctx.domain, name=manifest.name)
        obj.value = manifest.spec["value"]
        obj.description = manifest.spec.get("description", "")
        obj.save()
        return obj


RESOURCE_FLAVOR = ResourceFlavorKind()
COHORT = CohortKind()
CLUSTER_QUEUE = ClusterQueueKind()
LOCAL_QUEUE = LocalQueueKind()
WORKLOAD_PRIORITY_CLASS = WorkloadPriorityClassKind()


# --- status of queues (read side) -----------------------------------------------------------

_HOLDING = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


def _flavor_usage(
    groups: Sequence[Mapping[str, Any]],
    usage: Mapping[tuple[str, str], int],
    *,
    borrowed: bool,
    nominal: Mapping[tuple[str, str], int] | None = None,
) -> list[dict[str, Any]]:
    """Kueue's ``flavorsReservation``/``flavorsUsage``: every flavor and covered resource of
    the queue in order. ClusterQueues (``borrowed``) also report ``borrowed = max(0, total −
    nominal)``, which is 0 without a cohort (``nominal`` None): only a cohort lends."""
    result = []
    listed: set[tuple[str, str]] = set()
    for group in groups:
        for flavor in group["flavors"]:
            resources = []
            for quota in flavor["resources"]:
                key = (flavor["name"], quota["name"])
                listed.add(key)
                total = usage.get(key, 0)
                entry: dict[str, Any] = {"name": quota["name"],
                                         "total": int_to_quantity(quota["name"], total)}
                if borrowed:
                    over = max(0, total - nominal.get(key, 0)) if nominal is not None else 0
                    entry["borrowed"] = int_to_quantity(quota["name"], over)
                resources.append(entry)
            result.append({"name": flavor["name"], "resources": resources})
    # Usage on flavors the queue no longer lists is still shown rather than hidden.
    extra: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (flavor_name, resource), total in sorted(usage.items()):
        if (flavor_name, resource) not in listed and total:
            entry = {"name": resource, "total": int_to_quantity(resource, total)}
            if borrowed:
                entry["borrowed"] = entry["total"] if nominal is not None else "0"
            extra[flavor_name].append(entry)
    result.extend({"name": name, "resources": resources} for name, resources in extra.items())
    return result


def _nominal(queue: ClusterQueue) -> dict[tuple[str, str], int]:
    nominal: dict[tuple[str, str], int] = {}
    for row in queue.quotas.all():
        try:
            nominal[(row.flavor.name, row.resource)] = quantity_to_int(row.resource,
                                                                        row.nominal_quota)
        except QuantityError:
            continue
    return nominal


class _Holding:
    """Counts and usage per queue of the active workloads holding quota in ``rows``, keyed
    by the ``queue_field`` column. Counted in the database per queue, phase and usage hash
    (the ``workload_holding`` index; workloads of the same shape share one), and each
    hash's usage is read once (``snapshots.held_usage``, as the cycle counts it), rather
    than one row per workload. A deactivated workload holds none, as in Kueue's cache."""

    def __init__(self, rows: models.QuerySet[Workload], queue_field: str) -> None:
        self.reserving: dict[int, int] = defaultdict(int)
        self.admitted: dict[int, int] = defaultdict(int)
        self.reserved_usage: dict[int, dict[tuple[str, str], int]] = defaultdict(
            lambda: defaultdict(int))
        self.admitted_usage: dict[int, dict[tuple[str, str], int]] = defaultdict(
            lambda: defaultdict(int))
        groups = list(rows.filter(active=True).order_by()
                      .values_list(queue_field, "phase", "usage_hash")
                      .annotate(n=models.Count("*"), example=models.Min("id")))
        held_by = examples("usage_hash", (group[-1] for group in groups),
                           "admission", "reclaimable_pods", "pod_sets")
        for queue_id, phase, usage_hash, n, _ in groups:
            example = held_by.get(usage_hash)
            self.reserving[queue_id] += n
            is_admitted = phase == WorkloadPhase.ADMITTED
            self.admitted[queue_id] += n if is_admitted else 0
            if not example or not example["admission"]:
                continue
            for fr, amount in snapshots.held_usage(example).items():
                self.reserved_usage[queue_id][(fr.flavor, fr.resource)] += amount * n
                if is_admitted:
                    self.admitted_usage[queue_id][(fr.flavor, fr.resource)] += amount * n


def cluster_queue_statuses(queues: Sequence[ClusterQueue]) -> dict[int, dict[str, Any]]:
    """Computed ClusterQueue status for ``queues`` in two queries, whatever their number:
    pending/reserving/admitted counts and usage per flavor from the Workload rows (usage is
    never stored, as in Kueue's cache). ``queues`` should prefetch ``quotas__flavor``."""
    ids = [queue.pk for queue in queues]
    pending = dict(
        Workload.objects.filter(local_queue__cluster_queue__in=ids, phase=WorkloadPhase.PENDING,
                                active=True)
        .order_by().values_list("local_queue__cluster_queue").annotate(n=models.Count("*"))
    )
    holding = _Holding(Workload.objects.filter(cluster_queue__in=ids, phase__in=_HOLDING),
                       "cluster_queue_id")
    reserving, admitted = holding.reserving, holding.admitted
    reserved_usage, admitted_usage = holding.reserved_usage, holding.admitted_usage
    statuses = {}
    for queue in queues:
        groups = resource_groups_from_rows(queue.quotas.all())
        nominal = _nominal(queue) if queue.cohort_id is not None else None
        statuses[queue.pk] = {
            "pendingWorkloads": pending.get(queue.pk, 0),
            "reservingWorkloads": reserving[queue.pk],
            "admittedWorkloads": admitted[queue.pk],
            "flavorsReservation": _flavor_usage(groups, reserved_usage[queue.pk], borrowed=True,
                                                nominal=nominal),
            "flavorsUsage": _flavor_usage(groups, admitted_usage[queue.pk], borrowed=True,
                                          nominal=nominal),
        }
    return statuses


def local_queue_statuses(queues: Sequence[LocalQueue]) -> dict[int, dict[str, Any]]:
    """Computed LocalQueue status, in two queries for all ``queues`` (which should prefetch
    ``cluster_queue__quotas__flavor``, whose flavors are listed)."""
    ids = [queue.pk for queue in queues]
    pending: dict[int, int] = defaultdict(int)
    pending.update(
        Workload.objects.filter(local_queue__in=ids, phase=WorkloadPhase.PENDING, active=True)
        .order_by().values_list("local_queue_id").annotate(n=models.Count("*"))
    )
    holding = _Holding(Workload.objects.filter(local_queue__in=ids, phase__in=_HOLDING),
                       "local_queue_id")
    reserving, admitted = holding.reserving, holding.admitted
    reserved_usage, admitted_usage = holding.reserved_usage, holding.admitted_usage
    statuses = {}
    for queue in queues:
        groups = resource_groups_from_rows(queue.cluster_queue.quotas.all())
        statuses[queue.pk] = {
            "pendingWorkloads": pending[queue.pk],
            "reservingWorkloads": reserving[queue.pk],
            "admittedWorkloads": admitted[queue.pk],
            "flavorsReservation": _flavor_usage(groups, reserved_usage[queue.pk], borrowed=False),
            "flavorsUsage": _flavor_usage(groups, admitted_usage[queue.pk], borrowed=False),
        }
    return statuses
