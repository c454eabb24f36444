"""batch/v1 CronJob: a kind that makes no Workload of its own. Kueue does not integrate
CronJob; it queues the Jobs a CronJob creates, each carrying the queue label of
``spec.jobTemplate.metadata.labels``. So the kind is a ``JobKind`` (stored, validated, its
jobs' queue checked at submission), and this module also holds Kubernetes' CronJob
controller's decisions (``pkg/controller/cronjob``), pure: which Job to create for a
scheduled time, which to delete for ``concurrencyPolicy`` and the history limits, and the
status. The cron grammar and the times a schedule gives are the cron library's, which a
pure module may not import: the caller (``scheduling.cronjobs``) passes them in.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduling.core.conditions import parse_timestamp, timestamp
from scheduling.core.fields import FieldError
from scheduling.jobframework.interface import JobKind
from scheduling.jobframework.validation import int_value, object_map, validate_object
from scheduling.jobs.job import BatchJob, validate_job_manifest

# Kubernetes appends "-<minutes since epoch>" (up to 11 characters) to name a CronJob's Job,
# whose name must stay a 63-character label value.
MAX_NAME_LENGTH = 52
SCHEDULED_TIMESTAMP_ANNOTATION = "batch.kubernetes.io/cronjob-scheduled-timestamp"
CONCURRENCY_POLICIES = ("Allow", "Forbid", "Replace")
DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT = 3
DEFAULT_FAILED_JOBS_HISTORY_LIMIT = 1
TEMPLATE_PATH = "spec.jobTemplate."
_JOB = BatchJob()


@dataclass(frozen=True)
class ChildJob:
    """A Job the CronJob owns, as the decisions need it: ``finished`` is "Succeeded",
    "Failed" or None (running or queued); ``started_at`` orders the history."""

    name: str
    uid: str
    started_at: datetime
    finished: str | None = None
    completed_at: datetime | None = None


@dataclass(frozen=True)
class CronJobPlan:
    """What one pass does: the Job to create (or None), the children to delete (name,
    reason: "Replace" or "History"), the CronJob's new status without the created Job
    (whose uid the caller knows once it exists) and the events (type, reason, message)."""

    create: dict[str, Any] | None
    delete: list[tuple[str, str]]
    status: dict[str, Any]
    events: list[tuple[str, str, str]] = field(default_factory=list)


def job_name(cronjob_name: str, scheduled: datetime) -> str:
    """Kubernetes' name of the Job for a scheduled time: minutes since the epoch."""
    return f"{cronjob_name}-{int(scheduled.timestamp()) // 60}"


def job_reference(job: Mapping[str, Any]) -> dict[str, str]:
    """An ``ObjectReference`` to a Job, as ``status.active`` lists it."""
    metadata = job.get("metadata") or {}
    return {"apiVersion": _JOB.api_version, "kind": _JOB.kind,
            "name": str(metadata.get("name", "")),
            "namespace": str(metadata.get("namespace", "")),
            "uid": str(metadata.get("uid", ""))}


