"""A workload's requests as Kueue counts them against the cluster's LimitRanges and
RuntimeClasses (``pkg/workload/resources.go``, ``pkg/util/limitrange``).

Kueue adjusts a copy of each pod template when it builds a workload's info, never the stored
Workload, so a LimitRange or RuntimeClass that changes later changes what a pending workload
asks for:

1. a pod naming a ``runtimeClassName`` and no ``overhead`` is charged the class's
   ``overhead.podFixed``;
2. a namespace's LimitRanges (summed up: the lowest max, the highest min, the first
   default) fill the requests and limits a container leaves out (``defaultRequest`` and
   ``default``; the Pod type's for pod-level resources);
3. limits stand in for missing requests.

Before admission the adjusted pod is checked: requests within its limits, and within the
LimitRange bounds; a failure makes the workload inadmissible with Kueue's message.

Pure functions over Kubernetes-shaped dicts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from scheduling.jobframework.podsets import pod_requests, resource_quantities

CONTAINER = "Container"
POD = "Pod"
# Kueue's messages (pkg/workload/resources.go, pkg/util/limitrange).
REQUESTS_MUST_NOT_EXCEED_LIMIT = "requests must not exceed its limits"
ABOVE_LIMIT_RANGE_MAX = "requests must not be above the limitRange max"
BELOW_LIMIT_RANGE_MIN = "requests must not be below the limitRange min"
INVALID_RESOURCES = "resources validation failed"
LIMIT_RANGE_UNSATISFIED = "resources didn't satisfy LimitRange constraints"

ResourceList = dict[str, Fraction]


def _keep_min(a: ResourceList, b: ResourceList) -> ResourceList:
    return {**b, **a, **{k: min(a[k], b[k]) for k in a.keys() & b.keys()}}


def _keep_max(a: ResourceList, b: ResourceList) -> ResourceList:
    return {**b, **a, **{k: max(a[k], b[k]) for k in a.keys() & b.keys()}}


@dataclass(frozen=True)
class LimitItem:
    """One type's limits, summed up over a namespace's LimitRanges (quantities as text for
    the defaults, which are copied into containers; as numbers for the bounds)."""

    max: ResourceList = field(default_factory=dict)
    min: ResourceList = field(default_factory=dict)
    default: dict[str, str] = field(default_factory=dict)
    default_request: dict[str, str] = field(default_factory=dict)
    max_limit_request_ratio: ResourceList = field(default_factory=dict)


Summary = dict[str, LimitItem]


def summarize(limit_lists: Iterable[Iterable[Mapping[str, Any]]]) -> Summary:
    """Kueue's ``limitrange.Summarize`` over the ``spec.limits`` of a namespace's
    LimitRanges, in order: per type the lowest ``max`` and ``maxLimitRequestRatio``, the
    highest ``min``, and the first ``default`` and ``defaultRequest`` of each resource."""
    summary: Summary = {}
    for limits in limit_lists:
        for item in limits:
            kind = str(item.get("type", ""))
            current = summary.get(kind, LimitItem())
            summary[kind] = LimitItem(
                max=_keep_min(current.max, resource_quantities(item.get("max"))),
                min=_keep_max(current.min, resource_quantities(item.get("min"))),
                default={**dict(item.get("default") or {}), **current.default},
                default_request={**dict(item.get("defaultRequest") or {}),
                                 **current.default_request},
                max_limit_request_ratio=_keep_min(current.max_limit_request_ratio,
                                                  resource_quantities(item.get("maxLimitRequestRatio"))),
            )
    return summary


def _fill(resources: dict[str, Any], key: str, defaults: Mapping[str, str]) -> None:
    if not defaults:
        return
    resources[key] = {**defaults, **(resources.get(key) or {})}


def adjust_pod_spec(pod_spec: Mapping[str, Any], *, summary: Summary,
                    overheads: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """A copy of ``pod_spec`` adjusted as Kueue's ``AdjustResources`` does. ``overheads``
    maps each RuntimeClass of the cluster to its ``overhead.podFixed``; a class that does not
    exist adds nothing (Kubernetes' admission refuses the pod later)."""
    spec = copy.deepcopy(dict(pod_spec))
    runtime_class = spec.get("runtimeClassName")
    if runtime_class and not spec.get("overhead") and overheads.get(runtime_class):
        spec["overhead"] = dict(overheads[runtime_class])
    container_limits = summary.get(CONTAINER)
    pod_limits = summary.get(POD)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            if not isinstance(container, dict):
                continue
            resources = container.setdefault("resources", {})
            if container_limits is not None:
                _fill(resources, "limits", container_limits.default)
                _fill(resources, "requests", container_limits.default_request)
            _fill(resources, "requests", resources.get("limits") or {})
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, dict):
        if pod_limits is not None:
            _fill(pod_resources, "limits", pod_limits.default)
            _fill(pod_resources, "requests", pod_limits.default_request)
        _fill(pod_resources, "requests", pod_resources.get("limits") or {})
    return spec


