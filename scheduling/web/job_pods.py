"""The pods of a job as its page lists them, each with why it does not run and its events.

On a simulated cluster the pods are kueueweb's own rows (``multicluster.models.Pod``). On a
Kubernetes cluster they are listed from the cluster when the page (or its pods region) is
rendered, by the job's uid label: kueueweb keeps no copy of them, and a list by label is
what ``kubectl get pods -l`` costs the API server. A cluster that cannot be reached leaves
the table empty with the error said, never the page broken.

The events of a pod are those of the job's workloads about it (``object_kind`` Pod): the
Kubernetes cluster's observed Warnings (``multicluster.kube.pod_events``) or the simulated
scheduler's own (FailedScheduling, WaitingForWorkload).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from multicluster.choices import ConnectionType, PodPhase
from multicluster.kube import job_pods as kube_pods
from multicluster.kube.errors import KubeApiError, KubeError
from multicluster.models import Pod
from scheduling.choices import EventType
from scheduling.models import Event, Job, Workload
from scheduling.workload import slices as elastic

logger = logging.getLogger(__name__)

POD_LIMIT = 500
# Events shown under each pod, newest first.
POD_EVENTS_SHOWN = 10
# Rows read for all the pods of a page at once: enough for the newest events of each
# pod of a job that has many, without reading a long history.
POD_EVENTS_READ = 2000


@dataclass
class PodRow:
    """One pod in the job's table, whichever kind of cluster runs it."""

    name: str
    pod_set: str
    phase: str
    ready: bool
    node_name: str = ""
    workload_name: str = ""
    # Where it runs when not on the job's own cluster (a MultiKueue worker).
    cluster_name: str = ""
    reason: str = ""
    message: str = ""
    scheduling_gates: Sequence[str] = ()
    # A Kubernetes pod's containers (its log can be read); none on a simulated cluster.
    containers: Sequence[kube_pods.Container] = ()
    events: list[Event] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.phase == PodPhase.RUNNING

    @property
    def why(self) -> tuple[str, str]:
        """Why a pod that does not run waits (or ended), as (reason, message): its scheduling
        gates while it has any (Kueue's admission gate: its workload waits for quota), else
        its newest Warning event (FailedScheduling, an image that cannot be pulled), else
        its own reason (Unschedulable, a waiting container's), else its newest event."""
        if self.scheduling_gates:
            return "SchedulingGated", (
                "Scheduling is blocked due to non-empty scheduling gates: "
                + ", ".join(self.scheduling_gates)
            )
        warning = next((e for e in self.events if e.type == EventType.WARNING), None)
        if warning is not None:
            return warning.reason, warning.message
        if self.reason or self.message:
            return self.reason, self.message
        if self.events:
            return self.events[0].reason, self.events[0].message
        return "", ""


@dataclass
class JobPods:
    rows: list[PodRow]
    # Pods are listed from a Kubernetes cluster, whose logs can then be read.
    on_kubernetes: bool = False
    # Why a Kubernetes cluster's pods could not be listed.
    error: str = ""


def _row(pod: Pod | kube_pods.KubePod, **where: Any) -> PodRow:
    """The row of a simulated pod or of a Kubernetes one (both name their fields as a
    core/v1 Pod does); ``where`` adds what only the caller knows."""
    return PodRow(
        name=pod.name,
        pod_set=pod.pod_set,
        phase=pod.phase,
        ready=pod.ready,
        node_name=pod.node_name,
        reason=pod.reason,
        message=pod.message,
        scheduling_gates=list(pod.scheduling_gates),
        **where,
    )


def _simulated_rows(job: Job) -> list[PodRow]:
    pods = (
        Pod.objects.filter(job=job)
        .select_related("cluster", "workload")
        .order_by("pod_set", "name")[:POD_LIMIT]
    )
    return [
        _row(
            p,
            workload_name=p.workload.name if p.workload is not None else "",
            cluster_name=p.cluster.name if p.cluster_id != job.cluster_id else "",
        )
        for p in pods
    ]


def _is_cluster_pod(job: Job) -> bool:
    """The job is a Pod created on the cluster (kubectl), adopted as it is."""
    return job.kind == "Pod" and job.api_group == "" and job.created_on_cluster


def owns(job: Job, pod: kube_pods.KubePod) -> bool:
    """``pod`` is one of ``job``'s: it carries the job's uid label, as every pod of a job
    kueueweb runs does, or it is the job itself, a Pod created on the cluster (which waits
    gated for admission before it gets the label)."""
    if pod.job_uid == str(job.uid):
        return True
    uid = ((job.manifest or {}).get("metadata") or {}).get("uid")
    return _is_cluster_pod(job) and bool(uid) and pod.uid == uid


def _kube_rows(job: Job, workloads: Sequence[Workload]) -> list[PodRow]:
    pods = kube_pods.list_job_pods(job.cluster, job.namespace, str(job.uid), limit=POD_LIMIT)
    if _is_cluster_pod(job) and job.name not in {p.name for p in pods}:
        try:
            itself = kube_pods.read_pod(job.cluster, job.namespace, job.name)
        except KubeApiError as exc:
            if not exc.not_found:
                raise
        else:
            pods += [itself] if owns(job, itself) else []
    # The pods carry the job's uid, not their workload's: they run the current slice.
    current = elastic.current_slice(list(workloads))
    name = current.name if current is not None else ""
    return [_row(p, workload_name=name, containers=p.containers) for p in pods]


def _attach_events(rows: list[PodRow], workloads: Sequence[Workload]) -> None:
    names = {row.name for row in rows}
    if not names or not workloads:
        return
    found: dict[str, list[Event]] = defaultdict(list)
    for event in Event.objects.filter(
        workload_id__in=[wl.pk for wl in workloads], object_kind="Pod", object_name__in=names
    ).order_by("-created_at", "-id")[:POD_EVENTS_READ]:
        if len(found[event.object_name]) < POD_EVENTS_SHOWN:
            found[event.object_name].append(event)
    for row in rows:
        row.events = found.get(row.name, [])


def job_pods(job: Job, workloads: Sequence[Workload]) -> JobPods:
    """The pods of ``job`` (at most ``POD_LIMIT``), by pod set and name, with their events."""
    on_kubernetes = job.cluster.connection_type == ConnectionType.KUBERNETES
    error = ""
    if on_kubernetes:
        try:
            rows = _kube_rows(job, workloads)
        except KubeError as exc:
            # The error names the server and what went wrong, never a credential.
            error = f"The pods could not be read from cluster {job.cluster.name}: {exc}"
            logger.warning("job %s/%s: %s", job.namespace, job.name, error)
            rows = []
    else:
        rows = _simulated_rows(job)
    _attach_events(rows, workloads)
    return JobPods(rows=rows, on_kubernetes=on_kubernetes, error=error)
