"""A second job kind on a Kubernetes cluster: a JobSet is created through the custom objects
API, followed by list + watch to PodsReady and Finished, stopped on eviction, and a cluster
without the JobSet CRD warns the JobSet's workload and keeps running Jobs."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone

from multicluster.kube import connection
from multicluster.kube.client import client_for
from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import EventType, WorkloadPhase
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, ResourceFlavor, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-jobset.yaml")
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    cq = make_queue("cq", {"cpu": "10", "memory": "4Gi"}, flavor="spot",
                    namespace=kube_api.namespace, cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
        node_labels={"instance-type": "spot"})
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="user-queue", cluster_queue=cq)
    return kube_cluster


def submit_sample(kube_api: Any, domain: Cluster) -> Job:
    return services.submit_job(yaml.safe_load(SAMPLE.read_text()),
                               namespace=kube_api.namespace, cluster=domain)


def workload(job: Job) -> Workload:
    return Workload.objects.get(job=job)


def admit_sample(kube_api: Any, domain: Cluster, now: datetime) -> Job:
    """The sample JobSet, submitted and admitted on a cluster with the JobSet CRD."""
    kube_api.require_fake()
    kube_api.install_jobset_crd()
    job = submit_sample(kube_api, domain)
    admission.run_admission_cycle(domain.pk, now=now)
    assert workload(job).phase == WorkloadPhase.ADMITTED
    return job


def test_the_sample_jobset_runs_to_completion_on_the_cluster(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = admit_sample(kube_api, domain, t0)

    started = sync_kube_cluster(domain.pk, now=t0)

    assert started.started == [f"{kube_api.namespace}/{job.name}"]
    remote = kube_api.get("jobsets", kube_api.namespace, job.name)
    assert remote is not None
    assert (remote["spec"]["suspend"], remote["metadata"]["labels"][ORIGIN_LABEL]) == (
        False, "multikueue")
    for rj in remote["spec"]["replicatedJobs"]:
        template = rj["template"]["spec"]["template"]
        assert template["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
        assert template["spec"]["nodeSelector"] == {"instance-type": "spot"}
    [created] = kube_api.requests_to("POST", f"{JOBSETS}/namespaces/{kube_api.namespace}/jobsets")
    assert created.body["kind"] == "JobSet"

    kube_api.run_jobset_controller()
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    ready = cond.find(workload(job).conditions, "PodsReady")
    assert ready is not None
    assert ready["status"] == "True"
    job.refresh_from_db()
    assert [(s["name"], s["ready"]) for s in job.status["replicatedJobsStatus"]] == [
        ("workers", 1), ("driver", 1)]

    kube_api.complete_jobset(kube_api.namespace, job.name)
    finished = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=110))

    assert finished.finished == [f"{kube_api.namespace}/{job.name}"]
    assert finished.deleted == [f"{kube_api.namespace}/{job.name}"]
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == ("Succeeded", "jobset completed successfully")
    assert kube_api.get("jobsets", kube_api.namespace, job.name) is None
    assert kube_api.objects("pods", kube_api.namespace) == []


def test_an_evicted_jobset_releases_its_quota_once_its_pods_are_gone(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = admit_sample(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)
    kube_api.run_jobset_controller()
    services.evict_workload(workload(job), now=t0 + timedelta(seconds=10))

    stopping = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    # Its pods, attributed by the job-uid label, still run: the quota is held.
    assert stopping.stopping == [f"{kube_api.namespace}/{job.name}"]
    assert kube_api.get("jobsets", kube_api.namespace, job.name)["spec"]["suspend"] is True
    assert workload(job).phase == WorkloadPhase.ADMITTED

    kube_api.run_jobset_controller()
    stopped = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=12))

    assert stopped.stopped == [f"{kube_api.namespace}/{job.name}"]
    assert kube_api.get("jobsets", kube_api.namespace, job.name) is None
    assert workload(job).phase == WorkloadPhase.PENDING
    job.refresh_from_db()
    assert job.suspend is True

    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=13))
    again = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=13))
    assert again.started == [f"{kube_api.namespace}/{job.name}"]


def test_a_cluster_without_the_jobset_crd_warns_the_jobset_and_keeps_running_jobs(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    probe = connection.probe_cluster(domain.pk, now=t0)
    assert probe is not None
    assert probe.connected, probe.message
    assert kube_api.requests_to("GET", JOBSETS)[0].path == JOBSETS
    jobset = submit_sample(kube_api, domain)
    batch = services.submit_job(job_manifest("plain", "lq-cq"), namespace=kube_api.namespace,
                                cluster=domain)
    admission.run_admission_cycle(domain.pk, now=t0)

    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.connected
    assert outcome.started == [f"{kube_api.namespace}/plain"]
    assert kube_api.get("jobs", kube_api.namespace, "plain") is not None
    domain.refresh_from_db()
    assert connection.is_connected(domain)
    [warning] = Event.objects.filter(workload=workload(jobset), reason="FailedCreate")
    assert warning.type == EventType.WARNING
    assert "jobsets.jobset.x-k8s.io/v1alpha2" in warning.message
    assert "CustomResourceDefinition of JobSet is not installed" in warning.message
    jobset.refresh_from_db()
    assert jobset.suspend is True
    assert kube_api.requests_to("GET", JOBSETS)
    assert not kube_api.requests_to("POST", JOBSETS)
    assert workload(batch).phase == WorkloadPhase.ADMITTED

    # Once the CRD is installed (and discovery is read again) the JobSet starts.
    kube_api.install_jobset_crd()
    client_for(domain).forget_discovery()
    later = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert later.started == [f"{kube_api.namespace}/{jobset.name}"]
    assert kube_api.get("jobsets", kube_api.namespace, jobset.name) is not None


def test_a_job_and_a_jobset_of_one_name_are_two_objects_on_the_cluster(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    kube_api.install_jobset_crd()
    kube_api.serve_gang_api = True
    jobset_manifest = yaml.safe_load(SAMPLE.read_text())
    del jobset_manifest["metadata"]["generateName"]
    jobset_manifest["metadata"]["name"] = "shared"
    jobset = services.submit_job(jobset_manifest, namespace=kube_api.namespace, cluster=domain)
    job = services.submit_job(job_manifest("shared", "user-queue"),
                              namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=t0)
    assert {workload(job).phase, workload(jobset).phase} == {WorkloadPhase.ADMITTED}

    started = sync_kube_cluster(domain.pk, now=t0)

    key = f"{kube_api.namespace}/shared"
    assert started.started == [key, key]
    assert kube_api.get("jobs", kube_api.namespace, "shared")["kind"] == "Job"
    assert kube_api.get("jobsets", kube_api.namespace, "shared")["kind"] == "JobSet"
    # Each has its own gang Workload, named after its kind.
    assert kube_api.get("workloads", kube_api.namespace, "job-shared") is not None
    gang = kube_api.get("workloads", kube_api.namespace, "jobset-shared")
    assert [g["name"] for g in gang["spec"]["podGroups"]] == ["workers", "driver"]

    services.delete_job(job)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert kube_api.get("jobs", kube_api.namespace, "shared") is None
    assert kube_api.get("workloads", kube_api.namespace, "job-shared") is None
    assert kube_api.get("jobsets", kube_api.namespace, "shared") is not None
    assert kube_api.get("workloads", kube_api.namespace, "jobset-shared") is not None
