"""The Kubeflow training-operator jobs → Workload, and their runs on the simulated cluster, as
Kueue's shared Kubeflow integration and the training operator do it
(``scheduling.jobs.kubeflow``)."""

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
from scheduling.jobs import kubeflow
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.validation import errors_to_dict
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers

EXAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
PYTORCH = kubeflow.PyTorchJob()
KINDS = [kubeflow.PyTorchJob(), kubeflow.TFJob(), kubeflow.XGBoostJob(),
         kubeflow.PaddleJob(), kubeflow.JAXJob()]
FRAMEWORKS = [k.framework_name for k in KINDS]

# job-integrations.md §3.1: Kueue's example manifests and the pod sets of their Workloads.
SAMPLES = [
    ("sample-pytorchjob.yaml", "PyTorchJob", [("master", 1), ("worker", 1)]),
    ("sample-tfjob.yaml", "TFJob", [("ps", 1), ("worker", 2)]),
    ("sample-xgboostjob.yaml", "XGBoostJob", [("master", 1), ("worker", 2)]),
    ("sample-paddlejob.yaml", "PaddleJob", [("worker", 2)]),
    ("sample-jaxjob.yaml", "JAXJob", [("worker", 2)]),
]


def sample(file: str) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLES / file).read_text())
    return manifest


def kind_of(name: str) -> kubeflow.KubeflowJob:
    return next(k for k in KINDS if k.kind == name)


def replica(*, replicas: int | None = None, run: str = "10s", cpu: str = "1",
            container: str = "pytorch", restart_policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{
        "name": container, "image": "busybox", "command": ["sleep", run],
        "resources": {"requests": {"cpu": cpu}}}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return spec


def make_pytorchjob(name: str = "pt", run_policy: dict[str, Any] | None = None,
                    **replicas: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": name,
                         "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
            "spec": spec}


@pytest.fixture
def enabled(settings: Any) -> None:
    """The Kubeflow v1 kinds enabled (Kueue's shipped config leaves them commented out)."""
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], *FRAMEWORKS]}


# --- Pod sets ------------------------------------------------------------------------------


@pytest.mark.parametrize(("file", "kind", "pod_sets"), SAMPLES)
def test_kueue_samples_are_valid_with_a_pod_set_per_replica_type_in_kueues_order(
    file: str, kind: str, pod_sets: list[tuple[str, int]],
) -> None:
    manifest = sample(file)
    integration = kind_of(kind)

    assert integration.validate_on_create(manifest, namespace="default",
                                          slices_enabled=True) == []
    built = integration.pod_sets(manifest, partial_admission=True)
    assert [(ps["name"], ps["count"]) for ps in built] == pod_sets
    assert all("minCount" not in ps for ps in built)
    specs = manifest["spec"][integration.replica_specs_field]
    for ps in built:
        rtype = next(t for t in specs if t.lower() == ps["name"])
        assert ps["template"] == specs[rtype]["template"]


def test_tfjob_pod_sets_follow_kueues_order_not_the_manifests() -> None:
    tf = kubeflow.TFJob()
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf"},
                "spec": {"tfReplicaSpecs": {
                    name: replica(container="tensorflow")
                    for name in ("Evaluator", "Worker", "PS", "Chief")}}}

    assert [ps["name"] for ps in tf.pod_sets(manifest, partial_admission=False)] == [
        "chief", "ps", "worker", "evaluator"]
    assert tf.validate_on_create(manifest, namespace="a", slices_enabled=True) == []


