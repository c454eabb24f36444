"""Kubernetes' ``scheduling.k8s.io/v1alpha1`` Workload applied to a simulated cluster: checked
as the API server checks it, and the gang of the pods that name it (``spec.workloadRef``),
counted in the gang scheduling metrics."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from multicluster.models import Cluster, GangWorkload, Node, Pod, PodGroup
from multicluster.simulated import runner
from scheduling import jobframework, services
from scheduling.manifests.apply import ApplyError, apply_manifests, export_manifests
from scheduling.metrics import prometheus
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.web import slices as web_slices
from tests.fixtures.gang_metrics import gang_metrics
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def setup(settings: Any, manager: Cluster, make_queue: Any) -> Iterator[None]:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "pod"]}
    if settings.REDIS_URL:
        settings.METRICS_REDIS_PREFIX = "kueueweb-test:gangs:"
    prometheus.clear_event_metrics()
    Node.objects.filter(cluster=manager).delete()
    for name in ("n1", "n2"):
        Node.objects.create(cluster=manager, name=name, capacity={"cpu": "2", "pods": "110"})
    make_queue("cq", {"cpu": "20"})
    yield
    prometheus.clear_event_metrics()


def gang_workload(name: str = "train", **groups: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"controllerRef": {"apiGroup": "example.com", "kind": "Trainer",
                                       "name": name},
                     "podGroups": [{"name": group, "policy": policy}
                                   for group, policy in groups.items()]}}


def pod(name: str, *, workload: str = "train", group: str = "workers", cpu: str = "1",
        replica_key: str | None = None) -> Job:
    ref = {"name": workload, "podGroup": group}
    if replica_key is not None:
        ref["podGroupReplicaKey"] = replica_key
    return services.submit_job({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "lq-cq"}},
        "spec": {"restartPolicy": "Never", "workloadRef": ref,
                 "containers": [{"name": "c", "image": "busybox",
                                 "command": ["sleep", "1000"],
                                 "resources": {"requests": {"cpu": cpu}}}]},
    }, namespace="ns")


def bound(*jobs: Job) -> list[str]:
    return [node for job in jobs for node in
            Pod.objects.filter(job=job).values_list("node_name", flat=True)]


# --- the manifest ---------------------------------------------------------------------------


def test_a_workload_is_applied_exported_and_its_pod_groups_are_immutable(
        manager: Cluster) -> None:
    document = gang_workload(workers={"gang": {"minCount": 3}}, driver={"basic": {}})

    result = apply_manifests([document])
    again = apply_manifests([document])

    assert [o.line() for o in result.objects] == [
        "workload.scheduling.k8s.io/train (namespace ns) created"]
    assert [o.action for o in again.objects] == ["unchanged"]
    stored = GangWorkload.objects.get(cluster=manager, namespace="ns", name="train")
    assert stored.pod_groups == [{"name": "workers", "policy": {"gang": {"minCount": 3}}},
                                 {"name": "driver", "policy": {"basic": {}}}]
    assert stored.controller_ref == {"apiGroup": "example.com", "kind": "Trainer",
                                     "name": "train"}
    assert document in export_manifests()

    changed = gang_workload(workers={"gang": {"minCount": 2}}, driver={"basic": {}})
    with pytest.raises(ApplyError) as refused:
        apply_manifests([changed])
    assert refused.value.as_dict()["documents"][0]["errors"] == {
        "spec.podGroups": ["field is immutable"]}


def test_an_invalid_workload_is_refused_field_by_field_and_nothing_is_written() -> None:
    bad = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
           "metadata": {"name": "bad", "namespace": "ns"},
           "spec": {"controllerRef": {"name": "a/b"},
                    "podGroups": [
                        {"name": "w", "policy": {"gang": {"minCount": 0}}},
                        {"name": "w", "policy": {"basic": {}}},
                        {"name": "x", "policy": {"basic": {}, "gang": {"minCount": 1}}},
                        {"name": "y", "policy": {}},
                    ]}}
    empty = {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
             "metadata": {"name": "empty", "namespace": "ns"}, "spec": {"podGroups": []}}

    with pytest.raises(ApplyError) as refused:
        apply_manifests([bad, empty, gang_workload(workers={"basic": {}})])

    assert [d["errors"] for d in refused.value.as_dict()["documents"]] == [{
        "spec.controllerRef.kind": ["Required value"],
        "spec.controllerRef.name": ['"a/b" is not a valid path segment name: it may not be '
                                    "'.' or '..' nor contain '/' or '%'"],
        "spec.podGroups[0].policy.gang.minCount": ["must be greater than zero"],
        "spec.podGroups[1].name": ['Duplicate value: "w"'],
        "spec.podGroups[2].policy": ["exactly one of `basic`, `gang` is required, but multiple "
                                     "fields are set"],
        "spec.podGroups[3].policy": ["exactly one of `basic`, `gang` is required"],
    }, {"spec.podGroups": ["Required value: must have at least one item"]}]
    assert not GangWorkload.objects.exists()


def test_the_apply_endpoint_takes_a_workload(admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/apply", gang_workload(workers={"basic": {}}),
                                     format="json")

    assert (response.status_code, response.json()["created"]) == (
        200, [{"kind": "Workload.scheduling.k8s.io", "name": "train", "namespace": "ns"}])


# --- the gang ---------------------------------------------------------------------------------


def test_pods_naming_a_gang_wait_for_min_count_then_bind_together(
        reconcilers: Reconcilers, t0: datetime, admin_client_api: APIClient,
        django_capture_on_commit_callbacks: Any) -> None:
    apply_manifests([gang_workload(workers={"gang": {"minCount": 3}})])
    first = [pod("a"), pod("b")]
    reconcilers.step(t0)

    # Admitted and started, but two pods of a gang of three never reach the scheduler.
    assert all(Workload.objects.get(job=job).phase == "Admitted" for job in first)
    assert bound(*first) == ["", ""]
    assert {p.message for p in Pod.objects.all()} == {
        'Waiting for the gang: 2 of 3 pods of pod group "workers" of Workload "train" exist '
        "(minCount 3)"}
    assert gang_metrics(admin_client_api, "manager") == {}  # no attempt yet

    third = pod("c")
    with django_capture_on_commit_callbacks(execute=True):
        reconcilers.step(t0 + timedelta(seconds=1))

    assert sorted(bound(*first, third)) == ["n1", "n1", "n2"]
    (group,) = {p.group for p in Pod.objects.all()}
    assert group is not None
    assert group.gang is not None
    assert (group.gang.name, group.min_count) == ("train", 3)
    assert gang_metrics(admin_client_api, "manager") == {"attempts_total": 1.0, "successes_total": 1.0}


def test_a_gang_that_does_not_fit_times_out_and_is_retried(
        reconcilers: Reconcilers, t0: datetime, admin_client_api: APIClient,
        django_capture_on_commit_callbacks: Any) -> None:
    """On two 2-CPU nodes, four 1-CPU pods fit at once: a gang of five cannot bind."""
    apply_manifests([gang_workload(workers={"gang": {"minCount": 5}})])
    jobs = [pod(f"p{i}") for i in range(5)]
    with django_capture_on_commit_callbacks(execute=True):
        reconcilers.step(t0)
        assert bound(*jobs) == [""] * 5
        reconcilers.step(t0 + timedelta(seconds=301))

    assert bound(*jobs) == [""] * 5
    for job in jobs:
        (event,) = Event.objects.filter(workload__job=job, reason="FailedScheduling",
                                        object_kind="Workload")
        assert event.message.startswith("Gang scheduling timed out after 300s: pod group "
                                        "workers: 4 of 5 pods fit at once (minCount 5)")
        # Each pod's own event, as kube-scheduler records it, once for both attempts.
        (pod_event,) = Event.objects.filter(workload__job=job, reason="FailedScheduling",
                                            object_kind="Pod")
        assert pod_event.message == ("0/2 nodes are available: 2 Insufficient cpu. "
                                     "(gang: 4 of 5 pods fit at once)")
    assert gang_metrics(admin_client_api, "manager") == {"attempts_total": 2.0, "timeouts_total": 1.0}


def test_replica_keys_make_independent_gangs_and_basic_pods_go_alone(
        reconcilers: Reconcilers, t0: datetime) -> None:
    apply_manifests([gang_workload(workers={"gang": {"minCount": 2}}, side={"basic": {}})])
    a = [pod("a1", replica_key="a"), pod("a2", replica_key="a")]
    b = [pod("b1", replica_key="b")]
    side = pod("s", group="side")
    reconcilers.step(t0)

    assert "" not in bound(*a)
    assert bound(*b) == [""]  # its gang of two has one pod
    assert bound(side) != [""]


def test_a_pod_naming_a_missing_workload_waits_with_an_event_until_it_is_applied(
        reconcilers: Reconcilers, t0: datetime, admin_ui: Client) -> None:
    job = pod("lonely", workload="later", group="all")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=1))

    assert bound(job) == [""]
    (event,) = Event.objects.filter(workload__job=job, reason=runner.WAITING_FOR_WORKLOAD)
    name = Pod.objects.get(job=job).name
    assert (event.object_kind, event.object_name, event.type) == ("Pod", name, "Warning")
    assert event.message == (f'Pod {name} waits: its Workload "later" (spec.workloadRef.name) '
                             "does not exist in namespace ns")
    # The job's page says why its pod is pending.
    assert (f'data-pod="{name}" data-reason="{runner.WAITING_FOR_WORKLOAD}"'
            in admin_ui.get(web_slices.job_url(job)).content.decode())

    apply_manifests([gang_workload("later", other={"basic": {}})])
    reconcilers.step(t0 + timedelta(seconds=2))
    assert bound(job) == [""]
    assert Event.objects.filter(workload__job=job, reason=runner.WAITING_FOR_WORKLOAD
                                ).latest("id").message.endswith(
        'Workload "later" has no pod group "all" (spec.workloadRef.podGroup)')

    GangWorkload.objects.all().delete()
    apply_manifests([gang_workload("later", all={"basic": {}})])
    reconcilers.step(t0 + timedelta(seconds=3))
    assert bound(job) != [""]


def test_workloads_apply_only_to_simulated_clusters(make_queue: Any) -> None:
    kube = Cluster.objects.create(name="real", connection_type="kubernetes")
    with pytest.raises(ApplyError) as refused:
        apply_manifests([gang_workload(workers={"basic": {}})], cluster=kube)
    assert "only a simulated cluster's can be applied" in str(refused.value)
    assert ClusterQueue.objects.exists()  # the fixture's, untouched


def test_a_gang_whose_pods_are_gone_before_it_bound_is_formed_anew(
        reconcilers: Reconcilers, t0: datetime) -> None:
    """A Job's pod template may name the Workload too: its five pods are the gang here."""
    apply_manifests([gang_workload(workers={"gang": {"minCount": 5}})])
    manifest = job_manifest("train", "lq-cq", parallelism=5, run_seconds=1000)
    manifest["spec"]["template"]["spec"]["workloadRef"] = {"name": "train",
                                                           "podGroup": "workers"}
    job = services.submit_job(manifest, namespace="ns")
    reconcilers.step(t0)
    (old,) = PodGroup.objects.filter(gang__name="train")
    assert Pod.objects.filter(group=old).count() == 5

    wl = Workload.objects.get(job=job)
    services.update_workload(wl, {"spec": {"active": False}})
    reconcilers.step(t0 + timedelta(seconds=10))
    assert not Pod.objects.exists()  # stopped: its workload waits inactive

    wl.refresh_from_db()
    services.update_workload(wl, {"spec": {"active": True}})
    reconcilers.step(t0 + timedelta(seconds=200))

    (group,) = PodGroup.objects.filter(gang__name="train")
    assert group.pk != old.pk
    assert group.waiting_since == t0 + timedelta(seconds=200)
    assert Pod.objects.filter(group=group).count() == 5
