"""The objects kueueweb puts on a Kubernetes cluster, and what it keeps of those it reads.

The remote job object is the kind's copy of the submitted manifest (its integration's
``remote_copy``: running, with the admission's placement, ``spec.managedBy`` cleared, as
Kueue's MultiKueue adapters and ``RunWithPodSetsInfo`` prepare it), with the labels
``kueue.x-k8s.io/multikueue-origin`` and ``kueue.x-k8s.io/prebuilt-workload-name``. The origin
label also goes on every pod template, so the job's pods can be listed and watched by it,
and so does ``kueue.x-k8s.io/job-uid`` (the job's uid, as on its Workload): a pod is
attributed to its job by that label whatever the kind and however deep its controllers
nest (a JobSet's pods belong to its child Jobs).

Where the server serves the Kubernetes v1.35 Workload API (``scheduling.k8s.io/v1alpha1``),
a ``Workload`` named after the job's kind and name declares one gang pod group per pod set (``minCount`` =
its admitted pod count) and each pod template points at its group (``spec.workloadRef``), so
the cluster's scheduler binds each pod set's pods all or nothing. The members of a pod group
(a LeaderWorkerSet's group, say) are pods of their own, but one gang: they share the
``Workload`` named after the group, with a pod group per role.

Watched objects are reduced to the few fields the reconciler reads (``reduce_*``), so the
watch state kept in the cache stays small.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scheduling.jobframework import (
    JOB_UID_LABEL,
    PREBUILT_WORKLOAD_LABEL,
    WORKLOAD_NAME_MAX_LENGTH,
    GenericJob,
    PodSetInfo,
    workload_name_for_owner,
)

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
GANG_API_GROUP = "scheduling.k8s.io"
GANG_API_VERSION = "v1alpha1"
GANG_RESOURCE = "workloads"
_ACTIVE_POD_PHASES = ("Pending", "Running", "Unknown")


# =========================================================================================
# Manifests
# =========================================================================================


def remote_object(
    integration: GenericJob,
    manifest: Mapping[str, Any],
    *,
    namespace: str,
    origin: str,
    workload_name: str,
    job_uid: str,
    infos: Sequence[PodSetInfo],
    gang_workload: str | None = None,
) -> dict[str, Any]:
    """The object to create on the cluster for an admitted workload of ``integration``."""
    return integration.remote_copy(
        manifest, namespace=namespace,
        labels={ORIGIN_LABEL: origin, PREBUILT_WORKLOAD_LABEL: workload_name},
        pod_labels={ORIGIN_LABEL: origin, JOB_UID_LABEL: job_uid}, infos=infos,
        gang_workload=gang_workload)


def gang_workload_name(integration: GenericJob, job_name: str) -> str:
    """The name of a job's gang Workload: ``<kind>-<job name>``, so that jobs of two kinds
    sharing a name have one each; past a DNS subdomain's length, cut and made unique by a
    hash as Kueue names Workloads."""
    name = f"{integration.kind.lower()}-{job_name}"
    if len(name) <= WORKLOAD_NAME_MAX_LENGTH:
        return name
    return workload_name_for_owner(job_name, "", kind=integration.kind, group=integration.group)


def gang_workload(
    integration: GenericJob, *, namespace: str, job_name: str, origin: str,
    pod_groups: Mapping[str, int], job_uid: str | None = None,
) -> dict[str, Any]:
    """The v1.35 ``scheduling.k8s.io/v1alpha1`` Workload of a job (``gang_workload_name``):
    one gang pod group per pod set, ``pod_groups`` mapping its name to its ``minCount``.
    Owned by the job (when its uid is known) so the cluster deletes it with the job."""
    owners = []
    if job_uid:
        owners = [{
            "apiVersion": integration.api_version, "kind": integration.kind, "name": job_name,
            "uid": job_uid,
            "controller": True, "blockOwnerDeletion": False,
        }]
    return _gang_body(
        gang_workload_name(integration, job_name), namespace=namespace, origin=origin,
        pod_groups=pod_groups, owners=owners,
        controller={"apiGroup": integration.group, "kind": integration.kind,
                    "name": job_name})


def group_gang_workload(
    integration: GenericJob, *, namespace: str, group_name: str, origin: str,
    pod_groups: Mapping[str, int], member: Mapping[str, Any],
) -> dict[str, Any]:
    """The gang Workload a pod group's members share (``gang_workload_name`` of the group):
    one gang pod group per pod set of the group's Workload (its role), each member pointing
    at its role's. No object of the cluster controls a group, so it has no controller; it
    is owned by the members, the first (``member``, a created pod) here and each later one
    as it joins (``gang_owner_reference``), so it goes with the last of them."""
    return _gang_body(gang_workload_name(integration, group_name), namespace=namespace,
                      origin=origin, pod_groups=pod_groups,
                      owners=[gang_owner_reference(integration, member)])


def gang_owner_reference(integration: GenericJob, member: Mapping[str, Any]) -> dict[str, Any]:
    """A member pod as one of the owners of its group's gang Workload: not its controller,
    since the group has several."""
    metadata = member.get("metadata") or {}
    return {"apiVersion": integration.api_version, "kind": integration.kind,
            "name": str(metadata.get("name", "")), "uid": str(metadata.get("uid", "")),
            "controller": False, "blockOwnerDeletion": False}


def _gang_body(name: str, *, namespace: str, origin: str, pod_groups: Mapping[str, int],
               owners: Sequence[Mapping[str, Any]],
               controller: Mapping[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace,
                                "labels": {ORIGIN_LABEL: origin}}
    if owners:
        metadata["ownerReferences"] = [dict(owner) for owner in owners]
    spec: dict[str, Any] = {}
    if controller is not None:
        spec["controllerRef"] = dict(controller)
    spec["podGroups"] = [{"name": group, "policy": {"gang": {"minCount": int(count)}}}
                         for group, count in pod_groups.items()]
    return {
        "apiVersion": f"{GANG_API_GROUP}/{GANG_API_VERSION}",
        "kind": "Workload",
        "metadata": metadata,
        "spec": spec,
    }


# =========================================================================================
# Reduced objects (what the reconciler keeps of each watched object)
# =========================================================================================


def object_key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def reduce_job(obj: Mapping[str, Any],
               is_suspended: Callable[[Mapping[str, Any]], bool] | None = None
               ) -> dict[str, Any]:
    """A job object of any kind: its identity, whether it is suspended (the kind's
    ``is_suspended``; ``spec.suspend`` by default), its spec's scalar fields (where a kind's
    counts live: a Job's ``parallelism``, and in lists of objects such as a RayCluster's
    ``workerGroupSpecs``, each item's scalar fields; templates are left out) and its whole
    status."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    suspended = (is_suspended(obj) if is_suspended is not None
                 else bool(spec.get("suspend", False)))
    labels = metadata.get("labels") or {}
    return {
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
        "workload": labels.get(PREBUILT_WORKLOAD_LABEL, ""),
        "suspend": suspended,
        "spec": _scalars(spec),
        "deleting": bool(metadata.get("deletionTimestamp")),
        "status": dict(obj.get("status") or {}),
    }


