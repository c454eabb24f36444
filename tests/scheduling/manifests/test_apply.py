"""Applying and exporting Kueue YAML: Kueue's own examples apply unchanged and export back to
the same state; one transaction per apply; hostile YAML is refused fast; the commands.

Kueue's examples are in ``tests/fixtures/kueue_examples/`` (see its README): files of
Kueue's ``site/static/examples/`` and YAML blocks of its documentation, verbatim. A file may
also hold kinds kueueweb does not implement (Jobs, Namespaces, Topologies, ...): those
documents are dropped before applying, by the one rule of ``kueue_documents``.
"""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig
from scheduling.manifests import yamlio
from scheduling.manifests.apply import (
    KINDS,
    ApplyError,
    UnknownCluster,
    apply_manifests,
    export_manifests,
)
from scheduling.models import (
    ClusterQueue,
    Cohort,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"


def kueue_documents(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The documents of an example kueueweb applies, and the kinds it dropped: everything
    but the kinds of ``scheduling.manifests.apply.KINDS`` (Kueue's nine, and core/v1 Node)."""
    kept, dropped = [], []
    for document in yamlio.load_yaml_documents((EXAMPLES / path).read_text()):
        if document.get("kind") in KINDS:
            kept.append(document)
        else:
            dropped.append(document["kind"])
    return kept, dropped


@dataclass(frozen=True)
class Example:
    name: str
    files: tuple[str, ...]  # applied one after the other, as `kubectl apply -f` each
    want_objects: tuple[str, ...]  # the export afterwards, "Kind name" in export order
    want_dropped: tuple[str, ...] = ()
    want_warnings: int = 0


RF = "ResourceFlavor"
# The flavor the documentation snippets assume (Kueue's admin/resource-flavor-empty.yaml).
DEFAULT_FLAVOR = "examples/admin/resource-flavor-empty.yaml"
CQ = "ClusterQueue"
LQ = "LocalQueue"
SINGLE_CQ = (f"{RF} default-flavor", f"{CQ} cluster-queue", f"{LQ} default/user-queue")

EXAMPLE_CASES = [
    Example("single cluster queue", ("examples/admin/single-clusterqueue-setup.yaml",), SINGLE_CQ),
    Example("quick start", ("examples/getting-started/quick-start-setup.yaml",), SINGLE_CQ),
    Example("empty flavor", ("examples/admin/resource-flavor-empty.yaml",), (f"{RF} default-flavor",)),
    Example("flavor with taints", ("examples/admin/resource-flavor-taints.yaml",), (f"{RF} spot",)),
    Example("flavor with tolerations", ("examples/admin/resource-flavor-tolerations.yaml",),
            (f"{RF} spot",)),
    Example("shared quota across flavors", ("examples/admin/shared-quota-setup.yaml",),
            (f"{RF} credits", f"{RF} on-demand", f"{RF} spot", f"{CQ} team-cluster-queue",
             f"{LQ} default/team-queue")),
    Example("concurrent admission (alpha field ignored)",
            ("examples/admin/concurrent-admission-setup.yaml",),
            (f"{RF} on-demand", f"{RF} reservation", f"{RF} spot", f"{CQ} team-cluster-queue",
             f"{LQ} default/team-queue"), want_warnings=1),
    Example("admission fair sharing (admissionScope ignored)",
            ("examples/admission-fs/admission-fair-sharing-setup.yaml",),
            (f"{RF} default-flavor", f"{CQ} cluster-queue", f"{LQ} default/lq-a",
             f"{LQ} default/lq-b"), want_warnings=1),
    Example("DRA queues", ("examples/dra/sample-dra-queues.yaml",), SINGLE_CQ),
    Example("DRA capacity queues", ("examples/dra/sample-dra-capacity-queues.yaml",), SINGLE_CQ),
    Example("DRA counter queues", ("examples/dra/sample-dra-counter-queues.yaml",), SINGLE_CQ),
    Example("MultiKueue", ("examples/multikueue/multikueue-setup.yaml",),
            (*SINGLE_CQ, "AdmissionCheck sample-multikueue",
             "MultiKueueCluster multikueue-test-worker1", "MultiKueueConfig multikueue-test"),
            want_warnings=1),
    Example("MultiKueue with TAS, manager", ("examples/multikueue/tas/manager-setup.yaml",),
            (f"{RF} tas-flavor", f"{CQ} cluster-queue", f"{LQ} default/user-queue",
             "AdmissionCheck multikueue-ac", "MultiKueueCluster worker1",
             "MultiKueueCluster worker2", "MultiKueueConfig multikueue-config"),
            want_dropped=("Topology",), want_warnings=2),
    Example("MultiKueue with TAS, worker", ("examples/multikueue/tas/worker-setup.yaml",),
            (f"{RF} tas-flavor", f"{CQ} worker-cluster-queue", f"{LQ} default/user-queue"),
            want_dropped=("Topology",)),
    Example("provisioning", ("examples/provisioning/provisioning-setup.yaml",),
            (*SINGLE_CQ, "AdmissionCheck sample-prov",
             "ProvisioningRequestConfig prov-test-config")),
    Example("admission check", ("examples/sample-admission-check.yaml",),
            ("AdmissionCheck prov-test", "ProvisioningRequestConfig prov-test-config")),
    Example("HAMi serving", ("examples/serving-workloads/sample-hami.yaml",),
            (f"{RF} hami-flavor", f"{CQ} hami-queue", f"{LQ} kueue-test/user-queue"),
            want_dropped=("Namespace", "Deployment")),
    Example("TAS queues", ("examples/tas/sample-queues.yaml",),
            (f"{RF} tas-flavor", f"{CQ} tas-cluster-queue", f"{LQ} default/tas-user-queue"),
            want_dropped=("Topology",)),
    Example("TAS GPU queues", ("examples/tas/sample-gpu-queues.yaml",),
            (f"{RF} tas-flavor", f"{CQ} tas-cluster-queue", f"{LQ} default/tas-user-queue"),
            want_dropped=("Topology",)),
    # Documentation snippets, applied in the order the page shows them.
    Example("cohorts page", (
        DEFAULT_FLAVOR, "docs/cohort-0.yaml", "docs/cohort-1.yaml",
        "docs/cohort-2.yaml", "docs/cohort-3.yaml", "docs/cohort-4.yaml"),
        (f"{RF} default-flavor", "Cohort hello-cohort", "Cohort root-cohort",
         "Cohort important-org", "Cohort regular-org", f"{CQ} my-cluster-queue")),
    Example("cluster queue: resources", (DEFAULT_FLAVOR, "docs/cluster_queue-0.yaml"),
            (f"{RF} default-flavor", f"{CQ} cluster-queue")),
    Example("cluster queue: resource groups", (
        "prerequisites/flavors-spot-on-demand-pools.yaml", "docs/cluster_queue-1.yaml"),
        (f"{RF} on-demand", f"{RF} pool1", f"{RF} pool2", f"{RF} spot", f"{CQ} cluster-queue")),
    Example("cluster queue: cohort, borrowing and lending limits", (
        DEFAULT_FLAVOR, "docs/cluster_queue-6.yaml", "docs/cluster_queue-7.yaml",
        "docs/cluster_queue-10.yaml", "docs/cluster_queue-11.yaml"),
        (f"{RF} default-flavor", "Cohort team-ab", f"{CQ} team-a-cq", f"{CQ} team-b-cq")),
    Example("cluster queue: preemption, fungibility, stop policy", (
        "docs/cluster_queue-12.yaml", "docs/cluster_queue-13.yaml", "docs/cluster_queue-14.yaml"),
        (f"{CQ} team-a-cq",)),
    Example("wait for pods ready", ("docs/setup_wait_for_pods_ready-1.yaml",), SINGLE_CQ),
    Example("TAS flavor", ("docs/topology_aware_scheduling-0.yaml",), (f"{RF} tas-flavor",)),
    Example("troubleshooting jobs", (DEFAULT_FLAVOR, "docs/troubleshooting_jobs-3.yaml"),
            (f"{RF} default-flavor", f"{CQ} cluster-queue")),
    Example("HAMi page (v1beta1)", (DEFAULT_FLAVOR, "docs/using_hami-1.yaml"),
            (f"{RF} default-flavor", f"{CQ} vgpu-cluster-queue")),
    Example("MultiKueue clusters from a path and a cluster profile",
            ("docs/setup_multikueue-0.yaml", "docs/setup_multikueue-6.yaml"), (),
            want_warnings=2),
    Example("workload priority class", ("docs/workload_priority_class-0.yaml",
                                        "docs/setup_default_workload_priority_class-0.yaml"),
            ("WorkloadPriorityClass default", "WorkloadPriorityClass sample-priority")),
    Example("local queue", ("examples/admin/single-clusterqueue-setup.yaml",
                            "docs/local_queue-0.yaml"),
            (*SINGLE_CQ, f"{LQ} team-a/team-a-queue")),
    Example("admission check page", ("docs/admission_check-0.yaml",), ("AdmissionCheck prov-test",)),
    Example("MultiKueue config order", ("docs/multikueue-0.yaml",),
            ("MultiKueueConfig cost-optimized",)),
    Example("administer cluster quotas", tuple(
        f"docs/administer_cluster_quotas-{i}.yaml" for i in (1, 0, 2, 3, 4, 5, 6, 7, 8, 9, 10)),
        (f"{RF} arm", f"{RF} default-flavor", f"{RF} x86", "Cohort team-ab", f"{CQ} cluster-queue",
         f"{CQ} shared-cq", f"{CQ} team-a-cq", f"{CQ} team-b-cq", f"{LQ} default/user-queue")),
    # kueue.x-k8s.io/v1beta1 files (Kueue v0.14.0).
    Example("v1beta1 single cluster queue", ("v1beta1/examples/admin/single-clusterqueue-setup.yaml",),
            SINGLE_CQ),
    Example("v1beta1 flavors", ("v1beta1/examples/admin/resource-flavor-taints.yaml",
                                "v1beta1/examples/admin/resource-flavor-tolerations.yaml"),
            (f"{RF} spot",)),
    Example("v1beta1 MultiKueue (flat admissionChecks, spec.kubeConfig)",
            ("v1beta1/examples/multikueue/multikueue-setup.yaml",),
            (*SINGLE_CQ, "AdmissionCheck sample-multikueue",
             "MultiKueueCluster multikueue-test-worker1", "MultiKueueConfig multikueue-test"),
            want_warnings=1),
    Example("v1beta1 provisioning", ("v1beta1/examples/provisioning/provisioning-setup.yaml",),
            (*SINGLE_CQ, "AdmissionCheck sample-prov",
             "ProvisioningRequestConfig prov-test-config")),
    Example("v1beta1 admission fair sharing",
            ("v1beta1/examples/admission-fs/admission-fair-sharing-setup.yaml",),
            (f"{RF} default-flavor", f"{CQ} cluster-queue", f"{LQ} default/lq-a",
             f"{LQ} default/lq-b"), want_warnings=1),
    Example("v1beta1 admission check", ("v1beta1/examples/sample-admission-check.yaml",),
            ("AdmissionCheck prov-test", "ProvisioningRequestConfig prov-test-config")),
    Example("v1beta1 TAS queues", ("v1beta1/examples/tas/sample-queues.yaml",),
            (f"{RF} tas-flavor", f"{CQ} tas-cluster-queue", f"{LQ} default/tas-user-queue"),
            want_dropped=("Topology",)),
    Example("v1beta1 cohorts page", (
        DEFAULT_FLAVOR, "v1beta1/docs/cohort-0.yaml",
        "v1beta1/docs/cohort-1.yaml", "v1beta1/docs/cohort-2.yaml", "v1beta1/docs/cohort-3.yaml",
        "v1beta1/docs/cohort-4.yaml"),
        (f"{RF} default-flavor", "Cohort hello-cohort", "Cohort root-cohort",
         "Cohort important-org", "Cohort regular-org", f"{CQ} my-cluster-queue")),
    Example("v1beta1 cluster queue: cohort, limits, Preempt fungibility", (
        DEFAULT_FLAVOR, "v1beta1/docs/cluster_queue-6.yaml", "v1beta1/docs/cluster_queue-7.yaml",
        "v1beta1/docs/cluster_queue-10.yaml", "v1beta1/docs/cluster_queue-11.yaml",
        "v1beta1/docs/cluster_queue-13.yaml"),
        (f"{RF} default-flavor", "Cohort team-ab", f"{CQ} team-a-cq", f"{CQ} team-b-cq")),
]


def label(document: dict[str, Any]) -> str:
    metadata = document["metadata"]
    name = f"{metadata['namespace']}/{metadata['name']}" if "namespace" in metadata \
        else metadata["name"]
    return f"{document['kind']} {name}"


def apply_example(case: Example, domain: Cluster) -> tuple[list[str], int]:
    dropped: list[str] = []
    warnings = 0
    for path in case.files:
        documents, dropped_here = kueue_documents(path)
        dropped += dropped_here
        warnings += len(apply_manifests(documents, cluster=domain).warnings)
    return dropped, warnings


@pytest.fixture
def domain(db: None) -> Cluster:
    return Cluster.objects.create(name="example", role="worker")


@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=lambda case: case.name)
def test_kueue_example_applies_unchanged(case: Example, domain: Cluster) -> None:
    dropped, warnings = apply_example(case, domain)

    exported = [label(d) for d in export_manifests(domain)]
    assert exported == list(case.want_objects)
    assert (tuple(dropped), warnings) == (case.want_dropped, case.want_warnings)


@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=lambda case: case.name)
def test_export_applies_back_to_the_same_objects(case: Example, domain: Cluster) -> None:
    apply_example(case, domain)
    exported = export_manifests(domain)
    empty = Cluster.objects.create(name="round-trip", role="worker")

    into_empty = apply_manifests(yamlio.load_yaml_documents(yamlio.dump_documents(exported)),
                                 cluster=empty)
    again = apply_manifests(exported, cluster=domain)

    assert export_manifests(empty) == exported
    # Workers are clusters, not objects of a domain: they exist already.
    domain_objects = [d for d in exported if d["kind"] != "MultiKueueCluster"]
    assert [o.action for o in into_empty.objects if o.kind != "MultiKueueCluster"] == [
        "created"] * len(domain_objects)
    assert [o.action for o in again.objects] == ["unchanged"] * len(exported)


def test_minimal_cq_example_is_refused_as_kueue_refuses_it(domain: Cluster) -> None:
    # Kueue's ClusterQueue webhook (validateAdmissionCheckOnFlavors, since #10336) refuses
    # onFlavors naming a flavor the queue does not have; admin/minimal-cq.yaml has no
    # resourceGroups at all, so Kueue itself rejects it.
    documents, _ = kueue_documents("examples/admin/minimal-cq.yaml")

    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents, cluster=domain)

    assert caught.value.as_dict()["documents"] == [{
        "index": 0, "kind": "ClusterQueue", "name": "cluster-queue-2", "namespace": None,
        "errors": {"spec.admissionChecksStrategy.admissionChecks[0].onFlavors[0]": [
            'Unsupported value: "default-flavor": the ClusterQueue has no flavors in its '
            "resourceGroups"]},
    }]


