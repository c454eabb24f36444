"""Pending workloads of a cluster queue or a local queue (Kueue's visibility API)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from kueueweb.api import URLArgumentsMixin
from multicluster.models import Cluster
from scheduling.models import ClusterQueue, LocalQueue
from scheduling.queue import visibility

API_VERSION = "visibility.kueue.x-k8s.io/v1beta2"


class PendingWorkloadSerializer(serializers.Serializer[Any]):
    metadata = serializers.DictField()
    priority = serializers.IntegerField()
    localQueueName = serializers.CharField()  # noqa: N815 (Kueue's field name)
    positionInClusterQueue = serializers.IntegerField()  # noqa: N815
    positionInLocalQueue = serializers.IntegerField()  # noqa: N815
    reason = serializers.CharField()
    message = serializers.CharField()


class PendingWorkloadsSummarySerializer(serializers.Serializer[Any]):
    apiVersion = serializers.CharField()  # noqa: N815
    kind = serializers.CharField()
    items = PendingWorkloadSerializer(many=True)


PAGING = [
    OpenApiParameter("offset", OpenApiTypes.INT, description="Skip this many (default 0)."),
    OpenApiParameter("limit", OpenApiTypes.INT, description="At most this many (default 1000)."),
    OpenApiParameter("cluster", OpenApiTypes.STR, description="Domain (default: the manager)."),
]


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValidationError({name: [f"must be an integer, not {raw!r}"]}) from exc


def _domain(request: Request) -> Cluster:
    name = request.query_params.get("cluster")
    if name:
        return get_object_or_404(Cluster, name=name)
    return get_object_or_404(Cluster, role="manager")


def _summary(items: list[dict[str, Any]]) -> Response:
    return Response({"apiVersion": API_VERSION, "kind": "PendingWorkloadsSummary", "items": items})


class ClusterQueuePendingWorkloadsView(URLArgumentsMixin, APIView):
    @extend_schema(parameters=PAGING, responses=PendingWorkloadsSummarySerializer,
                   summary="Pending workloads of a cluster queue, in queue order")
    def get(self, request: Request, name: str) -> Response:
        cq = get_object_or_404(ClusterQueue, cluster=_domain(request), name=name)
        return _summary(visibility.pending_in_cluster_queue(
            cq, offset=_int_param(request, "offset", 0),
            limit=_int_param(request, "limit", visibility.DEFAULT_LIMIT),
        ))


class LocalQueuePendingWorkloadsView(URLArgumentsMixin, APIView):
    @extend_schema(parameters=PAGING, responses=PendingWorkloadsSummarySerializer,
                   summary="Pending workloads of a local queue, in its cluster queue's order")
    def get(self, request: Request, namespace: str, name: str) -> Response:
        lq = get_object_or_404(LocalQueue.objects.select_related("cluster_queue"),
                               cluster=_domain(request), namespace=namespace, name=name)
        return _summary(visibility.pending_in_local_queue(
            lq, offset=_int_param(request, "offset", 0),
            limit=_int_param(request, "limit", visibility.DEFAULT_LIMIT),
        ))
