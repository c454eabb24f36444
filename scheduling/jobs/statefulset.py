"""apps/v1 StatefulSet: Kueue's statefulset integration (``pkg/controller/jobs/statefulset``)
and the part of Kubernetes' StatefulSet controller that keeps its Pods.

Unlike a Deployment's Pods, a StatefulSet's are admitted together, as ONE pod group:

* its webhook (``default``, on create and update) marks the pod template with
  ``kueue.x-k8s.io/pod-suspending-parent: statefulset`` (nothing when another framework,
  a LeaderWorkerSet, already names itself there);
* Kueue's StatefulSet reconciler builds the group's Workload up front, before any Pod
  exists (a prebuilt Workload): ``statefulset-<name>-<h5>``, one pod set ``main`` of
  ``replicas`` pods whose template is the pod spec alone, annotated with its owner's GVK
  and name and as a group's Workload; so admission never waits for the Pods;
* Kueue's StatefulSet pod reconciler stamps each Pod as a member of that group (group name
  = the Workload's name, total = ``replicas``, fast admission, serving, role ``main``);
  members start together once the Workload is admitted, and a serving group never
  finishes;
* it scales only to and from 0: at 0 the Workload is kept, on hold (``QuotaReserved=False``
  with reason ``OnHold``: its quota released, out of its queue, still active); scaling up
  clears the hold. While managed, the pod spec's shape (what makes a pod's role) may not
  change either.

The StatefulSet controller's decisions (``member_pod``, ``plan_pods``) are pure here and applied by
``scheduling.statefulsets``: Pods named by ordinal, ``<name>-0`` … ``<name>-<replicas-1>``,
created in order and each only once the ones before it run and are ready
(``OrderedReady``, the default) or all at once (``Parallel``); a Pod that ended (Kueue
deleted it when the Workload was evicted) is replaced under the same name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import (
    DEFAULT_POD_SET_NAME,
    MULTIKUEUE_ORIGIN_LABEL,
    MULTIKUEUE_ORIGIN_UID_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)
from scheduling.jobframework.workload import (
    prebuilt_workload_annotations,
    workload_name_for_owner,
)
from scheduling.jobs.deployment import (
    ChildPod,
    Deployment,
    _spec,
    _template,
    replicas,
    template_hash,
)
from scheduling.jobs.pod import (
    FAST_ADMISSION_ANNOTATION,
    GROUP_NAME_LABEL,
    GROUP_TOTAL_COUNT_ANNOTATION,
    IS_GROUP_WORKLOAD_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_LABEL_VALUE,
    ROLE_HASH_ANNOTATION,
    SERVING_ANNOTATION,
    SUSPENDING_PARENT_ANNOTATION,
    shape_changes,
)

FRAMEWORK_NAME = "statefulset"
POD_INDEX_LABEL_ANNOTATION = "kueue.x-k8s.io/pod-group-pod-index-label"
# Kubernetes' labels on a StatefulSet's Pods.
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
REVISION_LABEL = "controller-revision-hash"
POD_MANAGEMENT_POLICIES = ("OrderedReady", "Parallel")
UPDATE_STRATEGIES = ("RollingUpdate", "OnDelete")
REPLICAS_PATH = "spec.replicas"
POD_SPEC_PATH = "spec.template.spec"


@dataclass(frozen=True)
class StatefulSetPlan:
    """What one pass of the StatefulSet controller does: the ordinals to create, the Pods
    to delete (by name, with the reason: ``Terminated``, ``ScaleDown`` or ``Rollout``) and
    the StatefulSet's new status, counting the Pods to create."""

    create: list[int]
    delete: list[tuple[str, str]]
    status: dict[str, Any]


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def ordinal(statefulset_name: str, pod_name: str) -> int | None:
    """The ordinal of a Pod named ``<statefulset>-<ordinal>``, or None."""
    prefix = f"{statefulset_name}-"
    rest = pod_name[len(prefix):] if pod_name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def revision(manifest: Mapping[str, Any]) -> str:
    """The revision of the current pod template (Kubernetes names a ControllerRevision
    ``<statefulset>-<hash>``)."""
    return f"{_metadata(manifest).get('name', '')}-{template_hash(_template(manifest))}"