def _refused(manifest: dict[str, Any], kind: kubeflow.KubeflowJob = PYTORCH
             ) -> dict[str, list[str]]:
    return errors_to_dict(kind.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_pytorchjob(), "spec.pytorchReplicaSpecs", "at least one replica type"),
        (make_pytorchjob(PS=replica()), "spec.pytorchReplicaSpecs.PS",
         "not a replica type of a PyTorchJob"),
        (make_pytorchjob(Worker=replica(replicas=-1)),
         "spec.pytorchReplicaSpecs.Worker.replicas", "greater than or equal to 0"),
        (make_pytorchjob(Master=replica(replicas=2)),
         "spec.pytorchReplicaSpecs.Master.replicas", "must be 1"),
        (make_pytorchjob(Worker=replica(restart_policy="Sometimes")),
         "spec.pytorchReplicaSpecs.Worker.restartPolicy", "must be one of"),
        (make_pytorchjob(Worker=replica(container="main")),
         "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
         "container named 'pytorch'"),
        (make_pytorchjob(Worker={"replicas": 1}), "spec.pytorchReplicaSpecs.Worker.template",
         "is required"),
        (make_pytorchjob(run_policy={"suspend": "no"}, Worker=replica()),
         "spec.runPolicy.suspend", "must be a boolean"),
        (make_pytorchjob(run_policy={"managedBy": "someone"}, Worker=replica()),
         "spec.runPolicy.managedBy", "must be one of"),
        (make_pytorchjob(run_policy={"backoffLimit": -1}, Worker=replica()),
         "spec.runPolicy.backoffLimit", "greater than or equal to 0"),
        (make_pytorchjob(run_policy={"schedulingPolicy": {"priorityClass": 3}},
                         Worker=replica()),
         "spec.runPolicy.schedulingPolicy.priorityClass", "must be a string"),
        (make_pytorchjob(name="x" * 64, Worker=replica()), "metadata.name", ""),
    ]
    no_image = make_pytorchjob(Worker=replica())
    del no_image["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "image"]
    cases.append((no_image,
                  "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image",
                  "is required"))
    queue = make_pytorchjob(Worker=replica())
    queue["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "Not A Queue"
    cases.append((queue, f"metadata.labels[{jobframework.QUEUE_NAME_LABEL}]", ""))
    wrong_version = {**make_pytorchjob(Worker=replica()), "apiVersion": "kubeflow.org/v2"}
    cases.append((wrong_version, "apiVersion", "kubeflow.org/v1"))

    for manifest, path, message in cases:
        errors = _refused(manifest)
        assert path in errors, (path, errors)
        assert any(message in text for text in errors[path]), (path, errors[path])


def test_a_tfjob_has_a_chief_or_a_master_not_both() -> None:
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "tf"},
                "spec": {"tfReplicaSpecs": {"Chief": replica(container="tensorflow"),
                                            "Master": replica(container="tensorflow")}}}

    errors = _refused(manifest, kubeflow.TFJob())

    assert "only one of Chief and Master" in errors["spec.tfReplicaSpecs.Master"][0]


# --- Run, restore, finish ------------------------------------------------------------------


def test_run_merges_each_pod_set_into_its_replica_and_restore_gives_it_back() -> None:
    manifest = PYTORCH.suspend(make_pytorchjob(Worker=replica(replicas=2), Master=replica()))
    assert PYTORCH.is_suspended(manifest)
    pod_sets = PYTORCH.pod_sets(manifest, partial_admission=False)
    infos = [jobframework.PodSetInfo("master", 1, node_selector={"pool": "a"}),
             jobframework.PodSetInfo("worker", 2, node_selector={"pool": "b"},
                                     labels={jobframework.PODSET_LABEL: "worker"})]

    running = PYTORCH.run_with_pod_sets_info(manifest, infos)

    assert running["spec"]["runPolicy"]["suspend"] is False
    assert not PYTORCH.is_suspended(running)
    specs = running["spec"]["pytorchReplicaSpecs"]
    assert specs["Master"]["template"]["spec"]["nodeSelector"] == {"pool": "a"}
    assert specs["Worker"]["template"]["spec"]["nodeSelector"] == {"pool": "b"}
    assert specs["Worker"]["template"]["metadata"]["labels"][jobframework.PODSET_LABEL] == (
        "worker")

    restored = PYTORCH.restore_pod_sets_info(PYTORCH.suspend(running), pod_sets)
    assert restored == manifest
    assert PYTORCH.suspend({}, False) == {"spec": {"runPolicy": {"suspend": False}}}


def test_finished_reads_succeeded_and_failed_conditions() -> None:
    def status(type_: str, state: str = "True") -> dict[str, Any]:
        return {"conditions": [{"type": type_, "status": state, "message": "m"}]}

    assert PYTORCH.finished(status("Succeeded")) == ("Succeeded", "m")
    assert PYTORCH.finished(status("Failed")) == ("Failed", "m")
    assert PYTORCH.finished(status("Succeeded", "False")) is None
    assert PYTORCH.finished(status("Running")) is None


