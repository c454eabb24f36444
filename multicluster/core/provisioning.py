"""The ProvisioningRequest admission check, pure (Kueue
``pkg/controller/admissionchecks/provisioning``).

How a request is named and matched to its attempt, which pod sets it covers, what the check's
state becomes from the request's conditions, and the pod-set updates a provisioned request
gives. Requests are Kubernetes ``autoscaling.x-k8s.io/v1`` ProvisioningRequest objects as
dicts, whichever cluster holds them; nothing here reads a clock or a database.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ACCEPTED",
    "API_VERSION",
    "BOOKING_EXPIRED",
    "CAPACITY_REVOKED",
    "CHECK_INACTIVE_MESSAGE",
    "CLASS_ANNOTATION",
    "CONFIG_API_GROUP",
    "CONFIG_KIND",
    "CONSUME_ANNOTATION",
    "CONTROLLER_NAME",
    "FAILED",
    "MANAGED_LABEL",
    "MERGE_POLICIES",
    "NO_REQUEST_NEEDED",
    "PROVISIONED",
    "PROV_REQ_ANNOTATION_PREFIX",
    "Config",
    "MergedPodSet",
    "active_condition",
    "active_or_last",
    "attempt_of",
    "condition",
    "limit_object_name",
    "merge_pod_sets",
    "next_attempt",
    "parameters_problem",
    "pod_set_updates",
    "pod_template_name",
    "request_is_needed",
    "request_name",
    "request_parameters",
    "requeue_after_seconds",
    "sync_check_state",
    "synced_with_config",
    "use_limits_as_missing_requests",
]

CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
CONFIG_API_GROUP = "kueue.x-k8s.io"
CONFIG_KIND = "ProvisioningRequestConfig"
API_VERSION = "autoscaling.x-k8s.io/v1"
CHECK_INACTIVE_MESSAGE = "the check is not active"
NO_REQUEST_NEEDED = "the provisioning request is not needed"
# Pods that may use the capacity a request booked carry these (cluster-autoscaler's
# ProvisioningRequestPodAnnotationKey and ProvisioningClassPodAnnotationKey).
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
# Workload annotations with this prefix become request parameters.
PROV_REQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
MANAGED_LABEL = ("kueue.x-k8s.io/managed", "true")
MERGE_POLICIES = ("IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements")
# The request's conditions (cluster-autoscaler's autoscaling.x-k8s.io/v1).
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"

_NAME_HASH_LENGTH = 5
# 253, a name's maximum, less the "-" and the hash.
_NAME_MAX_PREFIX = 252 - _NAME_HASH_LENGTH
_TEMPLATE_PREFIX = "ppt"


@dataclass(frozen=True)
class Config:
    """A ProvisioningRequestConfig's spec, defaults applied."""

    name: str
    provisioning_class_name: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    managed_resources: tuple[str, ...] = ()
    backoff_limit_count: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800
    # podSetUpdates.nodeSelector: (key, valueFromProvisioningClassDetail)
    node_selector_updates: tuple[tuple[str, str], ...] = ()
    pod_set_merge_policy: str = ""


# --- names ---------------------------------------------------------------------------------


def limit_object_name(full_name: str) -> str:
    """``full_name`` cut to fit an object name, with a short hash of the whole so that
    different long names stay different."""
    if len(full_name) <= _NAME_MAX_PREFIX:
        return full_name
    digest = hashlib.sha1(full_name.encode(), usedforsecurity=False).hexdigest()
    return f"{full_name[:_NAME_MAX_PREFIX]}-{digest[:_NAME_HASH_LENGTH]}"


def request_name(workload: str, check: str, attempt: int) -> str:
    return limit_object_name(f"{workload}-{check}-{attempt}")


def pod_template_name(request: str, pod_set: str) -> str:
    return limit_object_name(f"{_TEMPLATE_PREFIX}-{request}-{pod_set}")


def attempt_of(name: str, workload: str, check: str) -> int | None:
    """The attempt a request of ``workload`` for ``check`` is, from its name; None for a
    request of another workload or check."""
    prefix = limit_object_name(f"{workload}-{check}-")
    match = re.fullmatch(re.escape(prefix) + r"([0-9]+)", name)
    return int(match.group(1)) if match else None