def _spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = manifest.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _template(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    template = _spec(manifest).get("jobTemplate")
    return template if isinstance(template, Mapping) else {}


def time_zone(manifest: Mapping[str, Any]) -> str:
    """``spec.timeZone``; kueueweb's controller runs in UTC, Kubernetes' default being the
    controller manager's local zone."""
    return str(_spec(manifest).get("timeZone") or "UTC")


class CronJob(JobKind):
    framework_name = "batch/cronjob"
    api_version = "batch/v1"
    kind = "CronJob"
    plural = "cronjobs"
    # Kueue has no webhook for a CronJob: its Jobs go through the Job's.
    has_webhook = False

    @property
    def enabled_with(self) -> str:
        # Not a Kueue integration: accepted wherever the Jobs it creates are.
        return _JOB.framework_name

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        """Kubernetes' CronJob validation, and its job template validated as the Jobs it
        creates will be (Kubernetes' and Kueue's Job rules), at ``spec.jobTemplate``. The
        schedule's cron grammar is checked by the service with the cron library."""
        errors, _, _ = validate_object(manifest, api_version=self.api_version, kind=self.kind,
                                       namespace=namespace)
        name = (manifest.get("metadata") or {}).get("name") if isinstance(
            manifest.get("metadata"), Mapping) else None
        if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
            errors.append(FieldError("metadata.name", f"must be no more than {MAX_NAME_LENGTH} "
                                     "characters (the name of each Job adds its schedule time)"))
        spec = manifest.get("spec")
        if not isinstance(spec, Mapping):
            errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
            return errors
        schedule = spec.get("schedule")
        if not isinstance(schedule, str) or not schedule.strip():
            errors.append(FieldError("spec.schedule", "is required: a cron schedule such as "
                                     "\"*/5 * * * *\""))
        elif schedule.lstrip().startswith(("TZ=", "CRON_TZ=")):
            errors.append(FieldError("spec.schedule", "cannot use TZ or CRON_TZ in schedule, "
                                     "use the timeZone field instead"))
        zone = spec.get("timeZone")
        if zone is not None:
            if not isinstance(zone, str) or not zone:
                errors.append(FieldError("spec.timeZone", "must be a time zone name"))
            else:
                try:
                    ZoneInfo(zone)
                except (ZoneInfoNotFoundError, ValueError):
                    errors.append(FieldError("spec.timeZone", f"unknown time zone {zone!r}"))
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy not in CONCURRENCY_POLICIES:
            errors.append(FieldError("spec.concurrencyPolicy", f"unsupported value {policy!r}: "
                                     "supported values: \"Allow\", \"Forbid\", \"Replace\""))
        if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
            errors.append(FieldError("spec.suspend", "must be a boolean"))
        for key in ("startingDeadlineSeconds", "successfulJobsHistoryLimit",
                    "failedJobsHistoryLimit"):
            if spec.get(key) is not None:
                int_value(spec[key], f"spec.{key}", errors, minimum=0)
        template = spec.get("jobTemplate")
        if not isinstance(template, Mapping):
            errors.append(FieldError("spec.jobTemplate", "is required" if template is None
                                     else "must be an object"))
            return errors
        metadata = object_map(template.get("metadata"), "spec.jobTemplate.metadata", errors)
        job = {"apiVersion": _JOB.api_version, "kind": _JOB.kind,
               "metadata": {"name": "job", "labels": metadata.get("labels"),
                            "annotations": metadata.get("annotations")},
               "spec": template.get("spec")}
        errors.extend(FieldError(TEMPLATE_PATH + e.path, e.message) for e in validate_job_manifest(
            job, namespace=namespace, slices_enabled=slices_enabled))
        return errors

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(t, TEMPLATE_PATH + p) for t, p in _JOB.pod_templates(
            {"spec": _template(manifest).get("spec") or {}})]

    def queue_labels(self, manifest: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
        metadata = _template(manifest).get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        return (labels if isinstance(labels, Mapping) else {}), TEMPLATE_PATH

    # --- Kubernetes' CronJob controller ---------------------------------------------------

    def cron_schedule(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        schedule = _spec(manifest).get("schedule")
        return (schedule, "spec.schedule") if isinstance(schedule, str) else None

    def earliest_time(self, manifest: Mapping[str, Any], status: Mapping[str, Any], *,
                      created_at: datetime, now: datetime) -> datetime:
        """The time after which a schedule time is still to be run: the last one run (else
        the CronJob's creation), and no earlier than ``startingDeadlineSeconds`` ago."""
        earliest = parse_timestamp(status.get("lastScheduleTime")) or created_at
        deadline = _spec(manifest).get("startingDeadlineSeconds")
        if isinstance(deadline, int) and not isinstance(deadline, bool):
            earliest = max(earliest, now - timedelta(seconds=deadline))
        return earliest

    def job_for(self, manifest: Mapping[str, Any], scheduled: datetime) -> dict[str, Any]:
        """The Job Kubernetes creates for a scheduled time: named for it, the template's
        labels, annotations and spec, owned by the CronJob."""
        metadata = manifest.get("metadata") or {}
        template = _template(manifest)
        template_metadata = template.get("metadata") or {}
        annotations = {**(template_metadata.get("annotations") or {}),
                       SCHEDULED_TIMESTAMP_ANNOTATION: timestamp(scheduled)}
        return {
            "apiVersion": _JOB.api_version,
            "kind": _JOB.kind,
            "metadata": {
                "name": job_name(str(metadata.get("name", "")), scheduled),
                "namespace": metadata.get("namespace"),
                "labels": dict(template_metadata.get("labels") or {}),
                "annotations": annotations,
                "ownerReferences": [self.controller_reference(manifest)],
            },
            "spec": copy.deepcopy(dict(template.get("spec") or {})),
        }

    def plan(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
             children: Sequence[ChildJob], *, due: datetime | None) -> CronJobPlan:
        """One pass of the CronJob controller: ``due`` is the latest schedule time not run
        yet (after ``earliest_time``, at the latest now), or None. A suspended CronJob
        creates nothing; history is pruned either way."""
        spec = _spec(manifest)
        events: list[tuple[str, str, str]] = []
        delete: list[tuple[str, str]] = []
        was_active = {ref.get("name") for ref in status.get("active") or ()}
        for child in children:
            if child.finished is not None and child.name in was_active:
                condition = "Complete" if child.finished == "Succeeded" else "Failed"
                events.append(("Normal", "SawCompletedJob",
                               f"Saw completed job: {child.name}, condition: {condition}"))
        active = [c for c in children if c.finished is None]
        new_status: dict[str, Any] = {
            k: v for k, v in status.items() if k not in ("active", "lastSuccessfulTime")}
        successful = [c.completed_at for c in children
                      if c.finished == "Succeeded" and c.completed_at is not None]
        last_success = parse_timestamp(status.get("lastSuccessfulTime"))
        if successful:
            last_success = max([*successful, *([last_success] if last_success else [])])
        if last_success is not None:
            new_status["lastSuccessfulTime"] = timestamp(last_success)
        create = None
        if due is not None and not self.is_suspended(manifest):
            policy = spec.get("concurrencyPolicy", "Allow")
            name = job_name(str((manifest.get("metadata") or {}).get("name", "")), due)
            if any(c.name == name for c in children):
                # Created on an earlier pass whose status write was lost: already run.
                new_status["lastScheduleTime"] = timestamp(due)
            elif policy == "Forbid" and active:
                events.append(("Normal", "JobAlreadyActive", "Not starting job because prior "
                               "execution is running and concurrency policy is Forbid"))
            else:
                if policy == "Replace":
                    delete.extend((c.name, "Replace") for c in active)
                    active = []
                create = self.job_for(manifest, due)
                new_status["lastScheduleTime"] = timestamp(due)
        new_status["active"] = [
            {"apiVersion": _JOB.api_version, "kind": _JOB.kind, "name": c.name,
             "namespace": str((manifest.get("metadata") or {}).get("namespace", "")),
             "uid": c.uid} for c in active]
        for outcome, key, default in (
                ("Succeeded", "successfulJobsHistoryLimit", DEFAULT_SUCCESSFUL_JOBS_HISTORY_LIMIT),
                ("Failed", "failedJobsHistoryLimit", DEFAULT_FAILED_JOBS_HISTORY_LIMIT)):
            limit = spec.get(key)
            limit = default if not isinstance(limit, int) or isinstance(limit, bool) else limit
            finished = sorted((c for c in children if c.finished == outcome),
                              key=lambda c: (c.started_at, c.name))
            excess = len(finished) - limit
            delete.extend((c.name, "History") for c in finished[:max(excess, 0)])
        return CronJobPlan(create=create, delete=delete, status=new_status, events=events)
