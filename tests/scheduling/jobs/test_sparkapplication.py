"""SparkApplication → Workload, and a SparkApplication's run on the simulated cluster and
through MultiKueue, as Kueue's SparkApplication integration and the Spark operator do it
(``scheduling.jobs.sparkapplication``)."""

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
from scheduling.jobs import sparkapplication as spark
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

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-sparkapplication.yaml")
KIND = spark.SparkApplication()
FRAMEWORK = "sparkoperator.k8s.io/sparkapplication"
RUN_SECONDS = "kueueweb.io/run-seconds"


def sample() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    return manifest


def make_app(name: str = "pi", *, instances: int = 2, queue: str = "user-queue",
             driver_run: str = "20", executor_run: str = "600", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: queue}},
        "spec": {"type": "Scala", "mode": "cluster", "sparkVersion": "4.0.0",
                 "image": "spark:4.0.0", "mainApplicationFile": "local:///app.jar",
                 "driver": {"coreRequest": "500m", "memory": "512m",
                            "annotations": {RUN_SECONDS: driver_run}},
                 "executor": {"instances": instances, "coreRequest": "1", "memory": "1g",
                              "annotations": {RUN_SECONDS: executor_run}},
                 **spec},
    }


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], FRAMEWORK]}


# --- Pod sets ------------------------------------------------------------------------------


def test_kueue_sample_is_valid_with_the_driver_and_executor_pod_sets_kueue_derives() -> None:
    manifest = sample()

    assert KIND.validate_on_create(manifest, namespace="default", slices_enabled=True) == []
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps)) for ps in pod_sets] == [
        ("driver", 1, {"cpu": "1", "memory": "1Gi"}),
        ("executor", 2, {"cpu": "1", "memory": "1Gi"})]
    assert [ps["template"]["spec"]["containers"][0]["name"] for ps in pod_sets] == [
        "spark-kubernetes-driver", "spark-kubernetes-executor"]


