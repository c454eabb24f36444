"""Workloads and jobs, namespaced and across namespaces."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
