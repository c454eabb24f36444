"""Elastic jobs: scale an admitted job through workload slices (Kueue KEP-77, dynamically
sized jobs).

A batch/v1 Job annotated ``kueue.x-k8s.io/elastic-job: "true"`` (with the
``ElasticJobsViaWorkloadSlices`` gate on, the default) may change its parallelism while it
runs, without being suspended or requeued:

* **scale-up** of an admitted slice creates a new *slice* (a Workload) with the full new
  counts, annotated as the replacement of the old one. The admission cycle checks only the
  extra pods, on the flavors the old slice holds; once the new slice is admitted the old one
  finishes with reason ``WorkloadSliceReplaced`` in the same transaction, and the job's
  extra pods are ungated. Until then the job runs at its old size.
* **scale-down** updates the admitted slice's pod counts in place; the quota of the removed
  pods is free at once (usage is derived from the smaller count) and parked workloads of the
  cohort tree get another chance.

Every slice of a job carries ``kueue.x-k8s.io/workload-slice-name`` (the chain's first slice);
a replacement also carries ``kueue.x-k8s.io/workload-slice-replacement-for: <ns>/<old>``. The
chain lives in the database only, so it survives restarts of every process.

Kueue sources: ``pkg/workloadslicing/workloadslicing.go`` (EnsureWorkloadSlices,
normalizeActiveSlices), ``pkg/controller/jobframework/reconciler.go`` (prepareWorkloadSlice),
``pkg/scheduler/scheduler.go`` (replaceWorkloadSlice), ``pkg/controller/jobs/job/job_webhook.go``
(validatePartialAdmissionUpdate).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
from scheduling.jobs import job as batch_job
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
    """

    job: Job
    workload: Workload | None
    action: str
    previous_parallelism: int
    parallelism: int


# =========================================================================================
# Scaling a job (Kueue's Job webhook + EnsureWorkloadSlices)
# =========================================================================================

PARALLELISM_PATH = "spec.parallelism"
PARTIAL_ADMISSION_MESSAGE = (
    "Forbidden: cannot change when partial admission is enabled and the job is not suspended")
NOT_ELASTIC_MESSAGE = (
    "Forbidden: cannot change while the job's workload holds quota: only elastic jobs "
    f'(annotation {jobframework.ELASTIC_JOB_ANNOTATION}: "true", with the '
    "ElasticJobsViaWorkloadSlices feature gate on) scale while admitted; deactivate the "
    "workload first")
FINISHED_MESSAGE = "Forbidden: the job has finished"


def job_finished(job: Job) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.status or {}).get("conditions", ()))


# Why a job cannot be scaled now (``scale_refusal``).
SCALE_FINISHED = "finished"
SCALE_PARTIAL_ADMISSION = "partial-admission"
SCALE_NOT_ELASTIC = "not-elastic"
_SCALE_MESSAGES = {SCALE_FINISHED: FINISHED_MESSAGE,
                   SCALE_PARTIAL_ADMISSION: PARTIAL_ADMISSION_MESSAGE,
                   SCALE_NOT_ELASTIC: NOT_ELASTIC_MESSAGE}


def scale_refusal(job: Job, workloads: Iterable[Workload]) -> str:
    """Why the job's state allows no change of parallelism ("" if it allows one): one of
    the ``SCALE_*`` keys. ``scale_job`` refuses, and the pages disable their control, on
    the same rule. Finished: Complete or Failed, or every workload it had finished (a
    finished workload does not change)."""
    workloads = list(workloads)
    if job_finished(job) or (workloads and all(
            wl.phase == WorkloadPhase.FINISHED for wl in workloads)):
        return SCALE_FINISHED
    annotations = ((job.manifest or {}).get("metadata") or {}).get("annotations") or {}
    if batch_job.JOB_MIN_PARALLELISM_ANNOTATION in annotations and not job.suspend:
        return SCALE_PARTIAL_ADMISSION
    options: dict[str, Any] = settings.KUEUEWEB
    elastic = jobframework.is_elastic(annotations,
                              slices_enabled=bool(options["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"]))
    current = current_slice(workloads)
    if current is not None and holds_quota(current) and not elastic:
        return SCALE_NOT_ELASTIC
    return ""


def parallelism_of(manifest: dict[str, Any]) -> int:
    value = (manifest.get("spec") or {}).get("parallelism")
    return 1 if value is None else int(value)


def _validated_parallelism(value: Any) -> int:
    errors: list[FieldError] = []
    # Kubernetes: an int32 ≥ 0 (0 pauses the job: no pods run).
    parsed = jobframework.int_value(value, PARALLELISM_PATH, errors, minimum=0)
    if errors or parsed is None:
        raise invalid(errors)
    return parsed


