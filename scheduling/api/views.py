"""The quota kinds over REST, laid out as Kubernetes serves them, plus ``apply``/``export``.

Cluster-scoped kinds at ``/api/v1/<plural>/[{name}/]``; local queues at
``/api/v1/namespaces/{namespace}/localqueues/[{name}/]`` and, across namespaces,
``/api/v1/localqueues/``. ``?cluster=NAME`` addresses another scheduling domain (default: the
manager). Every write goes through ``scheduling.manifests.apply`` (the codec of ``apply``); the
viewsets only name their kind, serializer and filters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, cast

from django.db import models
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
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer
from rest_framework.views import APIView
from rest_framework.viewsets import ModelViewSet, ReadOnlyModelViewSet

from kueueweb.api import ConflictError, PayloadTooLarge, URLArgumentsMixin
from kueueweb.roles import Role
from multicluster.models import Cluster
from scheduling.api.filters import ClusterQueueFilter, CohortFilter, LocalQueueFilter
from scheduling.api.serializers import (
    ApplyErrorSerializer,
    ApplyResultSerializer,
    ClusterQueueSerializer,
    CohortSerializer,
    LimitRangeSerializer,
    LocalQueueSerializer,
    PriorityClassSerializer,
    ResourceFlavorSerializer,
    RuntimeClassSerializer,
    WorkloadPriorityClassSerializer,
)
from scheduling.manifests import yamlio
from scheduling.manifests.apply import (
    KINDS,
    ApplyError,
    UnknownCluster,
    apply_manifests,
    apply_object,
    delete_object,
    export_manifests,
    resolve_cluster,
    resource_name,
)
from scheduling.manifests.codec import Conflict, ManifestInvalid
from scheduling.models import (
    ClusterQueue,
    Cohort,
    LimitRange,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    RuntimeClass,
    WorkloadPriorityClass,
)

# --- errors, parsers, renderers ------------------------------------------------------------


class ManifestParser(BaseParser):
    """A body of manifests, read safely and at most ``KUEUEWEB["MAX_MANIFEST_BYTES"]`` long
    (``scheduling.manifests.yamlio``): a list of documents."""

    media_type = "application/yaml"

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = yamlio.max_manifest_bytes()
        request = (parser_context or {}).get("request")
        declared = request.META.get("CONTENT_LENGTH") if request is not None else None
        if declared and str(declared).isdigit() and int(declared) > limit:
            raise PayloadTooLarge(f"manifests are {declared} bytes; at most {limit} bytes are "
                                  "accepted (KUEUEWEB_MAX_MANIFEST_BYTES)")
        data = stream.read(limit + 1) if stream is not None else b""
        try:
            return yamlio.load_documents(data, content_type=media_type or self.media_type)
        except yamlio.ManifestTooLarge as exc:
            raise PayloadTooLarge(str(exc)) from exc
        except yamlio.ManifestSyntaxError as exc:
            raise ParseError(str(exc)) from exc


class JSONManifestParser(ManifestParser):
    media_type = "application/json"


class MergePatchManifestParser(ManifestParser):
    """``kubectl patch --type merge`` sends this media type."""

    media_type = "application/merge-patch+json"


class XYAMLManifestParser(ManifestParser):
    media_type = "application/x-yaml"


class TextYAMLManifestParser(ManifestParser):
    media_type = "text/yaml"


MANIFEST_PARSERS = [JSONManifestParser, MergePatchManifestParser, ManifestParser,
                    XYAMLManifestParser, TextYAMLManifestParser]


class ObjectParser(ManifestParser):
    """One object per request (create, replace, patch)."""

    def parse(self, stream: Any, media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        documents = super().parse(stream, media_type, parser_context)
        if len(documents) != 1:
            raise ParseError(f"expected one object in the body, found {len(documents)}")
        return documents[0]


OBJECT_PARSERS = [
    type(f"Object{parser.__name__}", (ObjectParser,), {"media_type": parser.media_type})
    for parser in MANIFEST_PARSERS
]


class YAMLRenderer(BaseRenderer):
    """YAML; a ``List`` is written as a multi-document stream that ``apply`` reads back."""

    media_type = "application/yaml"
    format = "yaml"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: str | None = None,
               renderer_context: Mapping[str, Any] | None = None) -> bytes:
        # Through JSON first: errors carry ErrorDetail strings, which YAML cannot represent.
        data = json.loads(JSONRenderer().render(data)) if data is not None else {}
        if isinstance(data, Mapping) and data.get("kind") == "List":
            return yamlio.dump_documents(data.get("items") or []).encode()
        return yamlio.dump_documents([data] if isinstance(data, Mapping) else
                                     [{"data": data}]).encode()


# --- schema pieces ---------------------------------------------------------------------------

CLUSTER_PARAMETER = OpenApiParameter(
    "cluster", OpenApiTypes.STR, OpenApiParameter.QUERY,
    description="The cluster (scheduling domain) to address; default: the manager.",
)
FIELD_ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description="Field errors by path, as Kueue names the fields.",
    examples=[OpenApiExample("borrowing without a cohort", value={
        "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit":
            ["must be nil when cohort is empty"],
    })],
)
REFUSED = OpenApiResponse(description="Not authenticated, or the admin role is missing.")
NOT_FOUND = OpenApiResponse(description="No such object (or cluster).")
CONFLICT = OpenApiResponse(description="The name is taken, the object changed meanwhile, or it "
                           "is still in use (deletion).")


def crud_schema(serializer: type[BaseSerializer[Any]], kind: str, plural: str,
                 *, namespaced: bool = False) -> dict[str, Any]:
    scope = "namespaced" if namespaced else "cluster-scoped"
    write = ("Admins only. The body is the Kueue manifest (JSON or YAML); apiVersion and kind "
             "may be left out. Checked by the same rules as `apply`.")
    return {
        "list": extend_schema(
            summary=f"List {plural}", parameters=[CLUSTER_PARAMETER],
            description=f"Kueue {kind} objects ({scope}) of one cluster.",
            responses={200: serializer(many=True), 401: REFUSED, 403: REFUSED, 404: NOT_FOUND},
        ),
        "create": extend_schema(
            summary=f"Create a {kind}", parameters=[CLUSTER_PARAMETER], description=write,
            request=serializer,
            responses={201: serializer, 400: FIELD_ERRORS, 401: REFUSED, 403: REFUSED,
                       409: CONFLICT, 413: OpenApiResponse(description="Body too large.")},
        ),
        "retrieve": extend_schema(
            summary=f"Read a {kind}", parameters=[CLUSTER_PARAMETER],
            responses={200: serializer, 401: REFUSED, 403: REFUSED, 404: NOT_FOUND},
        ),
        "update": extend_schema(
            summary=f"Replace a {kind}'s spec", parameters=[CLUSTER_PARAMETER],
            description=write + " `status` is read-only.", request=serializer,
            responses={200: serializer, 400: FIELD_ERRORS, 401: REFUSED, 403: REFUSED,
                       404: NOT_FOUND, 409: CONFLICT},
        ),
        "partial_update": extend_schema(
            summary=f"Patch a {kind}'s spec", parameters=[CLUSTER_PARAMETER],
            description="A JSON merge patch of the object (`null` removes a field). " + write,
            request=serializer,
            responses={200: serializer, 400: FIELD_ERRORS, 401: REFUSED, 403: REFUSED,
                       404: NOT_FOUND, 409: CONFLICT},
        ),
        "destroy": extend_schema(
            summary=f"Delete a {kind}", parameters=[CLUSTER_PARAMETER],
            description="Refused with 409 while the object is in use (Kueue's resource-in-use "
            "finalizer).",
            responses={204: None, 401: REFUSED, 403: REFUSED, 404: NOT_FOUND, 409: CONFLICT},
        ),
    }


# --- viewsets ----------------------------------------------------------------------------------


class DomainMixin(URLArgumentsMixin):
    """The scheduling domain a request addresses: ``?cluster=NAME``, else the manager."""

    def domain(self) -> Cluster:
        cached: Cluster | None = getattr(self, "_domain", None)
        if cached is None:
            request: Request = cast(Any, self).request
            name = request.query_params.get("cluster")
            try:
                cached = resolve_cluster(name or None)
            except UnknownCluster as exc:
                raise NotFound(f'clusters "{name}" not found') from exc
            self._domain = cached
        return cached


class KindMixin(DomainMixin):
    """The objects of one kind of the domain (``kind_name``, a key of ``apply.KINDS``),
    found by name and, for a namespaced kind, the URL's namespace."""

    kind_name: ClassVar[str]
    lookup_field = "name"
    kwargs: dict[str, Any]

    def kind_queryset(self) -> models.QuerySet[Any]:
        return KINDS[self.kind_name].queryset(self.domain())

    def get_queryset(self) -> models.QuerySet[Any]:
        queryset = self.kind_queryset()
        namespace = self.kwargs.get("namespace")
        if namespace:
            queryset = queryset.filter(namespace=namespace)
        return queryset

    def get_object(self) -> Any:
        name = self.kwargs["name"]
        obj = self.get_queryset().filter(name=name).first()
        if obj is None:
            namespace = self.kwargs.get("namespace")
            shown = f"{namespace}/{name}" if namespace else name
            raise NotFound(f'{resource_name(self.kind_name)} "{shown}" not found')
        cast(Any, self).check_object_permissions(cast(Any, self).request, obj)
        return obj


