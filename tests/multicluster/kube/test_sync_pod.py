"""A plain Pod on a Kubernetes cluster: a core-group object (``/api/v1``, not
``/apis/...``) created, watched, read and deleted through the generic objects API as any job
kind is, run to completion, and deleted on eviction with its workload ending as the Pod kind
decides (Failed, not requeued)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube.backend import KubeBackend
from multicluster.kube.client import client_for
from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "pods"
          / "kueue-pod.yaml")
GROUP_SAMPLE = SAMPLE.with_name("kueue-pod-group.yaml")
CORE_PODS = "/api/v1/namespaces/{namespace}/pods"


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "pod"]}


def workload(job: Job) -> Workload:
    return Workload.objects.get(job=job)


def admit_sample(kube_api: Any, domain: Cluster, now: datetime) -> Job:
    kube_api.require_fake()
    job = services.submit_job(yaml.safe_load(SAMPLE.read_text()),
                              namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=now)
    assert workload(job).phase == WorkloadPhase.ADMITTED
    return job


def test_core_objects_go_to_the_core_path_with_their_body_unmodified(
    kube_api: Any, kube_cluster: Cluster,
) -> None:
    kube_api.require_fake()
    kube_api.create_namespace(kube_api.namespace)
    backend = KubeBackend(client_for(kube_cluster))
    resource = ("", "v1", "pods")
    # A field newer than the client library's models stays as given.
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": kube_api.namespace,
                         "labels": {ORIGIN_LABEL: "multikueue"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "workloadRef": {"name": "w", "podGroup": "main"}}}

    created = backend.create_job(body, resource=resource)
    patched = backend.patch_job(kube_api.namespace, "p", {"metadata": {"labels": {"a": "b"}}},
                                resource=resource)

    path = CORE_PODS.format(namespace=kube_api.namespace)
    [request] = kube_api.requests_to("POST", path)
    assert (request.path, request.content_type, request.body) == (path, "application/json",
                                                                  body)
    assert created["spec"]["workloadRef"] == {"name": "w", "podGroup": "main"}
    assert patched is not None
    assert patched["metadata"]["labels"] == {ORIGIN_LABEL: "multikueue", "a": "b"}
    assert kube_api.requests_to("PATCH", f"{path}/p")[0].content_type == (
        "application/merge-patch+json")
    assert backend.get_job(kube_api.namespace, "p", resource=resource)["metadata"]["name"] == "p"
    assert backend.serves(resource)
    assert backend.delete_job(kube_api.namespace, "p", resource=resource)
    assert kube_api.requests_to("DELETE", f"{path}/p")[0].query == {
        "propagationPolicy": "Background"}
    assert backend.get_job(kube_api.namespace, "p", resource=resource) is None
    assert backend.patch_job(kube_api.namespace, "p", {}, resource=resource) is None
    assert not backend.delete_job(kube_api.namespace, "p", resource=resource)


@pytest.mark.usefixtures("enabled")
def test_the_kueue_sample_pod_runs_to_completion_on_the_cluster(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    domain = user_queue_domain
    job = admit_sample(kube_api, domain, t0)

    started = sync_kube_cluster(domain.pk, now=t0)

    key = f"{kube_api.namespace}/{job.name}"
    assert started.started == [key]
    remote = kube_api.get("pods", kube_api.namespace, job.name)
    assert remote is not None
    labels = remote["metadata"]["labels"]
    assert labels[ORIGIN_LABEL] == "multikueue"
    assert labels[jobframework.JOB_UID_LABEL] == str(job.uid)
    assert labels[jobframework.PREBUILT_WORKLOAD_LABEL] == workload(job).name
    assert "schedulingGates" not in remote["spec"]
    assert remote["spec"]["nodeSelector"] == {"instance-type": "spot"}
    assert "finalizers" not in remote["metadata"]
    assert kube_api.requests_to("POST", CORE_PODS.format(namespace=kube_api.namespace))
    assert not kube_api.requests_to("POST", "/apis/v1")
    # The stored pod stays as submitted, gated: the cluster runs its copy.
    job.refresh_from_db()
    assert not job.suspend

    kube_api.set_pod(kube_api.namespace, job.name, phase="Running", ready=True)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert cond.is_true(workload(job).conditions, "PodsReady")
    job.refresh_from_db()
    assert job.status["phase"] == "Running"

    kube_api.set_pod(kube_api.namespace, job.name, phase="Succeeded", ready=False)
    finished = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    assert finished.finished == [key]
    assert finished.deleted == [key]
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == ("Succeeded", "Pod succeeded")
    assert kube_api.get("pods", kube_api.namespace, job.name) is None


@pytest.mark.usefixtures("enabled")
def test_an_evicted_pod_is_deleted_and_its_workload_ends_failed_not_requeued(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    domain = user_queue_domain
    job = admit_sample(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)
    kube_api.set_pod(kube_api.namespace, job.name, phase="Running", ready=True)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    services.evict_workload(workload(job), now=t0 + timedelta(seconds=10))
    stopped = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    key = f"{kube_api.namespace}/{job.name}"
    assert stopped.deleted == [key]
    assert kube_api.get("pods", kube_api.namespace, job.name) is None
    job.refresh_from_db()
    assert job.suspend
    assert job.status["phase"] == "Failed"
    assert cond.is_true(job.status["conditions"], pods.TERMINATION_TARGET)
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Failed"

    # Nothing creates it again.
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=12))
    again = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=12))
    assert again.started == []
    assert kube_api.get("pods", kube_api.namespace, job.name) is None


@pytest.mark.usefixtures("enabled")
def test_the_kueue_sample_pod_group_runs_as_one_on_the_cluster(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    domain = user_queue_domain
    members = sorted((services.submit_job(m, namespace=kube_api.namespace, cluster=domain)
                      for m in yaml.safe_load_all(GROUP_SAMPLE.read_text())),
                     key=lambda j: j.name)
    admission.run_admission_cycle(domain.pk, now=t0)
    wl = Workload.objects.get(name="sample-group")
    assert wl.phase == WorkloadPhase.ADMITTED

    started = sync_kube_cluster(domain.pk, now=t0)

    assert started.started == [f"{kube_api.namespace}/{members[0].name}"]
    role = wl.pod_sets[0]["name"]
    for job in members:
        remote = kube_api.get("pods", kube_api.namespace, job.name)
        assert remote is not None
        assert remote["metadata"]["labels"][jobframework.PREBUILT_WORKLOAD_LABEL] == (
            "sample-group")
        assert remote["metadata"]["labels"][jobframework.PODSET_LABEL] == role
        assert "schedulingGates" not in remote["spec"]
        kube_api.set_pod(kube_api.namespace, job.name, phase="Succeeded", ready=False)

    # The members' copies are the group's, not leftovers: they stay until it finishes.
    finished = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["message"] == "Pods succeeded: 2/2."
    assert sorted(finished.deleted) == sorted(f"{kube_api.namespace}/{j.name}"
                                              for j in members)
    assert kube_api.objects("pods", kube_api.namespace) == []
