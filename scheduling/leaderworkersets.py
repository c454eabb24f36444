"""The LeaderWorkerSet reconciler (Kueue's LWS reconciler and the part of the LWS
controller that makes Pods): a LeaderWorkerSet keeps ``spec.replicas`` groups, each ONE
Workload created before its Pods and ``size`` Pods submitted through
``services.submit_job`` as members of that Workload's pod group, so a group waits for quota
and is admitted as a whole.

The decisions are the kind's (``scheduling.jobs.leaderworkerset``, pure); this module reads
the rows, applies them and records the status and the events. It is level-triggered: a
pass reads the Pods and Workloads and converges, so the Pods Kueue stopped (an evicted
group's, deleted: they ended Failed) are replaced by the next pass and their group's
Workload, which waited for them, goes back to its queue.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import F, QuerySet

from scheduling import deployments, services
from scheduling.choices import EventType
from scheduling.jobframework.constants import (
    COMPONENT_WORKLOAD_INDEX_ANNOTATION,
)
from scheduling.jobs import pod as pods
from scheduling.jobs.leaderworkerset import (
    GROUP_INDEX_LABEL,
    REVISION_LABEL,
    GroupPod,
    LeaderWorkerSet,
    group_workload_name,
)
from scheduling.models import Event, Job, Workload

logger = logging.getLogger(__name__)

KIND = LeaderWorkerSet()
_POD = pods.Pod()


def manages(job: Job) -> bool:
    """Whether ``job`` is a LeaderWorkerSet, whose groups this reconciler keeps."""
    return (job.api_version, job.kind) == (KIND.api_version, KIND.kind)


def _sets() -> QuerySet[Job]:
    return Job.objects.filter(api_version=KIND.api_version, kind=KIND.kind)


def owned_pods(lws: Job) -> list[Job]:
    """The Pods of the set: named after it, with its uid as their controller."""
    return services.owned_jobs(lws, KIND, _POD)


def group_workloads(lws: Job) -> dict[int, Workload]:
    """The set's group Workloads, prebuilt for it and linked to it, by group index."""
    found: dict[int, Workload] = {}
    for wl in Workload.objects.filter(job=lws):
        index = (wl.annotations or {}).get(COMPONENT_WORKLOAD_INDEX_ANNOTATION, "")
        if index.isdigit():
            found[int(index)] = wl
    return found


def _child(job: Job) -> GroupPod:
    labels = (job.manifest.get("metadata") or {}).get("labels") or {}
    index = str(labels.get(GROUP_INDEX_LABEL, ""))
    return GroupPod(name=job.name, group=int(index) if index.isdigit() else 0,
                    ready=pods.is_ready(job.status), terminated=pods.is_terminated(job.status),
                    revision=str(labels.get(REVISION_LABEL, "")))


def sync_leaderworkerset(lws_id: int, *, now: datetime) -> None:
    """One pass of a LeaderWorkerSet's reconcilers at ``now``; a job of another kind is
    left alone."""
    with transaction.atomic():
        lws = _sets().select_for_update().filter(pk=lws_id).first()
        if lws is None:
            return
        children = {job.name: job for job in owned_pods(lws)}
        workloads = group_workloads(lws)
        status = lws.status or {}
        plan = KIND.plan(lws.manifest, status, [_child(job) for job in children.values()],
                         list(workloads), now=now)
        events: list[Event] = []
        # A group above replicas goes with its Workload: the quota it held is free at once;
        # so does the Workload of a group a rolling update recreates, built again below.
        for index in plan.delete_workloads:
            services.delete_workload(workloads.pop(index), now=now)
        for name, _reason in plan.delete_pods:
            services.delete_job(children[name], now=now)
            events.append(services.owner_event(lws, EventType.NORMAL, "SuccessfulDelete",
                                               f"Deleted pod: {name}", now))
        services.follow_owner_queue(lws, workloads.values())
        for index in plan.create_workloads:
            deployments.prebuild_workload(
                lws, KIND, name=group_workload_name(lws.manifest, index),
                pod_sets=KIND.pod_sets(lws.manifest),
                annotations=KIND.workload_annotations(lws.manifest, index), now=now,
                events=events)
        incomplete = {int(pod["metadata"]["labels"][GROUP_INDEX_LABEL])
                      for pod in plan.create_pods if not deployments.create_pod(lws, pod, now, events)}
        new_status = dict(plan.status)
        if incomplete:
            # A group missing a Pod it could not create is counted once it has them all.
            new_status["replicas"] -= len(incomplete)
        if new_status != status:
            Job.objects.filter(pk=lws.pk).update(
                status=new_status, resource_version=F("resource_version") + 1, updated_at=now)
        Event.objects.bulk_create(events)


def sync_all(*, now: datetime) -> None:
    """A pass of every LeaderWorkerSet; one's failure does not stop the others."""
    for lws_id in _sets().values_list("pk", flat=True):
        try:
            sync_leaderworkerset(lws_id, now=now)
        except Exception:  # one set's failure must not stop the others
            logger.exception("LeaderWorkerSet %s: the pass failed", lws_id)


def update_leaderworkerset(
    lws: Job, manifest: Mapping[str, Any], *,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Job:
    """Replace a LeaderWorkerSet's object as the API server and Kueue's webhook take an
    update (``deployments.update_deployment`` with this kind's rules); a pass follows.

    Raises ValidationError (by field path) or PermissionDenied."""
    return deployments.update_deployment(lws, manifest, user=user, kind=KIND)


def scale_leaderworkerset(
    lws: Job, count: Any, *, user: AbstractBaseUser | AnonymousUser | None = None,
) -> Job:
    """Set ``spec.replicas`` (the scale subresource): more groups wait for quota each as
    one Workload; fewer delete the highest groups, their Pods and Workloads."""
    spec = {**(lws.manifest.get("spec") or {}), "replicas": count}
    return update_leaderworkerset(lws, {**lws.manifest, "spec": spec}, user=user)
