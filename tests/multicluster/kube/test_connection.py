"""Connection state of a Kubernetes cluster: Kueue's Active condition and reasons, the
reconnect back-off 5·2^(n−1) s up to 320 s, lostSince, and nodes and capacity."""

from __future__ import annotations

import socket
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from multicluster.kube import connection
from multicluster.kube.connection import probe_cluster, retry_after
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster, Node
from scheduling.workload import conditions as cond
from tests.fixtures.kube_api import kubeconfig_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


def active(cluster: Cluster) -> dict[str, Any]:
    cluster.refresh_from_db()
    found = cond.find(cluster.conditions, "Active")
    assert found is not None
    return found


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def unreachable(manager: Cluster) -> Cluster:
    cluster = Cluster(name="unreachable", role="worker", connection_type="kubernetes")
    cluster.set_kubeconfig(kubeconfig_for(f"http://127.0.0.1:{closed_port()}", "t"))
    cluster.save()
    return cluster


def test_retry_after_doubles_from_5_seconds_up_to_320() -> None:
    assert [retry_after(n).total_seconds() for n in range(10)] == [
        0, 5, 10, 20, 40, 80, 160, 320, 320, 320]


def test_a_reachable_cluster_is_active_and_connected(kube_cluster: Cluster,
                                                     t0: datetime) -> None:
    result = probe_cluster(kube_cluster.pk, now=t0)

    assert result is not None
    assert result.connected is True
    condition = active(kube_cluster)
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "True", "Active", "Connected")
    assert (kube_cluster.reconnect_attempts, kube_cluster.next_reconnect_at,
            kube_cluster.lost_since) == (0, None, None)
    assert Node.objects.filter(cluster=kube_cluster).count() == result.nodes


def test_nodes_and_capacity_are_read_from_the_cluster(kube_api: Any, kube_cluster: Cluster,
                                                      t0: datetime) -> None:
    kube_api.require_fake()
    spot = {"key": "spot", "value": "true", "effect": "NoSchedule"}
    kube_api.add_node("n1", allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"},
                      labels={"zone": "a"})
    kube_api.add_node("n2", allocatable={"cpu": "3500m", "memory": "16384Mi", "pods": "110"},
                      taints=[spot], unschedulable=True, ready=False)

    probe_cluster(kube_cluster.pk, now=t0)

    kube_cluster.refresh_from_db()
    assert kube_cluster.capacity == {"cpu": "7500m", "memory": "24Gi", "pods": "220"}
    nodes = {n.name: n for n in Node.objects.filter(cluster=kube_cluster)}
    assert sorted(nodes) == ["n1", "n2"]
    assert nodes["n1"].capacity == {"cpu": "4", "memory": "8Gi", "pods": "110"}
    assert nodes["n1"].labels == {"kubernetes.io/hostname": "n1", "zone": "a"}
    assert (nodes["n1"].ready, nodes["n1"].unschedulable, nodes["n1"].taints) == (
        True, False, [])
    assert (nodes["n2"].ready, nodes["n2"].unschedulable, nodes["n2"].taints) == (
        False, True, [spot])


