"""MultiKueue on the hub: dispatch workloads to worker clusters and follow them there.

A hub cluster queue whose admission checks include one with controller
``kueue.x-k8s.io/multikueue`` reserves quota first; ``sync_dispatch`` then does, per workload
(Kueue's ``pkg/controller/admissionchecks/multikueue/workload.go`` ``reconcileGroup``):

1. a workload that finished or holds no quota any more has its remote objects deleted (a
   slice finished because its scale-up replaced it keeps them: they pass to the new slice);
2. a remote copy that finished finishes the hub workload with the remote reason, and the
   remote job's status is copied to the hub job;
3. a remote copy evicted on its worker sets the check to ``Retry`` (the hub workload is
   evicted and dispatched again after its back-off);
4. the first copy **admitted** on its worker wins: the other copies are deleted, the job is
   created on the winner (labels ``kueue.x-k8s.io/prebuilt-workload-name`` and
   ``kueue.x-k8s.io/multikueue-origin``), the check goes ``Ready``, ``clusterName`` is set
   and ``nominatedClusterNames`` cleared. A winner that is unreachable is kept for
   ``MULTIKUEUE_WORKER_LOST_TIMEOUT_SECONDS`` (15 min), then the check goes ``Retry``;
5. while the check is ``Pending``, the workload is nominated by its config's dispatcher
   (``multicluster.core.dispatch.nominate``: AllAtOnce, Incremental, External) and a copy is
   created in each nominated, connected worker's domain, where that worker's own admission
   cycle admits it like any workload. An elastic scale-up slice goes only to the worker of
   the slice it replaces.

``collect_garbage`` deletes remote copies whose hub workload is gone. Everything is written
in one transaction per workload; follow-up work is requested after commit.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from kueueweb import live, reconcile
from multicluster.choices import (
    MULTIKUEUE_CONTROLLER_NAME,
    ClusterRole,
    ConnectionType,
    DispatchState,
)
from multicluster.core import dispatch as core
from multicluster.models import AdmissionCheck, Cluster, Dispatch, MultiKueueConfig
from scheduling import job_reconciler as reconciler
from scheduling import jobframework
from scheduling.choices import EventType, WorkloadPhase
from scheduling.jobframework import registry
from scheduling.models import Event, Job, Workload
from scheduling.scheduler import admission
from scheduling.services import delete_job, local_queue_for, save_new_workload
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle

logger = logging.getLogger(__name__)

DISPATCH_TASK = admission.DISPATCH_TASK
MULTIKUEUE_ORIGIN_LABEL = jobframework.MULTIKUEUE_ORIGIN_LABEL
_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


def _options() -> dict[str, Any]:
    config: dict[str, Any] = settings.KUEUEWEB
    return config


def origin() -> str:
    """The hub's name on the objects it creates in workers (Kueue ``multiKueue.origin``)."""
    return str(_options()["MULTIKUEUE_ORIGIN"])


def request_dispatch(cluster_id: int | None = None) -> None:
    """Ask for a dispatch pass of the hub (the manager domain by default) after commit."""
    hub = cluster_id if cluster_id is not None else Cluster.objects.manager_id()
    if hub is not None:
        reconcile.request(DISPATCH_TASK, hub)


def is_connected(cluster: Cluster) -> bool:
    """A worker counts as connected when its ``Active`` condition is True; a simulated
    worker that was never probed is connected unless it was marked lost."""
    active = cond.find(cluster.conditions, "Active")
    if active is None:
        return cluster.connection_type == ConnectionType.SIMULATED
    return active.get("status") == "True"


@dataclass
class DispatchOutcome:
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    won: list[str] = field(default_factory=list)
    retried: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    next_at: datetime | None = None

    def due(self, moment: datetime | None) -> None:
        if moment is not None and (self.next_at is None or moment < self.next_at):
            self.next_at = moment

    @property
    def changed(self) -> bool:
        return bool(self.created or self.deleted or self.won or self.retried or self.finished)


@dataclass(frozen=True)
class _Hub:
    cluster_id: int
    checks: Mapping[str, MultiKueueConfig | None]  # MultiKueue check name -> its config
    workers: Mapping[str, Cluster]
    connected: frozenset[str]


