"""Workloads and jobs as the API shows them: Kueue's Workload (v1beta2) and the jobs of every
enabled kind (batch/v1 Jobs, ...), each with its own apiVersion and kind.

``workload_to_dict`` and ``job_to_dict`` build the objects (the UI reuses them). The
serializer classes describe the same shapes for the OpenAPI schema and render through those
functions; input is validated by ``scheduling.services`` so that the API, the UI and the
admin refuse the same things with the same field paths.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from scheduling import jobframework
from scheduling.api.base import object_metadata
from scheduling.choices import JobSource, WorkloadPhase
from scheduling.models import Event, Job, Workload

WORKLOAD_API_VERSION = "kueue.x-k8s.io/v1beta2"


def _timestamp(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def workload_metadata(workload: Workload) -> dict[str, Any]:
    metadata = object_metadata(workload, namespaced=True)
    if workload.job_id is not None:
        job = workload.job
        assert job is not None
        metadata["ownerReferences"] = [{
            "apiVersion": job.api_version,
            "kind": job.kind,
            "name": job.name,
            "uid": str(job.uid),
            "controller": True,
            "blockOwnerDeletion": True,
        }]
    return metadata


def workload_status(workload: Workload) -> dict[str, Any]:
    """``status`` with every field present (empty when unset), so clients need no guards."""
    pending = workload.phase == WorkloadPhase.PENDING
    return {
        "conditions": workload.conditions or [],
        "admission": workload.admission,
        "requeueState": workload.requeue_state,
        "reclaimablePods": workload.reclaimable_pods or [],
        "admissionChecks": workload.admission_check_states or [],
        "accumulatedPastExecutionTimeSeconds": workload.accumulated_past_execution_time_seconds,
        "schedulingStats": workload.scheduling_stats or None,
        "nominatedClusterNames": workload.nominated_cluster_names or [],
        "clusterName": workload.cluster_name or None,
        # What the scheduler considers for a workload that is not admitted (Kueue).
        "resourceRequests": [
            {"name": ps.get("name", jobframework.DEFAULT_POD_SET_NAME),
             "resources": jobframework.pod_set_total_requests(ps)}
            for ps in workload.pod_sets
        ] if pending else [],
    }


def workload_to_dict(workload: Workload) -> dict[str, Any]:
    """A Workload object as Kueue's API serves it."""
    return {
        "apiVersion": WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": workload_metadata(workload),
        "spec": jobframework.spec_of(workload),
        "status": workload_status(workload),
    }


def job_to_dict(job: Job) -> dict[str, Any]:
    """The job as submitted (name, namespace and uid defaulted) plus its ``status``."""
    manifest = dict(job.manifest)
    manifest["apiVersion"], manifest["kind"] = job.api_version, job.kind
    metadata = dict(manifest.get("metadata") or {})
    metadata["resourceVersion"] = str(job.resource_version)
    metadata["creationTimestamp"] = _timestamp(job.created_at)
    # Not Kubernetes fields: the scheduling domain (cluster) the Job was submitted to, and
    # where it was created (``kueueweb``, or ``cluster``: with kubectl, adopted there).
    metadata["cluster"] = job.cluster.name
    metadata["source"] = job.source
    manifest["metadata"] = metadata
    manifest["status"] = job.status or {}
    return manifest


# --- Shapes for the schema -----------------------------------------------------------------


class OwnerReferenceSerializer(serializers.Serializer[Any]):
    apiVersion = serializers.CharField()
    kind = serializers.CharField()
    name = serializers.CharField()
    uid = serializers.CharField()
    controller = serializers.BooleanField()
    blockOwnerDeletion = serializers.BooleanField()


class ObjectMetaSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(required=False, help_text="Required unless generateName is set.")
    generateName = serializers.CharField(
        required=False, write_only=True,
        help_text="Prefix of a name completed with five random characters.")
    namespace = serializers.CharField(
        required=False, help_text="Defaults to the namespace of the URL; must match it if set.")
    uid = serializers.CharField(read_only=True)
    resourceVersion = serializers.CharField(read_only=True)
    creationTimestamp = serializers.DateTimeField(read_only=True)
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    annotations = serializers.DictField(child=serializers.CharField(), required=False)
    ownerReferences = OwnerReferenceSerializer(many=True, read_only=True)
    cluster = serializers.CharField(
        read_only=True, help_text="Not a Kubernetes field: the cluster (scheduling domain).")


