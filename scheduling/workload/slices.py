"""Elastic jobs: scale an admitted job through workload slices (Kueue KEP-77, dynamically
sized jobs).

A job of an elastic kind (``GenericJob.elastic``; a batch/v1 Job) annotated
``kueue.x-k8s.io/elastic-job: "true"`` (with the ``ElasticJobsViaWorkloadSlices`` gate on, the
default) may change the counts of its scalable pod sets (``GenericJob.scalable_pod_sets``: a
Job's ``spec.parallelism``) while it runs, without being suspended or requeued:

* **scale-up** of an admitted slice creates a new *slice* (a Workload) with the full new
  counts, annotated as the replacement of the old one. The admission cycle checks only the
  extra pods, on the flavors the old slice holds; once the new slice is admitted the old one
  finishes with reason ``WorkloadSliceReplaced`` in the same transaction, and the job's
  extra pods are ungated. Until then the job runs at its old size.
* **scale-down** (some pod set smaller, none larger) updates the admitted slice's pod counts
  in place; the quota of the removed
  pods is free at once (usage is derived from the smaller count) and parked workloads of the
  cohort tree get another chance.

Every slice of a job carries ``kueue.x-k8s.io/workload-slice-name`` (the chain's first slice);
a replacement also carries ``kueue.x-k8s.io/workload-slice-replacement-for: <ns>/<old>``. The
chain lives in the database only, so it survives restarts of every process.

Kueue sources: ``pkg/workloadslicing/workloadslicing.go`` (EnsureWorkloadSlices,
normalizeActiveSlices), ``pkg/controller/jobframework/reconciler.go`` (prepareWorkloadSlice),
``pkg/scheduler/scheduler.go`` (replaceWorkloadSlice).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from kueueweb import reconcile
from kueueweb.roles import can_operate_in
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.services import ConflictError, invalid, local_queue_for, save_new_workload
from scheduling.validation import FieldError
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle

WORKLOAD_SLICE_REPLACEMENT_FOR = jobframework.WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION
# The scheduling gate on an elastic job's pods until its slice is admitted.
ELASTIC_JOB_SCHEDULING_GATE = "kueue.x-k8s.io/elastic-job"

# Finished reasons (Kueue WorkloadSliceReplaced, WorkloadFinishedReasonOutOfSync).
REASON_SLICE_REPLACED = jobframework.WORKLOAD_SLICE_REPLACED
REASON_OUT_OF_SYNC = "OutOfSync"
OUT_OF_SYNC_MESSAGE = "The workload slice is out of sync with its parent job"

_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


# =========================================================================================
# The slice chain of a job
# =========================================================================================


def _domain(obj: Job | Workload) -> int:
    assert obj.cluster_id is not None
    return int(obj.cluster_id)


def key_of(wl: Workload) -> str:
    return f"{wl.namespace}/{wl.name}"


def replacement_for(wl: Workload) -> str | None:
    """``<ns>/<name>`` of the slice ``wl`` replaces, if it is a scale-up slice."""
    value = (wl.annotations or {}).get(WORKLOAD_SLICE_REPLACEMENT_FOR)
    return str(value) if value else None


def slice_name(wl: Workload) -> str:
    """The name of the chain's first slice (Kueue ``SliceName``)."""
    return str((wl.annotations or {}).get(jobframework.WORKLOAD_SLICE_NAME_ANNOTATION) or wl.name)


def holds_quota(wl: Workload) -> bool:
    """Quota reserved and not being evicted."""
    return wl.phase in _RESERVED and not cond.is_true(wl.conditions, "Evicted")


def ordered(workloads: Iterable[Workload]) -> list[Workload]:
    """Slices oldest first, by creation time then id (Kueue sorts by time, then UID)."""
    return sorted(workloads, key=lambda wl: (wl.created_at, wl.pk or 0))


def not_finished(workloads: Iterable[Workload]) -> list[Workload]:
    return ordered(wl for wl in workloads if wl.phase != WorkloadPhase.FINISHED)


def current_slice(workloads: Iterable[Workload]) -> Workload | None:
    """The slice the job runs on: the newest one holding quota and not being evicted, else
    the newest not-finished one (a pending or an evicted workload), else None.

    During a scale-up the job has two slices, the admitted one and its pending
    replacement; the job keeps running on the admitted one.
    """
    live = not_finished(workloads)
    holding = [wl for wl in live if holds_quota(wl)]
    if holding:
        return holding[-1]
    return live[-1] if live else None