def _epoch(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def _hub(cluster_id: int) -> _Hub | None:
    checks = list(AdmissionCheck.objects.filter(cluster_id=cluster_id,
                                                controller_name=MULTIKUEUE_CONTROLLER_NAME))
    if not checks:
        return None
    configs = {c.name: c for c in MultiKueueConfig.objects.filter(cluster_id=cluster_id)}
    by_check = {ac.name: configs.get(str((ac.parameters or {}).get("name", "")))
                for ac in checks}
    workers = {c.name: c for c in Cluster.objects.filter(role=ClusterRole.WORKER)}
    connected = frozenset(name for name, c in workers.items() if is_connected(c))
    return _Hub(cluster_id, by_check, workers, connected)


def _check_state(wl: Workload, hub: _Hub) -> dict[str, Any] | None:
    for state in wl.admission_check_states or ():
        if state.get("name") in hub.checks:
            return dict(state)
    return None


# =========================================================================================
# The pass
# =========================================================================================


def sync_dispatch(cluster_id: int, *, now: datetime) -> DispatchOutcome:
    """One dispatch pass over the hub domain ``cluster_id``."""
    outcome = DispatchOutcome()
    hub = _hub(cluster_id)
    if hub is None:
        return outcome
    _update_check_conditions(cluster_id, hub, now=now)
    candidates = Workload.objects.filter(cluster_id=cluster_id).filter(
        Q(phase__in=_RESERVED) | Q(dispatches__isnull=False)).distinct().values_list(
        "pk", flat=True)
    for pk in list(candidates):
        # A worker's queue row after the remote job's and workload's rows
        # (``admission.quota_releases_last``).
        with transaction.atomic(), admission.quota_releases_last():
            wl = (Workload.objects.select_for_update(of=("self",), no_key=True).select_related("job")
                  .filter(pk=pk).first())
            if wl is None:
                continue
            _sync_workload(wl, hub, now=now, outcome=outcome)
            if outcome.changed:
                live.notify(cluster_id)
    return outcome


def _update_check_conditions(cluster_id: int, hub: _Hub, *, now: datetime) -> None:
    """The ``Active`` condition of every MultiKueue AdmissionCheck of the hub, from its
    config's clusters (written only when it changes)."""
    existing = frozenset(hub.workers)
    for check in AdmissionCheck.objects.filter(cluster_id=cluster_id,
                                               controller_name=MULTIKUEUE_CONTROLLER_NAME):
        config = hub.checks.get(check.name)
        status, reason, message = core.check_active_condition(
            [str(c) for c in config.clusters] if config is not None else None, existing,
            hub.connected, config_name=str((check.parameters or {}).get("name", "")))
        conditions = cond.set_condition(check.conditions, "Active", status, reason, message,
                                        now=now)
        if conditions != check.conditions:
            AdmissionCheck.objects.filter(pk=check.pk).update(
                conditions=conditions, resource_version=F("resource_version") + 1)


def _sync_workload(wl: Workload, hub: _Hub, *, now: datetime, outcome: DispatchOutcome) -> None:
    state = _check_state(wl, hub)
    copies = list(Dispatch.objects.filter(workload=wl).select_related("worker", "remote_workload"))
    finished = cond.find(wl.conditions, "Finished")
    if wl.phase == WorkloadPhase.FINISHED and finished and (
            finished.get("reason") == jobframework.WORKLOAD_SLICE_REPLACED):
        # Its remote objects pass to the slice that replaced it.
        Dispatch.objects.filter(workload=wl).delete()
        return
    if wl.phase not in _RESERVED or state is None:
        _delete_copies(wl, copies, now=now, outcome=outcome)
        return
    if cond.is_true(wl.conditions, "Evicted"):
        # Evicted on the hub: stop the remote work; quota is released after.
        _delete_copies(wl, copies, now=now, outcome=outcome)
        return
    # Only what connected workers show is seen (Kueue reads remote workloads through the
    # clients of active clusters only): the copy on a lost worker counts as gone, so a lost
    # winner falls to the workerLostTimeout rule of ``_lost_winner``.
    remote = {d.worker.name: d for d in copies
              if d.remote_workload is not None and d.worker.name in hub.connected}
    views = [_view(d) for d in remote.values()]

    done = core.first_finished(views)
    if done is not None and done.finished is not None:
        _finish_from_remote(wl, remote[done.cluster], done.finished, now=now, outcome=outcome)
        return
    check_name = str(state["name"])
    if state.get("state") == "Ready":
        evicted = [v for v in views if v.evicted]
        if evicted:
            _retry(wl, check_name, f"Workload evicted on worker cluster: {evicted[0].cluster}, "
                   "resetting for re-admission", now=now, outcome=outcome)
            return
    winner = core.admitting_remote(views)
    if winner is not None:
        _keep_winner(wl, check_name, state, remote[winner.cluster], copies, hub, now=now,
                     outcome=outcome)
        return
    if state.get("state") == "Ready":
        _lost_winner(wl, check_name, hub, now=now, outcome=outcome)
        return
    if state.get("state") != "Pending":
        return
    config = hub.checks.get(check_name)
    if config is None:
        return
    kind = _multi_workload_kind(wl.job)
    if kind is not None and wl.job is not None:
        _nominate_component(wl, wl.job, kind, config, copies, hub, now=now, outcome=outcome)
        return
    _nominate(wl, config, copies, hub, now=now, outcome=outcome)


def _view(d: Dispatch) -> core.RemoteCopy:
    remote = d.remote_workload
    assert remote is not None
    admitted = cond.find(remote.conditions, "Admitted")
    finished = cond.find(remote.conditions, "Finished")
    return core.RemoteCopy(
        cluster=d.worker.name,
        admitted_at=_epoch(cond.parse_timestamp(admitted.get("lastTransitionTime")))
        if admitted and admitted.get("status") == "True" else None,
        finished=(str(finished.get("reason", "")), str(finished.get("message", "")))
        if finished and finished.get("status") == "True" else None,
        finished_at=_epoch(cond.parse_timestamp(finished.get("lastTransitionTime")))
        if finished else None,
        evicted=cond.is_true(remote.conditions, "Evicted"),
    )


# =========================================================================================
# Nomination and copies
# =========================================================================================


def _nominate(wl: Workload, config: MultiKueueConfig, copies: list[Dispatch], hub: _Hub, *,
              now: datetime, outcome: DispatchOutcome, only: str = "") -> None:
    configured = [str(c) for c in config.clusters]
    rounds = max((d.round for d in copies), default=0)
    started = max((d.nominated_at for d in copies if d.round == rounds), default=None)
    if only or wl.cluster_name:
        # An elastic scale-up slice stays on the worker of the slice it replaces; one of an
        # owner's Workloads goes to the worker the others are placed on (``only``).
        clusters: tuple[str, ...] = (only or wl.cluster_name,)
        next_at = None
    else:
        nomination = core.nominate(
            config.dispatcher, configured=configured, connected=hub.connected,
            nominated=list(wl.nominated_cluster_names or ()), rounds=rounds,
            round_started_at=_epoch(started), now=now.timestamp(),
            step=int(_options()["DISPATCH_STEP_SIZE"]),
            round_seconds=float(_options()["DISPATCH_ROUND_TIMEOUT_SECONDS"]),
        )
        clusters, rounds = nomination.clusters, nomination.rounds
        next_at = (datetime.fromtimestamp(nomination.next_at, tz=now.tzinfo)
                   if nomination.next_at is not None else None)
        outcome.due(next_at)
    by_worker = {d.worker.name: d for d in copies}
    for d in copies:
        if d.worker.name not in clusters:
            _delete_copy(d, now=now, outcome=outcome)
    for name in clusters:
        worker = hub.workers.get(name)
        if worker is None or name not in hub.connected:
            continue  # nominated but unreachable: retried on a later pass
        existing = by_worker.get(name)
        if existing is not None and existing.remote_workload is not None:
            continue
        remote = _create_copy(wl, worker, now=now)
        if existing is None:
            Dispatch.objects.create(workload=wl, worker=worker, remote_workload=remote,
                                    state=DispatchState.CREATED, round=max(rounds, 1),
                                    nominated_at=now)
        else:
            Dispatch.objects.filter(pk=existing.pk).update(remote_workload=remote,
                                                           state=DispatchState.CREATED)
        outcome.created.append(f"{name}/{wl.namespace}/{wl.name}")
        admission.request_admission(worker.pk)
    if list(clusters) != list(wl.nominated_cluster_names or ()):
        Workload.objects.filter(pk=wl.pk).update(nominated_cluster_names=list(clusters),
                                                 resource_version=F("resource_version") + 1)


def _create_copy(wl: Workload, worker: Cluster, *, now: datetime) -> Workload:
    """The remote Workload (Kueue ``cloneForCreate``): same name and spec, labels without the
    job uid plus the origin, annotations as they are; no status."""
    stale = Workload.objects.filter(cluster=worker, namespace=wl.namespace, name=wl.name)
    for old in stale:
        _delete_remote(old, now=now)
    labels = {k: v for k, v in (wl.labels or {}).items() if k != jobframework.JOB_UID_LABEL}
    labels[MULTIKUEUE_ORIGIN_LABEL] = origin()
    job = None
    replaced = (wl.annotations or {}).get(jobframework.WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION)
    if replaced:
        # A scale-up slice joins the job the worker already runs for the chain.
        namespace, _, name = str(replaced).partition("/")
        job = Job.objects.filter(cluster=worker, workloads__namespace=namespace,
                                 workloads__name=name).first()
    return save_new_workload(Workload(
        cluster=worker, namespace=wl.namespace, name=wl.name, job=job,
        queue_name=wl.queue_name,
        local_queue=local_queue_for(worker, wl.namespace, wl.queue_name),
        priority_class_name=wl.priority_class_name,
        priority_class_source=wl.priority_class_source, priority=wl.priority,
        active=True, maximum_execution_time_seconds=wl.maximum_execution_time_seconds,
        pod_sets=[dict(ps) for ps in wl.pod_sets], labels=labels,
        annotations=dict(wl.annotations or {}),
    ))


def _delete_remote(remote: Workload, *, now: datetime) -> None:
    """Delete a remote workload and the job created for it on its worker (only ours)."""
    worker_id = lifecycle.domain_of(remote)
    freed = remote.cluster_queue_id if remote.phase in _RESERVED else None
    job = remote.job
    remote.delete()
    if job is not None and _ours(job):
        _delete_remote_job(remote, job, now=now)
    if freed is not None:
        admission.on_quota_released(worker_id, [freed], now=now)
    else:
        admission.request_admission(worker_id)
    reconcile.request_cluster_sync(worker_id)


def _delete_remote_job(remote: Workload, job: Job, *, now: datetime) -> None:
    """The worker's job of the deleted ``remote`` Workload, once no Workload is left to it."""
    if _multi_workload_kind(job) is not None:
        _delete_remote_component(remote, job, now=now)
        return
    if job.workloads.exists():
        return
    if reconciler.runs_through_members(job):
        # A StatefulSet goes with its Pods, as the worker's garbage collector takes them.
        delete_job(job, now=now)
        return
    # A group's members go together (Kueue's pod adapter deletes every member's copy).
    members = job.group_members() if job.group_name else [job]
    Job.objects.filter(pk__in=[m.pk for m in members if _ours(m)]).delete()


def _ours(job: Job) -> bool:
    """A worker's job this hub created (its origin label names the hub)."""
    labels = (job.manifest.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MULTIKUEUE_ORIGIN_LABEL) == origin())


