"""Kueue's admission webhooks for job kinds, as a Kubernetes API server calls them
(``pkg/controller/jobframework/base_webhook.go``, ``defaults.go``, ``validation.go``).

For every kind with a webhook there is a mutating and a validating one, named and routed
as Kueue's (``mjob.kb.io`` at ``/mutate-batch-v1-job``, ``vjob.kb.io`` at
``/validate-batch-v1-job``). The mutating one defaults the object (``default_object``):

1. ``ApplyDefaultLocalQueue``: the queue ``default`` when that LocalQueue exists;
2. ``ApplyDefaultWorkloadPriorityClass``: the class ``default`` when it exists;
3. ``ApplyDefaultForSuspend``: a managed object is suspended (a Pod is gated, labelled
   managed, given its finaliser and role hash: the kind's ``default``).

The validating one refuses what Kueue's ``ValidateCreate`` / ``ValidateUpdate`` refuse
(``validate_create``, ``validate_update``), and ``denial_message`` words the refusal as
``field.ErrorList.ToAggregate`` does. What needs the cluster or the database (the
namespace's labels, whether the default queue and priority class exist) is given.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import (
    DEFAULT_LOCAL_QUEUE_NAME,
    DEFAULT_PRIORITY_CLASS_NAME,
    ELASTIC_JOB_ANNOTATION,
    MAX_EXEC_TIME_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)
from scheduling.jobframework.interface import GenericJob, JobKind
from scheduling.jobframework.managed import NAMESPACE_NAME_LABEL, ManagedJobs
from scheduling.jobframework.validation import annotation_path, label_path, validate_kueue_labels

CREATE = "CREATE"
UPDATE = "UPDATE"
# The namespaces Kueue's webhooks never see (its kustomize and Helm namespaceSelector): the
# system's and Kueue's own.
EXCLUDED_NAMESPACES = ("kube-system", "kueue-system")
# Kueue's pod-based integrations: their webhooks (and so their namespaceSelector) follow
# managedJobsNamespaceSelector even for an object that names a queue.
POD_BASED_FRAMEWORKS = frozenset({"pod", "deployment", "statefulset",
                                  "leaderworkerset.x-k8s.io/leaderworkerset"})
IMMUTABLE = "field is immutable"


@runtime_checkable
class _UpdatedWithReplicas(Protocol):
    """A kind that keeps replicas (a Deployment): "suspended" while none is ready, and its
    own update rules."""

    def validate_on_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], *, ready_replicas: int,
        namespace: str, slices_enabled: bool,
    ) -> list[FieldError]: ...


@dataclass(frozen=True)
class Webhook:
    """One of Kueue's webhooks for a kind: its name, path and operations."""

    kind: JobKind
    mutating: bool

    @property
    def name(self) -> str:
        """``mjob.kb.io``, ``vpod.kb.io`` (kubebuilder's markers in Kueue)."""
        return f"{'m' if self.mutating else 'v'}{self.kind.kind.lower()}.kb.io"

    @property
    def path(self) -> str:
        """``mutate-batch-v1-job``, ``validate--v1-pod`` (controller-runtime's path of a
        GroupVersionKind: the group's dots as dashes)."""
        verb = "mutate" if self.mutating else "validate"
        group = self.kind.group.replace(".", "-")
        return f"{verb}-{group}-{self.kind.version}-{self.kind.kind.lower()}"

    @property
    def operations(self) -> tuple[str, ...]:
        if self.mutating and not self.kind.webhook_defaults_on_update:
            return (CREATE,)
        return (CREATE, UPDATE)

    def rule(self) -> dict[str, Any]:
        return {"apiGroups": [self.kind.group], "apiVersions": [self.kind.version],
                "operations": list(self.operations), "resources": [self.kind.plural]}


def webhooks_of(kinds: Sequence[JobKind]) -> list[Webhook]:
    """The mutating and validating webhook of each kind that has them, in that order."""
    hooks = [Webhook(kind, mutating) for mutating in (True, False) for kind in kinds
             if kind.has_webhook]
    return sorted(hooks, key=lambda h: (not h.mutating, h.name))


def find_webhook(kinds: Sequence[JobKind], path: str) -> Webhook | None:
    return next((hook for hook in webhooks_of(kinds) if hook.path == path), None)


def namespace_selector(kind: JobKind, managed: ManagedJobs,
                       document: Mapping[str, Any] | None) -> dict[str, Any]:
    """The namespaceSelector of a kind's webhooks: Kueue's, which leaves out the system's and
    Kueue's namespaces; for a pod-based kind, ``managedJobsNamespaceSelector`` when it is
    set (``document``), as Kueue's Helm chart does."""
    if kind.framework_name in POD_BASED_FRAMEWORKS and document is not None:
        return json.loads(json.dumps(document))  # type: ignore[no-any-return]
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                  "values": list(EXCLUDED_NAMESPACES)}]}


