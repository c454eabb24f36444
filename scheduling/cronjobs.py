"""The CronJob reconciler (Kubernetes' CronJob controller): on each due schedule time, a
CronJob creates a batch/v1 Job from its template through ``services.submit_job``, the path of
a submitted Job, so the Job gets its Workload and queues like any other.

The decisions are the kind's (``scheduling.jobs.cronjob``, pure); the schedule's times are the
cron library's (``scheduling.cron``); this module reads the rows, applies the decisions and
records the status and the events. It is level-triggered: a pass at ``now`` runs the latest
schedule time not run yet, so a pass that comes late still runs it once (within
``startingDeadlineSeconds``), and Jobs whose CronJob is gone are deleted as Kubernetes'
garbage collector deletes what an owner no longer holds.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import F, QuerySet

from scheduling import cron, services
from scheduling.choices import EventType
from scheduling.core.conditions import parse_timestamp
from scheduling.jobs.cronjob import ChildJob, CronJob, job_reference, time_zone
from scheduling.jobs.job import BatchJob
from scheduling.models import Event, Job
from scheduling.services import owner_event as _event

logger = logging.getLogger(__name__)

KIND = CronJob()
_JOB = BatchJob()


def _cronjobs() -> QuerySet[Job]:
    return Job.objects.filter(api_version=KIND.api_version, kind=KIND.kind)


def _owned_jobs(cronjob: Job) -> list[Job]:
    """The Jobs the CronJob owns: named after it, with its uid as their controller."""
    return services.owned_jobs(cronjob, KIND, _JOB)


def _owner_uid(job: Job) -> str | None:
    return KIND.controller_uid(job.manifest)


def _child(job: Job) -> ChildJob:
    finished = _JOB.finished(job.status)
    status = job.status or {}
    return ChildJob(
        name=job.name, uid=str(job.uid),
        started_at=parse_timestamp(status.get("startTime")) or job.created_at,
        finished=None if finished is None else finished[0],
        completed_at=parse_timestamp(status.get("completionTime")))


def sync_cronjob(cronjob_id: int, *, now: datetime) -> datetime | None:
    """One pass of a CronJob at ``now``; the next time it is due (None: never, or
    suspended)."""
    with transaction.atomic():
        cronjob = _cronjobs().select_for_update().filter(pk=cronjob_id).first()
        if cronjob is None:
            return None
        manifest, status = cronjob.manifest, cronjob.status or {}
        children = {job.name: job for job in _owned_jobs(cronjob)}
        schedule = KIND.cron_schedule(manifest)
        zone = time_zone(manifest)
        due = None
        if schedule is not None and not KIND.is_suspended(manifest):
            earliest = KIND.earliest_time(manifest, status, created_at=cronjob.created_at,
                                          now=now)
            due = cron.latest_time(schedule[0], zone, after=earliest, until=now)
        plan = KIND.plan(manifest, status, [_child(job) for job in children.values()], due=due)
        events = [_event(cronjob, type_, reason, message, now)
                  for type_, reason, message in plan.events]
        for name, _reason in plan.delete:
            services.delete_job(children[name], now=now)
            events.append(_event(cronjob, EventType.NORMAL, "SuccessfulDelete",
                                 f"Deleted job {name}", now))
        new_status = plan.status
        if plan.create is not None:
            created = _create(cronjob, plan.create, now, events)
            if created is not None:
                new_status["active"] = [*new_status["active"], job_reference(created.manifest)]
        if new_status != status:
            Job.objects.filter(pk=cronjob.pk).update(
                status=new_status, resource_version=F("resource_version") + 1, updated_at=now)
        Event.objects.bulk_create(events)
    if schedule is None or KIND.is_suspended(manifest):
        return None
    return cron.next_time(schedule[0], zone, after=now)


def _create(cronjob: Job, manifest: dict[str, object], now: datetime,
            events: list[Event]) -> Job | None:
    """Submit the Job as any Job is submitted; a refusal (its queue deleted since, a grant
    changed) is the CronJob's ``FailedCreate`` warning, and the schedule time counts as run,
    as Kubernetes records a time it could not create a Job for."""
    job, refusal = services.submit_for(cronjob, manifest)
    if job is None:
        events.append(_event(cronjob, EventType.WARNING, "FailedCreate",
                             f"Error creating job: {refusal}", now))
        return None
    events.append(_event(cronjob, EventType.NORMAL, "SuccessfulCreate",
                         f"Created job {job.name}", now))
    return job


def collect_orphans() -> int:
    """Delete the Jobs whose owning CronJob is gone (Kubernetes' garbage collector, with
    the default background propagation); the number deleted."""
    owners = {str(uid) for uid in _cronjobs().values_list("uid", flat=True)}
    orphans = [job for job in Job.objects.filter(
        api_version=_JOB.api_version, kind=_JOB.kind,
        manifest__metadata__ownerReferences__0__kind=KIND.kind)
        if (uid := _owner_uid(job)) is not None and uid not in owners]
    for job in orphans:
        services.delete_job(job)
    return len(orphans)


def sync_all(*, now: datetime) -> datetime | None:
    """A pass of every CronJob, then the orphans' collection; the earliest next due time."""
    due: list[datetime] = []
    for cronjob_id in _cronjobs().values_list("pk", flat=True):
        try:
            following = sync_cronjob(cronjob_id, now=now)
        except Exception:  # one CronJob's failure must not stop the others
            logger.exception("CronJob %s: the pass failed", cronjob_id)
            continue
        if following is not None:
            due.append(following)
    collect_orphans()
    return min(due, default=None)