def _delete_copy(d: Dispatch, *, now: datetime, outcome: DispatchOutcome) -> None:
    if d.remote_workload is not None:
        _delete_remote(d.remote_workload, now=now)
    outcome.deleted.append(f"{d.worker.name}/{d.workload_id}")
    d.delete()


def _delete_copies(wl: Workload, copies: Iterable[Dispatch], *, now: datetime,
                   outcome: DispatchOutcome) -> None:
    for d in copies:
        _delete_copy(d, now=now, outcome=outcome)
    if wl.nominated_cluster_names and wl.phase not in _RESERVED:
        Workload.objects.filter(pk=wl.pk).update(nominated_cluster_names=[])


# =========================================================================================
# The winner
# =========================================================================================


def _keep_winner(wl: Workload, check_name: str, state: Mapping[str, Any], won: Dispatch,
                 copies: list[Dispatch], hub: _Hub, *, now: datetime,
                 outcome: DispatchOutcome) -> None:
    worker = won.worker
    for d in copies:
        if d.pk != won.pk:
            _delete_copy(d, now=now, outcome=outcome)
    remote = won.remote_workload
    assert remote is not None
    _propagate_scale_down(wl, remote, now=now)
    _ensure_remote_job(wl, remote, worker)
    if won.state != DispatchState.WON:
        Dispatch.objects.filter(pk=won.pk).update(state=DispatchState.WON)
    _sync_job_status(wl, remote, now=now)
    if state.get("state") in ("Retry", "Rejected"):
        return
    if wl.cluster_name and wl.cluster_name != worker.name:
        logger.error("workload %s/%s is placed on %s, not on %s", wl.namespace, wl.name,
                     wl.cluster_name, worker.name)
        return
    if state.get("state") != "Ready":
        Workload.objects.filter(pk=wl.pk).update(
            cluster_name=worker.name, nominated_cluster_names=[],
            resource_version=F("resource_version") + 1)
        admission.set_admission_check_states(wl.pk, [{
            "name": check_name, "state": "Ready",
            "message": f"The workload was admitted on {worker.name}"}], now=now)
        outcome.won.append(f"{wl.namespace}/{wl.name}@{worker.name}")


