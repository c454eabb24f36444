"""A plain Pod → Workload, and a Pod's run on the simulated cluster and through MultiKueue,
as Kueue's pod integration does it (``scheduling.jobs.pod``)."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.models import Cluster
from multicluster.models import Pod as ClusterPod
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import pod as pods
from scheduling.models import Event, Job, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, at, hub  # noqa: F401 (fixture)
from tests.scheduling.jobs.scenarios import (  # noqa: F401 (fixture)
    refused_unless_enabled,
    user_queue,
)

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "pods"
          / "kueue-pod.yaml")
KIND = pods.Pod()
FRAMEWORK = "pod"


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def make_pod(name: str = "p", *, queue: str = "user-queue", cpu: str = "1",
             seconds: int = 20, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: queue, **labels}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox",
                                 "command": ["sleep", str(seconds)],
                                 "resources": {"requests": {"cpu": cpu}}}]},
    }


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], FRAMEWORK]}


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="default",
                                                  slices_enabled=True))


# --- The object, its defaults and its Workload ---------------------------------------------


def test_kueue_sample_is_valid_and_defaulted_as_kueues_webhook_does() -> None:
    manifest = sample()
    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []

    defaulted = KIND.default(manifest)

    metadata = defaulted["metadata"]
    assert metadata["labels"][pods.MANAGED_LABEL] == "true"
    assert metadata["finalizers"] == ["kueue.x-k8s.io/managed"]
    assert defaulted["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert metadata["annotations"][pods.ROLE_HASH_ANNOTATION] == pods.role_hash(
        manifest["spec"])
    assert KIND.is_suspended(defaulted)
    assert not KIND.is_suspended(manifest)
    # Defaulting twice gates once.
    assert KIND.default(defaulted)["spec"]["schedulingGates"] == [
        {"name": "kueue.x-k8s.io/admission"}]


def test_one_pod_set_main_of_one_pod_whose_template_is_the_spec_alone() -> None:
    manifest = KIND.default(sample())

    (pod_set,) = KIND.pod_sets(manifest, partial_admission=True)

    assert (pod_set["name"], pod_set["count"]) == ("main", 1)
    assert list(pod_set["template"]) == ["spec"]
    assert pod_set["template"]["spec"] == manifest["spec"]
    assert jobframework.pod_set_requests(pod_set) == {"cpu": "3"}


def test_the_role_hash_ignores_image_command_and_env_but_not_requests_or_placement() -> None:
    spec = make_pod()["spec"]
    other_command = copy.deepcopy(spec)
    other_command["containers"][0].update(image="alpine", command=["true"],
                                          env=[{"name": "A", "value": "1"}])
    more_cpu = copy.deepcopy(spec)
    more_cpu["containers"][0]["resources"]["requests"]["cpu"] = "2"
    placed = {**copy.deepcopy(spec), "nodeSelector": {"zone": "a"}}

    assert len(pods.role_hash(spec)) == 8
    assert pods.role_hash(other_command) == pods.role_hash(spec)
    assert pods.role_hash(more_cpu) != pods.role_hash(spec)
    assert pods.role_hash(placed) != pods.role_hash(spec)


def test_refusals_name_their_fields() -> None:
    bad_managed = make_pod(**{pods.MANAGED_LABEL: "yes"})
    assert _refused(bad_managed) == {
        "metadata.labels[kueue.x-k8s.io/managed]": ["managed label value can only be 'true'"]}

    count_alone = make_pod()
    count_alone["metadata"]["annotations"] = {pods.GROUP_TOTAL_COUNT_ANNOTATION: "2"}
    assert list(_refused(count_alone)) == ["metadata.labels[kueue.x-k8s.io/pod-group-name]"]

    name_alone = make_pod(**{pods.GROUP_NAME_LABEL: "g"})
    assert list(_refused(name_alone)) == [
        "metadata.annotations[kueue.x-k8s.io/pod-group-total-count]"]

    zero = make_pod(**{pods.GROUP_NAME_LABEL: "g"})
    zero["metadata"]["annotations"] = {pods.GROUP_TOTAL_COUNT_ANNOTATION: "0"}
    assert _refused(zero) == {"metadata.annotations[kueue.x-k8s.io/pod-group-total-count]": [
        "group total count must be at least 1, got 0"]}

    restart = make_pod()
    restart["spec"]["restartPolicy"] = "Sometimes"
    assert list(_refused(restart)) == ["spec.restartPolicy"]

    no_image = make_pod()
    del no_image["spec"]["containers"][0]["image"]
    assert list(_refused(no_image)) == ["spec.containers[0].image"]

    assert list(_refused({**make_pod(), "spec": None})) == ["spec"]
    assert list(_refused({**make_pod(), "kind": "Job"})) == ["kind"]


def test_run_merges_the_placement_and_ungates_and_stopping_never_gates_again() -> None:
    manifest = KIND.default(make_pod())
    info = jobframework.PodSetInfo("main", 1, node_selector={"zone": "a"},
                                   tolerations=[{"key": "k", "operator": "Exists"}],
                                   labels={jobframework.PODSET_LABEL: "main"})

    running = KIND.run_with_pod_sets_info(manifest, [info])

    assert "schedulingGates" not in running["spec"]
    assert running["spec"]["nodeSelector"] == {"zone": "a"}
    assert running["spec"]["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert running["metadata"]["labels"][jobframework.PODSET_LABEL] == "main"
    assert not KIND.is_suspended(running)
    assert KIND.suspend(running, True) == running
    assert KIND.suspend({}, False) == {"spec": {"schedulingGates": []}}
    assert KIND.restore_pod_sets_info(running, KIND.pod_sets(manifest,
                                                             partial_admission=True)) == running
    assert KIND.stop_deletes


def test_finished_reads_the_phase_and_pods_ready_the_ready_condition() -> None:
    now = datetime(2025, 1, 1)
    running = pods.pod_status({}, phase="Running", ready=True, now=now)
    succeeded = pods.pod_status({}, phase="Succeeded", ready=False, now=now)
    failed = {**pods.pod_status({}, phase="Failed", ready=False, now=now), "message": "OOM"}

    assert KIND.finished(running) is None
    assert KIND.finished(succeeded) == ("Succeeded", "Pod succeeded")
    assert KIND.finished(failed) == ("Failed", "OOM")
    assert KIND.report({}, running, wanted=1, ready_pods=0).all_ready
    assert not KIND.report({}, pods.pod_status({}, phase="Running", ready=False, now=now),
                           wanted=1, ready_pods=0).all_ready
    assert KIND.is_suspended({"spec": {}, "status": succeeded})


def test_remote_copy_is_the_pod_ungated_with_its_labels_and_placement() -> None:
    manifest = KIND.default(sample() | {"metadata": {**sample()["metadata"], "name": "s"}})
    info = jobframework.PodSetInfo("main", 1, node_selector={"zone": "a"})

    remote = KIND.remote_copy(manifest, namespace="ns", labels={"origin": "hub"},
                              pod_labels={jobframework.JOB_UID_LABEL: "u"}, infos=[info],
                              gang_workload="pod-s")

    assert (remote["apiVersion"], remote["kind"], remote["metadata"]["name"]) == ("v1", "Pod",
                                                                                 "s")
    assert remote["metadata"]["namespace"] == "ns"
    assert remote["metadata"]["labels"]["origin"] == "hub"
    assert remote["metadata"]["labels"][jobframework.JOB_UID_LABEL] == "u"
    assert "finalizers" not in remote["metadata"]
    assert "schedulingGates" not in remote["spec"]
    assert remote["spec"]["nodeSelector"] == {"zone": "a"}
    assert remote["spec"]["workloadRef"] == {"name": "pod-s", "podGroup": "main"}


def test_pod_is_registered_but_not_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework(FRAMEWORK) is registry.by_kind("v1", "Pod")
    assert FRAMEWORK not in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("", "v1", "pods")


# --- Submission and the simulated cluster --------------------------------------------------


def _submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", SAMPLE.read_bytes(),
                              content_type="application/yaml")
    assert response.status_code == 201, response.json()
    return Job.objects.get(kind="Pod")


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_a_pod_is_refused_on_its_kind_unless_enabled(admin_client_api: APIClient) -> None:
    refused_unless_enabled(admin_client_api, SAMPLE)


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_kueue_sample_pod_is_gated_then_runs_to_completion_on_the_simulated_cluster(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    assert job.name.startswith("kueue-sleep-")
    assert job.suspend
    assert job.manifest["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert job.manifest["metadata"]["finalizers"] == ["kueue.x-k8s.io/managed"]
    expected = jobframework.workload_name_for_owner(job.name, str(job.uid), kind="Pod",
                                                    group="")
    assert wl.name == expected
    assert wl.name.startswith(f"pod-{job.name}-")
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in wl.pod_sets] == [("main", 1, {"cpu": "3"})]

    reconcilers.step(t0)

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert "schedulingGates" not in job.manifest["spec"]
    (pod,) = ClusterPod.objects.filter(job=job)
    assert pod.requests == {"cpu": "3"}

    reconcilers.step(t0 + timedelta(seconds=3))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["phase"] == "Running"
    assert pods.is_ready(job.status)
    assert cond.is_true(wl.conditions, "PodsReady")

    reconcilers.step(t0 + timedelta(seconds=30))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["phase"] == "Succeeded"
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert (finished["reason"], finished["message"]) == ("Succeeded", "Pod succeeded")
    assert {"CreatedWorkload", "Started"} <= set(
        Event.objects.filter(workload=wl, object_kind="Pod").values_list("reason", flat=True))


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_an_evicted_pod_is_deleted_not_requeued_and_its_workload_ends_failed(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    from scheduling import services

    job = services.submit_job(make_pod("victim", cpu="2", seconds=600), namespace="default")
    waiting = services.submit_job(make_pod("next", cpu="3", seconds=10), namespace="default")
    wl = Workload.objects.get(job=job)
    reconcilers.step(t0)
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert Workload.objects.get(job=waiting).phase == WorkloadPhase.PENDING

    response = admin_client_api.patch(f"/api/v1/namespaces/default/workloads/{wl.name}/",
                                      {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=10))

    job.refresh_from_db()
    wl.refresh_from_db()
    # Kueue stops a pod by marking it TerminationTarget and deleting it; nothing recreates it.
    assert not ClusterPod.objects.filter(job=job).exists()
    assert job.suspend
    assert job.status["phase"] == "Failed"
    assert cond.is_true(job.status["conditions"], pods.TERMINATION_TARGET)
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"
    assert "Stopped" in set(Event.objects.filter(workload=wl).values_list("reason", flat=True))
    # Its quota went to the pod that waited.
    assert Workload.objects.get(job=waiting).phase == WorkloadPhase.ADMITTED

    reconcilers.step(t0 + timedelta(seconds=60))
    assert not ClusterPod.objects.filter(job=job).exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_a_pod_evicted_before_it_started_stays_gated_and_is_queued_again(
    admin_client_api: APIClient, enabled: None, reconcilers: Reconcilers, t0: datetime,
) -> None:
    from scheduling import services

    job = services.submit_job(make_pod("gated"), namespace="default")
    wl = Workload.objects.get(job=job)
    response = admin_client_api.patch(f"/api/v1/namespaces/default/workloads/{wl.name}/",
                                      {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0)
    response = admin_client_api.patch(f"/api/v1/namespaces/default/workloads/{wl.name}/",
                                      {"spec": {"active": True}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=1))

    wl.refresh_from_db()
    job.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert ClusterPod.objects.filter(job=job).count() == 1


# --- MultiKueue ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_pod_runs_on_the_winner_and_its_status_comes_back_while_the_hub_pod_stays_gated(
    hub: Cluster, t0: datetime, enabled: None,  # noqa: F811
) -> None:
    from multicluster.choices import ClusterRole
    from scheduling import services

    everything = Everything()
    Job.objects.all().delete()
    manifest = make_pod("dispatched-pod", queue="multikueue-queue", cpu="500m", seconds=20)
    job = services.submit_job(manifest, namespace="research", cluster=hub)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    assert winner.role == ClusterRole.WORKER
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("Pod", "dispatched-pod")
    everything.step(at(t0, 3))
    assert ClusterPod.objects.filter(cluster=winner).count() == 1
    assert not ClusterPod.objects.filter(cluster=hub).exists()

    everything.step(at(t0, 6))
    wl.refresh_from_db()
    job.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    assert job.status["phase"] == "Running"
    assert pods.is_gated(job.manifest)

    everything.step(at(t0, 40))
    wl.refresh_from_db()
    job.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Succeeded"
    assert KIND.finished(job.status) == ("Succeeded", "Pod succeeded")
