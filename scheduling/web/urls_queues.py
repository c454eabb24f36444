"""Overview and queue pages; each live region has a partial URL returning it re-rendered."""

from django.urls import path

from scheduling.web import charts, queues

CQ = "c/<str:cluster>/clusterqueues/<str:name>/"
LQ = "c/<str:cluster>/namespaces/<str:namespace>/localqueues/<str:name>/"

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
    path("c/<str:cluster>/charts/<str:subject>/<str:name>/<str:metric>/", charts.chart_data,
         name="ui-chart"),
    path(LQ, queues.local_queue_page, name="ui-localqueue"),
    path(LQ + "summary/", queues.local_queue_summary_partial, name="ui-localqueue-summary"),
    path(LQ + "pending/", queues.local_queue_pending_partial, name="ui-localqueue-pending"),
    path(LQ + "admitted/", queues.local_queue_admitted_partial, name="ui-localqueue-admitted"),
]