def _admitted_counts(remote: Workload) -> dict[str, int]:
    """Pods the copy may run per pod set: its admitted counts, capped by a scale-down in
    place."""
    spec = {ps.get("name"): int(ps.get("count", 1)) for ps in remote.pod_sets}
    return {str(psa.get("name")): min(int(psa.get("count", 0)), spec.get(psa.get("name"), 0))
            for psa in (remote.admission or {}).get("podSetAssignments", ())}


def _propagate_scale_down(wl: Workload, remote: Workload, *, now: datetime) -> None:
    """An elastic job shrunk on the hub shrinks its copy in place (Kueue updates the remote
    spec for a scale-down); the worker frees the quota and the job follows."""
    counts = {ps.get("name"): int(ps.get("count", 1)) for ps in wl.pod_sets}
    pod_sets = [dict(ps) for ps in remote.pod_sets]
    changed = False
    for ps in pod_sets:
        wanted = counts.get(ps.get("name"))
        if wanted is not None and wanted < int(ps.get("count", 1)):
            ps["count"] = wanted
            changed = True
    if not changed:
        return
    remote.pod_sets = pod_sets
    remote.save(update_fields=["pod_sets", "resource_version", "updated_at"])
    worker_id = lifecycle.domain_of(remote)
    if remote.cluster_queue_id is not None and remote.phase in _RESERVED:
        admission.on_quota_released(worker_id, [remote.cluster_queue_id], now=now)
    if remote.job is not None and not reconciler.runs_through_members(remote.job):
        integration = reconciler.integration_of(remote.job)
        remote.job.manifest = integration.scale(
            remote.job.manifest, {str(ps.get("name")): int(ps.get("count", 1)) for ps in pod_sets})
        remote.job.save(update_fields=["manifest", "resource_version", "updated_at"])
    reconcile.request_cluster_sync(worker_id)


