"""AppWrapper → Workload, and an AppWrapper's run on the simulated cluster and through
MultiKueue, as Kueue's AppWrapper integration and the AppWrapper controller do it
(``scheduling.jobs.appwrapper``)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.models import Cluster, Pod
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import appwrapper
from scheduling.models import Event, Job, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, at, hub  # noqa: F401 (fixture)
from tests.scheduling.jobs.scenarios import (  # noqa: F401 (fixture)
    deactivate_then_reactivate,
    refused_unless_enabled,
    submit_sample,
    user_queue,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
SAMPLE = EXAMPLES / "appwrapper-pytorch-sample.yaml"
KIND = appwrapper.AppWrapper()
FRAMEWORK = "workload.codeflare.dev/appwrapper"


def sample(file: str = "appwrapper-pytorch-sample.yaml") -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / file).read_text())
    return manifest


def container(cpu: str = "1", run: str = "10") -> dict[str, Any]:
    return {"name": "c", "image": "busybox", "command": ["sleep", run],
            "resources": {"requests": {"cpu": cpu}}}


def make_appwrapper(*components: dict[str, Any], name: str = "aw",
                    queue: str = "user-queue", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: queue}},
        "spec": {"components": list(components), **spec},
    }


def job_component(parallelism: int = 1, *, cpu: str = "1", run: str = "10") -> dict[str, Any]:
    return {"template": {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                         "spec": {"parallelism": parallelism, "completions": parallelism,
                                  "template": {"spec": {"restartPolicy": "Never",
                                                        "containers": [container(cpu, run)]}}}}}


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], FRAMEWORK]}


# --- Pod sets ------------------------------------------------------------------------------


@pytest.mark.parametrize(("file", "pod_sets"), [
    ("appwrapper-pytorch-sample.yaml", [("sample-appwrapper-pytorch-job-0", 1, {"cpu": "1"}),
                                        ("sample-appwrapper-pytorch-job-1", 1, {"cpu": "1"})]),
    ("appwrapper-deployment-sample.yaml", [("sample-appwrapper-deployment-0", 3,
                                            {"cpu": "100m"})]),
    ("appwrapper-leaderworkerset-sample.yaml", [("sample-appwrapper-lws-0", 2, {"cpu": "100m"}),
                                                ("sample-appwrapper-lws-1", 3,
                                                 {"cpu": "200m"})]),
])
def test_kueue_samples_are_valid_with_the_pod_sets_kueue_derives(
    file: str, pod_sets: list[tuple[str, int, dict[str, str]]],
) -> None:
    manifest = sample(file)

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in KIND.pod_sets(manifest, partial_admission=True)] == pod_sets


def test_pod_sets_are_inferred_for_known_kinds_and_named_by_index() -> None:
    jobset = {"template": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                           "spec": {"replicatedJobs": [
                               {"name": "w", "replicas": 2, "template": {"spec": {
                                   "parallelism": 3, "completions": 2,
                                   "template": {"spec": {"containers": [container()]}}}}}]}}}
    ray = {"template": {"apiVersion": "ray.io/v1", "kind": "RayCluster", "spec": {
        "headGroupSpec": {"template": {"spec": {"containers": [container()]}}},
        "workerGroupSpecs": [{"groupName": "g", "replicas": 4,
                              "template": {"spec": {"containers": [container("2")]}}}]}}}
    manifest = make_appwrapper(job_component(3), jobset, ray, name="Mixed")

    pod_sets = KIND.pod_sets(manifest, partial_admission=True)

    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [
        ("mixed-0", 3), ("mixed-1", 4), ("mixed-2", 1), ("mixed-3", 4)]
    assert pod_sets[3]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "2"}}
    assert [path for _, path in KIND.pod_templates(manifest)] == [
        "spec.components[0].template.spec.template",
        "spec.components[1].template.spec.replicatedJobs[0].template.spec.template",
        "spec.components[2].template.spec.headGroupSpec.template",
        "spec.components[2].template.spec.workerGroupSpecs[0].template",
    ]


# --- Validation ----------------------------------------------------------------------------


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    nested = {"template": {"apiVersion": "workload.codeflare.dev/v1beta2", "kind": "AppWrapper",
                           "spec": {"components": []}}}
    elsewhere = job_component()
    elsewhere["template"]["metadata"]["namespace"] = "team-b"
    bad_path = {**job_component(), "podSets": [{"path": "template.spec.nothing"}]}
    no_path = {**job_component(), "podSets": [{"replicas": 1}]}
    wrong_count = {**job_component(2), "podSets": [{"path": "template.spec.template",
                                                     "replicas": 3}]}
    duplicate = {"template": {"apiVersion": "example.com/v1", "kind": "Thing",
                              "spec": {"template": {"spec": {"containers": [container()]}}}},
                 "podSets": [{"path": "template.spec.template"},
                             {"path": "template.spec.template"}]}
    negative = {**duplicate, "podSets": [{"path": "template.spec.template", "replicas": -1}]}
    not_an_object = {"template": {"kind": "Job"}}
    bad_replicas = {"template": {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {
        "replicas": "three", "template": {"spec": {"containers": [container()]}}}}}
    no_image = job_component()
    del no_image["template"]["spec"]["template"]["spec"]["containers"][0]["image"]
    unknown = {"template": {"apiVersion": "example.com/v1", "kind": "Thing", "spec": {}}}
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_appwrapper(), "spec.components", "components contains no podspecs"),
        (make_appwrapper(unknown), "spec.components", "components contains no podspecs"),
        (make_appwrapper(*[job_component() for _ in range(9)]), "spec.components",
         "components contains 9 podspecs; at most 8 are allowed"),
        (make_appwrapper(nested), "spec.components[0].template",
         "Nested AppWrappers are forbidden"),
        (make_appwrapper(elsewhere), "spec.components[0].template.metadata.namespace",
         "cannot create objects in other namespaces"),
        (make_appwrapper(bad_path), "spec.components[0].podSets[0].path",
         "does not refer to a v1.PodSpecTemplate"),
        (make_appwrapper(no_path), "spec.components[0].podSets[0].path",
         "podspec must specify path"),
        (make_appwrapper(wrong_count), "spec.components[0].podSets",
         "replica count 3 differs from inferred count 2"),
        (make_appwrapper(duplicate), "spec.components[0].podSets",
         "multiple DeclaredPodSets with path 'template.spec.template'"),
        (make_appwrapper(negative), "spec.components[0].podSets[0].replicas",
         "greater than or equal to 0"),
        (make_appwrapper(not_an_object), "spec.components[0].template.apiVersion",
         "is required"),
        (make_appwrapper(bad_replicas), "spec.components[0].template",
         "error inferring PodSets"),
        (make_appwrapper(no_image),
         "spec.components[0].template.spec.template.spec.containers[0].image", "is required"),
        (make_appwrapper(job_component(), name="a" * 62), "metadata.name",
         "pod set name"),
        (make_appwrapper(job_component(), suspend="yes"), "spec.suspend", "must be a boolean"),
        (make_appwrapper(job_component(), queue="Not A Queue"),
         f"metadata.labels[{jobframework.QUEUE_NAME_LABEL}]", ""),
        ({**make_appwrapper(job_component()), "apiVersion": "workload.codeflare.dev/v1beta1"},
         "apiVersion", "workload.codeflare.dev/v1beta2"),
    ]

    for manifest, path, message in cases:
        errors = _refused(manifest)
        assert path in errors, (path, errors)
        assert any(message in text for text in errors[path]), (path, errors[path])


# --- Run, restore, finish ------------------------------------------------------------------


def test_run_records_pod_set_infos_the_controller_injects_and_stop_clears_them() -> None:
    manifest = sample()
    manifest["spec"]["suspend"] = True
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    infos = [
        jobframework.PodSetInfo("sample-appwrapper-pytorch-job-0", 1,
                                node_selector={"pool": "cpu"},
                                labels={jobframework.PODSET_LABEL: "sample-appwrapper-pytorch-job-0"}),
        jobframework.PodSetInfo("sample-appwrapper-pytorch-job-1", 1,
                                node_selector={"pool": "gpu"},
                                tolerations=[{"key": "gpu", "operator": "Exists"}]),
    ]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    assert running["spec"]["components"][0]["podSetInfos"] == [
        {"labels": {jobframework.PODSET_LABEL: "sample-appwrapper-pytorch-job-0"},
         "nodeSelector": {"pool": "cpu"}},
        {"nodeSelector": {"pool": "gpu"},
         "tolerations": [{"key": "gpu", "operator": "Exists"}]}]
    [created] = appwrapper.injected_components(running)
    replicas = created["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["template"]["spec"]["nodeSelector"] == {"pool": "cpu"}
    assert replicas["Worker"]["template"]["spec"]["nodeSelector"] == {"pool": "gpu"}
    assert replicas["Worker"]["template"]["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Exists"}]
    assert replicas["Worker"]["template"]["metadata"]["labels"] == {
        appwrapper.APPWRAPPER_LABEL: "sample-appwrapper-pytorch-job"}
    # The templates of the AppWrapper itself are left as they were.
    assert KIND.pod_sets(running, partial_admission=True) == pod_sets

    restored = KIND.restore_pod_sets_info(KIND.suspend(running), pod_sets)

    assert restored["spec"] == manifest["spec"]


def test_finished_reads_the_phase_once_failed_resources_are_gone() -> None:
    assert KIND.finished({"phase": "Running"}) is None
    assert KIND.finished({"phase": "Succeeded"}) == ("Succeeded",
                                                     "AppWrapper finished successfully")
    deleting = {"phase": "Failed", "conditions": [{"type": "ResourcesDeployed",
                                                   "status": "True"}]}
    assert KIND.finished(deleting) is None
    assert KIND.finished({"phase": "Failed", "conditions": [
        {"type": "ResourcesDeployed", "status": "False"}]}) == ("Failed", "AppWrapper failed")


def test_pods_ready_is_the_appwrapper_condition() -> None:
    manifest = sample()
    assert not KIND.report(manifest, {"phase": "Running"}, wanted=2, ready_pods=2).all_ready
    ready = KIND.report(manifest, {"phase": "Running", "conditions": [
        {"type": "PodsReady", "status": "True"}]}, wanted=2, ready_pods=0)
    assert ready.all_ready
    assert ready.parallelism == 2


def test_remote_copy_runs_with_the_pod_labels_on_every_component_template() -> None:
    manifest = sample()
    manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    remote = KIND.remote_copy(
        manifest, namespace="team-a", labels={"owner": "me"}, pod_labels={"pods": "ours"},
        infos=[jobframework.PodSetInfo("sample-appwrapper-pytorch-job-0", 1),
               jobframework.PodSetInfo("sample-appwrapper-pytorch-job-1", 1)],
        gang_workload="wl")

    assert (remote["apiVersion"], remote["kind"]) == ("workload.codeflare.dev/v1beta2",
                                                      "AppWrapper")
    assert remote["spec"]["suspend"] is False
    assert "managedBy" not in remote["spec"]
    assert remote["metadata"]["labels"]["owner"] == "me"
    replicas = remote["spec"]["components"][0]["template"]["spec"]["pytorchReplicaSpecs"]
    for rtype, index in (("Master", 0), ("Worker", 1)):
        template = replicas[rtype]["template"]
        assert template["metadata"]["labels"]["pods"] == "ours"
        assert template["spec"]["workloadRef"] == {
            "name": "wl", "podGroup": f"sample-appwrapper-pytorch-job-{index}"}
    assert "metadata" not in manifest["spec"]["components"][0]["template"]["spec"][
        "pytorchReplicaSpecs"]["Master"]["template"]


def test_multikueue_copy_clears_managed_by_and_is_suspended() -> None:
    manifest = {**sample(), "status": {"phase": "Running"}}
    manifest["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"

    copied = KIND.multikueue_copy(manifest, labels={"origin": "hub"})

    assert "managedBy" not in copied["spec"]
    assert copied["spec"]["suspend"] is True
    assert "status" not in copied


def test_appwrapper_is_registered_but_not_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework(FRAMEWORK) is registry.by_kind(
        "workload.codeflare.dev/v1beta2", "AppWrapper")
    assert FRAMEWORK not in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("workload.codeflare.dev", "v1beta2",
                                                       "appwrappers")


# --- Submission and the simulated cluster --------------------------------------------------


def _submit_sample(client: APIClient) -> Job:
    return submit_sample(client, SAMPLE, "AppWrapper")


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_an_appwrapper_is_refused_on_its_kind_unless_enabled(
    admin_client_api: APIClient,
) -> None:
    refused_unless_enabled(admin_client_api, SAMPLE)


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_an_invalid_appwrapper_is_refused_by_the_api_naming_the_field(
    admin_client_api: APIClient, enabled: None,
) -> None:
    manifest = make_appwrapper({**job_component(), "podSets": [{"path": "template.nope"}]})

    response = admin_client_api.post("/api/v1/namespaces/default/jobs/", manifest,
                                     format="json")

    assert response.status_code == 400
    assert "spec.components[0].podSets[0].path" in str(response.json())


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_kueue_sample_appwrapper_runs_to_completion_on_the_simulated_cluster(
    admin_client_api: APIClient, enabled: None,
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    assert (job.api_version, job.suspend) == ("workload.codeflare.dev/v1beta2", True)
    assert wl.name.startswith(f"appwrapper-{job.name}-")
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in wl.pod_sets] == [("sample-appwrapper-pytorch-job-0", 1, {"cpu": "1"}),
                                       ("sample-appwrapper-pytorch-job-1", 1, {"cpu": "1"})]

    reconcilers.step(t0)

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "sample-appwrapper-pytorch-job-0", "sample-appwrapper-pytorch-job-1"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["phase"] == "Running"
    assert cond.is_true(wl.conditions, "PodsReady")

    # No sleep in the sample: its pods run the simulation's default time.
    reconcilers.step(t0 + timedelta(seconds=200))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["phase"] == "Succeeded"
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert (finished["reason"], finished["message"]) == (
        "Succeeded", "AppWrapper finished successfully")
    reasons = set(Event.objects.filter(workload=wl, object_kind="AppWrapper")
                  .values_list("reason", flat=True))
    assert {"CreatedWorkload", "Started"} <= reasons


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_a_deactivated_appwrapper_is_suspended_and_releases_quota_then_runs_again(
    admin_client_api: APIClient, enabled: None,
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    deactivate_then_reactivate(admin_client_api, KIND, _submit_sample(admin_client_api),
                               reconcilers, t0, pods=2, finished_by=300)


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_a_failed_pod_resets_the_appwrapper_until_its_retry_limit_then_it_fails(
    manager: Cluster, enabled: None, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    from scheduling import services

    manifest = make_appwrapper(job_component(2))
    manifest["metadata"]["annotations"] = {appwrapper.RETRY_LIMIT_ANNOTATION: "1"}
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)
    reconcilers.step(t0)
    assert Pod.objects.filter(job=job).count() == 2

    Pod.objects.filter(job=job).update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=3))
    job.refresh_from_db()
    assert job.status["resettingCount"] == 1
    assert KIND.finished(job.status) is None
    reconcilers.step(t0 + timedelta(seconds=4))
    assert Pod.objects.filter(job=job, phase="Pending").count() == 2

    Pod.objects.filter(job=job).update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=8))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.finished(job.status) == ("Failed", "AppWrapper failed")
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()


# --- MultiKueue ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_appwrapper_runs_on_the_winner_and_its_status_comes_back(
    hub: Cluster, t0: datetime, enabled: None,  # noqa: F811
) -> None:
    from multicluster.choices import ClusterRole
    from scheduling import services

    everything = Everything()
    Job.objects.all().delete()
    manifest = make_appwrapper(job_component(1, run="20"), job_component(2, run="20"),
                               name="wrapped", queue="multikueue-queue",
                               managedBy="kueue.x-k8s.io/multikueue")
    job = services.submit_job(copy.deepcopy(manifest), namespace="research", cluster=hub)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    assert winner.role == ClusterRole.WORKER
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("AppWrapper", "wrapped")
    assert "managedBy" not in remote_job.manifest["spec"]
    remote_wl = Workload.objects.get(cluster=winner)
    assert [(ps["name"], ps["count"]) for ps in remote_wl.pod_sets] == [
        ("wrapped-0", 1), ("wrapped-1", 2)]
    everything.step(at(t0, 3))
    assert Pod.objects.filter(cluster=winner).count() == 3
    assert not Pod.objects.filter(cluster=hub).exists()

    everything.step(at(t0, 6))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert job.status["phase"] == "Running"

    everything.step(at(t0, 40))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert (finished["reason"], finished["message"]) == (
        "Succeeded", "AppWrapper finished successfully")
    job.refresh_from_db()
    assert KIND.finished(job.status) == ("Succeeded", "AppWrapper finished successfully")
