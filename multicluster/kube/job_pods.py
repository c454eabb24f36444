"""The pods of one job on a Kubernetes cluster, read on demand for the job's page: listed
by the job's uid label (``kueue.x-k8s.io/job-uid``, which kueueweb puts on the pods of every
job it runs there), and a pod's container log (``GET .../pods/{name}/log``).

Both are reads of the cluster's API through the cluster's client (its timeout, its errors:
``multicluster.kube.errors``); nothing is stored. A log is bounded twice: the API server is
asked for at most ``tailLines`` lines and ``limitBytes`` bytes, and no more than that many
bytes are read from the answer whatever the server sends. Its text is never logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3

from multicluster.kube.client import client_for, describe
from multicluster.kube.errors import KubeUnavailable
from multicluster.models import Cluster
from scheduling.jobframework import JOB_UID_LABEL, PODSET_LABEL

# kubectl's choice of container when none is named (``kubectl logs``).
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"


@dataclass(frozen=True)
class Container:
    """A container of a pod, as the log view offers it."""

    name: str
    init: bool = False
    # Why it does not run (its waiting state's reason: ContainerCreating, ImagePullBackOff).
    waiting: str = ""
    restarts: int = 0


@dataclass(frozen=True)
class KubePod:
    """A pod as the job's page shows it (a core/v1 Pod, reduced)."""

    name: str
    namespace: str
    uid: str
    job_uid: str
    pod_set: str
    node_name: str
    phase: str
    ready: bool
    # Why it is where it is: the pod's own reason (Evicted), else a waiting container's
    # (ImagePullBackOff), else its PodScheduled condition's (Unschedulable,
    # SchedulingGated), as ``kubectl get pods`` sums it up.
    reason: str
    message: str
    scheduling_gates: tuple[str, ...]
    containers: tuple[Container, ...]
    default_container: str


def _condition(status: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or () if c.get("type") == type_), {})


def _containers(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[Container, ...]:
    states = {
        str(s.get("name")): s
        for key in ("initContainerStatuses", "containerStatuses")
        for s in status.get(key) or ()
    }
    found = []
    for key, init in (("initContainers", True), ("containers", False)):
        for container in spec.get(key) or ():
            name = str(container.get("name") or "")
            state = states.get(name) or {}
            waiting = (state.get("state") or {}).get("waiting") or {}
            found.append(
                Container(
                    name=name,
                    init=init,
                    waiting=str(waiting.get("reason") or ""),
                    restarts=int(state.get("restartCount") or 0),
                )
            )
    return tuple(found)


def _why(status: Mapping[str, Any], containers: tuple[Container, ...]) -> tuple[str, str]:
    if status.get("reason"):
        return str(status["reason"]), str(status.get("message") or "")
    for key in ("initContainerStatuses", "containerStatuses"):
        for state in status.get(key) or ():
            waiting = (state.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                return str(waiting["reason"]), str(waiting.get("message") or "")
    scheduled = _condition(status, "PodScheduled")
    if scheduled.get("status") == "False":
        return str(scheduled.get("reason") or ""), str(scheduled.get("message") or "")
    return "", ""


def reduce_job_pod(obj: Mapping[str, Any]) -> KubePod:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    containers = _containers(spec, status)
    reason, message = _why(status, containers)
    annotated = str((metadata.get("annotations") or {}).get(DEFAULT_CONTAINER_ANNOTATION, ""))
    names = [c.name for c in containers if not c.init]
    return KubePod(
        name=str(metadata.get("name") or ""),
        namespace=str(metadata.get("namespace") or ""),
        uid=str(metadata.get("uid") or ""),
        job_uid=str(labels.get(JOB_UID_LABEL, "")),
        pod_set=str(labels.get(PODSET_LABEL, "")),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        ready=_condition(status, "Ready").get("status") == "True",
        reason=reason,
        message=message,
        scheduling_gates=tuple(str(g.get("name")) for g in spec.get("schedulingGates") or ()),
        containers=containers,
        default_container=annotated if annotated in names else (names[0] if names else ""),
    )


def list_job_pods(cluster: Cluster, namespace: str, job_uid: str, *, limit: int) -> list[KubePod]:
    """The pods of the job ``job_uid`` in ``namespace``, at most ``limit``, by name."""
    kube = client_for(cluster)
    answer = kube.call(
        kube.core.list_namespaced_pod,
        namespace,
        label_selector=f"{JOB_UID_LABEL}={job_uid}",
        limit=limit,
    )
    pods = [reduce_job_pod(item) for item in answer.get("items") or ()]
    return sorted(pods, key=lambda p: (p.pod_set, p.name))


def read_pod(cluster: Cluster, namespace: str, name: str) -> KubePod:
    """The pod ``namespace/name``; raises ``KubeApiError`` (404: it is gone)."""
    kube = client_for(cluster)
    return reduce_job_pod(kube.call(kube.core.read_namespaced_pod, name, namespace))


@dataclass(frozen=True)
class PodLog:
    text: str
    # The log went on beyond ``limit_bytes``: only its first bytes are here.
    truncated: bool


def read_log(
    cluster: Cluster,
    pod: KubePod,
    *,
    container: str,
    tail_lines: int,
    limit_bytes: int,
    previous: bool = False,
    timestamps: bool = False,
) -> PodLog:
    """The last ``tail_lines`` lines of ``container``'s log (of its previous instance with
    ``previous``), at most ``limit_bytes`` bytes of them. Raises ``KubeApiError`` as the API
    server refuses (400: the container is waiting to start, or has no previous instance)."""
    kube = client_for(cluster)
    response = kube.open_stream(
        kube.core.read_namespaced_pod_log,
        pod.name,
        pod.namespace,
        container=container,
        tail_lines=tail_lines,
        limit_bytes=limit_bytes,
        previous=previous,
        timestamps=timestamps,
    )
    try:
        data = response.read(limit_bytes)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeUnavailable(describe(exc)) from exc
    finally:
        # What was not read stays unread: the connection goes, not back to the pool.
        response.close()
        response.release_conn()
    # The server stops at ``limitBytes`` too, possibly within a line.
    return PodLog(text=data.decode("utf-8", errors="replace"), truncated=len(data) >= limit_bytes)
