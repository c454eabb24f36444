"""Workloads and Jobs over REST, laid out as Kubernetes serves them.

``/api/v1/namespaces/{namespace}/workloads/[{name}/]`` and ``/api/v1/workloads/``; the same
for ``jobs`` of every enabled kind, whose scalable pod-set counts (a Job's parallelism) change
through ``POST .../jobs/{name}/scale`` or a merge patch of those fields (elastic jobs,
``scheduling.workload.slices.scale_job``). ``?cluster=NAME``
addresses another scheduling domain (default: the manager). Views only parse, authorize and
call ``scheduling.services`` (and ``scheduling.workload.slices``).
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import status
from rest_framework.exceptions import NotFound, ParseError, ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.viewsets import GenericViewSet

from kueueweb.api import ConflictError as Conflict
from kueueweb.api import PayloadTooLarge, URLArgumentsMixin
from kueueweb.roles import Role
from multicluster.models import Cluster
from scheduling import deployments, jobframework, leaderworkersets, services, statefulsets
from scheduling.api.workload_filters import JobFilter, WorkloadFilter
from scheduling.api.workload_serializers import (
    EventSerializer,
    JobPatchSerializer,
    JobScaleSerializer,
    JobSerializer,
    WorkloadPatchSerializer,
    WorkloadSerializer,
    job_to_dict,
)
from scheduling.core.patch import merge_patch
from scheduling.jobframework import registry
from scheduling.manifests import yamlio
from scheduling.models import Event, Job, Workload
from scheduling.validation import FieldError, errors_to_dict
from scheduling.workload import slices

# --- Parsers: one object per request, JSON or YAML, size-limited ---------------------------


class _ManifestParser(BaseParser, ABC):
    """Reads at most ``KUEUEWEB["MAX_MANIFEST_BYTES"]`` and expects exactly one object."""

    @abstractmethod
    def load(self, data: bytes) -> list[Any]:
        """The documents in ``data`` (JSON or YAML, by subclass)."""

    def parse(
        self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> Any:
        limit = yamlio.max_manifest_bytes()
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH", "") if request is not None else ""
        if str(declared).isdigit() and int(declared) > limit:
            # Refused from the declared length, before reading the body.
            raise PayloadTooLarge(f"manifests are {declared} bytes; at most {limit} bytes are "
                                  "accepted (KUEUEWEB_MAX_MANIFEST_BYTES)")
        data = stream.read(limit + 1) if stream is not None else b""
        if len(data) > limit:  # no (or a wrong) declared length; only limit + 1 bytes read
            size = f"more than {limit} bytes"
            raise PayloadTooLarge(f"manifests are {size}; at most {limit} bytes are accepted "
                                  "(KUEUEWEB_MAX_MANIFEST_BYTES)")
        try:
            documents = self.load(data)
        except yamlio.ManifestTooLarge as exc:
            raise PayloadTooLarge(str(exc)) from exc
        except yamlio.ManifestSyntaxError as exc:
            raise ParseError(str(exc)) from exc
        if len(documents) != 1 or not isinstance(documents[0], Mapping):
            raise ParseError(f"expected one object in the body, found {len(documents)} documents"
                             if len(documents) != 1 else "the body must be an object")
        return documents[0]


class JSONManifestParser(_ManifestParser):
    media_type = "application/json"

    def load(self, data: bytes) -> list[Any]:
        return yamlio.load_json_documents(data)


class MergePatchJSONParser(JSONManifestParser):
    """``kubectl patch --type merge`` sends this media type."""

    media_type = "application/merge-patch+json"


class YAMLManifestParser(_ManifestParser):
    """YAML, parsed safely: no anchors or aliases, no Python objects (``scheduling.manifests.yamlio``)."""

    media_type = "application/yaml"

    def load(self, data: bytes) -> list[Any]:
        return yamlio.load_yaml_documents(data)


class TextYAMLManifestParser(YAMLManifestParser):
    media_type = "text/yaml"


PARSERS = [JSONManifestParser, MergePatchJSONParser, YAMLManifestParser, TextYAMLManifestParser]


# --- Shared pieces -------------------------------------------------------------------------

CLUSTER_PARAMETER = OpenApiParameter(
    "cluster", OpenApiTypes.STR, OpenApiParameter.QUERY,
    description="The cluster (scheduling domain) to address; default: the manager.",
)
NAMESPACE_PARAMETER = OpenApiParameter(
    "namespace", OpenApiTypes.STR, OpenApiParameter.PATH, description="The namespace.")
NAME_PARAMETER = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, description="The object's name.")
JOB_KIND_PARAMETER = OpenApiParameter(
    "kind", OpenApiTypes.STR, OpenApiParameter.QUERY,
    description="The job's kind (`JobSet`, case-insensitive) or `Kind.group` "
    "(`JobSet.jobset.x-k8s.io`). Jobs of different kinds may share a name; without it, a name "
    "that several kinds share is refused (400, naming `kind`).",
)
FIELD_ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description="Field errors by path, as Kubernetes and Kueue name the fields.",
    examples=[OpenApiExample("negative request", value={
        "spec.template.spec.containers[0].resources.requests.cpu": ["'-1' must not be negative"],
    })],
)
REFUSED = OpenApiResponse(description="Not authenticated, or the role or namespace grant is "
                          "missing.")
CONFLICT = OpenApiResponse(description="The name is taken, or the object changed meanwhile.")
NOT_FOUND = OpenApiResponse(description="No such object (or cluster).")
FIELD_ERRORS_SCALE = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description="Field errors by path: the new count (a Job's spec.parallelism), or a field "
    "that may not change.",
    examples=[
        OpenApiExample("admitted job that is not elastic", value={
            "spec.parallelism": ["Forbidden: cannot change while the job's workload holds "
                                 "quota: only elastic jobs (annotation "
                                 'kueue.x-k8s.io/elastic-job: "true", ...) scale while admitted'],
        }),
        OpenApiExample("partial admission", value={
            "spec.parallelism": ["Forbidden: cannot change when partial admission is enabled "
                                 "and the job is not suspended"],
        }),
        OpenApiExample("other field changed", value={"spec.template": ["field is immutable"]}),
    ],
)


class _DomainViewSet(URLArgumentsMixin, GenericViewSet[Any]):
    """Objects of one scheduling domain, optionally of one namespace (from the URL)."""

    write_role = Role.OPERATOR
    parser_classes = PARSERS
    lookup_field = "name"
    resource = ""  # Kubernetes' "<plural>.<group>" for messages

    def get_cluster(self) -> Cluster:
        cluster: Cluster | None = getattr(self, "_cluster", None)
        if cluster is None:
            name = self.request.query_params.get("cluster")
            if name:
                cluster = Cluster.objects.filter(name=name).first()
                if cluster is None:
                    raise NotFound(f'clusters "{name}" not found')
            else:
                cluster = services.resolve_cluster(None)
            self._cluster = cluster
        return cluster

    def get_queryset(self) -> Any:
        queryset = super().get_queryset().filter(cluster=self.get_cluster())
        namespace = self.kwargs.get("namespace")
        if namespace:
            queryset = queryset.filter(namespace=namespace)
        return queryset

    def get_object(self) -> Any:
        name = self.kwargs["name"]
        obj = self.get_queryset().filter(name=name).first()
        if obj is None:
            raise NotFound(f'{self.resource} "{name}" not found')
        self.check_object_permissions(self.request, obj)
        return obj

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(self.get_serializer(self.get_object()).data)


# What a namespace grant bounds (scheduling.grants), for the API's documentation.
GRANT_RULES = (
    "An operator (not an admin) is bound by their namespace grant: every pod template must "
    "meet its Pod Security Standards level (`baseline` unless set; refused naming the check and "
    "the field), pods run as `default` or a service account it allows, and the priority comes "
    "only from a WorkloadPriorityClass it allows, or is 0 (`spec.priority` is refused "
    "otherwise). Namespaces `kube-system`, `kube-public` and `kube-node-lease` are refused to "
    "everyone (`metadata.namespace`)."
)


# How many events ``WorkloadViewSet.events`` returns.
EVENTS_LIMIT = 200


def _body(data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValidationError({"body": ["must be an object"]})
    return data


# --- Workloads -----------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        summary="List workloads",
        description="Kueue Workloads of a namespace, or of every namespace at /api/v1/workloads/.",
        parameters=[CLUSTER_PARAMETER],
        responses={200: WorkloadSerializer(many=True), 401: REFUSED, 403: REFUSED},
    ),
    create=extend_schema(
        summary="Create a workload",
        description="A Workload without a Job (Kueue's custom-workload integration), or the "
        "Workload of an object of a MultiKueue external framework, which "
        "`metadata.ownerReferences` names (apiVersion, kind, name, optional uid). It starts "
        "pending in its queue, queued at its creation time. " + GRANT_RULES,
        parameters=[NAMESPACE_PARAMETER, CLUSTER_PARAMETER],
        request=WorkloadSerializer,
        responses={201: WorkloadSerializer, 400: FIELD_ERRORS, 401: REFUSED, 403: REFUSED,
                   409: CONFLICT},
    ),
    retrieve=extend_schema(
        summary="Read a workload",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, CLUSTER_PARAMETER],
        responses={200: WorkloadSerializer, 404: NOT_FOUND},
    ),
    partial_update=extend_schema(
        summary="Change a workload's spec",
        description="A JSON merge patch of `spec`: `active` at any time; `queueName` and the "
        "priority (`priorityClassRef`, `priority`) while no quota is reserved. Pod sets and "
        "`maximumExecutionTimeSeconds` cannot change; `status` is read-only.",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, CLUSTER_PARAMETER],
        request=WorkloadPatchSerializer,
        responses={200: WorkloadSerializer, 400: FIELD_ERRORS, 403: REFUSED, 404: NOT_FOUND,
                   409: CONFLICT},
    ),
    destroy=extend_schema(
        summary="Delete a workload",
        description="The quota it held is free at once.",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, CLUSTER_PARAMETER],
        responses={204: None, 403: REFUSED, 404: NOT_FOUND},
    ),
)
class WorkloadViewSet(_DomainViewSet):
    queryset = Workload.objects.select_related("cluster", "job")
    serializer_class = WorkloadSerializer
    filterset_class = WorkloadFilter
    resource = "workloads.kueue.x-k8s.io"

    def create(self, request: Request, namespace: str) -> Response:
        body = _body(request.data)
        name, generate, labels, annotations = _workload_metadata(body, namespace)
        owner_references = (body.get("metadata") or {}).get("ownerReferences")
        cluster = self.get_cluster()
        attempts = 1 if name else 8
        for attempt in range(attempts):
            try:
                workload = services.create_workload(
                    body.get("spec"), namespace=namespace,
                    name=name or jobframework.generate_name(generate), cluster=cluster,
                    labels=labels, annotations=annotations,
                    owner_references=owner_references, user=request.user,
                )
                break
            except services.ConflictError as exc:
                if attempt == attempts - 1:
                    raise Conflict(str(exc)) from exc
        return Response(self.get_serializer(workload).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, namespace: str, name: str) -> Response:
        workload = self.get_object()
        try:
            workload = services.update_workload(workload, _body(request.data),
                                                user=request.user)
        except services.ConflictError as exc:
            raise Conflict(str(exc)) from exc
        return Response(self.get_serializer(workload).data)

    def destroy(self, request: Request, namespace: str, name: str) -> Response:
        services.delete_workload(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="A workload's events",
        description="Newest first (at most 200): kueueweb's events about the workload and "
        "its job, and the Warning events a Kubernetes cluster recorded about its pods "
        "(`FailedScheduling`, `FailedMount`, image pull back-off, ...: why they are pending), "
        "with how often the cluster saw each (`count`).",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, CLUSTER_PARAMETER],
        responses={200: EventSerializer(many=True), 404: NOT_FOUND},
    )
    def events(self, request: Request, namespace: str, name: str) -> Response:
        workload = self.get_object()
        rows = Event.objects.filter(workload=workload).order_by("-created_at", "-id")
        return Response({"apiVersion": "v1", "kind": "EventList",
                         "items": [EventSerializer(row).data for row in rows[:EVENTS_LIMIT]]})


def _workload_metadata(
    body: Mapping[str, Any], namespace: str
) -> tuple[str, str, dict[str, str], dict[str, str]]:
    """(name, generateName, labels, annotations) of a Workload body, or field errors."""
    errors: list[FieldError] = []
    if body.get("apiVersion") not in (None, "kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1"):
        errors.append(FieldError("apiVersion", 'must be "kueue.x-k8s.io/v1beta2"'))
    if body.get("kind") not in (None, "Workload"):
        errors.append(FieldError("kind", 'must be "Workload"'))
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValidationError(errors_to_dict([*errors, FieldError("metadata", "must be an object")]))
    name = metadata.get("name") or ""
    generate = metadata.get("generateName") or ""
    if not name and not generate:
        errors.append(FieldError("metadata.name", "name or generateName is required"))
    for path, value in (("metadata.name", name), ("metadata.generateName", generate)):
        if not isinstance(value, str):
            errors.append(FieldError(path, "must be a string"))
    if metadata.get("namespace") not in (None, "", namespace):
        errors.append(FieldError("metadata.namespace", "the namespace of the provided object "
                                 "does not match the namespace sent on the request"))
    maps: list[dict[str, str]] = []
    for key in ("labels", "annotations"):
        value = metadata.get(key) or {}
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            errors.append(FieldError(f"metadata.{key}", "must be a map of strings"))
            value = {}
        maps.append(dict(value))
    if errors:
        raise ValidationError(errors_to_dict(errors))
    return str(name), str(generate), maps[0], maps[1]


# --- Jobs ----------------------------------------------------------------------------------


@extend_schema_view(
    list=extend_schema(
        summary="List jobs",
        description="Jobs (batch/v1 Jobs and the other enabled kinds) of a namespace, or of every namespace at /api/v1/jobs/. "
        "Their workloads are at /api/v1/namespaces/{namespace}/workloads/?job=NAME.",
        parameters=[CLUSTER_PARAMETER],
        responses={200: JobSerializer(many=True), 401: REFUSED, 403: REFUSED},
    ),
    create=extend_schema(
        summary="Submit a job",
        description="A job manifest of an enabled kind (a batch/v1 Job, ...) as JSON or YAML (`Content-Type: application/yaml`"
        " or `text/yaml`). The `kueue.x-k8s.io/queue-name` label names the LocalQueue "
        "(defaulted to `default` when that LocalQueue exists). Kueue creates the Job's "
        "Workload, which is listed with `?job=NAME`. Answers with the manifest plus `status`. "
        + GRANT_RULES,
        parameters=[NAMESPACE_PARAMETER, CLUSTER_PARAMETER],
        request={"application/json": JobSerializer, "application/yaml": JobSerializer,
                 "text/yaml": JobSerializer},
        responses={201: JobSerializer, 400: FIELD_ERRORS, 401: REFUSED, 403: REFUSED,
                   409: CONFLICT, 413: OpenApiResponse(description="Body too large.")},
    ),
    retrieve=extend_schema(
        summary="Read a job",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, JOB_KIND_PARAMETER, CLUSTER_PARAMETER],
        responses={200: JobSerializer, 400: FIELD_ERRORS, 404: NOT_FOUND},
    ),
    partial_update=extend_schema(
        summary="Scale a job (merge patch)",
        description="A JSON merge patch (`application/merge-patch+json` or `application/json`) "
        "of the counts the job's kind scales (a Job: `spec.parallelism`), the only fields that "
        "may change; other fields may be sent with "
        "their current values (changing one is refused, naming it: `spec.template: field is "
        "immutable`). A queued job's workload changes its pod count. An admitted job scales "
        'only if it is elastic (annotation `kueue.x-k8s.io/elastic-job: "true"`): scale-down '
        "shrinks its workload in place and frees the quota at once; scale-up creates a new "
        "workload slice that waits for quota for the extra pods while the job keeps running. "
        "`metadata.resourceVersion`, if sent, must be the current one (409 otherwise). "
        "Answers with the job as GET does.",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, JOB_KIND_PARAMETER, CLUSTER_PARAMETER],
        request={"application/merge-patch+json": JobPatchSerializer,
                 "application/json": JobPatchSerializer},
        responses={200: JobSerializer, 400: FIELD_ERRORS_SCALE, 401: REFUSED, 403: REFUSED,
                   404: NOT_FOUND, 409: CONFLICT},
    ),
    destroy=extend_schema(
        summary="Delete a job",
        description="Deletes the Job and its workload; the quota it held is free at once.",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, JOB_KIND_PARAMETER, CLUSTER_PARAMETER],
        responses={204: None, 400: FIELD_ERRORS, 403: REFUSED, 404: NOT_FOUND},
    ),
)
class JobViewSet(_DomainViewSet):
    queryset = Job.objects.select_related("cluster")
    serializer_class = JobSerializer
    filterset_class = JobFilter
    resource = "jobs"

    def create(self, request: Request, namespace: str) -> Response:
        try:
            job = services.submit_job(
                _body(request.data), namespace=namespace, cluster=self.get_cluster(),
                user=request.user,
            )
        except services.ConflictError as exc:
            raise Conflict(str(exc)) from exc
        location = reverse("job-detail", kwargs={"namespace": namespace, "name": job.name})
        location += "?" + urlencode({"kind": registry.kind_reference(job)})
        return Response(self.get_serializer(job).data, status=status.HTTP_201_CREATED,
                        headers={"Location": location})

    def get_object(self) -> Job:
        """The job of the URL's name, of ``?kind=`` when given (needed when jobs of several
        kinds share the name)."""
        name = self.kwargs["name"]
        kind = self.request.query_params.get("kind")
        job = services.find_job(self.get_queryset(), name, kind=kind)
        if job is None:
            raise NotFound(f'{self._resource_of(kind)} "{name}" not found')
        self.check_object_permissions(self.request, job)
        return job

    def _resource_of(self, kind: str | None) -> str:
        """``jobsets.jobset.x-k8s.io`` for a registered kind, ``jobs`` of any kind otherwise."""
        kind_name, _, group = (kind or "").partition(".")
        for integration in registry.registered():
            if integration.kind.lower() == kind_name.lower() and group in ("", integration.group):
                return f"{integration.plural}.{integration.group}"
        return "jobs"

    def destroy(self, request: Request, namespace: str, name: str) -> Response:
        services.delete_job(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def partial_update(self, request: Request, namespace: str, name: str) -> Response:
        job = self.get_object()
        patch = _body(request.data)
        current = job_to_dict(job)
        merged = merge_patch(current, patch)
        if not isinstance(merged, Mapping):  # pragma: no cover - _body made it an object
            raise ValidationError({"body": ["must be an object"]})
        _check_resource_version(job, patch)
        controller = _replica_controller(job)
        if controller is not None:
            if merged.get("status") != current.get("status"):
                raise ValidationError({"status": [_immutable_message("status", None, [])]})
            job = controller[0](job, _stored_manifest(merged), user=request.user)
            return Response(self.get_serializer(job).data)
        scalable = slices.scalable_pod_sets(job)
        errors = _job_patch_errors(current, _with_counts_of(merged, current, scalable),
                                   scalable)
        if errors:
            raise ValidationError(errors_to_dict(errors))
        changed = _patched_counts(job, merged)
        if changed:
            job = self._scale(job, changed)
        return Response(self.get_serializer(job).data)

    @extend_schema(
        summary="Scale a job",
        description='`{"podSets": [{"name": NAME, "count": N}]}` sets the counts of pod sets '
        "the job's kind scales, at the kind's fields; for a Job, `{\"parallelism\": N}` sets "
        "`spec.parallelism` (pod set `main`), as the merge patch of that field does. A queued "
        "job's workload changes its pod counts; an admitted elastic job shrinks in place or "
        "gets a new workload slice for the extra pods; an admitted job that is not elastic, a "
        "finished job and what the kind forbids (a running Job with partial admission) are "
        "refused, naming the field (`spec.parallelism`). Answers with the job as GET does; "
        "its workloads (slices) are at /api/v1/namespaces/{namespace}/workloads/?job=NAME.",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, JOB_KIND_PARAMETER, CLUSTER_PARAMETER],
        request=JobScaleSerializer,
        responses={200: JobSerializer, 400: FIELD_ERRORS_SCALE, 401: REFUSED, 403: REFUSED,
                   404: NOT_FOUND, 409: CONFLICT},
    )
    def scale(self, request: Request, namespace: str, name: str) -> Response:
        job = self.get_object()
        controller = _replica_controller(job)
        if controller is not None:
            body = _body(request.data)
            unknown = sorted(set(body) - {"replicas"}, key=str)
            if unknown or "replicas" not in body:
                raise ValidationError({str(k): ['unknown field: the body is {"replicas": N}']
                                       for k in unknown} or {"replicas": [
                                           'required: the body is {"replicas": N}']})
            job = controller[1](job, body["replicas"], user=request.user)
            return Response(self.get_serializer(job).data)
        if slices.queued_kind(job) is None:
            raise ValidationError({"kind": [slices.REFUSED_NO_WORKLOAD.message]})
        job = self._scale(job, _scale_body_counts(job, _body(request.data)))
        return Response(self.get_serializer(job).data)

    def _scale(self, job: Job, counts: Mapping[str, Any]) -> Job:
        """``slices.scale_job``; its ValidationError (by field) and PermissionDenied become
        400 and 403 through the API's exception handler."""
        try:
            result = slices.scale_job(job, counts, user=self.request.user)
        except services.ConflictError as exc:
            raise Conflict(str(exc)) from exc
        return result.job


