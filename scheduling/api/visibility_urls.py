"""Kueue's visibility endpoints, under /api/v1/ beside the objects they describe."""

from django.urls import path, re_path

from scheduling.api.visibility import (
    ClusterQueuePendingWorkloadsView,
    LocalQueuePendingWorkloadsView,
)

urlpatterns = [
    re_path(r"^clusterqueues/(?P<name>[^/]+)/pendingworkloads/?$",
            ClusterQueuePendingWorkloadsView.as_view(), name="clusterqueue-pendingworkloads"),
    path("namespaces/<str:namespace>/localqueues/<str:name>/pendingworkloads",
         LocalQueuePendingWorkloadsView.as_view(), name="localqueue-pendingworkloads"),
    path("namespaces/<str:namespace>/localqueues/<str:name>/pendingworkloads/",
         LocalQueuePendingWorkloadsView.as_view()),
]
