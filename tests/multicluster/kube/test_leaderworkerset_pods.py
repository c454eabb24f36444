"""Kueue's leaderworkerset reconciler for a group's Pods on a Kubernetes cluster: a
LeaderWorkerSet created with kubectl has its Pods stamped as one pod group per replica,
each adopted as one Workload and ungated together once admitted, as quota allows."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

# The user's side: kubectl, played with the official client against the test server.
from kubernetes import client as k8s  # noqa: TID251
from kubernetes import config as k8s_config  # noqa: TID251

from multicluster.kube.leaderworkerset_pods import stamp_members
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.jobs.leaderworkerset import LeaderWorkerSet, group_workload_name
from scheduling.models import Workload
from scheduling.scheduler import admission
from tests.fixtures.kube_api import LEADERWORKERSETS

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-leaderworkerset.yaml")
NAME = "nginx-leaderworkerset"
SPOT = {"instance-type": "spot"}
GROUPS = {0: [f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"],
          1: [f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"]}


@pytest.fixture
def custom(kube_api: Any, settings: Any) -> Iterator[k8s.CustomObjectsApi]:
    kube_api.require_fake()
    kube_api.create_namespace(kube_api.namespace)
    kube_api.install_leaderworkerset_crd()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "leaderworkerset.x-k8s.io/leaderworkerset"]}
    api = k8s_config.new_client_from_config_dict(yaml.safe_load(kube_api.kubeconfig))
    try:
        yield k8s.CustomObjectsApi(api)
    finally:
        api.close()


def create_sample(custom: k8s.CustomObjectsApi, namespace: str, *,
                  queue: str | None = "user-queue") -> dict[str, Any]:
    """Kueue's sample as its webhooks leave it: the templates marked by the LWS webhook
    (``default``) and gated as Kueue's pod webhook gates each Pod it creates."""
    manifest = yaml.safe_load(SAMPLE.read_text())
    if queue is None:
        del manifest["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL]
    manifest = LeaderWorkerSet().default(manifest)
    group = manifest["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        group[key]["spec"]["schedulingGates"] = [{"name": pods.SCHEDULING_GATE}]
    created: dict[str, Any] = custom.create_namespaced_custom_object(
        LEADERWORKERSETS[0], LEADERWORKERSETS[1], namespace, LEADERWORKERSETS[2],
        copy.deepcopy(manifest))
    return created


def pod(kube_api: Any, name: str) -> dict[str, Any]:
    result: dict[str, Any] = kube_api.get("pods", kube_api.namespace, name)
    return result


def stamps(kube_api: Any) -> Counter[str]:
    """How often each pod was patched with a group's stamp."""
    return Counter(r.path.rsplit("/", 1)[1] for r in kube_api.requests_to(
        "PATCH", f"/api/v1/namespaces/{kube_api.namespace}/pods/")
        if pods.GROUP_NAME_LABEL in ((r.body or {}).get("metadata") or {}).get("labels", {}))


def gated(kube_api: Any) -> list[str]:
    return sorted(p["metadata"]["name"] for p in kube_api.objects("pods", kube_api.namespace)
                  if p["spec"].get("schedulingGates"))


def test_each_replica_is_stamped_once_adopted_as_one_workload_and_ungated_together(
    kube_api: Any, custom: k8s.CustomObjectsApi, user_queue_domain: Cluster, t0: datetime,
) -> None:
    created = create_sample(custom, kube_api.namespace)
    kube_api.run_leaderworkerset_controller()
    assert len(kube_api.objects("pods", kube_api.namespace)) == 6

    stamped = sync_kube_cluster(user_queue_domain.pk, now=t0)
    adopting = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=1))

    for index, members in GROUPS.items():
        group = group_workload_name(created, index)
        for name in members:
            metadata = pod(kube_api, name)["metadata"]
            assert metadata["labels"][pods.GROUP_NAME_LABEL] == group
            assert metadata["labels"][jobframework.QUEUE_NAME_LABEL] == "user-queue"
            assert metadata["annotations"][pods.GROUP_TOTAL_COUNT_ANNOTATION] == "3"
        roles = [pod(kube_api, n)["metadata"]["annotations"][pods.ROLE_HASH_ANNOTATION]
                 for n in members]
        assert roles == ["leader", "worker", "worker"]
    # The templates carry the queue label: the pass that stamps the Pods adopts them.
    assert sorted(stamped.adopted) == sorted(
        f"{kube_api.namespace}/{n}" for members in GROUPS.values() for n in members)
    assert adopting.adopted == []
    assert stamps(kube_api) == Counter(n for members in GROUPS.values() for n in members)
    workloads = {wl.name: sorted((ps["name"], ps["count"]) for ps in wl.pod_sets)
                 for wl in Workload.objects.all()}
    assert workloads == {group_workload_name(created, i): [("leader", 1), ("worker", 2)]
                         for i in GROUPS}

    admission.run_admission_cycle(user_queue_domain.pk, now=t0 + timedelta(seconds=1))
    started = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=2))

    assert started.started
    assert set(Workload.objects.values_list("phase", flat=True)) == {WorkloadPhase.ADMITTED}
    assert gated(kube_api) == []
    for members in GROUPS.values():
        for name in members:
            assert pod(kube_api, name)["spec"]["nodeSelector"] == SPOT
    assert len(kube_api.objects("pods", kube_api.namespace)) == 6  # no copies
    assert sum(stamps(kube_api).values()) == 6  # stamped once each


