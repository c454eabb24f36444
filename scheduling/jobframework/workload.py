"""The Workload Kueue builds for a job of any kind, and the rules of a Workload's spec.

* The Workload's name (``jobframework/workload_names.go``) and the object as stored (name,
  namespace, uid, the labels Kueue's webhook defaults).
* ``construct_workload``: Kueue's ``ConstructWorkload``/``NewWorkload`` over the pod sets a
  kind asks for.
* Validation of a Workload's ``spec`` (Kueue's CRD rules and ``pkg/webhooks/workload_webhook.go``)
  and its v1beta2 shape from stored values.

Pure: lookups that need the database (LocalQueues, WorkloadPriorityClasses, name conflicts)
are done by ``scheduling.services``, which passes their answers in.
"""

from __future__ import annotations

import copy
import hashlib
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from scheduling.core.fields import FieldError
from scheduling.core.names import dns1123_subdomain_error
from scheduling.jobframework.constants import (
    DEFAULT_POD_SET_NAME,
    ELASTIC_JOB_ANNOTATION,
    JOB_OWNER_GVK_ANNOTATION,
    JOB_OWNER_NAME_ANNOTATION,
    JOB_UID_LABEL,
    MAX_EXEC_TIME_LABEL,
    MAX_POD_SETS,
    POD_PRIORITY_CLASS_SOURCE,
    PRIORITY_CLASS_LABEL,
    PRIORITY_CLASS_REFS,
    PROVREQ_ANNOTATION_PREFIX,
    QUEUE_NAME_LABEL,
    WORKLOAD_NAME_MAX_LENGTH,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
    WORKLOAD_SLICE_NAME_ANNOTATION,
)
from scheduling.jobframework.json_values import NotJson, json_key
from scheduling.jobframework.validation import (
    NAME_SUFFIX_LENGTH,
    dns_label_message,
    int_value,
    validate_pod_template,
    validate_queue_name,
)

if TYPE_CHECKING:
    from scheduling.jobframework.interface import GenericJob, JobKind

# Kubernetes' SimpleNameGenerator: 5 characters from this alphabet, base cut to 58.
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_NAME_LENGTH = 63
_WORKLOAD_NAME_HASH_LENGTH = 5


def workload_name_for_owner(
    owner_name: str,
    owner_uid: str,
    *,
    kind: str = "Job",
    group: str = "batch",
    extra: str = "",
    max_length: int = WORKLOAD_NAME_MAX_LENGTH,
) -> str:
    """Kueue's name for the Workload of an owner (``GenerateWorkloadNameWithExtra``).

    ``<kind>-<owner>`` cut to leave room for ``-<hash>``, where the hash is the first five hex
    digits of SHA-1 over ``Kind\\nGroup\\nname\\nuid`` (and ``\\nextra`` when given: elastic
    jobs pass their generation). ``max_length`` is 63 under Kueue's ShortWorkloadNames gate.
    """
    prefix_length = max_length - 1 - _WORKLOAD_NAME_HASH_LENGTH
    prefix = f"{kind.lower()}-{owner_name}"[:prefix_length]
    parts = [kind, group, owner_name, owner_uid]
    if extra:
        parts.append(extra)
    digest = hashlib.sha1("\n".join(parts).encode(), usedforsecurity=False).hexdigest()
    return f"{prefix}-{digest[:_WORKLOAD_NAME_HASH_LENGTH]}"


def prebuilt_workload_annotations(kind: JobKind, manifest: Mapping[str, Any]) -> dict[str, str]:
    """What Kueue writes on a Workload it builds for an object ahead of its pods (a
    StatefulSet's, a LeaderWorkerSet group's): the owner's GroupVersionKind as Go prints
    one (``gvk.String()``) and its name."""
    metadata = manifest.get("metadata")
    name = metadata.get("name", "") if isinstance(metadata, Mapping) else ""
    return {JOB_OWNER_GVK_ANNOTATION: f"{kind.api_version}, Kind={kind.kind}",
            JOB_OWNER_NAME_ANNOTATION: str(name)}


def generate_name(base: str, choose: Callable[[str], str] = secrets.choice) -> str:
    """``metadata.generateName`` completed as Kubernetes does: five random characters."""
    base = base[: _MAX_GENERATED_NAME_LENGTH - NAME_SUFFIX_LENGTH]
    return base + "".join(choose(_NAME_SUFFIX_ALPHABET) for _ in range(NAME_SUFFIX_LENGTH))


