"""Cluster-scoped quota kinds (resourceflavors, cohorts, clusterqueues,
workloadpriorityclasses) and local queues, namespaced and across namespaces.

Every route also answers without its trailing slash, as the Kubernetes API does (a redirect
would lose a request body); those aliases are left out of the schema.
"""

from typing import Any

from django.urls import URLPattern, URLResolver, path

from scheduling.api.views import (
    ClusterQueueViewSet,
    CohortViewSet,
    LocalQueueViewSet,
    ResourceFlavorViewSet,
    WorkloadPriorityClassViewSet,
)

COLLECTION = {"get": "list", "post": "create"}
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
    *routes("localqueues", LocalQueueViewSet, {"get": "list"}, "localqueue-list-all"),
    *routes("namespaces/<str:namespace>/localqueues", LocalQueueViewSet, COLLECTION,
            "localqueue-list"),
    *routes("namespaces/<str:namespace>/localqueues/<str:name>", LocalQueueViewSet, OBJECT,
            "localqueue-detail"),
]
