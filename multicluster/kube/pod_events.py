"""Why the pods of kueueweb's jobs on a Kubernetes cluster do not run: their Warning Events
(``FailedScheduling``, ``FailedMount``, ``BackOff``, ``Failed`` for an image that cannot be
pulled, ...), listed and watched with the pass's other kinds (``backend.POD_EVENTS``: only
Warnings about Pods come) and kept for the pods the pass knows (those of our jobs, by the
origin label), as rows of ``scheduling.Event`` (``object_kind`` Pod) of the job's workload.

Kubernetes counts a repeated event on one object (``count``, ``lastTimestamp``) instead of
making another; the row is keyed by the event's uid, so a repeat updates it. Each
workload keeps its newest ``MAX_POD_EVENTS_PER_WORKLOAD`` of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils.dateparse import parse_datetime

from multicluster.models import Cluster
from scheduling.choices import EventType
from scheduling.models import Event, Job
from scheduling.workload import lifecycle, slices

MAX_POD_EVENTS_PER_WORKLOAD = 50


def _when(text: Any, default: datetime) -> datetime:
    parsed = parse_datetime(text) if isinstance(text, str) and text else None
    return parsed or default


def record_pod_events(cluster: Cluster, events: Iterable[Mapping[str, Any]],
                      pods: Iterable[Mapping[str, Any]], *, now: datetime) -> int:
    """Store the ``events`` (reduced, ``manifests.reduce_event``) about the ``pods`` (of our
    jobs, reduced) on their workloads; returns how many rows were created or updated."""
    job_of_pod = {str(p.get("uid")): str(p.get("job_uid")) for p in pods
                  if p.get("uid") and p.get("job_uid")}
    relevant = [e for e in events if e.get("uid") and str(e.get("object_uid")) in job_of_pod]
    if not relevant:
        return 0
    jobs = {str(job.uid): job for job in Job.objects.filter(
        cluster=cluster, uid__in={job_of_pod[str(e["object_uid"])] for e in relevant})
        .prefetch_related("workloads")}
    with transaction.atomic():
        stored = {row.uid: row for row in Event.objects.select_for_update().filter(
            cluster=cluster, uid__in={str(e["uid"]) for e in relevant})}
        created: list[Event] = []
        updated: list[Event] = []
        touched: set[int] = set()
        for event in relevant:
            uid = str(event["uid"])
            count = int(event.get("count") or 1)
            at = _when(event.get("at"), now)
            row = stored.get(uid)
            if row is not None:
                if (row.count, row.message) != (count, event.get("message", "")):
                    row.count, row.message, row.created_at = count, str(event.get("message")), at
                    updated.append(row)
                    if row.workload_id is not None:
                        touched.add(row.workload_id)
                continue
            job = jobs.get(job_of_pod[str(event["object_uid"])])
            wl = slices.current_slice(job.workloads.all()) if job is not None else None
            if wl is None:
                continue
            wl.job = job  # already read: the event names the pod, not the job
            row = lifecycle.workload_event(
                wl, str(event.get("reason") or ""), str(event.get("message") or ""), now=at,
                type_=EventType.WARNING if event.get("type") == "Warning" else EventType.NORMAL,
                kind="Pod")
            row.object_name = str(event.get("object") or "")
            row.uid, row.count = uid, count
            created.append(row)
            stored[uid] = row
            touched.add(wl.pk)
        Event.objects.bulk_create(created)
        Event.objects.bulk_update(updated, ["count", "message", "created_at"])
        _keep_newest(touched)
    return len(created) + len(updated)


def _keep_newest(workload_ids: Iterable[int]) -> None:
    """Drop the oldest observed pod events of each workload beyond the limit (its own
    events, which kueueweb wrote, are never dropped here)."""
    for workload_id in workload_ids:
        observed = Event.objects.filter(workload_id=workload_id, object_kind="Pod").exclude(
            uid="").order_by("-created_at", "-id")
        stale = list(observed.values_list("id", flat=True)[MAX_POD_EVENTS_PER_WORKLOAD:])
        if stale:
            Event.objects.filter(id__in=stale).delete()
