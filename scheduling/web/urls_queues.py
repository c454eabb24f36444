"""Overview, queue, cohort and resource flavor pages; each live region has a partial URL
returning it re-rendered, and each object its YAML under ``yaml/``."""

from django.urls import path

from scheduling.web import charts, objects, queues

CQ = "c/<str:cluster>/clusterqueues/<str:name>/"
LQ = "c/<str:cluster>/namespaces/<str:namespace>/localqueues/<str:name>/"
COHORT = "c/<str:cluster>/cohorts/<str:name>/"
RF = "c/<str:cluster>/resourceflavors/<str:name>/"

urlpatterns = [
    path("", queues.overview, name="home"),
    path("overview/domains/<str:cluster>/", queues.overview_domain_partial,
         name="ui-overview-domain"),
    path("overview/workers/", queues.overview_workers_partial, name="ui-overview-workers"),
    path("overview/history/data/", charts.overview_history_data, name="ui-overview-history-data"),
    path(CQ, queues.cluster_queue_page, name="ui-clusterqueue"),
    path(CQ + "summary/", queues.cluster_queue_summary_partial, name="ui-clusterqueue-summary"),
    path(CQ + "pending/", queues.cluster_queue_pending_partial, name="ui-clusterqueue-pending"),
    path(CQ + "admitted/", queues.cluster_queue_admitted_partial,
         name="ui-clusterqueue-admitted"),
    path(CQ + "yaml/", objects.cluster_queue_yaml, name="ui-clusterqueue-yaml"),
    path("c/<str:cluster>/charts/<str:subject>/<str:name>/<str:metric>/", charts.chart_data,
         name="ui-chart"),
    path(LQ, queues.local_queue_page, name="ui-localqueue"),
    path(LQ + "summary/", queues.local_queue_summary_partial, name="ui-localqueue-summary"),
    path(LQ + "pending/", queues.local_queue_pending_partial, name="ui-localqueue-pending"),
    path(LQ + "admitted/", queues.local_queue_admitted_partial, name="ui-localqueue-admitted"),
    path(LQ + "yaml/", objects.local_queue_yaml, name="ui-localqueue-yaml"),
    path(COHORT, objects.cohort_page, name="ui-cohort"),
    path(COHORT + "summary/", objects.cohort_summary_partial, name="ui-cohort-summary"),
    path(COHORT + "yaml/", objects.cohort_yaml, name="ui-cohort-yaml"),
    path(RF, objects.resource_flavor_page, name="ui-resourceflavor"),
    path(RF + "usage/", objects.resource_flavor_usage_partial, name="ui-resourceflavor-usage"),
    path(RF + "yaml/", objects.resource_flavor_yaml, name="ui-resourceflavor-yaml"),
]
