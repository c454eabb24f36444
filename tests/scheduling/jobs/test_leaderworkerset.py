"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet (``scheduling.jobs.leaderworkerset`` and the
reconciler ``scheduling.leaderworkersets``): Kueue queues each group of a LeaderWorkerSet as
ONE Workload, created before its Pods, and admits and runs the group's Pods together."""

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

from multicluster.models import Cluster
from multicluster.models import Pod as ClusterPod
from scheduling import jobframework, leaderworkersets, services
from scheduling.choices import QueueState, WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import leaderworkerset as lws
from scheduling.jobs import pod as pods
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload, WorkloadPriorityClass
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples"
          / "serving-workloads" / "sample-leaderworkerset.yaml")
KIND = lws.LeaderWorkerSet()
URL = "/api/v1/namespaces/default/jobs/"
QUEUE = jobframework.QUEUE_NAME_LABEL
NAME = "nginx-leaderworkerset"
T = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def stored(manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sample as submission stores it (uid, namespace, the webhook's defaults)."""
    manifest = manifest or sample()
    return KIND.default({**manifest, "metadata": {**manifest["metadata"], "uid": "u-1",
                                                  "namespace": "default"}})


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], lws.FRAMEWORK_NAME]}


def _user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue],
                cpu: str) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": cpu, "memory": "1Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


@pytest.fixture
def one_group(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    """``user-queue`` with quota for one of the sample's groups (100m + 2 × 200m)."""
    return _user_queue(manager, make_queue, "600m")


@pytest.fixture
def two_groups(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    return _user_queue(manager, make_queue, "1")


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="default",
                                                  slices_enabled=True))


def submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", URL, SAMPLE.read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.json()
    return Job.objects.get(kind="LeaderWorkerSet")


def sync(job: Job, at: datetime) -> None:
    leaderworkersets.sync_leaderworkerset(job.pk, now=at)


def started(client: APIClient, reconcilers: Reconcilers, t0: datetime) -> Job:
    """The sample submitted, its groups' Workloads and Pods created, admitted as the quota
    allows, and the admitted groups' Pods ready."""
    job = submit_sample(client)
    sync(job, t0)
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    sync(job, t0 + timedelta(seconds=5))
    return job


def groups(job: Job) -> dict[int, Workload]:
    return leaderworkersets.group_workloads(job)


def phases(job: Job) -> dict[int, str]:
    return {index: wl.phase for index, wl in sorted(groups(job).items())}


def running_pods(job: Job) -> list[str]:
    return sorted(p.name for p in leaderworkersets.owned_pods(job)
                  if not p.suspend and p.status.get("phase") == "Running")


# --- The object, its webhook and the registry -----------------------------------------------


def test_kueue_sample_is_valid_and_defaulted_as_kueues_webhook_does() -> None:
    manifest = sample()
    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []

    defaulted = KIND.default(manifest)

    group = defaulted["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        assert group[key]["metadata"] == {
            "labels": {QUEUE: "user-queue"},
            "annotations": {pods.SUSPENDING_PARENT_ANNOTATION: lws.FRAMEWORK_NAME,
                            pods.SERVING_ANNOTATION: "true"}}
    assert (defaulted["spec"]["replicas"], group["size"]) == (2, 3)
    assert not KIND.is_suspended(defaulted)
    assert manifest == sample()  # the input is not changed


