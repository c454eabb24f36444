"""The lists and pages make as many queries with many rows as with few (no N+1), and the
shortcuts that keep them fast give the same answers as the plain way.

The data is the load test's (``tools.loadtest.seed``): every phase, jobs, events, pods.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from kueueweb import pagination
from multicluster.models import Cluster
from scheduling.cache import snapshots
from scheduling.core.snapshot import Snapshot
from scheduling.web import queues
from tools import loadtest


def _counts() -> dict[str, int]:
    targets = loadtest.endpoints()
    by_path = loadtest.count_queries(loadtest.admin_user(), targets)
    return {t.name: by_path[t.path] for t in targets}


@pytest.fixture
def every_page_deferred(monkeypatch: pytest.MonkeyPatch) -> None:
    """API pages take the id-first path from the first offset on, at any size."""
    monkeypatch.setattr(pagination, "DEFERRED_FROM_OFFSET", 0)


@pytest.mark.django_db
@pytest.mark.usefixtures("every_page_deferred")
def test_lists_and_pages_make_as_many_queries_with_four_times_the_rows(
    manager: Cluster,
) -> None:
    loadtest.seed(workloads=60, queues=3, rng_seed=0)
    few = _counts()

    loadtest.seed(workloads=180, queues=3, rng_seed=1, first=60)
    many = _counts()

    assert many == few


# Upper bounds for the main lists and pages (what they make today, whatever the rows).
MAX_QUERIES = {
    "workloads: first page": 5,
    "workloads: by cluster queue": 5,
    "workloads: late page": 6,
    "jobs: late page": 6,
    "clusterqueues": 9,
    "localqueues": 10,
    "pending workloads of a cluster queue": 7,
    "overview": 16,
    "overview: domain region": 14,
    "workloads page": 9,
    "workloads page: grouped, with positions and reasons": 11,
    "jobs page": 7,
    "jobs page: grouped by state": 8,
    "workloads page: evicted": 9,
    "workload page: finished": 12,
    "job page": 10,
    "cluster queue page": 21,
    "local queue page": 11,
    "cluster page": 11,
}


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(MAX_QUERIES))
def test_page_stays_within_its_query_budget(
    manager: Cluster, name: str, django_assert_max_num_queries: Any
) -> None:
    loadtest.seed(workloads=120, queues=3)
    target = next(t for t in loadtest.endpoints() if t.name == name)
    client = Client()
    client.force_login(loadtest.admin_user())
    client.get(target.path)  # sessions, content types and the like are cached after this

    with django_assert_max_num_queries(MAX_QUERIES[name]):
        response = client.get(target.path)

    assert response.status_code == 200


@pytest.mark.django_db
def test_a_late_api_page_found_by_ids_first_equals_the_plain_page(
    manager: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    loadtest.seed(workloads=150, queues=2)
    client = Client()
    client.force_login(loadtest.admin_user())
    url = "/api/v1/workloads/?offset=90&limit=25"
    plain = client.get(url).json()

    monkeypatch.setattr(pagination, "DEFERRED_FROM_OFFSET", 0)
    deferred = client.get(url).json()

    assert deferred == plain
    assert len(deferred["items"] if "items" in deferred else deferred["results"]) == 25


@pytest.mark.django_db
def test_overview_usage_grouped_in_the_database_equals_the_snapshot(manager: Cluster) -> None:
    loadtest.seed(workloads=200, queues=3)
    specs = snapshots.load_domain_specs(manager.pk)
    reserving = snapshots.reserving_rows(manager.pk)
    snapshot = Snapshot.build(
        flavors=specs.flavors, cohorts=specs.cohorts, cluster_queues=specs.cluster_queues,
        admitted=[snapshots.admitted_workload(r) for r in reserving if r["admission"]],
        inactive=specs.inactive,
    )

    usage = queues.domain_usage(manager)

    for queue in usage.queues:
        node = snapshot.any_cluster_queue(queue.name)
        assert node is not None
        for row in queue.rows:
            fr = (row.flavor, row.resource)
            assert (row.used, row.borrowed) == (
                node.usage.get(queues.FlavorResource(*fr), 0),
                queues.snap.borrowed(node, queues.FlavorResource(*fr)),
            ), (queue.name, fr)
        assert queue.admitted == sum(
            1 for r in reserving if r["cluster_queue__name"] == queue.name)
    assert sum(q.admitted for q in usage.queues) > 0