def _ensure_remote_job(wl: Workload, remote: Workload, worker: Cluster) -> None:
    """The job on the winner, made from the hub job once the remote copy is admitted (every
    member of a group); an elastic job's parallelism follows the admitted slice."""
    hub_job = wl.job
    if hub_job is None:
        return
    kind = _multi_workload_kind(hub_job)
    if kind is not None:
        _ensure_remote_owner(hub_job, kind, remote, worker)
        return
    if reconciler.runs_through_members(hub_job):
        # Its Workload was built for it (a StatefulSet's): the object itself goes, once,
        # and the worker's controller makes the Pods that join the Workload there.
        if remote.job is None:
            _link_remote_job(remote, _copy_to_worker(hub_job, remote, worker,
                                                     _prebuilding_kind(hub_job)), worker)
        return
    integration = reconciler.integration_of(hub_job)
    if hub_job.group_name and isinstance(integration, jobframework.JobGroup):
        _ensure_remote_group(hub_job, remote, worker, integration)
        return
    if remote.job is not None:
        job = remote.job
        annotations = (job.manifest.get("metadata") or {}).get("annotations") or {}
        if integration.elastic and jobframework.is_elastic(annotations, slices_enabled=True):
            scaled = integration.scale(job.manifest, _admitted_counts(remote))
            if scaled != job.manifest:
                job.manifest = scaled
                job.save(update_fields=["manifest", "resource_version", "updated_at"])
                reconcile.request_cluster_sync(int(worker.pk))
        return
    _link_remote_job(remote, _copy_to_worker(hub_job, remote, worker, integration), worker)


def _link_remote_job(remote: Workload, job: Job, worker: Cluster) -> None:
    Workload.objects.filter(pk=remote.pk).update(job=job)
    remote.job = job
    reconcile.request_cluster_sync(int(worker.pk))


@runtime_checkable
class _Adapter(Protocol):
    """What a kind's MultiKueue adapter gives for the worker's copy."""

    def multikueue_copy(self, manifest: Mapping[str, Any], *,
                        labels: Mapping[str, str]) -> dict[str, Any]: ...


def _prebuilding_kind(job: Job) -> _Adapter:
    """The kind of an object whose Workloads are built for it; its MultiKueue adapter."""
    kind = registry.by_kind(job.api_version, job.kind)
    if not isinstance(kind, _Adapter):
        raise LookupError(f"no MultiKueue adapter is registered for {job.api_version} "
                          f"{job.kind}")
    return kind


