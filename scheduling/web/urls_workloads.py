"""Workload pages, job pages and job submission."""

from django.urls import path

from scheduling.web import (
    job_detail,
    job_list,
    jobs,
    objects,
    pod_logs,
    saved_views,
    workload_list,
    workloads,
)

_WORKLOAD = "c/<str:cluster>/namespaces/<str:namespace>/workloads/<str:name>/"
_JOBS = "c/<str:cluster>/namespaces/<str:namespace>/jobs/"
# Jobs of different kinds may share a name: the page of a job is addressed by both.
_JOB = _JOBS + "<str:kind>/<str:name>/"

urlpatterns = [
    path("workloads/", workload_list.workload_list, name="ui-workloads"),
    path("workloads/partial/", workload_list.workload_list_partial, name="ui-workloads-partial"),
    path("workloads/export.<str:fmt>", workload_list.workload_export, name="ui-workloads-export"),
    path("workloads/bulk/", workload_list.workload_bulk, name="ui-workloads-bulk"),
    path("jobs/", job_list.job_list, name="ui-jobs"),
    path("jobs/partial/", job_list.job_list_partial, name="ui-jobs-partial"),
    path("jobs/export.<str:fmt>", job_list.job_export, name="ui-jobs-export"),
    path("jobs/bulk/", job_list.job_bulk, name="ui-jobs-bulk"),
    path("views/", saved_views.saved_view_save, name="ui-saved-view-save"),
    path("views/<int:pk>/delete/", saved_views.saved_view_delete, name="ui-saved-view-delete"),
    path(_WORKLOAD, workloads.workload_detail, name="ui-workload"),
    path(_WORKLOAD + "partial/<str:region>/", workloads.workload_region,
         name="ui-workload-partial"),
    path(_WORKLOAD + "actions/<str:action>/", workloads.workload_action,
         name="ui-workload-action"),
    path(_WORKLOAD + "yaml/", objects.workload_yaml, name="ui-workload-yaml"),
    path("jobs/new/", jobs.job_new, name="ui-job-new"),
    path(_JOBS + "<str:name>/", job_detail.job_by_name, name="ui-job-by-name"),
    path(_JOB, job_detail.job_detail, name="ui-job"),
    path(_JOB + "partial/<str:region>/", job_detail.job_region, name="ui-job-partial"),
    path(_JOB + "scale/", job_detail.job_scale, name="ui-job-scale"),
    path(_JOB + "yaml/", objects.job_yaml, name="ui-job-yaml"),
    path(_JOB + "pods/<str:pod>/logs/", pod_logs.job_pod_logs, name="ui-job-pod-logs"),
]
