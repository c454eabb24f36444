"""JobSet → Workload, and a JobSet's run on the simulated cluster, as Kueue's JobSet
integration and the JobSet controller do it (``scheduling.jobs.jobset``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
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
from scheduling.jobs import jobset
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-jobset.yaml")
KIND = jobset.JobSet()


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def make_jobset(*replicated: dict[str, Any], name: str = "js", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
        "spec": {"replicatedJobs": list(replicated), **spec},
    }


def replicated(name: str, *, replicas: int | None = None, parallelism: int | None = None,
               completions: int | None = None, cpu: str = "1", run: str = "10s",
               backoff_limit: int | None = None) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"template": {"spec": {"containers": [{
        "name": "c", "image": "busybox", "command": ["sleep", run],
        "resources": {"requests": {"cpu": cpu}}}]}}}
    for key, value in (("parallelism", parallelism), ("completions", completions),
                       ("backoffLimit", backoff_limit)):
        if value is not None:
            job_spec[key] = value
    rj: dict[str, Any] = {"name": name, "template": {"spec": job_spec}}
    if replicas is not None:
        rj["replicas"] = replicas
    return rj


# --- Pod sets ------------------------------------------------------------------------------


def test_pod_sets_are_one_per_replicated_job_in_order() -> None:
    manifest = make_jobset(
        replicated("Leader"),
        replicated("workers", replicas=3, parallelism=4, completions=2),
        replicated("idle", replicas=2, parallelism=0),
    )

    pod_sets = KIND.pod_sets(manifest, partial_admission=True)

    assert [(ps["name"], ps["count"]) for ps in pod_sets] == [
        ("leader", 1), ("workers", 6), ("idle", 0)]
    assert all("minCount" not in ps for ps in pod_sets)
    assert pod_sets[1]["template"] == manifest["spec"]["replicatedJobs"][1]["template"]["spec"][
        "template"]


def test_kueue_sample_jobset_is_valid_and_has_a_pod_set_per_replicated_job() -> None:
    assert KIND.validate_on_create(sample(), namespace="default", slices_enabled=True) == []
    assert [(ps["name"], ps["count"]) for ps in KIND.pod_sets(sample(), partial_admission=True)
            ] == [("workers", 1), ("driver", 1)]


# --- Validation ----------------------------------------------------------------------------


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_jobset(), "spec.replicatedJobs", "at least one item"),
        (make_jobset(replicated("Bad_Name")), "spec.replicatedJobs[0].name",
         "not a valid name"),
        (make_jobset(replicated("a"), replicated("a")), "spec.replicatedJobs[1].name",
         "duplicate replicated job name 'a'"),
        (make_jobset(replicated("a", replicas=-1)), "spec.replicatedJobs[0].replicas",
         "greater than or equal to 0"),
        (make_jobset(replicated("a", parallelism=-2)),
         "spec.replicatedJobs[0].template.spec.parallelism", "greater than or equal to 0"),
        (make_jobset(replicated("a"), failurePolicy={"maxRestarts": "3"}),
         "spec.failurePolicy.maxRestarts", "must be an integer"),
        (make_jobset(replicated("a"), suspend="yes"), "spec.suspend", "must be a boolean"),
        (make_jobset(replicated("a" * 60)), "spec.replicatedJobs[0].name",
         "child Job name"),
    ]
    no_image = make_jobset(replicated("a"))
    del no_image["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"][0]["image"]
    cases.append((no_image,
                  "spec.replicatedJobs[0].template.spec.template.spec.containers[0].image",
                  "is required"))
    always = make_jobset(replicated("a"))
    always["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "restartPolicy"] = "Always"
    cases.append((always,
                  "spec.replicatedJobs[0].template.spec.template.spec.restartPolicy",
                  "unsupported value 'Always'"))
    queue = make_jobset(replicated("a"))
    queue["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "Not A Queue"
    cases.append((queue, f"metadata.labels[{jobframework.QUEUE_NAME_LABEL}]", ""))
    wrong_version = {**make_jobset(replicated("a")), "apiVersion": "jobset.x-k8s.io/v1"}
    cases.append((wrong_version, "apiVersion", "jobset.x-k8s.io/v1alpha2"))

    for manifest, path, message in cases:
        errors = _refused(manifest)
        assert path in errors, (path, errors)
        assert any(message in text for text in errors[path]), (path, errors[path])


# --- Run, restore, finish ------------------------------------------------------------------


def test_run_merges_each_pod_set_into_its_replicated_job_and_restore_gives_it_back() -> None:
    manifest = make_jobset(replicated("driver"), replicated("workers", replicas=2), suspend=True)
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    infos = [
        jobframework.PodSetInfo("driver", 1, node_selector={"pool": "cpu"},
                                labels={jobframework.PODSET_LABEL: "driver"}),
        jobframework.PodSetInfo("workers", 2, node_selector={"pool": "gpu"},
                                tolerations=[{"key": "gpu", "operator": "Exists"}],
                                labels={jobframework.PODSET_LABEL: "workers"}),
    ]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    templates = [rj["template"]["spec"]["template"] for rj in running["spec"]["replicatedJobs"]]
    assert [t["spec"]["nodeSelector"] for t in templates] == [{"pool": "cpu"}, {"pool": "gpu"}]
    assert templates[1]["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}]
    assert templates[1]["metadata"]["labels"] == {jobframework.PODSET_LABEL: "workers"}

    restored = KIND.restore_pod_sets_info(KIND.suspend(running), pod_sets)

    assert restored["spec"]["replicatedJobs"] == manifest["spec"]["replicatedJobs"]


def test_finished_reads_completed_and_failed_conditions() -> None:
    assert KIND.finished({"conditions": [{"type": "Completed", "status": "False"}]}) is None
    assert KIND.finished({"conditions": [{"type": "Completed", "status": "True",
                                          "message": "jobset completed successfully"}]}
                         ) == ("Succeeded", "jobset completed successfully")
    assert KIND.finished({"conditions": [{"type": "Failed", "status": "True",
                                          "message": "boom"}]}) == ("Failed", "boom")


def test_pods_ready_counts_ready_and_succeeded_child_jobs() -> None:
    manifest = make_jobset(replicated("driver"), replicated("workers", replicas=3,
                                                             parallelism=2))

    def report(*statuses: dict[str, Any]) -> jobframework.JobReport:
        return KIND.report(manifest, {"replicatedJobsStatus": list(statuses)}, wanted=7,
                           ready_pods=0)

    assert not report({"name": "driver", "ready": 1},
                      {"name": "workers", "ready": 2}).all_ready
    assert report({"name": "driver", "succeeded": 1},
                  {"name": "workers", "ready": 2, "succeeded": 1}).all_ready


def test_reclaimable_pods_are_succeeded_jobs_times_their_pods() -> None:
    manifest = make_jobset(replicated("Driver"), replicated("workers", replicas=3,
                                                             parallelism=2))
    status = {"replicatedJobsStatus": [{"name": "Driver", "succeeded": 0},
                                       {"name": "workers", "succeeded": 2}]}

    assert jobset.reclaimable_pods(manifest, status) == [{"name": "workers", "count": 4}]
    assert KIND.report(manifest, status, wanted=7, ready_pods=0).reclaimable_pods == {
        "workers": 4}
    too_many = {"replicatedJobsStatus": [{"name": "workers", "succeeded": 4}]}
    assert jobset.reclaimable_pods(manifest, too_many) == []


def test_multikueue_copy_clears_managed_by_and_is_suspended() -> None:
    manifest = make_jobset(replicated("a"), managedBy="kueue.x-k8s.io/multikueue")
    manifest["status"] = {"restarts": 1}

    copied = KIND.multikueue_copy(manifest, labels={"origin": "hub"})

    assert "managedBy" not in copied["spec"]
    assert copied["spec"]["suspend"] is True
    assert "status" not in copied
    assert copied["metadata"]["labels"]["origin"] == "hub"


def test_remote_copy_runs_with_the_pod_labels_on_every_template() -> None:
    manifest = make_jobset(replicated("driver"), replicated("workers"),
                           managedBy="kueue.x-k8s.io/multikueue", suspend=True)

    remote = KIND.remote_copy(
        manifest, namespace="team-a", labels={"owner": "me"}, pod_labels={"pods": "ours"},
        infos=[jobframework.PodSetInfo("driver", 1), jobframework.PodSetInfo("workers", 1)])

    assert (remote["apiVersion"], remote["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert remote["spec"]["suspend"] is False
    assert "managedBy" not in remote["spec"]
    assert remote["metadata"]["labels"]["owner"] == "me"
    for rj in remote["spec"]["replicatedJobs"]:
        assert rj["template"]["spec"]["template"]["metadata"]["labels"]["pods"] == "ours"


# --- Submission and the simulated cluster --------------------------------------------------

@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": "4", "memory": "4Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def _submit_sample(client: APIClient) -> Job:
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", SAMPLE.read_bytes(),
                              content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample()["spec"]
    return Job.objects.get(kind="JobSet")


@pytest.mark.django_db
def test_kueue_sample_jobset_is_accepted_unchanged_as_yaml(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    job = _submit_sample(admin_client_api)

    assert (job.api_version, job.kind, job.suspend) == ("jobset.x-k8s.io/v1alpha2", "JobSet",
                                                        True)
    assert job.name.startswith("sleep-job-")
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith(f"jobset-{job.name}-")
    assert wl.queue_name == "user-queue"
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [("workers", 1), ("driver", 1)]


@pytest.mark.django_db
def test_kueue_sample_jobset_runs_to_completion_on_the_simulated_cluster(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)

    reconcilers.step(t0)

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "driver", "workers"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert [(s["name"], s["ready"]) for s in job.status["replicatedJobsStatus"]] == [
        ("workers", 1), ("driver", 1)]
    assert cond.is_true(wl.conditions, "PodsReady")

    # The containers sleep 100s.
    reconcilers.step(t0 + timedelta(seconds=110))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.finished(job.status) == ("Succeeded", "jobset completed successfully")
    assert job.status["terminalState"] == "Completed"
    assert [(s["name"], s["succeeded"]) for s in job.status["replicatedJobsStatus"]] == [
        ("workers", 1), ("driver", 1)]
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Succeeded"
    reasons = set(Event.objects.filter(workload=wl, object_kind="JobSet")
                  .values_list("reason", flat=True))
    assert {"CreatedWorkload", "Started"} <= reasons


@pytest.mark.django_db
def test_deactivated_jobset_is_suspended_and_releases_quota_then_runs_again(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    url = f"/api/v1/namespaces/default/workloads/{wl.name}/"
    reconcilers.step(t0)
    assert Pod.objects.filter(job=job).count() == 2

    response = admin_client_api.patch(url, {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=10))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.suspend
    assert KIND.is_suspended(job.manifest)
    assert not Pod.objects.filter(job=job).exists()
    assert wl.phase == WorkloadPhase.PENDING
    assert not wl.admission
    assert "Stopped" in set(Event.objects.filter(workload=wl).values_list("reason", flat=True))

    response = admin_client_api.patch(url, {"spec": {"active": True}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=20))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert Pod.objects.filter(job=job).count() == 2
    reconcilers.step(t0 + timedelta(seconds=140))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED


@pytest.mark.django_db
def test_failed_child_job_restarts_the_jobset_until_max_restarts_then_fails(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    from scheduling import services

    manifest = make_jobset(replicated("workers", replicas=2, backoff_limit=0),
                           failurePolicy={"maxRestarts": 1})
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)
    reconcilers.step(t0)
    assert Pod.objects.filter(job=job).count() == 2

    Pod.objects.filter(job=job).update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=3))
    job.refresh_from_db()
    assert job.status["restarts"] == 1
    assert KIND.finished(job.status) is None
    reconcilers.step(t0 + timedelta(seconds=4))
    assert Pod.objects.filter(job=job, phase="Pending").count() == 2

    Pod.objects.filter(job=job).update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=8))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert KIND.finished(job.status) == (
        "Failed", "jobset failed due to reaching max number of restarts")
    assert job.status["terminalState"] == "Failed"
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()


def test_jobset_is_registered_and_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework("jobset.x-k8s.io/jobset") is registry.by_kind(
        "jobset.x-k8s.io/v1alpha2", "JobSet")
    assert "jobset.x-k8s.io/jobset" in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("jobset.x-k8s.io", "v1alpha2", "jobsets")


@pytest.mark.django_db
def test_priority_class_comes_from_the_label_else_the_first_template_naming_one(
    manager: Cluster, user_queue: ClusterQueue,
) -> None:
    from scheduling import services
    from scheduling.models import PriorityClass, WorkloadPriorityClass

    PriorityClass.objects.create(cluster=manager, name="high-pods", value=300)
    manifest = make_jobset(replicated("driver"), replicated("workers"), name="ranked")
    manifest["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "priorityClassName"] = "high-pods"
    assert KIND.pod_priority_class(manifest) == (
        "high-pods", "spec.replicatedJobs[1].template.spec.template.spec.priorityClassName")

    from_template = Workload.objects.get(job=services.submit_job(manifest, namespace="default"))

    assert (from_template.priority_class_name, from_template.priority_class_source,
            from_template.priority) == ("high-pods", jobframework.POD_PRIORITY_CLASS_SOURCE, 300)

    WorkloadPriorityClass.objects.create(cluster=manager, name="urgent", value=500)
    labelled = copy.deepcopy(manifest)
    labelled["metadata"]["name"] = "labelled"
    labelled["metadata"]["labels"][jobframework.PRIORITY_CLASS_LABEL] = "urgent"
    from_label = Workload.objects.get(job=services.submit_job(labelled, namespace="default"))

    assert (from_label.priority_class_name, from_label.priority) == ("urgent", 500)
