"""The cluster pages: health, nodes with usage, pods, waiting gangs, live partials, access."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from multicluster.models import Cluster, Pod, PodGroup


@pytest.fixture
def ui(viewer: User) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.fixture
def running(manager, make_queue, make_workload):
    make_queue("cq", {"cpu": "8"})
    wl = make_workload("gang", "lq-cq", {"cpu": "2"}, count=2)
    now = timezone.now()
    group = PodGroup.objects.create(cluster=manager, workload=wl, pod_set="main", min_count=4,
                                    created_at=now, waiting_since=now,
                                    message="0/4 nodes fit the gang: Insufficient cpu")
    for index, (node, phase) in enumerate([("node-1", "Running"), ("node-1", "Running"),
                                           ("node-2", "Pending"), ("", "Pending"),
                                           ("node-2", "Succeeded")]):
        Pod.objects.create(cluster=manager, namespace="ns", name=f"pod-{index}", workload=wl,
                           group=group if not node else None, requests={"cpu": "1500m"},
                           node_name=node, phase=phase, created_at=now)
    return manager


def test_cluster_page_shows_node_usage_and_pods(running, ui) -> None:
    html = ui.get(reverse("ui-cluster", kwargs={"name": "manager"})).content.decode()
    node1 = re.search(r'id="node-node-1".*?</tr>', html, re.S).group(0)
    assert 'data-resource="cpu" data-used="3"' in node1
    assert 'data-resource="pods" data-used="2"' in node1
    assert 'data-pods-running="2"' in node1
    node2 = re.search(r'id="node-node-2".*?</tr>', html, re.S).group(0)
    assert 'data-resource="cpu" data-used="1.5"' in node2  # the finished pod is not counted
    assert 'data-ready="true"' in node1
    assert 'data-pods-running="2" data-pods-pending="2"' in html  # summary
    assert len(re.findall(r'<tr data-pod="ns/pod-\d"', html)) == 4  # active pods by default
    assert 'data-podgroup="ns/gang/main"' in html
    assert "Insufficient cpu" in html
    assert 'id="cluster-simulation"' in html
    assert reverse("ui-workload", kwargs={"cluster": "manager", "namespace": "ns",
                                          "name": "gang"}) in html


def test_pod_filter_and_partials(running, ui) -> None:
    for name, region in [("ui-cluster-summary", "cluster-summary"),
                         ("ui-cluster-nodes", "cluster-nodes"),
                         ("ui-cluster-pods", "cluster-pods"),
                         ("ui-cluster-podgroups", "cluster-podgroups")]:
        body = ui.get(reverse(name, kwargs={"name": "manager"})).content.decode().strip()
        assert body.startswith(f'<section id="{region}"'), name
        assert "data-live-refresh" in body
    body = ui.get(reverse("ui-cluster-pods", kwargs={"name": "manager"}) + "?pods=finished"
                  ).content.decode()
    assert re.findall(r'<tr data-pod="(ns/pod-\d)"', body) == ["ns/pod-4"]


def test_clusters_list_shows_health(running, ui) -> None:
    Cluster.objects.create(
        name="far", role="worker", connection_type="kubernetes",
        conditions=[{"type": "Active", "status": "False", "reason": "ClientConnectionFailed",
                     "message": "dial tcp: refused"}],
        lost_since=timezone.now(),
    )
    html = ui.get(reverse("ui-clusters")).content.decode()
    assert 'data-cluster="manager" data-role="manager" data-health="simulated"' in html
    assert 'data-cluster="far" data-role="worker" data-health="inactive"' in html
    assert "dial tcp: refused" in html
    assert "lostSince" in html
    assert 'data-pods-running="2"' in html
    far = ui.get(reverse("ui-cluster", kwargs={"name": "far"})).content.decode()
    assert 'data-status="False" data-reason="ClientConnectionFailed"' in far
    partial = ui.get(reverse("ui-clusters-table")).content.decode().strip()
    assert partial.startswith('<section id="clusters-table"')


def test_cluster_page_queries_are_bounded(running, ui, django_assert_max_num_queries) -> None:
    with django_assert_max_num_queries(20):
        assert ui.get(reverse("ui-cluster", kwargs={"name": "manager"})).status_code == 200


@pytest.mark.parametrize(("name", "kwargs"), [("ui-clusters", {}), ("ui-cluster", {"name": "manager"})])
def test_access_needs_login_and_a_role(manager, client, make_user, name, kwargs) -> None:
    url = reverse(name, kwargs=kwargs)
    assert client.get(url)["Location"].startswith("/login/")
    client.force_login(make_user("nobody"))
    assert client.get(url).status_code == 403
