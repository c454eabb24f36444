"""/api/v1/: every kind, laid out as Kubernetes lays out its API."""

from django.urls import URLPattern, URLResolver

urlpatterns: list[URLPattern | URLResolver] = []
