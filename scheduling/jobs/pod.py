"""v1 Pod: Kueue's pod integration (``pkg/controller/jobs/pod/{pod_controller,pod_webhook,
pod_multikueue_adapter}.go``, the role hash of ``pkg/util/pod/pod.go``).

A plain Pod carrying a queue label is a job of its own:

* Kueue's webhook marks it managed (label and finaliser ``kueue.x-k8s.io/managed``), holds it
  with the scheduling gate ``kueue.x-k8s.io/admission`` and records its role hash
  (``default``);
* its Workload ``pod-<name>-<hash>`` has one pod set ``main`` of one pod whose template is
  the pod's spec alone;
* it is suspended while gated or once terminated; it starts when the admission's placement
  is merged and the gate removed; a running pod cannot be gated again, so stopping it
  deletes it (``stop_deletes``) and it ends Failed with the ``TerminationTarget`` condition;
* it is finished in phase Succeeded or Failed, and ready with its ``Ready`` condition;
* ``PodController`` plays the pod itself on the simulated cluster.

Pods sharing ``kueue.x-k8s.io/pod-group-name`` in a namespace form a group (``JobGroup``):
one Workload named after the group, built once ``pod-group-total-count`` runnable pods exist
(or from the first with fast admission), one pod set per role hash; the group finishes when
all its pods succeeded, or when none runs and one may not be retried; a serving group never
finishes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.core.names import dns1123_subdomain_error
from scheduling.jobframework.constants import DEFAULT_POD_SET_NAME
from scheduling.jobframework.interface import (
    GenericJob,
    GroupComposition,
    JobGroup,
    JobReport,
    SimulatedController,
    SimulatedPods,
)
from scheduling.jobframework.podsets import PodSetInfo, merge_into_template
from scheduling.jobframework.validation import (
    annotation_path,
    label_path,
    validate_kueue_labels,
    validate_object,
    validate_pod_template,
)

SCHEDULING_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
MANAGED_LABEL_VALUE = "true"
FINALIZER = MANAGED_LABEL
ROLE_HASH_ANNOTATION = "kueue.x-k8s.io/role-hash"
GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"
GROUP_TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
IS_GROUP_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/is-group-workload"
FAST_ADMISSION_ANNOTATION = "kueue.x-k8s.io/pod-group-fast-admission"
SERVING_ANNOTATION = "kueue.x-k8s.io/pod-group-serving"
RETRIABLE_IN_GROUP_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
# Set on the pod template by the webhook of a kind whose pods Kueue queues one by one (a
# Deployment), naming that kind's framework.
SUSPENDING_PARENT_ANNOTATION = "kueue.x-k8s.io/pod-suspending-parent"
# The pod condition Kueue sets on a pod it stops, before deleting it.
TERMINATION_TARGET = "TerminationTarget"
TERMINATION_REASON = "StoppedByKueue"
TERMINATED_PHASES = ("Succeeded", "Failed")
# What the API server says of a pod that still has scheduling gates.
POD_SCHEDULED = "PodScheduled"
SCHEDULING_GATED_REASON = "SchedulingGated"
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
_RESTART_POLICIES = ("Always", "OnFailure", "Never")


# =========================================================================================
# The role hash
# =========================================================================================


def _containers_shape(containers: Any) -> list[dict[str, Any]] | None:
    if not isinstance(containers, list) or not containers:
        return None
    return [{"resources": {"requests": ((c.get("resources") or {}).get("requests")
                                        if isinstance(c, Mapping) else None)},
             "ports": c.get("ports") if isinstance(c, Mapping) else None}
            for c in containers]


def spec_shape(spec: Mapping[str, Any]) -> dict[str, Any]:
    """What of a pod spec makes its role (Kueue's ``SpecShape``): per init and regular
    container only the requests and ports, and the placement and priority fields; image,
    command and env do not count."""
    shape: dict[str, Any] = {
        "initContainers": _containers_shape(spec.get("initContainers")),
        "containers": _containers_shape(spec.get("containers")),
    }
    for key in ("nodeSelector", "affinity", "tolerations", "runtimeClassName", "priority",
                "topologySpreadConstraints", "overhead", "resourceClaims"):
        shape[key] = spec.get(key) or None
    if spec.get("resources") is not None:
        shape["resources"] = (spec.get("resources") or {}).get("requests")
    return shape


def shape_changes(new_spec: Mapping[str, Any], old_spec: Mapping[str, Any],
                  path: str) -> list[FieldError]:
    """Where two pod specs differ in their shape (Kueue's
    ``ValidateImmutablePodGroupPodSpec``), each an immutable field under ``path``."""
    return _differences(spec_shape(new_spec), spec_shape(old_spec), path)


def _differences(new: Any, old: Any, path: str) -> list[FieldError]:
    """Maps are compared key by key, lists of one length item by item, anything else
    whole."""
    if isinstance(new, Mapping) and isinstance(old, Mapping):
        return [error for key in sorted(set(new) | set(old))
                for error in _differences(new.get(key), old.get(key), f"{path}.{key}")]
    if isinstance(new, list) and isinstance(old, list) and len(new) == len(old):
        return [error for index, (n, o) in enumerate(zip(new, old, strict=True))
                for error in _differences(n, o, f"{path}[{index}]")]
    return [] if new == old else [FieldError(path, "field is immutable")]


def role_hash(spec: Mapping[str, Any]) -> str:
    """The first 8 hex digits of SHA-256 over the spec's shape as compact JSON with sorted
    keys, as Go's encoder writes the map Kueue's ``GenerateRoleHash`` builds."""
    shape_json = json.dumps({"spec": spec_shape(spec)}, sort_keys=True, separators=(",", ":"),
                            default=str)
    return hashlib.sha256(shape_json.encode()).hexdigest()[:8]


# =========================================================================================
# Reading a pod
# =========================================================================================


def _spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = manifest.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def is_gated(manifest: Mapping[str, Any]) -> bool:
    return any(isinstance(g, Mapping) and g.get("name") == SCHEDULING_GATE
               for g in _spec(manifest).get("schedulingGates") or ())


def is_terminated(status: Mapping[str, Any] | None) -> bool:
    return (status or {}).get("phase") in TERMINATED_PHASES


def is_ready(status: Mapping[str, Any] | None) -> bool:
    """The pod's ``Ready`` condition is True (Kueue's ``PodsReady`` for a single pod)."""
    return cond.is_true((status or {}).get("conditions") or [], "Ready")


def _ungated(spec: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(spec)
    gates = [g for g in spec.get("schedulingGates") or ()
             if not (isinstance(g, Mapping) and g.get("name") == SCHEDULING_GATE)]
    if gates:
        result["schedulingGates"] = gates
    else:
        result.pop("schedulingGates", None)
    return result


def pod_status(status: Mapping[str, Any], *, phase: str, ready: bool,
               now: datetime) -> dict[str, Any]:
    """The pod's status in ``phase``, its ``Ready`` condition following ``ready``."""
    result = dict(status)
    result["phase"] = phase
    result["conditions"] = cond.set_condition(
        result.get("conditions") or [], "Ready", ready,
        "" if ready else ("PodCompleted" if phase in TERMINATED_PHASES else "ContainersNotReady"),
        "", now=now)
    return result


