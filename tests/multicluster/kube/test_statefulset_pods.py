"""Kueue's StatefulSet pod reconciler on a Kubernetes cluster: which Pods of StatefulSets
created there are stamped as a pod group (those of a managed set that its template hands to
the pod integration), and that a Pod its controller replaces is stamped again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml

# The user's side: kubectl, played with the official client against the test server.
from kubernetes import client as k8s  # noqa: TID251
from kubernetes import config as k8s_config  # noqa: TID251

from multicluster.kube.statefulset_pods import stamp_members
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.jobs import pod as pods
from scheduling.jobs.statefulset import StatefulSet

pytestmark = pytest.mark.django_db


@pytest.fixture
def apps(kube_api: Any, settings: Any) -> Iterator[k8s.AppsV1Api]:
    kube_api.require_fake()
    kube_api.create_namespace(kube_api.namespace)
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "statefulset"]}
    api = k8s_config.new_client_from_config_dict(yaml.safe_load(kube_api.kubeconfig))
    try:
        yield k8s.AppsV1Api(api)
    finally:
        api.close()


def create_statefulset(apps: k8s.AppsV1Api, namespace: str, name: str, *,
                       queue: str | None = "user-queue",
                       parent: str = "statefulset") -> dict[str, Any]:
    labels = {jobframework.QUEUE_NAME_LABEL: queue} if queue else {}
    created = apps.create_namespaced_stateful_set(namespace, {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": 2, "serviceName": name, "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": name}},
                 "template": {
                     "metadata": {"labels": {"app": name}, "annotations": {
                         pods.SUSPENDING_PARENT_ANNOTATION: parent}},
                     "spec": {"schedulingGates": [{"name": pods.SCHEDULING_GATE}],
                              "containers": [{"name": "c", "image": "nginx"}]}}}})
    result: dict[str, Any] = apps.api_client.sanitize_for_serialization(created)
    return result


def group_of(kube_api: Any, name: str) -> str | None:
    labels = kube_api.get("pods", kube_api.namespace, name)["metadata"].get("labels") or {}
    return labels.get(pods.GROUP_NAME_LABEL)


def test_only_the_pods_of_a_managed_statefulset_handed_to_kueue_are_stamped(
    kube_api: Any, apps: k8s.AppsV1Api, user_queue_domain: Cluster, t0: datetime,
) -> None:
    managed = create_statefulset(apps, kube_api.namespace, "db")
    create_statefulset(apps, kube_api.namespace, "plain", queue=None)
    # A LeaderWorkerSet's StatefulSets name that framework: its Pods are not the set's.
    create_statefulset(apps, kube_api.namespace, "lws", parent="leaderworkerset")
    kube_api.run_statefulset_controller()

    sync_kube_cluster(user_queue_domain.pk, now=t0)

    group = StatefulSet().workload_name(managed)
    assert [group_of(kube_api, f"db-{i}") for i in range(2)] == [group, group]
    for name in ("plain-0", "plain-1", "lws-0", "lws-1"):
        assert group_of(kube_api, name) is None
    pod = kube_api.get("pods", kube_api.namespace, "db-1")
    assert pod["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] == "user-queue"
    assert {k: pod["metadata"]["annotations"][k] for k in (
        pods.GROUP_TOTAL_COUNT_ANNOTATION, pods.FAST_ADMISSION_ANNOTATION,
        pods.SERVING_ANNOTATION)} == {pods.GROUP_TOTAL_COUNT_ANNOTATION: "2",
                                      pods.FAST_ADMISSION_ANNOTATION: "true",
                                      pods.SERVING_ANNOTATION: "true"}


def stamps(kube_api: Any) -> list[str]:
    """The pods patched with a group's stamp, by name, in order."""
    return [r.path.rsplit("/", 1)[1] for r in kube_api.requests_to(
        "PATCH", f"/api/v1/namespaces/{kube_api.namespace}/pods/")
        if pods.GROUP_NAME_LABEL in ((r.body or {}).get("metadata") or {}).get("labels", {})]


def test_a_replaced_pod_is_stamped_again_and_stamped_pods_are_left_alone(
    kube_api: Any, apps: k8s.AppsV1Api, user_queue_domain: Cluster, t0: datetime,
) -> None:
    managed = create_statefulset(apps, kube_api.namespace, "db")
    kube_api.run_statefulset_controller()
    sync_kube_cluster(user_queue_domain.pk, now=t0)
    assert sorted(stamps(kube_api)) == ["db-0", "db-1"]

    kube_api.delete("pods", kube_api.namespace, "db-0")
    kube_api.run_statefulset_controller()
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=1))
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=2))

    assert group_of(kube_api, "db-0") == StatefulSet().workload_name(managed)
    assert sorted(stamps(kube_api)) == ["db-0", "db-0", "db-1"]


def test_nothing_is_stamped_while_the_statefulset_framework_is_disabled(
    kube_api: Any, apps: k8s.AppsV1Api, user_queue_domain: Cluster, t0: datetime,
    settings: Any,
) -> None:
    create_statefulset(apps, kube_api.namespace, "db")
    kube_api.run_statefulset_controller()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": ["batch/job"]}

    sync_kube_cluster(user_queue_domain.pk, now=t0)

    assert group_of(kube_api, "db-0") is None


def test_stamp_members_reports_the_pods_it_stamped(
    kube_api: Any, apps: k8s.AppsV1Api, run_stamp_members: Any,
) -> None:
    create_statefulset(apps, kube_api.namespace, "db")
    kube_api.run_statefulset_controller()

    stamped = run_stamp_members(stamp_members)

    assert sorted(stamped) == [f"{kube_api.namespace}/db-0", f"{kube_api.namespace}/db-1"]