def test_refusals_name_their_fields() -> None:
    def changed(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        manifest = sample()
        edit(manifest)
        return manifest

    group = "spec.leaderWorkerTemplate"
    cases: list[tuple[Callable[[dict[str, Any]], None], str, str]] = [
        (lambda m: m["metadata"]["labels"].update({QUEUE: "Bad_Queue"}),
         f"metadata.labels[{QUEUE}]", "subdomain"),
        (lambda m: m["metadata"].setdefault("annotations", {}).update(
            {jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
         f"metadata.annotations[{jobframework.ELASTIC_JOB_ANNOTATION}]", "not supported"),
        (lambda m: m["spec"].update(replicas=-1), "spec.replicas", "must be >= 0, got -1"),
        (lambda m: m["spec"].update(replicas=1_000_001), "spec.replicas",
         "must be <= 1000000, got 1000001"),
        (lambda m: m["spec"].update(replicas="2"), "spec.replicas", "integer"),
        (lambda m: m["spec"].pop("leaderWorkerTemplate"), group, "required"),
        (lambda m: m["spec"]["leaderWorkerTemplate"].update(size=0), f"{group}.size",
         "greater than or equal to 1"),
        (lambda m: m["spec"]["leaderWorkerTemplate"].pop("workerTemplate"),
         f"{group}.workerTemplate", "required"),
        (lambda m: m["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
         .pop("image"), f"{group}.leaderTemplate.spec.containers[0].image", "required"),
        (lambda m: m["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"].update(
            restartPolicy="Sometimes"), f"{group}.workerTemplate.spec.restartPolicy",
         "unsupported"),
    ]
    for edit, path, words in cases:
        errors = _refused(changed(edit))
        assert path in errors, (path, errors)
        assert words in " ".join(errors[path]), (path, errors[path])


def test_an_update_keeps_the_queue_while_a_group_is_ready_and_the_group_shapes_always() -> None:
    old = stored()
    path = f"metadata.labels[{QUEUE}]"

    def update(edit: Callable[[dict[str, Any]], None], ready: int = 0) -> dict[str, list[str]]:
        new = copy.deepcopy(old)
        edit(new)
        return errors_to_dict(KIND.validate_on_update(
            old, KIND.default(new), ready_replicas=ready, namespace="default",
            slices_enabled=True))

    def move(m: dict[str, Any]) -> None:
        m["metadata"]["labels"][QUEUE] = "other-queue"

    def worker(m: dict[str, Any]) -> dict[str, Any]:
        template: dict[str, Any] = m["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
        return template

    assert update(move, ready=1)[path] == ["field is immutable"]
    assert update(move) == {}
    assert update(lambda m: m["metadata"]["labels"].pop(QUEUE))[path] == ["field is immutable"]
    assert update(lambda m: m["spec"]["leaderWorkerTemplate"].update(size=4)) == {
        "spec.leaderWorkerTemplate.size": ["field is immutable"]}
    requests = (
        "spec.leaderWorkerTemplate.workerTemplate.spec.containers[0].resources.requests.cpu")
    assert update(lambda m: worker(m)["containers"][0]["resources"]["requests"].update(
        cpu="300m")) == {requests: ["field is immutable"]}
    assert update(lambda m: m["spec"]["leaderWorkerTemplate"].pop("leaderTemplate")) == {
        "spec.leaderWorkerTemplate.leaderTemplate": ["field is immutable"]}
    # The image is no part of a pod's role: it may change, as may the number of groups.
    assert update(lambda m: worker(m)["containers"][0].update(image="nginx:2")) == {}
    assert update(lambda m: m["spec"].update(replicas=5), ready=2) == {}


def test_leaderworkerset_is_a_framework_off_by_default_that_implicitly_enables_pod() -> None:
    framework = lws.FRAMEWORK_NAME
    assert registry.by_framework(framework) is registry.by_kind(
        "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    assert framework not in django_settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert registry.check_frameworks([framework]) == []
    config = {"INTEGRATIONS_FRAMEWORKS": ["batch/job", framework]}
    assert registry.implicitly_enabled(config) == ["pod"]

    leader = KIND.pod_for(stored(), 0, 0)
    assert registry.enabled_for(leader, config)[0] is registry.by_framework("pod")
    plain = {**leader, "metadata": {**leader["metadata"], "annotations": {}}}
    assert registry.enabled_for(plain, config)[0] is None


def test_each_group_has_its_workload_name_and_the_pod_sets_of_its_templates() -> None:
    manifest = stored()

    assert lws.group_workload_name(manifest, 0) == jobframework.workload_name_for_owner(
        f"{NAME}-0", "u-1", kind="LeaderWorkerSet", group="leaderworkerset.x-k8s.io")
    assert lws.group_workload_name(manifest, 0).startswith(f"leaderworkerset-{NAME}-0-")
    assert lws.group_workload_name(manifest, 1) != lws.group_workload_name(manifest, 0)
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in KIND.pod_sets(manifest)] == [
        ("leader", 1, {"cpu": "100m"}), ("worker", 2, {"cpu": "200m"})]
    assert KIND.workload_annotations(manifest, 1) == {
        jobframework.constants.JOB_OWNER_GVK_ANNOTATION:
            "leaderworkerset.x-k8s.io/v1, Kind=LeaderWorkerSet",
        jobframework.constants.JOB_OWNER_NAME_ANNOTATION: NAME,
        jobframework.constants.COMPONENT_WORKLOAD_INDEX_ANNOTATION: "1",
        pods.IS_GROUP_WORKLOAD_ANNOTATION: "true"}

    without_leader = copy.deepcopy(sample())
    del without_leader["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert [(ps["name"], ps["count"]) for ps in KIND.pod_sets(stored(without_leader))] == [
        ("main", 3)]
    assert {KIND.pod_for(stored(without_leader), 0, worker)["metadata"]["annotations"][
        pods.ROLE_HASH_ANNOTATION] for worker in range(3)} == {"main"}


def test_a_groups_pods_are_named_as_lws_names_them_and_stamped_as_its_pod_group() -> None:
    manifest = stored()
    group_name = lws.group_workload_name(manifest, 1)

    leader, worker = KIND.pod_for(manifest, 1, 0), KIND.pod_for(manifest, 1, 2)

    assert (leader["metadata"]["name"], worker["metadata"]["name"]) == (
        f"{NAME}-1", f"{NAME}-1-2")
    for pod, role, template in ((leader, "leader", "leaderTemplate"),
                                (worker, "worker", "workerTemplate")):
        metadata = pod["metadata"]
        assert metadata["labels"][pods.GROUP_NAME_LABEL] == group_name
        assert metadata["labels"][lws.GROUP_INDEX_LABEL] == "1"
        assert metadata["labels"][QUEUE] == "user-queue"
        assert metadata["annotations"][pods.GROUP_TOTAL_COUNT_ANNOTATION] == "3"
        assert metadata["annotations"][pods.ROLE_HASH_ANNOTATION] == role
        assert metadata["annotations"][pods.SERVING_ANNOTATION] == "true"
        assert metadata["ownerReferences"][0]["uid"] == "u-1"
        assert pod["spec"]["containers"] == manifest["spec"]["leaderWorkerTemplate"][
            template]["spec"]["containers"]
    assert lws.LEADER_NAME_ANNOTATION not in leader["metadata"]["annotations"]
    assert worker["metadata"]["annotations"][lws.LEADER_NAME_ANNOTATION] == f"{NAME}-1"
    assert pods.Pod().validate_on_create(worker, namespace="default", slices_enabled=True) == []


def test_a_pass_makes_each_groups_workload_and_pods_and_replaces_the_ended_ones() -> None:
    manifest = stored()
    ready = [lws.GroupPod(f"{NAME}-0", 0, ready=True),
             lws.GroupPod(f"{NAME}-0-1", 0, ready=True),
             lws.GroupPod(f"{NAME}-0-2", 0, terminated=True),
             lws.GroupPod(f"{NAME}-2", 2)]

    plan = KIND.plan(manifest, {}, ready, [0, 2], now=T)

    assert plan.create_workloads == [1]
    assert plan.delete_workloads == [2]
    assert plan.delete_pods == [(f"{NAME}-0-2", "Terminated"), (f"{NAME}-2", "ScaleDown")]
    assert [p["metadata"]["name"] for p in plan.create_pods] == [
        f"{NAME}-0-2", f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"]
    assert (plan.status["replicas"], plan.status["readyReplicas"]) == (2, 0)


def test_a_multikueue_copy_names_its_groups_after_the_hubs_set_and_makes_no_workloads() -> None:
    hub_set = stored()
    copy_ = KIND.multikueue_object(hub_set, origin="hub-a")
    copy_["metadata"]["uid"] = "u-worker"

    assert copy_["metadata"]["labels"][lws.MULTIKUEUE_ORIGIN_LABEL] == "hub-a"
    assert copy_["metadata"]["annotations"][lws.MULTIKUEUE_ORIGIN_UID_ANNOTATION] == "u-1"
    assert copy_["spec"] == hub_set["spec"]
    assert lws.is_multikueue_remote(copy_)
    assert not lws.is_multikueue_remote(hub_set)
    assert [lws.group_workload_name(copy_, i) for i in (0, 1)] == [
        lws.group_workload_name(hub_set, i) for i in (0, 1)]
    assert KIND.expected_workload_count(copy_) == 2
    assert [KIND.workload_index(KIND.workload_annotations(hub_set, i)) for i in (0, 1)] == [0, 1]
    assert KIND.workload_index({}) == -1

    # Group 1's Workload is not there yet: none is made, and only group 0 gets its Pods.
    plan = KIND.plan(copy_, {}, [], [0], now=T)

    assert plan.create_workloads == []
    assert [p["metadata"]["name"] for p in plan.create_pods] == [
        f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"]
    assert {p["metadata"]["labels"][pods.GROUP_NAME_LABEL] for p in plan.create_pods} == {
        lws.group_workload_name(hub_set, 0)}


# --- Through the API, on the simulated cluster ----------------------------------------------


@pytest.mark.django_db
def test_a_leaderworkerset_is_refused_on_its_kind_unless_enabled(
    admin_client_api: APIClient,
) -> None:
    response = admin_client_api.generic("POST", URL, SAMPLE.read_bytes(),
                                        content_type="application/yaml")
    assert response.status_code == 400
    assert "kind" in response.json()
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("one_group")
def test_kueue_sample_makes_two_group_workloads_and_quota_for_one_runs_one(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = submit_sample(admin_client_api)
    assert not Workload.objects.exists()  # made by the reconciler, not at submission

    sync(job, t0)

    workloads = groups(job)
    assert sorted(workloads) == [0, 1]
    for index, wl in workloads.items():
        assert wl.name == lws.group_workload_name(job.manifest, index)
        assert wl.job_id == job.pk  # prebuilt for the set, run through its group's pods
        assert wl.queue_name == "user-queue"
        assert wl.annotations[pods.IS_GROUP_WORKLOAD_ANNOTATION] == "true"
        assert wl.annotations[jobframework.constants.COMPONENT_WORKLOAD_INDEX_ANNOTATION] == str(
            index)
        assert wl.labels[jobframework.JOB_UID_LABEL] == str(job.uid)
        assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
                for ps in wl.pod_sets] == [("leader", 1, {"cpu": "100m"}),
                                           ("worker", 2, {"cpu": "200m"})]
    children = leaderworkersets.owned_pods(job)
    assert sorted(p.name for p in children) == [
        f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2", f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"]
    assert all(p.suspend and pods.is_gated(p.manifest) for p in children)
    assert Workload.objects.count() == 2  # the pods joined their groups' Workloads
    assert Event.objects.filter(object_name=NAME, reason="CreatedWorkload").count() == 2

    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    sync(job, t0 + timedelta(seconds=5))

    assert sorted(phases(job).values()) == [WorkloadPhase.ADMITTED, WorkloadPhase.PENDING]
    admitted = next(i for i, wl in groups(job).items() if wl.phase == WorkloadPhase.ADMITTED)
    assert running_pods(job) == [f"{NAME}-{admitted}", f"{NAME}-{admitted}-1",
                                 f"{NAME}-{admitted}-2"]
    job.refresh_from_db()
    assert (job.status["replicas"], job.status["readyReplicas"]) == (2, 1)

    # A serving group never finishes: an hour later its pods still run.
    reconcilers.step(t0 + timedelta(hours=1))
    assert len(running_pods(job)) == 3
    assert groups(job)[admitted].phase == WorkloadPhase.ADMITTED


@pytest.mark.django_db
@pytest.mark.usefixtures("one_group")
def test_scaling_up_adds_groups_that_wait_and_scaling_down_frees_their_quota(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = started(admin_client_api, reconcilers, t0)
    url = f"{URL}{NAME}/?kind=LeaderWorkerSet"

    response = admin_client_api.post(f"{URL}{NAME}/scale/?kind=LeaderWorkerSet",
                                      {"replicas": 3}, format="json")
    assert response.status_code == 200, response.json()
    sync(job, t0 + timedelta(seconds=6))
    reconcilers.step(t0 + timedelta(seconds=6))
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.PENDING,
                           2: WorkloadPhase.PENDING}
    assert len(leaderworkersets.owned_pods(job)) == 9

    # Down to none: every group goes, and the quota of the running one with it.
    response = admin_client_api.patch(url, {"spec": {"replicas": 0}}, format="json")
    assert response.status_code == 200, response.json()
    sync(job, t0 + timedelta(seconds=7))
    assert groups(job) == {}
    assert leaderworkersets.owned_pods(job) == []
    assert not ClusterPod.objects.exists()
    assert Event.objects.filter(object_name=NAME, reason="SuccessfulDelete",
                                message=f"Deleted pod: {NAME}-0").exists()

    response = admin_client_api.patch(url, {"spec": {"replicas": 2}}, format="json")
    assert response.status_code == 200, response.json()
    sync(job, t0 + timedelta(seconds=8))
    reconcilers.step(t0 + timedelta(seconds=8))
    reconcilers.step(t0 + timedelta(seconds=11))
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.PENDING}
    assert running_pods(job) == [f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"]

    refused = admin_client_api.post(f"{URL}{NAME}/scale/?kind=LeaderWorkerSet",
                                    {"replicas": -1}, format="json")
    assert refused.status_code == 400
    assert "spec.replicas" in refused.json()
    size = admin_client_api.patch(url, {"spec": {"leaderWorkerTemplate": {"size": 4}}},
                                  format="json")
    assert size.status_code == 400
    assert size.json() == {"spec.leaderWorkerTemplate.size": ["field is immutable"]}


@pytest.mark.django_db
@pytest.mark.usefixtures("two_groups")
def test_an_evicted_group_loses_its_pods_which_are_recreated_and_run_after_readmission(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = started(admin_client_api, reconcilers, t0)
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.ADMITTED}
    victim = groups(job)[0]
    members = {p.name: p.pk for p in leaderworkersets.owned_pods(job)
               if p.name.startswith(f"{NAME}-0")}

    services.evict_workload(victim, now=t0 + timedelta(seconds=6))
    reconcilers.step(t0 + timedelta(seconds=7))

    victim.refresh_from_db()
    assert victim.phase == WorkloadPhase.PENDING
    assert victim.queue_state == QueueState.INADMISSIBLE
    assert cond.find(victim.conditions, jobframework.WAITING_FOR_REPLACEMENT_PODS)[
        "status"] == "True"
    for pk in members.values():
        stopped = Job.objects.get(pk=pk)
        assert stopped.status["phase"] == "Failed"
        assert not ClusterPod.objects.filter(job=stopped).exists()
    assert len(running_pods(job)) == 3  # the other group runs on

    sync(job, t0 + timedelta(seconds=8))

    # New pods of the same names, gated, joined the same Workload, which is queued again.
    assert groups(job)[0].pk == victim.pk
    replaced = {p.name: p for p in leaderworkersets.owned_pods(job) if p.name in members}
    assert sorted(replaced) == sorted(members)
    assert all(p.pk not in members.values() and pods.is_gated(p.manifest)
               for p in replaced.values())
    victim.refresh_from_db()
    assert victim.queue_state == QueueState.ACTIVE

    reconcilers.step(t0 + timedelta(seconds=9))
    reconcilers.step(t0 + timedelta(seconds=15))

    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.ADMITTED}
    assert len(running_pods(job)) == 6
    sync(job, t0 + timedelta(seconds=15))
    job.refresh_from_db()
    assert job.status["readyReplicas"] == 2


@pytest.mark.django_db
@pytest.mark.usefixtures("two_groups")
def test_deleting_the_leaderworkerset_deletes_its_pods_and_workloads(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = started(admin_client_api, reconcilers, t0)
    # A group whose pods are gone keeps its Workload, the set's, until the set goes.
    for pod in leaderworkersets.owned_pods(job):
        if pod.name.startswith(f"{NAME}-1"):
            services.delete_job(pod)
    assert groups(job)[1].job_id == job.pk
    assert ClusterPod.objects.exists()

    response = admin_client_api.delete(f"{URL}{NAME}/?kind=LeaderWorkerSet")

    assert response.status_code == 204
    assert not Job.objects.exists()
    assert not Workload.objects.exists()
    assert not ClusterPod.objects.exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("one_group")
def test_the_job_page_shows_a_serving_leaderworkerset_with_ready_of_desired_replicas(
    admin_client_api: APIClient, admin_ui: Any, enabled: None, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = started(admin_client_api, reconcilers, t0)

    page = admin_ui.get(f"/c/{job.cluster.name}/namespaces/default/jobs/LeaderWorkerSet/"
                        f"{NAME}/")

    assert page.status_code == 200
    body = page.content.decode()
    assert 'id="job-serving"' in body
    assert 'data-ready-replicas="1" data-desired-replicas="2"' in body
    assert "groups of 3 Pods, each group queued as one Workload" in body
    for child in leaderworkersets.owned_pods(job):
        assert f"/jobs/Pod/{child.name}/" in body


@pytest.mark.django_db
@pytest.mark.usefixtures("one_group")
def test_a_queue_moved_before_any_group_is_ready_moves_the_waiting_groups_workloads(
    admin_client_api: APIClient, enabled: None, manager: Cluster, t0: datetime,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    from scheduling import tasks

    other = make_queue("other-cq", {"cpu": "1"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="other-queue",
                              cluster_queue=other)
    job = submit_sample(admin_client_api)
    tasks.replicas_task(job.pk)  # the task the submission asks for
    assert [wl.queue_name for wl in groups(job).values()] == ["user-queue"] * 2

    response = admin_client_api.patch(f"{URL}{NAME}/?kind=LeaderWorkerSet",
                                      {"metadata": {"labels": {QUEUE: "other-queue"}}},
                                      format="json")
    assert response.status_code == 200, response.json()
    tasks.replicas_all_task()

    assert [wl.queue_name for wl in groups(job).values()] == ["other-queue"] * 2
    assert {wl.local_queue.name for wl in groups(job).values() if wl.local_queue} == {
        "other-queue"}


@pytest.mark.django_db
@pytest.mark.usefixtures("one_group")
def test_a_group_workload_refused_is_a_warning_on_the_set_and_made_on_a_later_pass(
    admin_client_api: APIClient, enabled: None, manager: Cluster, t0: datetime,
) -> None:
    high = WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    manifest = sample()
    manifest["metadata"]["labels"][jobframework.PRIORITY_CLASS_LABEL] = "high"
    response = admin_client_api.post(URL, manifest, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(kind="LeaderWorkerSet")
    high.delete()

    sync(job, t0)

    assert groups(job) == {}
    warnings = Event.objects.filter(object_name=NAME, reason="FailedCreateWorkload")
    assert warnings.count() == 2
    assert f"metadata.labels[{jobframework.PRIORITY_CLASS_LABEL}]" in warnings[0].message

    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    sync(job, t0 + timedelta(seconds=1))

    assert {wl.priority for wl in groups(job).values()} == {100}
    assert sorted(groups(job)) == [0, 1]


# --- Rolling updates ------------------------------------------------------------------------


def _new_image(job: Job, image: str, rollout: dict[str, Any] | None = None) -> dict[str, Any]:
    """A merge patch giving both templates' containers ``image`` (and the rollout
    strategy, if any)."""
    group = copy.deepcopy(job.manifest["spec"]["leaderWorkerTemplate"])
    for key in ("leaderTemplate", "workerTemplate"):
        for container in group[key]["spec"]["containers"]:
            container["image"] = image
    spec: dict[str, Any] = {"leaderWorkerTemplate": group}
    if rollout is not None:
        spec["rolloutStrategy"] = {"rollingUpdateConfiguration": rollout}
    return {"spec": spec}


def _images(job: Job, index: int) -> set[str]:
    return {c["image"] for p in leaderworkersets.owned_pods(job)
            if p.manifest["metadata"]["labels"][lws.GROUP_INDEX_LABEL] == str(index)
            for c in p.manifest["spec"]["containers"]}


def _ready_groups(job: Job) -> int:
    job.refresh_from_db()
    return int(job.status["readyReplicas"])


@pytest.mark.django_db
@pytest.mark.usefixtures("two_groups")
def test_an_image_change_rolls_the_groups_from_the_highest_each_back_on_quota(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = started(admin_client_api, reconcilers, t0)
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.ADMITTED}
    before = {index: wl.pk for index, wl in groups(job).items()}
    new = "registry.k8s.io/nginx-slim:0.28"
    response = admin_client_api.patch(f"{URL}{NAME}/?kind=LeaderWorkerSet",
                                      _new_image(job, new), format="json")
    assert response.status_code == 200, response.json()

    # The highest group goes first, whole, and its Workload is built again: it waits for
    # quota while group 0 keeps running the old image (one group down at most).
    t = t0 + timedelta(seconds=10)
    sync(job, t)
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.PENDING}
    rebuilt = groups(job)[1]
    assert rebuilt.pk != before[1]
    assert groups(job)[0].pk == before[0]
    assert {c["image"] for ps in rebuilt.pod_sets
            for c in ps["template"]["spec"]["containers"]} == {new}
    assert _images(job, 1) == {new}
    assert _images(job, 0) == {"registry.k8s.io/nginx-slim:0.27"}
    assert running_pods(job) == [f"{NAME}-0", f"{NAME}-0-1", f"{NAME}-0-2"]
    assert _ready_groups(job) == 1
    assert Event.objects.filter(object_name=NAME, reason="SuccessfulDelete",
                                message=f"Deleted pod: {NAME}-1").exists()

    # Group 0 waits until group 1 runs again on quota.
    sync(job, t + timedelta(seconds=1))
    assert groups(job)[0].pk == before[0]
    assert _images(job, 0) != {new}
    reconcilers.step(t + timedelta(seconds=2))
    reconcilers.step(t + timedelta(seconds=7))
    sync(job, t + timedelta(seconds=7))
    assert groups(job)[1].phase == WorkloadPhase.ADMITTED
    assert _images(job, 0) == {new}  # group 1 ready: group 0 is recreated now
    assert groups(job)[0].pk != before[0]
    assert phases(job) == {0: WorkloadPhase.PENDING, 1: WorkloadPhase.ADMITTED}
    assert _ready_groups(job) == 1

    reconcilers.step(t + timedelta(seconds=8))
    reconcilers.step(t + timedelta(seconds=13))
    sync(job, t + timedelta(seconds=13))
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.ADMITTED}
    assert len(running_pods(job)) == 6
    job.refresh_from_db()
    assert (job.status["replicas"], job.status["updatedReplicas"],
            job.status["readyReplicas"]) == (2, 2, 2)

    # The shape stays frozen while managed: a new resource request is refused.
    patch = _new_image(job, new)
    patch["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0][
        "resources"] = {"requests": {"cpu": "300m"}}
    refused = admin_client_api.patch(f"{URL}{NAME}/?kind=LeaderWorkerSet", patch, format="json")
    assert refused.status_code == 400
    assert any(key.startswith("spec.leaderWorkerTemplate.workerTemplate.spec")
               for key in refused.json())


@pytest.mark.django_db
@pytest.mark.usefixtures("two_groups")
def test_a_surge_group_gets_a_workload_that_waits_for_quota(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = started(admin_client_api, reconcilers, t0)
    response = admin_client_api.patch(
        f"{URL}{NAME}/?kind=LeaderWorkerSet",
        _new_image(job, "registry.k8s.io/nginx-slim:0.28",
                   {"maxSurge": 1, "maxUnavailable": 0}), format="json")
    assert response.status_code == 200, response.json()

    t = t0 + timedelta(seconds=10)
    sync(job, t)
    reconcilers.step(t)
    reconcilers.step(t + timedelta(seconds=5))
    sync(job, t + timedelta(seconds=5))
    # A third group beyond replicas, with its own Workload, which the quota of two groups
    # cannot admit; none of the two may go before it is ready.
    assert phases(job) == {0: WorkloadPhase.ADMITTED, 1: WorkloadPhase.ADMITTED,
                           2: WorkloadPhase.PENDING}
    assert groups(job)[2].name == lws.group_workload_name(job.manifest, 2)
    assert len(running_pods(job)) == 6
    assert all(p.suspend for p in leaderworkersets.owned_pods(job)
               if p.name.startswith(f"{NAME}-2"))
    job.refresh_from_db()
    assert (job.status["replicas"], job.status["updatedReplicas"]) == (3, 0)


def test_a_surge_rollout_keeps_its_extra_workload_until_every_group_is_updated() -> None:
    manifest = stored()
    manifest["spec"]["rolloutStrategy"] = {"rollingUpdateConfiguration": {"maxSurge": 1}}
    old = "old-revision"
    current = lws.revision(manifest)

    def group(index: int, rev: str, ready: bool = True) -> list[lws.GroupPod]:
        return [lws.GroupPod(f"{NAME}-{index}" + (f"-{w}" if w else ""), index, ready=ready,
                             revision=rev) for w in range(3)]

    # Started: the surge group and its Workload; with maxUnavailable 1 the highest old
    # group goes too, its Workload rebuilt.
    plan = KIND.plan(manifest, {}, group(0, old) + group(1, old), [0, 1], now=T)
    assert plan.status["replicas"] == 3
    assert plan.create_workloads == [1, 2]
    assert plan.delete_workloads == [1]
    assert {name for name, reason in plan.delete_pods if reason == "GroupUpdate"} == {
        f"{NAME}-1", f"{NAME}-1-1", f"{NAME}-1-2"}

    # The last old group is recreated: its Workload rebuilt, the surge one kept.
    plan = KIND.plan(manifest, {}, group(0, old) + group(1, current) + group(2, current),
                     [0, 1, 2], now=T)
    assert plan.create_workloads == [0]
    assert plan.delete_workloads == [0]

    # All updated and ready: the surge group goes with its Workload.
    plan = KIND.plan(manifest, {}, group(0, current) + group(1, current) + group(2, current),
                     [0, 1, 2], now=T)
    assert plan.delete_workloads == [2]
    assert plan.create_workloads == []
    assert {name for name, reason in plan.delete_pods if reason == "ScaleDown"} == {
        f"{NAME}-2", f"{NAME}-2-1", f"{NAME}-2-2"}
    assert (plan.status["replicas"], plan.status["updatedReplicas"]) == (2, 2)
    assert lws.rollout(manifest) == (1, 1)
    bad = {**manifest, "spec": {**manifest["spec"], "rolloutStrategy": {
        "rollingUpdateConfiguration": {"maxSurge": "x"}}}}
    assert "spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge" in _refused(bad)
