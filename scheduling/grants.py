"""What a namespace grant lets a non-admin submit: pod templates that meet the grant's Pod
Security Standards level and run as an allowed service account, and a priority that comes
from an allowed priority class (or is 0).

Jobs (API and UI) and Workloads (API) pass through these checks in ``scheduling.services``;
a ``grant`` of None (an admin, or kueueweb itself) is not bound. Kubernetes' system
namespaces are refused to everyone: kueueweb never creates pods there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kueueweb.models import NamespaceGrant
from scheduling import jobframework
from scheduling.core import pod_security
from scheduling.validation import FieldError


def namespace_errors(namespace: str, path: str = "metadata.namespace") -> list[FieldError]:
    if namespace in pod_security.SYSTEM_NAMESPACES:
        return [FieldError(path, f"{namespace!r} is a Kubernetes system namespace: kueueweb "
                                 "does not submit workloads to it")]
    return []


def pod_template_errors(
    grant: NamespaceGrant | None, templates: Iterable[tuple[Any, str]]
) -> list[FieldError]:
    """The Pod Security Standards and service account checks, for each (template, path)."""
    if grant is None:
        return []
    errors: list[FieldError] = []
    for template, path in templates:
        if not isinstance(template, Mapping):
            continue
        found = pod_security.check_pod_template(template, level=grant.pod_security_level,
                                                path=path)
        found += pod_security.check_service_account(template, allowed=grant.service_accounts,
                                                    path=path)
        # A Pod is its own template, at the path "": its fields start at ``spec``.
        errors.extend(FieldError(v.path.removeprefix("."), v.message) for v in found)
    return errors


def workload_templates(spec: Any, prefix: str = "") -> list[tuple[Any, str]]:
    """The pod templates of a Workload spec's pod sets, with their paths."""
    pod_sets = spec.get("podSets") if isinstance(spec, Mapping) else None
    if not isinstance(pod_sets, list):
        return []
    return [(pod_set.get("template"), f"{prefix}spec.podSets[{index}].template")
            for index, pod_set in enumerate(pod_sets)
            if isinstance(pod_set, Mapping) and pod_set.get("template") is not None]


def priority_errors(
    grant: NamespaceGrant | None,
    request: jobframework.PriorityRequest,
    *,
    class_path: str,
    explicit_path: str,
) -> list[FieldError]:
    """A bound user's priority comes from an allowed priority class, or is 0.

    The grant's allowed classes bound what a job's ``kueue.x-k8s.io/priority-class`` label
    and its pod templates' ``priorityClassName`` name, since either gives the Workload the
    class's value. A Workload created directly keeps the value it gives with a pod
    PriorityClass, so a bound user may not give one (only 0, or none).
    """
    if grant is None:
        return []
    errors: list[FieldError] = []
    from_class = request.source == jobframework.WORKLOAD_PRIORITY_CLASS_SOURCE
    from_pods = request.source == jobframework.POD_PRIORITY_CLASS_SOURCE and request.priority is None
    if (from_class or from_pods) and not grant.allows_priority_class(request.class_name):
        allowed = ", ".join(sorted(grant.priority_classes)) or "none"
        kind = "WorkloadPriorityClass" if from_class else "PriorityClass"
        errors.append(FieldError(class_path, f"{kind} {request.class_name!r} "
                                 f"may not be used in namespace {grant.namespace!r} (allowed: "
                                 f"{allowed})"))
    if not from_class and request.priority not in (None, 0):
        errors.append(FieldError(explicit_path, "only an admin may set a priority: name a "
                                 "WorkloadPriorityClass instead, or leave it out (0)"))
    return errors