def test_requests_come_from_core_request_and_memory_limits_from_their_fields() -> None:
    manifest = make_app(instances=3)
    manifest["spec"]["volumes"] = [{"name": "data", "emptyDir": {}},
                                   {"name": "spark-local-dir-1", "emptyDir": {}}]
    manifest["spec"]["executor"].update(
        cores=4, memoryOverhead="2g", coreLimit="2", memoryLimit="2G",
        gpu={"name": "nvidia.com/gpu", "quantity": 1}, nodeSelector={"disk": "ssd"},
        volumeMounts=[{"name": "data", "mountPath": "/a"}, {"name": "data", "mountPath": "/b"},
                      {"name": "spark-local-dir-1", "mountPath": "/tmp"}],
        sidecars=[{"name": "log", "image": "busybox",
                   "resources": {"requests": {"cpu": "100m"}}}],
        labels={"team": "a"}, template={"metadata": {"labels": {"from": "template"}}})

    driver, executor = KIND.pod_sets(manifest, partial_admission=True)

    assert jobframework.pod_set_requests(driver) == {"cpu": "500m", "memory": "512Mi"}
    # cores and memoryOverhead are Spark settings, not pod requests: Kueue ignores them.
    assert executor["count"] == 3
    assert jobframework.pod_set_requests(executor) == {
        "cpu": "1100m", "memory": "1Gi", "nvidia.com/gpu": "1"}
    pod = executor["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {
        "cpu": "2", "memory": "2Gi", "nvidia.com/gpu": "1"}
    assert pod["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]] == ["/a", "/b"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert executor["template"]["metadata"]["labels"] == {"from": "template", "team": "a"}


def test_java_memory_sizes_become_quantities() -> None:
    assert [spark.java_memory_to_quantity(v) for v in ("512m", "1g", "2G", "4gb", "512Mi",
                                                       " 3k ")] == [
        "512Mi", "1Gi", "2Gi", "4Gi", "512Mi", "3Ki"]


# --- Validation ----------------------------------------------------------------------------


def _refused(manifest: dict[str, Any]) -> dict[str, list[str]]:
    return errors_to_dict(KIND.validate_on_create(manifest, namespace="team-a",
                                                  slices_enabled=True))


def test_refusals_name_their_fields() -> None:
    no_mode = make_app()
    del no_mode["spec"]["mode"]
    no_type = make_app()
    del no_type["spec"]["type"]
    no_driver = make_app()
    del no_driver["spec"]["driver"]
    cases: list[tuple[dict[str, Any], str, str]] = [
        (make_app(mode="client"), "spec.mode", "only Cluster mode is supported"),
        (no_mode, "spec.mode", "only Cluster mode is supported"),
        (make_app(mode="local"), "spec.mode", "unsupported value 'local'"),
        (make_app(dynamicAllocation={"enabled": True}), "spec.dynamicAllocation.enabled",
         "elastic job"),
        (no_type, "spec.type", "is required"),
        (make_app(type="Go"), "spec.type", "unsupported value 'Go'"),
        (no_driver, "spec.driver", "is required"),
        (make_app(sparkVersion=4), "spec.sparkVersion", "must be a string"),
        (make_app(instances=0), "spec.executor.instances", "greater than or equal to 1"),
        (make_app(restartPolicy={"type": "Sometimes"}), "spec.restartPolicy.type",
         "unsupported value"),
        (make_app(suspend="no"), "spec.suspend", "must be a boolean"),
        (make_app(name="a" * 64), "metadata.name", "no more than 63"),
        (make_app(queue="Not A Queue"), f"metadata.labels[{jobframework.QUEUE_NAME_LABEL}]",
         ""),
    ]
    bad_memory = make_app()
    bad_memory["spec"]["driver"]["memory"] = "lots"
    cases.append((bad_memory, "spec.driver.memory", "not a quantity"))
    bad_cores = make_app()
    bad_cores["spec"]["executor"]["coreRequest"] = "-1"
    cases.append((bad_cores, "spec.executor.coreRequest", "not a quantity"))
    zero_cores = make_app()
    zero_cores["spec"]["driver"]["cores"] = 0
    cases.append((zero_cores, "spec.driver.cores", "greater than or equal to 1"))
    wrong_version = {**make_app(), "apiVersion": "sparkoperator.k8s.io/v1beta1"}
    cases.append((wrong_version, "apiVersion", "sparkoperator.k8s.io/v1beta2"))

    for manifest, path, message in cases:
        errors = _refused(manifest)
        assert path in errors, (path, errors)
        assert any(message in text for text in errors[path]), (path, errors[path])


# --- Run, restore, finish ------------------------------------------------------------------


def test_run_merges_each_role_info_into_its_spark_fields_and_restore_gives_them_back() -> None:
    manifest = make_app(nodeSelector={"zone": "a"}, suspend=True)
    manifest["spec"]["executor"]["tolerations"] = [{"key": "spot", "operator": "Exists"}]
    pod_sets = KIND.pod_sets(manifest, partial_admission=True)
    infos = [
        jobframework.PodSetInfo("driver", 1, node_selector={"pool": "cpu"},
                                labels={jobframework.PODSET_LABEL: "driver"}),
        jobframework.PodSetInfo("executor", 2, node_selector={"pool": "big"},
                                tolerations=[{"key": "big", "operator": "Exists"}],
                                labels={jobframework.PODSET_LABEL: "executor"}),
    ]

    running = KIND.run_with_pod_sets_info(manifest, infos)

    assert not KIND.is_suspended(running)
    driver, executor = running["spec"]["driver"], running["spec"]["executor"]
    # The global node selector moves into both roles.
    assert "nodeSelector" not in running["spec"]
    assert driver["nodeSelector"] == {"zone": "a", "pool": "cpu"}
    assert executor["nodeSelector"] == {"zone": "a", "pool": "big"}
    assert executor["tolerations"] == [{"key": "spot", "operator": "Exists"},
                                       {"key": "big", "operator": "Exists"}]
    assert driver["labels"] == {jobframework.PODSET_LABEL: "driver"}
    assert driver["template"]["spec"]["containers"] == [{"name": "spark-kubernetes-driver"}]

    restored = KIND.restore_pod_sets_info(KIND.suspend(running), pod_sets)

    assert restored["spec"]["executor"]["tolerations"] == [
        {"key": "spot", "operator": "Exists"}]
    for role in spark.ROLES:
        assert "labels" not in restored["spec"][role]
        assert "nodeSelector" not in restored["spec"][role]
    assert restored["spec"]["executor"]["instances"] == 2
    assert KIND.restore_pod_sets_info(running, pod_sets[:1]) == running


def test_finished_reads_the_application_state() -> None:
    assert KIND.finished({"applicationState": {"state": "RUNNING"}}) is None
    assert KIND.finished({"applicationState": {"state": "COMPLETED"}}) == (
        "Succeeded", "SparkApplication completed")
    assert KIND.finished({"applicationState": {"state": "FAILED", "errorMessage": "oom"}}) == (
        "Failed", "oom")
    assert KIND.finished({"applicationState": {"state": "SUBMISSION_FAILED"}})[0] == "Failed"


def test_pods_ready_needs_the_driver_running_and_every_executor() -> None:
    manifest = make_app(instances=2)

    def report(state: str, *executors: str) -> jobframework.JobReport:
        status = {"applicationState": {"state": state},
                  "executorState": {f"e{i}": s for i, s in enumerate(executors)}}
        return KIND.report(manifest, status, wanted=3, ready_pods=0)

    assert not report("SUBMITTED", "RUNNING", "RUNNING").all_ready
    assert not report("RUNNING", "RUNNING", "PENDING").all_ready
    assert report("RUNNING", "RUNNING", "COMPLETED").all_ready


def test_remote_copy_labels_each_role_pods() -> None:
    remote = KIND.remote_copy(
        sample(), namespace="team-a", labels={"owner": "me"}, pod_labels={"pods": "ours"},
        infos=[jobframework.PodSetInfo("driver", 1), jobframework.PodSetInfo("executor", 2)],
        gang_workload="wl")

    assert (remote["apiVersion"], remote["kind"]) == ("sparkoperator.k8s.io/v1beta2",
                                                      "SparkApplication")
    assert remote["spec"]["suspend"] is False
    assert remote["metadata"]["labels"]["owner"] == "me"
    for role in spark.ROLES:
        assert remote["spec"][role]["labels"] == {"pods": "ours"}
        assert remote["spec"][role]["template"]["spec"]["workloadRef"] == {
            "name": "wl", "podGroup": role}


def test_sparkapplication_is_registered_but_not_enabled_by_default(settings: Any) -> None:
    assert registry.by_framework(FRAMEWORK) is registry.by_kind(
        "sparkoperator.k8s.io/v1beta2", "SparkApplication")
    assert FRAMEWORK not in settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]
    assert (KIND.group, KIND.version, KIND.plural) == ("sparkoperator.k8s.io", "v1beta2",
                                                       "sparkapplications")


