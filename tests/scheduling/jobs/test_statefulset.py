"""apps/v1 StatefulSet (``scheduling.jobs.statefulset`` and the reconciler
``scheduling.statefulsets``): Kueue builds ONE pod-group Workload for a StatefulSet up front,
its Pods join that group and are admitted together; it scales only to and from 0, and at 0
its Workload is kept on hold."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.models import Cluster
from multicluster.models import Pod as ClusterPod
from scheduling import jobframework, services, statefulsets
from scheduling.choices import QueueState, WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobframework.constants import (
    JOB_OWNER_GVK_ANNOTATION,
    JOB_OWNER_NAME_ANNOTATION,
)
from scheduling.jobs import pod as pods
from scheduling.jobs.deployment import ChildPod
from scheduling.jobs.statefulset import (
    POD_INDEX_LABEL,
    StatefulSet,
    revision,
)
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, hub  # noqa: F401 (fixture)

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-statefulset.yaml")
KIND = StatefulSet()
URL = "/api/v1/namespaces/default/jobs/"
QUEUE = jobframework.QUEUE_NAME_LABEL
CPU_100M = {"containers": [{"name": "c", "image": "x",
                            "resources": {"requests": {"cpu": "100m"}}}]}


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "statefulset"]}


@pytest.fixture
def three_pods(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    """``user-queue`` with quota for the sample's three pods (100m each), no more."""
    cq = make_queue("cq", {"cpu": "300m", "memory": "1Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", URL, SAMPLE.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.json()
    return Job.objects.get(kind="StatefulSet")


def drive(statefulset: Job, reconcilers: Reconcilers, start: datetime, seconds: int) -> datetime:
    """The StatefulSet's controller and every reconciler, every second for ``seconds``."""
    now = start
    for step in range(seconds):
        now = start + timedelta(seconds=step)
        statefulsets.sync_statefulset(statefulset.pk, now=now)
        reconcilers.step(now, cycles=1)
    statefulsets.sync_statefulset(statefulset.pk, now=now)
    return now


def the_workload() -> Workload:
    (wl,) = Workload.objects.filter(job__kind="StatefulSet")
    return wl


def member_phases(statefulset: Job) -> dict[str, str]:
    return {job.name: (job.status or {}).get("phase", "") for job in
            statefulsets.owned_pods(statefulset)}


def blocker(manager: Cluster, cpu: str) -> Workload:
    """A workload in the same queue asking for ``cpu``."""
    spec = {"queueName": "user-queue", "podSets": [{"name": "main", "count": 1, "template": {
        "spec": {"containers": [{"name": "c", "image": "x",
                                 "resources": {"requests": {"cpu": cpu}}}]}}}]}
    return services.create_workload(spec, namespace="default", name="blocker", cluster=manager)


# --- The object, its webhook and the registry -----------------------------------------------


def test_kueue_sample_is_valid_and_defaulted_as_kueues_webhook_does() -> None:
    manifest = sample()
    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []

    defaulted = KIND.default(manifest)

    template = defaulted["spec"]["template"]
    # Only the parent annotation: the Pods are stamped when they are created.
    assert template["metadata"] == {"labels": {"app": "nginx"}, "annotations": {
        pods.SUSPENDING_PARENT_ANNOTATION: "statefulset"}}
    assert template["spec"]["restartPolicy"] == "Always"
    assert defaulted["spec"]["podManagementPolicy"] == "OrderedReady"
    assert manifest == sample()


def test_a_statefulset_of_another_framework_is_left_alone() -> None:
    manifest = sample()
    manifest["spec"]["template"]["metadata"]["annotations"] = {
        pods.SUSPENDING_PARENT_ANNOTATION: "leaderworkerset.x-k8s.io/leaderworkerset"}
    defaulted = KIND.default(manifest)
    assert defaulted["spec"]["template"]["metadata"]["annotations"] == {
        pods.SUSPENDING_PARENT_ANNOTATION: "leaderworkerset.x-k8s.io/leaderworkerset"}


def test_refusals_name_their_fields() -> None:
    cases: list[tuple[Callable[[dict[str, Any]], None], str, str]] = [
        (lambda m: m["metadata"]["labels"].update({QUEUE: "Bad_Queue"}),
         f"metadata.labels[{QUEUE}]", "subdomain"),
        (lambda m: m["metadata"].setdefault("annotations", {}).update(
            {jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
         f"metadata.annotations[{jobframework.ELASTIC_JOB_ANNOTATION}]", "not supported"),
        (lambda m: m["spec"].update(replicas=-1), "spec.replicas", "greater than or equal"),
        (lambda m: m["spec"].update(podManagementPolicy="Random"),
         "spec.podManagementPolicy", "OrderedReady"),
        (lambda m: m["spec"].update(updateStrategy={"type": "Sometimes"}),
         "spec.updateStrategy.type", "OnDelete"),
        (lambda m: m["spec"]["template"]["spec"]["containers"][0].pop("image"),
         "spec.template.spec.containers[0].image", "required"),
    ]
    for edit, path, words in cases:
        manifest = sample()
        edit(manifest)
        errors = errors_to_dict(KIND.validate_on_create(manifest, namespace="default",
                                                        slices_enabled=True))
        assert path in errors, (path, errors)
        assert any(words in message for message in errors[path]), errors


def test_while_managed_replicas_change_only_to_or_from_zero_and_the_shape_is_frozen() -> None:
    old = KIND.default(sample())

    def update(edit: Callable[[dict[str, Any]], None]) -> dict[str, list[str]]:
        new = copy.deepcopy(old)
        edit(new)
        return errors_to_dict(KIND.validate_on_update(old, new, ready_replicas=0,
                                                      namespace="default",
                                                      slices_enabled=True))

    assert "spec.replicas" in update(lambda m: m["spec"].update(replicas=2))
    assert update(lambda m: m["spec"].update(replicas=0)) == {}
    resources = "spec.template.spec.containers[0].resources.requests.cpu"
    assert update(lambda m: m["spec"]["template"]["spec"]["containers"][0].update(
        resources={"requests": {"cpu": "200m"}})) == {resources: ["field is immutable"]}
    # The image is not part of the role: it may change.
    assert update(lambda m: m["spec"]["template"]["spec"]["containers"][0].update(
        image="nginx:2")) == {}
    # Without a queue Kueue does not manage it: any count goes.
    unmanaged = copy.deepcopy(old)
    unmanaged["metadata"]["labels"].pop(QUEUE)
    scaled = copy.deepcopy(unmanaged)
    scaled["spec"]["replicas"] = 2
    assert KIND.validate_on_update(unmanaged, scaled, ready_replicas=0, namespace="default",
                                   slices_enabled=True) == []


def test_a_scale_up_from_zero_waits_until_the_scale_down_is_done() -> None:
    old = KIND.default(sample())
    old["spec"]["replicas"] = 0
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 3

    pods_left = KIND.scale_up_refusal(old, new, status={"replicas": 1}, holds_quota=False)
    assert pods_left is not None
    assert (pods_left.path, pods_left.message) == (
        "spec.replicas", "Forbidden: scaling down is still in progress")
    holding = KIND.scale_up_refusal(old, new, status={"replicas": 0}, holds_quota=True)
    assert holding is not None
    assert holding.path == "spec.replicas"
    assert KIND.scale_up_refusal(old, new, status={"replicas": 0}, holds_quota=False) is None
    # Scaling down is never held back.
    assert KIND.scale_up_refusal(new, old, status={"replicas": 3}, holds_quota=True) is None


def test_statefulset_is_a_framework_off_by_default_that_implicitly_enables_pod() -> None:
    assert registry.by_framework("statefulset") is not None
    config = {"INTEGRATIONS_FRAMEWORKS": ["batch/job"]}
    integration, errors = registry.enabled_for(sample(), config)
    assert integration is None
    assert [e.path for e in errors] == ["kind"]
    integration, errors = registry.enabled_for(
        sample(), {"INTEGRATIONS_FRAMEWORKS": ["batch/job", "statefulset"]})
    assert integration is not None
    assert integration.kind == "StatefulSet"
    assert KIND.implicitly_enables == ("pod",)


def test_pods_come_in_order_and_the_ended_ones_are_replaced_under_their_name() -> None:
    manifest = KIND.default({**sample(), "metadata": {**sample()["metadata"], "uid": "u"}})
    current = revision(manifest)
    t = datetime(2025, 1, 1)

    def pod(index: int, *, ready: bool = True, terminated: bool = False,
            hash_: str = current) -> ChildPod:
        return ChildPod(name=f"nginx-statefulset-{index}", template_hash=hash_, created_at=t,
                        scheduled=ready, running=ready, ready=ready, terminated=terminated)

    assert KIND.plan_pods(manifest, {}, []).create == [0]
    assert KIND.plan_pods(manifest, {}, [pod(0, ready=False)]).create == []
    assert KIND.plan_pods(manifest, {}, [pod(0)]).create == [1]
    parallel = {**manifest, "spec": {**manifest["spec"], "podManagementPolicy": "Parallel"}}
    assert KIND.plan_pods(parallel, {}, []).create == [0, 1, 2]
    ended = KIND.plan_pods(manifest, {}, [pod(0, terminated=True), pod(1)])
    assert (ended.create, ended.delete) == ([0], [("nginx-statefulset-0", "Terminated")])
    scaled = {**manifest, "spec": {**manifest["spec"], "replicas": 0}}
    assert KIND.plan_pods(scaled, {}, [pod(0), pod(1), pod(2)]).delete == [
        ("nginx-statefulset-2", "ScaleDown"), ("nginx-statefulset-1", "ScaleDown"),
        ("nginx-statefulset-0", "ScaleDown")]
    # A new template rolls out from the highest ordinal, once all run and are ready: the
    # Pod comes back at once with the new template.
    rolling = KIND.plan_pods(manifest, {}, [pod(i, hash_="old") for i in range(3)])
    assert (rolling.delete, rolling.create) == ([("nginx-statefulset-2", "Rollout")], [2])
    assert rolling.status["updatedReplicas"] == 1
    assert KIND.plan_pods(manifest, {}, [pod(0, hash_="old"), pod(1, ready=False),
                                         pod(2)]).delete == []


# --- Submission, admission, serving, scaling, eviction and deletion -----------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("three_pods")
def test_kueue_sample_makes_one_group_workload_of_three_that_runs_and_serves(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    statefulset = submit_sample(admin_client_api)
    statefulsets.sync_statefulset(statefulset.pk, now=t0)

    wl = the_workload()
    assert wl.name == KIND.workload_name(statefulset.manifest)
    assert wl.name.startswith("statefulset-nginx-statefulset-")
    assert len(wl.name) == len("statefulset-nginx-statefulset-") + 5
    assert wl.job_id == statefulset.pk
    assert wl.queue_name == "user-queue"
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in wl.pod_sets] == [("main", 3, {"cpu": "100m"})]
    assert set(wl.pod_sets[0]["template"]) == {"spec"}
    assert wl.annotations == {JOB_OWNER_GVK_ANNOTATION: "apps/v1, Kind=StatefulSet",
                              JOB_OWNER_NAME_ANNOTATION: "nginx-statefulset",
                              pods.IS_GROUP_WORKLOAD_ANNOTATION: "true"}
    assert wl.labels == {jobframework.JOB_UID_LABEL: str(statefulset.uid)}
    # OrderedReady: the first Pod, a gated member of the group.
    (first,) = statefulsets.owned_pods(statefulset)
    assert first.name == "nginx-statefulset-0"
    assert first.group_name == wl.name
    assert first.suspend
    assert pods.is_gated(first.manifest)
    labels = first.manifest["metadata"]["labels"]
    annotations = first.manifest["metadata"]["annotations"]
    assert (labels[pods.GROUP_NAME_LABEL], labels[QUEUE], labels[POD_INDEX_LABEL]) == (
        wl.name, "user-queue", "0")
    assert {k: annotations[k] for k in (
        pods.GROUP_TOTAL_COUNT_ANNOTATION, pods.FAST_ADMISSION_ANNOTATION,
        pods.SERVING_ANNOTATION, pods.ROLE_HASH_ANNOTATION)} == {
        pods.GROUP_TOTAL_COUNT_ANNOTATION: "3", pods.FAST_ADMISSION_ANNOTATION: "true",
        pods.SERVING_ANNOTATION: "true", pods.ROLE_HASH_ANNOTATION: "main"}
    assert Workload.objects.count() == 1  # the Pod joined the group; it made none

    now = drive(statefulset, reconcilers, t0, 20)

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert member_phases(statefulset) == {f"nginx-statefulset-{i}": "Running" for i in range(3)}
    assert ClusterPod.objects.filter(phase="Running").count() == 3
    statefulset.refresh_from_db()
    assert (statefulset.status["replicas"], statefulset.status["readyReplicas"]) == (3, 3)
    assert not statefulset.suspend  # its group runs

    # Serving: an hour later it still runs, and its Workload has not finished.
    reconcilers.step(now + timedelta(hours=1))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert ClusterPod.objects.filter(phase="Running").count() == 3


@pytest.mark.django_db
@pytest.mark.usefixtures("three_pods")
def test_the_group_is_admitted_only_with_quota_for_all_three(
    admin_client_api: APIClient, enabled: None, manager: Cluster, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    other = blocker(manager, "100m")
    reconcilers.step(t0)
    statefulset = submit_sample(admin_client_api)
    drive(statefulset, reconcilers, t0, 10)

    # Room for two of its three pods: the group waits whole, no pod runs.
    wl = the_workload()
    assert wl.phase == WorkloadPhase.PENDING
    assert not ClusterPod.objects.exists()
    assert all(job.suspend for job in statefulsets.owned_pods(statefulset))

    services.delete_workload(other)
    drive(statefulset, reconcilers, t0 + timedelta(seconds=10), 20)

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert member_phases(statefulset) == {f"nginx-statefulset-{i}": "Running" for i in range(3)}


@pytest.mark.django_db
@pytest.mark.usefixtures("three_pods")
def test_scaling_to_zero_holds_the_workload_and_scaling_back_waits_for_quota(
    admin_client_api: APIClient, enabled: None, manager: Cluster, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    statefulset = submit_sample(admin_client_api)
    now = drive(statefulset, reconcilers, t0, 20)
    url = f"{URL}{statefulset.name}/?kind=StatefulSet"

    refused = admin_client_api.patch(url, {"spec": {"replicas": 2}}, format="json")
    assert refused.status_code == 400
    assert list(refused.json()) == ["spec.replicas"]

    response = admin_client_api.post(f"{URL}{statefulset.name}/scale/?kind=StatefulSet",
                                     {"replicas": 0}, format="json")
    assert response.status_code == 200, response.json()
    now = drive(statefulset, reconcilers, now + timedelta(seconds=1), 3)

    wl = the_workload()
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.active  # kept, not deactivated
    assert wl.admission is None
    held = cond.find(wl.conditions, "QuotaReserved")
    assert held is not None
    assert (held["status"], held["reason"], held["message"]) == (
        "False", "OnHold", "StatefulSet scaled to zero; workload on hold")
    assert wl.queue_state == QueueState.INADMISSIBLE
    assert not statefulsets.owned_pods(statefulset)
    assert not ClusterPod.objects.exists()

    # The quota is free: another workload takes it all, and the held one is not requeued.
    other = blocker(manager, "300m")
    reconcilers.step(now + timedelta(seconds=1))
    other.refresh_from_db()
    assert other.phase == WorkloadPhase.ADMITTED
    wl.refresh_from_db()
    assert cond.find(wl.conditions, "QuotaReserved")["reason"] == "OnHold"

    response = admin_client_api.patch(url, {"spec": {"replicas": 3}}, format="json")
    assert response.status_code == 200, response.json()
    now = drive(statefulset, reconcilers, now + timedelta(seconds=2), 5)

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING
    reserved = cond.find(wl.conditions, "QuotaReserved")
    assert reserved is not None
    assert reserved["reason"] != "OnHold"
    assert ClusterPod.objects.filter(job__kind="Pod").count() == 0

    services.delete_workload(other)
    drive(statefulset, reconcilers, now + timedelta(seconds=1), 20)
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert member_phases(statefulset) == {f"nginx-statefulset-{i}": "Running" for i in range(3)}


@pytest.mark.django_db
@pytest.mark.usefixtures("three_pods")
def test_an_evicted_group_loses_its_pods_which_come_back_after_readmission(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    statefulset = submit_sample(admin_client_api)
    now = drive(statefulset, reconcilers, t0, 20)
    wl = the_workload()
    before = {job.name: job.uid for job in statefulsets.owned_pods(statefulset)}

    services.evict_workload(wl, now=now)
    reconcilers.step(now + timedelta(seconds=1))

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING
    assert not ClusterPod.objects.exists()
    assert set(member_phases(statefulset).values()) == {"Failed"}  # Kueue deleted them
    assert cond.is_true(wl.conditions, jobframework.WAITING_FOR_REPLACEMENT_PODS)

    drive(statefulset, reconcilers, now + timedelta(seconds=2), 25)

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    after = {job.name: job.uid for job in statefulsets.owned_pods(statefulset)}
    assert set(after) == set(before)
    assert all(after[name] != before[name] for name in after)  # new Pods, same names
    assert member_phases(statefulset) == {f"nginx-statefulset-{i}": "Running" for i in range(3)}
    assert Event.objects.filter(object_name=statefulset.name, reason="SuccessfulDelete",
                                message__contains="nginx-statefulset-0").exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("three_pods")
def test_deleting_the_statefulset_deletes_its_pods_and_its_workload(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    statefulset = submit_sample(admin_client_api)
    drive(statefulset, reconcilers, t0, 20)
    assert ClusterPod.objects.count() == 3

    response = admin_client_api.delete(f"{URL}{statefulset.name}/?kind=StatefulSet")

    assert response.status_code == 204
    assert not Job.objects.exists()
    assert not Workload.objects.exists()
    assert not ClusterPod.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("three_pods")
def test_the_job_page_shows_a_serving_statefulset_with_ready_of_desired_replicas(
    admin_client_api: APIClient, admin_ui: Any, enabled: None, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    statefulset = submit_sample(admin_client_api)
    drive(statefulset, reconcilers, t0, 20)

    page = admin_ui.get(f"/c/{statefulset.cluster.name}/namespaces/default/jobs/StatefulSet/"
                        f"{statefulset.name}/")

    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="job-serving"' in body
    assert 'data-ready-replicas="3" data-desired-replicas="3"' in body
    assert "admitted together, as one group" in body
    for index in range(3):
        assert f"/jobs/Pod/nginx-statefulset-{index}/" in body


# --- MultiKueue ----------------------------------------------------------------------------


def test_the_multikueue_copy_is_the_statefulset_with_the_hub_uid_and_no_status() -> None:
    manifest = KIND.default(sample())
    manifest["metadata"].update(namespace="research", uid="hub-uid", resourceVersion="7",
                                creationTimestamp="2025-03-01T12:00:00Z")
    manifest["status"] = {"replicas": 1, "readyReplicas": 0}
    hub_name = KIND.workload_name(manifest)

    copied = KIND.multikueue_copy(manifest, labels={
        jobframework.MULTIKUEUE_ORIGIN_LABEL: "multikueue",
        jobframework.PREBUILT_WORKLOAD_LABEL: hub_name})

    assert copied["apiVersion"] == "apps/v1"
    assert copied["kind"] == "StatefulSet"
    assert copied["metadata"] == {
        "name": "nginx-statefulset", "namespace": "research",
        "labels": {**manifest["metadata"]["labels"],
                   jobframework.MULTIKUEUE_ORIGIN_LABEL: "multikueue",
                   jobframework.PREBUILT_WORKLOAD_LABEL: hub_name},
        "annotations": {jobframework.MULTIKUEUE_ORIGIN_UID_ANNOTATION: "hub-uid"}}
    assert copied["spec"] == manifest["spec"]
    assert "status" not in copied
    assert KIND.is_multikueue_copy(copied)
    assert not KIND.is_multikueue_copy(manifest)
    # On the worker it has a uid of its own, yet names its Workload as the hub does.
    copied["metadata"]["uid"] = "worker-uid"
    assert KIND.owner_uid(copied) == "hub-uid"
    assert KIND.workload_name(copied) == hub_name
    # The annotation counts only on a copy.
    manifest["metadata"]["annotations"] = {jobframework.MULTIKUEUE_ORIGIN_UID_ANNOTATION: "x"}
    assert KIND.owner_uid(manifest) == "hub-uid"


@pytest.fixture
def multikueue(hub: Cluster, enabled: None) -> Cluster:  # noqa: F811
    """The demo's hub dispatching ``multikueue-queue`` in ``research`` to two workers, with
    no job of its own."""
    Job.objects.all().delete()
    Workload.objects.all().delete()
    return hub


def dispatched(hub: Cluster, t0: datetime) -> tuple[Job, datetime]:  # noqa: F811
    """The sample in the MultiKueue queue, stepped (every controller and reconciler of every
    domain) until a worker runs its three Pods."""
    manifest = sample()
    manifest["metadata"]["labels"][QUEUE] = "multikueue-queue"
    statefulset = services.submit_job(manifest, namespace="research", cluster=hub)
    return statefulset, step_all(t0, until=serving_on_a_worker)


def serving_on_a_worker() -> bool:
    """A worker's StatefulSet counts its three Pods ready."""
    remote = Job.objects.filter(kind="StatefulSet", cluster__role=ClusterRole.WORKER).first()
    return remote is not None and (remote.status or {}).get("readyReplicas") == 3


def step_all(start: datetime, *, until: Callable[[], bool], limit: int = 15) -> datetime:
    """Every second until ``until()`` holds: the StatefulSet controllers of every domain and
    every domain's reconcilers with the hub's dispatch."""
    everything = Everything()
    now = start
    for offset in range(limit):
        if until():
            return now
        now = start + timedelta(seconds=offset)
        statefulsets.sync_all(now=now)
        everything.step(now, rounds=2)
    assert until(), f"not reached in {limit} seconds"
    return now


@pytest.mark.django_db
def test_through_multikueue_the_statefulset_itself_goes_and_the_hub_pods_stay_gated(
    multikueue: Cluster, t0: datetime,
) -> None:
    statefulset, _ = dispatched(multikueue, t0)

    hub_wl = Workload.objects.get(job=statefulset)
    assert hub_wl.cluster.role == ClusterRole.MANAGER
    assert hub_wl.phase == WorkloadPhase.ADMITTED
    worker = Cluster.objects.get(name=hub_wl.cluster_name)
    # The worker has the StatefulSet as Kueue's adapter sends it, and the hub's Workload,
    # under the hub's name, which it builds none besides.
    remote = Job.objects.get(cluster=worker, kind="StatefulSet")
    labels = remote.manifest["metadata"]["labels"]
    assert labels[jobframework.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"
    assert labels[jobframework.PREBUILT_WORKLOAD_LABEL] == hub_wl.name
    assert remote.manifest["metadata"]["annotations"] == {
        jobframework.MULTIKUEUE_ORIGIN_UID_ANNOTATION: str(statefulset.uid)}
    assert remote.uid != statefulset.uid
    (remote_wl,) = Workload.objects.filter(cluster=worker)
    assert (remote_wl.name, remote_wl.job_id) == (hub_wl.name, remote.pk)
    # Its own controller makes the Pods there, members of that Workload's group.
    members = statefulsets.owned_pods(remote)
    assert [job.group_name for job in members] == [hub_wl.name] * 3
    assert ClusterPod.objects.filter(cluster=worker, phase="Running").count() == 3
    # On the hub nothing runs: its Pods stay gated, and no status comes back.
    hub_pods = statefulsets.owned_pods(statefulset)
    assert hub_pods
    assert all(job.suspend and pods.is_gated(job.manifest) for job in hub_pods)
    assert not ClusterPod.objects.filter(cluster=multikueue).exists()
    statefulset.refresh_from_db()
    assert statefulset.status["readyReplicas"] == 0
    remote.refresh_from_db()
    assert remote.status["readyReplicas"] == 3


@pytest.mark.django_db
def test_through_multikueue_eviction_and_scale_to_zero_delete_the_workers_statefulset(
    multikueue: Cluster, t0: datetime,
) -> None:
    statefulset, now = dispatched(multikueue, t0)
    hub_wl = Workload.objects.get(job=statefulset)
    first = Job.objects.get(kind="StatefulSet", cluster__role=ClusterRole.WORKER)

    services.evict_workload(hub_wl, now=now)
    dispatch.sync_dispatch(multikueue.pk, now=now)

    # The worker's StatefulSet went with its Pods and its copy of the Workload.
    assert not Job.objects.filter(cluster__role=ClusterRole.WORKER).exists()
    assert not Workload.objects.filter(cluster__role=ClusterRole.WORKER).exists()
    assert not ClusterPod.objects.filter(cluster_id=first.cluster_id).exists()

    # Its quota back on the hub, readmitted, it is dispatched again and runs once more.
    now = step_all(now + timedelta(seconds=1), until=lambda: serving_on_a_worker())
    hub_wl.refresh_from_db()
    assert hub_wl.phase == WorkloadPhase.ADMITTED
    again = Job.objects.get(kind="StatefulSet", cluster__role=ClusterRole.WORKER)
    assert again.uid != first.uid

    statefulsets.scale_statefulset(statefulset, 0)
    step_all(now + timedelta(seconds=1), until=lambda: not Job.objects.filter(
        cluster__role=ClusterRole.WORKER).exists())

    hub_wl.refresh_from_db()
    assert cond.find(hub_wl.conditions, "QuotaReserved")["reason"] == "OnHold"
    assert not Workload.objects.filter(cluster__role=ClusterRole.WORKER).exists()
    assert not ClusterPod.objects.exists()