@pytest.mark.parametrize("path", ["docs/cluster_queue-8.yaml", "docs/cluster_queue-9.yaml"])
def test_abbreviated_doc_snippets_are_refused_as_kueue_refuses_them(
    path: str, domain: Cluster
) -> None:
    # The page shortens these queues to their cpu quota while covering cpu and memory; Kueue's
    # CEL rule ("flavors must have the same number of resources as the coveredResources")
    # refuses them as written.
    apply_manifests(kueue_documents(DEFAULT_FLAVOR)[0], cluster=domain)
    documents, _ = kueue_documents(path)

    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents, cluster=domain)

    assert caught.value.as_dict()["documents"][0]["errors"] == {
        "spec.resourceGroups[0].flavors[0].resources": [
            "must list exactly the covered resources ['cpu', 'memory'] in the same order, "
            "got ['cpu']"]}


def test_single_clusterqueue_setup_exports_kueue_shape(domain: Cluster) -> None:
    apply_manifests(kueue_documents("examples/admin/single-clusterqueue-setup.yaml")[0],
                    cluster=domain)

    assert export_manifests(domain) == [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "default-flavor"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "cluster-queue"},
         "spec": {
             "namespaceSelector": {},
             "queueingStrategy": "BestEffortFIFO",
             "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                 {"name": "default-flavor", "resources": [
                     {"name": "cpu", "nominalQuota": "9"},
                     {"name": "memory", "nominalQuota": "36Gi"}]}]}],
             "flavorFungibility": {"whenCanBorrow": "MayStopSearch",
                                   "whenCanPreempt": "TryNextFlavor"},
             "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never",
                            "borrowWithinCohort": {"policy": "Never"}},
             "stopPolicy": "None",
         }},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "user-queue", "namespace": "default"},
         "spec": {"clusterQueue": "cluster-queue", "stopPolicy": "None"}},
    ]


