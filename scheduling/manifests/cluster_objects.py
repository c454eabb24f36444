"""The cluster's own objects Kueue reads: ``scheduling.k8s.io/v1`` PriorityClass, ``v1``
LimitRange and ``node.k8s.io/v1`` RuntimeClass, read, checked as Kubernetes' API server
checks them, compared, written and printed (``scheduling.models``).

They are applied and exported like Kueue's kinds for a simulated cluster; a cluster with a
Kubernetes connection owns them (``multicluster.kube.cluster_objects`` mirrors them), so an
apply to it is refused. Their envelope is not Kueue's, so each kind reads its document
itself, as ``multicluster.manifests.NodeKind`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any, ClassVar, TypeVar

from django.core.exceptions import ValidationError
from django.db import models

from multicluster.choices import ConnectionType
from multicluster.models import Cluster
from scheduling.choices import PreemptionPolicy
from scheduling.core.quantities import QuantityError, parse_quantity
from scheduling.manifests.codec import (
    _SERVER_METADATA,
    Kind,
    Manifest,
    ManifestInvalid,
    Plan,
    Reader,
    WriteContext,
    join,
    quantity_text,
    read_tolerations,
)
from scheduling.models import LimitRange, PriorityClass, RuntimeClass
from scheduling.validation import FieldError
from scheduling.validators import validate_labels

C = TypeVar("C", bound=models.Model)

# Kubernetes' bound on a PriorityClass that is not a system one.
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
LIMIT_TYPES = ("Container", "Pod", "PersistentVolumeClaim")
_LIMIT_FIELDS = ("type", "max", "min", "default", "defaultRequest", "maxLimitRequestRatio")


class ClusterObjectKind(Kind[C]):
    """A Kubernetes kind of the cluster: its own apiVersion, and defined here only for a
    simulated cluster."""

    api_version: ClassVar[str]
    # The document's fields besides apiVersion, kind and metadata: a kind without a spec
    # has its fields at the top level.
    top_level: ClassVar[tuple[str, ...]] = ("spec",)

    @property
    def api_group(self) -> str:
        return self.api_version.rpartition("/")[0]

    # -- read
    def read_document(self, document: Any, *, index: int | None = None,
                      default_kind: str | None = None,
                      default_namespace: str = "default") -> Manifest:
        """Check one document on its own (raises ManifestInvalid). ``default_kind``: the
        kind an endpoint serves, used when the body names none."""
        if not isinstance(document, Mapping):
            raise ManifestInvalid([FieldError("", "a manifest must be an object, not "
                                                  f"{type(document).__name__}")], index=index)
        r = Reader()
        raw = r.fields(document, "", ("apiVersion", "kind", "metadata", *self.top_level))
        api_version = raw.get("apiVersion") or (self.api_version if default_kind else None)
        r.string(api_version, "apiVersion", required=True, choices=(self.api_version,))
        kind = raw.get("kind") or default_kind
        if kind != self.kind:
            r.error("kind", f'must be "{default_kind}" at this endpoint' if default_kind
                    else f'must be "{self.kind}"')
        metadata = r.fields(raw.get("metadata"), "metadata",
                            ("name", "namespace", "labels", "annotations"),
                            ignored=_SERVER_METADATA)
        name = r.string(metadata.get("name"), "metadata.name", required=True, name="subdomain")
        namespace = ""
        if self.namespaced:
            namespace = r.string(metadata.get("namespace"), "metadata.namespace",
                                 default=default_namespace, name="label") or ""
        if metadata.get("labels"):
            try:
                validate_labels(metadata["labels"])
            except ValidationError as exc:
                r.error("metadata.labels", exc.messages[0])
            r.unsupported("metadata.labels", f"a {self.kind} keeps no labels here")
        annotations = metadata.get("annotations") or {}
        if not isinstance(annotations, Mapping):
            r.error("metadata.annotations", "must be a map of strings to strings")
        elif any(not str(key).startswith("kubectl.kubernetes.io/") for key in annotations):
            r.unsupported("metadata.annotations", f"a {self.kind} keeps no annotations here")
        spec = self.read_spec(raw, r)
        if r.errors:
            raise ManifestInvalid(r.errors, index=index, kind=self.kind, name=name,
                                  namespace=namespace)
        return Manifest(kind=self.kind, name=name or "", namespace=namespace, spec=spec,
                        index=index, warnings=r.warnings)

    def check(self, manifest: Manifest, plan: Plan, existing: C | None, r: Reader) -> None:
        if plan.domain.connection_type != ConnectionType.SIMULATED:
            r.error("", f'cluster "{plan.domain.name}" has a {plan.domain.connection_type} '
                        f"connection: its {self.plural} are the cluster's own, read from it; "
                        f"only a simulated cluster's {self.plural} can be applied")

    # -- stored side
    def exported(self, domain: Cluster) -> models.QuerySet[C]:
        """What an export lists: a Kubernetes cluster's objects are not (apply refuses
        them)."""
        if domain.connection_type != ConnectionType.SIMULATED:
            return self.model._default_manager.none()
        return self.queryset(domain)

    def in_use(self, obj: C) -> str | None:
        cluster = obj.cluster  # type: ignore[attr-defined]
        if cluster.connection_type != ConnectionType.SIMULATED:
            return (f'{self.kind} "{obj}" belongs to cluster "{cluster.name}", which owns its '
                    f"{self.plural}: delete it there")
        return None

    # -- print
    def to_manifest(self, obj: C, *, export: bool = False,
                    status: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {**super().to_manifest(obj, export=export, status=status),
                "apiVersion": self.api_version}


def _resource_list(value: Any, path: str, r: Reader, *,
                   allow_negative: bool = False) -> dict[str, str]:
    """A ResourceList (resource name → quantity), kept as written."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        r.error(path, "must be an object of resource names to quantities")
        return {}
    result: dict[str, str] = {}
    for name, quantity in value.items():
        sub = f"{path}[{name}]"
        try:
            parse_quantity(quantity, allow_negative=allow_negative)
        except QuantityError as exc:
            r.error(sub, str(exc))
            continue
        result[str(name)] = quantity_text(quantity)
    return result