def _copy_to_worker(hub_job: Job, remote: Workload, worker: Cluster,
                    integration: _Adapter) -> Job:
    """The integration's ``multikueue_copy`` of a hub job, stored on ``worker`` for the
    remote Workload (origin and prebuilt-workload labels), suspended until it runs there."""
    manifest = integration.multikueue_copy(hub_job.manifest, labels={
        MULTIKUEUE_ORIGIN_LABEL: origin(), jobframework.PREBUILT_WORKLOAD_LABEL: remote.name})
    job = Job(cluster=worker, namespace=hub_job.namespace, name=hub_job.name,
              api_version=hub_job.api_version, kind=hub_job.kind,
              group_name=hub_job.group_name)
    manifest["metadata"]["uid"] = str(job.uid)
    job.manifest = manifest
    job.save()
    return job


def _ensure_remote_group(hub_job: Job, remote: Workload, worker: Cluster,
                         integration: jobframework.GenericJob) -> None:
    """Every member of the hub's group copied to the winner, each with the group's
    Workload as its prebuilt one (Kueue's pod adapter syncs each member pod of the group);
    a member that joins later, a replacement, is copied on a later pass. The remote
    Workload is linked to the first member by name, as on the hub."""
    on_worker = Job.objects.filter(
        cluster=worker, namespace=hub_job.namespace, api_version=hub_job.api_version,
        kind=hub_job.kind, group_name=hub_job.group_name)
    present = set(on_worker.values_list("name", flat=True))
    # A member that ended (stopped by an eviction, failed) is not run again: its
    # replacement is.
    copied = [_copy_to_worker(member, remote, worker, integration)
              for member in hub_job.group_members()
              if member.name not in present and integration.finished(member.status) is None]
    first = min(on_worker, key=lambda m: m.name, default=None)
    if remote.job is None and first is not None:
        Workload.objects.filter(pk=remote.pk).update(job=first)
        remote.job = first
    if copied:
        reconcile.request_cluster_sync(int(worker.pk))


def _sync_job_status(wl: Workload, remote: Workload, *, now: datetime) -> None:
    """The remote job's status on the hub job, and the PodsReady/reclaim it implies."""
    hub_job, remote_job = wl.job, remote.job
    if hub_job is None or remote_job is None or _multi_workload_kind(hub_job) is not None:
        # A multi-Workload owner's status is its own controller's on each side (a
        # LeaderWorkerSet has no managedBy): nothing comes back.
        return
    if reconciler.runs_through_members(hub_job):
        # Kueue's StatefulSet adapter syncs no status: the hub's own controller would
        # overwrite it, and the hub's Pods, gated, are not the ones running.
        return
    integration = reconciler.integration_of(remote_job)
    report: jobframework.JobReport
    if remote_job.group_name and isinstance(integration, jobframework.JobGroup):
        # Each member's status comes back to the hub member of its name; the group reports
        # as a whole.
        remote_members = remote_job.group_members()
        hub_members = {m.name: m for m in hub_job.group_members()}
        for member in remote_members:
            if member.name in hub_members:
                _mirror_status(hub_members[member.name], member, integration, now=now)
        if all(m.suspend for m in remote_members):
            return
        report = integration.group_report(
            [{**m.manifest, "status": m.status or {}} for m in remote_members])
    else:
        _mirror_status(hub_job, remote_job, integration, now=now)
        if remote_job.suspend:
            return
        report = integration.report(
            remote_job.manifest, dict(remote_job.status or {}),
            wanted=sum(_admitted_counts(remote).values()), ready_pods=0)
    # The hub finishes its workload from the remote workload (``_finish_from_remote``).
    report = dataclasses.replace(report, finished=None)
    wl.refresh_from_db()
    events: list[Event] = []
    lifecycle.sync_job_status(wl, report, now=now, events=events)
    Event.objects.bulk_create(events)


def _mirror_status(hub_job: Job, remote_job: Job, integration: jobframework.GenericJob, *,
                   now: datetime) -> None:
    """The worker's job status on the hub's job, as the kind takes it
    (``multikueue_status``), and whether it runs."""
    status = integration.multikueue_status(hub_job.manifest, hub_job.status or {},
                                           remote_job.status or {}, now=now)
    if status != (hub_job.status or {}) or hub_job.suspend != remote_job.suspend:
        hub_job.status = status
        hub_job.suspend = remote_job.suspend
        hub_job.save(update_fields=["status", "suspend", "resource_version", "updated_at"])


def _finish_from_remote(wl: Workload, d: Dispatch, finished: tuple[str, str], *,
                        now: datetime, outcome: DispatchOutcome) -> None:
    remote = d.remote_workload
    assert remote is not None
    _sync_job_status(wl, remote, now=now)
    wl.refresh_from_db()
    reason, message = finished
    events: list[Event] = []
    if lifecycle.finish(wl, reason, message, now=now, events=events):
        outcome.finished.append(f"{wl.namespace}/{wl.name}")
    Event.objects.bulk_create(events)