class KueueObjectViewSet(KindMixin, ModelViewSet[Any]):
    """Create, read, replace, patch and delete objects of one kind through the codec."""

    write_role = Role.ADMIN
    parser_classes = OBJECT_PARSERS

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "namespace": self.kwargs.get("namespace")}

    def _apply(self, serializer: BaseSerializer[Any], instance: Any = None) -> None:
        document = serializer.validated_data["document"]
        if instance is not None:
            sent = (document.get("metadata") or {}).get("resourceVersion")
            if sent is not None and str(sent) != str(instance.resource_version):
                raise ConflictError("the object has been modified; please apply your changes to "
                                    "the latest version and try again")
        try:
            obj, result = apply_object(document, kind=self.kind_name, cluster=self.domain(),
                                       instance=instance, namespace=self.kwargs.get("namespace"))
        except ManifestInvalid as exc:
            raise ValidationError(exc.as_dict()["errors"]) from exc
        except Conflict as exc:
            raise ConflictError(str(exc)) from exc
        serializer.instance = obj
        self._warnings = result.warnings

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        self._apply(serializer)

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        self._apply(serializer, serializer.instance)

    def perform_destroy(self, instance: Any) -> None:
        try:
            delete_object(self.kind_name, instance)
        except Conflict as exc:
            raise ConflictError(str(exc)) from exc

    def finalize_response(self, request: Request, response: Response, *args: Any,
                          **kwargs: Any) -> Response:
        # Warnings travel as Kubernetes sends them: "Warning: 299 - <text>" headers.
        response = super().finalize_response(request, response, *args, **kwargs)
        for warning in getattr(self, "_warnings", ()):
            text = warning.replace('"', "'")
            existing = response.headers.get("Warning")
            value = f'299 - "{text}"'
            response.headers["Warning"] = f"{existing}, {value}" if existing else value
        return response