class StatefulSet(Deployment):
    """The StatefulSet shares a Deployment's webhook checks (selector, template, queue and
    priority-class rules) and adds its own; its Pods form one group. The ReplicaSet's
    decisions it inherits (``pod_for``, ``plan``) are not its controller's, which are
    ``member_pod`` and ``plan_pods``."""

    framework_name = FRAMEWORK_NAME
    api_version = "apps/v1"
    kind = "StatefulSet"
    plural = "statefulsets"
    prebuilds_group_workloads = True

    # --- admission webhook ---------------------------------------------------------------

    def _managed_by_another(self, manifest: Mapping[str, Any]) -> bool:
        """Its template names another framework as the Pods' parent (a LeaderWorkerSet's
        StatefulSets): Kueue's StatefulSet webhook and reconcilers leave it alone."""
        annotations = _metadata(_template(manifest)).get("annotations")
        parent = annotations.get(SUSPENDING_PARENT_ANNOTATION) if isinstance(
            annotations, Mapping) else None
        return parent is not None and parent != FRAMEWORK_NAME

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        errors = super().validate_on_create(manifest, namespace=namespace,
                                            slices_enabled=slices_enabled)
        spec = _spec(manifest)
        policy = spec.get("podManagementPolicy")
        if policy is not None and policy not in POD_MANAGEMENT_POLICIES:
            errors.append(FieldError("spec.podManagementPolicy", (
                f"Unsupported value: {policy!r}: supported values: \"OrderedReady\", "
                "\"Parallel\"")))
        strategy = spec.get("updateStrategy")
        kind = strategy.get("type") if isinstance(strategy, Mapping) else None
        if strategy is not None and not isinstance(strategy, Mapping):
            errors.append(FieldError("spec.updateStrategy", "must be an object"))
        elif kind is not None and kind not in UPDATE_STRATEGIES:
            errors.append(FieldError("spec.updateStrategy.type", (
                f"Unsupported value: {kind!r}: supported values: \"OnDelete\", "
                "\"RollingUpdate\"")))
        return errors

    def validate_on_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], *, ready_replicas: int,
        namespace: str, slices_enabled: bool,
    ) -> list[FieldError]:
        """A Deployment's update rules, and while Kueue manages it (it names a queue): the
        pod spec's shape may not change, nor ``replicas``, except to or from 0."""
        errors = super().validate_on_update(old, new, ready_replicas=ready_replicas,
                                            namespace=namespace, slices_enabled=slices_enabled)
        if self._managed_by_another(new) or not _metadata(new).get("labels", {}).get(
                QUEUE_NAME_LABEL):
            return errors
        old_spec = _template(old).get("spec")
        new_spec = _template(new).get("spec")
        if isinstance(old_spec, Mapping) and isinstance(new_spec, Mapping):
            errors.extend(shape_changes(new_spec, old_spec, POD_SPEC_PATH))
        before, after = replicas(old), replicas(new)
        if before != 0 and after != 0 and before != after:
            errors.append(FieldError(REPLICAS_PATH, (
                f"field is immutable: a StatefulSet managed by Kueue scales only to and "
                f"from 0 (from {before} to {after})")))
        return errors

    def scale_up_refusal(self, old: Mapping[str, Any], new: Mapping[str, Any], *,
                         status: Mapping[str, Any], holds_quota: bool) -> FieldError | None:
        """Kueue refuses a scale-up from 0 while the scale-down is not done: Pods still
        there, or a Workload that still holds its quota (not yet put on hold)."""
        if replicas(old) != 0 or replicas(new) == 0:
            return None
        if not _metadata(new).get("labels", {}).get(QUEUE_NAME_LABEL):
            return None
        if int(status.get("replicas") or 0) > 0:
            return FieldError(REPLICAS_PATH, "Forbidden: scaling down is still in progress")
        if holds_quota:
            return FieldError(REPLICAS_PATH, "Forbidden: the workload of the previous "
                              "scale-down still holds its quota")
        return None

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Kueue's webhook for a queued StatefulSet: the template's parent annotation (its
        Pods are stamped by the pod reconciler later, ``member_pod``); with the API server's
        defaults kueueweb reads (one replica, ``OrderedReady``, ``RollingUpdate``, pods
        ``restartPolicy: Always``)."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        if not isinstance(spec, dict):
            return result
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
        template = spec.setdefault("template", {})
        if not isinstance(template, dict) or self._managed_by_another(result):
            return result
        metadata = template.setdefault("metadata", {})
        metadata["annotations"] = {**(metadata.get("annotations") or {}),
                                   SUSPENDING_PARENT_ANNOTATION: FRAMEWORK_NAME}
        pod_spec = template.setdefault("spec", {})
        if isinstance(pod_spec, dict):
            pod_spec.setdefault("restartPolicy", "Always")
        return result

    # --- the prebuilt Workload (Kueue's StatefulSet reconciler) ---------------------------

    def is_multikueue_copy(self, manifest: Mapping[str, Any]) -> bool:
        """It is a MultiKueue hub's copy on a worker (it carries the origin label): its
        Workload is the hub's, created there by the hub, never built for it."""
        return MULTIKUEUE_ORIGIN_LABEL in (_metadata(manifest).get("labels") or {})

    def owner_uid(self, manifest: Mapping[str, Any]) -> str:
        """The uid its Workload's name is hashed over: on a MultiKueue copy the hub
        object's (its origin-uid annotation), so that the name is the hub's; else its own."""
        metadata = _metadata(manifest)
        annotations = metadata.get("annotations") or {}
        if self.is_multikueue_copy(manifest) and annotations.get(
                MULTIKUEUE_ORIGIN_UID_ANNOTATION):
            return str(annotations[MULTIKUEUE_ORIGIN_UID_ANNOTATION])
        return str(metadata.get("uid", ""))

    def workload_name(self, manifest: Mapping[str, Any]) -> str:
        """``statefulset-<name>-<h5>``, hashed over the kind, group, name and owner uid."""
        return workload_name_for_owner(str(_metadata(manifest).get("name", "")),
                                       self.owner_uid(manifest), kind=self.kind,
                                       group=self.group)

    def pod_sets(self, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One pod set ``main`` of ``replicas`` pods; the template is the pod spec alone."""
        return [{"name": DEFAULT_POD_SET_NAME, "count": replicas(manifest),
                 "template": {"spec": copy.deepcopy(dict(_template(manifest).get("spec")
                                                         or {}))}}]

    def workload_annotations(self, manifest: Mapping[str, Any]) -> dict[str, str]:
        """Its owner (``prebuilt_workload_annotations``) and the group-Workload mark."""
        return {**prebuilt_workload_annotations(self, manifest),
                IS_GROUP_WORKLOAD_ANNOTATION: "true"}

    # --- MultiKueue (Kueue's StatefulSet adapter) -----------------------------------------

    def multikueue_copy(self, manifest: Mapping[str, Any], *,
                        labels: Mapping[str, str]) -> dict[str, Any]:
        """The StatefulSet a MultiKueue worker gets: its metadata fit for creation with
        ``labels`` (origin, prebuilt workload) and the hub object's uid as its origin uid,
        the spec whole, no status. It has no ``managedBy`` to clear and is not suspended:
        the worker's StatefulSet controller makes its Pods, which join the hub's Workload
        there. Nothing comes back (the hub's own StatefulSet controller writes the hub
        object's status), and the hub's Pods stay gated."""
        metadata = _metadata(manifest)
        copied = {k: copy.deepcopy(v) for k, v in metadata.items()
                  if k in ("name", "namespace", "labels", "annotations", "generation")}
        copied["labels"] = {**(copied.get("labels") or {}), **labels}
        copied["annotations"] = {**(copied.get("annotations") or {}),
                                 MULTIKUEUE_ORIGIN_UID_ANNOTATION: str(metadata.get("uid", ""))}
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": copied,
                "spec": copy.deepcopy(dict(_spec(manifest)))}

    # --- the StatefulSet controller, and Kueue's pod reconciler ---------------------------

    def member_pod(self, manifest: Mapping[str, Any], index: int,
                   workload_name: str) -> dict[str, Any]:
        """Pod ``<name>-<index>`` as the StatefulSet controller creates it (the template,
        its revision and ordinal labels, its hostname in the service's subdomain, the
        StatefulSet as controller), stamped as Kueue's pod reconciler stamps it: a managed
        member of the group ``workload_name`` of ``replicas`` pods, fast-admitted, serving,
        of role ``main``, with the StatefulSet's queue and priority class. Kueue also names
        the Workload as the Pod's prebuilt one; kueueweb refuses that label on a submitted
        object, and the group name alone ties the Pod to it."""
        metadata = _metadata(manifest)
        template = _template(manifest)
        template_metadata = _metadata(template)
        name = f"{metadata.get('name', '')}-{index}"
        stamp_labels, stamp_annotations = self.member_stamp(manifest, workload_name)
        labels = {**(template_metadata.get("labels") or {}),
                  REVISION_LABEL: revision(manifest), POD_NAME_LABEL: name,
                  POD_INDEX_LABEL: str(index), **stamp_labels}
        annotations = {**(template_metadata.get("annotations") or {}), **stamp_annotations}
        spec = copy.deepcopy(dict(template.get("spec") or {}))
        spec.setdefault("hostname", name)
        service = _spec(manifest).get("serviceName")
        if service:
            spec.setdefault("subdomain", service)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": metadata.get("namespace"),
                         "labels": labels, "annotations": annotations,
                         "ownerReferences": [self.controller_reference(manifest)]},
            "spec": spec,
        }

    def member_stamp(self, manifest: Mapping[str, Any],
                     workload_name: str) -> tuple[dict[str, str], dict[str, str]]:
        """The labels and annotations Kueue's StatefulSet pod reconciler puts on each Pod of
        the set: managed, the set's queue and priority class, a member of the group
        ``workload_name`` of ``replicas`` pods, fast-admitted, serving, of role ``main``."""
        own_labels = _metadata(manifest).get("labels") or {}
        labels = {MANAGED_LABEL: MANAGED_LABEL_VALUE, GROUP_NAME_LABEL: workload_name}
        for key in (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL):
            if own_labels.get(key):
                labels[key] = str(own_labels[key])
        annotations = {GROUP_TOTAL_COUNT_ANNOTATION: str(replicas(manifest)),
                       FAST_ADMISSION_ANNOTATION: "true", SERVING_ANNOTATION: "true",
                       POD_INDEX_LABEL_ANNOTATION: POD_INDEX_LABEL,
                       ROLE_HASH_ANNOTATION: DEFAULT_POD_SET_NAME}
        return labels, annotations

    def plan_pods(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
                  pods: Sequence[ChildPod]) -> StatefulSetPlan:
        """One pass of the StatefulSet controller over its Pods (by name; each carries its
        revision as ``template_hash``): Pods that ended and Pods past ``replicas`` go
        (the highest ordinal first); with a RollingUpdate, once every Pod runs and is
        ready, the highest one of an old revision goes, to come back with the new
        template; the missing ordinals below ``replicas`` are created: all of them under
        ``Parallel``, under ``OrderedReady`` the lowest one once all before it run and
        are ready."""
        name = str(_metadata(manifest).get("name", ""))
        desired = replicas(manifest)
        current = revision(manifest)
        spec = _spec(manifest)
        by_ordinal = {index: pod for pod in pods
                      if (index := ordinal(name, pod.name)) is not None}
        delete: list[tuple[str, str]] = []
        for index in sorted(by_ordinal, reverse=True):
            pod = by_ordinal[index]
            if pod.terminated:
                delete.append((pod.name, "Terminated"))
            elif index >= desired:
                delete.append((pod.name, "ScaleDown"))
        kept = {i: p for i, p in by_ordinal.items()
                if (p.name, "Terminated") not in delete and (p.name, "ScaleDown") not in delete}
        strategy = spec.get("updateStrategy")
        rolling = not isinstance(strategy, Mapping) or strategy.get("type") != "OnDelete"
        healthy = len(kept) == desired and all(p.running and p.ready for p in kept.values())
        outdated = [i for i in sorted(kept, reverse=True) if kept[i].template_hash != current]
        if rolling and healthy and outdated:
            delete.append((kept[outdated[0]].name, "Rollout"))
            del kept[outdated[0]]
        missing = [i for i in range(desired) if i not in kept]
        create: list[int] = []
        if spec.get("podManagementPolicy") == "Parallel":
            create = missing
        elif missing and all(kept[i].running and kept[i].ready for i in range(missing[0])):
            create = [missing[0]]
        ready = sum(1 for p in kept.values() if p.ready)
        updated = sum(1 for p in kept.values() if p.template_hash == current) + len(create)
        total = len(kept) + len(create)
        new_status: dict[str, Any] = {
            "observedGeneration": _metadata(manifest).get("generation", 1),
            "replicas": total,
            "readyReplicas": ready,
            "availableReplicas": ready,
            "currentReplicas": updated,
            "updatedReplicas": updated,
            "currentRevision": current if updated == total else status.get(
                "currentRevision", current),
            "updateRevision": current,
        }
        return StatefulSetPlan(create=create, delete=delete, status=new_status)
