"""apps/v1 Deployment: Kueue's deployment integration (``pkg/controller/jobs/deployment``) and
the part of Kubernetes' Deployment and ReplicaSet controllers that keeps its Pods.

Kueue queues no Deployment: it queues the Deployment's Pods one by one, through the pod
integration, which the ``deployment`` framework enables implicitly for those pods only. So
the kind is a ``JobKind`` (stored, validated, its queue checked at submission), and:

* its webhook (``default``, on create and update) marks the pod template: the annotation
  ``kueue.x-k8s.io/pod-suspending-parent: deployment``, the managed label, and the
  Deployment's queue and priority-class labels;
* its validation is Kubernetes' for the fields kueueweb reads and Kueue's: a valid queue
  name, no elastic annotation, and on update a queue label that may not change (nor go)
  while a replica is ready, and the priority-class rules of a running workload;
* its controller's decisions are pure here (``pod_for``, ``plan``) and applied by the
  reconciler ``scheduling.deployments``, which submits each Pod as any Pod is submitted:
  each gets its own Workload (``pod-<pod>-<h5>``, main: 1) and waits for quota on its own.
  A changed template rolls out as the RollingUpdate or Recreate strategy says, with the
  Pods of a template told apart by their ``pod-template-hash`` label.

Pods whose Kueue deleted them (an evicted workload: the pod ends Failed with
``TerminationTarget``) are gone for the ReplicaSet, which creates replacements.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.core.names import label_value_error, qualified_name_error
from scheduling.jobframework.constants import (
    ELASTIC_JOB_ANNOTATION,
    MAX_INT32,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)
from scheduling.jobframework.interface import JobKind
from scheduling.jobframework.validation import (
    annotation_path,
    int_value,
    label_path,
    object_map,
    string_map,
    validate_kueue_labels,
    validate_object,
)
from scheduling.jobs.pod import (
    MANAGED_LABEL,
    MANAGED_LABEL_VALUE,
    SUSPENDING_PARENT_ANNOTATION,
    Pod,
)

FRAMEWORK_NAME = "deployment"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"
TEMPLATE_PATH = "spec.template"
DEFAULT_REPLICAS = 1
DEFAULT_MAX_SURGE = "25%"
DEFAULT_MAX_UNAVAILABLE = "25%"
STRATEGIES = ("RollingUpdate", "Recreate")
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# Kubernetes' alphabet for the names it derives (``rand.SafeEncodeString``): no vowels, no
# look-alike digits, so a hash never spells a word.
_SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_POD = Pod()


@dataclass(frozen=True)
class ChildPod:
    """A Pod the Deployment owns, as the decisions need it. ``scheduled``: ungated (its
    workload admitted); ``terminated``: phase Succeeded or Failed (deleted by Kueue when its
    workload stopped)."""

    name: str
    template_hash: str
    created_at: datetime
    scheduled: bool = False
    running: bool = False
    ready: bool = False
    terminated: bool = False


@dataclass(frozen=True)
class ReplicaPlan:
    """What one pass does: how many Pods of the current template to create, which Pods to
    delete (by name, with the reason: ``Terminated``, ``ScaleDown`` or ``Rollout``) and the
    Deployment's new status, counting the Pods to create."""

    create: int
    delete: list[tuple[str, str]]
    status: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)