def test_multikueue_clusters_from_a_path_and_a_profile_are_kubernetes_workers(
    domain: Cluster,
) -> None:
    warnings = [warning for path in ("docs/setup_multikueue-0.yaml", "docs/setup_multikueue-6.yaml")
                for warning in apply_manifests(kueue_documents(path)[0], cluster=domain).warnings]

    assert list(Cluster.objects.filter(role="worker").exclude(pk=domain.pk).order_by("name")
                .values_list("name", "connection_type")) == [
        ("worker1", "kubernetes"), ("worker1-cluster", "kubernetes")]
    assert warnings == [
        'documents[0] (MultiKueueCluster "worker1"): kueueweb does not read the kubeconfig from '
        'Path "/etc/multikueue/kubeconfigs/worker1.kubeconfig": upload it with PATCH '
        '/api/v1/clusters/worker1/ ({"spec": {"connection": {"kubeconfig": "..."}}})',
        'documents[0] (MultiKueueCluster "worker1-cluster"): kueueweb does not read the '
        'kubeconfig from cluster profile "worker1-cluster": upload it with PATCH '
        '/api/v1/clusters/worker1-cluster/ ({"spec": {"connection": {"kubeconfig": "..."}}})',
    ]


def test_v1beta1_multikueue_setup_is_stored_in_v1beta2_terms(domain: Cluster) -> None:
    apply_manifests(kueue_documents("v1beta1/examples/multikueue/multikueue-setup.yaml")[0],
                    cluster=domain)

    queue = ClusterQueue.objects.get(cluster=domain)
    check = AdmissionCheck.objects.get(cluster=domain)
    worker = Cluster.objects.get(name="multikueue-test-worker1")
    assert queue.admission_checks == [{"name": "sample-multikueue"}]
    assert (check.controller_name, check.parameters) == (
        "kueue.x-k8s.io/multikueue",
        {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "multikueue-test"})
    assert MultiKueueConfig.objects.get(cluster=domain).clusters == ["multikueue-test-worker1"]
    assert (worker.role, worker.connection_type) == ("worker", "kubernetes")


