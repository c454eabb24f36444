"""The job reconciler both cluster backends share (Kueue's ``jobframework/reconciler.go``):
what starting, scaling, stopping and finishing any registered kind means for the stored job
and its workloads.

A backend (``multicluster.simulated.runner``, ``multicluster.kube.sync``) decides what to do
with a job from its current workload (``should_run``, ``placed_on_worker``), asks the kind
(``integration_of``) for the object it writes, and records the outcome here:

* ``pod_set_infos``: the admission's per-pod-set info (assigned flavors' node labels and
  tolerations), as Kueue's ``getPodSetsInfoFromStatus`` builds it;
* ``mark_started``: the job unsuspended, its ``Started`` event;
* ``mark_suspended`` then ``release_stopped``: the job suspended, and once its pods are gone
  the quota given back with a ``Stopped`` event (Kueue releases quota only then).

It reads and writes the database, so it sits beside the models rather than in the pure
``scheduling.jobframework``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings

from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobframework.interface import GenericJob
from scheduling.jobframework.podsets import PodSetInfo
from scheduling.jobframework.podsets import pod_set_infos as infos_from
from scheduling.jobframework.workload import is_elastic as elastic_annotated
from scheduling.models import Event, Job, ResourceFlavor, Workload
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle, slices

RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


def integration_of(job: Job) -> GenericJob:
    """The registered kind of a stored job."""
    return registry.integration_for(job)


def is_elastic(job: Job) -> bool:
    """The job scales through workload slices (its kind can, the annotation asks for it, and
    ElasticJobsViaWorkloadSlices is on)."""
    config: dict[str, Any] = settings.KUEUEWEB
    annotations = (job.manifest.get("metadata") or {}).get("annotations") or {}
    return integration_of(job).elastic and elastic_annotated(
        annotations, slices_enabled=bool(config["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"]))


def is_finished(job: Job) -> bool:
    return integration_of(job).finished(job.status) is not None


def should_run(wl: Workload | None) -> bool:
    """The workload is admitted to run here (not on a MultiKueue worker) and not evicted."""
    return (wl is not None and wl.phase == WorkloadPhase.ADMITTED and wl.active
            and not wl.cluster_name and not cond.is_true(wl.conditions, "Evicted"))


def placed_on_worker(wl: Workload | None) -> bool:
    """A MultiKueue hub workload a worker admitted: its job is managed by MultiKueue (Kueue's
    ``spec.managedBy``), which mirrors the worker's job onto it; the local reconciler neither
    runs nor stops it (eviction clears ``clusterName`` and hands it back)."""
    return (wl is not None and bool(wl.cluster_name) and wl.phase in RESERVED
            and not cond.is_true(wl.conditions, "Evicted"))


def allowed_counts(wl: Workload, *, elastic_job: bool) -> dict[str, int] | None:
    """For an elastic slice, each pod set's current count (a scale-down lowers it in place
    and leaves the admission as it was), which caps its admitted count."""
    return slices.pod_set_counts(wl.pod_sets or []) if elastic_job else None


def admitted_pods(wl: Workload, *, elastic_job: bool) -> int:
    """The pods the job may run: the admitted counts, capped for an elastic slice."""
    counts = allowed_counts(wl, elastic_job=elastic_job)
    total = 0
    for assignment in (wl.admission or {}).get("podSetAssignments", ()):
        admitted = int(assignment.get("count", 0))
        if counts is not None:
            admitted = min(admitted, counts.get(str(assignment.get("name", "main")), admitted))
        total += admitted
    return total


def pod_set_infos(cluster_id: int, wl: Workload, *, elastic_job: bool) -> list[PodSetInfo]:
    """The admission's PodSetInfo per pod set, from the flavors of the cluster ``cluster_id``."""
    admission: Mapping[str, Any] = wl.admission or {}
    names = {f for ps in admission.get("podSetAssignments", ())
             for f in (ps.get("flavors") or {}).values()}
    flavors = {f.name: (f.node_labels or {}, f.tolerations or [])
               for f in ResourceFlavor.objects.filter(cluster_id=cluster_id, name__in=names)}
    return infos_from(admission, flavors, counts=allowed_counts(wl, elastic_job=elastic_job))


def set_suspend(job: Job, suspend: bool, status: dict[str, Any]) -> None:
    job.manifest = integration_of(job).suspend(job.manifest, suspend)
    job.suspend = suspend
    job.status = status
    job.save(update_fields=["manifest", "suspend", "status", "resource_version", "updated_at"])


def mark_started(job: Job, wl: Workload, *, now: datetime, events: list[Event],
                 where: str = "") -> None:
    """The job runs: unsuspended, with a start time, and the workload's ``Started`` event."""
    status = {k: v for k, v in (job.status or {}).items() if k != "completionTime"}
    status["startTime"] = cond.timestamp(now)
    status["conditions"] = cond.set_condition(
        status.get("conditions", []), "Suspended", False, "JobResumed", "Job resumed", now=now)
    set_suspend(job, False, status)
    cq = (wl.admission or {}).get("clusterQueue", "")
    events.append(lifecycle.workload_event(
        wl, "Started", f"Admitted by clusterQueue {cq}{where}", now=now, kind=job.kind))


def mark_suspended(job: Job, *, now: datetime) -> None:
    """The job is stopped: suspended, no pods active or ready."""
    status = {k: v for k, v in (job.status or {}).items() if k != "startTime"}
    status.update(active=0, ready=0)
    status["conditions"] = cond.set_condition(
        status.get("conditions", []), "Suspended", True, "JobSuspended", "Job suspended",
        now=now)
    set_suspend(job, True, status)


def release_stopped(job: Job, workloads: Sequence[Workload], wl: Workload | None, *,
                    now: datetime, events: list[Event]) -> list[Workload]:
    """The job's pods are gone: the evicted workloads that still hold quota give it back.

    A job has one; an elastic job whose admitted slice was evicted while a scale-up slice
    waited has the evicted slice, and its current slice ``wl`` is the waiting one. The
    ``Stopped`` event goes on the current slice if it is released, else the newest released.
    """
    releasing = [w for w in slices.not_finished(workloads)
                 if w.phase in RESERVED and cond.find(w.conditions, "Evicted")]
    if not releasing:
        return []
    target = wl if wl is not None and wl in releasing else releasing[-1]
    evicted = cond.find(target.conditions, "Evicted") or {}
    events.append(lifecycle.workload_event(
        target, "Stopped", str(evicted.get("message") or "The workload is not admitted"),
        now=now, kind=job.kind))
    for w in releasing:
        lifecycle.release_stopped(w, now=now)
    return releasing