def pending_replacement(workloads: Iterable[Workload], of: Workload) -> Workload | None:
    """The not-finished slice waiting to replace ``of`` (a pending scale-up), if any."""
    target = key_of(of)
    for wl in reversed(not_finished(workloads)):
        if wl.pk != of.pk and replacement_for(wl) == target and wl.phase not in _RESERVED:
            return wl
    return None


def pod_set_counts(pod_sets: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {str(ps.get("name", jobframework.DEFAULT_POD_SET_NAME)): int(ps.get("count", 1))
            for ps in pod_sets}


def _now(now: datetime | None) -> datetime:
    return now or timezone.now()


@dataclass(frozen=True)
class ScaleResult:
    """What a scale request did.

    ``action`` is ``unchanged``, ``updated`` (a pending workload's counts changed),
    ``scale-down`` (the admitted slice shrank in place), ``scale-up`` (a new slice waits
    for admission) or ``scale-up-updated`` (the waiting slice's counts changed).
    ``previous`` and ``counts`` are the scalable counts (by pod set) before and after.
    """

    job: Job
    workload: Workload | None
    action: str
    previous: dict[str, int]
    counts: dict[str, int]


def describe_counts(counts: Mapping[str, int]) -> str:
    """``3`` for a kind with one scalable pod set, ``workers=3, evaluators=1`` for more."""
    if len(counts) == 1:
        return str(next(iter(counts.values())))
    return ", ".join(f"{name}={count}" for name, count in counts.items())


# =========================================================================================
# Scaling a job (the kind's webhook + EnsureWorkloadSlices)
# =========================================================================================

NOT_ELASTIC_MESSAGE = (
    "Forbidden: cannot change while the job's workload holds quota: only elastic jobs "
    f'(annotation {jobframework.ELASTIC_JOB_ANNOTATION}: "true", with the '
    "ElasticJobsViaWorkloadSlices feature gate on) scale while admitted; deactivate the "
    "workload first")
FINISHED_MESSAGE = "Forbidden: the job has finished"
# Why a job cannot be scaled now (``scale_refusal``); a kind adds its own.
REFUSED_FINISHED = jobframework.ScaleRefusal(
    FINISHED_MESSAGE, "The job has finished: there is nothing left to scale")
REFUSED_NO_WORKLOAD = jobframework.ScaleRefusal(
    "Forbidden: this kind makes no Workload (its jobs are queued, each on its own): there "
    "are no counts of its own to scale", "It makes no Workload: its jobs are scaled each on "
    "its own")
REFUSED_CREATED_ON_CLUSTER = jobframework.ScaleRefusal(
    "Forbidden: the job was created on its cluster (kubectl), which runs that object in "
    "place: change it there (kubectl scale, kubectl edit), not through kueueweb",
    "Created on the cluster (kubectl): change it there, not through kueueweb")
REFUSED_NOT_ELASTIC = jobframework.ScaleRefusal(
    NOT_ELASTIC_MESSAGE, f'Only elastic jobs (annotation {jobframework.ELASTIC_JOB_ANNOTATION}: '
    '"true") can be scaled while admitted')


def queued_kind(job: Job) -> jobframework.GenericJob | None:
    """The job's kind when it makes a Workload; None for one that makes none (a CronJob),
    which has nothing to finish, slice or scale itself."""
    kind = registry.by_kind(job.api_version, job.kind)
    return kind if isinstance(kind, jobframework.GenericJob) else None


def job_finished(job: Job) -> bool:
    kind = queued_kind(job)
    return kind is not None and kind.finished(job.status) is not None


def _slices_enabled() -> bool:
    options: dict[str, Any] = settings.KUEUEWEB
    return bool(options["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"])


def is_elastic_job(job: Job) -> bool:
    """The job's kind scales through slices, the job asks for it and the gate is on."""
    annotations = ((job.manifest or {}).get("metadata") or {}).get("annotations") or {}
    kind = queued_kind(job)
    return kind is not None and kind.elastic and jobframework.is_elastic(
        annotations, slices_enabled=_slices_enabled())


def scale_refusal(job: Job, workloads: Iterable[Workload]) -> jobframework.ScaleRefusal | None:
    """Why the job's state allows no change of its counts (None if it allows one).
    ``scale_job`` refuses, and the pages disable their control, on the same rule. Finished:
    the kind says so, or every workload it had finished (a finished workload does not
    change); then what the kind forbids (a Job's partial admission while it runs); then an
    admitted job that is not elastic."""
    workloads = list(workloads)
    kind = queued_kind(job)
    if kind is None:
        return REFUSED_NO_WORKLOAD
    if job.created_on_cluster:
        return REFUSED_CREATED_ON_CLUSTER
    if job_finished(job) or (workloads and all(
            wl.phase == WorkloadPhase.FINISHED for wl in workloads)):
        return REFUSED_FINISHED
    refused = kind.scale_refusal(job.manifest or {}, suspended=job.suspend)
    if refused is not None:
        return refused
    current = current_slice(workloads)
    if current is not None and holds_quota(current) and not is_elastic_job(job):
        return REFUSED_NOT_ELASTIC
    return None


def scalable_pod_sets(job: Job) -> list[jobframework.ScalablePodSet]:
    kind = queued_kind(job)
    return [] if kind is None else kind.scalable_pod_sets(job.manifest or {})


def count_field(ps: jobframework.ScalablePodSet) -> str:
    """The key naming a pod set's count in a scale request (a form field, the REST API's
    shorthand): the spec field itself when the count is a field of the spec (a Job's
    ``parallelism``), else ``podSets.<name>``."""
    field = ps.path.removeprefix("spec.")
    if field != ps.path and field.isidentifier():
        return field
    return f"podSets.{ps.name}"


def _requested_counts(job: Job, counts: Any) -> dict[str, int]:
    """The counts asked for, by pod set, each an int32 >= 0 (Kubernetes' rule for a count)
    named by its field path. A bare value is the count of a kind's only scalable pod set."""
    scalable = scalable_pod_sets(job)
    if not scalable:
        raise invalid([FieldError("kind", f"a {job.kind} has no pod set that scales")])
    if not isinstance(counts, Mapping):
        if len(scalable) > 1:
            raise invalid([FieldError("podSets", "name the pod sets to scale: "
                                      + ", ".join(ps.name for ps in scalable))])
        counts = {scalable[0].name: counts}
    names = {ps.name for ps in scalable}
    errors = [FieldError("podSets", f"{name!r} is not a pod set that scales: the pod sets "
                         "that scale are " + ", ".join(sorted(names)))
              for name in counts if name not in names]
    wanted: dict[str, int] = {}
    for ps in scalable:
        if ps.name in counts:
            parsed = jobframework.int_value(counts[ps.name], ps.path, errors, minimum=0)
            if parsed is not None:
                wanted[ps.name] = parsed
    if errors:
        raise invalid(errors)
    return wanted


def _refused(refusal: jobframework.ScaleRefusal, paths: Iterable[str]) -> Exception:
    return invalid([FieldError(path, refusal.message) for path in paths])


def scale_job(job: Job, counts: Any, *, user: Any = None,
              now: datetime | None = None) -> ScaleResult:
    """Set the counts of a job's scalable pod sets (``counts``: by pod set name, or the one
    count of a kind with one scalable pod set, such as a Job's ``spec.parallelism``), as
    ``kubectl scale``/``patch`` would, and bring its workload slices in line (the kind's
    webhook, then Kueue's ``EnsureWorkloadSlices``).

    * a queued job (its workload holds no quota): the pending workload's counts change;
    * an admitted elastic job: a scale-down (some pod set smaller, none larger) shrinks the
      admitted slice in place and frees quota at once; a scale-up creates (or resizes) the
      replacement slice, which the admission cycle admits for the extra pods only; scaling
      back while a scale-up waits finishes the waiting slice (``OutOfSync``);
    * refused, naming the count's field path: a value that is not an int32 >= 0, a finished
      job, what the kind forbids (``scale_refusal``, ``validate_scale``), and an admitted
      job that is not elastic.

    The Workload's pod counts are the kind's ``pod_sets`` of the scaled object (a Job runs
    min(parallelism, completions) pods, so scaling beyond ``completions`` changes the spec
    but not the pods). Everything is written in one transaction holding the job's row lock.
    Raises ValidationError (by field path), PermissionDenied or ConflictError.
    """
    if user is not None and not can_operate_in(user, job.namespace):
        raise PermissionDenied(f"You may not scale jobs in namespace {job.namespace!r}.")
    integration = queued_kind(job)
    if integration is None:
        raise invalid([FieldError("kind", REFUSED_NO_WORKLOAD.message)])
    requested = _requested_counts(job, counts)
    now = _now(now)
    options: dict[str, Any] = settings.KUEUEWEB
    with transaction.atomic():
        # FOR NO KEY UPDATE: the job's key never changes here, and the cluster's sync pass
        # inserts pods and workloads that reference this row (FOR KEY SHARE) meanwhile.
        locked = Job.objects.select_for_update(no_key=True).filter(pk=job.pk).first()
        if locked is None:
            raise ConflictError(f'{integration.plural}.{integration.group or "core"} '
                                f'"{job.name}" not found')
        manifest = locked.manifest
        scalable = integration.scalable_pod_sets(manifest)
        previous = {ps.name: ps.count for ps in scalable}
        paths = [ps.path for ps in scalable if ps.name in requested]
        wanted = {**previous, **requested}
        workloads = list(locked.workloads.select_for_update(no_key=True))
        refused = scale_refusal(locked, workloads)
        if refused in (REFUSED_FINISHED, REFUSED_CREATED_ON_CLUSTER):
            raise _refused(refused, paths)
        if wanted == previous:
            return ScaleResult(locked, current_slice(workloads), "unchanged", previous, wanted)
        if refused is not None:
            raise _refused(refused, paths)
        partial_admission = bool(options["PARTIAL_ADMISSION"])
        errors = integration.validate_scale(manifest, wanted,
                                            partial_admission=partial_admission)
        if errors:
            raise invalid(errors)
        scaled = integration.scale(manifest, wanted)
        pod_counts = pod_set_counts(integration.pod_sets(scaled,
                                                         partial_admission=partial_admission))
        metadata = dict(scaled.get("metadata") or {})
        metadata["generation"] = jobframework.generation(manifest) + 1
        locked.manifest = {**scaled, "metadata": metadata}
        locked.save(update_fields=["manifest", "resource_version", "updated_at"])
        change = _ScaleChange(scalable, previous, wanted)
        result = _ensure_slices(locked, workloads, current_slice(workloads), pod_counts,
                                change, now=now)
        _after_scale(locked)
    return result


@dataclass(frozen=True)
class _ScaleChange:
    scalable: list[jobframework.ScalablePodSet]
    previous: dict[str, int]
    wanted: dict[str, int]

    def __str__(self) -> str:
        return "; ".join(f"{ps.path} changed from {self.previous[ps.name]} to "
                         f"{self.wanted[ps.name]}" for ps in self.scalable
                         if self.previous[ps.name] != self.wanted[ps.name])


def _ensure_slices(job: Job, workloads: list[Workload], current: Workload | None,
                   counts: dict[str, int], change: _ScaleChange, *,
                   now: datetime) -> ScaleResult:
    def done(wl: Workload | None, action: str) -> ScaleResult:
        return ScaleResult(job, wl, action, change.previous, change.wanted)

    if current is None:
        return done(None, "unchanged")
    old = pod_set_counts(current.pod_sets)
    old_total, total = sum(old.values()), sum(counts.values())
    if not holds_quota(current):
        # Nothing admitted yet (or being evicted): the workload waits with the new size.
        if _set_counts(current, counts):
            _event(job, current, "ScaledUp" if total > old_total else "ScaledDown",
                   f"{change}: workload {current.name} now asks for {total} pod(s)", now=now)
        return done(current, "updated")
    pending = pending_replacement(workloads, of=current)
    if any(count > old.get(name, 0) for name, count in counts.items()):
        if pending is not None:
            _set_counts(pending, counts)
            _event(job, pending, "ScaledUp",
                   f"{change}: the waiting slice {pending.name} now asks for {total} pod(s)",
                   now=now)
            return done(pending, "scale-up-updated")
        new = _create_slice(job, current, counts, now=now)
        _event(job, new, "ScaledUp",
               f"{change}: slice {new.name} asks for {total} pod(s) and replaces "
               f"{current.name} once admitted; the job keeps running {old_total} pod(s) "
               "meanwhile", now=now)
        return done(new, "scale-up")
    if pending is not None:
        finish_slice(pending, REASON_OUT_OF_SYNC, OUT_OF_SYNC_MESSAGE, now=now)
    if counts != old:
        _set_counts(current, counts)
        _event(job, current, "ScaledDown",
               f"{change}: slice {current.name} shrank in place from {old_total} to {total} "
               "pod(s); their quota is free", now=now)
        assert current.cluster_queue_id is not None
        admission.on_quota_released(_domain(job),
                                    [current.cluster_queue_id], now=now)
        return done(current, "scale-down")
    return done(current, "unchanged")


def _with_counts(pod_sets: Iterable[dict[str, Any]], counts: Mapping[str, int]
                 ) -> list[dict[str, Any]]:
    result = []
    for ps in pod_sets:
        ps = dict(ps)
        name = str(ps.get("name", jobframework.DEFAULT_POD_SET_NAME))
        if name in counts:
            ps["count"] = counts[name]
        result.append(ps)
    return result


def _set_counts(wl: Workload, counts: Mapping[str, int]) -> bool:
    """Give the workload's pod sets their new counts; pending workloads start their flavor
    scan over, since their shape changed."""
    pod_sets = _with_counts(wl.pod_sets or (), counts)
    if pod_sets == wl.pod_sets:
        return False
    wl.pod_sets = pod_sets
    fields = ["pod_sets", "resource_version", "updated_at"]
    if wl.phase == WorkloadPhase.PENDING:
        wl.scheduler_state = {}
        fields.append("scheduler_state")
    wl.save(update_fields=fields)
    return True


def _create_slice(job: Job, old: Workload, counts: Mapping[str, int], *,
                  now: datetime) -> Workload:
    """The scale-up slice: the job's workload at its new generation, replacing ``old``."""
    options: dict[str, Any] = settings.KUEUEWEB
    draft = jobframework.construct_workload(
        registry.integration_for(job), job.manifest, label_keys_to_copy=options["LABEL_KEYS_TO_COPY"],
        partial_admission=bool(options["PARTIAL_ADMISSION"]), slices_enabled=True,
    )
    if Workload.objects.filter(cluster_id=_domain(job), namespace=job.namespace,
                               name=draft.name).exists():
        raise ConflictError(f'workloads.kueue.x-k8s.io "{draft.name}" already exists')
    annotations = dict(draft.annotations)
    annotations[jobframework.WORKLOAD_SLICE_NAME_ANNOTATION] = slice_name(old)
    annotations[WORKLOAD_SLICE_REPLACEMENT_FOR] = key_of(old)
    pod_sets = _with_counts(draft.pod_sets, counts)
    new = save_new_workload(Workload(
        cluster_id=_domain(job),
        namespace=job.namespace,
        name=draft.name,
        job=job,
        queue_name=old.queue_name,
        local_queue=local_queue_for(job.cluster, job.namespace, old.queue_name),
        # The job's priority, as the running slice has it (the class is resolved once).
        priority_class_name=old.priority_class_name,
        priority_class_source=old.priority_class_source,
        priority=old.priority,
        maximum_execution_time_seconds=draft.maximum_execution_time_seconds,
        pod_sets=pod_sets,
        labels=draft.labels,
        annotations=annotations,
    ))
    _event(job, new, "CreatedWorkload", f"Created Workload: {new.namespace}/{new.name}",
           now=now)
    return new


def _event(job: Job, wl: Workload, reason: str, message: str, *, now: datetime) -> None:
    wl.job = job
    lifecycle.workload_event(wl, reason, message, now=now, kind=job.kind).save()


def _after_scale(job: Job) -> None:
    """After commit: a cycle for the domain and a pass of the cluster running the job."""
    cluster_id = _domain(job)
    admission.request_admission(cluster_id)
    reconcile.request_cluster_sync(cluster_id)


# =========================================================================================
# Finishing slices
# =========================================================================================


def finish_slice(wl: Workload, reason: str, message: str, *, now: datetime) -> bool:
    """Finished=True without releasing quota to the queue (a waiting slice holds none);
    ``wl`` is updated when the write went through."""
    row = {"id": wl.pk, "namespace": wl.namespace, "name": wl.name,
           "conditions": wl.conditions, "resource_version": wl.resource_version}
    if not admission.finish_without_release(_domain(wl), row, reason, message, now=now):
        return False
    wl.refresh_from_db()
    return True