def adjust_pod_sets(pod_sets: Iterable[Mapping[str, Any]], *, summary: Summary,
                    overheads: Mapping[str, Mapping[str, str]]) -> list[dict[str, Any]]:
    """The pod sets with each template's spec adjusted (``adjust_pod_spec``); a pod set
    without a template (per-pod ``requests``) is left as it is."""
    result = []
    for pod_set in pod_sets:
        template = pod_set.get("template")
        if isinstance(template, Mapping) and isinstance(template.get("spec"), Mapping):
            template = {**template, "spec": adjust_pod_spec(template["spec"], summary=summary,
                                                            overheads=overheads)}
            result.append({**pod_set, "template": template})
        else:
            result.append(dict(pod_set))
    return result


def _greater_keys(values: ResourceList, bounds: ResourceList) -> list[str]:
    """Kueue's ``GreaterKeys``: the resources of both where ``values`` is greater, sorted."""
    return sorted(name for name, value in values.items()
                  if name in bounds and value > bounds[name])


def _invalid(path: str, names: list[str], detail: str) -> str:
    """A Kubernetes ``field.Invalid`` error as Go prints it."""
    return f"{path}: Invalid value: {json.dumps(names, separators=(',', ':'))}: {detail}"


def _containers(spec: Mapping[str, Any], key: str) -> list[tuple[int, Mapping[str, Any]]]:
    items = spec.get(key)
    return [(i, c.get("resources") or {}) for i, c in enumerate(items or ())
            if isinstance(c, Mapping)]


def _request_limit_errors(spec: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    for key in ("initContainers", "containers"):
        for i, resources in _containers(spec, key):
            names = _greater_keys(resource_quantities(resources.get("requests")),
                                  resource_quantities(resources.get("limits")))
            if names:
                errors.append(_invalid(f"{path}.{key}[{i}]", names, REQUESTS_MUST_NOT_EXCEED_LIMIT))
    pod_resources = spec.get("resources")
    if isinstance(pod_resources, Mapping):
        names = _greater_keys(resource_quantities(pod_resources.get("requests")),
                              resource_quantities(pod_resources.get("limits")))
        if names:
            errors.append(_invalid(f"{path}.resources", names, REQUESTS_MUST_NOT_EXCEED_LIMIT))
    return errors


def _limit_range_errors(summary: Summary, spec: Mapping[str, Any], path: str) -> list[str]:
    errors = []
    container_range = summary.get(CONTAINER)
    if container_range is not None:
        for key in ("initContainers", "containers"):
            for i, resources in _containers(spec, key):
                requests = resource_quantities(resources.get("requests"))
                limits = resource_quantities(resources.get("limits"))
                names = _greater_keys(_keep_max(requests, limits), container_range.max)
                if names:
                    errors.append(_invalid(f"{path}.{key}[{i}]", names, ABOVE_LIMIT_RANGE_MAX))
                names = _greater_keys(container_range.min, _keep_min(requests, limits))
                if names:
                    errors.append(_invalid(f"{path}.{key}[{i}]", names, BELOW_LIMIT_RANGE_MIN))
    pod_range = summary.get(POD)
    if pod_range is not None:
        total = pod_requests(spec)
        names = _greater_keys(total, pod_range.max)
        if names:
            errors.append(_invalid(path, names, ABOVE_LIMIT_RANGE_MAX))
        names = _greater_keys(pod_range.min, total)
        if names:
            errors.append(_invalid(path, names, BELOW_LIMIT_RANGE_MIN))
    return errors


def _aggregate(errors: list[str]) -> str:
    """Go's ``ErrorList.ToAggregate().Error()``: one error as is, several in brackets."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


def admissibility_error(pod_sets: Iterable[Mapping[str, Any]], summary: Summary) -> str | None:
    """Why adjusted ``pod_sets`` cannot be admitted, in Kueue's words
    (``ValidateResources`` then ``ValidateLimitRange``), or None."""
    templates = [(i, (ps.get("template") or {}).get("spec")) for i, ps in enumerate(pod_sets)]
    specs = [(f"spec.podSets[{i}].template.spec", spec) for i, spec in templates
             if isinstance(spec, Mapping)]
    errors = [e for path, spec in specs for e in _request_limit_errors(spec, path)]
    if errors:
        return f"{INVALID_RESOURCES}: {_aggregate(errors)}"
    if not summary:
        return None
    errors = [e for path, spec in specs for e in _limit_range_errors(summary, spec, path)]
    if errors:
        return f"{LIMIT_RANGE_UNSATISFIED}: {_aggregate(errors)}"
    return None
