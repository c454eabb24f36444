"""Cluster-scoped quota kinds: resourceflavors, cohorts, clusterqueues, workloadpriorityclasses,
and namespaced localqueues."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
