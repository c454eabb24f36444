"""The Deployment reconciler (Kubernetes' Deployment and ReplicaSet controllers): a
Deployment keeps ``spec.replicas`` Pods, each submitted through ``services.submit_job`` as a
submitted Pod is, so each gets its own Workload and waits for quota on its own, as Kueue
queues a Deployment's Pods.

The decisions are the kind's (``scheduling.jobs.deployment``, pure); this module reads the
rows, applies them (creating and deleting Pods, with their Workloads) and records the
status and the events. It is level-triggered: a pass reads the Pods and converges, so a
Pod that Kueue stopped (deleted: it ended Failed) is replaced by the next pass, which a
change of the Deployment asks for at once and the periodic task runs anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from kueueweb import reconcile
from kueueweb.roles import can_operate_in, submission_grant
from scheduling import grants, services
from scheduling.choices import EventType
from scheduling.jobframework import JobKind
from scheduling.jobs import pod as pods
from scheduling.jobs.deployment import (
    POD_TEMPLATE_HASH_LABEL,
    ChildPod,
    Deployment,
)
from scheduling.models import Event, Job, Workload
from scheduling.services import owner_event
from scheduling.validation import FieldError

logger = logging.getLogger(__name__)

KIND = Deployment()
_POD = pods.Pod()
# What a client may not change in a Deployment's metadata.
_FIXED_METADATA = ("name", "namespace", "uid", "generation")


def manages(job: Job) -> bool:
    """Whether ``job`` is a Deployment, whose Pods this reconciler keeps."""
    return (job.api_version, job.kind) == (KIND.api_version, KIND.kind)


def _deployments() -> QuerySet[Job]:
    return Job.objects.filter(api_version=KIND.api_version, kind=KIND.kind)


def owned_pods(deployment: Job) -> list[Job]:
    """The Pods the Deployment controls: named after it, with its uid as their controller."""
    return services.owned_jobs(deployment, KIND, _POD)


def child_pod(job: Job, revision_label: str = POD_TEMPLATE_HASH_LABEL) -> ChildPod:
    """A Pod an owner keeps, as its controller's decisions see it; its template's revision
    is the label ``revision_label``."""
    status = job.status or {}
    labels = (job.manifest.get("metadata") or {}).get("labels") or {}
    return ChildPod(
        name=job.name, template_hash=str(labels.get(revision_label, "")),
        created_at=job.created_at, scheduled=not job.suspend,
        running=status.get("phase") == "Running", ready=pods.is_ready(status),
        terminated=pods.is_terminated(status))


def sync_deployment(deployment_id: int, *, now: datetime) -> None:
    """One pass of a Deployment's ReplicaSet controller at ``now``."""
    with transaction.atomic():
        deployment = _deployments().select_for_update().filter(pk=deployment_id).first()
        if deployment is None:
            return
        children = {job.name: job for job in owned_pods(deployment)}
        status = deployment.status or {}
        plan = KIND.plan(deployment.manifest, status,
                         [child_pod(job) for job in children.values()], now=now)
        events: list[Event] = []
        for name, _reason in plan.delete:
            services.delete_job(children[name], now=now)
            events.append(owner_event(deployment, EventType.NORMAL, "SuccessfulDelete",
                                      f"Deleted pod: {name}", now))
        missing = sum(not _create(deployment, now, events) for _ in range(plan.create))
        new_status = dict(plan.status)
        if missing:
            # Pods it could not create are not there: counted when they are.
            for key in ("replicas", "updatedReplicas"):
                new_status[key] -= missing
        if new_status != status:
            Job.objects.filter(pk=deployment.pk).update(
                status=new_status, resource_version=F("resource_version") + 1, updated_at=now)
        Event.objects.bulk_create(events)


def _create(deployment: Job, now: datetime, events: list[Event]) -> bool:
    """Submit a Pod of the current template (``create_pod``)."""
    return create_pod(deployment, KIND.pod_for(deployment.manifest), now, events)


def create_pod(owner: Job, manifest: Mapping[str, Any], now: datetime,
               events: list[Event]) -> bool:
    """Submit a Pod its ``owner`` makes as any Pod is submitted; a refusal (its queue
    deleted since, a grant changed) is the owner's ``FailedCreate`` warning, and the next
    pass tries again."""
    pod, refusal = services.submit_for(owner, manifest)
    if pod is None:
        events.append(owner_event(owner, EventType.WARNING, "FailedCreate",
                                  f"Error creating: {refusal}", now))
        return False
    events.append(owner_event(owner, EventType.NORMAL, "SuccessfulCreate",
                              f"Created pod: {pod.name}", now))
    return True


