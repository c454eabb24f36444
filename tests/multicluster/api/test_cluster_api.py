"""Clusters over REST: the shapes tools rely on, the write-only kubeconfig,
simulated nodes, refusals, and who may do what."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from multicluster.models import Cluster, Dispatch, Node
from scheduling.manifests.apply import apply_manifests
from scheduling.models import ClusterQueue, ResourceFlavor, Workload

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters:
- name: worker-1
  cluster:
    server: https://worker-1.example:6443
users:
- name: kueue
  user:
    token: s3cr3t-token
contexts:
- name: worker-1
  context: {cluster: worker-1, user: kueue}
current-context: worker-1
"""


def kubernetes_worker(name: str, kubeconfig: str | None = None) -> dict[str, Any]:
    connection: dict[str, Any] = {"type": "kubernetes"}
    if kubeconfig is not None:
        connection["kubeconfig"] = kubeconfig
    return {"metadata": {"name": name}, "spec": {"role": "worker", "connection": connection}}


def simulated_worker(name: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"role": "worker", "connection": {"type": "simulated", "nodes": nodes}}}


NODE = {"name": "n1", "capacity": {"cpu": "8", "memory": "32Gi"}, "labels": {}, "taints": []}


def test_kubeconfig_is_write_only_and_stored_encrypted(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    response = admin_client_api.post("/api/v1/clusters/", kubernetes_worker("worker-1", KUBECONFIG),
                                     format="json")

    assert response.status_code == 201
    body = response.json()
    assert (body["apiVersion"], body["kind"], body["spec"], body["status"]) == (
        "kueueweb.io/v1", "Cluster",
        {"role": "worker", "connection": {"type": "kubernetes", "hasKubeconfig": True,
                                      "createNamespaces": False}},
        {"conditions": [], "capacity": {}, "lostSince": None})
    assert "s3cr3t-token" not in response.content.decode()
    worker = Cluster.objects.get(name="worker-1")
    assert "s3cr3t-token" not in worker.kubeconfig_encrypted
    assert worker.get_kubeconfig() == KUBECONFIG


def test_kubeconfig_uploaded_later_with_patch(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    # As after applying Kueue's MultiKueueCluster: a kubernetes worker without a kubeconfig.
    apply_manifests([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
                      "metadata": {"name": "worker-1"}, "spec": {"clusterSource": {
                          "kubeConfig": {"location": "worker1-secret"}}}}])
    assert admin_client_api.get("/api/v1/clusters/worker-1/").json()["spec"]["connection"] == {
        "type": "kubernetes", "hasKubeconfig": False,
        "createNamespaces": False}

    response = admin_client_api.patch("/api/v1/clusters/worker-1/",
                                      {"spec": {"connection": {"kubeconfig": KUBECONFIG}}},
                                      format="json")

    assert (response.status_code, response.json()["spec"]["connection"]) == (
        200, {"type": "kubernetes", "hasKubeconfig": True,
                                      "createNamespaces": False})
    assert Cluster.objects.get(name="worker-1").get_kubeconfig() == KUBECONFIG


def test_put_without_kubeconfig_keeps_it_and_empty_clears_it(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    admin_client_api.post("/api/v1/clusters/", kubernetes_worker("worker-1", KUBECONFIG),
                          format="json")

    kept = admin_client_api.put("/api/v1/clusters/worker-1/", kubernetes_worker("worker-1"),
                                format="json")
    cleared = admin_client_api.patch("/api/v1/clusters/worker-1/",
                                     {"spec": {"connection": {"kubeconfig": ""}}}, format="json")

    assert kept.json()["spec"]["connection"]["hasKubeconfig"] is True
    assert cleared.json()["spec"]["connection"]["hasKubeconfig"] is False


def test_create_namespaces_is_set_kept_and_cleared(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    body = kubernetes_worker("worker-1", KUBECONFIG)
    body["spec"]["connection"]["createNamespaces"] = True

    created = admin_client_api.post("/api/v1/clusters/", body, format="json")
    kept = admin_client_api.put("/api/v1/clusters/worker-1/", kubernetes_worker("worker-1"),
                                format="json")
    kept_flag = Cluster.objects.get(name="worker-1").create_namespaces
    cleared = admin_client_api.patch(
        "/api/v1/clusters/worker-1/", {"spec": {"connection": {"createNamespaces": False}}},
        format="json")

    assert created.status_code == 201
    assert created.json()["spec"]["connection"]["createNamespaces"] is True
    assert (kept.status_code, kept.json()["spec"]["connection"]["createNamespaces"],
            kept_flag) == (200, True, True)
    assert cleared.json()["spec"]["connection"]["createNamespaces"] is False
    assert Cluster.objects.get(name="worker-1").create_namespaces is False


def test_simulated_cluster_with_nodes(manager: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/clusters/", simulated_worker("sim-1", [NODE]),
                                     format="json")

    assert (response.status_code, response.json()["spec"]) == (201, {
        "role": "worker", "connection": {"type": "simulated", "nodes": [NODE]}})
    assert list(Node.objects.filter(cluster__name="sim-1").values_list(
        "name", "capacity", "labels", "taints")) == [("n1", {"cpu": "8", "memory": "32Gi"}, {}, [])]


def test_patching_nodes_updates_them_in_place(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    admin_client_api.post("/api/v1/clusters/", simulated_worker("sim-1", [NODE]), format="json")
    node_id = Node.objects.get(cluster__name="sim-1").pk
    nodes = [{**NODE, "capacity": {"cpu": 16}},
             {"name": "n2", "capacity": {"cpu": "4"}, "labels": {"zone": "a"},
              "taints": [{"key": "gpu", "effect": "NoSchedule"}]}]

    response = admin_client_api.patch("/api/v1/clusters/sim-1/",
                                      {"spec": {"connection": {"nodes": nodes}}}, format="json")

    assert response.status_code == 200
    assert list(Node.objects.filter(cluster__name="sim-1").order_by("name").values_list(
        "pk", "name", "capacity", "labels", "taints")) == [
        (node_id, "n1", {"cpu": "16"}, {}, []),
        (Node.objects.get(name="n2").pk, "n2", {"cpu": "4"}, {"zone": "a"},
         [{"key": "gpu", "effect": "NoSchedule"}]),
    ]


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(kubernetes_worker("worker-1", "clusters: not-a-list\n"),
                     {"spec.connection.kubeconfig": [
                         "not a kubeconfig: expected a YAML mapping with a 'clusters' list"]},
                     id="not a kubeconfig"),
        pytest.param(kubernetes_worker("worker-1", "a: &x 1\nb: *x\n"),
                     {"spec.connection.kubeconfig": [
                         "YAML anchors and aliases are not accepted (line 1, column 4): write the "
                         "value out in full"]}, id="aliases in a kubeconfig"),
        pytest.param({"metadata": {"name": "sim-1"}, "spec": {"connection": {
            "type": "simulated", "kubeconfig": KUBECONFIG}}},
            {"spec.connection.kubeconfig": ["only a kubernetes connection has a kubeconfig"]},
            id="kubeconfig of a simulated cluster"),
        pytest.param({"metadata": {"name": "w"}, "spec": {"connection": {
            "type": "kubernetes", "nodes": [NODE]}}},
            {"spec.connection.nodes": ["only a simulated connection has its nodes defined here "
                                       "(a kubernetes cluster reports its own)"]},
            id="nodes of a kubernetes cluster"),
        pytest.param(simulated_worker("sim-1", [{"name": "n1", "capacity": {"cpu": "-1"}}]),
                     {"spec.connection.nodes[0].capacity[cpu]": ["'-1' must not be negative"]},
                     id="negative capacity"),
        pytest.param(simulated_worker("sim-1", [NODE, NODE]),
                     {"spec.connection.nodes[1].name": ['Duplicate value: "n1"']},
                     id="duplicate node"),
        pytest.param({"metadata": {"name": "Worker_1"}, "spec": {"connection": {
            "type": "simulated"}}},
            {"metadata.name": ["'Worker_1' is not a valid name: a lowercase RFC 1123 subdomain "
                               "must consist of lower case alphanumeric characters, '-' or '.', "
                               "and must start and end with an alphanumeric character"]},
            id="invalid name"),
        pytest.param({"metadata": {"name": "m2"}, "spec": {"role": "manager", "connection": {
            "type": "simulated"}}},
            {"spec.role": ['there is already a manager cluster ("manager")']},
            id="second manager"),
        pytest.param({"metadata": {"name": "w"}, "spec": {"connection": {"type": "cloud"}}},
                     {"spec.connection.type": ['Unsupported value: "cloud": supported values: '
                                               '"simulated", "kubernetes"']},
                     id="unknown connection type"),
        pytest.param({"metadata": {"name": "w"}, "spec": {"connection": {
            "type": "kubernetes", "createNamespaces": "yes"}}},
            {"spec.connection.createNamespaces": ["must be true or false"]},
            id="createNamespaces not a boolean"),
        pytest.param({"metadata": {"name": "sim-1"}, "spec": {"connection": {
            "type": "simulated", "createNamespaces": True}}},
            {"spec.connection.createNamespaces": [
                "only a kubernetes connection creates namespaces"]},
            id="createNamespaces of a simulated cluster"),
    ],
)
def test_invalid_clusters_are_refused_by_field(
    manager: Cluster, admin_client_api: APIClient, body: dict[str, Any],
    want: dict[str, list[str]]
) -> None:
    response = admin_client_api.post("/api/v1/clusters/", body, format="json")

    assert (response.status_code, response.json()) == (400, want)
    assert list(Cluster.objects.values_list("name", flat=True)) == ["manager"]


def test_existing_cluster_name_conflicts(manager: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/clusters/", simulated_worker("manager", []),
                                     format="json")

    assert (response.status_code, response.json()) == (
        409, {"detail": 'clusters "manager" already exists'})


def test_role_is_immutable(manager: Cluster, admin_client_api: APIClient) -> None:
    admin_client_api.post("/api/v1/clusters/", simulated_worker("sim-1", []), format="json")

    response = admin_client_api.patch("/api/v1/clusters/sim-1/", {"spec": {"role": "manager"}},
                                      format="json")

    assert (response.status_code, response.json()) == (400, {"spec.role": ["field is immutable"]})


def test_switching_to_kubernetes_drops_simulated_nodes(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    admin_client_api.post("/api/v1/clusters/", simulated_worker("sim-1", [NODE]), format="json")

    response = admin_client_api.patch("/api/v1/clusters/sim-1/", {"spec": {"connection": {
        "type": "kubernetes", "kubeconfig": KUBECONFIG}}}, format="json")

    assert (response.status_code, response.json()["spec"]["connection"]) == (
        200, {"type": "kubernetes", "hasKubeconfig": True,
                                      "createNamespaces": False})
    assert not Node.objects.filter(cluster__name="sim-1").exists()


def test_list_and_filter_clusters(manager: Cluster, viewer_client: APIClient) -> None:
    Cluster.objects.create(name="sim-1")
    Cluster.objects.create(name="real-1", connection_type="kubernetes")

    def names(url: str) -> list[str]:
        return [c["metadata"]["name"] for c in viewer_client.get(url).json()["results"]]

    assert names("/api/v1/clusters/") == ["manager", "real-1", "sim-1"]
    assert names("/api/v1/clusters/?role=worker&type=kubernetes") == ["real-1"]
    assert viewer_client.get("/api/v1/clusters/manager/").json()["spec"]["connection"][
        "nodes"][0]["name"] == "node-1"


def test_manager_cannot_be_deleted(manager: Cluster, admin_client_api: APIClient) -> None:
    response = admin_client_api.delete("/api/v1/clusters/manager/")

    assert (response.status_code, response.json()) == (
        409, {"detail": 'cluster "manager" is the manager and cannot be deleted'})


def test_worker_with_workloads_cannot_be_deleted(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    worker = Cluster.objects.create(name="worker-1")
    hub = Workload.objects.create(cluster=manager, namespace="a", name="hub", pod_sets=[])
    Workload.objects.create(cluster=worker, namespace="a", name="copy", pod_sets=[])
    Dispatch.objects.create(workload=hub, worker=worker, nominated_at="2026-01-01T00:00:00Z")

    response = admin_client_api.delete("/api/v1/clusters/worker-1/")

    assert (response.status_code, response.json()) == (409, {"detail": (
        'cluster "worker-1" is in use: 1 workload(s) in its domain; 1 workload(s) dispatched '
        "to it")})


def test_deleting_a_worker_removes_its_domain(
    manager: Cluster, admin_client_api: APIClient
) -> None:
    worker = Cluster.objects.create(name="worker-1")
    apply_manifests([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "default"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "cq"}, "spec": {"cohortName": "team", "resourceGroups": [{
             "coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [
                 {"name": "cpu", "nominalQuota": 1}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": "a"}, "spec": {"clusterQueue": "cq"}},
    ], cluster=worker)

    response = admin_client_api.delete("/api/v1/clusters/worker-1/")

    assert response.status_code == 204
    assert (ClusterQueue.objects.count(), ResourceFlavor.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    ("role", "want_read", "want_write"),
    [("anon_client", 401, 401), ("viewer_client", 200, 403), ("operator_client", 200, 403),
     ("admin_client_api", 200, 201)],
)
def test_cluster_permissions(manager: Cluster, role: str, want_read: int, want_write: int,
                             request: pytest.FixtureRequest) -> None:
    client: APIClient = request.getfixturevalue(role)

    reads = {client.get("/api/v1/clusters/").status_code,
             client.get("/api/v1/clusters/manager/").status_code}
    write = client.post("/api/v1/clusters/", simulated_worker("sim-1", []), format="json")

    assert (reads, write.status_code) == ({want_read}, want_write)
    assert Cluster.objects.filter(name="sim-1").exists() == (want_write == 201)


@pytest.mark.parametrize("role", ["anon_client", "viewer_client", "operator_client"])
def test_non_admins_cannot_change_or_delete_clusters(
    manager: Cluster, role: str, request: pytest.FixtureRequest
) -> None:
    Cluster.objects.create(name="sim-1")
    client: APIClient = request.getfixturevalue(role)
    want = 401 if role == "anon_client" else 403

    statuses = [
        client.put("/api/v1/clusters/sim-1/", simulated_worker("sim-1", [NODE]),
                   format="json").status_code,
        client.patch("/api/v1/clusters/sim-1/", {"spec": {"connection": {"type": "kubernetes",
                                                                         "kubeconfig": KUBECONFIG}}},
                     format="json").status_code,
        client.delete("/api/v1/clusters/sim-1/").status_code,
    ]

    assert statuses == [want] * 3
    sim = Cluster.objects.get(name="sim-1")
    assert (sim.connection_type, sim.has_kubeconfig, sim.nodes.count()) == ("simulated", False, 0)
