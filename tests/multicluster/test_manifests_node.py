"""core/v1 Nodes of a simulated cluster through apply and export: created and updated in
place, exported so they apply back unchanged, refused with the field path of the error, and
refused outright on a kubernetes cluster, whose nodes are observed, not defined."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from unittest.mock import call, patch

import pytest

from multicluster.choices import PodPhase
from multicluster.models import Cluster, Node, Pod
from scheduling.manifests import yamlio
from scheduling.manifests.apply import ApplyError, apply_manifests, delete_object, export_manifests
from scheduling.manifests.codec import Conflict

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)


def node_doc(name: str = "gpu-1", *, labels: dict[str, str] | None = None,
             spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    document: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": metadata}
    if spec is not None:
        document["spec"] = spec
    document["status"] = status or {"capacity": {"cpu": "8", "memory": "32Gi"}}
    return document


def errors_of(documents: list[dict[str, Any]], cluster: Cluster) -> list[dict[str, Any]]:
    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents, cluster=cluster)
    return [document.as_dict() for document in caught.value.documents]


@pytest.fixture
def sim(db: None) -> Cluster:
    return Cluster.objects.create(name="sim-1", role="worker", connection_type="simulated")


@pytest.fixture
def kube(db: None) -> Cluster:
    return Cluster.objects.create(name="kube-1", role="worker", connection_type="kubernetes")


def test_node_is_created_with_labels_taints_and_capacity(sim: Cluster) -> None:
    document = node_doc(
        labels={"instance-type": "gpu"},
        spec={"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
              "unschedulable": True},
        capacity={"cpu": 8, "memory": "32Gi", "nvidia.com/gpu": "4"},
    )

    result = apply_manifests([document], cluster=sim)

    node = Node.objects.get(cluster=sim, name="gpu-1")
    assert (node.labels, node.taints, node.unschedulable, node.capacity, node.ready) == (
        {"instance-type": "gpu"},
        [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        True,
        {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4"},
        True,
    )
    assert [obj.line() for obj in result.objects] == ["node/gpu-1 created"]
    assert result.warnings == []


def test_changed_nodes_ask_the_simulated_cluster_to_sync_not_admission(sim: Cluster) -> None:
    with patch("kueueweb.reconcile.request_cluster_sync") as sync, \
            patch("scheduling.manifests.apply.admission.on_quota_released") as admission:
        apply_manifests([node_doc("n1"), node_doc("n2")], cluster=sim)
        apply_manifests([node_doc("n1")], cluster=sim)  # unchanged: no write, no sync

    assert sync.call_args_list == [call(sim.pk), call(sim.pk)]
    assert admission.call_count == 0


def test_allocatable_wins_over_capacity(sim: Cluster) -> None:
    apply_manifests([node_doc(capacity={"cpu": "8", "memory": "32Gi"},
                              allocatable={"cpu": "7500m", "memory": "30Gi"})], cluster=sim)

    assert Node.objects.get(cluster=sim).capacity == {"cpu": "7500m", "memory": "30Gi"}


def test_node_is_updated_in_place_and_keeps_its_readiness(sim: Cluster) -> None:
    node = Node.objects.create(cluster=sim, name="gpu-1", capacity={"cpu": "4"},
                               labels={"old": "label"}, ready=False)

    result = apply_manifests([node_doc(labels={"instance-type": "gpu"},
                                       spec={"unschedulable": True})], cluster=sim)

    node.refresh_from_db()
    assert [(obj.kind, obj.name, obj.action) for obj in result.objects] == [
        ("Node", "gpu-1", "updated")]
    assert (node.labels, node.capacity, node.unschedulable, node.ready) == (
        {"instance-type": "gpu"}, {"cpu": "8", "memory": "32Gi"}, True, False)
    assert Node.objects.filter(cluster=sim).count() == 1


def test_reapplying_the_same_node_is_unchanged(sim: Cluster) -> None:
    apply_manifests([node_doc()], cluster=sim)

    result = apply_manifests([node_doc()], cluster=sim)

    assert [obj.action for obj in result.objects] == ["unchanged"]


def test_export_applies_back_to_the_same_nodes(sim: Cluster) -> None:
    # given nodes and a Kueue object in a simulated domain
    apply_manifests([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "gpu"}, "spec": {"nodeLabels": {"instance-type": "gpu"}}},
        node_doc("gpu-1", labels={"instance-type": "gpu"},
                 spec={"taints": [{"key": "gpu", "effect": "NoExecute"}]},
                 capacity={"cpu": "8", "nvidia.com/gpu": "4"}),
        node_doc("cpu-1", spec={"unschedulable": True}),
    ], cluster=sim)

    # when it is exported, then applied to an empty simulated cluster and to itself
    exported = export_manifests(sim)
    empty = Cluster.objects.create(name="sim-2", role="worker", connection_type="simulated")
    into_empty = apply_manifests(yamlio.load_yaml_documents(yamlio.dump_documents(exported)),
                                 cluster=empty)
    again = apply_manifests(exported, cluster=sim)

    # then the nodes come last, in core/v1 shape, and round-trip
    assert exported[1:] == [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-1"},
         "spec": {"unschedulable": True},
         "status": {"capacity": {"cpu": "8", "memory": "32Gi"}}},
        {"apiVersion": "v1", "kind": "Node",
         "metadata": {"name": "gpu-1", "labels": {"instance-type": "gpu"}},
         "spec": {"taints": [{"key": "gpu", "effect": "NoExecute"}]},
         "status": {"capacity": {"cpu": "8", "nvidia.com/gpu": "4"}}},
    ]
    assert export_manifests(empty) == exported
    assert [o.action for o in into_empty.objects] == ["created"] * 3
    assert [o.action for o in again.objects] == ["unchanged"] * 3


def test_kubectl_get_node_output_applies(sim: Cluster) -> None:
    # What a real cluster prints: server metadata, provider fields and observed status.
    document = node_doc(
        labels={"kubernetes.io/hostname": "gpu-1"},
        spec={"podCIDR": "10.244.1.0/24", "providerID": "kind://docker/kind/gpu-1"},
        capacity={"cpu": "8", "memory": "32Gi", "pods": "110"},
        allocatable={"cpu": "8", "memory": "31Gi", "pods": "110"},
        conditions=[{"type": "Ready", "status": "True"}],
        nodeInfo={"kubeletVersion": "v1.35.0"},
    )
    document["metadata"].update(uid="0d6a", resourceVersion="42",
                                creationTimestamp="2025-01-01T00:00:00Z",
                                annotations={"node.alpha.kubernetes.io/ttl": "0"})

    result = apply_manifests([document], cluster=sim)

    assert Node.objects.get(cluster=sim).capacity == {"cpu": "8", "memory": "31Gi", "pods": "110"}
    assert result.warnings == [
        'documents[0] (Node "gpu-1"): metadata.annotations is not supported by kueueweb '
        "(a Node keeps no annotations) and was ignored"]


@pytest.mark.parametrize(
    ("document", "want_errors"),
    [
        (node_doc(capacity={"cpu": "lots"}),
         {"status.capacity[cpu]": ["'lots' is not a valid quantity: expected a number with an "
                                   "optional suffix such as 500m, 2, 1.5, 4Gi or 1e3"]}),
        (node_doc(allocatable={"memory": "-1Gi"}),
         {"status.allocatable[memory]": ["'-1Gi' must not be negative"]}),
        (node_doc(spec={"taints": [{"key": "gpu", "effect": "NoRun"}]}),
         {"spec.taints[0].effect": ['Unsupported value: "NoRun": supported values: '
                                    '"NoSchedule", "PreferNoSchedule", "NoExecute"']}),
        (node_doc(spec={"unschedulable": "yes"}),
         {"spec.unschedulable": ["must be a boolean"]}),
        (node_doc(spec={"cordoned": True}), {"spec.cordoned": ['unknown field "cordoned"']}),
        (node_doc("Bad_Name"),
         {"metadata.name": ["'Bad_Name' is not a valid name: a lowercase RFC 1123 subdomain "
                            "must consist of lower case alphanumeric characters, '-' or '.', "
                            "and must start and end with an alphanumeric character"]}),
        ({**node_doc(), "apiVersion": "kueue.x-k8s.io/v1beta2"},
         {"apiVersion": ['Unsupported value: "kueue.x-k8s.io/v1beta2": supported values: '
                         '"v1"']}),
    ],
    ids=["bad-quantity", "negative-allocatable", "bad-taint-effect", "unschedulable-not-bool",
         "unknown-spec-field", "bad-name", "kueue-api-version"],
)
def test_invalid_node_is_refused_with_its_field_path(
    sim: Cluster, document: dict[str, Any], want_errors: dict[str, list[str]]
) -> None:
    [error] = errors_of([document], sim)

    assert (error["index"], error["kind"], error["errors"]) == (0, "Node", want_errors)
    assert not Node.objects.filter(cluster=sim).exists()


def test_bad_node_rolls_back_the_whole_apply(sim: Cluster) -> None:
    documents = [node_doc("n1"), node_doc("n2", capacity={"cpu": "lots"})]

    [error] = errors_of(documents, sim)

    assert error["index"] == 1
    assert not Node.objects.filter(cluster=sim).exists()


def test_node_on_a_kubernetes_cluster_is_refused(kube: Cluster) -> None:
    observed = Node.objects.create(cluster=kube, name="gpu-1", capacity={"cpu": "4"})

    errors = errors_of([node_doc("gpu-1"), node_doc("gpu-2")], kube)

    refused = {"non_field_errors": [
        'cluster "kube-1" has a kubernetes connection: its nodes are observed from the '
        "cluster, not defined; only the nodes of a simulated cluster can be applied"]}
    assert [(e["index"], e["name"], e["errors"]) for e in errors] == [
        (0, "gpu-1", refused), (1, "gpu-2", refused)]
    observed.refresh_from_db()
    assert observed.capacity == {"cpu": "4"}
    assert list(Node.objects.filter(cluster=kube).values_list("name", flat=True)) == ["gpu-1"]
    # and its observed nodes are not exported (they could not be applied back)
    assert [d["kind"] for d in export_manifests(kube)] == []


def test_delete_refuses_a_node_with_running_pods(sim: Cluster) -> None:
    node = Node.objects.create(cluster=sim, name="n1", capacity={"cpu": "8"})
    pod = Pod.objects.create(cluster=sim, namespace="ns", name="job-0", node_name="n1",
                             phase=PodPhase.RUNNING, created_at=NOW)

    with pytest.raises(Conflict, match='Node "n1" is in use: 1 pod'):
        delete_object("Node", node)
    assert Node.objects.filter(pk=node.pk).exists()

    Pod.objects.filter(pk=pod.pk).update(phase=PodPhase.SUCCEEDED)
    delete_object("Node", node)
    assert not Node.objects.filter(pk=node.pk).exists()


def test_delete_refuses_an_observed_node(kube: Cluster) -> None:
    node = Node.objects.create(cluster=kube, name="n1", capacity={"cpu": "8"})

    with pytest.raises(Conflict, match="observed from the cluster, not deleted here"):
        delete_object("Node", node)
    assert Node.objects.filter(pk=node.pk).exists()
