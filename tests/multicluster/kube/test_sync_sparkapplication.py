"""A SparkApplication on a Kubernetes cluster: Kueue's example is created through the custom
objects API running, with each role's flavor in its Spark pod fields, followed to PodsReady
and Finished by its application state, stopped on eviction; a cluster without the
SparkApplication CRD warns the application's workload and keeps running Jobs.

The test plays a minimal Spark operator: the driver pod and the executor pods, labelled with
their role's ``labels`` and placed by its ``nodeSelector``."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobs import sparkapplication as spark
from scheduling.models import ClusterQueue
from scheduling.workload import conditions as cond
from tests.multicluster.kube.crd_kinds import (
    CrdKind,
    check_eviction_releases_quota_once_pods_are_gone,
    check_missing_crd_warns_and_keeps_running_jobs,
    make_domain,
    workload,
)

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-sparkapplication.yaml")
SPARKAPPLICATIONS = "/apis/sparkoperator.k8s.io/v1beta2"
_ACTIVE = ("Pending", "Running")


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster, settings: Any,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    return make_domain(kube_api, kube_cluster, settings, make_queue, KIND)


def _pods_of(kube_api: Any, namespace: str, name: str, role: str | None = None
             ) -> list[dict[str, Any]]:
    return [p for p in kube_api.objects("pods", namespace)
            if (p["metadata"].get("labels") or {}).get(spark.APP_NAME_LABEL) == name
            and (role is None or p["metadata"]["labels"].get(spark.ROLE_LABEL) == role)
            and p["status"].get("phase") in _ACTIVE]


def run_spark_operator(kube_api: Any) -> None:
    """One pass of a minimal Spark operator: an unsuspended, unfinished application has its
    driver pod and ``executor.instances`` executor pods running (each role's ``labels`` on
    its pods, its ``nodeSelector`` and ``tolerations`` in their spec), state RUNNING with
    every executor RUNNING; a suspended one no pods, state SUSPENDED."""
    for app in kube_api.objects("sparkapplications"):
        namespace, name = app["metadata"]["namespace"], app["metadata"]["name"]
        spec, status = app.get("spec") or {}, app.get("status") or {}
        if spark.spark_finished(status) is not None:
            continue
        suspended = bool(spec.get("suspend"))
        executors: dict[str, str] = {}
        for role, wanted in ((spark.DRIVER, 1), (spark.EXECUTOR, spark.executor_instances(app))):
            role_spec = spec.get(role) or {}
            active = _pods_of(kube_api, namespace, name, role)
            if suspended:
                for pod in active:
                    kube_api.delete("pods", namespace, pod["metadata"]["name"])
                continue
            template = {"metadata": {"labels": role_spec.get("labels") or {}},
                        "spec": {"containers": [{"name": spark.CONTAINER_NAMES[role],
                                                 "image": spec.get("image")}],
                                 "nodeSelector": role_spec.get("nodeSelector") or {},
                                 "tolerations": role_spec.get("tolerations") or []}}
            names = [p["metadata"]["name"] for p in active]
            for _ in range(wanted - len(active)):
                names.append(kube_api._create_pod(
                    app, template, phase="Running", ready=True,
                    labels={spark.APP_NAME_LABEL: name, spark.ROLE_LABEL: role}))
            if role == spark.EXECUTOR:
                executors = {pod: "RUNNING" for pod in names}
        wanted_status = ({"applicationState": {"state": "SUSPENDED"}} if suspended else
                         {"applicationState": {"state": "RUNNING"}, "executorState": executors})
        if any(status.get(k) != v for k, v in wanted_status.items()):
            def change(obj: dict[str, Any], wanted_status: Any = wanted_status) -> None:
                obj["status"] = wanted_status
            kube_api._update(kube_api._resource("sparkapplications"), namespace, name, change)


def complete_application(kube_api: Any, namespace: str, name: str) -> None:
    """The driver succeeded: the operator deletes the executors, state COMPLETED."""
    for pod in _pods_of(kube_api, namespace, name, spark.DRIVER):
        kube_api.set_pod(namespace, pod["metadata"]["name"], phase="Succeeded", ready=False)
    for pod in _pods_of(kube_api, namespace, name, spark.EXECUTOR):
        kube_api.delete("pods", namespace, pod["metadata"]["name"])

    def change(obj: dict[str, Any]) -> None:
        obj["status"] = {**(obj.get("status") or {}), "applicationState": {"state": "COMPLETED"},
                         "executorState": {}}
    kube_api._update(kube_api._resource("sparkapplications"), namespace, name, change)


def test_the_sample_sparkapplication_runs_to_completion_on_the_cluster(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = KIND.admit_sample(kube_api, domain, t0)

    started = sync_kube_cluster(domain.pk, now=t0)

    assert started.started == [f"{kube_api.namespace}/{job.name}"]
    remote = kube_api.get("sparkapplications", kube_api.namespace, job.name)
    assert remote is not None
    assert (remote["spec"]["suspend"], remote["metadata"]["labels"][ORIGIN_LABEL]) == (
        False, "multikueue")
    for role in spark.ROLES:
        assert remote["spec"][role]["nodeSelector"] == {"instance-type": "spot"}
        assert remote["spec"][role]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
        assert remote["spec"][role]["labels"][jobframework.PODSET_LABEL] == role
    [created] = kube_api.requests_to(
        "POST", f"{SPARKAPPLICATIONS}/namespaces/{kube_api.namespace}/sparkapplications")
    assert created.body["kind"] == "SparkApplication"

    run_spark_operator(kube_api)
    pods = kube_api.objects("pods", kube_api.namespace)
    assert sorted(p["metadata"]["labels"][spark.ROLE_LABEL] for p in pods) == [
        "driver", "executor", "executor"]
    assert all(p["spec"]["nodeSelector"] == {"instance-type": "spot"} for p in pods)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    ready = cond.find(workload(job).conditions, "PodsReady")
    assert ready is not None
    assert ready["status"] == "True"

    complete_application(kube_api, kube_api.namespace, job.name)
    finished = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=60))

    assert finished.finished == [f"{kube_api.namespace}/{job.name}"]
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == ("Succeeded", "SparkApplication completed")
    assert kube_api.get("sparkapplications", kube_api.namespace, job.name) is None


def test_an_evicted_sparkapplication_releases_its_quota_once_its_pods_are_gone(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    check_eviction_releases_quota_once_pods_are_gone(KIND, kube_api, domain, t0)


def test_a_cluster_without_the_sparkapplication_crd_warns_it_and_keeps_running_jobs(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    check_missing_crd_warns_and_keeps_running_jobs(KIND, kube_api, domain, t0)


KIND = CrdKind(spark.SparkApplication(), SAMPLE, run_spark_operator)