def scale_job(job: Job, parallelism: Any, *, user: Any = None,
              now: datetime | None = None) -> ScaleResult:
    """Set ``spec.parallelism`` of a job, as ``kubectl scale``/``patch`` would, and bring its
    workload slices in line (Kueue's Job webhook, then ``EnsureWorkloadSlices``).

    * a queued job (its workload holds no quota): the pending workload's count changes;
    * an admitted elastic job: scale-down shrinks the admitted slice in place and frees
      quota at once; scale-up creates (or resizes) the replacement slice, which the
      admission cycle admits for the extra pods only; scaling back while a scale-up waits
      finishes the waiting slice (``OutOfSync``);
    * refused, naming ``spec.parallelism``: a value that is not an int32 ≥ 0, a finished
      job, a running job with partial admission (Kueue's message), and an admitted job that
      is not elastic.

    The effective pod count is min(parallelism, completions), so scaling beyond
    ``completions`` changes the spec but not the pods. Everything is written in one
    transaction holding the job's row lock. Raises ValidationError (by field path),
    PermissionDenied or ConflictError.
    """
    if user is not None and not can_operate_in(user, job.namespace):
        raise PermissionDenied(f"You may not scale jobs in namespace {job.namespace!r}.")
    wanted = _validated_parallelism(parallelism)
    now = _now(now)
    options: dict[str, Any] = settings.KUEUEWEB
    slices_enabled = bool(options["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"])
    with transaction.atomic():
        # FOR NO KEY UPDATE: the job's key never changes here, and the cluster's sync pass
        # inserts pods and workloads that reference this row (FOR KEY SHARE) meanwhile.
        locked = Job.objects.select_for_update(no_key=True).filter(pk=job.pk).first()
        if locked is None:
            raise ConflictError(f'jobs.batch "{job.name}" not found')
        manifest = locked.manifest
        previous = parallelism_of(manifest)
        workloads = list(locked.workloads.select_for_update(no_key=True))
        refused = scale_refusal(locked, workloads)
        if refused == SCALE_FINISHED:
            raise invalid([FieldError(PARALLELISM_PATH, FINISHED_MESSAGE)])
        if wanted == previous:
            return ScaleResult(locked, current_slice(workloads), "unchanged", previous, wanted)
        if refused:
            raise invalid([FieldError(PARALLELISM_PATH, _SCALE_MESSAGES[refused])])
        annotations = (manifest.get("metadata") or {}).get("annotations") or {}
        spec = dict(manifest.get("spec") or {})
        spec["parallelism"] = wanted
        count = batch_job.pods_count(spec)
        min_parallelism = annotations.get(batch_job.JOB_MIN_PARALLELISM_ANNOTATION)
        if min_parallelism is not None and options["PARTIAL_ADMISSION"] and (
                int(min_parallelism) >= count):
            raise invalid([FieldError(PARALLELISM_PATH, (
                f"must leave more than {min_parallelism} pods (annotation "
                f"{batch_job.JOB_MIN_PARALLELISM_ANNOTATION}) to run"))])
        elastic = jobframework.is_elastic(annotations, slices_enabled=slices_enabled)
        current = current_slice(workloads)

        metadata = dict(manifest.get("metadata") or {})
        metadata["generation"] = jobframework.generation(manifest) + 1
        locked.manifest = {**manifest, "metadata": metadata, "spec": spec}
        locked.save(update_fields=["manifest", "resource_version", "updated_at"])
        result = _ensure_slices(locked, workloads, current, count, elastic=elastic,
                                previous=previous, wanted=wanted, now=now)
        _after_scale(locked)
    return result


def _ensure_slices(job: Job, workloads: list[Workload], current: Workload | None, count: int,
                   *, elastic: bool, previous: int, wanted: int,
                   now: datetime) -> ScaleResult:
    def done(wl: Workload | None, action: str) -> ScaleResult:
        return ScaleResult(job, wl, action, previous, wanted)

    if current is None:
        return done(None, "unchanged")
    counts = pod_set_counts(current.pod_sets)
    old_count = sum(counts.values())
    if not holds_quota(current):
        # Nothing admitted yet (or being evicted): the workload waits with the new size.
        if _set_count(current, count):
            _event(job, current, "ScaledUp" if count > old_count else "ScaledDown",
                   f"Parallelism changed from {previous} to {wanted}: workload "
                   f"{current.name} now asks for {count} pod(s)", now=now)
        return done(current, "updated")
    pending = pending_replacement(workloads, of=current)
    if count > old_count:
        if pending is not None:
            _set_count(pending, count)
            _event(job, pending, "ScaledUp",
                   f"Parallelism changed from {previous} to {wanted}: the waiting slice "
                   f"{pending.name} now asks for {count} pod(s)", now=now)
            return done(pending, "scale-up-updated")
        new = _create_slice(job, current, count, now=now)
        _event(job, new, "ScaledUp",
               f"Parallelism changed from {previous} to {wanted}: slice {new.name} asks for "
               f"{count} pod(s) and replaces {current.name} once admitted; the job keeps "
               f"running {old_count} pod(s) meanwhile", now=now)
        return done(new, "scale-up")
    if pending is not None:
        finish_slice(pending, REASON_OUT_OF_SYNC, OUT_OF_SYNC_MESSAGE, now=now)
    if count < old_count:
        _set_count(current, count)
        _event(job, current, "ScaledDown",
               f"Parallelism changed from {previous} to {wanted}: slice {current.name} "
               f"shrank in place from {old_count} to {count} pod(s); their quota is free",
               now=now)
        assert current.cluster_queue_id is not None
        admission.on_quota_released(_domain(job),
                                    [current.cluster_queue_id], now=now)
        return done(current, "scale-down")
    return done(current, "unchanged")


def _set_count(wl: Workload, count: int) -> bool:
    """Give the workload's (single) pod set ``count`` pods; pending workloads start their
    flavor scan over, since their shape changed."""
    pod_sets = [dict(ps) for ps in wl.pod_sets]
    if not pod_sets or pod_sets[0].get("count") == count:
        return False
    pod_sets[0]["count"] = count
    wl.pod_sets = pod_sets
    fields = ["pod_sets", "resource_version", "updated_at"]
    if wl.phase == WorkloadPhase.PENDING:
        wl.scheduler_state = {}
        fields.append("scheduler_state")
    wl.save(update_fields=fields)
    return True


def _create_slice(job: Job, old: Workload, count: int, *, now: datetime) -> Workload:
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
    pod_sets = [dict(ps) for ps in draft.pod_sets]
    pod_sets[0]["count"] = count
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