def generation(manifest: Mapping[str, Any]) -> int:
    """``metadata.generation``: 1 for a new object, bumped on every spec change."""
    value = (manifest.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def is_elastic(annotations: Mapping[str, str], *, slices_enabled: bool) -> bool:
    """Workload slicing applies (``workloadslicing.Enabled``): gate on and annotation "true"."""
    return slices_enabled and annotations.get(ELASTIC_JOB_ANNOTATION) == "true"


def default_manifest(
    manifest: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    uid: str,
    default_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The manifest as stored: a copy with its name, namespace and uid set, and the labels
    Kueue's webhook defaults (queue name, priority class) added when missing."""
    result = copy.deepcopy(dict(manifest))
    metadata = dict(result.get("metadata") or {})
    metadata["name"] = name
    metadata["namespace"] = namespace
    metadata["uid"] = uid
    metadata["generation"] = 1  # the API server's, whatever the client sent
    labels = dict(metadata.get("labels") or {})
    for key, value in (default_labels or {}).items():
        labels.setdefault(key, value)
    if labels:
        metadata["labels"] = labels
    result["metadata"] = metadata
    return result


@dataclass(frozen=True)
class WorkloadDraft:
    """The Workload Kueue constructs for a job, before the database fills in priority."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    queue_name: str
    priority_class_name: str
    maximum_execution_time_seconds: int | None
    pod_sets: list[dict[str, Any]] = field(default_factory=list)


def construct_workload(
    integration: GenericJob,
    manifest: Mapping[str, Any],
    *,
    label_keys_to_copy: Iterable[str] = (),
    partial_admission: bool = True,
    slices_enabled: bool = True,
) -> WorkloadDraft:
    """Kueue's ``ConstructWorkload`` for a validated, defaulted object of ``integration``.

    The kind's pod sets (minCount dropped without PartialAdmission); labels in
    ``label_keys_to_copy`` plus the job-uid label; provisioning-request annotations passed
    through; elastic jobs are named with their generation (1 for a new object), so each
    scale-up slice gets a new name, and annotated as the first slice of their chain (the
    scale service re-annotates later slices).
    """
    metadata = manifest["metadata"]
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    elastic = integration.elastic and is_elastic(annotations, slices_enabled=slices_enabled)
    extra = str(generation(manifest)) if elastic else ""
    name = workload_name_for_owner(metadata["name"], metadata["uid"], kind=integration.kind,
                                   group=integration.group, extra=extra)
    wl_labels = {key: labels[key] for key in label_keys_to_copy if key in labels}
    wl_labels[JOB_UID_LABEL] = metadata["uid"]
    wl_annotations = {
        key: value for key, value in annotations.items()
        if key.startswith(PROVREQ_ANNOTATION_PREFIX)
    }
    if elastic:
        wl_annotations[ELASTIC_JOB_ANNOTATION] = "true"
        wl_annotations[WORKLOAD_SLICE_NAME_ANNOTATION] = name
    max_exec = labels.get(MAX_EXEC_TIME_LABEL)
    return WorkloadDraft(
        name=name,
        namespace=metadata["namespace"],
        labels=wl_labels,
        annotations=wl_annotations,
        queue_name=labels.get(QUEUE_NAME_LABEL, ""),
        priority_class_name=labels.get(PRIORITY_CLASS_LABEL, ""),
        maximum_execution_time_seconds=int(max_exec) if max_exec is not None else None,
        pod_sets=integration.pod_sets(manifest, partial_admission=partial_admission),
    )


# --- Workload specs (Kueue's custom-workload integration) ---------------------------------


@dataclass(frozen=True)
class PriorityRequest:
    """What a Workload spec asks for its priority, before the class is looked up.

    ``source`` is empty when no class is named; ``priority`` is the explicit value, if any.
    """

    source: str
    class_name: str
    priority: int | None


@dataclass(frozen=True)
class WorkloadSpecValues:
    """A validated Workload ``spec`` with Kueue's defaults applied."""

    pod_sets: list[dict[str, Any]]
    queue_name: str
    priority: PriorityRequest
    active: bool
    maximum_execution_time_seconds: int | None


def _validate_pod_sets(
    pod_sets: Any, errors: list[FieldError], *, elastic: bool
) -> list[dict[str, Any]]:
    path = "spec.podSets"
    if not isinstance(pod_sets, list) or not pod_sets:
        errors.append(FieldError(path, "must have at least one pod set"))
        return []
    if len(pod_sets) > MAX_POD_SETS:
        errors.append(FieldError(path, f"must have at most {MAX_POD_SETS} items"))
    result: list[dict[str, Any]] = []
    names: set[str] = set()
    with_min_count = 0
    for index, pod_set in enumerate(pod_sets):
        ppath = f"{path}[{index}]"
        if not isinstance(pod_set, Mapping):
            errors.append(FieldError(ppath, "must be an object"))
            continue
        name = pod_set.get("name", DEFAULT_POD_SET_NAME)
        message = dns_label_message(name) if isinstance(name, str) else "must be a string"
        if message is not None:
            errors.append(FieldError(f"{ppath}.name", message))
        elif name in names:
            errors.append(FieldError(f"{ppath}.name", f"duplicate pod set name {name!r}"))
        names.add(str(name))
        count = int_value(pod_set.get("count", 1), f"{ppath}.count", errors, minimum=1)
        normalized: dict[str, Any] = {"name": name, "count": count}
        if pod_set.get("minCount") is not None:
            with_min_count += 1
            min_count = int_value(pod_set["minCount"], f"{ppath}.minCount", errors, minimum=1)
            if min_count is not None and count is not None and min_count > count:
                errors.append(FieldError(f"{ppath}.minCount",
                                         "minCount should be positive and less or equal to count"))
            normalized["minCount"] = min_count
        errors.extend(validate_pod_template(pod_set.get("template"), f"{ppath}.template"))
        normalized["template"] = copy.deepcopy(pod_set.get("template"))
        if pod_set.get("topologyRequest") is not None:
            normalized["topologyRequest"] = copy.deepcopy(pod_set["topologyRequest"])
        result.append(normalized)
    if with_min_count > 1:
        errors.append(FieldError(path, "at most one podSet can use minCount"))
    if with_min_count and elastic:
        errors.append(FieldError(path, "partial admission and elastic job cannot be used together"))
    return result


class PodSetValidations:
    """``spec.podSets`` validated once per distinct value, for the specs of one batch: a
    generator or an automation submits thousands of workloads from a handful of templates
    (each with its own name and queue), and validating and copying pod sets is most of
    what checking a spec costs. Values are the same only if they are the same JSON,
    types and key order included (``json_key``); any other value is validated on its own.
    The errors carry no item index, so a shared result reads as the item's own.

    Specs with equal pod sets share the normalized list: whoever keeps it past the batch
    (a model instance) takes a copy."""

    def __init__(self) -> None:
        self._results: dict[tuple[Any, bool], tuple[list[dict[str, Any]], list[FieldError]]] = {}

    def __call__(self, pod_sets: Any, errors: list[FieldError], *, elastic: bool,
                 ) -> list[dict[str, Any]]:
        try:
            key = (json_key(pod_sets), elastic)
        except NotJson:
            return _validate_pod_sets(pod_sets, errors, elastic=elastic)
        if key not in self._results:
            found: list[FieldError] = []
            self._results[key] = (_validate_pod_sets(pod_sets, found, elastic=elastic), found)
        result, found = self._results[key]
        errors.extend(found)
        return result


def priority_class_path(spec: Mapping[str, Any]) -> str:
    """Where an error about the named priority class goes (v1beta2 or v1beta1 spelling)."""
    if isinstance(spec, Mapping) and spec.get("priorityClassRef") is not None:
        return "spec.priorityClassRef.name"
    return "spec.priorityClassName"


def priority_request(spec: Mapping[str, Any]) -> tuple[PriorityRequest, list[FieldError]]:
    """The priority a Workload spec asks for: ``priorityClassRef`` (v1beta2) or
    ``priorityClassName``/``priorityClassSource`` (v1beta1), and/or an int32 ``priority``."""
    errors: list[FieldError] = []
    priority = None
    if spec.get("priority") is not None:
        priority = int_value(spec["priority"], "spec.priority", errors, minimum=-(2**31))
    ref = spec.get("priorityClassRef")
    if ref is not None:
        if not isinstance(ref, Mapping):
            errors.append(FieldError("spec.priorityClassRef", "must be an object"))
            return PriorityRequest("", "", priority), errors
        group = ref.get("group", "kueue.x-k8s.io")
        kind = ref.get("kind", "WorkloadPriorityClass" if group == "kueue.x-k8s.io"
                       else "PriorityClass")
        source = next((s for s, gk in PRIORITY_CLASS_REFS.items() if gk == (group, kind)), "")
        if not source:
            errors.append(FieldError("spec.priorityClassRef", "group/kind must be "
                                     "kueue.x-k8s.io/WorkloadPriorityClass or "
                                     "scheduling.k8s.io/PriorityClass"))
        name = ref.get("name")
    elif spec.get("priorityClassName"):
        # v1beta1 spelling.
        name = spec["priorityClassName"]
        source = spec.get("priorityClassSource") or WORKLOAD_PRIORITY_CLASS_SOURCE
        if source not in PRIORITY_CLASS_REFS:
            errors.append(FieldError("spec.priorityClassSource", f"unsupported value {source!r}"))
    else:
        return PriorityRequest("", "", priority), errors
    path = priority_class_path(spec)
    if not isinstance(name, str) or not name:
        errors.append(FieldError(path, "is required"))
        return PriorityRequest("", "", priority), errors
    message = dns1123_subdomain_error(name)
    if message is not None:
        errors.append(FieldError(path, message))
    if source == POD_PRIORITY_CLASS_SOURCE and priority is None:
        # Kueue's CEL rule: a Workload created directly brings its value with a pod
        # PriorityClass, which is not looked up (a job's Workload takes the class's value).
        errors.append(FieldError("spec.priority",
                                 "priority should not be nil when priorityClassRef is set"))
    return PriorityRequest(source, name, priority), errors


def validate_workload_spec(
    spec: Any, *, elastic: bool = False, pod_sets: PodSetValidations | None = None,
) -> tuple[WorkloadSpecValues | None, list[FieldError]]:
    """Kueue's rules for a Workload ``spec``, and the spec's values with defaults applied.

    1 to 18 pod sets with unique DNS-label names (default ``main``); counts ≥ 1 (default 1;
    Kueue allows 0, kueueweb asks for at least one pod); ``minCount`` between 1 and the count,
    on at most one pod set, never with an elastic workload; valid non-negative requests
    without the reserved ``pods``; a DNS-subdomain ``queueName``; a priority class reference
    or an int32 ``priority``; boolean ``active``; ``maximumExecutionTimeSeconds`` ≥ 1.
    ``pod_sets``: where a batch validates its pod sets (once per distinct value).
    """
    errors: list[FieldError] = []
    if not isinstance(spec, Mapping):
        return None, [FieldError("spec", "is required" if spec is None else "must be an object")]
    validate_pod_sets = _validate_pod_sets if pod_sets is None else pod_sets
    normalized = validate_pod_sets(spec.get("podSets"), errors, elastic=elastic)
    queue_name = spec.get("queueName") or ""
    errors.extend(validate_queue_name(queue_name))
    priority, priority_errors = priority_request(spec)
    errors.extend(priority_errors)
    active = spec.get("active", True)
    if not isinstance(active, bool):
        errors.append(FieldError("spec.active", "must be a boolean"))
    max_exec = None
    if spec.get("maximumExecutionTimeSeconds") is not None:
        max_exec = int_value(spec["maximumExecutionTimeSeconds"],
                              "spec.maximumExecutionTimeSeconds", errors, minimum=1)
    if errors:
        return None, errors
    return WorkloadSpecValues(
        pod_sets=normalized,
        queue_name=str(queue_name),
        priority=priority,
        active=bool(active),
        maximum_execution_time_seconds=max_exec,
    ), []


def workload_spec(
    *,
    pod_sets: list[dict[str, Any]],
    queue_name: str,
    priority_class_name: str,
    priority_class_source: str,
    priority: int,
    active: bool,
    maximum_execution_time_seconds: int | None,
) -> dict[str, Any]:
    """A Workload ``spec`` in Kueue's v1beta2 shape from stored values (empty fields omitted,
    as Kubernetes omits them)."""
    spec: dict[str, Any] = {"podSets": pod_sets}
    if queue_name:
        spec["queueName"] = queue_name
    if priority_class_name:
        group, kind = PRIORITY_CLASS_REFS.get(
            priority_class_source, PRIORITY_CLASS_REFS[WORKLOAD_PRIORITY_CLASS_SOURCE])
        spec["priorityClassRef"] = {"group": group, "kind": kind, "name": priority_class_name}
    spec["priority"] = priority
    spec["active"] = active
    if maximum_execution_time_seconds is not None:
        spec["maximumExecutionTimeSeconds"] = maximum_execution_time_seconds
    return spec


def spec_of(workload: Any) -> dict[str, Any]:
    """The ``spec`` of a stored Workload (any object with the model's spec attributes)."""
    return workload_spec(
        pod_sets=workload.pod_sets,
        queue_name=workload.queue_name,
        priority_class_name=workload.priority_class_name,
        priority_class_source=workload.priority_class_source,
        priority=workload.priority,
        active=workload.active,
        maximum_execution_time_seconds=workload.maximum_execution_time_seconds,
    )


def frozen_spec_errors(
    current: Mapping[str, Any], new: Mapping[str, Any], *, reserved: bool
) -> list[FieldError]:
    """Changes to fields that a patch may not make: pod sets and the maximum execution time.

    While quota is reserved the messages are Kueue's (webhook and CEL rules).
    """
    errors: list[FieldError] = []
    if new.get("podSets") != current.get("podSets"):
        errors.append(FieldError("spec.podSets", "field is immutable" if reserved else
                                 "podSets cannot be changed"))
    key = "maximumExecutionTimeSeconds"
    if new.get(key) != current.get(key):
        errors.append(FieldError(f"spec.{key}", f"{key} is immutable while workload quota "
                                 "reserved" if reserved else f"{key} cannot be changed: only "
                                 "spec.active, spec.queueName and the priority can"))
    return errors
