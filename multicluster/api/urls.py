"""Clusters, admission checks and MultiKueue configs."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
