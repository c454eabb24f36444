"""Kueue's visibility endpoints, under /api/v1/ beside the objects they describe."""

from django.urls import re_path

from scheduling.api.visibility import (
    ClusterQueuePendingWorkloadsView,
    LocalQueuePendingWorkloadsView,
)

urlpatterns = [
    re_path(r"^clusterqueues/(?P<name>[^/]+)/pendingworkloads/?$",
            ClusterQueuePendingWorkloadsView.as_view(), name="clusterqueue-pendingworkloads"),
    # One route with and without the trailing slash, as for cluster queues: two routes would
    # give the schema two operations with one operationId.
    re_path(r"^namespaces/(?P<namespace>[^/]+)/localqueues/(?P<name>[^/]+)/pendingworkloads/?$",
            LocalQueuePendingWorkloadsView.as_view(), name="localqueue-pendingworkloads"),
]
