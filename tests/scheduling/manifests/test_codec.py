"""The Kueue manifest codec: each of Kueue's API rules, with its field path and message;
v1beta1 spellings read as v1beta2; the normalised spec; rules that need the domain."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig
from scheduling.manifests.apply import KINDS, ApplyError, apply_manifests
from scheduling.manifests.codec import ManifestInvalid, read_manifest
from scheduling.models import ClusterQueue, Cohort, LocalQueue, ResourceFlavor

V1 = "kueue.x-k8s.io/v1beta1"
V2 = "kueue.x-k8s.io/v1beta2"


def obj(kind: str, name: str, spec: dict[str, Any] | None = None, *,
        version: str = V2, namespace: str | None = None, **top: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    document: dict[str, Any] = {"apiVersion": version, "kind": kind, "metadata": metadata}
    if spec is not None:
        document["spec"] = spec
    document.update(top)
    return document


def quota(name: str, nominal: Any, **limits: Any) -> dict[str, Any]:
    return {"name": name, "nominalQuota": nominal, **limits}


def group(covered: list[str], *flavors: tuple[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {"coveredResources": covered,
            "flavors": [{"name": name, "resources": resources} for name, resources in flavors]}


def cq(name: str = "cq", *, version: str = V2, **spec: Any) -> dict[str, Any]:
    return obj("ClusterQueue", name, spec, version=version)


CPU9 = group(["cpu"], ("default", [quota("cpu", 9)]))


def errors_of(document: Any) -> dict[str, list[str]]:
    with pytest.raises(ManifestInvalid) as caught:
        read_manifest(document, KINDS, index=0)
    errors: dict[str, list[str]] = caught.value.as_dict()["errors"]
    return errors


# --- one rule per case: the exact path and message ------------------------------------------


@dataclass(frozen=True)
class RuleCase:
    name: str
    document: dict[str, Any]
    want_errors: dict[str, list[str]] = field(default_factory=dict)


RULES = [
    RuleCase(
        "name is a DNS-1123 subdomain",
        obj("ResourceFlavor", "Bad_Name"),
        {"metadata.name": ["'Bad_Name' is not a valid name: a lowercase RFC 1123 subdomain must "
                           "consist of lower case alphanumeric characters, '-' or '.', and must "
                           "start and end with an alphanumeric character"]},
    ),
    RuleCase("name is required", {"apiVersion": V2, "kind": "Cohort", "metadata": {}},
             {"metadata.name": ["Required value"]}),
    RuleCase(
        "namespace is a DNS-1123 label",
        obj("LocalQueue", "lq", {"clusterQueue": "cq"}, namespace="Team_A"),
        {"metadata.namespace": ["'Team_A' is not a valid namespace: a lowercase RFC 1123 label "
                                "must consist of lower case alphanumeric characters or '-', start "
                                "and end with an alphanumeric character, and be at most 63 "
                                "characters"]},
    ),
    RuleCase(
        "unknown apiVersion",
        obj("ClusterQueue", "cq", {}, version="kueue.x-k8s.io/v1alpha1"),
        {"apiVersion": ['Unsupported value: "kueue.x-k8s.io/v1alpha1": supported values: '
                        '"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"']},
    ),
    RuleCase(
        "unknown kind",
        obj("Topology", "default", {"levels": []}),
        {"kind": ['Unsupported value: "Topology": kueueweb applies "ResourceFlavor", "Cohort", '
                  '"ClusterQueue", "LocalQueue", "WorkloadPriorityClass", "AdmissionCheck", '
                  '"MultiKueueCluster", "MultiKueueConfig", "ProvisioningRequestConfig", '
                  '"Node", "Workload.scheduling.k8s.io", "PriorityClass", "LimitRange", '
                  '"RuntimeClass"']},
    ),
    RuleCase("a Kubernetes kind of another group", {"apiVersion": "batch/v1", "kind": "Job",
                                                     "metadata": {"name": "j"}},
             {"apiVersion": ['Unsupported value: "batch/v1": supported values: '
                             '"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"']}),
    RuleCase("v1beta1's cohort under v1beta2", cq(cohort="team"),
             {"spec.cohort": ['unknown field "cohort" (v1beta2 spells it "cohortName")']}),
    RuleCase("v1beta2's cohortName under v1beta1", cq(version=V1, cohortName="team"),
             {"spec.cohortName": ['unknown field "cohortName" (v1beta1 spells it "cohort")']}),
    RuleCase("a typo in a quota", cq(resourceGroups=[group(["cpu"], ("default", [
        {"name": "cpu", "nominalquota": 9}]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].nominalQuota": ["is required"],
         "spec.resourceGroups[0].flavors[0].resources[0].nominalquota":
             ['unknown field "nominalquota"']}),
    RuleCase(
        "malformed quantity",
        cq(resourceGroups=[group(["cpu"], ("default", [quota("cpu", "9x")]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].nominalQuota": [
            "'9x' is not a valid quantity: expected a number with an optional suffix such as "
            "500m, 2, 1.5, 4Gi or 1e3"]},
    ),
    RuleCase(
        "negative quantity",
        cq(resourceGroups=[group(["cpu"], ("default", [quota("cpu", "-1")]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].nominalQuota":
            ["'-1' must not be negative"]},
    ),
    RuleCase(
        "a boolean is no quantity",
        cq(resourceGroups=[group(["cpu"], ("default", [quota("cpu", True)]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].nominalQuota":
            ["quantities must be strings or numbers, not True"]},
    ),
    RuleCase(
        "a resource is covered by one resource group only",
        cq(resourceGroups=[CPU9, group(["cpu"], ("spot", [quota("cpu", 1)]))]),
        {"spec.resourceGroups[1].coveredResources[0]":
            ["resource 'cpu' is already covered by resource group 0"]},
    ),
    RuleCase(
        "a flavor is in one resource group only",
        cq(resourceGroups=[CPU9, group(["memory"], ("default", [quota("memory", "1Gi")]))]),
        {"spec.resourceGroups[1].flavors[0].name":
            ["flavor 'default' appears more than once in resourceGroups"]},
    ),
    RuleCase(
        "a flavor lists exactly the covered resources in order",
        cq(resourceGroups=[group(["cpu", "memory"], ("default", [quota("cpu", 9)]))]),
        {"spec.resourceGroups[0].flavors[0].resources": [
            "must list exactly the covered resources ['cpu', 'memory'] in the same order, "
            "got ['cpu']"]},
    ),
    RuleCase(
        "borrowingLimit needs a cohort",
        cq(resourceGroups=[group(["cpu"], ("default", [quota("cpu", 9, borrowingLimit=1)]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit":
            ["must be nil when cohort is empty"]},
    ),
    RuleCase(
        "lendingLimit needs a cohort",
        cq(resourceGroups=[group(["cpu"], ("default", [quota("cpu", 9, lendingLimit=1)]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].lendingLimit":
            ["must be nil when cohort is empty"]},
    ),
    RuleCase(
        "lendingLimit at most nominalQuota",
        cq(cohortName="team", resourceGroups=[
            group(["cpu"], ("default", [quota("cpu", 9, lendingLimit=10)]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].lendingLimit":
            ["must be less than or equal to the nominalQuota"]},
    ),
    RuleCase(
        "a negative borrowingLimit",
        cq(cohortName="team", resourceGroups=[
            group(["cpu"], ("default", [quota("cpu", 9, borrowingLimit="-2")]))]),
        {"spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit":
            ["'-2' must not be negative"]},
    ),
    RuleCase(
        "a cohort's limits need a parent",
        obj("Cohort", "root", {"resourceGroups": [
            group(["cpu"], ("default", [quota("cpu", 9, borrowingLimit=1)]))]}),
        {"spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit":
            ["must be nil when parent is empty"]},
    ),
    RuleCase(
        "fungibility preference needs TryNextFlavor twice",
        cq(flavorFungibility={"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "MayStopSearch",
                              "preference": "PreemptionOverBorrowing"}),
        {"spec.flavorFungibility.preference":
            ["may only be set when whenCanBorrow and whenCanPreempt are TryNextFlavor"]},
    ),
    RuleCase(
        "fungibility preference with whenCanBorrow defaulted",
        cq(flavorFungibility={"whenCanPreempt": "TryNextFlavor",
                              "preference": "BorrowingOverPreemption"}),
        {"spec.flavorFungibility.preference":
            ["may only be set when whenCanBorrow and whenCanPreempt are TryNextFlavor"]},
    ),
    RuleCase(
        "v1beta1's Borrow is not a v1beta2 value",
        cq(flavorFungibility={"whenCanBorrow": "Borrow"}),
        {"spec.flavorFungibility.whenCanBorrow":
            ['Unsupported value: "Borrow": supported values: "MayStopSearch", "TryNextFlavor"']},
    ),
    RuleCase(
        "preemption: borrowWithinCohort needs reclaimWithinCohort",
        cq(preemption={"borrowWithinCohort": {"policy": "LowerPriority"}}),
        {"spec.preemption.borrowWithinCohort.policy":
            ["reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never"]},
    ),
    RuleCase(
        "preemption enum",
        cq(preemption={"withinClusterQueue": "Always"}),
        {"spec.preemption.withinClusterQueue": [
            'Unsupported value: "Always": supported values: "Never", "LowerPriority", '
            '"LowerOrNewerEqualPriority"']},
    ),
    RuleCase("fair-sharing weight above 1e-9", cq(fairSharing={"weight": "1e-10"}),
             {"spec.fairSharing.weight": ["must be 0 or greater than 1e-9"]}),
    RuleCase("fair-sharing weight not negative",
             obj("Cohort", "c", {"fairSharing": {"weight": "-1"}}),
             {"spec.fairSharing.weight": ["'-1' must not be negative"]}),
    RuleCase("queueingStrategy enum", cq(queueingStrategy="FIFO"),
             {"spec.queueingStrategy": ['Unsupported value: "FIFO": supported values: '
                                        '"BestEffortFIFO", "StrictFIFO"']}),
    RuleCase("stopPolicy enum", obj("LocalQueue", "lq", {"clusterQueue": "cq",
                                                         "stopPolicy": "Drain"}),
             {"spec.stopPolicy": ['Unsupported value: "Drain": supported values: "None", '
                                  '"Hold", "HoldAndDrain"']}),
    RuleCase(
        "namespaceSelector In needs values",
        cq(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "In"}]}),
        {"spec.namespaceSelector.matchExpressions[0].values":
            ["must be specified when `operator` is 'In' or 'NotIn'"]},
    ),
    RuleCase(
        "namespaceSelector Exists takes no values",
        cq(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Exists",
                                                    "values": ["a"]}]}),
        {"spec.namespaceSelector.matchExpressions[0].values":
            ["may not be specified when `operator` is 'Exists' or 'DoesNotExist'"]},
    ),
    RuleCase(
        "onFlavors names the queue's flavors",
        cq(resourceGroups=[CPU9], admissionChecksStrategy={"admissionChecks": [
            {"name": "prov", "onFlavors": ["spot"]}]}),
        {"spec.admissionChecksStrategy.admissionChecks[0].onFlavors[0]":
            ['Unsupported value: "spot": supported values: "default"']},
    ),
    RuleCase(
        "v1beta1: admissionChecks or admissionChecksStrategy",
        cq(version=V1, admissionChecks=["a"],
           admissionChecksStrategy={"admissionChecks": [{"name": "b"}]}),
        {"spec.admissionChecks": ["may not be set together with spec.admissionChecksStrategy"]},
    ),
    RuleCase("an admission check once",
             cq(admissionChecksStrategy={"admissionChecks": [{"name": "a"}, {"name": "a"}]}),
             {"spec.admissionChecksStrategy.admissionChecks[1].name": ['Duplicate value: "a"']}),
    RuleCase("priority value required", obj("WorkloadPriorityClass", "high"),
             {"value": ["Required value"]}),
    RuleCase("priority value is int32", obj("WorkloadPriorityClass", "high", value=2**31),
             {"value": ["must be a 32-bit integer"]}),
    RuleCase("priority classes have no spec",
             obj("WorkloadPriorityClass", "high", {"value": 1}, value=1),
             {"spec": ['unknown field "spec"']}),
    RuleCase(
        "topologyName needs a node label",
        obj("ResourceFlavor", "tas", {"topologyName": "default"}),
        {"spec": ["at least one nodeLabel is required when topology is set"]},
    ),
    RuleCase(
        "taint effect",
        obj("ResourceFlavor", "spot", {"nodeTaints": [{"key": "spot", "effect": "Evict"}]}),
        {"spec.nodeTaints[0].effect": ['Unsupported value: "Evict": supported values: '
                                       '"NoSchedule", "PreferNoSchedule", "NoExecute"']},
    ),
    RuleCase(
        "taints unique by key and effect",
        obj("ResourceFlavor", "spot", {"nodeTaints": [
            {"key": "spot", "value": "a", "effect": "NoSchedule"},
            {"key": "spot", "value": "b", "effect": "NoSchedule"}]}),
        {"spec.nodeTaints[1]": ["Duplicate value: taints must be unique by key and effect pair"]},
    ),
    RuleCase(
        "toleration Exists takes no value",
        obj("ResourceFlavor", "spot", {"tolerations": [
            {"key": "spot", "operator": "Exists", "value": "true"}]}),
        {"spec.tolerations[0].value": ["a value must be empty when 'operator' is 'Exists'"]},
    ),
    RuleCase(
        "toleration without key matches with Exists only",
        obj("ResourceFlavor", "spot", {"tolerations": [{"operator": "Equal", "value": "x"}]}),
        {"spec.tolerations[0].operator": [
            "operator must be Exists when 'key' is empty, which means 'match all values and all "
            "keys'"]},
    ),
    RuleCase(
        "at most 8 node labels",
        obj("ResourceFlavor", "big", {"nodeLabels": {f"k{i}": "v" for i in range(9)}}),
        {"spec.nodeLabels": ["must have at most 8 items"]},
    ),
    RuleCase("a LocalQueue names its ClusterQueue", obj("LocalQueue", "lq", {}, namespace="a"),
             {"spec.clusterQueue": ["Required value"]}),
    RuleCase("controllerName required", obj("AdmissionCheck", "ac", {}),
             {"spec.controllerName": ["Required value"]}),
    RuleCase("MultiKueueConfig needs a cluster", obj("MultiKueueConfig", "mk", {"clusters": []}),
             {"spec.clusters": ["must have at least 1 item"]}),
    RuleCase("MultiKueueConfig clusters unique",
             obj("MultiKueueConfig", "mk", {"clusters": ["w1", "w1"]}),
             {"spec.clusters[1]": ['Duplicate value: "w1"']}),
    RuleCase(
        "MultiKueueCluster: one cluster source",
        obj("MultiKueueCluster", "w1", {"clusterSource": {
            "kubeConfig": {"location": "s"}, "clusterProfileRef": {"name": "p"}}}),
        {"spec.clusterSource": ["exactly one of kubeConfig or clusterProfileRef must be set"]},
    ),
    RuleCase(
        "MultiKueueCluster location type",
        obj("MultiKueueCluster", "w1", {"clusterSource": {
            "kubeConfig": {"location": "s", "locationType": "ConfigMap"}}}),
        {"spec.clusterSource.kubeConfig.locationType": [
            'Unsupported value: "ConfigMap": supported values: "Secret", "Path"']},
    ),
    RuleCase("a manifest is an object", ["not", "an", "object"],  # type: ignore[arg-type]
             {"non_field_errors": ["a manifest must be an object, not a list"]}),
]


@pytest.mark.parametrize("case", RULES, ids=lambda case: case.name)
def test_refuses_what_kueue_refuses(case: RuleCase) -> None:
    assert errors_of(case.document) == case.want_errors


def test_error_names_document_kind_and_name() -> None:
    with pytest.raises(ManifestInvalid) as caught:
        read_manifest(cq("team-a", queueingStrategy="FIFO"), KINDS, index=2)

    assert caught.value.as_dict() == {
        "index": 2, "kind": "ClusterQueue", "name": "team-a", "namespace": None,
        "errors": {"spec.queueingStrategy": [
            'Unsupported value: "FIFO": supported values: "BestEffortFIFO", "StrictFIFO"']},
    }
    assert str(caught.value) == (
        'documents[2] (ClusterQueue "team-a"): spec.queueingStrategy: Unsupported value: "FIFO":'
        ' supported values: "BestEffortFIFO", "StrictFIFO"'
    )


def test_cohort_lending_limit_may_exceed_nominal() -> None:
    # Kueue's cohort webhook does not compare lendingLimit with nominalQuota.
    manifest = read_manifest(obj("Cohort", "team", {"parentName": "org", "resourceGroups": [
        group(["cpu"], ("default", [quota("cpu", 1, lendingLimit=5)]))]}), KINDS)

    assert manifest.spec["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "cpu", "nominalQuota": "1", "lendingLimit": "5"}


def test_fair_sharing_weight_zero_is_allowed() -> None:
    manifest = read_manifest(cq(fairSharing={"weight": 0}), KINDS)

    assert manifest.spec["fairSharing"] == {"weight": "0"}


# --- normalisation --------------------------------------------------------------------------


def test_cluster_queue_spec_is_defaulted_as_kueue_defaults_it() -> None:
    manifest = read_manifest(cq("cq", namespaceSelector={}, resourceGroups=[
        group(["cpu", "memory"], ("default", [quota("cpu", 9), quota("memory", "36Gi")]))]),
        KINDS)

    assert manifest.spec == {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
            {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "9"},
                                              {"name": "memory", "nominalQuota": "36Gi"}]}]}],
        "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never",
                       "borrowWithinCohort": {"policy": "Never"}},
        "stopPolicy": "None",
    }


@pytest.mark.parametrize(
    ("selector", "want_spec"),
    [
        pytest.param({}, {"namespaceSelector": {}}, id="empty selector selects every namespace"),
        pytest.param(None, {}, id="null selects no namespace"),
        pytest.param({"matchLabels": {"team": "a"}}, {"namespaceSelector": {"matchLabels":
                                                                            {"team": "a"}}},
                     id="labels kept as given"),
    ],
)
def test_namespace_selector_is_stored_as_given(selector: Any, want_spec: dict[str, Any]) -> None:
    spec = read_manifest(cq(namespaceSelector=selector), KINDS).spec

    assert {k: v for k, v in spec.items() if k == "namespaceSelector"} == want_spec


def test_absent_namespace_selector_is_no_namespace() -> None:
    assert "namespaceSelector" not in read_manifest(cq(), KINDS).spec


def test_v1beta1_spellings_read_as_v1beta2() -> None:
    manifest = read_manifest(cq(
        version=V1, cohort="team-ab", admissionChecks=["prov"],
        flavorFungibility={"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"},
    ), KINDS)

    assert manifest.spec["cohortName"] == "team-ab"
    assert manifest.spec["admissionChecksStrategy"] == {"admissionChecks": [{"name": "prov"}]}
    assert manifest.spec["flavorFungibility"] == {"whenCanBorrow": "MayStopSearch",
                                                  "whenCanPreempt": "MayStopSearch"}


@pytest.mark.parametrize("field_name", ["parent", "parentName"])
def test_v1beta1_cohort_parent(field_name: str) -> None:
    manifest = read_manifest(obj("Cohort", "team", {field_name: "org"}, version=V1), KINDS)

    assert manifest.spec == {"parentName": "org"}


def test_v1beta1_multikueue_cluster_kubeconfig() -> None:
    manifest = read_manifest(obj("MultiKueueCluster", "w1", {"kubeConfig": {
        "locationType": "Secret", "location": "worker1-secret"}}, version=V1), KINDS)

    assert manifest.spec == {"clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                              "location": "worker1-secret"}}}


def test_server_metadata_and_status_are_ignored() -> None:
    document = cq("cq")
    document["metadata"].update({"uid": "x", "resourceVersion": "7", "generation": 2,
                                 "creationTimestamp": "2026-01-01T00:00:00Z",
                                 "annotations": {"kubectl.kubernetes.io/last-applied-"
                                                 "configuration": "{}"}})
    document["status"] = {"pendingWorkloads": 3}

    manifest = read_manifest(document, KINDS)

    assert (manifest.name, manifest.warnings) == ("cq", [])


def test_unsupported_kueue_fields_are_ignored_with_a_warning() -> None:
    manifest = read_manifest(cq(admissionScope={"admissionMode": "UsageBasedAdmissionFairSharing"}),
                             KINDS, index=1)

    assert manifest.warnings == [
        "spec.admissionScope is not supported by kueueweb (Admission Fair Sharing) and was "
        "ignored"]
    assert "admissionScope" not in manifest.spec


def test_local_queue_namespace_defaults_like_kubectl() -> None:
    manifest = read_manifest(obj("LocalQueue", "lq", {"clusterQueue": "cq"}), KINDS)

    assert (manifest.namespace, manifest.spec) == ("default", {"clusterQueue": "cq",
                                                               "stopPolicy": "None"})


# --- rules that need the domain ---------------------------------------------------------------


def flavor(name: str) -> dict[str, Any]:
    return obj("ResourceFlavor", name)


def apply_error(documents: list[dict[str, Any]], cluster: Cluster | None = None) -> ApplyError:
    with pytest.raises(ApplyError) as caught:
        apply_manifests(documents, cluster=cluster)
    return caught.value


@pytest.mark.django_db
def test_flavor_must_exist_in_the_domain(manager: Cluster) -> None:
    worker = Cluster.objects.create(name="worker-1")
    apply_manifests([flavor("default")], cluster=worker)

    error = apply_error([cq(resourceGroups=[CPU9])])

    assert [document.as_dict() for document in error.documents] == [{
        "index": 0, "kind": "ClusterQueue", "name": "cq", "namespace": None,
        "errors": {"spec.resourceGroups[0].flavors[0].name":
                   ['ResourceFlavor "default" does not exist in cluster "manager"']},
    }]
    assert not ClusterQueue.objects.exists()


@pytest.mark.django_db
def test_flavor_defined_later_in_the_same_apply_is_found(manager: Cluster) -> None:
    result = apply_manifests([cq(resourceGroups=[CPU9]), flavor("default")])

    assert [(o.kind, o.action) for o in result.objects] == [
        ("ResourceFlavor", "created"), ("ClusterQueue", "created")]


@pytest.mark.django_db
def test_cohort_cycle_is_refused(manager: Cluster) -> None:
    apply_manifests([obj("Cohort", "a", {"parentName": "b"})])  # b is created implicitly

    error = apply_error([obj("Cohort", "b", {"parentName": "a"})])

    assert error.documents[0].as_dict()["errors"] == {"spec.parentName":
                                                      ["cohort cycle: b → a → b"]}
    assert Cohort.objects.get(name="b").parent is None


@pytest.mark.django_db
def test_cohort_cycle_within_one_apply_is_refused(manager: Cluster) -> None:
    error = apply_error([obj("Cohort", "a", {"parentName": "b"}),
                         obj("Cohort", "b", {"parentName": "c"}),
                         obj("Cohort", "c", {"parentName": "a"})])

    assert [d.as_dict()["errors"] for d in error.documents] == [
        {"spec.parentName": ["cohort cycle: a → b → c → a"]},
        {"spec.parentName": ["cohort cycle: b → c → a → b"]},
        {"spec.parentName": ["cohort cycle: c → a → b → c"]},
    ]
    assert not Cohort.objects.exists()


@pytest.mark.django_db
def test_cohort_may_not_be_its_own_parent(manager: Cluster) -> None:
    error = apply_error([obj("Cohort", "a", {"parentName": "a"})])

    assert error.documents[0].as_dict()["errors"] == {"spec.parentName":
                                                      ["cohort cycle: a → a"]}


@pytest.mark.django_db
def test_local_queue_cluster_queue_must_be_in_its_own_domain(manager: Cluster) -> None:
    worker = Cluster.objects.create(name="worker-1")
    apply_manifests([cq("cq")], cluster=worker)

    error = apply_error([obj("LocalQueue", "lq", {"clusterQueue": "cq"}, namespace="team-a")])

    assert error.documents[0].as_dict()["errors"] == {"spec.clusterQueue": [
        'ClusterQueue "cq" does not exist in cluster "manager" (a LocalQueue\'s ClusterQueue '
        "must be in its own cluster)"]}
    assert not LocalQueue.objects.exists()


@pytest.mark.django_db
def test_local_queue_cluster_queue_is_immutable(manager: Cluster) -> None:
    apply_manifests([cq("a"), cq("b"), obj("LocalQueue", "lq", {"clusterQueue": "a"})])

    error = apply_error([obj("LocalQueue", "lq", {"clusterQueue": "b"})])

    assert error.documents[0].as_dict()["errors"] == {"spec.clusterQueue":
                                                      ["field is immutable"]}
    assert LocalQueue.objects.get().cluster_queue.name == "a"


@pytest.mark.django_db
def test_topology_name_is_immutable_once_set(manager: Cluster) -> None:
    tas = {"nodeLabels": {"pool": "tas"}, "topologyName": "default"}
    apply_manifests([obj("ResourceFlavor", "tas", tas)])

    error = apply_error([obj("ResourceFlavor", "tas", {**tas, "topologyName": "other"})])

    assert error.documents[0].as_dict()["errors"] == {
        "spec.topologyName": ["topologyName is immutable when topologyName is set"]}


@pytest.mark.django_db
def test_admission_check_controller_is_immutable(manager: Cluster) -> None:
    apply_manifests([obj("AdmissionCheck", "ac", {"controllerName": "kueueweb.io/manual"})])

    error = apply_error([obj("AdmissionCheck", "ac", {"controllerName": "kueue.x-k8s.io/multikueue"})])

    assert error.documents[0].as_dict()["errors"] == {"spec.controllerName":
                                                      ["field is immutable"]}
    assert AdmissionCheck.objects.get().controller_name == "kueueweb.io/manual"


@pytest.mark.django_db
def test_multikueue_cluster_cannot_name_the_manager(manager: Cluster) -> None:
    worker = Cluster.objects.create(name="worker-1")
    source = {"clusterSource": {"kubeConfig": {"location": "s"}}}

    errors = [apply_error([obj("MultiKueueCluster", name, source)], cluster=domain)
              .documents[0].as_dict()["errors"]
              for name, domain in (("manager", worker), ("worker-1", worker))]

    assert errors == [
        {"metadata.name": ['cluster "manager" is the MultiKueue manager; a MultiKueueCluster '
                           "names a worker"]},
        {"metadata.name": ['cluster "worker-1" cannot be a MultiKueue worker of itself']},
    ]


@pytest.mark.django_db
def test_same_object_twice_in_one_apply_is_refused(manager: Cluster) -> None:
    error = apply_error([flavor("a"), flavor("b"), flavor("a")])

    assert [d.as_dict() for d in error.documents] == [{
        "index": 2, "kind": "ResourceFlavor", "name": "a", "namespace": None,
        "errors": {"metadata.name": ['ResourceFlavor "a" is also defined by documents[0]']},
    }]
    assert not ResourceFlavor.objects.exists()


# --- writes and the stored form ---------------------------------------------------------------


@pytest.mark.django_db
def test_cluster_queue_fields_are_stored(manager: Cluster) -> None:
    apply_manifests([flavor("default"), flavor("spot"), cq(
        "cq", cohortName="team", namespaceSelector={"matchLabels": {"team": "a"}},
        queueingStrategy="StrictFIFO",
        resourceGroups=[group(["cpu", "memory"],
                              ("default", [quota("cpu", 9, borrowingLimit="1", lendingLimit=2),
                                           quota("memory", "36Gi")]),
                              ("spot", [quota("cpu", "500m"), quota("memory", "1Gi")]))],
        flavorFungibility={"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "TryNextFlavor",
                           "preference": "PreemptionOverBorrowing"},
        preemption={"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                    "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}},
        admissionChecksStrategy={"admissionChecks": [{"name": "prov", "onFlavors": ["spot"]}]},
        stopPolicy="Hold", fairSharing={"weight": "0.5"},
    )])

    queue = ClusterQueue.objects.get(name="cq")
    assert (queue.cohort.name, queue.namespace_selector, queue.queueing_strategy,  # type: ignore[union-attr]
            queue.within_cluster_queue, queue.reclaim_within_cohort,
            queue.borrow_within_cohort_policy, queue.borrow_within_cohort_max_priority_threshold,
            queue.when_can_borrow, queue.when_can_preempt, queue.fungibility_preference,
            queue.stop_policy, queue.fair_sharing_weight, queue.admission_checks) == (
        "team", {"matchLabels": {"team": "a"}}, "StrictFIFO", "LowerPriority", "Any",
        "LowerPriority", 100, "TryNextFlavor", "TryNextFlavor", "PreemptionOverBorrowing",
        "Hold", "0.5", [{"name": "prov", "onFlavors": ["spot"]}],
    )
    assert [(q.resource_group, q.position, q.flavor.name, q.resource, q.nominal_quota,
             q.borrowing_limit, q.lending_limit) for q in queue.quotas.all()] == [
        (0, 0, "default", "cpu", "9", "1", "2"),
        (0, 1, "default", "memory", "36Gi", None, None),
        (0, 2, "spot", "cpu", "500m", None, None),
        (0, 3, "spot", "memory", "1Gi", None, None),
    ]


@pytest.mark.django_db
def test_missing_namespace_selector_is_stored_as_null(manager: Cluster) -> None:
    apply_manifests([cq("none"), cq("all", namespaceSelector={})])

    assert dict(ClusterQueue.objects.values_list("name", "namespace_selector")) == {
        "none": None, "all": {}}


@pytest.mark.django_db
def test_cluster_queue_names_an_implicit_cohort(manager: Cluster) -> None:
    result = apply_manifests([cq("cq", cohortName="team-ab")])

    assert [o.as_dict() for o in result.objects] == [
        {"kind": "Cohort", "name": "team-ab", "implicit": True},
        {"kind": "ClusterQueue", "name": "cq"},
    ]
    assert [o.action for o in result.objects] == ["created", "created"]
    assert Cohort.objects.get(name="team-ab").cluster_queues.get().name == "cq"


@pytest.mark.django_db
def test_multikueue_config_dispatcher_travels_as_annotation(manager: Cluster) -> None:
    document = obj("MultiKueueConfig", "mk", {"clusters": ["w1", "w2"]})
    document["metadata"]["annotations"] = {"kueueweb.io/dispatcher": "Incremental"}

    apply_manifests([document])

    config = MultiKueueConfig.objects.get()
    assert (config.clusters, config.dispatcher) == (["w1", "w2"], "Incremental")


@pytest.mark.django_db
def test_applying_a_multikueue_cluster_adds_a_kubernetes_worker(manager: Cluster) -> None:
    result = apply_manifests([obj("MultiKueueCluster", "worker-1", {"clusterSource": {
        "kubeConfig": {"locationType": "Secret", "location": "worker1-secret"}}})])

    worker = Cluster.objects.get(name="worker-1")
    assert (worker.role, worker.connection_type, worker.has_kubeconfig) == (
        "worker", "kubernetes", False)
    assert result.warnings == [
        'documents[0] (MultiKueueCluster "worker-1"): kueueweb does not read the kubeconfig '
        'from Secret "worker1-secret": upload it with PATCH /api/v1/clusters/worker-1/ '
        '({"spec": {"connection": {"kubeconfig": "..."}}})'
    ]


def test_documents_are_not_modified_by_reading() -> None:
    document = cq(version=V1, cohort="x", admissionChecks=["a"])
    before = copy.deepcopy(document)

    read_manifest(document, KINDS)

    assert document == before


def test_unknown_kueueweb_annotation_warns() -> None:
    document = obj("ResourceFlavor", "default")
    document["metadata"]["annotations"] = {"kueueweb.io/dispatcher": "Incremental",
                                           "team": "a"}

    manifest = read_manifest(document, KINDS)

    assert manifest.warnings == [
        "metadata.annotations is not supported by kueueweb (only kueueweb.io/ annotations are "
        "kept) and was ignored",
        "metadata.annotations[kueueweb.io/dispatcher] is not supported by kueueweb (unknown for "
        "a ResourceFlavor) and was ignored",
    ]
