"""batch/v1 Jobs and Workload specs, as Kueue's job integration and webhooks see them.

Pure functions over Kubernetes-shaped dicts (no ORM, no settings): what the REST API, the UI
and the admission code share about a submitted Job and the Workload made from it.

* Validation of a Job manifest: the rules of Kubernetes' Job validation that matter here and
  of Kueue's Job webhook (``pkg/controller/jobs/job/job_webhook.go``,
  ``pkg/controller/jobframework/validation.go``), with the field path of each error.
* The Workload Kueue constructs for a Job (``jobframework.ConstructWorkload``, ``NewWorkload``,
  ``Job.PodSets``), including its name (``jobframework/workload_names.go``).
* Validation of a Workload's ``spec`` (Kueue's CRD rules and ``pkg/webhooks/workload_webhook.go``).
* Per-pod requests of a pod set: Kubernetes' effective pod request with Kueue's adjustments
  (``pkg/workload/resources.go``: limits stand in for missing requests).

Lookups that need the database (LocalQueues, WorkloadPriorityClasses, name conflicts) are done
by ``scheduling.services``, which passes their answers in.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from django.core.exceptions import ValidationError

from scheduling.core.quantities import QuantityError, format_quantity, parse_quantity
from scheduling.validation import FieldError
from scheduling.validators import (
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_label_value,
    validate_qualified_name,
)

# --- Kueue's labels and annotations (pkg/controller/constants, jobs/job) -----------------

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
WORKLOAD_SLICE_NAME_ANNOTATION = "kueue.x-k8s.io/workload-slice-name"
WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION = "kueue.x-k8s.io/workload-slice-replacement-for"
# Finished reason of a slice replaced by its scale-up successor.
WORKLOAD_SLICE_REPLACED = "WorkloadSliceReplaced"
JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-completions-equal-parallelism"
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"

DEFAULT_LOCAL_QUEUE_NAME = "default"
DEFAULT_PRIORITY_CLASS_NAME = "default"
DEFAULT_POD_SET_NAME = "main"

# Workload.priority_class_source values (v1beta1 spelling; v1beta2's priorityClassRef).
WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_CLASS_SOURCE = "scheduling.k8s.io/priorityclass"
PRIORITY_CLASS_REFS = {
    WORKLOAD_PRIORITY_CLASS_SOURCE: ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    POD_PRIORITY_CLASS_SOURCE: ("scheduling.k8s.io", "PriorityClass"),
}

MAX_POD_SETS = 18
MAX_INT32 = 2**31 - 1
# Kueue charges one of these per pod itself; containers may not ask for it.
RESERVED_RESOURCE = "pods"
RESERVED_RESOURCE_MESSAGE = "the key is reserved for internal kueue use"

# Labels the Job controller manages on the pod template; Kueue drops all but the job name
# from the Workload's template (jobs/job/job_controller.go cleanLabels).
_JOB_CONTROLLER_LABELS = ("job-name", "controller-uid", "batch.kubernetes.io/controller-uid")

# Kubernetes' SimpleNameGenerator: 5 characters from this alphabet, base cut to 58.
_NAME_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_NAME_SUFFIX_LENGTH = 5
_MAX_JOB_NAME_LENGTH = 63  # the name becomes a pod label value

# Workload names (jobframework/workload_names.go): 253, or 63 with ShortWorkloadNames (alpha).
WORKLOAD_NAME_MAX_LENGTH = 253
_WORKLOAD_NAME_HASH_LENGTH = 5

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
_RESTART_POLICIES = ("OnFailure", "Never")
_COMPLETION_MODES = ("NonIndexed", "Indexed")
_TEMPLATE_METADATA_FIELDS = frozenset({"labels", "annotations"})


def label_path(key: str) -> str:
    return f"metadata.labels[{key}]"


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"


# --- Names ---------------------------------------------------------------------------------


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


def generate_name(base: str, choose: Callable[[str], str] = secrets.choice) -> str:
    """``metadata.generateName`` completed as Kubernetes does: five random characters."""
    base = base[: _MAX_JOB_NAME_LENGTH - _NAME_SUFFIX_LENGTH]
    return base + "".join(choose(_NAME_SUFFIX_ALPHABET) for _ in range(_NAME_SUFFIX_LENGTH))


# --- Small typed readers -------------------------------------------------------------------


_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _dns_label_message(value: str) -> str | None:
    """Container and pod set names: RFC 1123 labels."""
    if value and len(value) <= 63 and _DNS1123_LABEL.match(value):
        return None
    return (f"{value!r} is not a valid name: a lowercase RFC 1123 label must consist of lower "
            "case alphanumeric characters or '-', start and end with an alphanumeric "
            "character, and be at most 63 characters")


def _django_message(validator: Callable[[str], None], value: str) -> str | None:
    try:
        validator(value)
    except ValidationError as exc:
        return exc.messages[0]
    return None


def int_value(
    value: Any, path: str, errors: list[FieldError], *, minimum: int | None = None
) -> int | None:
    """An int32 field; ``None`` (and an error) when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int):
        errors.append(FieldError(path, f"must be an integer, not {value!r}"))
        return None
    if minimum is not None and value < minimum:
        errors.append(FieldError(path, f"must be greater than or equal to {minimum}"))
        return None
    if value > MAX_INT32:
        errors.append(FieldError(path, f"must be less than or equal to {MAX_INT32}"))
        return None
    return int(value)