class JobMetaSerializer(ObjectMetaSerializer):
    # Named like ``Field.source``; the serializer's metaclass takes declared fields off the
    # class, so the name is free for the API's field.
    source = serializers.ChoiceField(  # type: ignore[assignment]
        choices=JobSource.values, read_only=True,
        help_text="Not a Kubernetes field: where the job was created: kueueweb (its API or "
        "pages; the cluster runs a copy), or cluster (created there with kubectl and adopted: "
        "the cluster's own object runs in place and is changed there, not through kueueweb).")


class PodSetSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(required=False, default=jobframework.DEFAULT_POD_SET_NAME)
    count = serializers.IntegerField(required=False, default=1, min_value=1)
    minCount = serializers.IntegerField(
        required=False, min_value=1,
        help_text="Partial admission: the fewest pods acceptable (one pod set at most).")
    template = serializers.JSONField(help_text="A pod template (core/v1 PodTemplateSpec).")


class PriorityClassRefSerializer(serializers.Serializer[Any]):
    group = serializers.ChoiceField(choices=["kueue.x-k8s.io", "scheduling.k8s.io"])
    kind = serializers.ChoiceField(choices=["WorkloadPriorityClass", "PriorityClass"])
    name = serializers.CharField()


class WorkloadSpecSerializer(serializers.Serializer[Any]):
    podSets = PodSetSerializer(many=True)
    queueName = serializers.CharField(required=False, help_text="The LocalQueue.")
    priorityClassRef = PriorityClassRefSerializer(required=False)
    priority = serializers.IntegerField(required=False)
    active = serializers.BooleanField(required=False, default=True)
    maximumExecutionTimeSeconds = serializers.IntegerField(required=False, min_value=1)


class PodSetAssignmentSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    flavors = serializers.DictField(child=serializers.CharField())
    resourceUsage = serializers.DictField(child=serializers.CharField())
    count = serializers.IntegerField()


class AdmissionSerializer(serializers.Serializer[Any]):
    clusterQueue = serializers.CharField()
    podSetAssignments = PodSetAssignmentSerializer(many=True)


class PodSetResourceRequestsSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    resources = serializers.DictField(child=serializers.CharField())


class WorkloadStatusSerializer(serializers.Serializer[Any]):
    conditions = serializers.ListField(child=serializers.JSONField())
    admission = AdmissionSerializer(allow_null=True)
    requeueState = serializers.JSONField(allow_null=True)
    reclaimablePods = serializers.ListField(child=serializers.JSONField())
    admissionChecks = serializers.ListField(child=serializers.JSONField())
    accumulatedPastExecutionTimeSeconds = serializers.IntegerField()
    schedulingStats = serializers.JSONField(allow_null=True)
    nominatedClusterNames = serializers.ListField(child=serializers.CharField())
    clusterName = serializers.CharField(allow_null=True)
    resourceRequests = PodSetResourceRequestsSerializer(many=True)


class WorkloadSerializer(serializers.Serializer[Workload]):
    """A Kueue Workload (``kueue.x-k8s.io/v1beta2``); ``status`` is read-only."""

    apiVersion = serializers.CharField(required=False, default=WORKLOAD_API_VERSION)
    kind = serializers.CharField(required=False, default="Workload")
    metadata = ObjectMetaSerializer()
    spec = WorkloadSpecSerializer()
    status = WorkloadStatusSerializer(read_only=True)

    def to_representation(self, instance: Workload) -> dict[str, Any]:
        return workload_to_dict(instance)


class WorkloadSpecPatchSerializer(serializers.Serializer[Any]):
    active = serializers.BooleanField(required=False)
    queueName = serializers.CharField(required=False, help_text="Only while no quota is reserved.")
    priorityClassRef = PriorityClassRefSerializer(
        required=False, allow_null=True, help_text="Only while no quota is reserved.")
    priority = serializers.IntegerField(required=False, help_text="Only while no quota is reserved.")


class WorkloadPatchSerializer(serializers.Serializer[Any]):
    """A JSON merge patch of a Workload's spec."""

    spec = WorkloadSpecPatchSerializer()


class JobSerializer(serializers.Serializer[Job]):
    """A job of an enabled kind (a batch/v1 Job, ...) as submitted, with the status its
    cluster reports."""

    apiVersion = serializers.CharField(help_text="The kind's API version, e.g. batch/v1.")
    kind = serializers.CharField(help_text="An enabled job kind, e.g. Job.")
    metadata = JobMetaSerializer()
    spec = serializers.JSONField(help_text="The kind's spec (a batch/v1 JobSpec for a Job).")
    status = serializers.JSONField(read_only=True)

    def to_representation(self, instance: Job) -> dict[str, Any]:
        return job_to_dict(instance)


