"""Kueue's common webhook checks and the Kubernetes object rules every job kind shares
(``pkg/controller/jobframework/validation.go``), each error with its field path.

Pure: the rules that need the database (a default LocalQueue, a priority class) are the
service's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from scheduling.core.fields import FieldError
from scheduling.core.names import (
    dns1123_label_error,
    dns1123_subdomain_error,
    label_value_error,
    qualified_name_error,
)
from scheduling.core.quantities import QuantityError, parse_quantity
from scheduling.jobframework.constants import (
    MAX_EXEC_TIME_LABEL,
    MAX_INT32,
    PREBUILT_WORKLOAD_LABEL,
    QUEUE_NAME_LABEL,
    RESERVED_RESOURCE,
    RESERVED_RESOURCE_MESSAGE,
)

_STANDARD_CONTAINER_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage"})
_TEMPLATE_METADATA_FIELDS = frozenset({"labels", "annotations"})
# Kubernetes' SimpleNameGenerator appends 5 characters to a generateName.
NAME_SUFFIX_LENGTH = 5


def label_path(key: str) -> str:
    return f"metadata.labels[{key}]"


def annotation_path(key: str) -> str:
    return f"metadata.annotations[{key}]"



# --- Small typed readers -----------------------------------------------------------------

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def dns_label_message(value: str) -> str | None:
    """Container and pod set names: RFC 1123 labels."""
    if value and len(value) <= 63 and _DNS1123_LABEL.match(value):
        return None
    return (f"{value!r} is not a valid name: a lowercase RFC 1123 label must consist of lower "
            "case alphanumeric characters or '-', start and end with an alphanumeric "
            "character, and be at most 63 characters")


def unique_label_name(name: Any, path: str, seen: set[str], errors: list[FieldError], *,
                      what: str = "value") -> None:
    """The ``name`` of a list item (a container, a replicated job): required, an RFC 1123
    label, and not one of ``seen`` (to which it is added)."""
    if not isinstance(name, str) or not name:
        errors.append(FieldError(path, "is required"))
        return
    message = dns_label_message(name)
    if message is not None:
        errors.append(FieldError(path, message))
    elif name in seen:
        errors.append(FieldError(path, f"duplicate {what} {name!r}"))
    seen.add(name)


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


def object_map(value: Any, path: str, errors: list[FieldError]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return {}
    return value


def string_map(value: Any, path: str, errors: list[FieldError]) -> dict[str, str]:
    values = object_map(value, path, errors)
    result: dict[str, str] = {}
    for key, item in values.items():
        if not isinstance(item, str):
            errors.append(FieldError(f"{path}[{key}]", "must be a string"))
            continue
        result[str(key)] = item
    return result


def validate_labels(labels: Mapping[str, str], path: str = "metadata.labels") -> list[FieldError]:
    """Label keys are qualified names and values label values (Kubernetes ValidateLabels)."""
    errors: list[FieldError] = []
    for key, value in labels.items():
        message = qualified_name_error(key)
        if message is None:
            message = label_value_error(value)
        if message is not None:
            errors.append(FieldError(f"{path}[{key}]", message))
    return errors


def validate_annotations(
    annotations: Mapping[str, str], path: str = "metadata.annotations"
) -> list[FieldError]:
    errors: list[FieldError] = []
    for key in annotations:
        message = qualified_name_error(key)
        if message is not None:
            errors.append(FieldError(f"{path}[{key}]", message))
    return errors


# --- Resources -----------------------------------------------------------------------------


def _resource_list(
    value: Any, path: str, errors: list[FieldError], *, containers: bool = True
) -> dict[str, Fraction]:
    """Parse a ResourceList; refuse invalid names and quantities, negatives and ``pods``."""
    result: dict[str, Fraction] = {}
    for name, quantity in object_map(value, path, errors).items():
        rpath = f"{path}.{name}"
        if name == RESERVED_RESOURCE:
            errors.append(FieldError(rpath, RESERVED_RESOURCE_MESSAGE))
            continue
        message = qualified_name_error(name)
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
    mapping = object_map(resources, path, errors)
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
            unique_label_name(container.get("name"), f"{cpath}.name", seen, errors,
                              what="container name")
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

    ``for_job`` adds the rule of a job's pod template (every container has an image);
    otherwise Kueue's Workload rule that template metadata holds only labels and annotations.
    A kind adds its own template rules (a Job's restartPolicy) in its module.
    """
    errors: list[FieldError] = []
    if not isinstance(template, Mapping):
        return [FieldError(path, "is required" if template is None else "must be an object")]
    metadata = object_map(template.get("metadata"), f"{path}.metadata", errors)
    if not for_job:
        for key in metadata:
            if key not in _TEMPLATE_METADATA_FIELDS:
                errors.append(FieldError(f"{path}.metadata.{key}",
                                         "only labels and annotations are allowed"))
    errors.extend(validate_labels(
        string_map(metadata.get("labels"), f"{path}.metadata.labels", errors),
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
    return errors


def validate_object_metadata(
    metadata: Mapping[str, Any], *, namespace: str, kind: str = "object",
    max_name_length: int = 253,
) -> list[FieldError]:
    """``metadata.name`` or ``generateName`` (DNS subdomain, at most ``max_name_length``:
    a kind whose name becomes a pod label value passes 63), and the request's namespace."""
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
            check = value[: max_name_length - NAME_SUFFIX_LENGTH] + "x" * NAME_SUFFIX_LENGTH
        message = dns1123_subdomain_error(check)
        if message is not None:
            errors.append(FieldError(path, message.replace(repr(check), repr(value))))
        elif path == "metadata.name" and len(value) > max_name_length:
            errors.append(FieldError(path, f"must be no more than {max_name_length} "
                                     f"characters (the name is a label value of the {kind}'s pods)"))
    given_namespace = metadata.get("namespace")
    if given_namespace not in (None, "", namespace):
        errors.append(FieldError("metadata.namespace", "the namespace of the provided object "
                                 "does not match the namespace sent on the request"))
    message = dns1123_label_error(namespace)
    if message is not None:
        errors.append(FieldError("metadata.namespace", message))
    return errors


def validate_kueue_labels(labels: Mapping[str, str]) -> list[FieldError]:
    """Kueue's labels on any job (``ValidateJobOnCreate``): a valid queue name, no prebuilt
    Workload (kueueweb always builds it), a positive max-exec-time."""
    errors: list[FieldError] = []
    queue_name = labels.get(QUEUE_NAME_LABEL)
    if queue_name is not None:
        message = dns1123_subdomain_error(queue_name)
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



def validate_queue_name(queue_name: Any) -> list[FieldError]:
    """``spec.queueName``: empty, or a LocalQueue name (DNS subdomain)."""
    if not isinstance(queue_name, str):
        return [FieldError("spec.queueName", "must be a string")]
    if not queue_name:
        return []
    message = dns1123_subdomain_error(queue_name)
    return [] if message is None else [FieldError("spec.queueName", message)]


def validate_object_name(name: Any, namespace: Any) -> list[FieldError]:
    """``metadata.name`` (DNS subdomain) and ``metadata.namespace`` (DNS label)."""
    errors: list[FieldError] = []
    for path, value, check in (("metadata.name", name, dns1123_subdomain_error),
                               ("metadata.namespace", namespace, dns1123_label_error)):
        if not isinstance(value, str) or not value:
            errors.append(FieldError(path, "is required"))
            continue
        message = check(value)
        if message is not None:
            errors.append(FieldError(path, message))
    return errors


def validate_object(
    manifest: Mapping[str, Any], *, api_version: str, kind: str, namespace: str,
    max_name_length: int = 253,
) -> tuple[list[FieldError], dict[str, str], dict[str, str]]:
    """The rules every kind's object follows: its apiVersion and kind, its name and
    namespace, valid labels and annotations. Returns the errors, the labels and the
    annotations (string values only) for the kind's own rules."""
    errors: list[FieldError] = []
    if manifest.get("apiVersion") != api_version:
        errors.append(FieldError("apiVersion", f"must be \"{api_version}\", not "
                                 f"{manifest.get('apiVersion')!r}"))
    if manifest.get("kind") != kind:
        errors.append(FieldError("kind", f"must be \"{kind}\", not {manifest.get('kind')!r}"))
    metadata = object_map(manifest.get("metadata"), "metadata", errors)
    labels = string_map(metadata.get("labels"), "metadata.labels", errors)
    annotations = string_map(metadata.get("annotations"), "metadata.annotations", errors)
    errors.extend(validate_object_metadata(metadata, namespace=namespace, kind=kind,
                                           max_name_length=max_name_length))
    errors.extend(validate_labels(labels))
    errors.extend(validate_annotations(annotations))
    return errors, labels, annotations
