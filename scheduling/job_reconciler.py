"""The job reconciler (Kueue's ``jobframework/reconciler.go``): what starting, scaling,
stopping and finishing any registered kind means, driven the same way on every cluster
backend.

``reconcile(job, backend)`` looks at the job's current workload and does one step:

* **start** the suspended job of an admitted workload: the backend creates what runs it,
  with the admission's ``PodSetInfo`` per pod set (assigned flavors' node labels and
  tolerations, as Kueue's ``getPodSetsInfoFromStatus`` builds them); the job is unsuspended
  with a ``Started`` event;
* **run** it: read the object and its pods from the backend, unsuspend it if the cluster
  suspended it, bring an elastic job's copy to its slice's counts, store the status and tell
  the workload lifecycle (PodsReady, reclaimable pods, Finished);
* **stop** the job of a workload that is no longer admitted: suspend the object, and once
  its pods are gone mark the job suspended and give the quota back with a ``Stopped`` event
  (Kueue releases quota only then);
* **clean up** the copy a cluster runs of a finished job.

A backend is the one small interface ``ClusterBackend``: create, read (the object and its
pods), patch, suspend and delete. ``multicluster.simulated.runner`` implements it on the
simulated cluster's pods, ``multicluster.kube.sync`` on a Kubernetes API server. Backends
differ in one way the reconciler asks about, job by job (``ClusterBackend.runs_copy``): a
Kubernetes cluster runs a copy of a job submitted through kueueweb, which kueueweb patches
to the admitted counts and deletes once finished; the simulated cluster runs the stored
object itself, whose spec is the user's and whose extra pods wait gated for a scale-up's
slice, as Kueue's elastic job ungater keeps them on a single cluster; and a job created on
a Kubernetes cluster (kubectl) runs there in place, started and stopped by patching the
cluster's own object, which stays there once finished.

It reads and writes the database, so it sits beside the models rather than in the pure
``scheduling.jobframework``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from django.conf import settings

from scheduling.choices import EventType, WorkloadPhase
from scheduling.core import admission_checks
from scheduling.jobframework import registry
from scheduling.jobframework.interface import GenericJob, JobGroup, JobReport
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


def runs_through_members(job: Job) -> bool:
    """The job's Workloads are prebuilt pod groups (a StatefulSet's, a LeaderWorkerSet's):
    it runs through the members of its groups, and has no object of its own on a cluster."""
    kind = registry.by_kind(job.api_version, job.kind)
    return kind is not None and kind.prebuilds_group_workloads


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
    infos = infos_from(admission, flavors, counts=allowed_counts(wl, elastic_job=elastic_job))
    # What the admission checks ask for (a provisioned request's annotations) goes on the
    # pods too; a key two of them set differently raises PodSetUpdateConflict.
    for info in infos:
        admission_checks.merge_pod_set_updates(
            info.name, info.labels, info.annotations, info.node_selector, info.tolerations,
            wl.admission_check_states or ())
    return infos


def set_suspend(job: Job, suspend: bool, status: dict[str, Any]) -> None:
    job.manifest = integration_of(job).suspend(job.manifest, suspend)
    job.suspend = suspend
    job.status = status
    job.save(update_fields=["manifest", "suspend", "status", "resource_version", "updated_at"])


def mark_started(job: Job, wl: Workload, *, now: datetime, events: list[Event],
                 where: str = "") -> None:
    """The job runs: unsuspended (its status as the kind's controller writes it then), and
    the workload's ``Started`` event."""
    status = integration_of(job).resumed_status(job.status or {}, now=now)
    set_suspend(job, False, status)
    cq = (wl.admission or {}).get("clusterQueue", "")
    events.append(lifecycle.workload_event(
        wl, "Started", f"Admitted by clusterQueue {cq}{where}", now=now, kind=job.kind))


def mark_suspended(job: Job, *, now: datetime) -> None:
    """The job is stopped: suspended, its status as the kind's controller writes it then."""
    status = integration_of(job).suspended_status(job.status or {}, now=now)
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


# =========================================================================================
# One reconciler, any backend
# =========================================================================================


class Step(StrEnum):
    """What ``reconcile`` did to a job."""

    STARTED = "started"  # created on the cluster and unsuspended (again, if it was missing)
    SCALED = "scaled"  # an elastic copy brought to its slice's counts
    FINISHED = "finished"  # its workload finished
    STOPPING = "stopping"  # suspended, waiting for its pods to go
    SUSPENDED = "suspended"  # marked suspended, its pods gone
    STOPPED = "stopped"  # its evicted workloads gave their quota back
    RETRY = "retry"  # the workload changed meanwhile: reconcile again soon


@dataclass(frozen=True)
class ClusterObject:
    """A job's object as its cluster has it, and its pods.

    ``spec`` holds the copy's counts (a job the backend ``runs_copy`` of); ``active_pods`` and
    ``ready_pods`` count the pods the cluster runs for it; ``gone`` is a copy deleted after it
    finished, whose last status is still known; ``report`` is the pods' own account when the
    backend sees every pod (the simulated cluster), else the kind reads the status."""

    suspended: bool
    status: Mapping[str, Any]
    spec: Mapping[str, Any] | None = None
    resource_version: str = ""
    active_pods: int = 0
    ready_pods: int = 0
    deleting: bool = False
    gone: bool = False
    report: JobReport | None = None


class PatchRefused(Exception):
    """The cluster does not let kueueweb patch the object (Kueue's MultiKueue role may
    create and delete jobs only)."""


class ClusterBackend(Protocol):
    """Where jobs run: the calls the reconciler makes."""

    # The domain (cluster) whose flavors place the pods.
    cluster_id: int
    # Where the job runs, for its events: " on cluster NAME", or "" for the domain's own.
    location: str

    def runs_copy(self, job: Job) -> bool:
        """The cluster runs a copy of the stored ``job``: kueueweb patches the copy to the
        admitted counts, creates it again if it goes missing, and deletes it once finished
        or stopped. Otherwise the cluster runs the object itself (the stored one, or its own
        for a job created there), which stays once finished."""

    def create(self, job: Job, wl: Workload, infos: Sequence[PodSetInfo]) -> bool:
        """Create what runs ``job`` for ``wl`` (the object, its pods or gang), with ``infos``
        injected; False when it cannot yet (the backend said why)."""

    def read(self, job: Job, wl: Workload | None, *, fetch: bool = True,
             full: bool = False) -> ClusterObject | None:
        """The job's object and its pods, None when the cluster has none. ``fetch=False``
        answers from what the backend already knows; ``full`` asks for the whole spec (to
        patch a count inside a list)."""

    def patch(self, job: Job, patch: Mapping[str, Any]) -> ClusterObject | None:
        """Apply a merge patch to the object (raises ``PatchRefused``); None if it is gone."""

    def suspend(self, job: Job) -> ClusterObject | None:
        """Suspend the object (Kueue's ``StopJob``: the kind's suspend and, for an object
        started in place with the admission in its pod templates, the templates as they
        were, ``RestorePodSetsInfo``); raises ``PatchRefused``; None if it is gone."""

    def delete(self, job: Job, *, reason: str) -> None:
        """Delete the object and its pods."""


def reconcile(job: Job, backend: ClusterBackend, *, now: datetime,
              events: list[Event]) -> set[Step]:
    """One step of ``job`` on ``backend`` (see the module's docstring)."""
    if runs_through_members(job):
        return _reconcile_prebuilt_groups(job, backend, now=now, events=events)
    integration = integration_of(job)
    if job.group_name and isinstance(integration, JobGroup):
        return _reconcile_group(job, integration, backend, now=now, events=events)
    workloads = list(job.workloads.all())
    wl = slices.current_slice(workloads)
    if placed_on_worker(wl):
        # MultiKueue mirrors the worker's job onto this one.
        return set()
    if should_run(wl):
        assert wl is not None
        if not job.suspend:
            return _run(job, wl, backend, now=now, events=events)
        if is_finished(job):
            return set()
        return _start(job, wl, backend, now=now, events=events)
    if wl is None or wl.phase == WorkloadPhase.FINISHED or is_finished(job):
        if backend.runs_copy(job):
            copy = backend.read(job, wl, fetch=False) if wl is not None else None
            if copy is not None and not copy.gone:
                backend.delete(job, reason="its workload finished")
        return set()
    return _stop(job, wl, workloads, backend, now=now, events=events)


# The workload's Finished reason when its job cannot start for good (Kueue's
# ``FailedToStartFinishedReason``).
FAILED_TO_START = "FailedToStart"


def _start_infos(wl: Workload, backend: ClusterBackend, *, elastic_job: bool, now: datetime,
                 events: list[Event]) -> list[PodSetInfo] | None:
    """The pod-set infos to start ``wl``'s job with, or None when the admission checks'
    updates conflict: then the workload finishes as Failed to start (no retry would help)."""
    try:
        return pod_set_infos(backend.cluster_id, wl, elastic_job=elastic_job)
    except admission_checks.PodSetUpdateConflict as exc:
        lifecycle.finish(wl, FAILED_TO_START, str(exc), now=now, events=events)
        return None


def _start(job: Job, wl: Workload, backend: ClusterBackend, *, now: datetime,
           events: list[Event]) -> set[Step]:
    infos = _start_infos(wl, backend, elastic_job=is_elastic(job), now=now, events=events)
    if infos is None:
        return {Step.FINISHED}
    if not backend.create(job, wl, infos):
        return set()  # the backend said why (and finished a workload that cannot start)
    mark_started(job, wl, now=now, events=events,
                 where=f"; running{backend.location}" if backend.location else "")
    return {Step.STARTED}


def _run(job: Job, wl: Workload, backend: ClusterBackend, *, now: datetime,
         events: list[Event]) -> set[Step]:
    integration = integration_of(job)
    steps: set[Step] = set()
    obj = backend.read(job, wl)
    if obj is None:
        # Deleted behind our back while the workload is admitted: run it again.
        infos = _start_infos(wl, backend, elastic_job=is_elastic(job), now=now, events=events)
        if infos is None:
            return {Step.FINISHED}
        if backend.create(job, wl, infos):
            events.append(lifecycle.workload_event(
                wl, "Recreated", f"The job was missing{backend.location} and was created "
                "again", now=now,
                type_=EventType.WARNING, kind=job.kind))
            return {Step.STARTED}
        return set()
    if obj.deleting:
        return steps
    elastic_job = is_elastic(job)
    if not obj.gone:
        if obj.suspended and integration.finished(obj.status) is None:
            # Admitted, so the job runs (Kueue's job reconciler unsuspends it).
            backend.patch(job, integration.suspend({}, False))
        if elastic_job and backend.runs_copy(job) and _scale_copy(
                job, wl, obj, backend, now=now, events=events):
            steps.add(Step.SCALED)
    status = dict(obj.status)
    if status and status != job.status:
        job.status = status
        job.save(update_fields=["status", "resource_version", "updated_at"])
    report = obj.report or integration.report(
        job.manifest, status, wanted=admitted_pods(wl, elastic_job=elastic_job),
        ready_pods=obj.ready_pods)
    if not lifecycle.sync_job_status(wl, report, now=now, events=events):
        return steps | {Step.RETRY}
    if report.finished is not None:
        steps.add(Step.FINISHED)
        if backend.runs_copy(job) and not obj.gone:
            backend.delete(job, reason="its workload finished")
    return steps


def _scale_copy(job: Job, wl: Workload, obj: ClusterObject, backend: ClusterBackend, *,
                now: datetime, events: list[Event]) -> bool:
    """Bring the copy to the admitted counts of its scalable pod sets."""
    integration = integration_of(job)
    counts = {info.name: info.count for info in pod_set_infos(backend.cluster_id, wl,
                                                                elastic_job=True)}
    current = {"spec": dict(obj.spec or {})}
    changes = [(ps.path, ps.count, counts[ps.name])
               for ps in integration.scalable_pod_sets(current)
               if ps.name in counts and ps.count != counts[ps.name]]
    if not changes:
        return False
    scaled = integration.scale(current, counts)["spec"]
    keys = [k for k, v in scaled.items() if current["spec"].get(k) != v]
    patch: dict[str, Any]
    if all(isinstance(scaled[k], (bool, int, float, str)) for k in keys):
        patch = {"spec": {k: scaled[k] for k in keys}}
    else:
        # A count inside a list (a worker group's replicas): a merge patch replaces the list
        # whole, so it goes as the cluster has it, templates and all, guarded by the
        # object's resourceVersion.
        whole_obj = backend.read(job, wl, full=True)
        if whole_obj is None:
            return False
        whole = integration.scale({"spec": dict(whole_obj.spec or {})}, counts)["spec"]
        patch = {"metadata": {"resourceVersion": whole_obj.resource_version},
                 "spec": {k: whole[k] for k in keys}}
    backend.patch(job, patch)
    change = ", ".join(f"{path} {old} -> {new}" for path, old, new in changes)
    events.append(lifecycle.workload_event(
        wl, "Scaled", f"{change}{backend.location}",
        now=now, kind=job.kind))
    return True


def _stop(job: Job, wl: Workload, workloads: Sequence[Workload], backend: ClusterBackend, *,
          now: datetime, events: list[Event]) -> set[Step]:
    """Suspend the object; once its pods are gone mark the job suspended and release."""
    steps: set[Step] = set()
    # The backend may not know yet of a job started moments ago: ask.
    obj = backend.read(job, wl, fetch=not job.suspend)
    if obj is not None and obj.gone:
        obj = None
    integration = integration_of(job)
    if obj is not None and integration.stop_deletes:
        # It cannot be suspended again: stopping it is deleting it, and it does not run again.
        if not obj.suspended and not obj.deleting:
            backend.delete(job, reason="its workload is no longer admitted")
        obj = None
    if obj is not None:
        if not obj.suspended and not obj.deleting:
            try:
                obj = backend.suspend(job) or obj
            except PatchRefused:
                backend.delete(job, reason="it may not be suspended")
                obj = None
        if obj is not None:
            if obj.active_pods > 0:
                return {Step.STOPPING}
            if backend.runs_copy(job):
                backend.delete(job, reason="its workload was evicted")
    if not job.suspend:
        mark_suspended(job, now=now)
        steps.add(Step.SUSPENDED)
    if release_stopped(job, workloads, wl, now=now, events=events):
        steps.add(Step.STOPPED)
    ended = integration.finished(job.status) if integration.stop_deletes else None
    if ended is not None and wl.phase != WorkloadPhase.FINISHED:
        # The deleted object ended with its stop: its workload cannot run again, and
        # finishes as the object did (Kueue does not requeue the workload of a stopped pod).
        wl.refresh_from_db()
        if lifecycle.finish(wl, ended[0], ended[1], now=now, events=events):
            steps.add(Step.FINISHED)
    return steps


# =========================================================================================
# A group of objects admitted as one Workload (Kueue's pod groups)
# =========================================================================================


def _reconcile_group(job: Job, integration: JobGroup, backend: ClusterBackend, *,
                     now: datetime, events: list[Event]) -> set[Step]:
    """One step of a group, run as a unit through the member its Workload is linked to;
    the other members are left to it. Members start together with the PodSetInfo of their
    role, the group reports and finishes as a whole, and stopping it deletes every running
    member. Kueue never recreates a member: one that is gone or failed is waited for
    (``WaitingForReplacementPods``) until the group's owner submits a replacement."""
    workloads = list(job.workloads.all())
    wl = slices.current_slice(workloads)
    if wl is None or placed_on_worker(wl):
        return set()
    return _group_step(job, job.group_members(), wl, workloads, integration, backend,
                       now=now, events=events)


def _reconcile_prebuilt_groups(owner: Job, backend: ClusterBackend, *, now: datetime,
                               events: list[Event]) -> set[Step]:
    """One step of each pod-group Workload built for ``owner`` (a StatefulSet's, a
    LeaderWorkerSet's), run through the jobs that carry its name as their group name. The
    owner counts as running (unsuspended) while any of them runs: what runs is stopped
    through it on an eviction, and its quota is given back only once they are gone."""
    steps: set[Step] = set()
    running = False
    workloads = list(owner.workloads.all())
    # Every group's members in one query, by group name, each group in name order.
    by_group: dict[str, list[Job]] = {wl.name: [] for wl in workloads}
    for member in Job.objects.filter(cluster=owner.cluster, namespace=owner.namespace,
                                     group_name__in=list(by_group)).order_by("name"):
        by_group[member.group_name].append(member)
    for wl in workloads:
        members = by_group[wl.name]
        integration = integration_of(members[0]) if members else None
        if isinstance(integration, JobGroup) and not placed_on_worker(wl):
            steps |= _group_step(owner, members, wl, [wl], integration, backend, now=now,
                                 events=events)
        running = running or any(not member.suspend for member in members)
    if owner.suspend == running:
        owner.suspend = not running
        Job.objects.filter(pk=owner.pk).update(suspend=owner.suspend)
    return steps


def _group_step(owner: Job, members: Sequence[Job], wl: Workload,
                workloads: Sequence[Workload], integration: JobGroup, backend: ClusterBackend,
                *, now: datetime, events: list[Event]) -> set[Step]:
    """Run, clean up or stop the group of ``wl``, as its Workload says."""
    if should_run(wl):
        return _run_group(members, wl, integration, backend, now=now, events=events)
    if wl.phase == WorkloadPhase.FINISHED:
        for member in members:
            if backend.runs_copy(member):
                copy = backend.read(member, wl, fetch=False)
                if copy is not None and not copy.gone:
                    backend.delete(member, reason="its workload finished")
        return set()
    return _stop_group(owner, members, wl, workloads, integration, backend, now=now,
                       events=events)


def _stopped(member: Job) -> bool:
    """Stopped by Kueue (or never to run again): suspended once it had terminated."""
    return member.suspend and integration_of(member).finished(member.status) is not None


def _as_member(member: Job) -> dict[str, Any]:
    return {**member.manifest, "status": member.status or {}}


def _run_group(members: Sequence[Job], wl: Workload, integration: JobGroup,
               backend: ClusterBackend, *, now: datetime, events: list[Event]) -> set[Step]:
    steps: set[Step] = set()
    started = _start_infos(wl, backend, elastic_job=False, now=now, events=events)
    if started is None:
        return {Step.FINISHED}
    infos = {info.name: info for info in started}
    where = f"; running{backend.location}" if backend.location else ""
    current: list[Job] = []
    for member in members:
        if _stopped(member):
            continue
        if member.suspend:
            info = infos.get(integration.member_pod_set(member.manifest))
            if info is None or not backend.create(member, wl, [info]):
                current.append(member)
                continue
            mark_started(member, wl, now=now, events=events, where=where)
            steps.add(Step.STARTED)
        obj = backend.read(member, wl)
        if obj is None:
            continue  # gone: it is waited for, not recreated
        status = dict(obj.status)
        if status and status != member.status:
            member.status = status
            member.save(update_fields=["status", "resource_version", "updated_at"])
        current.append(member)
    manifests = [_as_member(m) for m in current]
    report = integration.group_report(manifests)
    if not lifecycle.sync_job_status(wl, report, now=now, events=events):
        return steps | {Step.RETRY}
    if report.finished is not None:
        steps.add(Step.FINISHED)
        for member in current:
            if not member.suspend and backend.runs_copy(member):
                backend.delete(member, reason="its workload finished")
        return steps
    lifecycle.set_waiting_for_replacement(wl, integration.absent_members(manifests), now=now)
    return steps


def _stop_group(owner: Job, members: Sequence[Job], wl: Workload,
                workloads: Sequence[Workload], integration: JobGroup,
                backend: ClusterBackend, *, now: datetime, events: list[Event]) -> set[Step]:
    """Delete every running member (a pod cannot be gated again), mark them stopped, record
    that the group waits for replacements, then give the quota back."""
    steps: set[Step] = set()
    for member in members:
        if member.suspend:
            continue
        obj = backend.read(member, wl)
        if obj is not None and not obj.gone and not obj.suspended and not obj.deleting:
            backend.delete(member, reason="its workload is no longer admitted")
        mark_suspended(member, now=now)
        steps.add(Step.SUSPENDED)
    if steps:
        remaining = [_as_member(m) for m in members]
        lifecycle.set_waiting_for_replacement(wl, integration.absent_members(remaining),
                                              now=now)
    if release_stopped(owner, workloads, wl, now=now, events=events):
        steps.add(Step.STOPPED)
    return steps
