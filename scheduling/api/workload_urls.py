"""Workloads and jobs, namespaced and across namespaces.

Every route also answers without its trailing slash, as the Kubernetes API does (a redirect
would lose a POST body); those aliases are left out of the schema.
"""

from typing import Any

from django.urls import URLPattern, URLResolver, path

from scheduling.api.workload_status import WorkloadStatusViewSet
from scheduling.api.workload_views import JobViewSet, WorkloadViewSet

_COLLECTION = {"get": "list", "post": "create"}
_WORKLOAD = {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}
_JOB = {"get": "retrieve", "patch": "partial_update", "delete": "destroy"}


def _routes(route: str, viewset: Any, actions: dict[str, str], name: str) -> list[URLPattern]:
    return [
        path(f"{route}/", viewset.as_view(actions), name=name),
        path(route, viewset.as_view(actions, schema=None), name=f"{name}-no-slash"),
    ]


urlpatterns: list[URLPattern | URLResolver] = [
    *_routes("workloads", WorkloadViewSet, {"get": "list"}, "workload-list-all"),
    *_routes("namespaces/<str:namespace>/workloads", WorkloadViewSet, _COLLECTION,
             "workload-list"),
    *_routes("namespaces/<str:namespace>/workloads/<str:name>", WorkloadViewSet, _WORKLOAD,
             "workload-detail"),
    *_routes("namespaces/<str:namespace>/workloads/<str:name>/events", WorkloadViewSet,
             {"get": "events"}, "workload-events"),
    *_routes("namespaces/<str:namespace>/workloads/<str:name>/status", WorkloadStatusViewSet,
             {"get": "retrieve", "patch": "status_update"}, "workload-status"),
    *_routes("jobs", JobViewSet, {"get": "list"}, "job-list-all"),
    *_routes("namespaces/<str:namespace>/jobs", JobViewSet, _COLLECTION, "job-list"),
    *_routes("namespaces/<str:namespace>/jobs/<str:name>", JobViewSet, _JOB, "job-detail"),
    *_routes("namespaces/<str:namespace>/jobs/<str:name>/scale", JobViewSet, {"post": "scale"},
             "job-scale"),
]
