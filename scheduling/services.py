"""Use cases of the scheduling app, called by the REST API, the UI and the reconcilers.

Each validates, writes in one transaction and records events. Spec rules live in ``scheduling.jobs`` (pure), so every
caller accepts and refuses exactly the same input.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import DEFERRED, F, QuerySet
from django.utils import timezone

from kueueweb import reconcile
from kueueweb.models import NamespaceGrant
from kueueweb.roles import can_operate_in, submission_grant
from multicluster.choices import ClusterRole
from multicluster.models import Cluster
from scheduling import cron, grants, jobframework
from scheduling.choices import EventType, JobSource, WorkloadPhase
from scheduling.core.patch import merge_patch
from scheduling.jobframework import registry
from scheduling.jobframework.json_values import json_copy
from scheduling.models import (
    Event,
    Job,
    LocalQueue,
    PriorityClass,
    Workload,
    WorkloadPriorityClass,
)
from scheduling.scheduler import admission, bulk
from scheduling.validation import FieldError, errors_to_dict
from scheduling.workload import actions, lifecycle

# =========================================================================================
# Jobs and workloads: submission, spec changes and deletion
# (Kueue's job framework for every registered kind, and its custom-workload integration)
# =========================================================================================

# Kubernetes retries a generateName that collides (RetryGenerateName); so do we.
_GENERATE_NAME_ATTEMPTS = 8
_RESERVED_PHASES = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)
# A Kubernetes kind: letters and digits, from a letter (compared case-insensitively).
_KIND_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
# The kinds named in the error about an ambiguous job name.
_AMBIGUOUS_SHOWN = 10


class ConflictError(Exception):
    """The object exists already, or changed since it was read (HTTP 409 in the API)."""


def invalid(errors: list[FieldError]) -> ValidationError:
    return ValidationError(errors_to_dict(errors))


def resolve_cluster(cluster: Cluster | None) -> Cluster:
    """The scheduling domain an object goes to: ``cluster``, or the manager."""
    if cluster is not None:
        return cluster
    return Cluster.objects.get(role=ClusterRole.MANAGER)


def has_quota_reservation(workload: Workload) -> bool:
    """QuotaReserved=True (Kueue ``HasQuotaReservation``); the spec is then mostly frozen."""
    if workload.phase in _RESERVED_PHASES:
        return True
    return any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in workload.conditions or ()
    )


def _kueue_settings() -> dict[str, Any]:
    return dict(settings.KUEUEWEB)


def _resolve_priority(
    request: jobframework.PriorityRequest, *, cluster: Cluster, path: str, explicit_path: str
) -> tuple[str, str, int]:
    """(class name, class source, priority) for what a Workload spec asks for.

    A WorkloadPriorityClass must exist in the domain and gives the value (Kueue keeps the
    two equal); a Workload created directly that names a pod PriorityClass keeps the
    priority it gives with it, as Kueue's does (its CEL rule asks for one).
    """
    if not request.source:
        return "", "", request.priority or 0
    if request.source == jobframework.POD_PRIORITY_CLASS_SOURCE:
        return request.class_name, request.source, request.priority or 0
    wpc = WorkloadPriorityClass.objects.filter(cluster=cluster, name=request.class_name).first()
    if wpc is None:
        raise invalid([FieldError(
            path, f"WorkloadPriorityClass {request.class_name!r} not found in cluster "
            f"{cluster.name!r}",
        )])
    if request.priority is not None and request.priority != wpc.value:
        raise invalid([FieldError(
            explicit_path, f"must equal the value of WorkloadPriorityClass "
            f"{request.class_name!r} ({wpc.value}), or be omitted",
        )])
    return wpc.name, request.source, wpc.value


def job_priority(kind: jobframework.JobKind, manifest: Mapping[str, Any], *,
                 labels: Mapping[str, Any], labels_at: str,
                 cluster: Cluster) -> tuple[str, str, int]:
    """(class name, class source, priority) of a job's Workload, as Kueue's
    ``ExtractPriority`` finds it: the WorkloadPriorityClass its label names; else the pod
    PriorityClass its templates name (``kind.pod_priority_class``), which must exist; else
    the cluster's global default PriorityClass (the lowest value when several are); else 0.
    Raises ValidationError naming the field of a class that does not exist."""
    class_name = str(labels.get(jobframework.PRIORITY_CLASS_LABEL) or "")
    if class_name:
        request = jobframework.PriorityRequest(jobframework.WORKLOAD_PRIORITY_CLASS_SOURCE,
                                               class_name, None)
        path = labels_at + jobframework.label_path(jobframework.PRIORITY_CLASS_LABEL)
        return _resolve_priority(request, cluster=cluster, path=path, explicit_path=path)
    pod_class = kind.pod_priority_class(manifest)
    if pod_class is not None:
        name, path = pod_class
        found = PriorityClass.objects.filter(cluster=cluster, name=name).first()
        if found is None:
            raise invalid([FieldError(path, f'priorityclasses.scheduling.k8s.io "{name}" not '
                                            f"found in cluster {cluster.name!r}")])
        return found.name, jobframework.POD_PRIORITY_CLASS_SOURCE, found.value
    default = PriorityClass.objects.filter(cluster=cluster, global_default=True) \
        .order_by("value", "name").first()
    if default is not None:
        return default.name, jobframework.POD_PRIORITY_CLASS_SOURCE, default.value
    return "", "", 0


def requeue_for_cluster_objects(cluster_id: int, namespaces: Iterable[str] | None, *,
                                now: datetime) -> None:
    """A LimitRange (of ``namespaces``) or a RuntimeClass (None: any namespace) of the
    cluster changed: its pending workloads may ask for other amounts now, so the parked
    ones go back to their queues and a cycle looks at them again."""
    admission.requeue_pending_of(cluster_id, namespaces, now=now)


def local_queue_for(cluster: Cluster, namespace: str, queue_name: str) -> LocalQueue | None:
    if not queue_name:
        return None
    return LocalQueue.objects.filter(cluster=cluster, namespace=namespace, name=queue_name).first()


def save_new_workload(workload: Workload) -> Workload:
    """Insert a pending workload queued at its creation time (Kueue orders by creation).
    One transaction: no reader sees the row without its queue time (the update keeps the
    first version, which readers cache rows by)."""
    with transaction.atomic():
        workload.save()
        Workload.objects.filter(pk=workload.pk).update(queued_at=workload.created_at)
    workload.queued_at = workload.created_at
    return workload


def _check_user(user: AbstractBaseUser | AnonymousUser | None, namespace: str) -> None:
    if user is not None and not can_operate_in(user, namespace):
        raise PermissionDenied(f"You may not submit jobs in namespace {namespace!r}.")


def submit_job(
    manifest: Mapping[str, Any],
    *,
    namespace: str,
    cluster: Cluster | None = None,
    user: AbstractBaseUser | AnonymousUser | None = None,
    source: JobSource = JobSource.KUEUEWEB,
) -> Job:
    """Accept a job of an enabled kind and create its Workload, as Kueue's webhook and job
    reconciler do. ``source`` ``cluster``: an object created on the Kubernetes cluster
    ``cluster`` and adopted there, which keeps its uid (``metadata.uid``).

    1. Refuse a kind that is not enabled (on ``kind``), and what Kubernetes or Kueue's
       webhook for the kind would (the integration's ``validate_on_create``).
    2. Default the labels Kueue's webhook defaults: queue name ``default`` when that
       LocalQueue exists in the namespace (a queue is required otherwise: kueueweb manages
       only queued jobs) and priority class ``default`` when that class exists.
    3. Resolve the priority class (it must exist) and the name (``generateName``).
    4. Store the Job and its pending Workload in one transaction, with a ``CreatedWorkload``
       event on the Job. A kind that makes no Workload (a CronJob) is stored alone; its
       labels are those of the jobs it creates (``JobKind.queue_labels``).

    Raises ValidationError (by field path), ConflictError (name taken) or PermissionDenied
    (``user`` may not operate in ``namespace``).
    """
    domain = resolve_cluster(cluster)
    _check_user(user, namespace)
    options = _kueue_settings()
    slices_enabled = bool(options["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"])
    errors = grants.namespace_errors(namespace)
    if not isinstance(manifest, Mapping):
        raise invalid([*errors, FieldError("", "a job manifest must be an object")])
    integration, kind_errors = registry.enabled_for(manifest, options)
    if integration is None:
        raise invalid(errors + kind_errors)
    manifest = integration.default(manifest)
    errors += integration.validate_on_create(manifest, namespace=namespace,
                                             slices_enabled=slices_enabled)
    schedule = integration.cron_schedule(manifest)
    message = None if schedule is None else cron.schedule_error(schedule[0])
    if schedule is not None and message is not None and not any(
            e.path == schedule[1] for e in errors):
        errors.append(FieldError(schedule[1], message))
    if errors:
        raise invalid(errors)
    metadata = manifest["metadata"]
    # A kind that makes no Workload (a CronJob) names the queue of the jobs it creates: it
    # is checked now, and each job is defaulted and resolved again as it is submitted.
    labels, labels_at = integration.queue_labels(manifest)
    resource = f"{integration.plural}.{integration.group}"
    errors = _job_grant_errors(integration, manifest, labels,
                               submission_grant(user, namespace), labels_at)
    if errors:
        raise invalid(errors)
    if isinstance(integration, jobframework.GenericJob) and not integration.constructs_workload:
        return _store_external_object(integration, manifest, domain, namespace, resource)
    try:
        with transaction.atomic():
            default_labels = _job_default_labels(labels, domain, namespace, labels_at)
            priority = job_priority(integration, manifest, labels={**labels, **default_labels},
                                    labels_at=labels_at, cluster=domain)
            job = Job(cluster=domain, namespace=namespace, api_version=integration.api_version,
                      kind=integration.kind, source=source,
                      name=_job_name(metadata, Job.objects.filter(
                          cluster=domain, namespace=namespace, api_group=integration.group,
                          kind=integration.kind), resource))
            if source == JobSource.CLUSTER and metadata.get("uid"):
                job.uid = uuid.UUID(str(metadata["uid"]))
            # The defaulted queue and priority class go on the object when its own labels
            # name them (a CronJob's are its Jobs', defaulted as each is submitted); the
            # kind's defaults run again so that they see them (a Deployment copies them to
            # its pod template).
            job.manifest = integration.default(jobframework.default_manifest(
                manifest, name=job.name, namespace=namespace, uid=str(job.uid),
                default_labels=None if labels_at else default_labels,
            ))
            group = (integration.group_name(job.manifest)
                     if isinstance(integration, jobframework.JobGroup) else None)
            if isinstance(integration, jobframework.JobGroup) and group:
                job.group_name = group
                job.save()
                _join_group(integration, job, priority, options)
            elif isinstance(integration, jobframework.GenericJob):
                job.save()
                _create_job_workload(integration, job, priority, options)
                admission.request_admission(domain.pk)
            else:
                # Never run on a cluster, so its row stays suspended (what the backends
                # read); its own spec.suspend is the manifest's.
                job.save()
                if integration.keeps_replicas:
                    reconcile.request(reconcile.REPLICAS_TASK, job.pk)
    except IntegrityError as exc:
        # A concurrent submission took the name between the check and the insert.
        name = metadata.get("name") or metadata.get("generateName")
        raise ConflictError(f'{resource} "{name}" already exists') from exc
    return job


def _store_external_object(integration: jobframework.GenericJob, manifest: Mapping[str, Any],
                           domain: Cluster, namespace: str, resource: str) -> Job:
    """An object of a kind Kueue does not reconcile (a MultiKueue external framework),
    stored as given: its queue and priority are its Workload's, which is created through the
    API naming it as owner (``create_workload``)."""
    metadata = manifest["metadata"]
    try:
        with transaction.atomic():
            job = Job(cluster=domain, namespace=namespace, api_version=integration.api_version,
                      kind=integration.kind,
                      name=_job_name(metadata, Job.objects.filter(
                          cluster=domain, namespace=namespace, api_group=integration.group,
                          kind=integration.kind), resource))
            job.manifest = jobframework.default_manifest(manifest, name=job.name,
                                                         namespace=namespace, uid=str(job.uid))
            job.save()
    except IntegrityError as exc:
        name = metadata.get("name") or metadata.get("generateName")
        raise ConflictError(f'{resource} "{name}" already exists') from exc
    return job


def _job_grant_errors(
    integration: jobframework.JobKind, manifest: Mapping[str, Any],
    labels: Mapping[str, str], grant: NamespaceGrant | None, labels_at: str = "",
) -> list[FieldError]:
    """What the user's grant refuses in a valid job: its pod templates, and a priority class
    it names (a class defaulted by kueueweb is the admins' choice, not the user's)."""
    errors = grants.pod_template_errors(grant, integration.pod_templates(manifest))
    class_name = labels.get(jobframework.PRIORITY_CLASS_LABEL)
    if class_name:
        path = labels_at + jobframework.label_path(jobframework.PRIORITY_CLASS_LABEL)
        request = jobframework.PriorityRequest(jobframework.WORKLOAD_PRIORITY_CLASS_SOURCE, class_name, None)
        errors += grants.priority_errors(grant, request, class_path=path, explicit_path=path)
    elif (pod_class := integration.pod_priority_class(manifest)) is not None:
        # The pod PriorityClass gives the Workload its priority when no label names one.
        request = jobframework.PriorityRequest(jobframework.POD_PRIORITY_CLASS_SOURCE,
                                               pod_class[0], None)
        errors += grants.priority_errors(grant, request, class_path=pod_class[1],
                                         explicit_path=pod_class[1])
    return errors


def _job_default_labels(labels: Mapping[str, str], cluster: Cluster, namespace: str,
                        labels_at: str = "") -> dict[str, str]:
    defaults: dict[str, str] = {}
    if not labels.get(jobframework.QUEUE_NAME_LABEL):
        if not LocalQueue.objects.filter(
            cluster=cluster, namespace=namespace, name=jobframework.DEFAULT_LOCAL_QUEUE_NAME
        ).exists():
            raise invalid([FieldError(
                labels_at + jobframework.label_path(jobframework.QUEUE_NAME_LABEL),
                "is required: name the LocalQueue to submit to (there is no LocalQueue "
                f"{jobframework.DEFAULT_LOCAL_QUEUE_NAME!r} in namespace {namespace!r} to default to)",
            )])
        defaults[jobframework.QUEUE_NAME_LABEL] = jobframework.DEFAULT_LOCAL_QUEUE_NAME
    if not labels.get(jobframework.PRIORITY_CLASS_LABEL) and WorkloadPriorityClass.objects.filter(
        cluster=cluster, name=jobframework.DEFAULT_PRIORITY_CLASS_NAME
    ).exists():
        # Kueue's WorkloadPriorityClassDefaulting (beta, on).
        defaults[jobframework.PRIORITY_CLASS_LABEL] = jobframework.DEFAULT_PRIORITY_CLASS_NAME
    return defaults


def _job_name(metadata: Mapping[str, Any], existing: QuerySet[Job], resource: str) -> str:
    """The name of a new job: ``metadata.name``, or ``generateName`` completed; unique among
    the ``existing`` jobs of its kind (another kind may have it, as in Kubernetes)."""
    name = metadata.get("name")
    if name:
        if existing.filter(name=name).exists():
            raise ConflictError(f'{resource} "{name}" already exists')
        return str(name)
    for _ in range(_GENERATE_NAME_ATTEMPTS):
        candidate = jobframework.generate_name(str(metadata["generateName"]))
        if not existing.filter(name=candidate).exists():
            return candidate
    raise ConflictError(
        f'{resource} "{metadata["generateName"]}" could not be given a unique name; try again'
    )


def _create_job_workload(
    integration: jobframework.GenericJob, job: Job, priority: tuple[str, str, int],
    options: Mapping[str, Any], *, group: jobframework.GroupComposition | None = None,
) -> Workload:
    """The job's Workload; with ``group``, the Workload of the group ``job`` belongs to:
    named after the group, with the group's pod sets, annotated as a group's."""
    draft = jobframework.construct_workload(
        integration, job.manifest,
        label_keys_to_copy=options["LABEL_KEYS_TO_COPY"],
        partial_admission=bool(options["PARTIAL_ADMISSION"]),
        slices_enabled=bool(options["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"]),
    )
    name, pod_sets, annotations = draft.name, draft.pod_sets, draft.annotations
    if group is not None and group.pod_sets is not None:
        assert isinstance(integration, jobframework.JobGroup)
        name, pod_sets = job.group_name, group.pod_sets
        annotations = {**annotations, integration.group_workload_annotation: "true"}
    return _insert_job_workload(job, name=name, queue_name=draft.queue_name, priority=priority,
                                maximum_execution_time_seconds=draft.maximum_execution_time_seconds,
                                pod_sets=pod_sets, labels=draft.labels, annotations=annotations)


def create_prebuilt_workload(owner: Job, kind: jobframework.JobKind, *, name: str,
                             pod_sets: list[dict[str, Any]],
                             annotations: Mapping[str, str]) -> Workload:
    """A pod-group Workload built for ``owner`` before the pods it admits exist (Kueue's
    prebuilt Workloads: a StatefulSet's one, a LeaderWorkerSet's one per group), linked to
    the owner, which the job reconciler runs through the pods whose group name is
    ``name`` (``job_reconciler.runs_through_members``); deleting the owner deletes it.
    Pending in the queue the owner names, with the priority of the class it names (else
    its pod templates' PriorityClass), its uid and the label keys to copy as labels.
    Raises ValidationError (the class does not exist) or ConflictError (the name is
    taken)."""
    own_labels, labels_at = kind.queue_labels(owner.manifest)
    priority = job_priority(kind, owner.manifest, labels=own_labels, labels_at=labels_at,
                            cluster=owner.cluster)
    labels = {key: str(own_labels[key]) for key in _kueue_settings()["LABEL_KEYS_TO_COPY"]
              if key in own_labels}
    labels[jobframework.JOB_UID_LABEL] = str(owner.uid)
    workload = _insert_job_workload(
        owner, name=name, queue_name=str(own_labels.get(jobframework.QUEUE_NAME_LABEL, "")),
        priority=priority, maximum_execution_time_seconds=None, pod_sets=pod_sets,
        labels=labels, annotations=dict(annotations))
    admission.request_admission(owner.cluster.pk)
    return workload


def follow_owner_queue(owner: Job, workloads: Iterable[Workload]) -> None:
    """The prebuilt Workloads of ``owner`` that hold no quota take the queue its label now
    names (Kueue's reconcilers keep their queue name in sync with the owner's)."""
    queue = str(((owner.manifest.get("metadata") or {}).get("labels") or {}).get(
        jobframework.QUEUE_NAME_LABEL, ""))
    for wl in workloads:
        if queue and wl.queue_name != queue and not has_quota_reservation(wl):
            update_workload(wl, {"spec": {"queueName": queue}})


def _insert_job_workload(job: Job, *, name: str, queue_name: str, priority: tuple[str, str, int],
                         maximum_execution_time_seconds: int | None,
                         pod_sets: list[dict[str, Any]], labels: dict[str, str],
                         annotations: dict[str, str]) -> Workload:
    """Store the pending Workload of ``job`` with a ``CreatedWorkload`` event on the job."""
    if Workload.objects.filter(cluster=job.cluster, namespace=job.namespace, name=name).exists():
        raise ConflictError(f'workloads.kueue.x-k8s.io "{name}" already exists')
    class_name, class_source, value = priority
    workload = save_new_workload(Workload(
        cluster=job.cluster,
        namespace=job.namespace,
        name=name,
        job=job,
        queue_name=queue_name,
        local_queue=local_queue_for(job.cluster, job.namespace, queue_name),
        priority_class_name=class_name,
        priority_class_source=class_source,
        priority=value,
        maximum_execution_time_seconds=maximum_execution_time_seconds,
        pod_sets=pod_sets,
        labels=labels,
        annotations=annotations,
    ))
    # Kueue's job reconciler records this on the Job (reason CreatedWorkload); it is also
    # linked to the workload so its page shows where it came from.
    Event.objects.create(
        cluster=job.cluster,
        workload=workload,
        object_kind=job.kind,
        object_namespace=job.namespace,
        object_name=job.name,
        type=EventType.NORMAL,
        reason="CreatedWorkload",
        message=f"Created Workload: {workload.namespace}/{workload.name}",
        created_at=workload.created_at,
    )
    return workload


def _join_group(integration: jobframework.JobGroup, job: Job, priority: tuple[str, str, int],
                options: Mapping[str, Any]) -> None:
    """A member of a group joined it (Kueue's pod-group reconcile): the group's Workload is
    created once its members can make one, linked to the first member by name; until then
    each member gets an ``ErrWorkloadCompose`` warning. A member that joins an existing
    group Workload replaces one that was gone or failed."""
    assert isinstance(integration, jobframework.GenericJob)
    existing = Workload.objects.filter(cluster=job.cluster, namespace=job.namespace,
                                       name=job.group_name).first()
    members = job.group_members()
    manifests = [{**m.manifest, "status": m.status} for m in members]
    if existing is not None:
        if (existing.annotations or {}).get(integration.group_workload_annotation) != "true":
            # Kueue refuses to adopt it (WorkloadNameConflict).
            raise invalid([FieldError(
                jobframework.label_path(integration.group_label),
                f"workload {existing.name!r} exists and is not the Workload of group "
                f"{job.group_name!r}")])
        lifecycle.set_waiting_for_replacement(
            existing, integration.absent_members(manifests), now=timezone.now())
        return
    composition = integration.compose_group(manifests)
    if composition.pod_sets is None:
        Event.objects.create(
            cluster=job.cluster, object_kind=job.kind, object_namespace=job.namespace,
            object_name=job.name, type=EventType.WARNING, reason="ErrWorkloadCompose",
            message=composition.message, created_at=timezone.now())
        return
    _create_job_workload(integration, members[0], priority, options, group=composition)
    admission.request_admission(job.cluster.pk)


def owned_jobs(owner: Job, owner_kind: jobframework.JobKind,
               child_kind: jobframework.JobKind) -> list[Job]:
    """The jobs of ``child_kind`` that ``owner`` controls, oldest first: named after it, as
    its controller names them, with its uid as their controller."""
    candidates = Job.objects.filter(
        cluster=owner.cluster, namespace=owner.namespace, api_version=child_kind.api_version,
        kind=child_kind.kind, name__startswith=f"{owner.name}-").order_by("created_at", "pk")
    return [job for job in candidates if owner_kind.controller_uid(job.manifest) == str(owner.uid)]


def owner_event(owner: Job, type_: str, reason: str, message: str, now: datetime) -> Event:
    """An Event on the owner of jobs (a Deployment, a StatefulSet, a LeaderWorkerSet, a
    CronJob), from its controller."""
    return Event(cluster=owner.cluster, object_kind=owner.kind,
                 object_namespace=owner.namespace, object_name=owner.name,
                 type=type_, reason=reason, message=message, created_at=now)


def submit_for(owner: Job, manifest: Mapping[str, Any]) -> tuple[Job | None, str]:
    """Submit a job a controller creates for ``owner`` (a CronJob's Job, a Deployment's Pod)
    in its namespace and cluster, as any job is submitted, in a savepoint: the job, or None
    and the refusal in one line, each field with its messages (the controller's
    ``FailedCreate`` event)."""
    try:
        with transaction.atomic():
            return submit_job(manifest, namespace=owner.namespace, cluster=owner.cluster), ""
    except (ValidationError, ConflictError) as error:
        return None, refusal_text(error)


def refusal_text(error: ValidationError | ConflictError) -> str:
    """A refusal of what a controller creates in one line, each field with its messages
    (the text of its ``FailedCreate`` events)."""
    if isinstance(error, ConflictError):
        return str(error)
    if hasattr(error, "error_dict"):
        return "; ".join(f"{path}: {' '.join(messages)}"
                         for path, messages in error.message_dict.items())
    return "; ".join(error.messages)


def find_job(jobs: QuerySet[Job], name: str, *, kind: str | None = None) -> Job | None:
    """The job called ``name`` among ``jobs`` (one namespace), of ``kind`` when given:
    ``Kind`` (case-insensitive, as kubectl reads it) or ``Kind.group``. None when there is
    none; a ValidationError on ``kind`` when it is malformed, or missing while the name
    belongs to jobs of several kinds."""
    named = jobs.filter(name=name)
    if kind is not None:
        kind_name, _, group = kind.partition(".")
        if not kind_name or not _KIND_NAME.match(kind_name):
            raise invalid([FieldError("kind", f"{kind!r} is not a kind: give Kind (JobSet) "
                                      "or Kind.group (JobSet.jobset.x-k8s.io)")])
        named = named.filter(kind__iexact=kind_name)
        if group:
            named = named.filter(api_group=group)
    found = list(named.order_by("api_group", "kind")[:_AMBIGUOUS_SHOWN])
    if len(found) > 1:
        kinds = ", ".join(registry.kind_reference(job) for job in found)
        raise invalid([FieldError("kind", f"is required: jobs of several kinds are named "
                                  f"{name!r} ({kinds}); give the kind of the one meant")])
    return found[0] if found else None


def delete_job(job: Job, *, now: datetime | None = None) -> None:
    """Delete a Job and its workloads, and the jobs it controls (a Deployment's Pods, a
    CronJob's Jobs) with theirs, as Kubernetes' garbage collector deletes an owner's
    dependents; the quota they held is free once they are gone (usage is derived from
    admitted workloads, never stored). A job created on its cluster is deleted there by the
    cluster's next pass, asked for now.

    A reconciler passes the time of its pass as ``now``: the batched requeue of the freed
    queues is due a batch period after it, on the same clock its admission cycles use."""
    now = timezone.now() if now is None else now
    with transaction.atomic():
        doomed = _with_dependents(job)
        _hand_over_group_workloads(doomed, now=now)
        freed = _reserving_queue_ids(Workload.objects.filter(job__in=doomed))
        on_cluster = any(j.created_on_cluster for j in doomed)
        Workload.objects.filter(job__in=doomed).delete()
        Job.objects.filter(pk__in=[j.pk for j in doomed]).delete()
        _after_removal(job.cluster_id, freed, now=now)  # type: ignore[arg-type]
        if on_cluster:
            reconcile.request_cluster_sync(job.cluster_id)  # type: ignore[arg-type]


def _hand_over_group_workloads(doomed: Sequence[Job], *, now: datetime) -> None:
    """A group's Workload outlives the member it is linked to while other members remain:
    in Kueue it is owned by every member pod, so the garbage collector deletes it only with
    the last one. The link moves to the first remaining member by name, and the Workload
    waits for a replacement of the deleted ones (``WaitingForReplacementPods``)."""
    doomed_ids = {j.pk for j in doomed}
    for member in doomed:
        integration = registry.by_kind(member.api_version, member.kind)
        if not member.group_name or not isinstance(integration, jobframework.JobGroup):
            continue
        for wl in Workload.objects.filter(job=member):
            if (wl.annotations or {}).get(integration.group_workload_annotation) != "true":
                continue
            remaining = [m for m in member.group_members() if m.pk not in doomed_ids]
            if not remaining:
                continue  # the last member: the Workload goes with it
            Workload.objects.filter(pk=wl.pk).update(
                job=remaining[0], resource_version=F("resource_version") + 1)
            wl.job = remaining[0]
            wl.resource_version += 1
            lifecycle.set_waiting_for_replacement(
                wl, integration.absent_members(
                    [{**m.manifest, "status": m.status or {}} for m in remaining]), now=now)


def _with_dependents(job: Job) -> list[Job]:
    """The job and, transitively, the jobs of its namespace whose controller it is."""
    found, frontier = [job], [job]
    while frontier:
        uids = {str(owner.uid) for owner in frontier}
        frontier = [
            candidate for candidate in Job.objects.filter(
                cluster=job.cluster, namespace=job.namespace,
                manifest__metadata__ownerReferences__isnull=False)
            if any(isinstance(ref, Mapping) and ref.get("controller")
                   and str(ref.get("uid")) in uids
                   for ref in (candidate.manifest.get("metadata") or {}).get(
                       "ownerReferences") or ())
            and candidate not in found]
        found.extend(frontier)
    return found


@dataclass(frozen=True)
class WorkloadRequest:
    """One Workload to create: what ``POST .../workloads`` carries."""

    namespace: str
    name: str
    spec: Any
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # ``metadata.ownerReferences``: the object of an external framework the Workload is for.
    owner_references: Any = None


def create_workload(
    spec: Any,
    *,
    namespace: str,
    name: str,
    cluster: Cluster | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    owner_references: Any = None,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Workload:
    """Create a Workload directly (Kueue's custom-workload integration), pending in its queue.

    The spec follows ``jobframework.validate_workload_spec``; a named WorkloadPriorityClass must exist
    and gives the priority. ``owner_references`` may name one stored object of a MultiKueue
    external framework, which the Workload is then for (``_owner_of``). Raises
    ValidationError by field path, or ConflictError.
    """
    request = WorkloadRequest(namespace, name, spec, labels or {}, annotations or {},
                              owner_references)
    return create_workloads([request], cluster=cluster, prefix_paths=False, user=user)[0]


def create_workloads(
    requests: Sequence[WorkloadRequest],
    *,
    cluster: Cluster | None = None,
    prefix_paths: bool = True,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> list[Workload]:
    """Create many Workloads in one transaction: all of them or, on any error, none.

    Each request is validated as ``create_workload`` validates one; errors name the item
    (``items[3].spec.podSets[0].count``) unless ``prefix_paths`` is off. The writes are
    batched (one INSERT, one query for the local queues, one for existing names), so a
    generator or an automation that submits thousands of workloads costs a few queries.
    A ``user`` who is not an admin is bound by their namespace grants (``scheduling.grants``).
    """
    domain = resolve_cluster(cluster)
    slices_enabled = bool(_kueue_settings()["ELASTIC_JOBS_VIA_WORKLOAD_SLICES"])
    errors: list[FieldError] = []
    drafts: list[tuple[WorkloadRequest, jobframework.WorkloadSpecValues]] = []
    bound: dict[str, NamespaceGrant | None] = {}
    owners: dict[int, Job] = {}
    pod_sets = jobframework.PodSetValidations()
    for index, request in enumerate(requests):
        item_errors = (jobframework.validate_labels(dict(request.labels))
                       + jobframework.validate_annotations(dict(request.annotations)))
        owner, owner_errors = _owner_of(domain, request.namespace, request.owner_references)
        item_errors.extend(owner_errors)
        if owner is not None:
            owners[index] = owner
        item_errors.extend(jobframework.validate_object_name(request.name, request.namespace))
        item_errors.extend(grants.namespace_errors(request.namespace))
        elastic = jobframework.is_elastic(request.annotations, slices_enabled=slices_enabled)
        values, spec_errors = jobframework.validate_workload_spec(
            request.spec, elastic=elastic, pod_sets=pod_sets)
        item_errors.extend(spec_errors)
        if values is not None:
            if request.namespace not in bound:
                bound[request.namespace] = submission_grant(user, request.namespace)
            grant = bound[request.namespace]
            item_errors.extend(grants.pod_template_errors(
                grant, grants.workload_templates(request.spec)))
            item_errors.extend(grants.priority_errors(
                grant, values.priority, class_path=jobframework.priority_class_path(request.spec),
                explicit_path="spec.priority"))
        prefix = f"items[{index}]." if prefix_paths else ""
        errors.extend(FieldError(prefix + e.path, e.message) for e in item_errors)
        if values is not None:
            drafts.append((request, values))
    keys = [(r.namespace, r.name) for r in requests]
    if len(set(keys)) != len(keys):
        errors.append(FieldError("items", "two items have the same namespace and name"))
    if len({job.pk for job in owners.values()}) != len(owners):
        errors.append(FieldError("items", "two items name the same owner"))
    if errors:
        raise invalid(errors)
    try:
        with transaction.atomic():
            # (class name, class source, value) per draft; a class is looked up once.
            resolved: dict[tuple[str, str, int | None], tuple[str, str, int]] = {}
            priorities: list[tuple[str, str, int]] = []
            for index, (request, values) in enumerate(drafts):
                wanted = values.priority
                cache_key = (wanted.source, wanted.class_name, wanted.priority)
                if cache_key not in resolved:
                    prefix = f"items[{index}]." if prefix_paths else ""
                    resolved[cache_key] = _resolve_priority(
                        wanted, cluster=domain, path=prefix + jobframework.priority_class_path(request.spec),
                        explicit_path=prefix + "spec.priority",
                    )
                priorities.append(resolved[cache_key])
            # An owner gets one Workload, even from two requests at once.
            owner_ids = [job.pk for job in owners.values()]
            list(Job.objects.select_for_update().filter(pk__in=owner_ids).values_list("pk"))
            taken = Workload.objects.filter(job_id__in=owner_ids).values_list(
                "job__name", flat=True).first()
            if taken is not None:
                raise ConflictError(f"the owner {taken!r} already has a Workload")
            local_queues = _local_queue_ids(
                domain, [(r.namespace, v.queue_name) for r, v in drafts])
            admission.request_admission(domain.pk)
            rows = [
                {
                    "cluster_id": domain.pk, "namespace": request.namespace, "name": request.name,
                    "job_id": owner.pk if (owner := owners.get(index)) is not None else None,
                    "queue_name": values.queue_name,
                    "local_queue_id": local_queues.get((request.namespace, values.queue_name)),
                    "priority_class_name": class_name,
                    "priority_class_source": class_source,
                    "priority": priority,
                    "active": values.active,
                    "maximum_execution_time_seconds": values.maximum_execution_time_seconds,
                    "pod_sets": values.pod_sets,
                    "labels": dict(request.labels),
                    "annotations": dict(request.annotations),
                }
                # With no error, every request has its draft, at its own index.
                for index, ((request, values), (class_name, class_source, priority))
                in enumerate(zip(drafts, priorities, strict=True))
            ]
            created = ([save_new_workload(Workload(**rows[0]))] if len(rows) == 1
                       else _insert_workloads(rows))
            # The domain and the owner are at hand: a caller reaches them without a query.
            for index, workload in enumerate(created):
                workload.cluster = domain
                if index in owners:
                    workload.job = owners[index]
            return created
    except IntegrityError as exc:
        # Rolled back: the names taken are looked for now, to name one.
        existing = _existing_names(domain, keys)
        name = existing[0] if existing else (
            requests[0].name if len(requests) == 1 else "of this request")
        raise ConflictError(f'workloads.kueue.x-k8s.io "{name}" already exists') from exc


_OWNER_PATH = "metadata.ownerReferences"


def _owner_of(domain: Cluster, namespace: str, references: Any) -> tuple[Job | None, list[FieldError]]:
    """The stored object ``metadata.ownerReferences`` names, as Kueue's Workload names the
    job it is for. Only an object of a MultiKueue external framework may be named: kueueweb
    makes the Workloads of the kinds it reconciles itself. One owner, which has no Workload
    yet; ``uid``, when given, must be the object's."""
    if references is None or references == []:
        return None, []
    if not isinstance(references, list) or not all(isinstance(r, Mapping) for r in references):
        return None, [FieldError(_OWNER_PATH, "must be a list of objects")]
    if len(references) > 1:
        return None, [FieldError(_OWNER_PATH, "may name one owner only: the object the "
                                 "Workload is for")]
    reference, path = references[0], f"{_OWNER_PATH}[0]"
    errors = [FieldError(f"{path}.{key}", "is required") for key in ("apiVersion", "kind", "name")
              if not isinstance(reference.get(key), str) or not reference.get(key)]
    if errors:
        return None, errors
    api_version, kind, name = reference["apiVersion"], reference["kind"], reference["name"]
    integration = registry.by_kind(api_version, kind)
    enabled = registry.enabled_names(_kueue_settings())
    if (not isinstance(integration, jobframework.GenericJob) or integration.constructs_workload
            or integration.framework_name not in enabled):
        listed = ", ".join(registry.external_names(_kueue_settings())) or "none"
        return None, [FieldError(f"{path}.kind", f"{api_version} {kind!r} is not a MultiKueue "
                                 "external framework (listed: " + listed + "); kueueweb makes "
                                 "the Workloads of the kinds it reconciles itself")]
    job = Job.objects.filter(cluster=domain, namespace=namespace, api_group=integration.group,
                             kind=kind, name=name).first()
    if job is None:
        return None, [FieldError(f"{path}.name", f'{integration.plural}.{integration.group} '
                                 f'"{name}" not found in namespace {namespace!r}')]
    uid = reference.get("uid")
    if uid not in (None, "") and str(uid) != str(job.uid):
        return None, [FieldError(f"{path}.uid", f"is {uid!r}, but {kind} {name!r} has uid "
                                 f"{job.uid}")]
    held = job.workloads.values_list("name", flat=True).first()
    if held is not None:
        return None, [FieldError(path, f"{kind} {name!r} already has the Workload {held!r}")]
    return job, []


def _existing_names(domain: Cluster, keys: Sequence[tuple[str, str]]) -> list[str]:
    """Names of ``keys`` (namespace, name) that already exist in the domain.

    Asked only once an INSERT has failed: a name taken is rare, and looking for one before
    every batch would cost a query as long as the INSERT itself."""
    wanted = set(keys)
    found = Workload.objects.filter(
        cluster=domain, namespace__in={ns for ns, _ in keys}, name__in={n for _, n in keys},
    ).values_list("namespace", "name")
    return sorted(name for namespace, name in found if (namespace, name) in wanted)


def _local_queue_ids(domain: Cluster, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """The ids of the LocalQueues named by (namespace, queue name) that exist, in one query
    (ids, not instances: a batch names hundreds of queues, and a new workload needs only
    the key).

    Selected by namespace only: a namespace holds a few local queues, and a filter on the
    names as well would make the database probe every (namespace, name) combination of the
    two lists over its index, a million probes for a thousand queues."""
    wanted = {key for key in keys if key[1]}
    if not wanted:
        return {}
    found = LocalQueue.objects.filter(
        cluster=domain, namespace__in={ns for ns, _ in wanted}).values_list("namespace", "name", "pk")
    return {(namespace, name): pk for namespace, name, pk in found if (namespace, name) in wanted}


def _insert_workloads(rows: Sequence[dict[str, Any]]) -> list[Workload]:
    """Insert pending workloads, one row of values (field ``attname`` to value) each, as
    ``save_new_workload`` inserts one: queued at their creation time, written once (the
    version readers cache rows by stays the first). The rows go as rows
    (``bulk.insert_rows_returning_ids``), not as model instances through ``save()`` or
    ``bulk_create``: preparing every field of every instance cost more than the INSERT.

    Each row is stamped with its own creation time, in order, as saving one after the
    other would, so that ties in a queue (same priority) keep the order of the batch.
    The Workloads returned are built afterwards from the rows, with their own copies of
    the JSON values and the other fields' defaults, as a load from the database makes them."""
    stamped = []
    for row in rows:
        now = timezone.now()
        # Kueue orders a queue by creation time: queued_at starts as created_at.
        stamped.append({**row, "uid": uuid.uuid4(), "created_at": now, "updated_at": now,
                        "queued_at": now})
    ids = bulk.insert_rows_returning_ids(Workload, stamped)
    # The instances' values in column order: the defaults, each row's values over them.
    # A JSON default (a dict or list) is made anew for each instance, as the field would.
    fields = Workload._meta.concrete_fields
    # DEFERRED: the id, set below, and the generated columns, which the database computes
    # and the instance reads when first asked for them.
    defaults = [DEFERRED if f.primary_key or f.generated else f.get_default() for f in fields]
    position = {f.attname: index for index, f in enumerate(fields)}
    made_anew = [(index, type(value) if not value else functools.partial(json_copy, value))
                 for index, value in enumerate(defaults) if type(value) in (dict, list)]
    pk_index = position[Workload._meta.pk.attname]
    alias = connection.alias
    seen: set[int] = set()  # ids of the JSON values already given to an instance
    created = []
    for pk, row in zip(ids, stamped, strict=True):
        values = defaults.copy()
        for index, make in made_anew:
            values[index] = make()
        for name, value in row.items():
            if type(value) in (dict, list):
                # Rows may share a value (equal pod sets): each instance gets its own.
                if id(value) in seen:
                    value = json_copy(value)
                else:
                    seen.add(id(value))
            values[position[name]] = value
        values[pk_index] = pk
        workload = Workload(*values)
        workload._state.adding = False
        workload._state.db = alias
        created.append(workload)
    return created


def update_workload(
    workload: Workload,
    patch: Mapping[str, Any],
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
) -> Workload:
    """Apply a JSON merge patch to a workload's spec: ``active`` unless the workload has
    finished (``actions.refusal``); ``queueName``
    and the priority only while no quota is reserved. Pod sets and the maximum execution
    time cannot change; with quota reserved they are refused with Kueue's messages. A new
    priority asked by a ``user`` who is not an admin is bound by their namespace grant.

    The write is conditional on the version read, so a change racing with the admission
    cycle is refused (ConflictError) rather than applied to a workload that was admitted
    meanwhile. Raises ValidationError by field path.
    """
    if not isinstance(patch, Mapping):
        raise invalid([FieldError("body", "must be an object")])
    errors = _metadata_patch_errors(workload, patch.get("metadata"))
    spec_patch = patch.get("spec")
    if spec_patch is not None and not isinstance(spec_patch, Mapping):
        errors.append(FieldError("spec", "must be an object"))
        spec_patch = None
    current = jobframework.spec_of(workload)
    merged = merge_patch(current, spec_patch or {})
    touched = set(spec_patch or {})
    if touched & {"priorityClassRef", "priorityClassName", "priorityClassSource"}:
        # Naming another class: its value replaces the one shown for the old class.
        if "priority" not in touched:
            merged.pop("priority", None)
        if "priorityClassRef" not in touched:
            merged.pop("priorityClassRef", None)
    reserved = has_quota_reservation(workload)
    changes: dict[str, Any] = {}
    errors.extend(jobframework.frozen_spec_errors(current, merged, reserved=reserved))

    active = merged.get("active", True)
    if not isinstance(active, bool):
        errors.append(FieldError("spec.active", "must be a boolean"))
    elif active != workload.active:
        refused = actions.refusal(workload, actions.ACTIVATE if active else actions.DEACTIVATE)
        if refused is not None:
            errors.append(refused)
        changes["active"] = active

    queue_name = merged.get("queueName") or ""
    if queue_name != workload.queue_name:
        queue_errors = jobframework.validate_queue_name(queue_name)
        if reserved:
            queue_errors = [FieldError("spec.queueName",
                                       "queueName is immutable while workload quota reserved")]
        errors.extend(queue_errors)
        changes["queue_name"] = queue_name
        if not queue_errors:
            changes["local_queue"] = local_queue_for(workload.cluster, workload.namespace, queue_name)

    request, priority_errors = jobframework.priority_request(merged)
    errors.extend(priority_errors)
    if errors:
        raise invalid(errors)
    priority = _resolve_priority(
        request, cluster=workload.cluster, path=jobframework.priority_class_path(merged),
        explicit_path="spec.priority",
    )
    if priority != (workload.priority_class_name, workload.priority_class_source, workload.priority):
        grant_errors = grants.priority_errors(
            submission_grant(user, workload.namespace), request,
            class_path=jobframework.priority_class_path(merged), explicit_path="spec.priority")
        if grant_errors:
            raise invalid(grant_errors)
        if reserved:
            path = "spec.priorityClassRef" if priority[:2] != (
                workload.priority_class_name, workload.priority_class_source) else "spec.priority"
            field_name = path.removeprefix("spec.")
            raise invalid([FieldError(path, f"{field_name} is immutable while workload quota "
                                       "reserved")])
        changes["priority_class_name"], changes["priority_class_source"], changes["priority"] = (
            priority)
    if not changes:
        return workload
    updated = Workload.objects.filter(
        pk=workload.pk, resource_version=workload.resource_version
    ).update(**changes, resource_version=F("resource_version") + 1, updated_at=timezone.now())
    if updated != 1:
        raise ConflictError(
            f'Operation cannot be fulfilled on workloads.kueue.x-k8s.io "{workload.name}": the '
            "object has been modified; please apply your changes to the latest version and "
            "try again"
        )
    admission.request_admission(workload.cluster_id)  # type: ignore[arg-type]
    workload.refresh_from_db()
    if "active" in changes:
        lifecycle.set_active(workload, workload.active, now=timezone.now())
    return workload


def _metadata_patch_errors(workload: Workload, metadata: Any) -> list[FieldError]:
    """Labels and annotations are not editable here; echoing them back unchanged is fine."""
    if metadata is None:
        return []
    if not isinstance(metadata, Mapping):
        return [FieldError("metadata", "must be an object")]
    errors = []
    for key, current in (("labels", workload.labels), ("annotations", workload.annotations)):
        if key in metadata and merge_patch(current, metadata[key] or {}) != (current or {}):
            errors.append(FieldError(f"metadata.{key}", "cannot be changed through the API"))
    return errors


def delete_workload(workload: Workload, *, now: datetime | None = None) -> None:
    """Delete a workload; the quota it held is free at once (usage is derived). A
    reconciler passes the time of its pass as ``now`` (``delete_job``)."""
    with transaction.atomic():
        freed = _reserving_queue_ids(Workload.objects.filter(pk=workload.pk))
        workload.delete()
        _after_removal(workload.cluster_id, freed,  # type: ignore[arg-type]
                       now=timezone.now() if now is None else now)


def _reserving_queue_ids(workloads: Any) -> set[int]:
    return set(
        workloads.filter(phase__in=_RESERVED_PHASES, cluster_queue__isnull=False)
        .values_list("cluster_queue_id", flat=True)
    )


def _after_removal(cluster_id: int, freed_queue_ids: set[int], *, now: datetime) -> None:
    """Quota given back lets parked workloads of those cohort trees try again."""
    if freed_queue_ids:
        admission.on_quota_released(cluster_id, freed_queue_ids, now=now)
    else:
        admission.request_admission(cluster_id)


def evict_workload(
    workload: Workload,
    *,
    user: AbstractBaseUser | AnonymousUser | None = None,
    now: Any = None,
) -> Workload:
    """Evict a workload that holds quota, as a user asking for it (reason ``EvictedByUser``).

    The first phase of an eviction (``lifecycle.evict``): the job's pods are stopped by its
    cluster, then the quota is given back and the workload goes straight back to its queue
    (``EvictedByUser`` requeues at once, as Preempted does). The row is locked so that a
    concurrent admission cycle or lifecycle pass sees either the old or the new state.

    Raises PermissionDenied (``user`` may not operate in the namespace), ValidationError
    (the state does not allow it: ``actions.refusal``) or ConflictError.
    """
    if user is not None and not can_operate_in(user, workload.namespace):
        raise PermissionDenied(f"You may not evict workloads in namespace {workload.namespace!r}.")
    now = now or timezone.now()
    username = user.get_username() if user is not None and user.is_authenticated else "system"
    with transaction.atomic():
        locked = (Workload.objects.select_for_update(of=("self",), no_key=True).select_related("job")
                  .filter(pk=workload.pk).first())
        if locked is None:
            raise ConflictError(f'workloads.kueue.x-k8s.io "{workload.name}" not found')
        refused = actions.refusal(locked, actions.EVICT)
        if refused is not None:
            raise invalid([refused])
        events: list[Event] = []
        if not lifecycle.evict(locked, "EvictedByUser", f"Evicted by {username}", now=now,
                               events=events):
            raise ConflictError(
                f'Operation cannot be fulfilled on workloads.kueue.x-k8s.io "{locked.name}": '
                "the object has been modified; please try again")
        Event.objects.bulk_create(events)
        domain = lifecycle.domain_of(locked)
        admission.request_admission(domain)
        lifecycle.request_lifecycle(domain)
        reconcile.request_cluster_sync(domain)
    return locked
