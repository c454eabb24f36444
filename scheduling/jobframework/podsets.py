"""Pod sets: what one pod of a pod set asks for, and the admission's per-pod-set info a job
kind merges into its pod templates when it starts and takes out when it stops (Kueue's
``pkg/workload/resources.go`` and ``pkg/podset``).

Pure functions over Kueue-shaped dicts.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduling.core.quantities import QuantityError, format_quantity, parse_quantity
from scheduling.jobframework.constants import DEFAULT_POD_SET_NAME, PODSET_LABEL

_POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})


def resource_quantities(value: Any) -> dict[str, Fraction]:
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
    return {**resource_quantities(resources.get("limits")),
            **resource_quantities(resources.get("requests"))}


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
        pod_level = {**resource_quantities(pod_resources.get("limits")),
                     **resource_quantities(pod_resources.get("requests"))}
        for name, value in pod_level.items():
            if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
                total[name] = value
    _add(total, resource_quantities(pod_spec.get("overhead")))
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
        requests = resource_quantities(pod_set.get("requests"))
    return {name: format_request(name, requests[name]) for name in sorted(requests)}


def pod_set_total_requests(pod_set: Mapping[str, Any]) -> dict[str, str]:
    """Requests of all ``count`` pods of ``pod_set`` (Kueue ``status.resourceRequests``)."""
    count = pod_set.get("count", 1)
    count = count if isinstance(count, int) else 1
    return {
        name: format_request(name, parse_quantity(quantity) * count)
        for name, quantity in pod_set_requests(pod_set).items()
    }


# --- PodSetInfo ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSetInfo:
    """What the admission puts on the pods of one pod set (Kueue's ``podset.PodSetInfo``):
    the admitted count, the assigned flavors' node labels and tolerations, and the
    ``kueue.x-k8s.io/podset`` label."""

    name: str
    count: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


def pod_set_infos(
    admission: Mapping[str, Any],
    flavors: Mapping[str, tuple[Mapping[str, str], Sequence[Mapping[str, Any]]]],
    *,
    counts: Mapping[str, int] | None = None,
) -> list[PodSetInfo]:
    """One PodSetInfo per pod-set assignment (Kueue's ``FromAssignment``).

    ``flavors`` maps a flavor name to its node labels and tolerations; ``counts`` caps an
    assignment's count (an elastic slice's pod set count, lowered in place by a scale-down).
    """
    infos = []
    for assignment in admission.get("podSetAssignments", ()):
        name = str(assignment.get("name", DEFAULT_POD_SET_NAME))
        count = int(assignment.get("count", 0))
        if counts is not None:
            count = min(count, counts.get(name, count))
        node_selector: dict[str, str] = {}
        tolerations: list[dict[str, Any]] = []
        for flavor in sorted(set((assignment.get("flavors") or {}).values())):
            labels, flavor_tolerations = flavors.get(flavor, ({}, ()))
            node_selector.update(labels)
            tolerations.extend(dict(t) for t in flavor_tolerations if dict(t) not in tolerations)
        infos.append(PodSetInfo(name=name, count=count, node_selector=node_selector,
                                tolerations=tolerations, labels={PODSET_LABEL: name}))
    return infos


def merge_into_template(template: Mapping[str, Any], info: PodSetInfo) -> dict[str, Any]:
    """A pod template with ``info`` merged in (Kueue's ``podset.Merge``): node selector and
    labels added, tolerations appended without duplicates."""
    result = copy.deepcopy(dict(template))
    metadata = result.setdefault("metadata", {})
    if info.labels:
        metadata["labels"] = {**(metadata.get("labels") or {}), **info.labels}
    if info.annotations:
        metadata["annotations"] = {**(metadata.get("annotations") or {}), **info.annotations}
    pod_spec = result.setdefault("spec", {})
    selector = {**(pod_spec.get("nodeSelector") or {}), **info.node_selector}
    if selector:
        pod_spec["nodeSelector"] = selector
    tolerations = list(pod_spec.get("tolerations") or [])
    tolerations.extend(t for t in info.tolerations if t not in tolerations)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return result


def restore_template(
    template: Mapping[str, Any], original: Mapping[str, Any]
) -> dict[str, Any]:
    """A pod template with labels, annotations, node selector, tolerations and scheduling
    gates put back as ``original`` (the Workload's pod set template) has them
    (Kueue's ``podset.RestorePodSpec``)."""
    result = copy.deepcopy(dict(template))
    original_meta = original.get("metadata") or {}
    metadata = result.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        if original_meta.get(key):
            metadata[key] = copy.deepcopy(original_meta[key])
        else:
            metadata.pop(key, None)
    if not metadata and "metadata" not in original:
        del result["metadata"]
    original_spec = original.get("spec") or {}
    pod_spec = result.setdefault("spec", {})
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        if original_spec.get(key):
            pod_spec[key] = copy.deepcopy(original_spec[key])
        else:
            pod_spec.pop(key, None)
    return result


# --- Kinds with a pod template per pod set ---------------------------------------------------


def merge_into_templates(templates: Sequence[dict[str, Any]],
                         infos: Sequence[PodSetInfo]) -> None:
    """Each pod set's info merged into its pod template, in place and by index, as Kueue
    does for a kind with several pod sets."""
    for template, info in zip(templates, infos, strict=False):
        merged = merge_into_template(template, info)
        template.clear()
        template.update(merged)


def restore_templates(templates: Sequence[dict[str, Any]],
                      pod_sets: Sequence[Mapping[str, Any]]) -> bool:
    """Each pod template restored, in place, as its pod set recorded it; False, with nothing
    changed, when the pod sets are not as many as the templates (Kueue skips the restore)."""
    if len(pod_sets) != len(templates):
        return False
    for template, pod_set in zip(templates, pod_sets, strict=True):
        restored = restore_template(template, pod_set.get("template") or {})
        template.clear()
        template.update(restored)
    return True


def label_pod_templates(templates: Sequence[dict[str, Any]], pod_set_names: Sequence[str], *,
                        pod_labels: Mapping[str, str], gang_workload: str | None) -> None:
    """The remote copy's pod templates, in place: ``pod_labels`` on each and, with a
    ``gang_workload``, each template's pods in its pod set's pod group of that Workload."""
    for template, name in zip(templates, pod_set_names, strict=True):
        template_meta = template.setdefault("metadata", {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **pod_labels}
        if gang_workload:
            template.setdefault("spec", {})["workloadRef"] = {"name": gang_workload,
                                                             "podGroup": name}


def templates_priority_class(
    templates: Iterable[tuple[Any, str]],
) -> tuple[str, str] | None:
    """The first of ``(template, path)`` whose spec names a ``priorityClassName``, with that
    field's path: the pod PriorityClass of a kind with several pod templates."""
    for template, path in templates:
        name = ((template or {}).get("spec") or {}).get("priorityClassName")
        if isinstance(name, str) and name:
            return name, f"{path}.spec.priorityClassName"
    return None
