"""apps/v1 Deployment (``scheduling.jobs.deployment`` and the reconciler
``scheduling.deployments``): Kueue queues a Deployment's Pods one by one, each with its own
Workload, while the ReplicaSet controller keeps ``spec.replicas`` of them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from multicluster.core.pods import run_seconds
from multicluster.models import Cluster
from multicluster.models import Pod as ClusterPod
from scheduling import deployments, jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import pod as pods
from scheduling.jobs.deployment import (
    POD_TEMPLATE_HASH_LABEL,
    ChildPod,
    Deployment,
    surge_and_unavailable,
    template_hash,
)
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, at, hub  # noqa: F401 (fixture)

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-deployment.yaml")
KIND = Deployment()
URL = "/api/v1/namespaces/default/jobs/"
QUEUE = jobframework.QUEUE_NAME_LABEL
T = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "deployment"]}


@pytest.fixture
def two_pods(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    """``user-queue`` in ``default`` on a cluster queue with quota for two of the sample's
    pods (100m each)."""
    cq = make_queue("cq", {"cpu": "200m", "memory": "1Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="default",
                                                  slices_enabled=True))


def submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", URL, SAMPLE.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.json()
    return Job.objects.get(kind="Deployment")


def started(client: APIClient, reconcilers: Reconcilers, t0: datetime) -> Job:
    """The sample submitted, its Pods created and admitted as the quota allows."""
    deployment = submit_sample(client)
    deployments.sync_deployment(deployment.pk, now=t0)
    reconcilers.step(t0)
    return deployment


def pod_jobs(deployment: Job) -> list[Job]:
    return deployments.owned_pods(deployment)


def phases(deployment: Job) -> dict[str, str]:
    """Each Pod's workload phase, by pod name."""
    return {job.name: Workload.objects.get(job=job).phase for job in pod_jobs(deployment)}


# --- The object, its webhook and the registry -----------------------------------------------


