"""The objects kueueweb puts on a Kubernetes cluster, and what it keeps of those it reads.

The remote Job is a copy of the submitted manifest prepared as Kueue's MultiKueue batch Job
adapter and job reconciler prepare it (``job_multikueue_adapter.go``, ``RunWithPodSetsInfo``):
``spec.selector`` dropped, job-controller labels cleaned, ``spec.managedBy`` cleared,
``suspend: false``, ``parallelism`` = the admitted count, the assigned flavors' node labels
merged into the pod template's ``nodeSelector`` and their tolerations appended, labels
``kueue.x-k8s.io/multikueue-origin`` and ``kueue.x-k8s.io/prebuilt-workload-name``. The origin
label also goes on the pod template, so the job's pods can be listed and watched by it.

Where the server serves the Kubernetes v1.35 Workload API (``scheduling.k8s.io/v1alpha1``),
a ``Workload`` named after the job declares one gang pod group (``minCount`` = the pod count)
and the pod template points at it (``spec.workloadRef``), so the cluster's scheduler binds the
pods all or nothing.

Watched objects are reduced to the few fields the reconciler reads (``reduce_*``), so the
watch state kept in the cache stays small.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from scheduling import jobs

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
PREBUILT_WORKLOAD_LABEL = jobs.PREBUILT_WORKLOAD_LABEL
PODSET_LABEL = "kueue.x-k8s.io/podset"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
# Labels the Job controller puts on a job's pod template and pods (Kueue cleans them).
JOB_CONTROLLER_LABELS = frozenset({
    "controller-uid", "batch.kubernetes.io/controller-uid", LEGACY_JOB_NAME_LABEL,
    JOB_NAME_LABEL,
})
ELASTIC_JOB_SCHEDULING_GATE = "kueue.x-k8s.io/elastic-job"
GANG_API_GROUP = "scheduling.k8s.io"
GANG_API_VERSION = "v1alpha1"
GANG_RESOURCE = "workloads"
_ACTIVE_POD_PHASES = ("Pending", "Running", "Unknown")


# =========================================================================================
# Manifests
# =========================================================================================


def _without_controller_labels(labels: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (labels or {}).items() if k not in JOB_CONTROLLER_LABELS}


def remote_job(
    manifest: Mapping[str, Any],
    *,
    namespace: str,
    origin: str,
    workload_name: str,
    parallelism: int,
    node_labels: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    pod_set: str = jobs.DEFAULT_POD_SET_NAME,
    gang_workload: str | None = None,
) -> dict[str, Any]:
    """The batch/v1 Job to create on the cluster for an admitted workload."""
    metadata = manifest.get("metadata") or {}
    spec: dict[str, Any] = copy.deepcopy(dict(manifest.get("spec") or {}))
    labels = _without_controller_labels(metadata.get("labels"))
    labels[ORIGIN_LABEL] = origin
    labels[PREBUILT_WORKLOAD_LABEL] = workload_name
    annotations = dict(metadata.get("annotations") or {})
    # The server generates the selector; a copied one would not match the new job's uid.
    for key in ("selector", "manualSelector", "managedBy"):
        spec.pop(key, None)
    spec["suspend"] = False
    spec["parallelism"] = int(parallelism)
    if annotations.get(jobs.JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION) == "true":
        spec["completions"] = int(parallelism)
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    template_labels = _without_controller_labels(template_meta.get("labels"))
    template_labels[ORIGIN_LABEL] = origin
    template_labels[PODSET_LABEL] = pod_set
    template_meta["labels"] = template_labels
    pod_spec = template.setdefault("spec", {})
    selector = {**(pod_spec.get("nodeSelector") or {}), **dict(node_labels or {})}
    if selector:
        pod_spec["nodeSelector"] = selector
    merged = list(pod_spec.get("tolerations") or [])
    merged.extend(dict(t) for t in tolerations if dict(t) not in merged)
    if merged:
        pod_spec["tolerations"] = merged
    # kueueweb sets the parallelism of an elastic job itself: no pod waits for an ungater.
    gates = [g for g in pod_spec.get("schedulingGates") or ()
             if not (isinstance(g, Mapping) and g.get("name") == ELASTIC_JOB_SCHEDULING_GATE)]
    if gates:
        pod_spec["schedulingGates"] = gates
    else:
        pod_spec.pop("schedulingGates", None)
    if gang_workload:
        pod_spec["workloadRef"] = {"name": gang_workload, "podGroup": pod_set}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": str(metadata.get("name", "")), "namespace": namespace,
                     "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def gang_workload(
    *, namespace: str, job_name: str, origin: str, min_count: int, job_uid: str | None = None,
    pod_set: str = jobs.DEFAULT_POD_SET_NAME,
) -> dict[str, Any]:
    """The v1.35 ``scheduling.k8s.io/v1alpha1`` Workload of a job: one gang pod group. Owned
    by the job (when its uid is known) so the cluster deletes it with the job."""
    metadata: dict[str, Any] = {"name": job_name, "namespace": namespace,
                                "labels": {ORIGIN_LABEL: origin}}
    if job_uid:
        metadata["ownerReferences"] = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": job_uid,
            "controller": True, "blockOwnerDeletion": False,
        }]
    return {
        "apiVersion": f"{GANG_API_GROUP}/{GANG_API_VERSION}",
        "kind": "Workload",
        "metadata": metadata,
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": job_name},
            "podGroups": [{"name": pod_set, "policy": {"gang": {"minCount": int(min_count)}}}],
        },
    }


def job_finished(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """("Succeeded" | "Failed", message) once a Job has a terminal condition."""
    for condition in (status or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "Succeeded", "Job finished successfully"
        if condition.get("type") == "Failed":
            message = condition.get("message") or condition.get("reason") or "Job failed"
            return "Failed", str(message)
    return None


# =========================================================================================
# Reduced objects (what the reconciler keeps of each watched object)
# =========================================================================================


def object_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def reduce_job(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    labels = metadata.get("labels") or {}
    return {
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
        "workload": labels.get(PREBUILT_WORKLOAD_LABEL, ""),
        "suspend": bool(spec.get("suspend", False)),
        "parallelism": spec.get("parallelism"),
        "completions": spec.get("completions"),
        "deleting": bool(metadata.get("deletionTimestamp")),
        "status": dict(obj.get("status") or {}),
    }


def _pod_ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or ())


def reduce_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = obj.get("status") or {}
    job = labels.get(JOB_NAME_LABEL) or labels.get(LEGACY_JOB_NAME_LABEL) or ""
    if not job:
        job = next((ref.get("name", "") for ref in metadata.get("ownerReferences") or ()
                    if ref.get("kind") == "Job"), "")
    return {
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "job": job,
        "phase": status.get("phase", "Pending"),
        "ready": _pod_ready(status),
        "deleting": bool(metadata.get("deletionTimestamp")),
    }


def reduce_node(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allocatable = status.get("allocatable")
    return {
        "name": metadata.get("name", ""),
        "allocatable": dict(allocatable if allocatable is not None
                            else status.get("capacity") or {}),
        "labels": dict(metadata.get("labels") or {}),
        "taints": [dict(t) for t in spec.get("taints") or ()],
        "unschedulable": bool(spec.get("unschedulable", False)),
        "ready": _pod_ready(status),
    }


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """The pod still runs or may still run (terminating pods count until they are gone)."""
    return pod.get("phase") in _ACTIVE_POD_PHASES