def test_pods_ready_is_the_operators_running_condition() -> None:
    manifest = make_pytorchjob(Master=replica(), Worker=replica(replicas=3))
    running = {"conditions": [{"type": "Running", "status": "True"}],
               "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 3}}}

    report = PYTORCH.report(manifest, running, wanted=4, ready_pods=0)
    assert report.all_ready
    assert (report.active, report.reclaimable_pods) == (4, {})
    assert not PYTORCH.report(manifest, {"replicaStatuses": running["replicaStatuses"]},
                              wanted=4, ready_pods=4).all_ready


def test_multikueue_copy_clears_run_policy_managed_by_and_is_suspended() -> None:
    manifest = make_pytorchjob(run_policy={"managedBy": "kueue.x-k8s.io/multikueue",
                                           "suspend": False}, Worker=replica())
    manifest["status"] = {"conditions": []}

    copied = PYTORCH.multikueue_copy(manifest, labels={"origin": "hub"})

    assert copied["spec"]["runPolicy"] == {"suspend": True}
    assert "suspend" not in copied["spec"]
    assert "status" not in copied
    assert copied["metadata"]["labels"]["origin"] == "hub"


def test_remote_copy_runs_with_the_pod_labels_on_every_template() -> None:
    manifest = make_pytorchjob(run_policy={"managedBy": "kueue.x-k8s.io/multikueue",
                                           "suspend": True},
                               Master=replica(), Worker=replica())

    remote = PYTORCH.remote_copy(
        manifest, namespace="team-a", labels={"owner": "me"}, pod_labels={"pods": "ours"},
        infos=[jobframework.PodSetInfo("master", 1), jobframework.PodSetInfo("worker", 1)],
        gang_workload="wl")

    assert (remote["apiVersion"], remote["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert remote["spec"]["runPolicy"] == {"suspend": False}
    assert remote["metadata"]["labels"]["owner"] == "me"
    for rtype, spec in remote["spec"]["pytorchReplicaSpecs"].items():
        assert spec["template"]["metadata"]["labels"]["pods"] == "ours"
        assert spec["template"]["spec"]["workloadRef"] == {"name": "wl",
                                                           "podGroup": rtype.lower()}


def test_priority_class_from_the_scheduling_policy_else_the_first_template() -> None:
    manifest = make_pytorchjob(Master=replica(), Worker=replica())
    manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
        "priorityClassName"] = "workers"
    assert PYTORCH.pod_priority_class(manifest) == (
        "workers", "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName")

    manifest["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "training"}}
    assert PYTORCH.pod_priority_class(manifest) == (
        "training", "spec.runPolicy.schedulingPolicy.priorityClass")


# --- Registration --------------------------------------------------------------------------


def test_the_five_kinds_are_registered_but_not_enabled_by_default(settings: Any) -> None:
    enabled = settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    for kind in KINDS:
        assert registry.by_kind("kubeflow.org/v1", kind.kind).framework_name == (
            kind.framework_name)
        assert kind.framework_name not in enabled
        assert kind.plural == kind.kind.lower() + "s"
    assert registry.by_framework("kubeflow.org/pytorchjob").replica_specs_field == (  # type: ignore[attr-defined]
        "pytorchReplicaSpecs")


# --- Submission and the simulated cluster --------------------------------------------------

@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    cq = make_queue("cq", {"cpu": "4", "memory": "4Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def _submit(client: APIClient, file: str, kind: str) -> Job:
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/",
                              (EXAMPLES / file).read_bytes(), content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample(file)["spec"]
    return Job.objects.get(kind=kind)


@pytest.mark.django_db
def test_a_kubeflow_job_is_refused_on_its_kind_unless_enabled(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    response = admin_client_api.generic(
        "POST", "/api/v1/namespaces/default/jobs/",
        (EXAMPLES / "sample-pytorchjob.yaml").read_bytes(), content_type="application/yaml")

    assert response.status_code == 400
    assert "kind" in str(response.json())
    assert not Job.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("file", "kind", "pod_sets"), SAMPLES)
def test_kueue_samples_are_accepted_unchanged_as_yaml(
    admin_client_api: APIClient, user_queue: ClusterQueue, enabled: None,
    file: str, kind: str, pod_sets: list[tuple[str, int]],
) -> None:
    job = _submit(admin_client_api, file, kind)

    assert (job.api_version, job.kind, job.suspend) == ("kubeflow.org/v1", kind, True)
    wl = Workload.objects.get(job=job)
    assert wl.name.startswith(f"{kind.lower()}-{job.name}-")
    assert wl.queue_name == "user-queue"
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == pod_sets


@pytest.mark.django_db
def test_an_invalid_pytorchjob_is_refused_naming_the_field(
    admin_client_api: APIClient, user_queue: ClusterQueue, enabled: None,
) -> None:
    manifest = sample("sample-pytorchjob.yaml")
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 3

    response = admin_client_api.post("/api/v1/namespaces/default/jobs/", manifest,
                                     format="json")

    assert response.status_code == 400
    assert "spec.pytorchReplicaSpecs.Master.replicas" in str(response.json())


@pytest.mark.django_db
def test_pytorchjob_runs_until_its_master_succeeds_on_the_simulated_cluster(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
    enabled: None,
) -> None:
    from scheduling import services

    # The workers would run for ever: the master decides.
    manifest = make_pytorchjob(Master=replica(run="30s"),
                               Worker=replica(replicas=2, run="1000s"))
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)

    reconcilers.step(t0)
    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert not PYTORCH.is_suspended(job.manifest)
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "master", "worker", "worker"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert cond.is_true(job.status["conditions"], "Running")
    assert cond.is_true(wl.conditions, "PodsReady")

    reconcilers.step(t0 + timedelta(seconds=40))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert PYTORCH.finished(job.status) == (
        "Succeeded", "PyTorchJob pt is successfully completed.")
    assert job.status["replicaStatuses"]["Master"]["succeeded"] == 1
    # The operator counts the replicas still active of a succeeded job as succeeded.
    assert job.status["replicaStatuses"]["Worker"] == {"active": 0, "succeeded": 2,
                                                       "failed": 0}
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Succeeded"
    # cleanPodPolicy defaults to None: the workers are left running.
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", "phase")) == [
        ("master", "Succeeded"), ("worker", "Running"), ("worker", "Running")]
    reasons = set(Event.objects.filter(workload=wl, object_kind="PyTorchJob")
                  .values_list("reason", flat=True))
    assert {"CreatedWorkload", "Started"} <= reasons


@pytest.mark.django_db
def test_a_failed_pod_of_a_replica_that_never_restarts_fails_the_job(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
    enabled: None,
) -> None:
    from scheduling import services

    manifest = make_pytorchjob(run_policy={"cleanPodPolicy": "Running"}, Master=replica(),
                               Worker=replica(replicas=2, restart_policy="Never"))
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)
    reconcilers.step(t0)

    Pod.objects.filter(job=job, pod_set="worker").update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=3))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert PYTORCH.finished(job.status) == (
        "Failed", "PyTorchJob pt is failed because 2 Worker replica(s) failed.")
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"
    # cleanPodPolicy Running: the master still running is deleted.
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()
    assert job.status["replicaStatuses"]["Master"]["active"] == 0