def test_simulated_worker_round_trips_through_its_annotation(domain: Cluster) -> None:
    Cluster.objects.create(name="sim-1", role="worker", connection_type="simulated")
    apply_manifests([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
                      "metadata": {"name": "mk"}, "spec": {"clusters": ["sim-1"]}}],
                    cluster=domain)

    exported = export_manifests(domain)

    assert exported[0] == {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
        "metadata": {"name": "sim-1", "annotations": {"kueueweb.io/connection": "simulated"}},
        "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                  "location": "sim-1"}}},
    }
    assert [o.action for o in apply_manifests(exported, cluster=domain).objects] == [
        "unchanged", "unchanged"]


# --- one transaction, dependency order, created/updated/unchanged ---------------------------


def flavor_doc(name: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": name}}


def cq_doc(name: str, nominal: Any = 9, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu"],
                "flavors": [{"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": nominal}]}]}], **spec}}


def lq_doc(name: str, cluster_queue: str, namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue}}


@pytest.mark.django_db
def test_bad_third_document_leaves_nothing_of_the_first_two(manager: Cluster) -> None:
    documents = [flavor_doc("default"), cq_doc("team-a"), cq_doc("team-b", nominal="-3")]

    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents)

    assert caught.value.as_dict() == {
        "detail": 'documents[2] (ClusterQueue "team-b"): '
                  "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: '-3' must not be "
                  "negative",
        "documents": [{
            "index": 2, "kind": "ClusterQueue", "name": "team-b", "namespace": None,
            "errors": {"spec.resourceGroups[0].flavors[0].resources[0].nominalQuota":
                       ["'-3' must not be negative"]},
        }],
    }
    assert (ResourceFlavor.objects.count(), ClusterQueue.objects.count()) == (0, 0)