# --- Submission and the simulated cluster --------------------------------------------------


def _submit_sample(client: APIClient) -> Job:
    return submit_sample(client, SAMPLE, "SparkApplication")


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_a_sparkapplication_is_refused_on_its_kind_unless_enabled(
    admin_client_api: APIClient,
) -> None:
    refused_unless_enabled(admin_client_api, SAMPLE)


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_kueue_sample_sparkapplication_runs_to_completion_on_the_simulated_cluster(
    admin_client_api: APIClient, enabled: None,
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = _submit_sample(admin_client_api)
    wl = Workload.objects.get(job=job)
    assert (job.api_version, job.name, job.suspend) == ("sparkoperator.k8s.io/v1beta2",
                                                        "spark-pi", True)
    assert wl.name.startswith("sparkapplication-spark-pi-")
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in wl.pod_sets] == [("driver", 1, {"cpu": "1", "memory": "1Gi"}),
                                       ("executor", 2, {"cpu": "1", "memory": "1Gi"})]

    reconcilers.step(t0)

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [
        "driver", "executor", "executor"]

    reconcilers.step(t0 + timedelta(seconds=5))
    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["applicationState"] == {"state": "RUNNING"}
    assert sorted(job.status["executorState"].values()) == ["RUNNING", "RUNNING"]
    assert cond.is_true(wl.conditions, "PodsReady")

    reconcilers.step(t0 + timedelta(seconds=200))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.status["applicationState"] == {"state": "COMPLETED"}
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert (finished["reason"], finished["message"]) == ("Succeeded",
                                                         "SparkApplication completed")
    reasons = set(Event.objects.filter(workload=wl, object_kind="SparkApplication")
                  .values_list("reason", flat=True))
    assert {"CreatedWorkload", "Started"} <= reasons


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_the_application_completes_when_the_driver_succeeds_and_fails_when_it_fails(
    manager: Cluster, enabled: None, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    from scheduling import services

    job = services.submit_job(make_app("ok", instances=1), namespace="default")
    failing = services.submit_job(make_app("bad", instances=1), namespace="default")
    reconcilers.step(t0)
    Pod.objects.filter(job=failing, pod_set="driver").update(fail=True)

    reconcilers.step(t0 + timedelta(seconds=30))

    job.refresh_from_db()
    failing.refresh_from_db()
    # The driver ran 20 s; its executor (600 s) is deleted when it succeeds.
    assert job.status["applicationState"] == {"state": "COMPLETED"}
    assert not Pod.objects.filter(job=job, phase__in=("Pending", "Running")).exists()
    assert KIND.finished(failing.status)[0] == "Failed"
    wl = Workload.objects.get(job=failing)
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"


@pytest.mark.django_db
@pytest.mark.usefixtures("user_queue")
def test_a_deactivated_sparkapplication_is_suspended_and_releases_quota_then_runs_again(
    admin_client_api: APIClient, enabled: None,
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    deactivate_then_reactivate(admin_client_api, KIND, _submit_sample(admin_client_api),
                               reconcilers, t0, pods=3, finished_by=300)


# --- MultiKueue ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_sparkapplication_runs_on_the_winner_and_its_status_comes_back(
    hub: Cluster, t0: datetime, enabled: None,  # noqa: F811
) -> None:
    from multicluster.choices import ClusterRole
    from scheduling import services

    everything = Everything()
    Job.objects.all().delete()
    manifest = make_app("dispatched-pi", instances=2, queue="multikueue-queue",
                        driver_run="20", executor_run="60")
    for role in spark.ROLES:
        manifest["spec"][role].update(coreRequest="500m", memory="100m")
    job = services.submit_job(copy.deepcopy(manifest), namespace="research", cluster=hub)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    assert winner.role == ClusterRole.WORKER
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("SparkApplication", "dispatched-pi")
    remote_wl = Workload.objects.get(cluster=winner)
    assert [(ps["name"], ps["count"]) for ps in remote_wl.pod_sets] == [
        ("driver", 1), ("executor", 2)]
    everything.step(at(t0, 3))
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == [
        "driver", "executor", "executor"]
    assert not Pod.objects.filter(cluster=hub).exists()

    everything.step(at(t0, 6))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert job.status["applicationState"] == {"state": "RUNNING"}

    everything.step(at(t0, 40))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert (finished["reason"], finished["message"]) == ("Succeeded",
                                                         "SparkApplication completed")
    job.refresh_from_db()
    assert KIND.finished(job.status) == ("Succeeded", "SparkApplication completed")