# --- PriorityClass -----------------------------------------------------------------------------


class PriorityClassKind(ClusterObjectKind[PriorityClass]):
    kind = "PriorityClass"
    plural = "priorityclasses"
    model = PriorityClass
    api_version = "scheduling.k8s.io/v1"
    has_spec = False
    top_level = ("value", "globalDefault", "description", "preemptionPolicy")

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        value = r.int32(document.get("value"), "value", required=True)
        name = (document.get("metadata") or {}).get("name")
        system = isinstance(name, str) and name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX)
        if value is not None and not system and value > HIGHEST_USER_DEFINABLE_PRIORITY:
            r.error("value", "maximum allowed value of a user defined priority is "
                             f"{HIGHEST_USER_DEFINABLE_PRIORITY}")
        global_default = document.get("globalDefault", False)
        if not isinstance(global_default, bool):
            r.error("globalDefault", "must be a boolean")
            global_default = False
        description = document.get("description", "")
        if not isinstance(description, str):
            r.error("description", "must be a string")
            description = ""
        policy = r.string(document.get("preemptionPolicy"), "preemptionPolicy",
                          choices=PreemptionPolicy.values,
                          default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY)
        return {"value": value, "globalDefault": global_default, "description": description,
                "preemptionPolicy": policy}

    def check(self, manifest: Manifest, plan: Plan, existing: PriorityClass | None,
              r: Reader) -> None:
        super().check(manifest, plan, existing, r)
        spec = manifest.spec
        if existing is not None:
            if spec["value"] != existing.value:
                r.error("value", "Forbidden: may not be changed in an update.")
            if spec["preemptionPolicy"] != existing.preemption_policy:
                r.error("preemptionPolicy", "field is immutable")
        if spec["globalDefault"]:
            other = PriorityClass.objects.filter(cluster=plan.domain, global_default=True) \
                .exclude(name=manifest.name).first()
            if other is not None:
                r.error("globalDefault", f"PriorityClass {other.name} is already marked as "
                                         "default. Only one default can exist")

    def spec_of(self, obj: PriorityClass) -> dict[str, Any]:
        return {"value": obj.value, "globalDefault": obj.global_default,
                "description": obj.description, "preemptionPolicy": obj.preemption_policy}

    def write(self, manifest: Manifest, obj: PriorityClass | None,
              ctx: WriteContext) -> PriorityClass:
        obj = obj or PriorityClass(cluster=ctx.domain, name=manifest.name)
        spec = manifest.spec
        obj.value = spec["value"]
        obj.global_default = spec["globalDefault"]
        obj.description = spec["description"]
        obj.preemption_policy = spec["preemptionPolicy"]
        obj.save()
        return obj

    def to_manifest(self, obj: PriorityClass, *, export: bool = False,
                    status: Mapping[str, Any] | None = None) -> dict[str, Any]:
        document = super().to_manifest(obj, export=export, status=status)
        # Kubernetes omits the empty and false fields.
        for key in ("globalDefault", "description"):
            if not document[key]:
                del document[key]
        return document


