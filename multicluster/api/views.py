"""AdmissionChecks, MultiKueueConfigs and ProvisioningRequestConfigs (per cluster, like every Kueue kind) and kueueweb's
Clusters (global: ``/api/v1/clusters/``) over REST."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db import models
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_variables
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework.exceptions import NotFound
from rest_framework.serializers import BaseSerializer
from rest_framework.viewsets import ModelViewSet

from kueueweb.api import ConflictError, URLArgumentsMixin
from kueueweb.roles import Role
from multicluster.api.serializers import (
    AdmissionCheckSerializer,
    ClusterSerializer,
    MultiKueueConfigSerializer,
    ProvisioningRequestConfigSerializer,
)
from multicluster.manifests import cluster_in_use, delete_cluster, save_cluster
from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig, ProvisioningRequestConfig
from scheduling.api.views import (
    CONFLICT,
    FIELD_ERRORS,
    NOT_FOUND,
    OBJECT_PARSERS,
    REFUSED,
    KueueObjectViewSet,
    crud_schema,
)


class AdmissionCheckFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    controllerName = django_filters.CharFilter(field_name="controller_name",
                                               help_text="spec.controllerName.")

    class Meta:
        model = AdmissionCheck
        fields: list[str] = []


class ClusterFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    role = django_filters.CharFilter(field_name="role", help_text="manager or worker.")
    type = django_filters.CharFilter(field_name="connection_type",
                                     help_text="spec.connection.type: simulated or kubernetes.")

    class Meta:
        model = Cluster
        fields: list[str] = []


@extend_schema_view(**crud_schema(AdmissionCheckSerializer, "AdmissionCheck", "admissionchecks"))
class AdmissionCheckViewSet(KueueObjectViewSet):
    kind_name = "AdmissionCheck"
    queryset = AdmissionCheck.objects.none()
    serializer_class = AdmissionCheckSerializer
    filterset_class = AdmissionCheckFilter


@extend_schema_view(**crud_schema(MultiKueueConfigSerializer, "MultiKueueConfig",
                                   "multikueueconfigs"))
class MultiKueueConfigViewSet(KueueObjectViewSet):
    kind_name = "MultiKueueConfig"
    queryset = MultiKueueConfig.objects.none()
    serializer_class = MultiKueueConfigSerializer


@extend_schema_view(**crud_schema(ProvisioningRequestConfigSerializer,
                                   "ProvisioningRequestConfig", "provisioningrequestconfigs"))
class ProvisioningRequestConfigViewSet(KueueObjectViewSet):
    kind_name = "ProvisioningRequestConfig"
    queryset = ProvisioningRequestConfig.objects.none()
    serializer_class = ProvisioningRequestConfigSerializer


_CLUSTER_WRITE = (
    "Admins only. A worker is `{\"metadata\": {\"name\": \"worker-1\"}, \"spec\": {\"role\": "
    "\"worker\", \"connection\": {\"type\": \"kubernetes\", \"kubeconfig\": \"<YAML>\"}}}` or "
    "a simulated cluster with `\"connection\": {\"type\": \"simulated\", \"nodes\": [...]}`."
)


@extend_schema_view(
    list=extend_schema(summary="List clusters",
                       description="The manager and the worker clusters; each is a scheduling "
                       "domain (`?cluster=NAME` elsewhere in the API).",
                       responses={200: ClusterSerializer(many=True), 401: REFUSED, 403: REFUSED}),
    create=extend_schema(summary="Add a cluster", description=_CLUSTER_WRITE,
                         responses={201: ClusterSerializer, 400: FIELD_ERRORS, 401: REFUSED,
                                    403: REFUSED, 409: CONFLICT}),
    retrieve=extend_schema(summary="Read a cluster",
                           responses={200: ClusterSerializer, 401: REFUSED, 403: REFUSED,
                                      404: NOT_FOUND}),
    update=extend_schema(summary="Replace a cluster's spec", description=_CLUSTER_WRITE +
                         " The kubeconfig, nodes and createNamespaces are kept when left out.",
                         responses={200: ClusterSerializer, 400: FIELD_ERRORS, 401: REFUSED,
                                    403: REFUSED, 404: NOT_FOUND}),
    partial_update=extend_schema(
        summary="Patch a cluster's spec",
        description="A JSON merge patch; `{\"spec\": {\"connection\": {\"kubeconfig\": "
        "\"...\"}}}` uploads a worker's kubeconfig (for instance after applying a "
        "MultiKueueCluster).",
        responses={200: ClusterSerializer, 400: FIELD_ERRORS, 401: REFUSED, 403: REFUSED,
                   404: NOT_FOUND}),
    destroy=extend_schema(summary="Remove a worker cluster",
                          description="Refused (409) for the manager and while workloads run in "
                          "or are dispatched to the cluster; its quota objects go with it.",
                          responses={204: None, 401: REFUSED, 403: REFUSED, 404: NOT_FOUND,
                                     409: OpenApiResponse(description="In use.")}),
)
# A kubeconfig is posted here: an error page shows no variable of the frames that handle it.
@method_decorator(sensitive_variables(), name="dispatch")
class ClusterViewSet(URLArgumentsMixin, ModelViewSet[Cluster]):
    # The manager first ("manager" < "worker"), then by name.
    queryset = Cluster.objects.prefetch_related("nodes").order_by("role", "name")
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilter
    write_role = Role.ADMIN
    lookup_field = "name"
    parser_classes = OBJECT_PARSERS

    def get_object(self) -> Cluster:
        name = self.kwargs["name"]
        cluster: Cluster | None = self.get_queryset().filter(name=name).first()
        if cluster is None:
            raise NotFound(f'clusters "{name}" not found')
        self.check_object_permissions(self.request, cluster)
        return cluster

    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        if Cluster.objects.filter(name=serializer.validated_data["spec"].name).exists():
            raise ConflictError(f'clusters "{serializer.validated_data["spec"].name}" already '
                                "exists")
        serializer.instance = save_cluster(serializer.validated_data["spec"], None)

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        serializer.instance = save_cluster(serializer.validated_data["spec"], serializer.instance)

    def perform_destroy(self, instance: Cluster) -> None:
        reason = cluster_in_use(instance)
        if reason is not None:
            raise ConflictError(reason)
        try:
            delete_cluster(instance)
        except (models.ProtectedError, models.RestrictedError) as exc:
            raise ConflictError(f'cluster "{instance.name}" is in use: other objects still refer '
                                "to it") from exc