# Fields a client sends back unchanged when it patches the whole object it read.
# The kinds whose objects keep replicas through their own controller: an update or a scale
# of one goes through it (its webhook rules, then a pass of the controller).
_REPLICA_CONTROLLERS: tuple[tuple[Callable[[Job], bool], Callable[..., Job],
                                  Callable[..., Job]], ...] = (
    (deployments.manages, deployments.update_deployment, deployments.scale_deployment),
    (statefulsets.manages, statefulsets.update_statefulset, statefulsets.scale_statefulset),
    (leaderworkersets.manages, leaderworkersets.update_leaderworkerset,
     leaderworkersets.scale_leaderworkerset),
)


def _replica_controller(job: Job) -> tuple[Callable[..., Job], Callable[..., Job]] | None:
    """The update and the scale of ``job``'s controller, when its kind keeps replicas."""
    for manages, update, scale in _REPLICA_CONTROLLERS:
        if manages(job):
            return update, scale
    return None


_JOB_READ_ONLY_METADATA = ("uid", "resourceVersion", "creationTimestamp", "cluster", "source",
                           "generation", "name", "namespace")


def _stored_manifest(merged: Mapping[str, Any]) -> dict[str, Any]:
    """A patched object as stored: without its status and the fields the API adds."""
    manifest = {k: v for k, v in merged.items() if k != "status"}
    metadata = merged.get("metadata")
    if isinstance(metadata, Mapping):
        manifest["metadata"] = {k: v for k, v in metadata.items() if k not in (
            "resourceVersion", "creationTimestamp", "cluster", "source")}
    return manifest