@extend_schema_view(**crud_schema(ResourceFlavorSerializer, "ResourceFlavor", "resourceflavors"))
class ResourceFlavorViewSet(KueueObjectViewSet):
    kind_name = "ResourceFlavor"
    queryset = ResourceFlavor.objects.none()
    serializer_class = ResourceFlavorSerializer


@extend_schema_view(**crud_schema(CohortSerializer, "Cohort", "cohorts"))
class CohortViewSet(KueueObjectViewSet):
    kind_name = "Cohort"
    queryset = Cohort.objects.none()
    serializer_class = CohortSerializer
    filterset_class = CohortFilter


@extend_schema_view(**crud_schema(ClusterQueueSerializer, "ClusterQueue", "clusterqueues"))
class ClusterQueueViewSet(KueueObjectViewSet):
    kind_name = "ClusterQueue"
    queryset = ClusterQueue.objects.none()
    serializer_class = ClusterQueueSerializer
    filterset_class = ClusterQueueFilter


@extend_schema_view(**crud_schema(LocalQueueSerializer, "LocalQueue", "localqueues",
                                   namespaced=True))
class LocalQueueViewSet(KueueObjectViewSet):
    kind_name = "LocalQueue"
    queryset = LocalQueue.objects.none()
    serializer_class = LocalQueueSerializer
    filterset_class = LocalQueueFilter

    def get_queryset(self) -> models.QuerySet[Any]:
        # The status lists the flavors of the queue's ClusterQueue.
        return super().get_queryset().prefetch_related("cluster_queue__quotas__flavor")


@extend_schema_view(**crud_schema(WorkloadPriorityClassSerializer, "WorkloadPriorityClass",
                                   "workloadpriorityclasses"))
class WorkloadPriorityClassViewSet(KueueObjectViewSet):
    kind_name = "WorkloadPriorityClass"
    queryset = WorkloadPriorityClass.objects.none()
    serializer_class = WorkloadPriorityClassSerializer


def read_schema(serializer: type[BaseSerializer[Any]], kind: str, plural: str, *,
                namespaced: bool = False) -> dict[str, Any]:
    scope = "namespaced" if namespaced else "cluster-scoped"
    return {
        "list": extend_schema(
            summary=f"List {plural}", parameters=[CLUSTER_PARAMETER],
            description=f"The cluster's own {kind} objects ({scope}): applied to a simulated "
            "cluster, mirrored from a Kubernetes one.",
            responses={200: serializer(many=True), 401: REFUSED, 403: REFUSED, 404: NOT_FOUND},
        ),
        "retrieve": extend_schema(
            summary=f"Read a {kind}", parameters=[CLUSTER_PARAMETER],
            responses={200: serializer, 401: REFUSED, 403: REFUSED, 404: NOT_FOUND},
        ),
    }