def prebuild_workload(owner: Job, kind: JobKind, *, name: str, pod_sets: list[dict[str, Any]],
                      annotations: Mapping[str, str], now: datetime,
                      events: list[Event]) -> Workload | None:
    """Build a Workload for ``owner`` ahead of its Pods (``services.create_prebuilt_workload``:
    a StatefulSet's, a LeaderWorkerSet group's); a refusal (its priority class deleted
    since, the name taken) is the owner's ``FailedCreateWorkload`` warning, and the next
    pass tries again."""
    try:
        with transaction.atomic():
            return services.create_prebuilt_workload(owner, kind, name=name, pod_sets=pod_sets,
                                                     annotations=annotations)
    except (ValidationError, services.ConflictError) as error:
        refusal = services.refusal_text(error)
    events.append(owner_event(owner, EventType.WARNING, "FailedCreateWorkload",
                              f"Error creating workload {name}: {refusal}", now))
    return None


def sync_all(*, now: datetime) -> None:
    """A pass of every Deployment; one's failure does not stop the others."""
    for deployment_id in _deployments().values_list("pk", flat=True):
        try:
            sync_deployment(deployment_id, now=now)
        except Exception:  # one Deployment's failure must not stop the others
            logger.exception("Deployment %s: the pass failed", deployment_id)


class ReplicatedKind(Protocol):
    """A kind whose objects keep replicas and take updates (a Deployment, a StatefulSet, a
    LeaderWorkerSet): what ``update_deployment`` asks of it."""

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]: ...

    def validate_on_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], *, ready_replicas: int,
        namespace: str, slices_enabled: bool,
    ) -> list[FieldError]: ...

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]: ...


def update_deployment(
    deployment: Job, manifest: Mapping[str, Any], *,
    user: AbstractBaseUser | AnonymousUser | None = None, kind: ReplicatedKind = KIND,
) -> Job:
    """Replace a Deployment's object (a merge patch applied, a scale of ``spec.replicas``)
    as the API server and Kueue's webhook take an update: defaulted, validated against the
    old object and its ready replicas, checked against the user's grant; the generation
    moves with the spec, and a pass of its ReplicaSet controller follows the commit.
    ``kind``: another kind that keeps replicas and is updated the same way (a StatefulSet,
    a LeaderWorkerSet).

    Raises ValidationError (by field path) or PermissionDenied."""
    if user is not None and not can_operate_in(user, deployment.namespace):
        raise PermissionDenied(
            f"You may not change jobs in namespace {deployment.namespace!r}.")
    old = deployment.manifest
    old_metadata, new_metadata = old.get("metadata") or {}, manifest.get("metadata") or {}
    errors = [FieldError(f"metadata.{key}", "field is immutable") for key in _FIXED_METADATA
              if key in new_metadata and new_metadata.get(key) != old_metadata.get(key)]
    new = kind.default({**manifest, "metadata": {**new_metadata, **{
        key: old_metadata[key] for key in _FIXED_METADATA if key in old_metadata}}})
    options: dict[str, Any] = settings.KUEUEWEB
    errors += kind.validate_on_update(
        old, new, ready_replicas=int((deployment.status or {}).get("readyReplicas") or 0),
        namespace=deployment.namespace,
        slices_enabled=bool(options["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"]))
    if not errors:
        errors = grants.pod_template_errors(submission_grant(user, deployment.namespace),
                                            kind.pod_templates(new))
    if errors:
        raise services.invalid(errors)
    if new.get("spec") != old.get("spec"):
        new["metadata"]["generation"] = int(old_metadata.get("generation") or 1) + 1
    if new == old:
        return deployment
    with transaction.atomic():
        Job.objects.filter(pk=deployment.pk).update(
            manifest=new, resource_version=F("resource_version") + 1, updated_at=timezone.now())
        reconcile.request(reconcile.REPLICAS_TASK, deployment.pk)
    deployment.refresh_from_db()
    return deployment


def scale_deployment(
    deployment: Job, count: Any, *, user: AbstractBaseUser | AnonymousUser | None = None,
) -> Job:
    """Set ``spec.replicas`` (Kubernetes' scale subresource): more Pods wait for quota each
    on its own; fewer delete the Pods that wait first, then the newest."""
    spec = {**(deployment.manifest.get("spec") or {}), "replicas": count}
    return update_deployment(deployment, {**deployment.manifest, "spec": spec}, user=user)