def test_kueue_sample_is_valid_and_defaulted_as_kueues_webhook_does() -> None:
    manifest = sample()
    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []

    defaulted = KIND.default(manifest)

    template = defaulted["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        pods.SUSPENDING_PARENT_ANNOTATION: "deployment"}
    assert template["metadata"]["labels"] == {
        "app": "nginx", pods.MANAGED_LABEL: "true", QUEUE: "user-queue"}
    assert template["spec"]["restartPolicy"] == "Always"
    assert defaulted["spec"]["replicas"] == 3
    assert not KIND.is_suspended(defaulted)
    assert manifest == sample()  # the input is not changed


def test_refusals_name_their_fields() -> None:
    def changed(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        manifest = sample()
        edit(manifest)
        return manifest

    cases: list[tuple[Callable[[dict[str, Any]], None], str, str]] = [
        (lambda m: m["metadata"]["labels"].update({QUEUE: "Bad_Queue"}),
         f"metadata.labels[{QUEUE}]", "subdomain"),
        (lambda m: m["metadata"].setdefault("annotations", {}).update(
            {jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
         f"metadata.annotations[{jobframework.ELASTIC_JOB_ANNOTATION}]", "not supported"),
        (lambda m: m["spec"].update(replicas=-1), "spec.replicas", "greater than or equal"),
        (lambda m: m["spec"].pop("selector"), "spec.selector", "required"),
        (lambda m: m["spec"]["selector"].update(matchLabels={"app": "other"}),
         "spec.template.metadata.labels", "does not match"),
        (lambda m: m["spec"]["template"]["spec"].update(restartPolicy="Never"),
         "spec.template.spec.restartPolicy", "Always"),
        (lambda m: m["spec"]["template"]["spec"]["containers"][0].pop("image"),
         "spec.template.spec.containers[0].image", "required"),
        (lambda m: m["spec"].update(strategy={"type": "Recreate", "rollingUpdate": {}}),
         "spec.strategy.rollingUpdate", "Recreate"),
        (lambda m: m["spec"].update(strategy={"rollingUpdate": {
            "maxSurge": 0, "maxUnavailable": "0%"}}),
         "spec.strategy.rollingUpdate.maxUnavailable", "may not be 0"),
    ]
    for edit, path, words in cases:
        errors = _refused(changed(edit))
        assert path in errors, (path, errors)
        assert words in " ".join(errors[path]), (path, errors[path])


def test_the_elastic_annotation_is_refused_only_with_workload_slices() -> None:
    manifest = sample()
    manifest["metadata"]["annotations"] = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=False) == []


def test_an_update_may_not_change_the_queue_while_a_replica_is_ready() -> None:
    old = KIND.default(sample())
    moved = copy.deepcopy(old)
    moved["metadata"]["labels"][QUEUE] = "other-queue"
    removed = copy.deepcopy(old)
    del removed["metadata"]["labels"][QUEUE]
    path = f"metadata.labels[{QUEUE}]"

    def update(new: dict[str, Any], ready: int) -> dict[str, list[str]]:
        return errors_to_dict(KIND.validate_on_update(
            old, KIND.default(new), ready_replicas=ready, namespace="default",
            slices_enabled=True))

    assert update(moved, 1)[path] == ["field is immutable"]
    assert update(moved, 0) == {}
    assert update(removed, 0)[path] == ["field is immutable"]
    selector = copy.deepcopy(old)
    selector["spec"]["selector"]["matchLabels"]["tier"] = "web"
    selector["spec"]["template"]["metadata"]["labels"]["tier"] = "web"
    assert update(selector, 0)["spec.selector"] == ["field is immutable"]


def test_deployment_is_a_framework_off_by_default_that_implicitly_enables_pod() -> None:
    assert registry.by_framework("deployment") is registry.by_kind("apps/v1", "Deployment")
    assert "deployment" not in django_settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert registry.check_frameworks(["deployment"]) == []
    config = {"INTEGRATIONS_FRAMEWORKS": ["batch/job", "deployment"]}
    assert registry.implicitly_enabled(config) == ["pod"]
    assert registry.implicitly_enabled({"INTEGRATIONS_FRAMEWORKS": [
        "deployment", "pod"]}) == []

    # Enabled only implicitly, the pod integration takes the Deployment's pods alone.
    child = KIND.pod_for(KIND.default({**sample(), "metadata": {
        **sample()["metadata"], "uid": "u-1", "namespace": "default"}}))
    plain = {**child, "metadata": {**child["metadata"], "annotations": {}}}
    assert registry.enabled_for(child, config)[0] is registry.by_framework("pod")
    integration, errors = registry.enabled_for(plain, config)
    assert integration is None
    assert errors[0].path == "kind"
    assert registry.enabled_for(plain, {"INTEGRATIONS_FRAMEWORKS": ["pod"]})[0] is not None


def test_a_pod_of_the_deployment_carries_the_template_its_hash_and_its_owner() -> None:
    stored = KIND.default({**sample(), "metadata": {**sample()["metadata"], "uid": "u-1",
                                                    "namespace": "default"}})

    child = KIND.pod_for(stored)

    hashed = template_hash(stored["spec"]["template"])
    assert child["metadata"]["generateName"] == f"nginx-deployment-{hashed}-"
    assert child["metadata"]["labels"][POD_TEMPLATE_HASH_LABEL] == hashed
    assert child["metadata"]["labels"][QUEUE] == "user-queue"
    assert child["metadata"]["ownerReferences"][0] == {
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "nginx-deployment",
        "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    assert child["spec"] == stored["spec"]["template"]["spec"]
    assert set(hashed) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert hashed == template_hash(copy.deepcopy(stored["spec"]["template"]))
    assert pods.Pod().validate_on_create(
        {**child, "metadata": {**child["metadata"], "name": "x"}}, namespace="default",
        slices_enabled=True) == []
    # A serving pod runs until deleted on the simulated cluster; a batch one does not.
    assert run_seconds({"spec": child["spec"]}, None, default=60) is None
    assert run_seconds({"spec": {"containers": []}}, None, default=60) == 60
    assert run_seconds({"spec": child["spec"], "metadata": {"annotations": {
        "kueueweb.io/run-seconds": "5"}}}, None, default=60) == 5


# --- The ReplicaSet controller's decisions, pure --------------------------------------------


STORED = KIND.default({**sample(), "metadata": {"name": "web", "namespace": "default",
                                                "uid": "u-1"}})
CURRENT = template_hash(STORED["spec"]["template"])


def child(name: str, minute: int, *, template: str = CURRENT, **state: bool) -> ChildPod:
    return ChildPod(name=name, template_hash=template,
                    created_at=T + timedelta(minutes=minute), **state)


def test_a_pass_creates_the_missing_pods_and_replaces_the_ended_ones() -> None:
    plan = KIND.plan(STORED, {}, [child("a", 0, scheduled=True, running=True, ready=True),
                                  child("b", 1, terminated=True)], now=T)

    assert plan.create == 2
    assert plan.delete == [("b", "Terminated")]
    assert {k: plan.status[k] for k in ("replicas", "readyReplicas", "availableReplicas",
                                        "updatedReplicas", "unavailableReplicas")} == {
        "replicas": 3, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 3,
        "unavailableReplicas": 2}
    assert cond.find(plan.status["conditions"], "Available")["status"] == "False"


def test_a_scale_down_deletes_the_waiting_pods_first_then_the_newest() -> None:
    scaled = {**STORED, "spec": {**STORED["spec"], "replicas": 1}}
    pods_now = [child("old-ready", 0, scheduled=True, running=True, ready=True),
                child("new-ready", 2, scheduled=True, running=True, ready=True),
                child("waiting", 1)]

    plan = KIND.plan(scaled, {}, pods_now, now=T)

    assert plan.create == 0
    assert plan.delete == [("waiting", "ScaleDown"), ("new-ready", "ScaleDown")]
    assert plan.status["replicas"] == 1
    assert cond.find(plan.status["conditions"], "Available")["status"] == "True"


def test_a_new_template_rolls_out_within_surge_and_unavailability() -> None:
    assert surge_and_unavailable(STORED) == (1, 0)  # 25% of 3: one more, none missing
    ready = {"scheduled": True, "running": True, "ready": True}
    old = [child(n, i, template="old", **ready) for i, n in enumerate("abc")]

    first = KIND.plan(STORED, {}, old, now=T)
    assert (first.create, first.delete) == (1, [])

    # The new pod is ready: one old pod may go, and one more new pod come.
    second = KIND.plan(STORED, {}, [*old, child("n1", 5, **ready)], now=T)
    assert (second.create, second.delete) == (1, [("c", "Rollout")])

    recreate = {**STORED, "spec": {**STORED["spec"], "strategy": {"type": "Recreate"}}}
    assert KIND.plan(recreate, {}, old, now=T).delete == [
        ("c", "Rollout"), ("b", "Rollout"), ("a", "Rollout")]
    assert KIND.plan(recreate, {}, old, now=T).create == 3


# --- Submission, quota, scaling, eviction and deletion -------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_a_deployment_is_refused_on_its_kind_unless_enabled(admin_client_api: APIClient) -> None:
    response = admin_client_api.generic("POST", URL, SAMPLE.read_bytes(),
                                        content_type="application/yaml")
    assert response.status_code == 400
    assert "kind" in response.json()
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_kueue_sample_makes_three_pods_two_run_on_quota_for_two_and_serve_on(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    deployment = submit_sample(admin_client_api)
    assert not Workload.objects.exists()  # the Deployment makes none itself

    deployments.sync_deployment(deployment.pk, now=t0)

    children = pod_jobs(deployment)
    assert len(children) == 3
    hashed = template_hash(deployment.manifest["spec"]["template"])
    for job in children:
        assert job.name.startswith(f"nginx-deployment-{hashed}-")
        assert len(job.name) == len(f"nginx-deployment-{hashed}-") + 5
        assert job.suspend
        assert pods.is_gated(job.manifest)
        (wl,) = Workload.objects.filter(job=job)
        assert wl.name.startswith(f"pod-{job.name}-")
        assert wl.queue_name == "user-queue"
        assert wl.maximum_execution_time_seconds is None
        assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
                for ps in wl.pod_sets] == [("main", 1, {"cpu": "100m"})]
    assert Event.objects.filter(object_name="nginx-deployment",
                                reason="SuccessfulCreate").count() == 3

    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=5))

    assert sorted(phases(deployment).values()) == [
        WorkloadPhase.ADMITTED, WorkloadPhase.ADMITTED, WorkloadPhase.PENDING]
    deployment.refresh_from_db()
    assert {k: deployment.status[k] for k in ("replicas", "readyReplicas",
                                              "availableReplicas", "updatedReplicas")} == {
        "replicas": 3, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 3}

    # Serving pods have no run time: an hour later they still run.
    reconcilers.step(t0 + timedelta(hours=1))
    running = [job for job in pod_jobs(deployment) if not job.suspend]
    assert len(running) == 2
    assert all(job.status["phase"] == "Running" for job in running)
    assert ClusterPod.objects.filter(job__in=running, phase="Running").count() == 2


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_scaling_down_frees_quota_and_scaling_up_waits_for_it(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    deployment = started(admin_client_api, reconcilers, t0)
    before = phases(deployment)
    waiting = [name for name, phase in before.items() if phase == WorkloadPhase.PENDING]

    response = admin_client_api.patch(f"{URL}{deployment.name}/?kind=Deployment",
                                      {"spec": {"replicas": 1}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["replicas"] == 1
    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=1))
    reconcilers.step(t0 + timedelta(seconds=1))

    after = phases(deployment)
    # The waiting pod went first, then the newer of the running two.
    assert len(after) == 1
    assert waiting[0] not in after
    assert list(after.values()) == [WorkloadPhase.ADMITTED]
    assert Workload.objects.count() == 1

    response = admin_client_api.post(f"{URL}{deployment.name}/scale/?kind=Deployment",
                                     {"replicas": 3}, format="json")
    assert response.status_code == 200, response.json()
    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=2))
    reconcilers.step(t0 + timedelta(seconds=2))

    # Room for one more: the other new pod waits for quota on its own.
    assert sorted(phases(deployment).values()) == [
        WorkloadPhase.ADMITTED, WorkloadPhase.ADMITTED, WorkloadPhase.PENDING]
    deployment.refresh_from_db()
    assert deployment.manifest["metadata"]["generation"] == 3

    refused = admin_client_api.post(f"{URL}{deployment.name}/scale/?kind=Deployment",
                                    {"replicas": -2}, format="json")
    assert refused.status_code == 400
    assert "spec.replicas" in refused.json()


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_an_evicted_pod_is_deleted_and_replaced_by_a_pod_with_a_new_workload(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    deployment = started(admin_client_api, reconcilers, t0)
    victim = next(job for job in pod_jobs(deployment) if not job.suspend)
    victim_wl = Workload.objects.get(job=victim)

    response = admin_client_api.patch(
        f"/api/v1/namespaces/default/workloads/{victim_wl.name}/",
        {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=10))
    victim.refresh_from_db()
    assert victim.status["phase"] == "Failed"  # Kueue deleted it

    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=11))
    reconcilers.step(t0 + timedelta(seconds=11))

    assert not Job.objects.filter(pk=victim.pk).exists()
    assert not Workload.objects.filter(pk=victim_wl.pk).exists()
    now_running = phases(deployment)
    assert len(now_running) == 3
    assert victim.name not in now_running
    # The pod that waited took the freed quota; the replacement waits in its place.
    assert sorted(now_running.values()) == [
        WorkloadPhase.ADMITTED, WorkloadPhase.ADMITTED, WorkloadPhase.PENDING]
    assert Event.objects.filter(object_name=deployment.name, reason="SuccessfulDelete",
                                message=f"Deleted pod: {victim.name}").exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_the_queue_is_frozen_while_a_replica_is_ready_and_moving_it_replaces_the_pods(
    admin_client_api: APIClient, enabled: None, manager: Cluster, reconcilers: Reconcilers,
    t0: datetime, make_queue: Callable[..., ClusterQueue],
) -> None:
    other = make_queue("other-cq", {"cpu": "1"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="other-queue",
                              cluster_queue=other)
    deployment = submit_sample(admin_client_api)
    deployments.sync_deployment(deployment.pk, now=t0)
    url = f"{URL}{deployment.name}/?kind=Deployment"
    move = {"metadata": {"labels": {QUEUE: "other-queue"}}}

    # No replica is ready yet: the queue may move, and the Pods follow it as a new
    # template rolls out (one more Pod at a time, none of the three missing).
    response = admin_client_api.patch(url, move, format="json")
    assert response.status_code == 200, response.json()
    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=1))
    assert sorted(wl.queue_name for wl in Workload.objects.all()) == [
        "other-queue", "user-queue", "user-queue", "user-queue"]

    for step in range(2, 30, 2):
        reconcilers.step(t0 + timedelta(seconds=step))
        deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=step))
    assert [wl.queue_name for wl in Workload.objects.all()] == ["other-queue"] * 3
    deployment.refresh_from_db()
    assert deployment.status["readyReplicas"] == 3
    assert deployment.status["updatedReplicas"] == 3

    back = {"metadata": {"labels": {QUEUE: "user-queue"}}}
    refused = admin_client_api.patch(url, back, format="json")
    assert refused.status_code == 400
    assert refused.json() == {f"metadata.labels[{QUEUE}]": ["field is immutable"]}


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_deleting_the_deployment_deletes_its_pods_and_their_workloads(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    deployment = started(admin_client_api, reconcilers, t0)
    assert ClusterPod.objects.exists()

    response = admin_client_api.delete(f"{URL}{deployment.name}/?kind=Deployment")

    assert response.status_code == 204
    assert not Job.objects.exists()
    assert not Workload.objects.exists()
    assert not ClusterPod.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("two_pods")
def test_the_job_page_shows_a_serving_deployment_with_ready_of_desired_replicas(
    admin_client_api: APIClient, admin_ui: Any, enabled: None, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    deployment = started(admin_client_api, reconcilers, t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    deployments.sync_deployment(deployment.pk, now=t0 + timedelta(seconds=5))

    page = admin_ui.get(f"/c/{deployment.cluster.name}/namespaces/default/jobs/Deployment/"
                        f"{deployment.name}/")

    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="job-serving"' in body
    assert 'data-ready-replicas="2" data-desired-replicas="3"' in body
    for job in pod_jobs(deployment):
        assert f"/jobs/Pod/{job.name}/" in body


def test_the_replicaset_controller_runs_with_the_periodic_tasks() -> None:
    from kueueweb import reconcile

    entry = django_settings.CELERY_BEAT_SCHEDULE["deployments"]
    assert entry["task"] == reconcile.REPLICAS_ALL_TASK
    assert 0 < entry["schedule"] <= 10


# --- MultiKueue ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_through_multikueue_each_pod_is_dispatched_on_its_own(
    hub: Cluster, t0: datetime, enabled: None,  # noqa: F811
) -> None:
    from multicluster.choices import ClusterRole
    from scheduling import services

    everything = Everything()
    Job.objects.all().delete()
    manifest = sample()
    manifest["metadata"]["labels"][QUEUE] = "multikueue-queue"
    manifest["spec"]["replicas"] = 2
    deployment = services.submit_job(manifest, namespace="research", cluster=hub)
    deployments.sync_deployment(deployment.pk, now=t0)

    everything.step(t0)
    everything.step(at(t0, 3))
    everything.step(at(t0, 6))

    hub_pods = pod_jobs(deployment)
    assert len(hub_pods) == 2
    for job in hub_pods:
        (wl,) = Workload.objects.filter(job=job)
        worker = Cluster.objects.get(name=wl.cluster_name)
        assert worker.role == ClusterRole.WORKER
        remote = Job.objects.get(cluster=worker, kind="Pod", name=job.name)
        assert ClusterPod.objects.filter(job=remote, phase="Running").count() == 1
        job.refresh_from_db()
        assert job.status["phase"] == "Running"
        assert pods.is_gated(job.manifest)  # the hub's pod stays gated
    assert not ClusterPod.objects.filter(cluster=hub).exists()
