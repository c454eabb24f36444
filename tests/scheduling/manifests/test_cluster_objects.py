"""The cluster's own PriorityClasses, LimitRanges and RuntimeClasses in Kueue YAML: applied
to a simulated cluster with Kubernetes' validation, exported back to the same state, and
refused for a cluster with a Kubernetes connection, which owns them."""

from __future__ import annotations

from typing import Any

import pytest

from multicluster.models import Cluster
from scheduling.manifests.apply import ApplyError, apply_manifests, delete_object, export_manifests
from scheduling.manifests.codec import Conflict
from scheduling.models import LimitRange, PriorityClass, RuntimeClass

pytestmark = pytest.mark.django_db

PRIORITY_CLASS = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": "high"}, "value": 1000, "description": "urgent"}
LIMIT_RANGE = {"apiVersion": "v1", "kind": "LimitRange",
               "metadata": {"name": "defaults", "namespace": "team-a"},
               "spec": {"limits": [{"type": "Container", "default": {"cpu": "2"},
                                    "defaultRequest": {"cpu": "500m"}, "max": {"cpu": "4"},
                                    "min": {"cpu": "100m"}},
                                   {"type": "Pod", "max": {"memory": "8Gi"}}]}}
RUNTIME_CLASS = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                 "metadata": {"name": "kata"}, "handler": "kata",
                 "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                 "scheduling": {"nodeSelector": {"runtime": "kata"}}}


def doc(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


@pytest.fixture
def kube(db: None) -> Cluster:
    return Cluster.objects.create(name="kube-1", role="worker", connection_type="kubernetes")


def test_the_three_kinds_apply_to_a_simulated_cluster(manager: Cluster) -> None:
    result = apply_manifests([PRIORITY_CLASS, LIMIT_RANGE, RUNTIME_CLASS])

    assert [obj.line() for obj in result.objects] == [
        "priorityclass.scheduling.k8s.io/high created",
        "limitrange/defaults (namespace team-a) created",
        "runtimeclass.node.k8s.io/kata created",
    ]
    high = PriorityClass.objects.get(cluster=manager, name="high")
    assert (high.value, high.global_default, high.description, high.preemption_policy) == (
        1000, False, "urgent", "PreemptLowerPriority")
    limits = LimitRange.objects.get(cluster=manager, namespace="team-a", name="defaults").limits
    assert limits[0] == {"type": "Container", "default": {"cpu": "2"},
                         "defaultRequest": {"cpu": "500m"}, "max": {"cpu": "4"},
                         "min": {"cpu": "100m"}}
    kata = RuntimeClass.objects.get(cluster=manager, name="kata")
    assert (kata.handler, kata.overhead, kata.scheduling) == (
        "kata", {"cpu": "250m", "memory": "120Mi"}, {"nodeSelector": {"runtime": "kata"}})
    # Applied again unchanged: nothing is written.
    again = apply_manifests([PRIORITY_CLASS, LIMIT_RANGE, RUNTIME_CLASS])
    assert [obj.action for obj in again.objects] == ["unchanged"] * 3


def test_export_round_trips_into_an_empty_cluster(manager: Cluster) -> None:
    apply_manifests([PRIORITY_CLASS, LIMIT_RANGE, RUNTIME_CLASS])
    exported = [d for d in export_manifests(manager)
                if d["kind"] in ("PriorityClass", "LimitRange", "RuntimeClass")]
    assert exported == [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
         "metadata": {"name": "high"}, "value": 1000, "description": "urgent",
         "preemptionPolicy": "PreemptLowerPriority"},
        {"apiVersion": "v1", "kind": "LimitRange",
         "metadata": {"name": "defaults", "namespace": "team-a"}, "spec": LIMIT_RANGE["spec"]},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"},
         "handler": "kata", "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
         "scheduling": {"nodeSelector": {"runtime": "kata"}}},
    ]
    other = Cluster.objects.create(name="sim-2", role="worker", connection_type="simulated")
    apply_manifests(exported, cluster=other)
    assert [d for d in export_manifests(other)
            if d["kind"] in ("PriorityClass", "LimitRange", "RuntimeClass")] == exported