def _mapping(value: Any, path: str, errors: list[FieldError]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return {}
    return value


def _string_map(value: Any, path: str, errors: list[FieldError]) -> dict[str, str]:
    mapping = _mapping(value, path, errors)
    result: dict[str, str] = {}
    for key, item in mapping.items():
        if not isinstance(item, str):
            errors.append(FieldError(f"{path}[{key}]", "must be a string"))
            continue
        result[str(key)] = item
    return result


def validate_labels(labels: Mapping[str, str], path: str = "metadata.labels") -> list[FieldError]:
    """Label keys are qualified names and values label values (Kubernetes ValidateLabels)."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        message = _django_message(validate_qualified_name, key)
        if message is None:
            message = _django_message(validate_label_value, value)
        if message is not None:
            errors.append(FieldError(f"{path}[{key}]", message))
    return errors


def validate_annotations(
    annotations: Mapping[str, str], path: str = "metadata.annotations"
) -> list[FieldError]:
    errors: list[FieldError] = []
    for key in annotations:
        message = _django_message(validate_qualified_name, key)
        if message is not None:
            errors.append(FieldError(f"{path}[{key}]", message))
    return errors


# --- Resources -----------------------------------------------------------------------------


def _resource_list(
    value: Any, path: str, errors: list[FieldError], *, containers: bool = True
) -> dict[str, Fraction]:
    """Parse a ResourceList; refuse invalid names and quantities, negatives and ``pods``."""
    result: dict[str, Fraction] = {}
    for name, quantity in _mapping(value, path, errors).items():
        rpath = f"{path}.{name}"
        if name == RESERVED_RESOURCE:
            errors.append(FieldError(rpath, RESERVED_RESOURCE_MESSAGE))
            continue
        message = _django_message(validate_qualified_name, name)
        if message is None and containers and "/" not in name and not (
            name in _STANDARD_CONTAINER_RESOURCES or name.startswith("hugepages-")
        ):
            message = (f"{name!r} must be a standard resource for containers (cpu, memory, "
                       "ephemeral-storage, hugepages-*) or a fully qualified extended resource")
        if message is not None:
            errors.append(FieldError(rpath, message))
            continue
        try:
            result[name] = parse_quantity(quantity)
        except QuantityError as exc:
            errors.append(FieldError(rpath, str(exc)))
    return result


def _validate_resources(resources: Any, path: str, errors: list[FieldError]) -> None:
    """``requests`` and ``limits`` of a container (or a pod): valid, and requests ≤ limits."""
    mapping = _mapping(resources, path, errors)
    requests = _resource_list(mapping.get("requests"), f"{path}.requests", errors)
    limits = _resource_list(mapping.get("limits"), f"{path}.limits", errors)
    for name, request in requests.items():
        limit = limits.get(name)
        if limit is not None and request > limit:
            errors.append(FieldError(
                f"{path}.requests.{name}",
                f"must be less than or equal to {name} limit of {mapping['limits'][name]}",
            ))


def _validate_containers(
    spec: Mapping[str, Any], path: str, errors: list[FieldError], *, for_job: bool
) -> None:
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(FieldError(f"{path}.containers", "must have at least one container"))
        containers = []
    init_containers = spec.get("initContainers")
    if init_containers is None:
        init_containers = []
    elif not isinstance(init_containers, list):
        errors.append(FieldError(f"{path}.initContainers", "must be a list"))
        init_containers = []
    seen: set[str] = set()
    for group, items in (("initContainers", init_containers), ("containers", containers)):
        for index, container in enumerate(items):
            cpath = f"{path}.{group}[{index}]"
            if not isinstance(container, Mapping):
                errors.append(FieldError(cpath, "must be an object"))
                continue
            name = container.get("name")
            if not isinstance(name, str) or not name:
                errors.append(FieldError(f"{cpath}.name", "is required"))
            else:
                message = _dns_label_message(name)
                if message is not None:
                    errors.append(FieldError(f"{cpath}.name", message))
                elif name in seen:
                    errors.append(FieldError(f"{cpath}.name", f"duplicate container name {name!r}"))
                seen.add(name)
            if for_job and not (isinstance(container.get("image"), str) and container["image"]):
                errors.append(FieldError(f"{cpath}.image", "is required"))
            restart_policy = container.get("restartPolicy")
            if restart_policy is not None:
                if group == "containers":
                    errors.append(FieldError(f"{cpath}.restartPolicy",
                                             "may not be set for non-init containers"))
                elif restart_policy != "Always":
                    errors.append(FieldError(f"{cpath}.restartPolicy",
                                             f"unsupported value {restart_policy!r}: "
                                             "supported values: \"Always\""))
            _validate_resources(container.get("resources"), f"{cpath}.resources", errors)


def validate_pod_template(
    template: Any, path: str, *, for_job: bool = False
) -> list[FieldError]:
    """A pod template: containers with valid, non-negative requests and limits.

    ``for_job`` adds Kubernetes' Job rules (images, restartPolicy OnFailure or Never);
    otherwise Kueue's Workload rule that template metadata holds only labels and annotations.
    """
    errors: list[FieldError] = []
    if not isinstance(template, Mapping):
        return [FieldError(path, "is required" if template is None else "must be an object")]
    metadata = _mapping(template.get("metadata"), f"{path}.metadata", errors)
    if not for_job:
        for key in metadata:
            if key not in _TEMPLATE_METADATA_FIELDS:
                errors.append(FieldError(f"{path}.metadata.{key}",
                                         "only labels and annotations are allowed"))
    errors.extend(validate_labels(
        _string_map(metadata.get("labels"), f"{path}.metadata.labels", errors),
        f"{path}.metadata.labels",
    ))
    spec = template.get("spec")
    spath = f"{path}.spec"
    if not isinstance(spec, Mapping):
        errors.append(FieldError(spath, "is required" if spec is None else "must be an object"))
        return errors
    _validate_containers(spec, spath, errors, for_job=for_job)
    if spec.get("resources") is not None:
        _validate_resources(spec["resources"], f"{spath}.resources", errors)
    _resource_list(spec.get("overhead"), f"{spath}.overhead", errors, containers=False)
    if for_job:
        # Kubernetes defaults restartPolicy to Always, which a Job refuses.
        restart_policy = spec.get("restartPolicy", "Always")
        if restart_policy not in _RESTART_POLICIES:
            errors.append(FieldError(f"{spath}.restartPolicy",
                                     f"unsupported value {restart_policy!r}: supported values: "
                                     '"OnFailure", "Never"'))
    return errors


def _quantities(value: Any) -> dict[str, Fraction]:
    """A ResourceList already validated (stored pod sets): unparseable entries are skipped."""
    result: dict[str, Fraction] = {}
    if not isinstance(value, Mapping):
        return result
    for name, quantity in value.items():
        try:
            result[str(name)] = parse_quantity(quantity)
        except QuantityError:
            continue
    return result


def _container_requests(container: Mapping[str, Any]) -> dict[str, Fraction]:
    """Requests, with limits standing in for missing ones (UseLimitsAsMissingRequestsInPod)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    return {**_quantities(resources.get("limits")), **_quantities(resources.get("requests"))}


def _add(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        into[name] = into.get(name, Fraction(0)) + value


def _max(into: dict[str, Fraction], other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        if name not in into or value > into[name]:
            into[name] = value


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """The effective requests of one pod (Kubernetes ``resourcehelpers.PodRequests``).

    1. Each container's requests, limits standing in for missing requests (Kueue).
    2. Sum of the regular containers and of the sidecars (init containers with
       ``restartPolicy: Always``), which run alongside them.
    3. Max with each init container's requests plus the sidecars started before it.
    4. Pod-level requests (KEP-2837), where set, replace cpu and memory.
    5. Plus the pod overhead.
    """
    total: dict[str, Fraction] = {}
    containers = pod_spec.get("containers")
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, Mapping):
            _add(total, _container_requests(container))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    init_containers = pod_spec.get("initContainers")
    for container in init_containers if isinstance(init_containers, list) else ():
        if not isinstance(container, Mapping):
            continue
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            running = dict(sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
        _max(init_peak, running)
    _max(total, init_peak)
    pod_resources = pod_spec.get("resources")
    if isinstance(pod_resources, Mapping):
        pod_level = {**_quantities(pod_resources.get("limits")),
                     **_quantities(pod_resources.get("requests"))}
        for name, value in pod_level.items():
            if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
                total[name] = value
    _add(total, _quantities(pod_spec.get("overhead")))
    return total


def format_request(resource: str, value: Fraction) -> str:
    """Exact quantity text for an amount of ``resource`` (whole CPUs as plain numbers)."""
    if value.denominator == 1:
        return str(value.numerator) if resource == "cpu" else format_quantity(value)
    for scale, suffix in ((1000, "m"), (10**6, "u"), (10**9, "n")):
        scaled = value * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    # Kubernetes keeps at most nano precision and rounds up.
    return f"{math.ceil(value * 10**9)}n"


def pod_set_requests(pod_set: Mapping[str, Any]) -> dict[str, str]:
    """Requests of one pod of ``pod_set`` (Kueue's shape), as quantity text, by resource.

    Pod sets carry a pod ``template``; a pod set without one may give per-pod ``requests``
    directly (the conformance scenarios' shorthand).
    """
    template = pod_set.get("template")
    if isinstance(template, Mapping):
        spec = template.get("spec")
        requests = pod_requests(spec if isinstance(spec, Mapping) else {})
    else:
        requests = _quantities(pod_set.get("requests"))
    return {name: format_request(name, requests[name]) for name in sorted(requests)}


def pod_set_total_requests(pod_set: Mapping[str, Any]) -> dict[str, str]:
    """Requests of all ``count`` pods of ``pod_set`` (Kueue ``status.resourceRequests``)."""
    count = pod_set.get("count", 1)
    count = count if isinstance(count, int) else 1
    return {
        name: format_request(name, parse_quantity(quantity) * count)
        for name, quantity in pod_set_requests(pod_set).items()
    }


# --- Jobs ----------------------------------------------------------------------------------


def job_generation(manifest: Mapping[str, Any]) -> int:
    """``metadata.generation``: 1 for a new Job, bumped on every spec change."""
    value = (manifest.get("metadata") or {}).get("generation")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def job_pods_count(spec: Mapping[str, Any]) -> int:
    """min(parallelism, completions), with Kubernetes' default parallelism of 1."""
    parallelism = spec.get("parallelism")
    parallelism = 1 if parallelism is None else parallelism
    completions = spec.get("completions")
    if completions is not None and completions < parallelism:
        return int(completions)
    return int(parallelism)


def is_elastic(annotations: Mapping[str, str], *, slices_enabled: bool) -> bool:
    """Workload slicing applies (``workloadslicing.Enabled``): gate on and annotation "true"."""
    return slices_enabled and annotations.get(ELASTIC_JOB_ANNOTATION) == "true"


def validate_job_manifest(
    manifest: Any, *, namespace: str, slices_enabled: bool = True
) -> list[FieldError]:
    """What Kubernetes' Job validation and Kueue's Job webhook refuse on create.

    Needs no database: the queue-name requirement (which depends on a default LocalQueue)
    and the priority class lookup are the service's.
    """
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a Job manifest must be an object")]
    errors: list[FieldError] = []
    if manifest.get("apiVersion") != "batch/v1":
        errors.append(FieldError("apiVersion", f"must be \"batch/v1\", not {manifest.get('apiVersion')!r}"))
    if manifest.get("kind") != "Job":
        errors.append(FieldError("kind", f"must be \"Job\", not {manifest.get('kind')!r}"))
    metadata = _mapping(manifest.get("metadata"), "metadata", errors)
    labels = _string_map(metadata.get("labels"), "metadata.labels", errors)
    annotations = _string_map(metadata.get("annotations"), "metadata.annotations", errors)
    errors.extend(_validate_job_metadata(metadata, namespace=namespace))
    errors.extend(validate_labels(labels))
    errors.extend(validate_annotations(annotations))

    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    counts_valid = True
    for key in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds",
                "ttlSecondsAfterFinished"):
        if spec.get(key) is not None:
            minimum = 1 if key == "activeDeadlineSeconds" else 0
            if int_value(spec[key], f"spec.{key}", errors, minimum=minimum) is None:
                counts_valid = counts_valid and key not in ("parallelism", "completions")
    completion_mode = spec.get("completionMode", "NonIndexed")
    if completion_mode not in _COMPLETION_MODES:
        errors.append(FieldError("spec.completionMode", f"unsupported value {completion_mode!r}: "
                                 'supported values: "NonIndexed", "Indexed"'))
    elif completion_mode == "Indexed" and spec.get("completions") is None:
        errors.append(FieldError("spec.completions", "is required when completionMode is Indexed"))
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError("spec.suspend", "must be a boolean"))
    errors.extend(validate_pod_template(spec.get("template"), "spec.template", for_job=True))

    # Kueue's Job webhook (ValidateJobOnCreate, validatePartialAdmissionCreate, ...).
    errors.extend(_validate_kueue_labels(labels))
    if counts_valid:
        errors.extend(_validate_kueue_annotations(
            annotations, spec, completion_mode, slices_enabled=slices_enabled))
    return errors


def _validate_job_metadata(metadata: Mapping[str, Any], *, namespace: str) -> list[FieldError]:
    errors: list[FieldError] = []
    name = metadata.get("name")
    generate = metadata.get("generateName")
    if name:
        candidates = [("metadata.name", name)]
    elif generate:
        # Validated as Kubernetes does: the prefix with a (hypothetical) suffix appended.
        candidates = [("metadata.generateName", generate)]
    else:
        return [FieldError("metadata.name", "name or generateName is required")]
    for path, value in candidates:
        if not isinstance(value, str):
            errors.append(FieldError(path, "must be a string"))
            continue
        check = value
        if path == "metadata.generateName":
            check = value[: _MAX_JOB_NAME_LENGTH - _NAME_SUFFIX_LENGTH] + "x" * _NAME_SUFFIX_LENGTH
        message = _django_message(validate_dns1123_subdomain, check)
        if message is not None:
            errors.append(FieldError(path, message.replace(repr(check), repr(value))))
        elif path == "metadata.name" and len(value) > _MAX_JOB_NAME_LENGTH:
            errors.append(FieldError(path, f"must be no more than {_MAX_JOB_NAME_LENGTH} "
                                     "characters (the name is a label value of the Job's pods)"))
    given_namespace = metadata.get("namespace")
    if given_namespace not in (None, "", namespace):
        errors.append(FieldError("metadata.namespace", "the namespace of the provided object "
                                 "does not match the namespace sent on the request"))
    message = _django_message(validate_dns1123_label, namespace)
    if message is not None:
        errors.append(FieldError("metadata.namespace", message))
    return errors


def _validate_kueue_labels(labels: Mapping[str, str]) -> list[FieldError]:
    errors: list[FieldError] = []
    queue_name = labels.get(QUEUE_NAME_LABEL)
    if queue_name is not None:
        message = _django_message(validate_dns1123_subdomain, queue_name)
        if message is not None:
            errors.append(FieldError(label_path(QUEUE_NAME_LABEL), message))
    if PREBUILT_WORKLOAD_LABEL in labels:
        errors.append(FieldError(label_path(PREBUILT_WORKLOAD_LABEL),
                                 "prebuilt workloads are not supported: kueueweb creates the "
                                 "Job's Workload itself"))
    max_exec = labels.get(MAX_EXEC_TIME_LABEL)
    if max_exec is not None:
        path = label_path(MAX_EXEC_TIME_LABEL)
        try:
            seconds = int(max_exec)
        except ValueError:
            errors.append(FieldError(path, f"{max_exec!r} is not an integer"))
        else:
            if seconds <= 0:
                errors.append(FieldError(path, "should be greater than 0"))
            elif seconds > MAX_INT32:
                errors.append(FieldError(path, f"should be at most {MAX_INT32}"))
    return errors


def _validate_kueue_annotations(
    annotations: Mapping[str, str],
    spec: Mapping[str, Any],
    completion_mode: str,
    *,
    slices_enabled: bool,
) -> list[FieldError]:
    errors: list[FieldError] = []
    min_parallelism = annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    if min_parallelism is not None:
        path = annotation_path(JOB_MIN_PARALLELISM_ANNOTATION)
        pods_count = job_pods_count(spec)
        try:
            value = int(min_parallelism)
        except ValueError:
            errors.append(FieldError(path, f"{min_parallelism!r} is not an integer"))
        else:
            # Kueue accepts 0 < min < pods count: equal to the count is no partial admission.
            if value <= 0 or value >= pods_count:
                errors.append(FieldError(path, f"should be between 0 and {pods_count - 1}"))
        if is_elastic(annotations, slices_enabled=slices_enabled):
            errors.append(FieldError(path, "partial admission and elastic job cannot be used "
                                     "together"))
    sync = annotations.get(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
    if sync is not None:
        path = annotation_path(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
        if sync.lower() not in ("true", "false", "1", "0", "t", "f"):
            errors.append(FieldError(path, f"{sync!r} is not a boolean"))
        elif sync.lower() in ("true", "1", "t"):
            if completion_mode != "Indexed":
                errors.append(FieldError(path, "should not be enabled for NonIndexed jobs"))
            if spec.get("parallelism", 1) != spec.get("completions", 1):
                errors.append(FieldError("spec.completions", "should be equal to parallelism "
                                         f"when {JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION} "
                                         "annotation is true"))
    return errors


def default_job_manifest(
    manifest: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    uid: str,
    default_labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The manifest as stored: a copy with its name, namespace and uid set, and the labels
    Kueue's Job webhook defaults (queue name, priority class) added when missing."""
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
    """The Workload Kueue constructs for a Job, before the database fills in priority."""

    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    queue_name: str
    priority_class_name: str
    maximum_execution_time_seconds: int | None
    pod_sets: list[dict[str, Any]] = field(default_factory=list)


def workload_for_job(
    manifest: Mapping[str, Any],
    *,
    label_keys_to_copy: Iterable[str] = (),
    partial_admission: bool = True,
    slices_enabled: bool = True,
) -> WorkloadDraft:
    """Kueue's ``ConstructWorkload`` for a validated, defaulted batch/v1 Job manifest.

    One pod set ``main`` with count min(parallelism, completions) and the job's template
    (less the job controller's labels); minCount from the min-parallelism annotation (dropped
    without PartialAdmission); labels in ``label_keys_to_copy`` plus the job-uid label;
    provisioning-request annotations passed through; elastic jobs are named with their
    generation (1 for a new Job), so each scale-up slice gets a new name, and annotated as
    the first slice of their chain (the scale service re-annotates later slices).
    """
    metadata = manifest["metadata"]
    labels: Mapping[str, str] = metadata.get("labels") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    spec = manifest["spec"]
    elastic = is_elastic(annotations, slices_enabled=slices_enabled)
    generation = str(job_generation(manifest)) if elastic else ""
    name = workload_name_for_owner(metadata["name"], metadata["uid"], extra=generation)

    template = copy.deepcopy(spec["template"])
    template_labels = (template.get("metadata") or {}).get("labels")
    if template_labels:
        for key in _JOB_CONTROLLER_LABELS:
            template_labels.pop(key, None)
    pod_set: dict[str, Any] = {
        "name": DEFAULT_POD_SET_NAME,
        "count": job_pods_count(spec),
        "template": template,
    }
    if partial_admission and JOB_MIN_PARALLELISM_ANNOTATION in annotations:
        pod_set["minCount"] = int(annotations[JOB_MIN_PARALLELISM_ANNOTATION])

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
        pod_sets=[pod_set],
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
        message = _dns_label_message(name) if isinstance(name, str) else "must be a string"
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
    message = _django_message(validate_dns1123_subdomain, name)
    if message is not None:
        errors.append(FieldError(path, message))
    if source == POD_PRIORITY_CLASS_SOURCE and priority is None:
        # kueueweb has no pod PriorityClasses to read a value from (Kueue's CEL rule).
        errors.append(FieldError("spec.priority",
                                 "priority should not be nil when priorityClassRef is set"))
    return PriorityRequest(source, name, priority), errors


def validate_queue_name(queue_name: Any) -> list[FieldError]:
    """``spec.queueName``: empty, or a LocalQueue name (DNS subdomain)."""
    if not isinstance(queue_name, str):
        return [FieldError("spec.queueName", "must be a string")]
    if not queue_name:
        return []
    message = _django_message(validate_dns1123_subdomain, queue_name)
    return [] if message is None else [FieldError("spec.queueName", message)]


def validate_object_name(name: Any, namespace: Any) -> list[FieldError]:
    """``metadata.name`` (DNS subdomain) and ``metadata.namespace`` (DNS label)."""
    errors: list[FieldError] = []
    for path, value, validator in (("metadata.name", name, validate_dns1123_subdomain),
                                   ("metadata.namespace", namespace, validate_dns1123_label)):
        if not isinstance(value, str) or not value:
            errors.append(FieldError(path, "is required"))
            continue
        message = _django_message(validator, value)
        if message is not None:
            errors.append(FieldError(path, message))
    return errors


def validate_workload_spec(
    spec: Any, *, elastic: bool = False
) -> tuple[WorkloadSpecValues | None, list[FieldError]]:
    """Kueue's rules for a Workload ``spec``, and the spec's values with defaults applied.

    1 to 18 pod sets with unique DNS-label names (default ``main``); counts ≥ 1 (default 1;
    Kueue allows 0, kueueweb asks for at least one pod); ``minCount`` between 1 and the count,
    on at most one pod set, never with an elastic workload; valid non-negative requests
    without the reserved ``pods``; a DNS-subdomain ``queueName``; a priority class reference
    or an int32 ``priority``; boolean ``active``; ``maximumExecutionTimeSeconds`` ≥ 1.
    """
    errors: list[FieldError] = []
    if not isinstance(spec, Mapping):
        return None, [FieldError("spec", "is required" if spec is None else "must be an object")]
    pod_sets = _validate_pod_sets(spec.get("podSets"), errors, elastic=elastic)
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
        pod_sets=pod_sets,
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
