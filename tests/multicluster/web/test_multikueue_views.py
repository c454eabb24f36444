"""The multi-cluster pages for MultiKueue: each worker's connection, Active condition,
capacity, nodes and the hub workloads dispatched to it, live; and the worker page's
dispatched workloads."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.models import Cluster, Node
from multicluster.simulated import faults
from scheduling.models import Job, Workload
from scheduling.scheduler import admission

pytestmark = pytest.mark.django_db


@pytest.fixture
def hub(manager: Cluster) -> Cluster:
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    Job.objects.exclude(name="dispatched-analysis").delete()
    Workload.objects.exclude(job__name="dispatched-analysis").delete()
    return manager


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0) + timedelta(seconds=1)


@pytest.fixture
def dispatched(hub: Cluster, t0: datetime) -> Workload:
    """dispatched-analysis copied to both workers (AllAtOnce), nothing admitted there yet."""
    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    return Workload.objects.get(job__name="dispatched-analysis", cluster=hub)


def worker_card(html: str, name: str) -> str:
    match = re.search(rf'<article class="q-worker" data-worker="{name}".*?</article>', html, re.S)
    assert match is not None, name
    return match.group(0)


def field(html: str, name: str) -> str:
    match = re.search(rf'<dd data-field="{name}"[^>]*>(.*?)</dd>', html, re.S)
    assert match is not None, name
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def workload_url(cluster: str, wl: Workload) -> str:
    return reverse("ui-workload", kwargs={"cluster": cluster, "namespace": wl.namespace,
                                          "name": wl.name})


def test_clusters_page_shows_each_worker_and_its_dispatched_workloads(
    dispatched: Workload, hub: Cluster, viewer_ui: Client,
) -> None:
    html = viewer_ui.get(reverse("ui-clusters")).content.decode()

    w1 = worker_card(html, "worker-1")
    assert field(w1, "connectionType") == "simulated"
    assert field(w1, "nodes") == str(Node.objects.filter(cluster__name="worker-1").count())
    assert field(w1, "capacity").startswith("cpu 24, memory 96Gi")  # the demo's 3 nodes
    assert 'data-connected="true"' in w1
    rows = re.findall(r'<tr data-dispatch="([^"]+)" data-state="([^"]+)" '
                      r'data-remote-phase="([^"]*)"', w1)
    assert rows == [(f"{dispatched.namespace}/{dispatched.name}", "Created", "Pending")]
    assert f'href="{workload_url("manager", dispatched)}"' in w1
    assert f'href="{workload_url("worker-1", dispatched)}"' in w1
    assert "1 dispatched workload" in worker_card(html, "worker-2")
    assert 'data-worker="manager"' not in html  # the hub is not a worker
    # Live: the hub and every worker.
    live = re.search(r'data-live-clusters="([^"]*)"', html).group(1).split()
    assert sorted(live) == sorted(str(pk) for pk in Cluster.objects.values_list("pk", flat=True))
    assert len(live) == 3


def test_winner_and_a_disconnected_worker_in_the_live_partial(
    dispatched: Workload, hub: Cluster, t0: datetime, viewer_ui: Client,
) -> None:
    w2 = Cluster.objects.get(name="worker-2")
    admission.run_admission_cycle(w2.pk, now=t0 + timedelta(seconds=1))
    dispatch.sync_dispatch(hub.pk, now=t0 + timedelta(seconds=2))
    faults.disconnect_cluster(Cluster.objects.get(name="worker-1"), now=t0 + timedelta(seconds=3))

    body = viewer_ui.get(reverse("ui-clusters-workers")).content.decode().strip()

    assert body.startswith('<section id="clusters-workers"')
    assert "data-live-refresh" in body
    w1, w2_card = worker_card(body, "worker-1"), worker_card(body, "worker-2")
    assert 'data-connected="false"' in w1
    assert 'data-status="False" data-reason="ClientConnectionFailed"' in w1
    assert "The simulated cluster was disconnected (fault injected)" in field(w1, "active")
    lost = re.search(r'<dd data-field="lostSince"><time datetime="([^"]+)"', w1)
    assert lost is not None
    assert datetime.fromisoformat(lost.group(1)) == t0 + timedelta(seconds=3)
    assert "No hub workload is dispatched to worker-1." in w1  # its copy was deleted
    assert re.findall(r'data-state="([^"]+)" data-remote-phase="([^"]*)"', w2_card) == [
        ("Won", "Admitted")]

    faults.reconnect_cluster(Cluster.objects.get(name="worker-1"), now=t0 + timedelta(seconds=4))
    w1 = worker_card(viewer_ui.get(reverse("ui-clusters-workers")).content.decode(), "worker-1")
    assert 'data-connected="true"' in w1
    assert 'data-status="True" data-reason="Active"' in w1
    assert 'data-field="lostSince"' not in w1


def test_reported_capacity_of_a_kubernetes_worker_is_shown_as_reported(
    manager: Cluster, viewer_ui: Client,
) -> None:
    Cluster.objects.create(
        name="far", role=ClusterRole.WORKER, connection_type="kubernetes",
        capacity={"cpu": "64", "nvidia.com/gpu": "8"},
        conditions=[{"type": "Active", "status": "False", "reason": "ClientConnectionFailed",
                     "message": "dial tcp: connection refused"}],
        lost_since=timezone.now(),
    )

    card = worker_card(viewer_ui.get(reverse("ui-clusters")).content.decode(), "far")

    assert field(card, "connectionType") == "kubernetes"
    assert field(card, "capacity") == "cpu 64, nvidia.com/gpu 8"
    assert field(card, "nodes") == "0"
    assert "dial tcp: connection refused" in field(card, "active")
    assert 'data-field="lostSince"' in card


def test_worker_page_lists_the_workloads_dispatched_to_it(
    dispatched: Workload, hub: Cluster, viewer_ui: Client,
) -> None:
    html = viewer_ui.get(reverse("ui-cluster", kwargs={"name": "worker-2"})).content.decode()
    section = re.search(r'<section id="cluster-dispatches".*?</section>', html, re.S)
    assert section is not None
    assert f'data-dispatch="{dispatched.namespace}/{dispatched.name}"' in section.group(0)
    assert f'href="{workload_url("manager", dispatched)}"' in section.group(0)
    live = re.search(r'data-live-clusters="([^"]*)"', html).group(1).split()
    assert sorted(live) == sorted([str(hub.pk), str(Cluster.objects.get(name="worker-2").pk)])

    partial = viewer_ui.get(reverse("ui-cluster-dispatches", kwargs={"name": "worker-2"}))
    body = partial.content.decode().strip()
    assert body.startswith('<section id="cluster-dispatches"')
    assert "data-live-refresh" in body

    manager_page = viewer_ui.get(reverse("ui-cluster", kwargs={"name": "manager"}))
    assert 'id="cluster-dispatches"' not in manager_page.content.decode()
    assert manager_page.status_code == 200


def test_pages_need_a_role(dispatched: Workload, client: Client) -> None:
    for url in (reverse("ui-clusters-workers"),
                reverse("ui-cluster-dispatches", kwargs={"name": "worker-1"})):
        response = client.get(url)
        assert response.status_code in (302, 403), url
        assert "q-worker" not in response.content.decode()
        assert "cluster-dispatches" not in response.content.decode()
