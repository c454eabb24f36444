"""Workload pages, job pages and job submission."""

from django.urls import path

from scheduling.web import job_detail, jobs, objects, pod_logs, workloads

_WORKLOAD = "c/<str:cluster>/namespaces/<str:namespace>/workloads/<str:name>/"
_JOBS = "c/<str:cluster>/namespaces/<str:namespace>/jobs/"
# Jobs of different kinds may share a name: the page of a job is addressed by both.
_JOB = _JOBS + "<str:kind>/<str:name>/"

urlpatterns = [
    path("workloads/", workloads.workload_list, name="ui-workloads"),
    path("workloads/partial/", workloads.workload_list_partial, name="ui-workloads-partial"),
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