def _check_resource_version(job: Job, patch: Mapping[str, Any]) -> None:
    """Optimistic concurrency: a patch naming a resourceVersion applies to that version only."""
    metadata = patch.get("metadata")
    if not isinstance(metadata, Mapping) or metadata.get("resourceVersion") is None:
        return
    if str(metadata["resourceVersion"]) != str(job.resource_version):
        integration = registry.by_kind(job.api_version, job.kind)
        assert integration is not None, "a stored job is of a registered kind"
        raise Conflict(f"Operation cannot be fulfilled on {integration.plural}."
                       f'{integration.group} "{job.name}": the object '
                       "has been modified; please apply your changes to the latest version "
                       "and try again")


def _job_patch_errors(current: Mapping[str, Any], merged: Mapping[str, Any],
                      scalable: list[jobframework.ScalablePodSet]) -> list[FieldError]:
    """Every field the patch changes (``merged`` has the scalable counts put back), named as
    Kubernetes does (``spec.template: field is immutable``)."""
    errors: list[FieldError] = []
    for key in sorted(set(current) | set(merged), key=str):
        before, after = current.get(key), merged.get(key)
        if before == after:
            continue
        if key in ("spec", "metadata") and isinstance(before, Mapping) and isinstance(
                after, Mapping):
            for sub in sorted(set(before) | set(after), key=str):
                if key == "metadata" and sub == "resourceVersion":
                    continue  # checked by _check_resource_version
                if before.get(sub) != after.get(sub):
                    errors.append(FieldError(f"{key}.{sub}",
                                             _immutable_message(key, sub, scalable)))
        else:
            errors.append(FieldError(str(key), _immutable_message(str(key), None, scalable)))
    return errors