@pytest.mark.django_db
def test_a_restarting_replica_is_replaced_until_the_backoff_limit(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
    enabled: None,
) -> None:
    from scheduling import services

    manifest = make_pytorchjob(run_policy={"backoffLimit": 1},
                               Master=replica(restart_policy="OnFailure"), Worker=replica())
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)
    reconcilers.step(t0)

    Pod.objects.filter(job=job, pod_set="master").update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=3))
    job.refresh_from_db()
    assert PYTORCH.finished(job.status) is None
    replacement = Pod.objects.get(job=job, pod_set="master", phase="Pending")

    Pod.objects.filter(pk=replacement.pk).update(fail=True)
    reconcilers.step(t0 + timedelta(seconds=8))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert PYTORCH.finished(job.status) == (
        "Failed", "PyTorchJob pt is failed because 2 Master replica(s) failed.")
    assert wl.phase == WorkloadPhase.FINISHED


@pytest.mark.django_db
def test_deactivated_pytorchjob_is_suspended_and_releases_quota_then_runs_again(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime, enabled: None,
) -> None:
    job = _submit(admin_client_api, "sample-pytorchjob.yaml", "PyTorchJob")
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
    assert job.manifest["spec"]["runPolicy"]["suspend"] is True
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
    assert not PYTORCH.is_suspended(job.manifest)
    assert Pod.objects.filter(job=job).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(("file", "kind", "pod_sets"), SAMPLES[1:])
