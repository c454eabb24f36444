"""The admin console for clusters: pages render for an admin only, a kubeconfig goes in
encrypted and never comes back out, and faults are injected into a simulated cluster by an
admin only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from multicluster.choices import PodPhase
from multicluster.models import (
    AdmissionCheck,
    Cluster,
    GangWorkload,
    MultiKueueConfig,
    Node,
    Pod,
    PodGroup,
    ProvisioningRequestConfig,
)

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
    prc = ProvisioningRequestConfig.objects.create(
        cluster=manager, name="gpu", provisioning_class_name="check-capacity.autoscaling.x-k8s.io")
    return {"cluster": worker, "admissioncheck": check, "multikueueconfig": config,
            "provisioningrequestconfig": prc}


@pytest.fixture
def admin_browser(client: Client, admin_user: User) -> Client:
    client.force_login(admin_user)
    return client


MODELS = ["cluster", "admissioncheck", "multikueueconfig", "provisioningrequestconfig"]


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


def test_provisioning_request_config_is_checked_as_kueue_checks_it(
    admin_browser: Client, manager: Cluster,
) -> None:
    form = {"cluster": manager.pk, "name": "prov", "parameters": "{}",
            "managed_resources": '["nvidia.com/gpu"]', "backoff_limit_count": 3,
            "backoff_base_seconds": 60, "backoff_max_seconds": 1800,
            "pod_set_updates_node_selector": '[{"key": "bad key"}]', "pod_set_merge_policy": ""}
    response = admin_browser.post(reverse("admin:multicluster_provisioningrequestconfig_add"),
                                  {**form, "provisioning_class_name": "Bad_Class"})

    assert response.status_code == 200
    page = response.content.decode()
    assert "spec.provisioningClassName: " in page
    assert "spec.podSetUpdates.nodeSelector[0].key: &quot;bad key&quot; is not a valid node " \
           "selector key" in page
    assert not ProvisioningRequestConfig.objects.exists()

    response = admin_browser.post(
        reverse("admin:multicluster_provisioningrequestconfig_add"),
        {**form, "provisioning_class_name": "check-capacity.autoscaling.x-k8s.io",
         "pod_set_updates_node_selector": "[]"})
    assert response.status_code == 302
    config = ProvisioningRequestConfig.objects.get(name="prov")
    assert (config.managed_resources, config.backoff_limit_count) == (["nvidia.com/gpu"], 3)


# --- simulated clusters: nodes, pods, pod groups and fault injection ------------------------

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def make_pod(cluster: Cluster, name: str, node: str, phase: str = PodPhase.RUNNING,
             **fields: Any) -> Pod:
    return Pod.objects.create(cluster=cluster, namespace="team-a", name=name, node_name=node,
                              phase=phase, ready=phase == PodPhase.RUNNING, created_at=NOW,
                              **fields)


@pytest.fixture
def pods(manager: Cluster, make_queue: Any, make_workload: Any) -> dict[str, Any]:
    """A gang of two pods on node-1 (running, and bound but not started), one running on
    node-2 and one that finished on node-1, all in the manager's simulated cluster."""
    make_queue("cq", {"cpu": "9"}, namespace="team-a")
    workload = make_workload("wl", "lq-cq", {"cpu": "1"}, count=2, namespace="team-a")
    group = PodGroup.objects.create(cluster=manager, workload=workload, pod_set="main",
                                    min_count=2, created_at=NOW, bound_at=NOW)
    return {
        "running": make_pod(manager, "wl-0", "node-1", workload=workload, group=group),
        "starting": make_pod(manager, "wl-1", "node-1", PodPhase.PENDING, workload=workload,
                             group=group),
        "elsewhere": make_pod(manager, "other-0", "node-2"),
        "done": make_pod(manager, "old-0", "node-1", PodPhase.SUCCEEDED),
        "group": group,
    }


def _run_action(browser: Client, model: str, action: str, pks: list[int]) -> Any:
    return browser.post(reverse(f"admin:multicluster_{model}_changelist"),
                        {"action": action, "_selected_action": pks, "index": 0})