def _report(status: Mapping[str, Any], *, finished: tuple[str, str] | None) -> JobReport:
    phase = status.get("phase", "Pending")
    ready = is_ready(status)
    return JobReport(parallelism=1, completions=1,
                     active=int(phase not in TERMINATED_PHASES), ready=int(ready),
                     succeeded=int(phase == "Succeeded"), failed=int(phase == "Failed"),
                     finished=finished)


# =========================================================================================
# The pod on the simulated cluster
# =========================================================================================


class PodController(SimulatedController):
    """The pod itself on the simulated cluster: its one pod is created when it starts, and
    its status follows that pod. Nothing replaces it: a pod that is gone is gone."""

    def first_pods(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
                   info: PodSetInfo, pod_set: Mapping[str, Any], *, elastic: bool) -> int:
        """One: the pod itself, whatever its group's pod set counts."""
        return 1

    def reconcile(
        self,
        manifest: Mapping[str, Any],
        status: Mapping[str, Any],
        pods: SimulatedPods,
        *,
        admitted: int,
        allowed: int,
        elastic: bool,
        now: datetime,
    ) -> tuple[dict[str, Any], JobReport]:
        every = pods.all()
        if every:
            pod = every[0]
            new_status = pod_status(status, phase=pod.phase, ready=pod.ready, now=now)
            if pod.node_name:
                new_status["nodeName"] = pod.node_name
                new_status["conditions"] = cond.set_condition(
                    new_status["conditions"], POD_SCHEDULED, True, "", "", now=now)
        else:
            new_status = pod_status(status, phase=status.get("phase", "Pending"),
                                    ready=False, now=now)
        return new_status, _report(new_status, finished=Pod.finished_status(new_status))