def test_with_quota_for_one_group_the_other_waits_gated(
    kube_api: Any, custom: k8s.CustomObjectsApi, make_user_queue_domain: Any, t0: datetime,
) -> None:
    # A group asks 100m (its leader) + 2 × 200m (its workers).
    domain = make_user_queue_domain("500m")
    create_sample(custom, kube_api.namespace)
    kube_api.run_leaderworkerset_controller()
    sync_kube_cluster(domain.pk, now=t0)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))

    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=1))
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=2))

    phases = Counter(Workload.objects.values_list("phase", flat=True))
    assert phases == Counter({WorkloadPhase.ADMITTED: 1, WorkloadPhase.PENDING: 1})
    admitted = Workload.objects.get(phase=WorkloadPhase.ADMITTED).name
    [running] = [m for members in GROUPS.values() for m in [members]
                 if pod(kube_api, members[0])["metadata"]["labels"][
                     pods.GROUP_NAME_LABEL] == admitted]
    waiting = [n for members in GROUPS.values() if members != running for n in members]
    assert gated(kube_api) == sorted(waiting)


def test_the_pods_of_an_unmanaged_set_or_with_the_framework_disabled_are_left_alone(
    kube_api: Any, custom: k8s.CustomObjectsApi, user_queue_domain: Cluster, t0: datetime,
    settings: Any,
) -> None:
    create_sample(custom, kube_api.namespace, queue=None)
    kube_api.run_leaderworkerset_controller()
    sync_kube_cluster(user_queue_domain.pk, now=t0)
    assert stamps(kube_api) == Counter()

    custom.delete_namespaced_custom_object(LEADERWORKERSETS[0], LEADERWORKERSETS[1],
                                           kube_api.namespace, LEADERWORKERSETS[2], NAME)
    kube_api.delete_pods(kube_api.namespace)
    create_sample(custom, kube_api.namespace)
    kube_api.run_leaderworkerset_controller()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": ["batch/job"]}
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=1))

    assert stamps(kube_api) == Counter()
    assert pods.GROUP_NAME_LABEL not in pod(kube_api, f"{NAME}-0")["metadata"]["labels"]


def test_stamp_members_reports_the_pods_it_stamped(
    kube_api: Any, custom: k8s.CustomObjectsApi, run_stamp_members: Any,
) -> None:
    create_sample(custom, kube_api.namespace)
    kube_api.run_leaderworkerset_controller()

    stamped = run_stamp_members(stamp_members)

    assert sorted(stamped) == sorted(
        f"{kube_api.namespace}/{n}" for members in GROUPS.values() for n in members)