def _retry(wl: Workload, check_name: str, message: str, *, now: datetime,
           outcome: DispatchOutcome) -> None:
    admission.set_admission_check_states(
        wl.pk, [{"name": check_name, "state": "Retry", "message": message}], now=now)
    lifecycle.workload_event(wl, "MultiKueueRetry", message, now=now,
                             type_=EventType.WARNING).save()
    outcome.retried.append(f"{wl.namespace}/{wl.name}")


def _lost_winner(wl: Workload, check_name: str, hub: _Hub, *, now: datetime,
                 outcome: DispatchOutcome) -> None:
    """The check is Ready but no admitted copy is seen: keep waiting for an unreachable
    winner until ``lostSince + workerLostTimeout``, then dispatch again."""
    worker = hub.workers.get(wl.cluster_name) if wl.cluster_name else None
    if worker is not None and wl.cluster_name not in hub.connected:
        timeout = float(_options()["MULTIKUEUE_WORKER_LOST_TIMEOUT_SECONDS"])
        lost_since = worker.lost_since or now
        if not core.winner_lost(_epoch(lost_since), now=now.timestamp(),
                                worker_lost_timeout=timeout):
            outcome.due(lost_since + timedelta(seconds=timeout))
            return
        _retry(wl, check_name, "Admitting remote lost", now=now, outcome=outcome)
        return
    if not wl.cluster_name:
        _retry(wl, check_name, "Unexpected: the workload has no cluster name", now=now,
               outcome=outcome)
        return
    _retry(wl, check_name, "Admitting remote no longer exists", now=now, outcome=outcome)


# =========================================================================================
# An owner of several Workloads (Kueue's multi-Workload adapter: a LeaderWorkerSet)
# =========================================================================================


@runtime_checkable
class MultiWorkloadKind(Protocol):
    """A kind whose object has several Workloads that MultiKueue sends to one worker:
    ``expected_workload_count`` of them, by ``workload_index`` (the lowest, the primary,
    chooses the worker), and the object created there (``multikueue_object``), which
    makes no Workloads of its own but takes those the hub dispatches."""

    def expected_workload_count(self, manifest: Mapping[str, Any]) -> int: ...

    def workload_index(self, annotations: Mapping[str, Any]) -> int: ...

    def multikueue_object(self, manifest: Mapping[str, Any], *,
                          origin: str) -> dict[str, Any]: ...


def _multi_workload_kind(job: Job | None) -> MultiWorkloadKind | None:
    kind = registry.by_kind(job.api_version, job.kind) if job is not None else None
    return kind if isinstance(kind, MultiWorkloadKind) else None


def _nominate_component(wl: Workload, owner: Job, kind: MultiWorkloadKind,
                        config: MultiKueueConfig, copies: list[Dispatch], hub: _Hub, *,
                        now: datetime, outcome: DispatchOutcome) -> None:
    """Kueue's rules for one of the Workloads of ``owner``: none is dispatched before all
    exist; once one of them is placed on a worker, the others go there only; until then
    only the primary is nominated, as any workload is."""
    siblings = list(Workload.objects.filter(cluster_id=hub.cluster_id, job=owner)
                    .exclude(pk=wl.pk))
    if len(siblings) + 1 < kind.expected_workload_count(owner.manifest):
        return  # every Workload of the owner is created first
    placed = {s.cluster_name for s in siblings if s.cluster_name}
    if len(placed) > 1:
        logger.error("the Workloads of %s %s/%s are placed on different workers: %s",
                     owner.kind, owner.namespace, owner.name, sorted(placed))
        return
    index = kind.workload_index(wl.annotations or {})
    lower = [kind.workload_index(s.annotations or {}) for s in siblings]
    if not placed and (index < 0 or any(0 <= other < index for other in lower)):
        return  # the primary chooses the worker
    # Kueue's ``syncToSingleCluster`` where the others are placed.
    _nominate(wl, config, copies, hub, now=now, outcome=outcome,
              only=placed.pop() if placed else "")