# --- LimitRange --------------------------------------------------------------------------------


def _amounts(values: Mapping[str, str]) -> dict[str, Fraction]:
    return {name: parse_quantity(value, allow_negative=True) for name, value in values.items()}


def _check_limit_item(item: Mapping[str, Any], path: str, r: Reader) -> None:
    """Kubernetes' ``ValidateLimitRange`` for one item: the defaults and bounds agree."""
    if item["type"] == "Pod":
        for key in ("default", "defaultRequest"):
            if item.get(key):
                r.error(join(path, key), "may not be specified when `type` is 'Pod'")
    mins, maxs = _amounts(item.get("min", {})), _amounts(item.get("max", {}))
    defaults = _amounts(item.get("default", {}))
    requests = _amounts(item.get("defaultRequest", {}))
    ratios = _amounts(item.get("maxLimitRequestRatio", {}))
    texts = {key: item.get(key, {}) for key in _LIMIT_FIELDS[1:]}
    for name, low in mins.items():
        if name in maxs and low > maxs[name]:
            r.error(f"{path}.min[{name}]", f"min value {texts['min'][name]} is greater than "
                                           f"max value {texts['max'][name]}")
    for name, value in requests.items():
        shown = texts["defaultRequest"][name]
        if name in mins and mins[name] > value:
            r.error(f"{path}.defaultRequest[{name}]", f"min value {texts['min'][name]} is "
                                                      f"greater than default request value {shown}")
        if name in maxs and value > maxs[name]:
            r.error(f"{path}.defaultRequest[{name}]", f"default request value {shown} is "
                                                      f"greater than max value {texts['max'][name]}")
        if name in defaults and value > defaults[name]:
            r.error(f"{path}.defaultRequest[{name}]", f"default request value {shown} is "
                                                      "greater than default limit value "
                                                      f"{texts['default'][name]}")
    for name, value in defaults.items():
        shown = texts["default"][name]
        if name in mins and mins[name] > value:
            r.error(f"{path}.default[{name}]", f"min value {texts['min'][name]} is greater "
                                               f"than default value {shown}")
        if name in maxs and value > maxs[name]:
            r.error(f"{path}.default[{name}]", f"default value {shown} is greater than max "
                                               f"value {texts['max'][name]}")
    for name, ratio in ratios.items():
        shown = texts["maxLimitRequestRatio"][name]
        if ratio < 1:
            r.error(f"{path}.maxLimitRequestRatio[{name}]", f"ratio {shown} is less than 1")
        if name in maxs and name in mins and mins[name] > 0 and ratio > maxs[name] / mins[name]:
            r.error(f"{path}.maxLimitRequestRatio[{name}]", f"ratio {shown} is greater than "
                                                            f"max/min = "
                                                            f"{float(maxs[name] / mins[name]):f}")


