"""The admin console for clusters: pages render for an admin only, and a kubeconfig goes in
encrypted and never comes back out."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig, Node

# A distinctive token stands in for the credentials a real kubeconfig holds.
SECRET_TOKEN = "s3cr3t-token-that-must-never-be-shown"
KUBECONFIG = f"""\
apiVersion: v1
kind: Config
clusters:
- name: worker-1
  cluster:
    server: https://worker-1.example:6443
contexts:
- name: worker-1
  context: {{cluster: worker-1, user: kueue}}
current-context: worker-1
users:
- name: kueue
  user:
    token: {SECRET_TOKEN}
"""


@pytest.fixture
def worker(db: None) -> Cluster:
    cluster = Cluster.objects.create(name="worker-1", role="worker", connection_type="kubernetes")
    Node.objects.create(cluster=cluster, name="n1", capacity={"cpu": "8", "memory": "32Gi"})
    return cluster


@pytest.fixture
def objects(manager: Cluster, worker: Cluster) -> dict[str, Any]:
    check = AdmissionCheck.objects.create(
        cluster=manager, name="multikueue", controller_name="kueue.x-k8s.io/multikueue",
        parameters={"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                    "name": "multikueue"},
    )
    config = MultiKueueConfig.objects.create(cluster=manager, name="multikueue",
                                             clusters=["worker-1"])
    return {"cluster": worker, "admissioncheck": check, "multikueueconfig": config}


@pytest.fixture
def admin_browser(client: Client, admin_user: User) -> Client:
    client.force_login(admin_user)
    return client


MODELS = ["cluster", "admissioncheck", "multikueueconfig"]


def _change_url(cluster: Cluster) -> str:
    return reverse("admin:multicluster_cluster_change", args=[cluster.pk])


def _cluster_post(cluster: Cluster, **fields: Any) -> dict[str, Any]:
    """The change form of ``cluster`` as the browser sends it, its nodes unchanged."""
    data: dict[str, Any] = {
        "role": cluster.role, "connection_type": cluster.connection_type, "simulation": "{}",
        "kubeconfig_text": "", "nodes-TOTAL_FORMS": 0, "nodes-INITIAL_FORMS": 0,
        "nodes-MIN_NUM_FORMS": 0, "nodes-MAX_NUM_FORMS": 1000,
    }
    for index, node in enumerate(cluster.nodes.all()):
        data.update({
            f"nodes-{index}-id": node.pk, f"nodes-{index}-cluster": cluster.pk,
            f"nodes-{index}-name": node.name, f"nodes-{index}-capacity": '{"cpu": "8"}',
            f"nodes-{index}-labels": "{}", f"nodes-{index}-taints": "[]",
            f"nodes-{index}-ready": "on",
        })
        data["nodes-TOTAL_FORMS"] = data["nodes-INITIAL_FORMS"] = index + 1
    data.update(fields)
    return data


@pytest.mark.parametrize("model", MODELS)
def test_changelist_change_and_add_pages_render_for_an_admin(
    admin_browser: Client, objects: dict[str, Any], model: str
) -> None:
    for url in (reverse(f"admin:multicluster_{model}_changelist"),
                reverse(f"admin:multicluster_{model}_change", args=[objects[model].pk]),
                reverse(f"admin:multicluster_{model}_add")):
        assert admin_browser.get(url).status_code == 200, url


@pytest.mark.parametrize("model", MODELS)
def test_viewer_is_sent_to_the_login_page(
    client: Client, viewer: User, objects: dict[str, Any], model: str
) -> None:
    client.force_login(viewer)
    for url in (reverse(f"admin:multicluster_{model}_changelist"),
                reverse(f"admin:multicluster_{model}_change", args=[objects[model].pk])):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_cluster_list_shows_role_connection_active_and_node_count(
    admin_browser: Client, manager: Cluster, worker: Cluster
) -> None:
    worker.conditions = [{"type": "Active", "status": "True", "reason": "Active"}]
    worker.save()
    response = admin_browser.get(reverse("admin:multicluster_cluster_changelist"))
    rows = {row.name: row for row in response.context["cl"].result_list}
    assert rows["worker-1"].nodes_total == 1
    assert rows["manager"].nodes_total == manager.nodes.count()
    html = response.content.decode()
    assert "True (Active)" in html
    assert "kubernetes" in html


def test_uploaded_kubeconfig_is_stored_encrypted_and_never_shown(
    admin_browser: Client, worker: Cluster
) -> None:
    # when an admin uploads a kubeconfig file
    upload = SimpleUploadedFile("kubeconfig", KUBECONFIG.encode(), content_type="text/yaml")
    response = admin_browser.post(_change_url(worker),
                                  _cluster_post(worker, kubeconfig_file=upload))
    assert response.status_code == 302
    # then the column holds ciphertext, and the model decrypts it
    worker.refresh_from_db()
    assert worker.kubeconfig_encrypted
    assert SECRET_TOKEN not in worker.kubeconfig_encrypted
    assert "apiVersion" not in worker.kubeconfig_encrypted
    assert worker.get_kubeconfig() == KUBECONFIG
    # and the change page only says that one is stored
    page = admin_browser.get(_change_url(worker)).content.decode()
    assert SECRET_TOKEN not in page
    assert "worker-1.example" not in page
    assert 'alt="True"' in page.split("Kubeconfig stored")[1][:400]


def test_pasted_kubeconfig_is_stored_and_not_echoed_when_the_form_has_errors(
    admin_browser: Client, worker: Cluster
) -> None:
    # given a form with an error elsewhere (an invalid node capacity)
    data = _cluster_post(worker, kubeconfig_text=KUBECONFIG)
    data["nodes-0-capacity"] = '{"cpu": "lots"}'
    response = admin_browser.post(_change_url(worker), data)
    # then the page comes back without the pasted kubeconfig, and nothing was stored
    assert response.status_code == 200
    assert SECRET_TOKEN not in response.content.decode()
    worker.refresh_from_db()
    assert not worker.has_kubeconfig
    # when the form is sent again without the error, it is stored
    response = admin_browser.post(_change_url(worker), _cluster_post(worker,
                                                                     kubeconfig_text=KUBECONFIG))
    assert response.status_code == 302
    worker.refresh_from_db()
    assert worker.get_kubeconfig() == KUBECONFIG.strip()


def test_clear_checkbox_removes_the_stored_kubeconfig(
    admin_browser: Client, worker: Cluster
) -> None:
    worker.set_kubeconfig(KUBECONFIG)
    worker.save()
    response = admin_browser.post(_change_url(worker),
                                  _cluster_post(worker, clear_kubeconfig="on"))
    assert response.status_code == 302
    worker.refresh_from_db()
    assert worker.kubeconfig_encrypted == ""


def test_text_that_is_not_a_kubeconfig_is_refused(admin_browser: Client, worker: Cluster) -> None:
    response = admin_browser.post(_change_url(worker),
                                  _cluster_post(worker, kubeconfig_text="just: text"))
    assert response.status_code == 200
    assert "not a kubeconfig" in response.content.decode()
    worker.refresh_from_db()
    assert not worker.has_kubeconfig


def test_manager_cluster_cannot_be_deleted(admin_browser: Client, manager: Cluster) -> None:
    response = admin_browser.get(reverse("admin:multicluster_cluster_delete", args=[manager.pk]))
    assert response.status_code == 403
    assert Cluster.objects.filter(pk=manager.pk).exists()


@pytest.mark.parametrize(
    ("clusters", "want_message"),
    [
        ("[]", "This field is required."),
        ('["worker-1", "worker-1"]', "spec.clusters: names must be unique"),
        ('["Worker_1"]', "is not a valid name"),
    ],
    ids=["empty", "duplicate", "invalid-name"],
)
def test_multikueue_config_cluster_list_follows_kueue_rules(
    admin_browser: Client, manager: Cluster, clusters: str, want_message: str
) -> None:
    response = admin_browser.post(
        reverse("admin:multicluster_multikueueconfig_add"),
        {"cluster": manager.pk, "name": "mk", "clusters": clusters, "dispatcher": "AllAtOnce"},
    )
    assert response.status_code == 200
    assert want_message in response.content.decode()
    assert not MultiKueueConfig.objects.filter(name="mk").exists()
