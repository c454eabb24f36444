"""The workload lists' filters, shared by the API and the UI (``scheduling.filters``): both
sides select the same workloads for the same filter under their own parameter names, and
filtering by cluster queue reads no more than the unfiltered list."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from multicluster.models import Cluster
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Workload
from tools import loadtest

pytestmark = pytest.mark.django_db


@pytest.fixture
def client(manager: Cluster) -> Client:
    loadtest.seed(workloads=60, queues=3, rng_seed=0)
    client = Client()
    client.force_login(loadtest.admin_user())
    return client


def api_names(client: Client, query: str) -> set[str]:
    response = client.get(f"/api/v1/workloads/?limit=1000&{query}")
    assert response.status_code == 200, response.content
    return {item["metadata"]["name"] for item in response.json()["results"]}


def ui_names(client: Client, query: str) -> set[str]:
    response = client.get(f"/workloads/partial/?{query}")
    assert response.status_code == 200, response.content
    return {row["name"] for row in response.context["rows"]}


def queries(client: Client, url: str) -> int:
    client.get(url)  # sessions and the like are cached after this
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured.captured_queries)


def test_api_and_ui_select_the_same_workloads_under_their_own_names(client: Client) -> None:
    cq = ClusterQueue.objects.order_by("name").first()
    assert cq is not None
    queue = Workload.objects.exclude(queue_name="").values_list("queue_name", flat=True).first()
    phases = sorted(set(Workload.objects.values_list("phase", flat=True)))
    assert {WorkloadPhase.PENDING, WorkloadPhase.ADMITTED, WorkloadPhase.FINISHED} <= set(phases)
    cases: list[tuple[str, str, Any]] = [
        (f"clusterQueue={cq.name}", f"cluster_queue={cq.name}",
         {w.name for w in Workload.objects.all()
          if (w.cluster_queue or (w.local_queue and w.local_queue.cluster_queue)) == cq}),
        (f"queueName={queue}", f"queue={queue}",
         set(Workload.objects.filter(queue_name=queue).values_list("name", flat=True))),
        *((f"phase={phase}", f"state={phase}",
           set(Workload.objects.filter(phase=phase).values_list("name", flat=True)))
          for phase in phases),
    ]
    for api_query, ui_query, want in cases:
        assert want, api_query
        assert (api_names(client, api_query), ui_names(client, ui_query)) == (want, want), \
            api_query


def test_filtering_by_cluster_queue_reads_no_more_than_the_whole_list(client: Client) -> None:
    cq = ClusterQueue.objects.order_by("name").values_list("name", flat=True).first()

    assert queries(client, f"/workloads/?cluster_queue={cq}") == queries(client, "/workloads/")
    assert queries(client, f"/api/v1/workloads/?clusterQueue={cq}") == queries(
        client, "/api/v1/workloads/")
