"""Cluster pages: every cluster (and the MultiKueue workers with their dispatched workloads),
and one cluster's nodes, pods, waiting pod groups and dispatched workloads."""

from django.urls import path

from multicluster.web import views, webhooks

C = "clusters/<str:name>/"

urlpatterns = [
    path("clusters/", views.cluster_list, name="ui-clusters"),
    path("clusters/partial/", views.cluster_list_partial, name="ui-clusters-table"),
    path("clusters/partial/workers/", views.cluster_workers_partial, name="ui-clusters-workers"),
    path(C, views.cluster_detail, name="ui-cluster"),
    path(C + "summary/", views.cluster_summary_partial, name="ui-cluster-summary"),
    path(C + "nodes/", views.cluster_nodes_partial, name="ui-cluster-nodes"),
    path(C + "pods/", views.cluster_pods_partial, name="ui-cluster-pods"),
    path(C + "podgroups/", views.cluster_podgroups_partial, name="ui-cluster-podgroups"),
    path(C + "dispatches/", views.cluster_dispatches_partial, name="ui-cluster-dispatches"),
    path(C + "yaml/", views.cluster_yaml, name="ui-cluster-yaml"),
    # Kueue's admission webhooks, called by the cluster's API server (multicluster.admission).
    path("webhooks/<str:cluster>/<str:path>", webhooks.admission_review,
         name="admission-webhook"),
]
