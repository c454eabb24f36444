"""The overview, cluster queue and local queue pages: real numbers, live partials, access."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from multicluster.models import Cluster
from scheduling.models import ClusterQueue, Cohort, QueueUsageSample, Workload
from scheduling.scheduler import admission


@pytest.fixture
def ui(viewer_ui: Client) -> Client:
    return viewer_ui


def _attr(html: str, element_id: str, attribute: str) -> str:
    match = re.search(rf'<[^>]*\bid="{re.escape(element_id)}"[^>]*>', html, re.S)
    assert match, f"no element #{element_id}"
    value = re.search(rf'\b{attribute}="([^"]*)"', match.group(0))
    assert value, f"#{element_id} has no {attribute}"
    return value.group(1)


@pytest.fixture
def busy(manager, make_queue, make_workload, t0):
    """team-a (4 cpu, cohort org) borrows 2 cpu from team-b (4 cpu); one more waits."""
    make_queue("team-a", {"cpu": "4"}, cohort="org")
    make_queue("team-b", {"cpu": ("4", None, "2")}, cohort="org")
    make_workload("big", "lq-team-a", {"cpu": "6"})
    admission.run_admission_cycle(manager.pk, now=t0)
    make_workload("waits-1", "lq-team-a", {"cpu": "3"}, count=2)
    make_workload("waits-2", "lq-team-a", {"cpu": "1"})
    return manager


def test_overview_shows_usage_borrowing_counts_and_demand(busy, ui) -> None:
    response = ui.get("/")
    assert response.status_code == 200
    html = response.content.decode()
    bar = "bar-manager-team-a-default-cpu"
    assert _attr(html, bar, "data-used") == "6"
    assert _attr(html, bar, "data-borrowed") == "2"
    assert _attr(html, bar, "data-nominal") == "4"
    assert _attr(html, bar, "role") == "meter"
    assert _attr(html, "bar-manager-team-b-default-cpu", "data-lendable") == "2"
    card = "cq-manager-team-a"
    assert _attr(html, card, "data-pending") == "2"
    assert _attr(html, card, "data-admitted") == "1"
    assert _attr(html, "counts-manager", "data-pending") == "2"
    assert _attr(html, "counts-manager", "data-admitted") == "1"
    # pending demand of team-a: 2 pods × 3 cpu + 1 cpu
    assert re.search(r'data-resource="cpu" data-demand="7"', html)
    assert reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "team-a"}) in html
    assert 'data-cohort="org"' in html
    assert f'data-live-clusters="{busy.pk}"' in html


def test_overview_nests_cohorts_and_lists_workers(busy, ui, make_queue) -> None:
    org = Cohort.objects.get(name="org")
    Cohort.objects.create(cluster=busy, name="root")
    org.parent = Cohort.objects.get(name="root")
    org.save()
    worker = Cluster.objects.create(name="worker-1", role="worker", connection_type="kubernetes",
                                    conditions=[{"type": "Active", "status": "False",
                                                 "reason": "ClientConnectionFailed",
                                                 "message": "no route"}])
    html = ui.get("/").content.decode()
    assert re.search(r'data-cohort="root".*?<ul>.*?data-cohort="org".*?data-cq="team-a"', html, re.S)
    assert 'data-cluster="worker-1" data-health="inactive"' in html
    assert "no route" in html
    assert f"{busy.pk} {worker.pk}" in html  # both domains live


def test_partials_return_the_same_regions(busy, ui) -> None:
    page = ui.get("/").content.decode()
    for url, region in [
        (reverse("ui-overview-domain", kwargs={"cluster": "manager"}), "domain-manager"),
        (reverse("ui-overview-workers"), "overview-workers"),
    ]:
        body = ui.get(url).content.decode().strip()
        assert body.startswith(f'<section id="{region}"'), url
        assert f'id="{region}"' in page
        assert "data-live-refresh" in body
        assert f'hx-get="{url}' in body
    body = ui.get(reverse("ui-overview-domain", kwargs={"cluster": "manager"})).content.decode()
    assert _attr(body, "bar-manager-team-a-default-cpu", "data-used") == "6"


def test_overview_sums_shared_shapes_per_queue(busy, ui, make_workload, t0) -> None:
    # Workloads of one shape in two queues: each queue's demand counts only its own, and
    # admitted ones of one shape add up in usage (they are grouped on their hashes).
    for index in range(3):
        make_workload(f"same-b-{index}", "lq-team-b", {"cpu": "1"})
    html = ui.get("/").content.decode()
    assert _attr(html, "cq-manager-team-b", "data-pending") == "3"
    # team-a: 2 × 3 cpu + 1 cpu (the same 1-cpu shape as team-b's) still waits.
    demands = re.findall(r'data-resource="cpu" data-demand="(\d+)"', html)
    assert sorted(demands) == ["3", "7"]

    admission.run_admission_cycle(busy.pk, now=t0 + timedelta(seconds=1))
    held = Workload.objects.filter(cluster=busy, phase__in=["QuotaReserved", "Admitted"])
    used = sum(1 for w in held if w.queue_name == "lq-team-b")
    assert used >= 2  # team-b has 2 cpu of its own left after lending to team-a
    html = ui.get("/").content.decode()
    assert _attr(html, "bar-manager-team-b-default-cpu", "data-used") == str(used)
    assert _attr(html, "cq-manager-team-b", "data-admitted") == str(used)


def test_overview_queries_do_not_grow_with_workloads(
    busy, ui, make_workload, django_assert_max_num_queries
) -> None:
    with django_assert_max_num_queries(30):
        ui.get("/")
    for index in range(30):
        make_workload(f"more-{index}", "lq-team-b", {"cpu": "1"})
    with django_assert_max_num_queries(30):
        assert ui.get("/").status_code == 200


def test_overview_chart_reads_samples(busy, ui) -> None:
    from django.utils import timezone

    from scheduling.metrics.history import sample_usage

    sample_usage(now=timezone.now() - timedelta(minutes=5))
    html = ui.get("/").content.decode()
    assert 'id="overview-history-chart"' in html
    assert f'data-chart-url="{reverse("ui-overview-history-data")}"' in html
    assert "chart.umd.min.js" in html
    data = ui.get(reverse("ui-overview-history-data")).json()
    assert {s["label"] for s in data["panels"][0]["series"]} >= {"manager: pending"}
    assert QueueUsageSample.objects.count() == 2


def test_cluster_queue_page_shows_quota_policies_and_pending_order(busy, ui) -> None:
    url = reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "team-a"})
    html = ui.get(url).content.decode()
    assert 'data-field="queueingStrategy">BestEffortFIFO' in html
    assert re.search(r'data-field="nominalQuota">4<', html)
    assert re.search(r'data-field="borrowed">2<', html)
    rows = re.findall(r'data-workload="ns/([\w-]+)"\s+data-position="(\d+)"', html)
    assert rows == [("waits-1", "0"), ("waits-2", "1")]
    assert "1 workload ahead of it in ClusterQueue team-a" in html
    assert 'data-workload="ns/big" data-phase="QuotaReserved"' in html or \
        'data-workload="ns/big" data-phase="Admitted"' in html
    assert reverse("ui-workload", kwargs={"cluster": "manager", "namespace": "ns", "name": "big"}) in html
    assert reverse("ui-localqueue", kwargs={"cluster": "manager", "namespace": "ns",
                                            "name": "lq-team-a"}) in html


def test_admitted_rows_show_status_usage_and_reservation_time(busy, ui) -> None:
    big = Workload.objects.get(name="big")
    Workload.objects.filter(pk=big.pk).update(active=False)
    url = reverse("ui-clusterqueue-admitted", kwargs={"cluster": "manager", "name": "team-a"})
    html = ui.get(url).content.decode()
    row = re.search(r'<tr data-workload="ns/big".*?</tr>', html, re.S)
    assert row is not None
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    assert cells[1] == "lq-team-a"
    assert cells[2] == f"{big.phase} (deactivated)"
    assert "cpu: " in cells[5]
    stamp = big.quota_reserved_at
    assert stamp is not None
    assert f'datetime="{stamp.isoformat().replace("+00:00", "Z")}"' in cells[6]
    assert stamp.strftime("%Y-%m-%d %H:%M:%S") in cells[6]


def test_cluster_queue_reason_after_a_cycle(busy, ui, t0) -> None:
    admission.run_admission_cycle(busy.pk, now=t0 + timedelta(seconds=1))
    url = reverse("ui-clusterqueue-pending", kwargs={"cluster": "manager", "name": "team-a"})
    body = ui.get(url).content.decode().strip()
    assert body.startswith('<section id="cq-pending"')
    wl = Workload.objects.get(name="waits-1")
    reserved = next(c for c in wl.conditions if c["type"] == "QuotaReserved")
    assert escape(reserved["message"][:40]) in body


def test_cluster_queue_pending_is_paginated(busy, ui, make_workload) -> None:
    for index in range(55):
        make_workload(f"p-{index:02d}", "lq-team-a", {"cpu": "1"})
    url = reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "team-a"})
    first = ui.get(url).content.decode()
    assert len(re.findall(r'<tr data-workload="ns/[\w-]+"\s+data-position', first)) == 50
    second = ui.get(url + "?pending_page=2").content.decode()
    positions = re.findall(r'data-position="(\d+)"', second)
    assert positions[0] == "50"
    assert len(positions) == 7
    assert "pending_page=2" in _attr(second, "cq-pending", "hx-get")


def test_cluster_queue_partials_return_regions(busy, ui) -> None:
    for name, region in [("ui-clusterqueue-summary", "cq-summary"),
                         ("ui-clusterqueue-admitted", "cq-admitted")]:
        url = reverse(name, kwargs={"cluster": "manager", "name": "team-a"})
        assert ui.get(url).content.decode().strip().startswith(f'<section id="{region}"')


def test_local_queue_page(busy, ui) -> None:
    url = reverse("ui-localqueue", kwargs={"cluster": "manager", "namespace": "ns",
                                           "name": "lq-team-a"})
    html = ui.get(url).content.decode()
    assert reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "team-a"}) in html
    assert _attr(html, "lq-counts", "data-pending") == "2"
    assert _attr(html, "lq-counts", "data-admitted") == "1"
    assert re.findall(r'data-workload="ns/([\w-]+)"\s+data-position="(\d+)" data-position-lq="(\d+)"',
                      html) == [("waits-1", "0", "0"), ("waits-2", "1", "1")]
    for name, region in [("ui-localqueue-summary", "lq-summary"),
                         ("ui-localqueue-pending", "lq-pending"),
                         ("ui-localqueue-admitted", "lq-admitted")]:
        part = reverse(name, kwargs={"cluster": "manager", "namespace": "ns", "name": "lq-team-a"})
        assert ui.get(part).content.decode().strip().startswith(f'<section id="{region}"')


def test_unknown_queue_is_404(busy, ui) -> None:
    assert ui.get(reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "x"})
                  ).status_code == 404


@pytest.mark.parametrize(('name', 'kwargs'), [
    ("home", {}),
    ("ui-clusterqueue", {"cluster": "manager", "name": "team-a"}),
    ("ui-localqueue", {"cluster": "manager", "namespace": "ns", "name": "lq-team-a"}),
    ("ui-overview-domain", {"cluster": "manager"}),
])
def test_access_needs_login_and_a_role(busy, client, make_user, name, kwargs) -> None:
    url = reverse(name, kwargs=kwargs)
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    client.force_login(make_user("nobody"))
    assert client.get(url).status_code == 403


def test_cluster_queue_page_queries_are_bounded(
    busy, ui, make_workload, django_assert_max_num_queries
) -> None:
    for index in range(20):
        make_workload(f"q-{index}", "lq-team-a", {"cpu": "1"})
    url = reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "team-a"})
    with django_assert_max_num_queries(30):
        assert ui.get(url).status_code == 200


def test_inactive_queue_is_marked(busy, ui) -> None:
    ClusterQueue.objects.filter(name="team-b").update(stop_policy="Hold")
    html = ui.get("/").content.decode()
    assert 'data-inactive="Stopped"' in html


def test_pending_tables_show_positions_from_one_and_keep_the_apis_in_data(busy, ui) -> None:
    url = reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "team-a"})
    html = ui.get(url).content.decode()
    row = re.search(r'<tr data-workload="ns/waits-1".*?</tr>', html, re.S)
    assert row is not None
    assert 'data-position="0" data-position-lq="0"' in row.group(0)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(0), re.S)
    assert cells[:2] == ["1", "1"]