@pytest.mark.django_db
def test_a_failing_reference_rolls_back_written_objects(manager: Cluster) -> None:
    # The LocalQueue's error is found before anything is written; a write-time failure would
    # roll back too (one transaction).
    documents = [flavor_doc("default"), cq_doc("team-a"), lq_doc("lq", "team-b")]

    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents)

    assert [(d.index, d.kind, d.name) for d in caught.value.documents] == [(2, "LocalQueue", "lq")]
    assert (ResourceFlavor.objects.count(), ClusterQueue.objects.count(),
            LocalQueue.objects.count()) == (0, 0, 0)


@pytest.mark.django_db
def test_every_bad_document_is_reported(manager: Cluster) -> None:
    documents = [flavor_doc("Bad"), flavor_doc("ok"), {"kind": "Cohort"}]

    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents)

    assert [(d.index, d.kind, d.name, list(d.as_dict()["errors"]))
            for d in caught.value.documents] == [
        (0, "ResourceFlavor", "Bad", ["metadata.name"]),
        (2, "Cohort", None, ["apiVersion"]),
    ]


@pytest.mark.django_db
def test_kinds_apply_in_dependency_order_whatever_the_document_order(manager: Cluster) -> None:
    documents = [
        lq_doc("lq", "team-a"),
        cq_doc("team-a", cohortName="child"),
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "child"},
         "spec": {"parentName": "root"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": "root"}},
        flavor_doc("default"),
    ]

    result = apply_manifests(documents)

    assert [(o.kind, o.name, o.action) for o in result.objects] == [
        ("ResourceFlavor", "default", "created"),
        ("Cohort", "root", "created"),
        ("Cohort", "child", "created"),
        ("ClusterQueue", "team-a", "created"),
        ("LocalQueue", "lq", "created"),
    ]
    assert Cohort.objects.get(name="child").parent == Cohort.objects.get(name="root")


