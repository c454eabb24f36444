"""/api/v1/: every kind, laid out as Kubernetes lays out its API.

Cluster-scoped kinds at ``/api/v1/<plural>/``; namespaced kinds at
``/api/v1/namespaces/{namespace}/<plural>/`` and, across namespaces, ``/api/v1/<plural>/``.
``/api/v1/apply`` and ``/api/v1/export`` read and write Kueue YAML.
"""

from django.urls import include, path

from scheduling.api.views import ApplyView, ExportView

urlpatterns = [
    path("apply", ApplyView.as_view(), name="apply"),
    path("apply/", ApplyView.as_view(schema=None), name="apply-slash"),
    path("export", ExportView.as_view(), name="export"),
    path("export/", ExportView.as_view(schema=None), name="export-slash"),
    path("", include("scheduling.api.visibility_urls")),
    path("", include("scheduling.api.urls")),
    path("", include("scheduling.api.workload_urls")),
    path("", include("multicluster.api.urls")),
]
