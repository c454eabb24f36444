"""/api/v1/: every kind, laid out as Kubernetes lays out its API.

Cluster-scoped kinds at ``/api/v1/<plural>/``; namespaced kinds at
``/api/v1/namespaces/{namespace}/<plural>/`` and, across namespaces, ``/api/v1/<plural>/``.
"""

from django.urls import include, path

urlpatterns = [
    path("", include("scheduling.api.urls")),
    path("", include("scheduling.api.workload_urls")),
    path("", include("multicluster.api.urls")),
]
