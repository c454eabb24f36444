"""Cluster-scoped quota kinds (resourceflavors, cohorts, clusterqueues,
workloadpriorityclasses) and local queues, namespaced and across namespaces; the cluster's
own priorityclasses, runtimeclasses and limitranges, read-only.

Every route also answers without its trailing slash, as the Kubernetes API does (a redirect
would lose a request body); those aliases are left out of the schema.
"""

from typing import Any

from django.urls import URLPattern, URLResolver, path

from scheduling.api.views import (
    ClusterQueueViewSet,
    CohortViewSet,
    LimitRangeViewSet,
    LocalQueueViewSet,
    PriorityClassViewSet,
    ResourceFlavorViewSet,
    RuntimeClassViewSet,
    WorkloadPriorityClassViewSet,
)

COLLECTION = {"get": "list", "post": "create"}
READ_COLLECTION = {"get": "list"}
READ_OBJECT = {"get": "retrieve"}
OBJECT = {"get": "retrieve", "put": "update", "patch": "partial_update", "delete": "destroy"}


def routes(route: str, viewset: Any, actions: dict[str, str], name: str) -> list[URLPattern]:
    return [
        path(f"{route}/", viewset.as_view(actions), name=name),
        path(route, viewset.as_view(actions, schema=None), name=f"{name}-no-slash"),
    ]


def cluster_scoped(plural: str, viewset: Any, name: str) -> list[URLPattern]:
    return [
        *routes(plural, viewset, COLLECTION, f"{name}-list"),
        *routes(f"{plural}/<str:name>", viewset, OBJECT, f"{name}-detail"),
    ]


urlpatterns: list[URLPattern | URLResolver] = [
    *cluster_scoped("resourceflavors", ResourceFlavorViewSet, "resourceflavor"),
    *cluster_scoped("cohorts", CohortViewSet, "cohort"),
    *cluster_scoped("clusterqueues", ClusterQueueViewSet, "clusterqueue"),
    *cluster_scoped("workloadpriorityclasses", WorkloadPriorityClassViewSet,
                    "workloadpriorityclass"),
    *routes("priorityclasses", PriorityClassViewSet, READ_COLLECTION, "priorityclass-list"),
    *routes("priorityclasses/<str:name>", PriorityClassViewSet, READ_OBJECT,
            "priorityclass-detail"),
    *routes("runtimeclasses", RuntimeClassViewSet, READ_COLLECTION, "runtimeclass-list"),
    *routes("runtimeclasses/<str:name>", RuntimeClassViewSet, READ_OBJECT,
            "runtimeclass-detail"),
    *routes("limitranges", LimitRangeViewSet, READ_COLLECTION, "limitrange-list-all"),
    *routes("namespaces/<str:namespace>/limitranges", LimitRangeViewSet, READ_COLLECTION,
            "limitrange-list"),
    *routes("namespaces/<str:namespace>/limitranges/<str:name>", LimitRangeViewSet,
            READ_OBJECT, "limitrange-detail"),
    *routes("localqueues", LocalQueueViewSet, {"get": "list"}, "localqueue-list-all"),
    *routes("namespaces/<str:namespace>/localqueues", LocalQueueViewSet, COLLECTION,
            "localqueue-list"),
    *routes("namespaces/<str:namespace>/localqueues/<str:name>", LocalQueueViewSet, OBJECT,
            "localqueue-detail"),
]