class ClusterObjectViewSet(KindMixin, ReadOnlyModelViewSet[Any]):
    """The cluster's own PriorityClasses, LimitRanges and RuntimeClasses, read-only: a
    simulated cluster's are written with ``apply``, a Kubernetes cluster's are its own."""

    def kind_queryset(self) -> models.QuerySet[Any]:
        codec = KINDS[self.kind_name]
        return codec.queryset(self.domain()).order_by(
            *(("namespace", "name") if codec.namespaced else ("name",)))


@extend_schema_view(**read_schema(PriorityClassSerializer, "PriorityClass", "priorityclasses"))
class PriorityClassViewSet(ClusterObjectViewSet):
    kind_name = "PriorityClass"
    queryset = PriorityClass.objects.none()
    serializer_class = PriorityClassSerializer


@extend_schema_view(**read_schema(LimitRangeSerializer, "LimitRange", "limitranges",
                                  namespaced=True))
class LimitRangeViewSet(ClusterObjectViewSet):
    kind_name = "LimitRange"
    queryset = LimitRange.objects.none()
    serializer_class = LimitRangeSerializer


@extend_schema_view(**read_schema(RuntimeClassSerializer, "RuntimeClass", "runtimeclasses"))
class RuntimeClassViewSet(ClusterObjectViewSet):
    kind_name = "RuntimeClass"
    queryset = RuntimeClass.objects.none()
    serializer_class = RuntimeClassSerializer


# --- apply / export -------------------------------------------------------------------------


class ApplyView(DomainMixin, APIView):
    """``kubectl apply`` for Kueue's quota objects."""

    write_role = Role.ADMIN
    parser_classes = MANIFEST_PARSERS

    @extend_schema(
        summary="Apply Kueue manifests",
        description="Creates or updates every object of a YAML stream (`---` separated) or a "
        "JSON object, list or `List`, in one transaction: ResourceFlavor, Cohort, ClusterQueue, "
        "LocalQueue, WorkloadPriorityClass, AdmissionCheck, MultiKueueConfig, "
        "MultiKueueCluster and ProvisioningRequestConfig, as `kueue.x-k8s.io/v1beta1` or "
        "`v1beta2`, and for a simulated cluster core `v1` Node and LimitRange, "
        "`scheduling.k8s.io/v1` PriorityClass and `node.k8s.io/v1` RuntimeClass. Kinds are "
        "applied in "
        "dependency order whatever the document order. One invalid document rejects the whole "
        "apply; the error names its index, kind, name and field. Admins only.",
        parameters=[CLUSTER_PARAMETER],
        request={"application/yaml": OpenApiTypes.STR, "text/yaml": OpenApiTypes.STR,
                 "application/json": OpenApiTypes.OBJECT},
        responses={
            200: ApplyResultSerializer,
            400: OpenApiResponse(ApplyErrorSerializer, description="Invalid manifests, or a "
                                 "body that is not YAML/JSON (aliases and deep nesting are "
                                 "refused)."),
            401: REFUSED, 403: REFUSED, 404: NOT_FOUND,
            409: CONFLICT, 413: OpenApiResponse(description="Body too large."),
        },
    )
    def post(self, request: Request) -> Response:
        domain = self.domain()
        documents = request.data if isinstance(request.data, list) else [request.data]
        if not any(documents):
            raise ParseError("no objects passed to apply")
        try:
            result = apply_manifests(documents, cluster=domain)
        except ApplyError as exc:
            return Response(exc.as_dict(), status=status.HTTP_400_BAD_REQUEST)
        except Conflict as exc:
            raise ConflictError(str(exc)) from exc
        return Response(result.as_dict())


class ExportView(DomainMixin, APIView):
    """Every Kueue object of a domain, as manifests ``apply`` reads back."""

    renderer_classes = [YAMLRenderer, JSONRenderer]

    @extend_schema(
        summary="Export Kueue manifests",
        description="The domain's ResourceFlavors, Cohorts, ClusterQueues, LocalQueues, "
        "WorkloadPriorityClasses, AdmissionChecks, MultiKueueClusters (those its "
        "MultiKueueConfigs name), MultiKueueConfigs and ProvisioningRequestConfigs as v1beta2 manifests, in apply order: "
        "YAML documents by default, a `List` with `?format=json`.",
        parameters=[CLUSTER_PARAMETER],
        responses={(200, "application/yaml"): OpenApiTypes.STR,
                   (200, "application/json"): OpenApiTypes.OBJECT,
                   401: REFUSED, 403: REFUSED, 404: NOT_FOUND},
    )
    def get(self, request: Request) -> Response:
        documents = export_manifests(self.domain())
        return Response({"apiVersion": "v1", "kind": "List", "items": documents})