# --- reading an object -----------------------------------------------------------------------


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items() if isinstance(v, str)}


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if not isinstance(annotations, Mapping):
        return {}
    return {str(k): str(v) for k, v in annotations.items() if isinstance(v, str)}


def owner_is_integrated(obj: Mapping[str, Any], kinds: Sequence[JobKind]) -> bool:
    """Kueue's ``IsOwnerManagedByKueueForObject``: the object's controller is of an enabled
    kind (a JobSet's Jobs, a Job's Pods), whose own Workload covers it."""
    metadata = obj.get("metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    integrated = {(k.api_version, k.kind) for k in kinds}
    return any(isinstance(ref, Mapping) and ref.get("controller")
               and (ref.get("apiVersion"), ref.get("kind")) in integrated
               for ref in refs or ())


def needs_namespace(kind: JobKind, obj: Mapping[str, Any], managed: ManagedJobs, *,
                    default_queue_exists: bool) -> bool:
    """Whether deciding on ``obj`` needs its namespace's labels (a read of the cluster):
    only when a selector could change the answer, as Kueue reads the Namespace only for an
    object about to be defaulted."""
    selector = managed.namespace_selector
    if selector is None:
        return False
    keys = {key for key, _ in selector.match_labels} | {
        req.key for req in selector.match_expressions}
    if keys <= {NAMESPACE_NAME_LABEL}:
        # The name label is the namespace's name, which the request carries (Kueue's
        # default selector leaves out kube-system and kueue-system by it).
        return False
    labels = _labels(obj)
    if kind.framework_name in POD_BASED_FRAMEWORKS:
        return True
    return (not labels.get(QUEUE_NAME_LABEL)
            and (managed.without_queue_name or default_queue_exists))


def is_managed(kind: JobKind, obj: Mapping[str, Any], managed: ManagedJobs, *,
               namespace_labels: Mapping[str, str], ancestor_managed: bool) -> bool:
    """Kueue's ``WorkloadShouldBeSuspended``; a pod-based kind also needs its namespace to
    match ``managedJobsNamespaceSelector`` whatever its labels say."""
    if kind.framework_name in POD_BASED_FRAMEWORKS and not managed.namespace_matches(
            namespace_labels):
        return False
    return managed.manages(_labels(obj), namespace_labels=namespace_labels,
                           ancestor_managed=ancestor_managed)


# --- the mutating webhook --------------------------------------------------------------------


def default_object(kind: JobKind, obj: Mapping[str, Any], managed: ManagedJobs, *,
                   namespace_labels: Mapping[str, str], default_queue_exists: bool,
                   default_priority_class_exists: bool,
                   ancestor_managed: bool = False) -> dict[str, Any]:
    """The object as Kueue's mutating webhook leaves it (a new dict; ``obj`` is not
    changed)."""
    copied = json.loads(json.dumps(obj))
    if not isinstance(copied, dict):
        return {}
    result: dict[str, Any] = copied
    if kind.framework_name in POD_BASED_FRAMEWORKS and not managed.namespace_matches(
            namespace_labels):
        return result
    labels = _labels(result)
    defaults: dict[str, str] = {}
    if managed.default_queue_applies(labels, namespace_labels=namespace_labels,
                                     default_queue_exists=default_queue_exists,
                                     ancestor_managed=ancestor_managed):
        defaults[QUEUE_NAME_LABEL] = DEFAULT_LOCAL_QUEUE_NAME
    if (default_priority_class_exists and not labels.get(PRIORITY_CLASS_LABEL)
            and not ancestor_managed):
        defaults[PRIORITY_CLASS_LABEL] = DEFAULT_PRIORITY_CLASS_NAME
    if defaults:
        metadata = result.setdefault("metadata", {})
        metadata["labels"] = {**(metadata.get("labels") or {}), **defaults}
    if is_managed(kind, result, managed, namespace_labels=namespace_labels,
                  ancestor_managed=ancestor_managed):
        result = kind.default(result)
        if isinstance(kind, GenericJob) and not kind.is_suspended(result):
            result = kind.suspend(result)
    return result


# --- the validating webhook ------------------------------------------------------------------


def _quoted(value: Any) -> str:
    """A value as ``field.Invalid`` prints it: a string in double quotes."""
    return json.dumps(value) if isinstance(value, str) else str(value).lower() if isinstance(
        value, bool) else str(value)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    """Kubernetes' ``field.Invalid``: ``<path>: Invalid value: <value>: <detail>``."""
    return FieldError(path, f"Invalid value: {_quoted(value)}: {detail}")


def validate_create(kind: JobKind, obj: Mapping[str, Any], *, namespace: str, managed: bool,
                    slices_enabled: bool) -> list[FieldError]:
    """Kueue's ``ValidateCreate``: the kind's rules for an object Kueue manages; for one it
    does not, only the rules of Kueue's own labels (an unmanaged Job is the cluster's)."""
    if managed:
        return kind.validate_on_create(obj, namespace=namespace, slices_enabled=slices_enabled)
    return validate_kueue_labels(_labels(obj))


def _suspended(kind: JobKind, obj: Mapping[str, Any]) -> bool:
    return kind.is_suspended(obj)


def validate_update(kind: JobKind, old: Mapping[str, Any], new: Mapping[str, Any], *,
                    namespace: str, managed: bool, slices_enabled: bool,
                    default_queue_exists: bool) -> list[FieldError]:
    """Kueue's ``ValidateUpdate``: the new object's create rules, and ``ValidateJobOnUpdate``
    (the queue name may not change while the job runs, nor be emptied where a default queue
    exists; the max-exec-time label is frozen unless the job stays suspended; a priority
    class cannot be added to a running job nor ever removed; the elastic-job annotation
    never changes). A managed object of a kind that keeps replicas (a Deployment) follows
    its kind's own update rules, with "running" meaning a ready replica."""
    errors = validate_create(kind, new, namespace=namespace, managed=managed,
                             slices_enabled=slices_enabled)
    if managed and isinstance(kind, _UpdatedWithReplicas):
        status = old.get("status") if isinstance(old.get("status"), Mapping) else {}
        ready = status.get("readyReplicas") if isinstance(status, Mapping) else None
        ready_replicas = ready if isinstance(ready, int) and not isinstance(ready, bool) else 0
        update_errors = kind.validate_on_update(old, new, ready_replicas=ready_replicas,
                                                namespace=namespace,
                                                slices_enabled=slices_enabled)
        seen = set(errors)
        return [*errors, *(e for e in update_errors if e not in seen)]
    old_labels, new_labels = _labels(old), _labels(new)
    new_suspended, old_suspended = _suspended(kind, new), _suspended(kind, old)
    old_queue, new_queue = old_labels.get(QUEUE_NAME_LABEL, ""), new_labels.get(
        QUEUE_NAME_LABEL, "")
    queue_path = label_path(QUEUE_NAME_LABEL)
    if not new_suspended and new_queue != old_queue:
        errors.append(invalid(queue_path, new_queue, IMMUTABLE))
    if not new_queue and old_queue and default_queue_exists:
        errors.append(invalid(queue_path, "",
                              "queue-name must not be empty in namespace with default queue"))
    if (not new_suspended or not old_suspended) and (
            new_labels.get(MAX_EXEC_TIME_LABEL, "") != old_labels.get(MAX_EXEC_TIME_LABEL, "")):
        errors.append(invalid(label_path(MAX_EXEC_TIME_LABEL),
                              new_labels.get(MAX_EXEC_TIME_LABEL, ""), IMMUTABLE))
    old_class, new_class = old_labels.get(PRIORITY_CLASS_LABEL, ""), new_labels.get(
        PRIORITY_CLASS_LABEL, "")
    class_path = label_path(PRIORITY_CLASS_LABEL)
    if not new_suspended and not old_class and new_class:
        errors.append(invalid(class_path, new_class,
                              "WorkloadPriorityClass cannot be added to a non-suspended "
                              "workload"))
    if old_class and not new_class:
        errors.append(invalid(class_path, new_class,
                              "WorkloadPriorityClass cannot be removed from a workload"))
    old_elastic = _annotations(old).get(ELASTIC_JOB_ANNOTATION) == "true"
    new_elastic = _annotations(new).get(ELASTIC_JOB_ANNOTATION) == "true"
    if old_elastic != new_elastic:
        errors.append(invalid(annotation_path(ELASTIC_JOB_ANNOTATION), new_elastic, IMMUTABLE))
    return errors


def denial_message(errors: Sequence[FieldError]) -> str:
    """The errors as ``field.ErrorList.ToAggregate().Error()`` words them: one error as
    ``<path>: <message>``, several in brackets, separated by commas."""
    texts = list(dict.fromkeys(f"{e.path}: {e.message}" if e.path else e.message
                               for e in errors))
    return texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