class LimitRangeKind(ClusterObjectKind[LimitRange]):
    kind = "LimitRange"
    plural = "limitranges"
    model = LimitRange
    namespaced = True
    api_version = "v1"

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        spec = r.fields(document.get("spec"), "spec", ("limits",))
        raw = spec.get("limits")
        if raw is None:
            r.error("spec.limits", "Required value")
            raw = []
        if not isinstance(raw, list):
            r.error("spec.limits", "must be a list")
            raw = []
        limits = []
        for i, value in enumerate(raw):
            path = f"spec.limits[{i}]"
            before = len(r.errors)
            fields = r.fields(value, path, _LIMIT_FIELDS)
            item: dict[str, Any] = {"type": r.string(fields.get("type"), join(path, "type"),
                                                     required=True, choices=LIMIT_TYPES)}
            for key in _LIMIT_FIELDS[1:]:
                values = _resource_list(fields.get(key), join(path, key), r)
                if values:
                    item[key] = values
            if len(r.errors) == before:
                _check_limit_item(item, path, r)
            limits.append(item)
        return {"limits": limits}

    def spec_of(self, obj: LimitRange) -> dict[str, Any]:
        return {"limits": list(obj.limits or [])}

    def write(self, manifest: Manifest, obj: LimitRange | None, ctx: WriteContext) -> LimitRange:
        obj = obj or LimitRange(cluster=ctx.domain, namespace=manifest.namespace,
                                name=manifest.name)
        obj.limits = manifest.spec["limits"]
        obj.save()
        return obj


# --- RuntimeClass ------------------------------------------------------------------------------


class RuntimeClassKind(ClusterObjectKind[RuntimeClass]):
    kind = "RuntimeClass"
    plural = "runtimeclasses"
    model = RuntimeClass
    api_version = "node.k8s.io/v1"
    has_spec = False
    top_level = ("handler", "overhead", "scheduling")

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        handler = r.string(document.get("handler"), "handler", required=True, name="label")
        overhead = r.fields(document.get("overhead"), "overhead", ("podFixed",))
        pod_fixed = _resource_list(overhead.get("podFixed"), "overhead.podFixed", r)
        scheduling = r.fields(document.get("scheduling"), "scheduling",
                              ("nodeSelector", "tolerations"))
        result: dict[str, Any] = {}
        if "nodeSelector" in scheduling:
            try:
                validate_labels(scheduling["nodeSelector"])
                result["nodeSelector"] = dict(scheduling["nodeSelector"])
            except ValidationError as exc:
                r.error("scheduling.nodeSelector", exc.messages[0])
        if "tolerations" in scheduling:
            result["tolerations"] = read_tolerations(scheduling["tolerations"],
                                                     "scheduling.tolerations", r)
        return {"handler": handler or "", "overhead": pod_fixed, "scheduling": result}

    def check(self, manifest: Manifest, plan: Plan, existing: RuntimeClass | None,
              r: Reader) -> None:
        super().check(manifest, plan, existing, r)
        if existing is not None and manifest.spec["handler"] != existing.handler:
            r.error("handler", "field is immutable")

    def spec_of(self, obj: RuntimeClass) -> dict[str, Any]:
        return {"handler": obj.handler, "overhead": dict(obj.overhead or {}),
                "scheduling": dict(obj.scheduling or {})}

    def write(self, manifest: Manifest, obj: RuntimeClass | None,
              ctx: WriteContext) -> RuntimeClass:
        obj = obj or RuntimeClass(cluster=ctx.domain, name=manifest.name)
        obj.handler = manifest.spec["handler"]
        obj.overhead = manifest.spec["overhead"]
        obj.scheduling = manifest.spec["scheduling"]
        obj.save()
        return obj

    def to_manifest(self, obj: RuntimeClass, *, export: bool = False,
                    status: Mapping[str, Any] | None = None) -> dict[str, Any]:
        document = super().to_manifest(obj, export=export, status=status)
        overhead = document.pop("overhead")
        if overhead:
            document["overhead"] = {"podFixed": overhead}
        if not document["scheduling"]:
            del document["scheduling"]
        return document


PRIORITY_CLASS = PriorityClassKind()
LIMIT_RANGE = LimitRangeKind()
RUNTIME_CLASS = RuntimeClassKind()
CLUSTER_OBJECT_KINDS: tuple[ClusterObjectKind[Any], ...] = (
    PRIORITY_CLASS, LIMIT_RANGE, RUNTIME_CLASS)