# The fields of a scalable count: ``spec.parallelism``, ``spec.workerGroupSpecs[0].replicas``.
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_ABSENT = object()


def _path_keys(path: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _PATH_PART.findall(path)]


def _at(obj: Any, path: str) -> Any:
    """The value at a field path, or ``_ABSENT``."""
    for key in _path_keys(path):
        if isinstance(key, int):
            if not isinstance(obj, list) or key >= len(obj):
                return _ABSENT
            obj = obj[key]
        elif isinstance(obj, Mapping) and key in obj:
            obj = obj[key]
        else:
            return _ABSENT
    return obj


def _put(obj: Any, path: str, value: Any) -> None:
    """Set (or, with ``_ABSENT``, remove) the value at a field path whose parents exist."""
    *parents, last = _path_keys(path)
    for key in parents:
        obj = obj[key]
    if value is not _ABSENT:
        obj[last] = value
    elif isinstance(obj, dict):
        obj.pop(last, None)


def _with_counts_of(merged: Mapping[str, Any], current: Mapping[str, Any],
                    scalable: list[jobframework.ScalablePodSet]) -> Mapping[str, Any]:
    """``merged`` with the scalable counts as they are now, so that only the other fields
    are compared."""
    result = copy.deepcopy(dict(merged))
    for ps in scalable:
        try:
            _put(result, ps.path, _at(current, ps.path))
        except (KeyError, IndexError, TypeError):
            continue  # the parent changed: the comparison names it
    return result