def test_each_kind_runs_its_sample_to_its_own_success_rule(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
    enabled: None, file: str, kind: str, pod_sets: list[tuple[str, int]],
) -> None:
    from scheduling import services

    integration = kind_of(kind)
    manifest = copy.deepcopy(sample(file))
    manifest["metadata"].setdefault("annotations", {})["kueueweb.io/run-seconds"] = "20"
    # A parameter server runs until the job ends: it never decides.
    for rtype, spec in manifest["spec"][integration.replica_specs_field].items():
        if rtype == "PS":
            spec["template"]["metadata"] = {"annotations": {"kueueweb.io/run-seconds": "9999"}}
    job = services.submit_job(manifest, namespace="default")
    wl = Workload.objects.get(job=job)

    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    reconcilers.step(t0 + timedelta(seconds=40))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert integration.finished(job.status) == (
        "Succeeded", f"{kind} {job.name} is successfully completed.")
    assert wl.phase == WorkloadPhase.FINISHED
    # cleanPodPolicy defaults to None: a parameter server is left running.
    assert list(Pod.objects.filter(job=job, phase__in=("Pending", "Running")).values_list(
        "pod_set", flat=True)) == (["ps"] if kind == "TFJob" else [])


# --- Success rules and cleanPodPolicy ------------------------------------------------------


def _statuses(**succeeded: int) -> dict[str, dict[str, int]]:
    return {rtype: {"active": 0, "succeeded": n, "failed": 0} for rtype, n in succeeded.items()}


def test_a_tfjob_without_chief_succeeds_when_worker_0_does_unless_all_workers_must() -> None:
    tf = kubeflow.TFJob()
    manifest = sample("sample-tfjob.yaml")  # PS 1, Worker 2, no chief

    assert tf.succeeded(manifest, _statuses(PS=0, Worker=1), worker0_succeeded=True)
    assert not tf.succeeded(manifest, _statuses(PS=0, Worker=1), worker0_succeeded=False)
    assert tf.succeeded(manifest, _statuses(PS=0, Worker=2), worker0_succeeded=False)

    manifest["spec"]["successPolicy"] = "AllWorkers"
    assert not tf.succeeded(manifest, _statuses(PS=0, Worker=1), worker0_succeeded=True)
    assert tf.succeeded(manifest, _statuses(PS=0, Worker=2), worker0_succeeded=True)


def test_a_tfjob_with_a_chief_succeeds_by_its_chief_alone() -> None:
    tf = kubeflow.TFJob()
    manifest = sample("sample-tfjob.yaml")
    manifest["spec"]["tfReplicaSpecs"]["Chief"] = replica(container="tensorflow")

    assert tf.succeeded(manifest, _statuses(Chief=1, PS=0, Worker=0))
    assert not tf.succeeded(manifest, _statuses(Chief=0, PS=0, Worker=2),
                            worker0_succeeded=True)


