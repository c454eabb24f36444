"""The StatefulSet reconciler: Kubernetes' StatefulSet controller, which keeps the
StatefulSet's Pods by ordinal, and Kueue's StatefulSet reconcilers, which build its group
Workload up front, stamp its Pods as members of that group and put the Workload on hold
while it is scaled to 0.

The decisions are the kind's (``scheduling.jobs.statefulset``, pure); this module reads the
rows and applies them in one transaction: the prebuilt Workload created (or its hold put
or lifted), Pods deleted and submitted (each through ``services.submit_job``, so that it
joins its group as any Pod of a group does), the status and the events recorded. It is
level-triggered, as the Deployment reconciler is: a change of the StatefulSet asks for a
pass at once, and the periodic task runs one anyway.
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
from scheduling.choices import EventType, WorkloadPhase
from scheduling.deployments import child_pod
from scheduling.jobs import pod as pods
from scheduling.jobs.deployment import replicas
from scheduling.jobs.statefulset import REVISION_LABEL, StatefulSet
from scheduling.models import Event, Job, Workload
from scheduling.services import owner_event as _event
from scheduling.workload import lifecycle

logger = logging.getLogger(__name__)

KIND = StatefulSet()
_POD = pods.Pod()
_HOLD_MESSAGE = "StatefulSet scaled to zero; workload on hold"
_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


def manages(job: Job) -> bool:
    """Whether ``job`` is a StatefulSet, whose Pods and Workload this reconciler keeps."""
    return (job.api_version, job.kind) == (KIND.api_version, KIND.kind)


def _statefulsets() -> QuerySet[Job]:
    return Job.objects.filter(api_version=KIND.api_version, kind=KIND.kind)


def owned_pods(statefulset: Job) -> list[Job]:
    """The Pods the StatefulSet controls: named after it, with its uid as their controller."""
    return services.owned_jobs(statefulset, KIND, _POD)


def workload_of(statefulset: Job) -> Workload | None:
    """Its group Workload: the one built for it, linked to it."""
    return Workload.objects.filter(job=statefulset).first()


def sync_statefulset(statefulset_id: int, *, now: datetime) -> None:
    """One pass of a StatefulSet's reconcilers at ``now``."""
    with transaction.atomic():
        statefulset = _statefulsets().select_for_update().filter(pk=statefulset_id).first()
        if statefulset is None:
            return
        events: list[Event] = []
        wl = _sync_workload(statefulset, now, events)
        children = {job.name: job for job in owned_pods(statefulset)}
        status = statefulset.status or {}
        plan = KIND.plan_pods(statefulset.manifest, status,
                              [child_pod(job, REVISION_LABEL) for job in children.values()])
        for name, _reason in plan.delete:
            services.delete_job(children[name], now=now)
            events.append(_event(statefulset, EventType.NORMAL, "SuccessfulDelete",
                                 f"delete Pod {name} in StatefulSet {statefulset.name} "
                                 "successful", now))
        group = wl.name if wl is not None else KIND.workload_name(statefulset.manifest)
        missing = 0
        for index in plan.create:
            pod, refusal = services.submit_for(
                statefulset, KIND.member_pod(statefulset.manifest, index, group))
            if pod is None:
                missing += 1
                events.append(_event(statefulset, EventType.WARNING, "FailedCreate",
                                     f"create Pod {statefulset.name}-{index} in StatefulSet "
                                     f"{statefulset.name} failed error: {refusal}", now))
                continue
            events.append(_event(statefulset, EventType.NORMAL, "SuccessfulCreate",
                                 f"create Pod {pod.name} in StatefulSet {statefulset.name} "
                                 "successful", now))
        new_status = dict(plan.status)
        if missing:
            for key in ("replicas", "currentReplicas", "updatedReplicas"):
                new_status[key] -= missing
        if new_status != status:
            Job.objects.filter(pk=statefulset.pk).update(
                status=new_status, resource_version=F("resource_version") + 1, updated_at=now)
        Event.objects.bulk_create(events)


def _sync_workload(statefulset: Job, now: datetime, events: list[Event]) -> Workload | None:
    """Kueue's StatefulSet reconciler on the Workload: build it while there are replicas
    and there is none; at 0 replicas put it on hold once it holds quota (it is kept, so
    that scaling up queues it again); with replicas again, lift the hold and follow the
    StatefulSet's queue. A MultiKueue hub's copy on a worker gets none built."""
    desired = replicas(statefulset.manifest)
    wl = workload_of(statefulset)
    if wl is None:
        if desired == 0 or KIND.is_multikueue_copy(statefulset.manifest):
            # A MultiKueue copy's Workload is the hub's, created here by its dispatch.
            return None
        return deployments.prebuild_workload(
            statefulset, KIND, name=KIND.workload_name(statefulset.manifest),
            pod_sets=KIND.pod_sets(statefulset.manifest),
            annotations=KIND.workload_annotations(statefulset.manifest), now=now, events=events)
    finished = wl.phase == WorkloadPhase.FINISHED
    if desired == 0 and wl.phase in _RESERVED and wl.active and not finished:
        lifecycle.put_on_hold(wl, _HOLD_MESSAGE, now=now)
    elif desired > 0:
        lifecycle.clear_on_hold(wl, now=now)
        services.follow_owner_queue(statefulset, [wl])
    return wl


def sync_all(*, now: datetime) -> None:
    """A pass of every StatefulSet; one's failure does not stop the others."""
    for statefulset_id in _statefulsets().values_list("pk", flat=True):
        try:
            sync_statefulset(statefulset_id, now=now)
        except Exception:  # one StatefulSet's failure must not stop the others
            logger.exception("StatefulSet %s: the pass failed", statefulset_id)


def update_statefulset(
    statefulset: Job, manifest: Mapping[str, Any], *,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Job:
    """Replace a StatefulSet's object (a merge patch applied, a scale of ``spec.replicas``)
    as the API server and Kueue's webhook take an update (``deployments.update_deployment``
    with the StatefulSet's rules); a scale-up from 0 also waits until the scale-down is
    done: its Pods gone and its Workload's quota released.

    Raises ValidationError (by field path) or PermissionDenied."""
    wl = workload_of(statefulset)
    refused = KIND.scale_up_refusal(
        statefulset.manifest, manifest, status=statefulset.status or {},
        holds_quota=wl is not None and services.has_quota_reservation(wl))
    if refused is not None:
        raise services.invalid([refused])
    return deployments.update_deployment(statefulset, manifest, user=user, kind=KIND)


def scale_statefulset(
    statefulset: Job, count: Any, *, user: AbstractBaseUser | AnonymousUser | None = None,
) -> Job:
    """Set ``spec.replicas`` (the scale subresource): to or from 0 only, while Kueue
    manages it."""
    spec = {**(statefulset.manifest.get("spec") or {}), "replicas": count}
    return update_statefulset(statefulset, {**statefulset.manifest, "spec": spec}, user=user)
