"""UI routes of the scheduling app."""

from django.urls import include, path

urlpatterns = [
    path("", include("scheduling.web.urls_queues")),
    path("", include("scheduling.web.urls_workloads")),
]