def test_the_success_rules_of_the_other_kinds() -> None:
    pytorch = make_pytorchjob(Worker=replica(replicas=3))
    assert not PYTORCH.succeeded(pytorch, _statuses(Worker=1), worker0_succeeded=True)
    assert PYTORCH.succeeded(pytorch, _statuses(Worker=3))
    # An elastic PyTorchJob is done once any worker succeeded.
    pytorch["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    assert PYTORCH.succeeded(pytorch, _statuses(Worker=1))
    assert not PYTORCH.succeeded(pytorch, _statuses(Worker=0))
    with_master = make_pytorchjob(Master=replica(), Worker=replica(replicas=2))
    assert PYTORCH.succeeded(with_master, _statuses(Master=1, Worker=0))
    assert not PYTORCH.succeeded(with_master, _statuses(Master=0, Worker=2))

    xgb = kubeflow.XGBoostJob()
    manifest = sample("sample-xgboostjob.yaml")
    assert xgb.succeeded(manifest, _statuses(Master=1, Worker=0))
    assert not xgb.succeeded(manifest, _statuses(Master=0, Worker=2))
    del manifest["spec"]["xgbReplicaSpecs"]["Master"]
    assert not xgb.succeeded(manifest, _statuses(Worker=2))
    assert _refused(manifest, xgb)["spec.xgbReplicaSpecs.Master"] == ["is required"]

    paddle = sample("sample-paddlejob.yaml")
    assert not kubeflow.PaddleJob().succeeded(paddle, _statuses(Worker=1),
                                              worker0_succeeded=True)
    assert kubeflow.PaddleJob().succeeded(paddle, _statuses(Worker=2))
    jax = sample("sample-jaxjob.yaml")
    assert not kubeflow.JAXJob().succeeded(jax, _statuses(Worker=1), worker0_succeeded=True)
    assert kubeflow.JAXJob().succeeded(jax, _statuses(Worker=2))


def test_clean_pod_policy_and_success_policy_are_checked() -> None:
    manifest = make_pytorchjob(run_policy={"cleanPodPolicy": "Some"}, Worker=replica())
    assert _refused(manifest)["spec.runPolicy.cleanPodPolicy"] == [
        "must be one of None, Running, All"]
    tf = sample("sample-tfjob.yaml")
    tf["spec"]["successPolicy"] = "AnyWorker"
    assert _refused(tf, kubeflow.TFJob())["spec.successPolicy"] == [
        "must be one of '', 'AllWorkers'"]
    tf["spec"]["successPolicy"] = "AllWorkers"
    tf["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    errors = _refused(tf, kubeflow.TFJob())
    assert "spec.successPolicy" not in errors
    assert "spec.runPolicy.cleanPodPolicy" not in errors


@pytest.mark.django_db
@pytest.mark.parametrize(("policy", "left"), [
    (None, [("master", "Succeeded"), ("worker", "Running"), ("worker", "Running")]),
    ("None", [("master", "Succeeded"), ("worker", "Running"), ("worker", "Running")]),
    ("Running", [("master", "Succeeded")]),
    ("All", []),
])
def test_clean_pod_policy_decides_which_pods_remain_after_the_finish(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
    enabled: None, policy: str | None, left: list[tuple[str, str]],
) -> None:
    from scheduling import services

    run_policy = {"cleanPodPolicy": policy} if policy else None
    manifest = make_pytorchjob(run_policy=run_policy, Master=replica(run="30s"),
                               Worker=replica(replicas=2, run="1000s"))
    job = services.submit_job(manifest, namespace="default")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    reconcilers.step(t0 + timedelta(seconds=40))

    job.refresh_from_db()
    assert PYTORCH.finished(job.status) == (
        "Succeeded", "PyTorchJob pt is successfully completed.")
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", "phase")) == left
    assert Workload.objects.get(job=job).phase == WorkloadPhase.FINISHED


@pytest.mark.django_db
@pytest.mark.parametrize(("success_policy", "finished"), [
    ("", ("Succeeded", "TFJob tf is successfully completed.")),
    ("AllWorkers", None),
])
def test_a_tfjob_on_the_simulated_cluster_finishes_with_worker_0_by_default(
    manager: Cluster, user_queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
    enabled: None, success_policy: str, finished: tuple[str, str] | None,
) -> None:
    from scheduling import services

    tf = kubeflow.TFJob()
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                "metadata": {"name": "tf",
                             "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
                "spec": {"successPolicy": success_policy, "tfReplicaSpecs": {
                    "Worker": replica(replicas=3, run="1000s", container="tensorflow")}}}
    job = services.submit_job(manifest, namespace="default")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    assert cond.is_true(job.status["conditions"], "Running")

    # Worker 0 (the oldest worker pod) ends first; the others keep running.
    worker0 = Pod.objects.filter(job=job, pod_set="worker").order_by("created_at", "id")[0]
    Pod.objects.filter(pk=worker0.pk).update(finish_at=t0 + timedelta(seconds=10))
    reconcilers.step(t0 + timedelta(seconds=20))

    job.refresh_from_db()
    assert Pod.objects.get(pk=worker0.pk).phase == "Succeeded"
    assert tf.finished(job.status) == finished
    phase = WorkloadPhase.FINISHED if finished else WorkloadPhase.ADMITTED
    assert Workload.objects.get(job=job).phase == phase