@pytest.mark.django_db
def test_reapplying_reports_unchanged_and_does_not_write(manager: Cluster) -> None:
    documents = [flavor_doc("default"), cq_doc("team-a"), lq_doc("lq", "team-a")]
    apply_manifests(documents)
    versions = list(ClusterQueue.objects.values_list("resource_version", flat=True))

    result = apply_manifests(documents)

    assert result.as_dict() == {
        "cluster": "manager", "created": [], "updated": [], "warnings": [],
        "unchanged": [{"kind": "ResourceFlavor", "name": "default"},
                      {"kind": "ClusterQueue", "name": "team-a"},
                      {"kind": "LocalQueue", "name": "lq", "namespace": "team-a"}],
    }
    assert list(ClusterQueue.objects.values_list("resource_version", flat=True)) == versions


@pytest.mark.django_db
def test_changed_quota_is_updated_in_place(manager: Cluster) -> None:
    apply_manifests([flavor_doc("default"), cq_doc("team-a")])
    queue = ClusterQueue.objects.get()

    result = apply_manifests([flavor_doc("default"), cq_doc("team-a", nominal="12")])

    updated = ClusterQueue.objects.get()
    assert [(o.kind, o.action) for o in result.objects] == [
        ("ResourceFlavor", "unchanged"), ("ClusterQueue", "updated")]
    assert (updated.pk, updated.uid, updated.resource_version) == (
        queue.pk, queue.uid, queue.resource_version + 1)
    assert list(updated.quotas.values_list("nominal_quota", flat=True)) == ["12"]


@pytest.mark.django_db
def test_apply_into_another_cluster_by_name(manager: Cluster) -> None:
    worker = Cluster.objects.create(name="worker-1")

    apply_manifests([flavor_doc("default")], cluster="worker-1")

    assert list(ResourceFlavor.objects.values_list("cluster__name", flat=True)) == ["worker-1"]
    assert worker.name == "worker-1"


@pytest.mark.django_db
def test_apply_into_an_unknown_cluster_is_refused(manager: Cluster) -> None:
    with pytest.raises(UnknownCluster, match='cluster "nowhere" does not exist'):
        apply_manifests([flavor_doc("default")], cluster="nowhere")