def test_a_vanished_node_is_removed_at_the_next_probe(kube_api: Any, kube_cluster: Cluster,
                                                      t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.add_node("n1", allocatable={"cpu": "4"})
    kube_api.add_node("n2", allocatable={"cpu": "4"})
    probe_cluster(kube_cluster.pk, now=t0)
    kube_api.delete("nodes", "", "n2")

    probe_cluster(kube_cluster.pk, now=t0 + timedelta(seconds=60))

    assert list(Node.objects.filter(cluster=kube_cluster).values_list("name", flat=True)) == [
        "n1"]
    kube_cluster.refresh_from_db()
    assert kube_cluster.capacity == {"cpu": "4"}


def test_nodes_that_may_not_be_listed_do_not_disconnect(kube_api: Any, kube_cluster: Cluster,
                                                        t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.forbidden.add("nodes")

    result = probe_cluster(kube_cluster.pk, now=t0)

    assert result is not None
    assert result.connected is True
    assert active(kube_cluster)["status"] == "True"
    assert not Node.objects.filter(cluster=kube_cluster).exists()


def test_jobs_that_may_not_be_listed_fail_the_connection(kube_api: Any, kube_cluster: Cluster,
                                                         t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.forbidden.add("jobs")

    probe_cluster(kube_cluster.pk, now=t0)

    condition = active(kube_cluster)
    assert (condition["status"], condition["reason"]) == ("False", "ClientConnectionFailed")
    assert condition["message"].startswith("403 Forbidden: jobs is forbidden")


def test_reconnect_attempts_back_off_up_to_320_seconds(unreachable: Cluster,
                                                       t0: datetime) -> None:
    moment = t0
    delays = []
    for attempt in range(1, 10):
        result = probe_cluster(unreachable.pk, now=moment)
        assert result is not None
        assert result.connected is False
        unreachable.refresh_from_db()
        assert unreachable.reconnect_attempts == attempt
        assert unreachable.next_reconnect_at is not None
        delays.append((unreachable.next_reconnect_at - moment).total_seconds())
        condition = active(unreachable)
        assert (condition["status"], condition["reason"]) == ("False", "ClientConnectionFailed")
        assert condition["message"].endswith(
            f"; connection attempts: {attempt}, next connection attempt: "
            f"{connection.rfc3339(unreachable.next_reconnect_at)}")
        assert unreachable.lost_since == t0
        moment = unreachable.next_reconnect_at

    assert delays == [5, 10, 20, 40, 80, 160, 320, 320, 320]
    assert "Connection refused" in active(unreachable)["message"]


def test_the_next_attempt_is_printed_as_rfc3339() -> None:
    moment = datetime(2026, 3, 1, 12, 0, 5, 123456, tzinfo=timezone.get_fixed_timezone(60))

    assert connection.rfc3339(moment) == "2026-03-01T11:00:05Z"


def test_the_reconciler_waits_for_the_back_off(unreachable: Cluster, t0: datetime) -> None:
    first = sync_kube_cluster(unreachable.pk, now=t0)
    assert (first.ran, first.connected) == (True, False)
    unreachable.refresh_from_db()
    assert unreachable.reconnect_attempts == 1

    sync_kube_cluster(unreachable.pk, now=t0 + timedelta(seconds=4))
    unreachable.refresh_from_db()
    assert unreachable.reconnect_attempts == 1

    sync_kube_cluster(unreachable.pk, now=t0 + timedelta(seconds=5))
    unreachable.refresh_from_db()
    assert unreachable.reconnect_attempts == 2
    assert unreachable.next_reconnect_at == t0 + timedelta(seconds=15)


def test_a_new_kubeconfig_is_tried_at_once_with_the_attempts_reset(
    kube_api: Any, unreachable: Cluster, t0: datetime,
) -> None:
    sync_kube_cluster(unreachable.pk, now=t0)
    sync_kube_cluster(unreachable.pk, now=t0 + timedelta(seconds=5))
    unreachable.refresh_from_db()
    assert unreachable.reconnect_attempts == 2

    unreachable.set_kubeconfig(kube_api.kubeconfig)
    unreachable.save()
    outcome = sync_kube_cluster(unreachable.pk, now=t0 + timedelta(seconds=6))

    assert outcome.connected is True
    unreachable.refresh_from_db()
    assert (unreachable.reconnect_attempts, unreachable.next_reconnect_at,
            unreachable.lost_since) == (0, None, None)
    assert active(unreachable)["reason"] == "Active"


def test_lost_since_is_the_first_loss_and_cleared_on_reconnect(
    kube_api: Any, kube_cluster: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    probe_cluster(kube_cluster.pk, now=t0)
    kube_api.refuse_connections()

    lost_at = t0 + timedelta(seconds=30)
    probe_cluster(kube_cluster.pk, now=lost_at)
    kube_cluster.refresh_from_db()
    assert kube_cluster.lost_since == lost_at
    probe_cluster(kube_cluster.pk, now=lost_at + timedelta(seconds=5))
    kube_cluster.refresh_from_db()
    assert (kube_cluster.lost_since, kube_cluster.reconnect_attempts) == (lost_at, 2)

    kube_api.accept_connections()
    probe_cluster(kube_cluster.pk, now=lost_at + timedelta(seconds=15))

    kube_cluster.refresh_from_db()
    assert (kube_cluster.lost_since, kube_cluster.reconnect_attempts,
            kube_cluster.next_reconnect_at) == (None, 0, None)
    condition = active(kube_cluster)
    assert (condition["status"], condition["message"]) == ("True", "Connected")
    assert condition["lastTransitionTime"] == cond.timestamp(lost_at + timedelta(seconds=15))


def test_a_wrong_token_is_a_failed_connection(kube_api: Any, manager: Cluster,
                                              t0: datetime) -> None:
    kube_api.require_fake()
    cluster = Cluster(name="bad-token", role="worker", connection_type="kubernetes")
    cluster.set_kubeconfig(kubeconfig_for(kube_api.url, "wrong"))
    cluster.save()

    probe_cluster(cluster.pk, now=t0)

    condition = active(cluster)
    assert (condition["status"], condition["reason"]) == ("False", "ClientConnectionFailed")
    assert condition["message"].startswith("401 Unauthorized: Unauthorized; connection attempts: 1")


@pytest.mark.parametrize(
    ("kubeconfig", "want_message"),
    [("", "load client config failed: no kubeconfig is stored for this cluster"),
     ("users: [", "load client config failed: not valid YAML")],
    ids=["missing", "malformed"],
)
def test_a_kubeconfig_that_cannot_be_loaded_is_bad_config(
    manager: Cluster, t0: datetime, kubeconfig: str, want_message: str,
) -> None:
    cluster = Cluster(name="bad-config", role="worker", connection_type="kubernetes")
    cluster.set_kubeconfig(kubeconfig)
    cluster.save()

    result = probe_cluster(cluster.pk, now=t0)

    assert result is not None
    assert (result.connected, result.reason) == (False, "BadConfig")
    condition = active(cluster)
    assert (condition["status"], condition["reason"]) == ("False", "BadConfig")
    assert condition["message"].startswith(want_message)
    assert (cluster.reconnect_attempts, cluster.next_reconnect_at, cluster.lost_since) == (
        0, None, t0)


def test_simulated_clusters_are_not_probed(manager: Cluster, t0: datetime) -> None:
    assert probe_cluster(manager.pk, now=t0) is None
    manager.refresh_from_db()
    assert cond.find(manager.conditions or [], "Active") is None
    assert sync_kube_cluster(manager.pk, now=t0).ran is False
