"""Admin actions on the Cluster list: disconnect a simulated worker from the MultiKueue hub,
and reconnect it (admin role only)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from multicluster.choices import ClusterRole
from multicluster.models import Cluster
from scheduling.workload import conditions as cond

pytestmark = pytest.mark.django_db


@pytest.fixture
def workers(manager: Cluster) -> dict[str, Cluster]:
    return {
        "sim": Cluster.objects.create(name="worker-1", role=ClusterRole.WORKER,
                                      connection_type="simulated"),
        "kube": Cluster.objects.create(name="far", role=ClusterRole.WORKER,
                                       connection_type="kubernetes"),
        "manager": manager,
    }


def _run(browser: Client, action: str, clusters: list[Cluster]) -> Any:
    return browser.post(reverse("admin:multicluster_cluster_changelist"),
                        {"action": action, "_selected_action": [c.pk for c in clusters],
                         "index": 0})


def _active(cluster: Cluster) -> dict[str, Any] | None:
    cluster.refresh_from_db()
    return cond.find(cluster.conditions, "Active")


def test_actions_are_offered_to_an_admin(admin_ui: Client, workers: dict[str, Cluster]) -> None:
    form = admin_ui.get(reverse("admin:multicluster_cluster_changelist")).context["action_form"]
    labels = [label for _, label in form.fields["action"].choices][1:]
    assert "Disconnect (simulated worker)" in labels
    assert "Reconnect" in labels


def test_disconnect_then_reconnect_a_simulated_worker(
    admin_ui: Client, workers: dict[str, Cluster],
) -> None:
    sim = workers["sim"]
    response = _run(admin_ui, "disconnect_clusters", [sim])

    assert response.status_code == 302
    active = _active(sim)
    assert active is not None
    assert (active["status"], active["reason"]) == ("False", "ClientConnectionFailed")
    assert sim.lost_since is not None
    page = admin_ui.get(response["Location"]).content.decode()
    assert "1 worker(s) disconnected (Active=False)" in page

    response = _run(admin_ui, "reconnect_clusters", [sim])
    active = _active(sim)
    assert active is not None
    assert (active["status"], active["reason"]) == ("True", "Active")
    assert sim.lost_since is None
    assert "1 worker(s) reconnected (Active=True)." in admin_ui.get(
        response["Location"]).content.decode()


def test_manager_and_kubernetes_workers_are_skipped(
    admin_ui: Client, workers: dict[str, Cluster],
) -> None:
    response = _run(admin_ui, "disconnect_clusters", [workers["kube"], workers["manager"]])

    assert _active(workers["kube"]) is None
    assert workers["kube"].lost_since is None
    assert _active(workers["manager"]) is None
    page = admin_ui.get(response["Location"]).content.decode()
    assert "Skipped far, manager: only simulated worker clusters" in page


@pytest.mark.parametrize("action", ["disconnect_clusters", "reconnect_clusters"])
def test_viewer_cannot_run_the_actions(
    client: Client, viewer: User, workers: dict[str, Cluster], action: str,
) -> None:
    client.force_login(viewer)

    response = _run(client, action, [workers["sim"]])

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    assert _active(workers["sim"]) is None