@pytest.mark.django_db
def test_same_names_live_in_different_domains(manager: Cluster) -> None:
    Cluster.objects.create(name="worker-1")

    apply_manifests([flavor_doc("default"), cq_doc("team-a")])
    apply_manifests([flavor_doc("default"), cq_doc("team-a", nominal=4)], cluster="worker-1")

    assert sorted(ClusterQueue.objects.values_list("cluster__name", "quotas__nominal_quota")) == [
        ("manager", "9"), ("worker-1", "4")]


@pytest.mark.django_db
def test_apply_accepts_plain_python_dicts_for_priority_classes(manager: Cluster) -> None:
    apply_manifests([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                      "metadata": {"name": "high"}, "value": 1000, "description": "High"}])

    assert list(WorkloadPriorityClass.objects.values_list("name", "value", "description")) == [
        ("high", 1000, "High")]


# --- YAML safety ------------------------------------------------------------------------------

BILLION_LAUGHS = """\
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata:
  name: lol
  annotations:
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_billion_laughs_is_refused_fast() -> None:
    started = time.monotonic()

    with pytest.raises(yamlio.ManifestSyntaxError) as caught:
        yamlio.load_yaml_documents(BILLION_LAUGHS, max_bytes=1 << 20)

    assert str(caught.value) == ("YAML anchors and aliases are not accepted (line 6, column 8): "
                                 "write the value out in full")
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("[" * 200_000 + "]" * 200_000,
                     "nesting deeper than 32 levels (line 1, column 33): no Kueue object is that "
                     "deep", id="flow"),
        pytest.param("".join("  " * i + "a:\n" for i in range(500)) + "  " * 500 + "b\n",
                     "nesting deeper than 32 levels (line 33, column 65): no Kueue object is that "
                     "deep", id="block"),
    ],
)
def test_deep_nesting_is_refused_fast(text: str, want: str) -> None:
    started = time.monotonic()

    with pytest.raises(yamlio.ManifestSyntaxError) as caught:
        yamlio.load_yaml_documents(text, max_bytes=1 << 20)

    assert str(caught.value) == want
    assert time.monotonic() - started < 2.0


def test_deep_json_is_refused() -> None:
    with pytest.raises(yamlio.ManifestSyntaxError) as caught:
        yamlio.load_json_documents("[" * 100_000 + "]" * 100_000, max_bytes=1 << 20)

    assert str(caught.value) == "nesting deeper than 32 levels"


@override_settings(KUEUEWEB={"MAX_MANIFEST_BYTES": 100})
def test_oversized_input_is_refused_before_parsing() -> None:
    with pytest.raises(yamlio.ManifestTooLarge) as caught:
        yamlio.load_yaml_documents("a: " + "x" * 200)

    assert str(caught.value) == ("manifests are 203 bytes; at most 100 bytes are accepted "
                                 "(KUEUEWEB_MAX_MANIFEST_BYTES)")


def test_yaml_tags_for_python_objects_are_refused() -> None:
    with pytest.raises(yamlio.ManifestSyntaxError, match="not valid YAML"):
        yamlio.load_yaml_documents("a: !!python/object/apply:os.system ['true']\n")


def test_list_documents_are_expanded_and_empty_documents_skipped() -> None:
    text = "---\n---\napiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n---\nkind: C\n"

    assert yamlio.load_yaml_documents(text) == [{"kind": "A"}, {"kind": "B"}, {"kind": "C"}]


def test_timestamps_stay_strings() -> None:
    assert yamlio.load_yaml_documents("description: 2026-01-01\n") == [
        {"description": "2026-01-01"}]


# --- commands ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_apply_command_applies_files_in_one_transaction(manager: Cluster, tmp_path: Path) -> None:
    first = tmp_path / "flavors.yaml"
    second = tmp_path / "queues.yaml"
    first.write_text(yamlio.dump_documents([flavor_doc("default")]))
    second.write_text(yamlio.dump_documents([cq_doc("team-a"), lq_doc("lq", "team-a")]))
    out, err = io.StringIO(), io.StringIO()

    call_command("apply", "-f", str(second), "-f", str(first), stdout=out, stderr=err)

    assert out.getvalue().splitlines() == [
        "resourceflavor.kueue.x-k8s.io/default created",
        "clusterqueue.kueue.x-k8s.io/team-a created",
        "localqueue.kueue.x-k8s.io/lq (namespace team-a) created",
    ]
    assert err.getvalue() == ""


@pytest.mark.django_db
def test_apply_command_reads_stdin(manager: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(yamlio.dump_documents([flavor_doc("x")]).encode()))
    monkeypatch.setattr("sys.stdin", stdin)
    out = io.StringIO()

    call_command("apply", "-f", "-", "--cluster", "manager", stdout=out)

    assert out.getvalue() == "resourceflavor.kueue.x-k8s.io/x created\n"


@pytest.mark.django_db
def test_apply_command_names_file_and_document_of_an_error(
    manager: Cluster, tmp_path: Path
) -> None:
    good = tmp_path / "good.yaml"
    bad = tmp_path / "bad.yaml"
    good.write_text(yamlio.dump_documents([flavor_doc("default")]))
    bad.write_text(yamlio.dump_documents([cq_doc("ok"), cq_doc("team-a", nominal="lots")]))

    with pytest.raises(CommandError) as caught:
        call_command("apply", "-f", str(good), "-f", str(bad))

    assert str(caught.value) == (
        "nothing was applied:\n"
        'documents[2] (ClusterQueue "team-a"): spec.resourceGroups[0].flavors[0].resources[0]'
        ".nominalQuota: 'lots' is not a valid quantity: expected a number with an optional "
        f"suffix such as 500m, 2, 1.5, 4Gi or 1e3 [{bad}, document 1]"
    )
    assert not ResourceFlavor.objects.exists()


@pytest.mark.django_db
def test_apply_command_refuses_aliases(manager: Cluster, tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(BILLION_LAUGHS)

    with pytest.raises(CommandError) as caught:
        call_command("apply", "-f", str(path))

    assert str(caught.value) == (f"{path}: YAML anchors and aliases are not accepted (line 6, "
                                 "column 8): write the value out in full")


@pytest.mark.django_db
def test_export_command_prints_yaml_that_applies_back(manager: Cluster) -> None:
    apply_manifests([flavor_doc("default"), cq_doc("team-a"), lq_doc("lq", "team-a")])
    out = io.StringIO()

    call_command("export", stdout=out)

    documents = yamlio.load_yaml_documents(out.getvalue())
    # The manager is a simulated cluster: its nodes (a fresh install's four) come last.
    assert [label(d) for d in documents] == [
        "ResourceFlavor default", "ClusterQueue team-a", "LocalQueue team-a/lq",
        "Node node-1", "Node node-2", "Node node-3", "Node node-4"]
    assert documents == export_manifests(manager)


@pytest.mark.django_db
def test_export_command_refuses_unknown_cluster(manager: Cluster) -> None:
    with pytest.raises(CommandError, match='cluster "nowhere" does not exist'):
        call_command("export", "--cluster", "nowhere")


@pytest.mark.django_db
def test_changed_quota_requeues_parked_workloads(
    manager: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    apply_manifests([flavor_doc("default"), cq_doc("team-a"), lq_doc("lq", "team-a")])
    parked = Workload.objects.create(
        cluster=manager, namespace="team-a", name="big", queue_name="lq", pod_sets=[],
        local_queue=LocalQueue.objects.get(), queue_state="Inadmissible")
    generation = ClusterQueue.objects.get().allocatable_generation

    with django_capture_on_commit_callbacks() as callbacks:
        unchanged = apply_manifests([cq_doc("team-a")])
    requeued_by_unchanged = Workload.objects.get(pk=parked.pk).queue_state
    with django_capture_on_commit_callbacks() as more_callbacks:
        apply_manifests([cq_doc("team-a", nominal=20)])

    assert (unchanged.unchanged[0].name, requeued_by_unchanged, len(callbacks)) == (
        "team-a", "Inadmissible", 0)
    # The queue is due for a requeue, which the domain's next cycle runs under its lease.
    from django.utils import timezone

    from scheduling.scheduler import admission

    assert ClusterQueue.objects.get().requeue_due_at <= timezone.now()
    admission.requeue_due_queues(manager.pk, now=timezone.now())
    assert Workload.objects.get(pk=parked.pk).queue_state == "Active"
    assert ClusterQueue.objects.get().allocatable_generation == generation + 1
    # After commit: the admission cycle is requested and watching browsers are told.
    assert len(more_callbacks) == 2