def _patched_counts(job: Job, merged: Mapping[str, Any]) -> dict[str, Any]:
    """The counts a merge patch changes, by pod set. A deleted (null) count is the kind's
    default (Kubernetes' 1 for a Job's parallelism)."""
    changed: dict[str, Any] = {}
    for ps in slices.scalable_pod_sets(job):
        wanted = _at(merged, ps.path)
        if wanted is _ABSENT or wanted is None:
            unset = copy.deepcopy(job.manifest)
            _put(unset, ps.path, _ABSENT)
            integration = registry.integration_for(job)
            wanted = {p.name: p.count for p in integration.scalable_pod_sets(unset)}[ps.name]
        if wanted != ps.count or isinstance(wanted, bool):
            changed[ps.name] = wanted
    return changed


def _scale_body_counts(job: Job, body: Mapping[str, Any]) -> dict[str, Any]:
    """The counts a scale body asks for, by pod set: ``podSets`` (``[{"name", "count"}]``)
    and, for a count that is a field of the spec, that field (a Job's ``parallelism``)."""
    scalable = slices.scalable_pod_sets(job)
    shorthands = {slices.count_field(ps): ps for ps in scalable
                  if not slices.count_field(ps).startswith("podSets.")}
    shapes = " or ".join([*(f'{{"{key}": N}}' for key in shorthands),
                          '{"podSets": [{"name": NAME, "count": N}]}'])
    errors = [FieldError(str(key), f"unknown field: the body is {shapes}")
              for key in sorted(set(body) - set(shorthands) - {"podSets"}, key=str)]
    counts: dict[str, Any] = {shorthands[key].name: body[key]
                              for key in shorthands if key in body}
    pod_sets = body.get("podSets", [])
    if not isinstance(pod_sets, list):
        errors.append(FieldError("podSets", "must be a list of {\"name\", \"count\"}"))
        pod_sets = []
    for i, entry in enumerate(pod_sets):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            errors.append(FieldError(f"podSets[{i}].name", "required: a pod set's name"))
        elif "count" not in entry:
            errors.append(FieldError(f"podSets[{i}].count", "required: the pod set's new count"))
        elif entry["name"] in counts:
            errors.append(FieldError(f"podSets[{i}].name", "is given twice"))
        else:
            counts[entry["name"]] = entry["count"]
    if not counts and not errors:
        first = next(iter(shorthands), "podSets")
        errors.append(FieldError(first, f"required: the body is {shapes}"))
    if errors:
        raise ValidationError(errors_to_dict(errors))
    return counts


def _immutable_message(key: str, sub: str | None,
                       scalable: list[jobframework.ScalablePodSet]) -> str:
    if key == "status":
        return "is read-only: the job's cluster reports it"
    if key == "spec":
        return "field is immutable" if sub is not None else "must be an object"
    if key == "metadata" and sub in _JOB_READ_ONLY_METADATA:
        return "field is immutable"
    if key == "metadata" and sub is None:
        return "must be an object"
    paths = ", ".join(ps.path for ps in scalable) or "no field"
    return f"cannot be changed: a patch may change {paths} only"