def _spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = manifest.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _template(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    template = _spec(manifest).get("template")
    return template if isinstance(template, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def replicas(manifest: Mapping[str, Any]) -> int:
    """``spec.replicas``, Kubernetes' default 1 when unset."""
    value = _spec(manifest).get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_REPLICAS


def template_hash(template: Mapping[str, Any]) -> str:
    """The ``pod-template-hash`` of a pod template: a 32-bit FNV-1a hash of the template
    (as compact JSON with sorted keys) written in decimal, each digit mapped to Kubernetes'
    safe alphabet, as ``controller.ComputeHash`` names a ReplicaSet."""
    data = json.dumps(template, sort_keys=True, separators=(",", ":"), default=str).encode()
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(_SAFE_ALPHABET[int(digit) % len(_SAFE_ALPHABET)] for digit in str(value))


def scaled_value(value: Any, total: int, *, round_up: bool) -> int:
    """An int-or-percent field (``maxSurge``, ``maxUnavailable``) against ``total``."""
    if isinstance(value, str) and value.endswith("%"):
        share = int(value[:-1]) * total / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def surge_and_unavailable(manifest: Mapping[str, Any]) -> tuple[int, int]:
    """How many Pods a rollout may add above ``replicas`` and how many of them may be
    unavailable (Kubernetes' ``ResolveFenceposts``: surge rounded up, unavailability down;
    both zero becomes one unavailable). Recreate: no surge, all may go."""
    spec = _spec(manifest)
    desired = replicas(manifest)
    strategy = object_map(spec.get("strategy"), "", [])
    if strategy.get("type") == "Recreate":
        return 0, desired
    rolling = object_map(strategy.get("rollingUpdate"), "", [])
    surge = scaled_value(rolling.get("maxSurge", DEFAULT_MAX_SURGE), desired, round_up=True)
    unavailable = scaled_value(rolling.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE), desired,
                                round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, min(unavailable, desired)


def validate_parent(kind: JobKind, manifest: Any, *, namespace: str,
                    slices_enabled: bool) -> tuple[list[FieldError], Mapping[str, Any] | None]:
    """What Kueue's webhook checks on an object whose Pods it queues (a Deployment, a
    LeaderWorkerSet) before its spec: the object's metadata, a valid queue name, no
    elastic annotation; and its ``spec`` (None, with an error, when it is not an object)."""
    if not isinstance(manifest, Mapping):
        return [FieldError("", f"a {kind.kind} manifest must be an object")], None
    errors, labels, annotations = validate_object(
        manifest, api_version=kind.api_version, kind=kind.kind, namespace=namespace)
    queue = labels.get(QUEUE_NAME_LABEL)
    if queue is not None:
        errors.extend(validate_kueue_labels({QUEUE_NAME_LABEL: queue}))
    if slices_enabled and annotations.get(ELASTIC_JOB_ANNOTATION) == "true":
        errors.append(FieldError(annotation_path(ELASTIC_JOB_ANNOTATION), (
            f'Forbidden: elastic job is not supported for "{kind.api_version}, '
            f'Kind={kind.kind}"')))
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors, None
    return errors, spec


def queue_update_errors(old: Mapping[str, Any], new: Mapping[str, Any], *,
                        ready_replicas: int) -> list[FieldError]:
    """Kueue's update rules for an object whose Pods it queues, "suspended" while no
    replica is ready: the queue label may not change then, nor ever be removed; a priority
    class may not be added then, nor ever removed."""
    errors: list[FieldError] = []
    old_labels, new_labels = _labels(old), _labels(new)
    old_queue, new_queue = old_labels.get(QUEUE_NAME_LABEL), new_labels.get(QUEUE_NAME_LABEL)
    suspended = ready_replicas == 0
    if (not suspended or not new_queue) and new_queue != old_queue:
        errors.append(FieldError(label_path(QUEUE_NAME_LABEL), "field is immutable"))
    old_class, new_class = (old_labels.get(PRIORITY_CLASS_LABEL),
                            new_labels.get(PRIORITY_CLASS_LABEL))
    if not suspended and not old_class and new_class:
        errors.append(FieldError(label_path(PRIORITY_CLASS_LABEL), (
            "WorkloadPriorityClass cannot be added to a non-suspended workload")))
    if old_class and not new_class:
        errors.append(FieldError(label_path(PRIORITY_CLASS_LABEL),
                                 "WorkloadPriorityClass cannot be removed from a workload"))
    return errors


def template_pod_errors(template: Mapping[str, Any], path: str, *, namespace: str,
                        slices_enabled: bool) -> list[FieldError]:
    """A pod template checked now as the Pods made of it will be (its spec, labels and
    annotations), each error under ``path``."""
    metadata = object_map(template.get("metadata"), "", [])
    pod = {"apiVersion": _POD.api_version, "kind": _POD.kind,
           "metadata": {"name": "pod", "labels": string_map(metadata.get("labels"), "", []),
                        "annotations": metadata.get("annotations")},
           "spec": template.get("spec")}
    return [FieldError(f"{path}.{e.path}", e.message)
            for e in _POD.validate_on_create(pod, namespace=namespace,
                                             slices_enabled=slices_enabled)
            if e.path.startswith(("spec", "metadata.labels", "metadata.annotations"))]


def _deletion_order(pod: ChildPod) -> tuple[bool, bool, bool, float]:
    """The ReplicaSet controller's order of the Pods it deletes first: not scheduled
    (here: still gated, waiting for quota) before scheduled, pending before running, not
    ready before ready, then the newest first."""
    return pod.scheduled, pod.running, pod.ready, -pod.created_at.timestamp()


class Deployment(JobKind):
    framework_name = FRAMEWORK_NAME
    api_version = "apps/v1"
    kind = "Deployment"
    plural = "deployments"
    implicitly_enables = (_POD.framework_name,)
    keeps_replicas = True
    webhook_defaults_on_update = True

    # --- admission webhook ---------------------------------------------------------------

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        errors, spec = validate_parent(self, manifest, namespace=namespace,
                                       slices_enabled=slices_enabled)
        if spec is None:
            return errors
        if spec.get("replicas") is not None:
            int_value(spec["replicas"], "spec.replicas", errors, minimum=0)
        selector = _validate_selector(spec.get("selector"), errors)
        template = spec.get("template")
        if not isinstance(template, Mapping):
            errors.append(FieldError(TEMPLATE_PATH, "is required" if template is None
                                     else "must be an object"))
            return errors
        template_labels = string_map(object_map(template.get("metadata"), "", []).get("labels"),
                                     f"{TEMPLATE_PATH}.metadata.labels", [])
        if selector is not None and not _selects(selector, template_labels):
            errors.append(FieldError(f"{TEMPLATE_PATH}.metadata.labels",
                                     "`selector` does not match template `labels`"))
        restart_policy = object_map(template.get("spec"), "", []).get("restartPolicy")
        if restart_policy not in (None, "Always"):
            errors.append(FieldError(f"{TEMPLATE_PATH}.spec.restartPolicy", (
                f"Unsupported value: {restart_policy!r}: supported values: \"Always\"")))
        errors.extend(_validate_strategy(spec.get("strategy")))
        errors.extend(e for e in template_pod_errors(template, TEMPLATE_PATH, namespace=namespace,
                                                     slices_enabled=slices_enabled)
                      if not e.path.startswith(f"{TEMPLATE_PATH}.spec.restartPolicy"))
        return errors

    def validate_on_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], *, ready_replicas: int,
        namespace: str, slices_enabled: bool,
    ) -> list[FieldError]:
        """``validate_on_create`` of the new object, the selector Kubernetes keeps, and
        Kueue's update rules: while a replica is ready the queue label may not change, and
        it may never be removed; a priority class may not be added while a replica is
        ready, nor removed."""
        errors = self.validate_on_create(new, namespace=namespace,
                                         slices_enabled=slices_enabled)
        if _spec(new).get("selector") != _spec(old).get("selector"):
            errors.append(FieldError("spec.selector", "field is immutable"))
        errors.extend(queue_update_errors(old, new, ready_replicas=ready_replicas))
        return errors

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Kueue's webhook for a queued Deployment: the template's parent annotation and
        managed label, and the Deployment's queue and priority-class labels copied onto it;
        with the API server's defaults kueueweb reads (one replica, restartPolicy Always)."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        spec.setdefault("replicas", DEFAULT_REPLICAS)
        template = spec.setdefault("template", {})
        metadata = template.setdefault("metadata", {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}),
                                   SUSPENDING_PARENT_ANNOTATION: FRAMEWORK_NAME}
        labels = {**(metadata.get("labels") or {}), MANAGED_LABEL: MANAGED_LABEL_VALUE}
        own = _labels(result)
        for key in (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL):
            if own.get(key):
                labels[key] = own[key]
        metadata["labels"] = labels
        template.setdefault("spec", {}).setdefault("restartPolicy", "Always")
        return result

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        """A Deployment has no suspend: Kueue holds its Pods, each gated on its own."""
        return False

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(_template(manifest), TEMPLATE_PATH)]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        name = object_map(_template(manifest).get("spec"), "", []).get("priorityClassName")
        return (str(name), f"{TEMPLATE_PATH}.spec.priorityClassName") if name else None

    # --- the ReplicaSet controller -------------------------------------------------------

    def pod_for(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """A Pod of the current template, as its ReplicaSet creates it: named
        ``<deployment>-<pod-template-hash>-`` and five random characters, with the
        template's labels (and the hash), annotations and spec, owned by the Deployment."""
        metadata = manifest.get("metadata") or {}
        template = _template(manifest)
        template_metadata = template.get("metadata") or {}
        hashed = template_hash(template)
        return {
            "apiVersion": _POD.api_version,
            "kind": _POD.kind,
            "metadata": {
                "generateName": f"{metadata.get('name', '')}-{hashed}-",
                "namespace": metadata.get("namespace"),
                "labels": {**(template_metadata.get("labels") or {}),
                           POD_TEMPLATE_HASH_LABEL: hashed},
                "annotations": dict(template_metadata.get("annotations") or {}),
                "ownerReferences": [self.controller_reference(manifest)],
            },
            "spec": copy.deepcopy(dict(template.get("spec") or {})),
        }

    def plan(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
             pods: Sequence[ChildPod], *, now: datetime) -> ReplicaPlan:
        """One pass of the ReplicaSets of the Deployment: Pods that ended are gone and
        replaced; the current template's Pods are brought to ``replicas``; the older
        templates' Pods are rolled out within the strategy's surge and unavailability."""
        desired = replicas(manifest)
        current = template_hash(_template(manifest))
        delete: list[tuple[str, str]] = [(p.name, "Terminated") for p in pods if p.terminated]
        active = [p for p in pods if not p.terminated]
        new = sorted((p for p in active if p.template_hash == current), key=_deletion_order)
        old = sorted((p for p in active if p.template_hash != current), key=_deletion_order)
        surge, unavailable = surge_and_unavailable(manifest)
        if len(new) > desired:
            delete.extend((p.name, "ScaleDown") for p in new[:len(new) - desired])
            new = new[len(new) - desired:]
        # Old Pods go as far as availability allows: the Pods that may go are those above
        # the minimum available, less the new Pods not ready yet (Kubernetes'
        # ``maxScaledDown``); the unready old ones first, as they serve nothing.
        new_unready = sum(1 for p in new if not p.ready)
        may_go = len(new) + len(old) - (desired - unavailable) - new_unready
        going = old[:max(may_go, 0)] if old else []
        delete.extend((p.name, "Rollout") for p in going)
        old = old[len(going):]
        create = max(min(desired - len(new), desired + surge - len(new) - len(old)), 0)
        kept = [*new, *old]
        ready = sum(1 for p in kept if p.ready)
        new_status = self._status(manifest, status, total=len(kept) + create,
                                  updated=len(new) + create, ready=ready, desired=desired,
                                  unavailable=unavailable, now=now)
        return ReplicaPlan(create=create, delete=delete, status=new_status)

    def _status(self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, total: int,
                updated: int, ready: int, desired: int, unavailable: int,
                now: datetime) -> dict[str, Any]:
        """The Deployment's status over its Pods: ``availableReplicas`` are the ready ones
        (minReadySeconds is not modelled), and ``Available`` holds while no more than
        ``maxUnavailable`` of ``replicas`` are missing."""
        available = ready >= desired - unavailable
        result: dict[str, Any] = {
            "observedGeneration": (manifest.get("metadata") or {}).get("generation", 1),
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(desired - ready, 0),
        }
        result["conditions"] = cond.set_condition(
            list(status.get("conditions") or []), "Available", available,
            "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
            "Deployment has minimum availability." if available
            else "Deployment does not have minimum availability.", now=now)
        return result


def _validate_selector(selector: Any, errors: list[FieldError]) -> Mapping[str, Any] | None:
    """``spec.selector``: required and not empty, valid labels and expressions."""
    path = "spec.selector"
    if selector is None:
        errors.append(FieldError(path, "is required"))
        return None
    if not isinstance(selector, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return None
    before = len(errors)
    match_labels = string_map(selector.get("matchLabels"), f"{path}.matchLabels", errors)
    for key, value in match_labels.items():
        message = qualified_name_error(key) or label_value_error(value)
        if message is not None:
            errors.append(FieldError(f"{path}.matchLabels[{key}]", message))
    expressions = selector.get("matchExpressions") or []
    if not isinstance(expressions, list):
        errors.append(FieldError(f"{path}.matchExpressions", "must be a list"))
        expressions = []
    for index, expression in enumerate(expressions):
        epath = f"{path}.matchExpressions[{index}]"
        if not isinstance(expression, Mapping):
            errors.append(FieldError(epath, "must be an object"))
            continue
        operator, values = expression.get("operator"), expression.get("values") or []
        if operator not in SELECTOR_OPERATORS:
            errors.append(FieldError(f"{epath}.operator", f"Unsupported value: {operator!r}: "
                                     "supported values: \"In\", \"NotIn\", \"Exists\", "
                                     "\"DoesNotExist\""))
        elif (operator in ("In", "NotIn")) != bool(values):
            errors.append(FieldError(f"{epath}.values", "must be specified when `operator` is "
                                     "'In' or 'NotIn'" if operator in ("In", "NotIn") else
                                     "may not be specified when `operator` is 'Exists' or "
                                     "'DoesNotExist'"))
        if qualified_name_error(expression.get("key")) is not None:
            errors.append(FieldError(f"{epath}.key", str(qualified_name_error(
                expression.get("key")))))
    if len(errors) > before:
        return None
    if not match_labels and not expressions:
        errors.append(FieldError(path, "empty selector is invalid for deployment"))
        return None
    return selector


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a label selector matches ``labels``."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


def int_or_percent(value: Any, path: str, errors: list[FieldError]) -> int | None:
    """An int-or-string field: a non-negative int32, or a whole percentage ``N%``; the
    value against 100 (a percentage), for the both-zero rule."""
    if isinstance(value, str):
        digits = value[:-1] if value.endswith("%") else ""
        if not digits.isdigit():
            errors.append(FieldError(path, f"Invalid value: {value!r}: a valid percent "
                                     "string must be a numeric string followed by an "
                                     "ending '%'"))
            return None
        return int(digits)
    number = int_value(value, path, errors, minimum=0)
    return None if number is None else min(number, MAX_INT32)


def _validate_strategy(strategy: Any) -> list[FieldError]:
    """``spec.strategy``: its type, and for RollingUpdate a surge and unavailability that
    are not both zero (Kubernetes' ``ValidateDeploymentStrategy``)."""
    errors: list[FieldError] = []
    path = "spec.strategy"
    strategy = object_map(strategy, path, errors)
    kind = strategy.get("type", "RollingUpdate")
    if kind not in STRATEGIES:
        errors.append(FieldError(f"{path}.type", f"Unsupported value: {kind!r}: supported "
                                 "values: \"Recreate\", \"RollingUpdate\""))
        return errors
    rolling = strategy.get("rollingUpdate")
    if kind == "Recreate":
        if rolling is not None:
            errors.append(FieldError(f"{path}.rollingUpdate",
                                     "Forbidden: may not be specified when strategy `type` "
                                     "is 'Recreate'"))
        return errors
    rolling = object_map(rolling, f"{path}.rollingUpdate", errors)
    surge = int_or_percent(rolling.get("maxSurge", DEFAULT_MAX_SURGE),
                            f"{path}.rollingUpdate.maxSurge", errors)
    unavailable = int_or_percent(rolling.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE),
                                  f"{path}.rollingUpdate.maxUnavailable", errors)
    if isinstance(rolling.get("maxUnavailable"), str) and (unavailable or 0) > 100:
        errors.append(FieldError(f"{path}.rollingUpdate.maxUnavailable",
                                 "must not be greater than 100%"))
    if surge == 0 and unavailable == 0:
        errors.append(FieldError(f"{path}.rollingUpdate.maxUnavailable",
                                 "may not be 0 when `maxSurge` is 0"))
    return errors