@pytest.mark.parametrize(("document", "path", "message"), [
    (doc(PRIORITY_CLASS, value=None), "value", "Required value"),
    (doc(PRIORITY_CLASS, value=2_000_000_000), "value",
     "maximum allowed value of a user defined priority is 1000000000"),
    (doc(PRIORITY_CLASS, preemptionPolicy="Sometimes"), "preemptionPolicy",
     'Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never"'),
    (doc(PRIORITY_CLASS, globalDefault="yes"), "globalDefault", "must be a boolean"),
    (doc(LIMIT_RANGE, spec={"limits": [{"type": "Pod", "default": {"cpu": "1"}}]}),
     "spec.limits[0].default", "may not be specified when `type` is 'Pod'"),
    (doc(LIMIT_RANGE, spec={"limits": [{"type": "Container", "min": {"cpu": "2"},
                                        "max": {"cpu": "1"}}]}),
     "spec.limits[0].min[cpu]", "min value 2 is greater than max value 1"),
    (doc(LIMIT_RANGE, spec={"limits": [{"type": "Container", "default": {"cpu": "1"},
                                        "defaultRequest": {"cpu": "2"}}]}),
     "spec.limits[0].defaultRequest[cpu]",
     "default request value 2 is greater than default limit value 1"),
    (doc(LIMIT_RANGE, spec={"limits": [{"type": "Container",
                                        "maxLimitRequestRatio": {"cpu": "500m"}}]}),
     "spec.limits[0].maxLimitRequestRatio[cpu]", "ratio 500m is less than 1"),
    (doc(LIMIT_RANGE, spec={"limits": [{"type": "Node"}]}), "spec.limits[0].type",
     'Unsupported value: "Node": supported values: "Container", "Pod", '
     '"PersistentVolumeClaim"'),
    (doc(LIMIT_RANGE, spec={"limits": [{"type": "Container", "max": {"cpu": "lots"}}]}),
     "spec.limits[0].max[cpu]", None),
    (doc(RUNTIME_CLASS, handler=None), "handler", "Required value"),
    (doc(RUNTIME_CLASS, handler="Kata_Containers"), "handler", None),
    (doc(RUNTIME_CLASS, overhead={"podFixed": {"cpu": "-1"}}), "overhead.podFixed[cpu]", None),
])
def test_kubernetes_validation_names_the_field(manager: Cluster, document: dict[str, Any],
                                               path: str, message: str | None) -> None:
    with pytest.raises(ApplyError) as raised:
        apply_manifests([document])
    errors = raised.value.as_dict()["documents"][0]["errors"]
    assert path in errors
    if message is not None:
        assert errors[path] == [message]
    assert not PriorityClass.objects.exists()
    assert not LimitRange.objects.exists()
    assert not RuntimeClass.objects.exists()


def test_only_one_global_default_and_an_immutable_value(manager: Cluster) -> None:
    apply_manifests([doc(PRIORITY_CLASS, globalDefault=True)])
    with pytest.raises(ApplyError) as raised:
        apply_manifests([doc(PRIORITY_CLASS, metadata={"name": "other"}, globalDefault=True)])
    assert raised.value.as_dict()["documents"][0]["errors"] == {
        "globalDefault": ["PriorityClass high is already marked as default. Only one default "
                          "can exist"]}
    with pytest.raises(ApplyError) as raised:
        apply_manifests([doc(PRIORITY_CLASS, value=5)])
    assert raised.value.as_dict()["documents"][0]["errors"] == {
        "value": ["Forbidden: may not be changed in an update."]}
    assert PriorityClass.objects.get(name="high").value == 1000
    assert not PriorityClass.objects.filter(name="other").exists()


def test_a_kubernetes_cluster_owns_its_objects(manager: Cluster, kube: Cluster) -> None:
    """Apply and delete are refused: the cluster's objects are mirrored from its API
    server. Its objects are not exported either (apply would refuse them)."""
    with pytest.raises(ApplyError) as raised:
        apply_manifests([PRIORITY_CLASS, LIMIT_RANGE], cluster=kube)
    messages = [d["errors"]["non_field_errors"] for d in raised.value.as_dict()["documents"]]
    assert messages == [
        ['cluster "kube-1" has a kubernetes connection: its priorityclasses are the '
         "cluster's own, read from it; only a simulated cluster's priorityclasses can be "
         "applied"],
        ['cluster "kube-1" has a kubernetes connection: its limitranges are the cluster\'s '
         "own, read from it; only a simulated cluster's limitranges can be applied"],
    ]
    assert not PriorityClass.objects.exists()
    mirrored = PriorityClass.objects.create(cluster=kube, name="mirrored", value=5)
    assert not [d for d in export_manifests(kube) if d["kind"] == "PriorityClass"]
    with pytest.raises(Conflict, match='belongs to cluster "kube-1", which owns its '
                                       "priorityclasses"):
        delete_object("PriorityClass", mirrored)
    assert PriorityClass.objects.filter(pk=mirrored.pk).exists()