# =========================================================================================
# The integration
# =========================================================================================


class Pod(GenericJob, JobGroup):
    framework_name = "pod"
    api_version = "v1"
    kind = "Pod"
    plural = "pods"
    stop_deletes = True
    simulated = PodController()
    group_label = GROUP_NAME_LABEL
    group_workload_annotation = IS_GROUP_WORKLOAD_ANNOTATION

    # --- admission webhook ---------------------------------------------------------------

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        if not isinstance(manifest, Mapping):
            return [FieldError("", "a Pod manifest must be an object")]
        errors, labels, annotations = validate_object(
            manifest, api_version=self.api_version, kind=self.kind, namespace=namespace)
        spec = manifest.get("spec")
        if not isinstance(spec, Mapping):
            errors.append(FieldError(
                "spec", "is required" if spec is None else "must be an object"))
            return errors
        # The pod is its own template: its spec is checked as a job's pod template is.
        errors.extend(FieldError(e.path.removeprefix("."), e.message)
                      for e in validate_pod_template({"spec": spec}, "", for_job=True))
        restart_policy = spec.get("restartPolicy", "Always")
        if restart_policy not in _RESTART_POLICIES:
            errors.append(FieldError("spec.restartPolicy", (
                f"unsupported value {restart_policy!r}: supported values: \"Always\", "
                "\"OnFailure\", \"Never\"")))
        errors.extend(validate_kueue_labels(labels))
        managed = labels.get(MANAGED_LABEL)
        if managed is not None and managed != MANAGED_LABEL_VALUE:
            errors.append(FieldError(label_path(MANAGED_LABEL),
                                     f"managed label value can only be '{MANAGED_LABEL_VALUE}'"))
        errors.extend(validate_group_metadata(labels, annotations))
        return errors

    def accepts_implicitly(self, manifest: Mapping[str, Any]) -> bool:
        """Enabled only through a parent's framework (a Deployment's), Kueue takes the pods
        that parent suspends, the ones carrying its annotation."""
        metadata = manifest.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        return isinstance(annotations, Mapping) and bool(
            annotations.get(SUSPENDING_PARENT_ANNOTATION))

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Kueue's pod webhook ``Default`` for a queued pod: the managed label and
        finaliser, the admission gate, and the role hash (a given one wins). A pod its
        parent suspends (``pod-suspending-parent``) gets no finaliser from the webhook."""
        result = copy.deepcopy(dict(manifest))
        metadata = result.setdefault("metadata", {})
        metadata["labels"] = {**(metadata.get("labels") or {}),
                              MANAGED_LABEL: MANAGED_LABEL_VALUE}
        finalizers = list(metadata.get("finalizers") or [])
        if FINALIZER not in finalizers and not self.accepts_implicitly(result):
            finalizers.append(FINALIZER)
        if finalizers:
            metadata["finalizers"] = finalizers
        spec = result.setdefault("spec", {})
        if not is_gated(result):
            spec["schedulingGates"] = [*(spec.get("schedulingGates") or []),
                                       {"name": SCHEDULING_GATE}]
        annotations = dict(metadata.get("annotations") or {})
        annotations.setdefault(ROLE_HASH_ANNOTATION, role_hash(spec))
        metadata["annotations"] = annotations
        return result

    # --- the Workload --------------------------------------------------------------------

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        """One pod set ``main`` of one pod; the template is the pod's spec, no metadata."""
        return [{"name": DEFAULT_POD_SET_NAME, "count": 1,
                 "template": {"spec": copy.deepcopy(dict(_spec(manifest)))}}]

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [({"metadata": manifest.get("metadata") or {}, "spec": _spec(manifest)}, "")]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        name = _spec(manifest).get("priorityClassName")
        return (str(name), "spec.priorityClassName") if name else None

    # --- run and stop --------------------------------------------------------------------

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        """Gated, or terminated (Kueue cannot suspend a running pod again)."""
        return is_gated(manifest) or is_terminated(manifest.get("status"))

    def suspend(self, manifest: Mapping[str, Any], suspend: bool = True) -> dict[str, Any]:
        """Unsuspending removes the admission gate (on ``{}``, the merge patch that leaves
        no gate). A pod cannot be gated again: suspending leaves it as it is, and the job
        reconciler deletes it instead (``stop_deletes``)."""
        if suspend:
            return dict(manifest)
        if not manifest:
            return {"spec": {"schedulingGates": []}}
        return {**manifest, "spec": _ungated(_spec(manifest))}

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """The admission's info merged into the pod itself, the admission gate removed."""
        result = copy.deepcopy(dict(manifest))
        if infos:
            merged = merge_into_template(
                {"metadata": result.get("metadata") or {}, "spec": _spec(result)}, infos[0])
            result["metadata"], result["spec"] = merged["metadata"], merged["spec"]
        result["spec"] = _ungated(_spec(result))
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Nothing to restore: a pod is never suspended again, only deleted."""
        return copy.deepcopy(dict(manifest))

    def without_managed_by(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """A pod has no managedBy (Kueue's ``IsJobManagedByKueue`` is always true)."""
        return dict(manifest)

    # --- status --------------------------------------------------------------------------

    def multikueue_status(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any],
        remote_status: Mapping[str, Any], *, now: datetime,
    ) -> dict[str, Any]:
        """The worker pod's status, except that the hub's pod, gated for good, keeps
        ``PodScheduled=False/SchedulingGated`` until the worker's pod is scheduled: copied
        as the worker says it (``Unschedulable``), it would make the hub's autoscaler add
        nodes for a pod that never runs there."""
        result = copy.deepcopy(dict(remote_status))
        remote = cond.find(result.get("conditions") or [], POD_SCHEDULED)
        if not is_gated(manifest) or (remote is not None and remote.get("status") == "True"):
            return result
        local = cond.find(status.get("conditions") or [], POD_SCHEDULED)
        if local is None:  # as the API server sets it on the gated pod
            (local,) = cond.set_condition([], POD_SCHEDULED, False, SCHEDULING_GATED_REASON,
                                          SCHEDULING_GATED_MESSAGE, now=now)
        result["conditions"] = [*(c for c in result.get("conditions") or []
                                  if c.get("type") != POD_SCHEDULED), local]
        return result

    def resumed_status(self, status: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
        return {**status, "phase": status.get("phase", "Pending")}

    def suspended_status(self, status: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
        """A stopped pod: deleted by Kueue after the ``TerminationTarget`` condition, so it
        ends Failed unless it had already terminated."""
        if is_terminated(status) or status.get("phase") is None:
            return dict(status)
        result = pod_status(status, phase="Failed", ready=False, now=now)
        result["conditions"] = cond.set_condition(
            result["conditions"], TERMINATION_TARGET, True, TERMINATION_REASON,
            "The pod was stopped by Kueue: its workload is no longer admitted", now=now)
        result["message"] = "The pod was stopped by Kueue"
        return result

    @staticmethod
    def finished_status(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        phase = (status or {}).get("phase")
        if phase not in TERMINATED_PHASES:
            return None
        message = str((status or {}).get("message") or f"Pod {phase.lower()}")
        return ("Succeeded" if phase == "Succeeded" else "Failed"), message

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        """Phase Succeeded or Failed (Kueue's ``Finished`` for a single pod)."""
        return self.finished_status(status)

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return _report(status, finished=self.finished(status))

    # --- pod groups ----------------------------------------------------------------------

    def group_name(self, manifest: Mapping[str, Any]) -> str | None:
        return _labels(manifest).get(GROUP_NAME_LABEL) or None

    def member_pod_set(self, manifest: Mapping[str, Any]) -> str:
        """The role hash (as defaulted, or computed from the spec)."""
        return _annotations(manifest).get(ROLE_HASH_ANNOTATION) or role_hash(_spec(manifest))

    def compose_group(self, members: Sequence[Mapping[str, Any]]) -> GroupComposition:
        """Kueue's ``constructGroupPodSets``: the runnable or succeeded members grouped by
        role, counted, sorted by role; the template is the first member's of each role. With
        fast admission, the first runnable member alone, counted as the whole group."""
        runnable = [m for m in members if (m.get("status") or {}).get("phase") != "Failed"]
        if not runnable:
            return GroupComposition(None, "the group has no runnable pod")
        first = runnable[0]
        total = group_total(first)
        if _annotations(first).get(FAST_ADMISSION_ANNOTATION) == "true":
            return GroupComposition([{"name": self.member_pod_set(first), "count": total,
                                      "template": {"spec": copy.deepcopy(dict(_spec(first)))}}])
        if len(runnable) < total:
            return GroupComposition(None, (
                f"'{self.group_name(first)}' group has fewer runnable pods than expected: "
                f"{len(runnable)} of {total}"))
        pod_sets: dict[str, dict[str, Any]] = {}
        for member in runnable:
            role = self.member_pod_set(member)
            if role in pod_sets:
                pod_sets[role]["count"] += 1
            else:
                pod_sets[role] = {"name": role, "count": 1,
                                  "template": {"spec": copy.deepcopy(dict(_spec(member)))}}
        return GroupComposition([pod_sets[name] for name in sorted(pod_sets)])

    def absent_members(self, members: Sequence[Mapping[str, Any]]) -> int:
        """The members missing from ``total``; with fast admission (Kueue's
        ``countAbsentPods``), one while none is present, else none: such a group starts
        with the members it has and takes the others as they come."""
        present = [m for m in members if (m.get("status") or {}).get("phase") != "Failed"]
        if not members:
            return 0
        if _annotations(members[0]).get(FAST_ADMISSION_ANNOTATION) == "true":
            return int(not present and group_total(members[0]) > 0)
        return max(group_total(members[0]) - len(present), 0)

    def group_report(self, members: Sequence[Mapping[str, Any]]) -> JobReport:
        """Kueue's ``Finished``, ``PodsReady`` and ``ReclaimablePods`` for a group: finished
        (and successful, in either case) once all ``total`` pods succeeded, or once none
        runs and one says it may not be retried; a serving group never finishes and
        reclaims nothing; its succeeded pods per role no longer need quota."""
        total = group_total(members[0]) if members else 0
        statuses = [m.get("status") or {} for m in members]
        succeeded = sum(1 for st in statuses if st.get("phase") == "Succeeded")
        active = sum(1 for st in statuses if not is_terminated(st))
        serving = any(_annotations(m).get(SERVING_ANNOTATION) == "true" for m in members)
        unretriable = any(_annotations(m).get(RETRIABLE_IN_GROUP_ANNOTATION) == "false"
                          for m in members)
        finished = None
        if not serving and (succeeded >= total or (active == 0 and unretriable)):
            finished = ("Succeeded", f"Pods succeeded: {succeeded}/{total}.")
        reclaimable: dict[str, int] = {}
        if not serving:
            for member, st in zip(members, statuses, strict=True):
                if st.get("phase") == "Succeeded":
                    role = self.member_pod_set(member)
                    reclaimable[role] = reclaimable.get(role, 0) + 1
        return JobReport(parallelism=total, completions=None, active=active,
                         ready=sum(1 for st in statuses if is_ready(st)),
                         succeeded=succeeded,
                         failed=sum(1 for st in statuses if st.get("phase") == "Failed"),
                         finished=finished, reclaimable_pods=reclaimable)

    # --- other clusters ------------------------------------------------------------------

    def remote_copy(
        self,
        manifest: Mapping[str, Any],
        *,
        namespace: str,
        labels: Mapping[str, str],
        pod_labels: Mapping[str, str],
        infos: Sequence[PodSetInfo],
        gang_workload: str | None = None,
    ) -> dict[str, Any]:
        """The pod created on a cluster for an admitted workload: ungated with the
        admission's placement, the object's and the pods' labels on it (it is its own pod),
        without Kueue's finaliser (no Kueue manages the copy there)."""
        metadata = manifest.get("metadata") or {}
        running = self.run_with_pod_sets_info(
            {"metadata": {"labels": dict(metadata.get("labels") or {}),
                          "annotations": dict(metadata.get("annotations") or {})},
             "spec": copy.deepcopy(dict(_spec(manifest)))}, infos)
        spec: dict[str, Any] = running["spec"]
        if gang_workload:
            spec["workloadRef"] = {"name": gang_workload,
                                   "podGroup": infos[0].name if infos else DEFAULT_POD_SET_NAME}
        running_meta = running.get("metadata") or {}
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": str(metadata.get("name", "")), "namespace": namespace,
                         "labels": {**(running_meta.get("labels") or {}), **labels,
                                    **pod_labels},
                         "annotations": dict(running_meta.get("annotations") or {})},
            "spec": spec,
        }


def _labels(manifest: Mapping[str, Any]) -> Mapping[str, str]:
    return (manifest.get("metadata") or {}).get("labels") or {}


def _annotations(manifest: Mapping[str, Any]) -> Mapping[str, str]:
    return (manifest.get("metadata") or {}).get("annotations") or {}


def group_total(manifest: Mapping[str, Any]) -> int:
    """The group's ``pod-group-total-count`` (validated on create: an integer of at least 1)."""
    return int(_annotations(manifest).get(GROUP_TOTAL_COUNT_ANNOTATION) or 1)


def validate_group_metadata(labels: Mapping[str, str],
                            annotations: Mapping[str, str]) -> list[FieldError]:
    """The group name label and the total count annotation come together; the name is a
    DNS subdomain and the count an integer of at least 1 (Kueue's
    ``validatePodGroupMetadata``)."""
    both = (f"both the '{GROUP_TOTAL_COUNT_ANNOTATION}' annotation and the "
            f"'{GROUP_NAME_LABEL}' label should be set")
    name = labels.get(GROUP_NAME_LABEL)
    total = annotations.get(GROUP_TOTAL_COUNT_ANNOTATION)
    errors: list[FieldError] = []
    if not name:
        if total is not None:
            errors.append(FieldError(label_path(GROUP_NAME_LABEL), f"is required: {both}"))
        return errors
    message = dns1123_subdomain_error(name)
    if message is not None:
        errors.append(FieldError(label_path(GROUP_NAME_LABEL), message))
    path = annotation_path(GROUP_TOTAL_COUNT_ANNOTATION)
    if total is None:
        errors.append(FieldError(path, f"is required: {both}"))
        return errors
    try:
        count = int(total)
    except ValueError:
        errors.append(FieldError(path, f"{total!r} is not an integer"))
        return errors
    if count < 1:
        errors.append(FieldError(path, f"group total count must be at least 1, got {count}"))
    return errors