def _phases(pods: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {key: tuple(Pod.objects.filter(pk=pod.pk).values_list("phase", "reason").get())
            for key, pod in pods.items() if isinstance(pod, Pod)}


@pytest.mark.parametrize("model", ["node", "pod", "podgroup"])
def test_simulated_cluster_changelists_render_for_an_admin(
    admin_browser: Client, pods: dict[str, Any], model: str
) -> None:
    response = admin_browser.get(reverse(f"admin:multicluster_{model}_changelist"))

    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == {"node": 4, "pod": 4, "podgroup": 1}[model]
    form = response.context["action_form"]
    actions = [label for _, label in form.fields["action"].choices][1:] if form else []
    assert actions == {"node": ["Delete selected nodes", "Lose node (fault injection)",
                                "Restore node"],
                       "pod": ["Fail pod (fault injection)"],
                       "podgroup": []}[model]


def test_node_list_counts_the_pods_bound_to_each_node(
    admin_browser: Client, pods: dict[str, Any]
) -> None:
    response = admin_browser.get(reverse("admin:multicluster_node_changelist"))

    counts = {node.name: node.pods_bound for node in response.context["cl"].result_list}
    assert counts == {"node-1": 2, "node-2": 1, "node-3": 0, "node-4": 0}


def test_pod_and_pod_group_lists_filter_and_search(
    admin_browser: Client, pods: dict[str, Any]
) -> None:
    url = reverse("admin:multicluster_pod_changelist")
    running = admin_browser.get(url, {"phase__exact": "Running"}).context["cl"].result_list
    searched = admin_browser.get(url, {"q": "wl-"}).context["cl"].result_list
    waiting = admin_browser.get(reverse("admin:multicluster_podgroup_changelist"),
                                {"state": "waiting"}).context["cl"].result_list

    assert sorted(pod.name for pod in running) == ["other-0", "wl-0"]
    assert sorted(pod.name for pod in searched) == ["wl-0", "wl-1"]
    assert list(waiting) == []


def test_pods_and_pod_groups_are_read_only(admin_browser: Client, pods: dict[str, Any]) -> None:
    pod = pods["running"]
    assert admin_browser.get(reverse("admin:multicluster_pod_add")).status_code == 403
    assert admin_browser.get(reverse("admin:multicluster_podgroup_add")).status_code == 403
    assert admin_browser.get(
        reverse("admin:multicluster_pod_delete", args=[pod.pk])).status_code == 403
    page = admin_browser.get(reverse("admin:multicluster_pod_change", args=[pod.pk]))
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()


def test_applied_gang_workloads_are_shown_and_deleted_never_edited(
        admin_browser: Client, manager: Cluster) -> None:
    gang = GangWorkload.objects.create(cluster=manager, namespace="ns", name="train",
                                       pod_groups=[{"name": "w", "policy": {"basic": {}}}])
    assert admin_browser.get(reverse("admin:multicluster_gangworkload_add")).status_code == 403
    page = admin_browser.get(reverse("admin:multicluster_gangworkload_change", args=[gang.pk]))
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()

    admin_browser.post(reverse("admin:multicluster_gangworkload_delete", args=[gang.pk]),
                       {"post": "yes"})
    assert not GangWorkload.objects.exists()


def test_lose_node_marks_it_not_ready_and_fails_its_running_pods(
    admin_browser: Client, manager: Cluster, pods: dict[str, Any]
) -> None:
    node = Node.objects.get(cluster=manager, name="node-1")

    response = _run_action(admin_browser, "node", "lose_nodes", [node.pk])

    assert response.status_code == 302
    node.refresh_from_db()
    assert node.ready is False
    assert _phases(pods) == {
        "running": ("Failed", "NodeLost"),
        "starting": ("Failed", "NodeLost"),
        "elsewhere": ("Running", ""),
        "done": ("Succeeded", ""),
    }
    page = admin_browser.get(response["Location"]).content.decode()
    assert "1 node(s) lost (NotReady); 2 pod(s) on them failed with reason NodeLost." in page


def test_restore_node_makes_it_ready_again(admin_browser: Client, manager: Cluster) -> None:
    node = Node.objects.get(cluster=manager, name="node-1")
    Node.objects.filter(pk=node.pk).update(ready=False)

    _run_action(admin_browser, "node", "restore_nodes", [node.pk])

    node.refresh_from_db()
    assert node.ready is True


def test_faults_skip_the_nodes_of_a_kubernetes_cluster(
    admin_browser: Client, worker: Cluster
) -> None:
    node = worker.nodes.get()

    response = _run_action(admin_browser, "node", "lose_nodes", [node.pk])

    node.refresh_from_db()
    assert node.ready is True
    page = admin_browser.get(response["Location"]).content.decode()
    assert "Skipped worker-1/n1: faults are injected into simulated clusters only." in page


def test_fail_pod_fails_a_running_pod_and_marks_a_starting_one(
    admin_browser: Client, pods: dict[str, Any]
) -> None:
    selected = [pods["running"].pk, pods["starting"].pk, pods["done"].pk]

    response = _run_action(admin_browser, "pod", "fail_pods", selected)

    assert _phases(pods) == {
        "running": ("Failed", "Error"),
        "starting": ("Pending", ""),
        "elsewhere": ("Running", ""),
        "done": ("Succeeded", ""),
    }
    assert Pod.objects.get(pk=pods["starting"].pk).fail is True
    page = admin_browser.get(response["Location"]).content.decode()
    assert "2 pod(s) failed" in page
    assert "1 pod(s) had already terminated." in page


@pytest.mark.parametrize(("model", "action"), [("node", "lose_nodes"), ("node", "restore_nodes"),
                                               ("pod", "fail_pods")])
def test_viewer_cannot_run_fault_actions(
    client: Client, viewer: User, manager: Cluster, pods: dict[str, Any], model: str, action: str
) -> None:
    client.force_login(viewer)
    node = Node.objects.get(cluster=manager, name="node-1")
    pk = node.pk if model == "node" else pods["running"].pk

    response = _run_action(client, model, action, [pk])

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    node.refresh_from_db()
    assert node.ready is True
    assert _phases(pods)["running"] == ("Running", "")


def test_staff_without_the_admin_role_sees_no_fault_actions(
    client: Client, make_user: Any, manager: Cluster, pods: dict[str, Any]
) -> None:
    # given a staff operator allowed by Django permissions to view nodes and pods
    user = make_user("sam", "operator")
    user.is_staff = True
    user.save()
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_node", "view_pod"]))
    client.force_login(user)
    node = Node.objects.get(cluster=manager, name="node-1")

    # the lists render without the actions, and posting them changes nothing
    for model, action in (("node", "lose_nodes"), ("pod", "fail_pods")):
        page = client.get(reverse(f"admin:multicluster_{model}_changelist"))
        assert page.status_code == 200
        assert action not in page.content.decode()
        _run_action(client, model, action, [node.pk if model == "node" else pods["running"].pk])

    node.refresh_from_db()
    assert node.ready is True
    assert _phases(pods)["running"] == ("Running", "")


def test_admin_adds_and_edits_a_node_with_checked_capacity(
    admin_browser: Client, manager: Cluster
) -> None:
    add = reverse("admin:multicluster_node_add")
    form = {"cluster": manager.pk, "name": "gpu-1", "capacity": '{"cpu": "8"}', "labels": "{}",
            "taints": "[]", "ready": "on"}
    assert admin_browser.get(add).status_code == 200

    refused = admin_browser.post(add, {**form, "capacity": '{"cpu": "lots"}'})
    created = admin_browser.post(add, form)

    assert refused.status_code == 200
    assert "cpu: &#x27;lots&#x27; is not a valid quantity" in refused.content.decode()
    assert created.status_code == 302
    node = Node.objects.get(cluster=manager, name="gpu-1")
    change = reverse("admin:multicluster_node_change", args=[node.pk])
    edited = admin_browser.post(change, {**form, "capacity": '{"cpu": "16"}', "unschedulable": "on"})
    assert edited.status_code == 302
    node.refresh_from_db()
    assert (node.capacity, node.unschedulable) == ({"cpu": "16"}, True)


def test_creating_namespaces_is_off_until_an_admin_allows_it(
    admin_browser: Client, worker: Cluster
) -> None:
    assert worker.create_namespaces is False
    assert 'name="create_namespaces"' in admin_browser.get(_change_url(worker)).content.decode()
    response = admin_browser.post(_change_url(worker),
                                  _cluster_post(worker, create_namespaces="on"))
    assert response.status_code == 302
    worker.refresh_from_db()
    assert worker.create_namespaces is True


# --- Kueue's webhooks: install and remove from the cluster list ----------------------------


def test_the_webhooks_action_asks_for_url_and_ca_then_installs_and_removes(
        admin_browser: Client, kube_api: Any, kube_cluster: Cluster, tmp_path: Any) -> None:
    from tests.fixtures.tls import make_serving_certificate

    kube_api.require_fake()
    url = reverse("admin:multicluster_cluster_changelist")
    chosen = {"action": "manage_webhooks", "_selected_action": [kube_cluster.pk], "index": 0}
    form_page = admin_browser.post(url, chosen)
    assert form_page.status_code == 200
    assert b'name="ca_bundle"' in form_page.content

    refused = admin_browser.post(url, {**chosen, "apply": "Apply", "operation": "install",
                                       "url": "http://kueueweb.example", "ca_bundle": "x"})
    assert refused.status_code == 200
    assert refused.context["form"].errors == {
        "url": ["must start with https:// (the API server calls webhooks over HTTPS only), "
                "not 'http://kueueweb.example'"],
        "ca_bundle": ["is neither PEM nor base64 of PEM"]}
    assert kube_api.objects("mutatingwebhookconfigurations") == []

    ca = make_serving_certificate(tmp_path, "kueueweb.example").ca_pem.decode()
    done = admin_browser.post(url, {**chosen, "apply": "Apply", "operation": "install",
                                    "url": "https://kueueweb.example:8443",
                                    "ca_bundle": ca}, follow=True)
    assert [str(m) for m in done.context["messages"]] == [
        "kube-worker: MutatingWebhookConfiguration kueueweb-mutating-webhook-configuration "
        "created (mjob.kb.io, mjobset.kb.io, mmpijob.kb.io, mraycluster.kb.io, "
        "mrayjob.kb.io, mrayservice.kb.io, mtrainjob.kb.io); ValidatingWebhookConfiguration "
        "kueueweb-validating-webhook-configuration created (vjob.kb.io, vjobset.kb.io, "
        "vmpijob.kb.io, vraycluster.kb.io, vrayjob.kb.io, vrayservice.kb.io, "
        "vtrainjob.kb.io)"]
    [config] = kube_api.objects("validatingwebhookconfigurations")
    assert config["webhooks"][0]["clientConfig"]["url"] == (
        "https://kueueweb.example:8443/webhooks/kube-worker/validate-batch-v1-job")

    admin_browser.post(url, {**chosen, "apply": "Apply", "operation": "remove"}, follow=True)
    assert kube_api.objects("validatingwebhookconfigurations") == []
    assert kube_api.objects("mutatingwebhookconfigurations") == []
