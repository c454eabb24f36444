"""GET /metrics: signed-in users of any role, by API token (as Prometheus sends it) or
session; anonymous scrapers get a 401 challenge."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from scheduling.metrics import prometheus

pytestmark = pytest.mark.django_db

# What Prometheus 3 sends when it scrapes.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


@pytest.fixture(autouse=True)
def empty_store(settings: Any) -> Iterator[None]:
    if settings.REDIS_URL:
        settings.METRICS_REDIS_PREFIX = "kueueweb-test:view:"
    prometheus.clear_event_metrics()
    yield
    prometheus.clear_event_metrics()


def _names(content: bytes) -> set[str]:
    return {family.name for family in text_string_to_metric_families(content.decode())}


def test_anonymous_scrapes_are_challenged(anon_client: APIClient) -> None:
    response = anon_client.get("/metrics", HTTP_ACCEPT=PROMETHEUS_ACCEPT)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert b"kueue_" not in response.content


def test_a_text_only_scraper_gets_a_text_error(anon_client: APIClient) -> None:
    response = anon_client.get("/metrics", HTTP_ACCEPT="text/plain")
    assert response.status_code == 401
    assert response["Content-Type"].startswith("text/plain")
    assert response.content == b"Authentication credentials were not provided.\n"


def test_prometheus_token_authorization_is_accepted(viewer: User, manager: Any) -> None:
    token = Token.objects.create(user=viewer)
    client = APIClient()
    response = client.get(
        "/metrics", HTTP_AUTHORIZATION=f"Token {token.key}", HTTP_ACCEPT=PROMETHEUS_ACCEPT
    )
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    names = _names(response.content)
    assert {"kueue_build_info", "kueue_pending_workloads", "kueue_admitted_workloads",
            "kueue_cluster_queue_nominal_quota"} <= names


def test_a_wrong_token_is_refused() -> None:
    response = APIClient().get("/metrics", HTTP_AUTHORIZATION="Token not-a-key")
    assert response.status_code == 401


def test_a_browser_session_is_accepted(viewer: User) -> None:
    client = Client()
    client.force_login(viewer)
    response = client.get("/metrics", HTTP_ACCEPT="text/plain")
    assert response.status_code == 200
    assert "kueue_build_info" in _names(response.content)


def test_a_user_without_a_role_is_forbidden(make_user: Callable[..., User]) -> None:
    client = APIClient()
    client.force_authenticate(make_user("nobody"))
    assert client.get("/metrics").status_code == 403


def test_recorded_events_are_served(
    viewer_client: APIClient, manager: Any, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        prometheus.preempted("cq-a", "InClusterQueue", cluster_id=manager.pk)
    response = viewer_client.get("/metrics")
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }
    key = ("kueue_preempted_workloads_total", (
        ("cluster", "manager"), ("preempting_cluster_queue", "cq-a"), ("reason", "InClusterQueue"),
    ))
    assert samples[key] == 1


def test_metrics_stay_out_of_the_openapi_schema(viewer_client: APIClient) -> None:
    response = viewer_client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert "/metrics" not in response.json()["paths"]