def _scalars(spec: Mapping[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in spec.items():
        if isinstance(value, (bool, int, float, str)):
            result[key] = value
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            result[key] = [{k: v for k, v in item.items()
                            if isinstance(v, (bool, int, float, str))} for item in value]
    return result


def _pod_ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or ())


def reduce_pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    ref = spec.get("workloadRef") or {}
    return {
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
        "job_uid": labels.get(JOB_UID_LABEL, ""),
        "phase": status.get("phase", "Pending"),
        "ready": _pod_ready(status),
        "deleting": bool(metadata.get("deletionTimestamp")),
        # Bound by the scheduler, and the gang Workload it belongs to.
        "node": spec.get("nodeName") or "",
        "gang": ref.get("name", "") if isinstance(ref, Mapping) else "",
    }


def reduce_event(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A core/v1 Event: what it is about, what it says, how often it happened and when
    last (``lastTimestamp``, else ``eventTime`` of a newer recorder, else its creation)."""
    metadata = obj.get("metadata") or {}
    involved = obj.get("involvedObject") or {}
    source = obj.get("source") or {}
    return {
        "namespace": metadata.get("namespace", ""),
        "name": metadata.get("name", ""),
        "uid": metadata.get("uid", ""),
        "kind": involved.get("kind", ""),
        "object": involved.get("name", ""),
        "object_uid": involved.get("uid", ""),
        "type": obj.get("type", "Normal"),
        "reason": obj.get("reason", ""),
        "message": obj.get("message", ""),
        "count": int(obj.get("count") or 1),
        "component": source.get("component") or obj.get("reportingComponent") or "",
        "at": (obj.get("lastTimestamp") or obj.get("eventTime")
               or metadata.get("creationTimestamp") or ""),
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


# =========================================================================================
# Objects created on the cluster (kubectl), adopted and run in place
# =========================================================================================

# Marks an object kueueweb adopted: once its local job is gone (deleted through kueueweb),
# the object goes too, where one without the mark is a new object to adopt.
ADOPTED_ANNOTATION = "kueueweb.io/adopted"
_SERVER_METADATA = ("managedFields", "resourceVersion", "creationTimestamp", "generation",
                    "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")


def reduce_adoptable(obj: Mapping[str, Any],
                     is_suspended: Callable[[Mapping[str, Any]], bool] | None = None
                     ) -> dict[str, Any]:
    """A job object created on the cluster: what ``reduce_job`` keeps, and what decides
    whether it is kueueweb's to adopt: its labels and annotations, its controller (the uid
    and the ``apiVersion kind`` of the owner reference that is one), whether it is adopted
    already, and its resource version; and its finalizers (Kueue's webhook puts one on a
    Pod, which kueueweb must take off)."""
    metadata = obj.get("metadata") or {}
    controller = next((ref for ref in metadata.get("ownerReferences") or ()
                       if isinstance(ref, Mapping) and ref.get("controller")), None)
    return {
        **reduce_job(obj, is_suspended),
        "labels": dict(metadata.get("labels") or {}),
        "annotations": dict(metadata.get("annotations") or {}),
        "controller": str(controller.get("uid") or "") if controller else "",
        "controller_kind": (f"{controller.get('apiVersion')} {controller.get('kind')}"
                            if controller else ""),
        "adopted": ADOPTED_ANNOTATION in (metadata.get("annotations") or {}),
        "resourceVersion": str(metadata.get("resourceVersion") or ""),
        "finalizers": [str(f) for f in metadata.get("finalizers") or ()],
    }


def reduce_namespace(obj: Mapping[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    return {"name": metadata.get("name", ""), "labels": dict(metadata.get("labels") or {})}


def adopted_manifest(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as kueueweb stores it: as the cluster has it, less its status (the local
    job's own field) and the metadata the server keeps for itself."""
    manifest = {k: copy.deepcopy(v) for k, v in obj.items() if k != "status"}
    manifest["metadata"] = {k: v for k, v in (manifest.get("metadata") or {}).items()
                            if k not in _SERVER_METADATA}
    return manifest