# --- the check's parameters ----------------------------------------------------------------


def parameters_problem(parameters: Mapping[str, Any] | None) -> str | None:
    """Why an AdmissionCheck's ``spec.parameters`` does not name a ProvisioningRequestConfig
    (the text of Kueue's errors), or None."""
    if not parameters:
        return "missing parameters reference"
    if not parameters.get("name"):
        return "empty name: bad parameters reference"
    group, kind = parameters.get("apiGroup", ""), parameters.get("kind", "")
    if group != CONFIG_API_GROUP:
        return f'wrong group "{group}", expecting "{CONFIG_API_GROUP}": bad parameters reference'
    if kind != CONFIG_KIND:
        return f'wrong kind "{kind}", expecting "{CONFIG_KIND}": bad parameters reference'
    return None


def active_condition(parameters: Mapping[str, Any] | None,
                     configs: frozenset[str]) -> tuple[str, str, str]:
    """The ``Active`` condition (status, reason, message) of a ProvisioningRequest check:
    active when its parameters name a config that exists."""
    problem = parameters_problem(parameters)
    if problem is None and str((parameters or {}).get("name")) not in configs:
        name = (parameters or {}).get("name")
        problem = f'provisioningrequestconfigs.{CONFIG_API_GROUP} "{name}" not found'
    if problem is not None:
        return "False", "BadParametersRef", problem
    return "True", "Active", "The admission check is active"


# --- pod sets -------------------------------------------------------------------------------