# --- Scaling a job (elastic jobs, workload slices) ------------------------------------------


class PodSetCountSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="A pod set the job's kind scales (a Job: main).")
    count = serializers.IntegerField(
        min_value=0, max_value=2**31 - 1,
        help_text="Its new count, as the kind's field holds it (a Job: spec.parallelism).")


class JobScaleSerializer(serializers.Serializer[Any]):
    """A scale request: the new counts of the pod sets the job's kind scales, by pod set
    (``podSets``), or for a Job its new ``spec.parallelism`` (``parallelism``)."""

    parallelism = serializers.IntegerField(
        required=False, min_value=0, max_value=2**31 - 1,
        help_text="A Job's new spec.parallelism (an int32 ≥ 0; 0 runs no pods). The pods "
        "that run are min(parallelism, completions).")
    podSets = PodSetCountSerializer(many=True, required=False)


class JobSpecPatchSerializer(serializers.Serializer[Any]):
    parallelism = serializers.IntegerField(
        required=False, min_value=0, max_value=2**31 - 1,
        help_text="For a Job, the only field a patch may change (other kinds: the fields of "
        "the counts their pod sets scale by). An admitted job scales only when it is "
        'elastic (annotation kueue.x-k8s.io/elastic-job: "true").')


class JobPatchMetadataSerializer(serializers.Serializer[Any]):
    resourceVersion = serializers.CharField(
        required=False,
        help_text="If set, the patch applies only to this version of the job (409 otherwise).")


class JobPatchSerializer(serializers.Serializer[Any]):
    """A JSON merge patch of a job: only the counts its kind scales may change (a Job's
    ``spec.parallelism``). Other fields may be sent with their current values (a whole job
    read back is accepted)."""

    metadata = JobPatchMetadataSerializer(required=False)
    spec = JobSpecPatchSerializer()


# --- The workload status subresource ---------------------------------------------------------


class AdmissionCheckStatePatchSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=["Pending", "Ready", "Retry", "Rejected"])
    message = serializers.CharField(required=False, allow_blank=True)
    requeueAfterSeconds = serializers.IntegerField(
        required=False, min_value=0,
        help_text="Retry: how long the evicted workload waits before it is queued again.")
    podSetUpdates = serializers.ListField(
        child=serializers.JSONField(), required=False, max_length=18,
        help_text='Ready: what the pods of a pod set get, e.g. [{"name": "main", '
        '"annotations": {...}, "labels": {...}, "nodeSelector": {...}, "tolerations": '
        "[...]}]; immutable while the check stays Ready; a key that conflicts with the "
        "admission's fails the job's start.")


class WorkloadStatusFieldsPatchSerializer(serializers.Serializer[Any]):
    nominatedClusterNames = serializers.ListField(
        child=serializers.CharField(), required=False, allow_null=True,
        help_text="MultiKueue External dispatcher: the worker clusters to dispatch to, from "
        "the workload's MultiKueueConfig (null or [] clears). Only while quota is reserved, "
        "the MultiKueue check is Pending and no worker has admitted the workload. Operator "
        "role in the namespace.")
    admissionChecks = AdmissionCheckStatePatchSerializer(
        many=True, required=False,
        help_text="Admission check states set by their controller. Admin role.")


class WorkloadStatusPatchSerializer(serializers.Serializer[Any]):
    """A JSON merge patch of a Workload's ``status``: ``nominatedClusterNames`` and
    ``admissionChecks``; every other status field is refused, naming it."""

    status = WorkloadStatusFieldsPatchSerializer()


class InvolvedObjectSerializer(serializers.Serializer[Any]):
    kind = serializers.CharField()
    namespace = serializers.CharField(required=False)
    name = serializers.CharField()


class EventSerializer(serializers.Serializer[Event]):
    """A workload's event as core/v1 prints one: kueueweb's own (about the workload or its
    job) and those observed on a Kubernetes cluster about its pods (``count`` > 1 when the
    cluster saw it again)."""

    involvedObject = serializers.SerializerMethodField()
    type = serializers.CharField()
    reason = serializers.CharField()
    message = serializers.CharField()
    count = serializers.IntegerField()
    lastTimestamp = serializers.DateTimeField(source="created_at")

    def get_involvedObject(self, obj: Event) -> dict[str, str]:  # noqa: N802
        involved = {"kind": obj.object_kind, "name": obj.object_name}
        if obj.object_namespace:
            involved["namespace"] = obj.object_namespace
        return involved