def _ensure_remote_owner(hub_job: Job, kind: MultiWorkloadKind, remote: Workload,
                         worker: Cluster) -> None:
    """The owner on the winner, created once for all its Workloads (with the origin label
    and the hub's uid, which names its Workloads as on the hub), and the admitted copy
    linked to it: its controller makes that group's pods there, which the copy admits."""
    if remote.job is not None:
        return
    owner = Job.objects.filter(cluster=worker, namespace=hub_job.namespace,
                               api_version=hub_job.api_version, kind=hub_job.kind,
                               name=hub_job.name).first()
    if owner is None or not _ours(owner):
        if owner is not None:
            logger.error("%s %s/%s on %s was not created by this hub", hub_job.kind,
                         hub_job.namespace, hub_job.name, worker.name)
            return
        owner = Job(cluster=worker, namespace=hub_job.namespace, name=hub_job.name,
                    api_version=hub_job.api_version, kind=hub_job.kind, suspend=True)
        owner.manifest = kind.multikueue_object(hub_job.manifest, origin=origin())
        owner.manifest["metadata"]["uid"] = str(owner.uid)
        owner.save()
    Workload.objects.filter(pk=remote.pk).update(job=owner,
                                                 resource_version=F("resource_version") + 1)
    remote.job = owner
    reconcile.request(reconcile.REPLICAS_TASK, owner.pk)
    reconcile.request_cluster_sync(int(worker.pk))


def _delete_remote_component(remote: Workload, owner: Job, *, now: datetime) -> None:
    """One Workload of a multi-Workload owner left its worker: the pods of its group go
    with it, and the owner with its last Workload."""
    Job.objects.filter(cluster=owner.cluster, namespace=owner.namespace,
                       group_name=remote.name).delete()
    if not owner.workloads.exists():
        delete_job(owner, now=now)


# =========================================================================================
# Garbage collection, triggers
# =========================================================================================


def collect_garbage(*, now: datetime) -> int:
    """Delete remote copies (and their jobs) whose hub workload no longer exists, on every
    connected worker (Kueue's garbage collector, every minute); a lost worker's leftovers
    go once it is back."""
    hub_id = Cluster.objects.manager_id()
    hub_keys = set(Workload.objects.filter(cluster__role=ClusterRole.MANAGER).filter(
        cluster_id=hub_id or 0).values_list("namespace", "name"))
    removed = 0
    with transaction.atomic():
        for remote in Workload.objects.filter(cluster__role=ClusterRole.WORKER).select_related(
                "job", "cluster"):
            if (remote.labels or {}).get(MULTIKUEUE_ORIGIN_LABEL) != origin():
                continue
            if (remote.namespace, remote.name) in hub_keys or not is_connected(remote.cluster):
                continue
            _delete_remote(remote, now=now)
            removed += 1
    return removed


def sync_and_reschedule(cluster_id: int, *, now: datetime) -> DispatchOutcome:
    """``sync_dispatch``, then a wake-up at its next deadline (an incremental round, a lost
    worker's timeout) when that comes before the periodic pass would."""
    outcome = sync_dispatch(cluster_id, now=now)
    if outcome.next_at is not None:
        delay = (outcome.next_at - now).total_seconds()
        if delay < float(_options()["CLUSTER_SYNC_INTERVAL_SECONDS"]):
            with transaction.atomic():
                reconcile.request_later(DISPATCH_TASK, max(delay, 0.0), cluster_id)
    return outcome


def set_nominated_clusters(wl: Workload, names: Any, *, now: datetime) -> Workload:
    """An external dispatcher's ``status.nominatedClusterNames`` (Kueue's External mode):
    only while the MultiKueue check is Pending, quota is reserved and no worker won.
    Raises ValidationError naming ``status.nominatedClusterNames``."""
    from django.core.exceptions import ValidationError

    path = "status.nominatedClusterNames"
    hub = _hub(lifecycle.domain_of(wl))
    state = _check_state(wl, hub) if hub is not None else None
    if hub is None or state is None:
        raise ValidationError({path: ["the workload has no MultiKueue admission check"]})
    config = hub.checks.get(str(state["name"]))
    configured = [str(c) for c in config.clusters] if config is not None else []
    problems = core.validate_nominated(names, configured)
    if config is not None and config.dispatcher != core.EXTERNAL:
        problems.append(f"MultiKueueConfig {config.name} uses the {config.dispatcher} "
                        "dispatcher: only an External one takes nominations")
    if not problems and (wl.phase not in _RESERVED or state.get("state") != "Pending"):
        problems.append("can only be set while quota is reserved and the MultiKueue check "
                        "is Pending")
    if not problems and wl.cluster_name:
        problems.append(f"the workload was admitted on {wl.cluster_name} already")
    if problems:
        raise ValidationError({path: problems})
    with transaction.atomic():
        Workload.objects.filter(pk=wl.pk).update(nominated_cluster_names=list(names),
                                                 resource_version=F("resource_version") + 1)
        request_dispatch(lifecycle.domain_of(wl))
    wl.refresh_from_db()
    return wl