def _containers(template: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = template.get("spec") or {}
    return [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]


def _uses(template: Mapping[str, Any], resources: frozenset[str]) -> bool:
    for container in _containers(template):
        needs = container.get("resources") or {}
        if resources.intersection((needs.get("requests") or {}).keys()) or \
                resources.intersection((needs.get("limits") or {}).keys()):
            return True
    return False


def _covered(pod_set: Mapping[str, Any], managed: Sequence[str]) -> bool:
    return int(pod_set.get("count", 0)) > 0 and (
        not managed or _uses(pod_set.get("template") or {}, frozenset(managed)))


def _assigned_count(assignment: Mapping[str, Any], pod_set: Mapping[str, Any]) -> int:
    count = assignment.get("count")
    return int(count if count is not None else pod_set.get("count", 0))


def request_is_needed(pod_sets: Sequence[Mapping[str, Any]],
                      assignments: Sequence[Mapping[str, Any]],
                      managed: Sequence[str]) -> bool:
    """A request is needed when an admitted pod set asks for a managed resource (any
    resource when none is listed); otherwise the check is Ready at once."""
    by_name = {str(a.get("name", "main")): a for a in assignments}
    for pod_set in pod_sets:
        assignment = by_name.get(str(pod_set.get("name", "main")))
        if assignment is not None and _covered(pod_set, managed) \
                and _assigned_count(assignment, pod_set) > 0:
            return True
    return False


@dataclass(frozen=True)
class MergedPodSet:
    """One ``podSets[]`` entry of a request: a pod set (and those merged into it)."""

    name: str
    pod_set: Mapping[str, Any]
    assignment: Mapping[str, Any]
    count: int


def _scheduling_requirements(template: Mapping[str, Any]) -> tuple[Any, ...]:
    spec = template.get("spec") or {}

    def requests(containers: Any) -> list[Any]:
        return [((c.get("resources") or {}).get("requests") or {}) for c in containers or ()]

    return (requests(spec.get("containers")), requests(spec.get("initContainers")),
            spec.get("resources"), spec.get("nodeSelector") or {},
            spec.get("tolerations") or [], spec.get("affinity"), spec.get("resourceClaims"))


def _can_merge(a: Mapping[str, Any], b: Mapping[str, Any], policy: str) -> bool:
    if policy == "IdenticalPodTemplates":
        return (a.get("template") or {}) == (b.get("template") or {})
    if policy == "IdenticalWorkloadSchedulingRequirements":
        return (_scheduling_requirements(a.get("template") or {})
                == _scheduling_requirements(b.get("template") or {}))
    return False


def merge_pod_sets(pod_sets: Sequence[Mapping[str, Any]],
                   assignments: Sequence[Mapping[str, Any]], managed: Sequence[str],
                   policy: str = "") -> list[MergedPodSet]:
    """The request's pod sets: the covered ones with a positive admitted count, those the
    ``podSetMergePolicy`` finds alike counted together under the first one's name."""
    by_name = {str(a.get("name", "main")): a for a in assignments}
    merged: list[MergedPodSet] = []
    for pod_set in pod_sets:
        if not _covered(pod_set, managed):
            continue
        name = str(pod_set.get("name", "main"))
        assignment = by_name.get(name)
        if assignment is None:
            raise ValueError("inconsistent podSet assignments")
        count = _assigned_count(assignment, pod_set)
        if count <= 0:
            continue
        for index, existing in enumerate(merged):
            if policy and _can_merge(existing.pod_set, pod_set, policy):
                merged[index] = MergedPodSet(existing.name, existing.pod_set,
                                             existing.assignment, existing.count + count)
                break
        else:
            merged.append(MergedPodSet(name, pod_set, assignment, count))
    return merged


def use_limits_as_missing_requests(template: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template whose containers request what they limit where they request nothing
    (Kubernetes' defaulting, which the autoscaler does not apply to a PodTemplate)."""
    result = copy.deepcopy(dict(template))
    spec = result.get("spec") or {}
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or ():
            resources = container.get("resources") or {}
            limits = resources.get("limits") or {}
            if not limits:
                continue
            requests = dict(resources.get("requests") or {})
            for resource, quantity in limits.items():
                requests.setdefault(resource, quantity)
            container["resources"] = {**resources, "requests": requests}
    return result


def request_parameters(config: Config, annotations: Mapping[str, str]) -> dict[str, str]:
    """The request's parameters: the config's, and the workload's ``provreq.kueue.x-k8s.io/``
    annotations without their prefix."""
    parameters = dict(config.parameters)
    for key, value in annotations.items():
        if key.startswith(PROV_REQ_ANNOTATION_PREFIX):
            parameters[key[len(PROV_REQ_ANNOTATION_PREFIX):]] = str(value)
    return parameters


# --- requests ------------------------------------------------------------------------------


def condition(request: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The request's condition ``type_`` when it is True."""
    for entry in (request.get("status") or {}).get("conditions") or ():
        if entry.get("type") == type_ and entry.get("status") == "True":
            return dict(entry)
    return None


def _any_condition(request: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for entry in (request.get("status") or {}).get("conditions") or ():
        if entry.get("type") == type_:
            return dict(entry)
    return None


def _name(request: Mapping[str, Any]) -> str:
    return str((request.get("metadata") or {}).get("name", ""))


def synced_with_config(request: Mapping[str, Any], config: Config) -> bool:
    """The request has the config's class and every one of its parameters."""
    spec = request.get("spec") or {}
    if spec.get("provisioningClassName") != config.provisioning_class_name:
        return False
    parameters = spec.get("parameters") or {}
    return all(parameters.get(k) == v for k, v in config.parameters.items())


def active_or_last(requests: Sequence[Mapping[str, Any]], workload: str, check: str,
                   config: Config, *, needed: bool) -> Mapping[str, Any] | None:
    """The request that stands for ``check`` now: the latest attempt still in line with
    the config; every other request of the workload is stale."""
    if not needed:
        return None
    best: tuple[int, Mapping[str, Any]] | None = None
    for request in requests:
        attempt = attempt_of(_name(request), workload, check)
        if attempt is None or not synced_with_config(request, config):
            continue
        if best is None or attempt > best[0]:
            best = (attempt, request)
    return best[1] if best else None


def requeue_after_seconds(retry_count: int, *, base: int, cap: int) -> int:
    """The wait before a retried check's workload is queued again: ``base·2^n`` for its
    ``n``-th retry (``n`` from 0), at most ``cap``, in whole seconds."""
    if retry_count <= 0:
        return int(base)
    return int(min(base * 2 ** retry_count, cap))


def _retry(state: dict[str, Any], attempt: int, config: Config, message: str,
           reason_message: str) -> None:
    """A failed attempt within the limit: Retry once per attempt, else Rejected."""
    if attempt <= config.backoff_limit_count:
        state["message"] = message
        if attempt > int(state.get("retryCount") or 0):
            state["state"] = "Retry"
            state["requeueAfterSeconds"] = requeue_after_seconds(
                int(state.get("retryCount") or 0), base=config.backoff_base_seconds,
                cap=config.backoff_max_seconds)
    else:
        state["state"] = "Rejected"
        state["message"] = reason_message


def sync_check_state(state: Mapping[str, Any], config: Config | None,
                     request: Mapping[str, Any] | None, *, workload: str,
                     pod_sets: Sequence[Mapping[str, Any]], needed: bool, admitted: bool,
                     active: bool, finished: bool) -> dict[str, Any]:
    """The check's state (``status.admissionChecks[]`` entry) as the request leaves it.
    The caller sets ``lastTransitionTime`` when the state changed."""
    new = dict(state)
    if config is None:
        new.update(state="Pending", message=CHECK_INACTIVE_MESSAGE)
        return new
    if not needed:
        if new.get("state") != "Ready":
            new.update(state="Ready", message=NO_REQUEST_NEEDED)
            new.pop("podSetUpdates", None)
        return new
    if request is None:
        return new
    attempt = attempt_of(_name(request), workload, str(state.get("name"))) or 1
    failed = condition(request, FAILED)
    revoked = condition(request, CAPACITY_REVOKED)
    expired = condition(request, BOOKING_EXPIRED)
    provisioned = condition(request, PROVISIONED)
    if failed is not None:
        message = str(failed.get("message", ""))
        _retry(new, attempt, config, f"Retrying after failure: {message}", message)
    elif revoked is not None:
        if active and not finished:
            # The nodes are gone: deactivate rather than leave replacement pods pending.
            new.update(state="Rejected", message=str(revoked.get("message", "")))
    elif expired is not None:
        if not admitted:
            message = str(expired.get("message", ""))
            _retry(new, attempt, config, f"Retrying after booking expired: {message}",
                   message)
    elif provisioned is not None:
        if new.get("state") != "Ready":
            new.update(state="Ready", message=str(provisioned.get("message", "")),
                       podSetUpdates=pod_set_updates(pod_sets, request, config))
    elif condition(request, ACCEPTED) is not None:
        pending = _any_condition(request, PROVISIONED)
        if pending is not None:
            # The autoscaler's estimate of when the capacity comes.
            new.update(state="Pending", message=str(pending.get("message", "")))
    else:
        new.update(state="Pending", message="")
    return new


def next_attempt(state: Mapping[str, Any] | None, request: Mapping[str, Any] | None, *,
                 workload: str, check: str, admitted: bool) -> int | None:
    """The attempt to create a request for now, or None: the first (or the one after the
    retries counted), or the next after a failed or expired one while the check is
    Pending again."""
    if state is not None and state.get("state") == "Ready":
        return None
    if request is None:
        return int((state or {}).get("retryCount") or 0) + 1
    retry = condition(request, FAILED) is not None or (
        condition(request, BOOKING_EXPIRED) is not None and not admitted)
    if retry and state is not None and state.get("state") == "Pending":
        return (attempt_of(_name(request), workload, check) or 1) + 1
    return None


def pod_set_updates(pod_sets: Sequence[Mapping[str, Any]], request: Mapping[str, Any],
                    config: Config) -> list[dict[str, Any]]:
    """What a provisioned request puts on the pods of each pod set it covers: the two
    annotations that let them consume the booked capacity, and the node selector the
    config takes from the request's ``provisioningClassDetails``."""
    name = _name(request)
    spec = request.get("spec") or {}
    by_template = {pod_template_name(name, str(ps.get("name", "main"))): str(ps.get("name", "main"))
                   for ps in pod_sets}
    details = (request.get("status") or {}).get("provisioningClassDetails") or {}
    updates = []
    for entry in spec.get("podSets") or ():
        template = str((entry.get("podTemplateRef") or {}).get("name", ""))
        update: dict[str, Any] = {
            "name": by_template.get(template, ""),
            "annotations": {CONSUME_ANNOTATION: name,
                            CLASS_ANNOTATION: str(spec.get("provisioningClassName", ""))},
        }
        if config.node_selector_updates:
            update["nodeSelector"] = {key: str(details[detail])
                                      for key, detail in config.node_selector_updates
                                      if detail in details}
        updates.append(update)
    return updates
