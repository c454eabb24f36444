"""The Kubernetes cluster's reconciler: a job submitted to a domain whose cluster is a
Kubernetes connection is admitted there, created on the cluster with its flavor's placement,
followed to PodsReady and Finished from the cluster's Job status, scaled, stopped in two
phases on eviction, and cleaned up; and what never reaches the cluster: a job an operator's
grant refuses, anything in Kubernetes' system namespaces, and a missing namespace where the
cluster is not configured to create namespaces."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.kube import sync
from multicluster.kube.backend import KubeBackend, SystemNamespaceRefused
from multicluster.kube.client import client_for
from multicluster.kube.manifests import ORIGIN_LABEL, PREBUILT_WORKLOAD_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from multicluster.simulated import runner
from scheduling import jobframework, services
from scheduling.choices import EventType, WorkloadPhase
from scheduling.core.pod_security import SYSTEM_NAMESPACES
from scheduling.models import ClusterQueue, Event, Job, ResourceFlavor, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle, slices
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    """The Kubernetes cluster's own queues: a spot flavor with node labels and a taint
    toleration, 10 CPUs, LocalQueue ``lq-cq`` in the test namespace."""
    make_queue("cq", {"cpu": "10"}, flavor="spot", namespace=kube_api.namespace,
               cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
        node_labels={"instance-type": "spot"}, tolerations=[SPOT])
    return kube_cluster


def submit(kube_api: Any, domain: Cluster, name: str, **kwargs: Any) -> Job:
    return services.submit_job(job_manifest(name, "lq-cq", **kwargs),
                               namespace=kube_api.namespace, cluster=domain)


def workload(job: Job) -> Workload:
    """The job's current slice, else its newest (finished) workload."""
    workloads = list(Workload.objects.filter(job=job))
    return slices.current_slice(workloads) or slices.ordered(workloads)[-1]


def admit_and_start(kube_api: Any, domain: Cluster, job: Job, now: datetime) -> sync.KubeSyncOutcome:
    admission.run_admission_cycle(domain.pk, now=now)
    assert workload(job).phase == WorkloadPhase.ADMITTED
    return sync_kube_cluster(domain.pk, now=now)


def key(kube_api: Any, name: str) -> str:
    return f"{kube_api.namespace}/{name}"


def test_an_admitted_job_is_created_on_the_cluster(kube_api: Any, domain: Cluster,
                                                   t0: datetime) -> None:
    job = submit(kube_api, domain, "train", parallelism=2, node_selector={"disk": "ssd"})

    outcome = admit_and_start(kube_api, domain, job, t0)

    assert (outcome.connected, outcome.started) == (True, [key(kube_api, "train")])
    remote = sync.KubeBackend(client_for(domain)).get_job(kube_api.namespace, "train")
    assert remote is not None
    labels = remote["metadata"]["labels"]
    assert labels[ORIGIN_LABEL] == settings.KUEUEWEB["MULTIKUEUE_ORIGIN"]
    assert labels[PREBUILT_WORKLOAD_LABEL] == workload(job).name
    assert (remote["spec"]["suspend"], remote["spec"]["parallelism"]) == (False, 2)
    pod_spec = remote["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {"disk": "ssd", "instance-type": "spot"}
    assert pod_spec["tolerations"] == [SPOT]
    job.refresh_from_db()
    assert job.suspend is False
    assert job.status["startTime"] == cond.timestamp(t0)
    assert Event.objects.filter(object_kind="Job", object_name="train", reason="Started",
                                workload=workload(job)).count() == 1

    again = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))
    assert again.started == []


def test_a_job_runs_to_finished_from_the_cluster_status(kube_api: Any, domain: Cluster,
                                                         t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "sample", parallelism=3, cpu="2")
    admit_and_start(kube_api, domain, job, t0)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))
    waiting = cond.find(workload(job).conditions, "PodsReady")
    assert waiting is not None
    assert waiting["status"] == "False"

    kube_api.run_job_controller()
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    ready = cond.find(workload(job).conditions, "PodsReady")
    assert ready is not None
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "True", "Started", cond.timestamp(t0 + timedelta(seconds=10)))
    job.refresh_from_db()
    assert (job.status["active"], job.status["ready"]) == (3, 3)

    kube_api.complete_job(kube_api.namespace, "sample")
    outcome = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=70))

    assert outcome.finished == [key(kube_api, "sample")]
    assert outcome.deleted == [key(kube_api, "sample")]
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == ("Succeeded", "Job finished successfully")
    assert kube_api.get("jobs", kube_api.namespace, "sample") is None
    assert kube_api.objects("pods", kube_api.namespace) == []
    job.refresh_from_db()
    assert cond.is_true(job.status["conditions"], "Complete")
    assert job.status["succeeded"] == 3
    watches = [r.query for r in kube_api.requests_to("GET", "/apis/batch/v1/jobs")
               if r.query.get("watch") == "true"
               and r.query.get("labelSelector") == f"{ORIGIN_LABEL}=multikueue"]
    versions = [int(q["resourceVersion"]) for q in watches]
    assert len(versions) == 3
    assert versions == sorted(versions)
    assert versions[-1] > versions[0]


def test_a_failed_job_finishes_its_workload_as_failed(kube_api: Any, domain: Cluster,
                                                      t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "broken")
    admit_and_start(kube_api, domain, job, t0)
    kube_api.fail_job(kube_api.namespace, "broken", message="Job has reached the specified "
                      "backoff limit")

    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=30))

    finished = cond.find(workload(job).conditions, "Finished")
    assert finished is not None
    assert (finished["status"], finished["reason"], finished["message"]) == (
        "True", "Failed", "Job has reached the specified backoff limit")
    assert kube_api.get("jobs", kube_api.namespace, "broken") is None


def test_a_job_that_finished_and_was_deleted_at_once_still_finishes(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "ttl")
    admit_and_start(kube_api, domain, job, t0)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))
    kube_api.complete_job(kube_api.namespace, "ttl")
    kube_api.delete("jobs", kube_api.namespace, "ttl")  # ttlSecondsAfterFinished: 0

    outcome = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=20))

    assert workload(job).phase == WorkloadPhase.FINISHED
    assert outcome.started == []
    assert kube_api.get("jobs", kube_api.namespace, "ttl") is None


def test_a_job_deleted_behind_our_back_is_created_again(kube_api: Any, domain: Cluster,
                                                       t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "again")
    admit_and_start(kube_api, domain, job, t0)
    first_uid = kube_api.get("jobs", kube_api.namespace, "again")["metadata"]["uid"]
    kube_api.delete("jobs", kube_api.namespace, "again")

    outcome = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert outcome.started == [key(kube_api, "again")]
    recreated = kube_api.get("jobs", kube_api.namespace, "again")
    assert recreated is not None
    assert recreated["metadata"]["uid"] != first_uid
    assert Event.objects.filter(reason="Recreated", type=EventType.WARNING).count() == 1


def test_a_job_already_on_the_cluster_is_adopted_or_replaced(kube_api: Any, domain: Cluster,
                                                             t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "adopt")
    admit_and_start(kube_api, domain, job, t0)
    uid = kube_api.get("jobs", kube_api.namespace, "adopt")["metadata"]["uid"]
    # The pass that created it stopped before recording the start.
    Job.objects.filter(pk=job.pk).update(suspend=True)

    adopted = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert adopted.started == [key(kube_api, "adopt")]
    assert kube_api.get("jobs", kube_api.namespace, "adopt")["metadata"]["uid"] == uid

    # A suspended copy is stale: it is deleted, and the job created anew afterwards.
    sync.KubeBackend(client_for(domain)).suspend_job(kube_api.namespace, "adopt")
    Job.objects.filter(pk=job.pk).update(suspend=True)
    replaced = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))
    assert (replaced.started, replaced.deleted) == ([], [key(kube_api, "adopt")])
    assert kube_api.get("jobs", kube_api.namespace, "adopt") is None

    recreated = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=15))
    assert recreated.started == [key(kube_api, "adopt")]
    assert kube_api.get("jobs", kube_api.namespace, "adopt")["metadata"]["uid"] != uid


def test_eviction_suspends_then_releases_quota_once_the_pods_are_gone(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "evicted", parallelism=2)
    admit_and_start(kube_api, domain, job, t0)
    kube_api.run_job_controller()
    first_uid = kube_api.get("jobs", kube_api.namespace, "evicted")["metadata"]["uid"]
    services.evict_workload(workload(job), now=t0 + timedelta(seconds=10))

    # Phase 1: the remote job is suspended; its pods still run, so the quota is held.
    stopping = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=11))

    assert stopping.stopping == [key(kube_api, "evicted")]
    assert stopping.stopped == []
    assert kube_api.get("jobs", kube_api.namespace, "evicted")["spec"]["suspend"] is True
    assert workload(job).phase == WorkloadPhase.ADMITTED
    job.refresh_from_db()
    assert job.suspend is False
    suspends = kube_api.requests_to("PATCH", f"/apis/batch/v1/namespaces/{kube_api.namespace}")
    assert [(r.content_type, r.body) for r in suspends] == [
        ("application/merge-patch+json", {"spec": {"suspend": True}})]

    # Phase 2: the Job controller removed the pods: delete, release, requeue.
    kube_api.run_job_controller()
    stopped = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=12))

    assert stopped.stopped == [key(kube_api, "evicted")]
    assert stopped.deleted == [key(kube_api, "evicted")]
    assert kube_api.get("jobs", kube_api.namespace, "evicted") is None
    wl = workload(job)
    assert wl.phase == WorkloadPhase.PENDING
    requeued = cond.find(wl.conditions, "Requeued")
    assert requeued is not None
    assert (requeued["status"], requeued["reason"]) == ("True", "EvictedByUser")
    job.refresh_from_db()
    assert job.suspend is True
    assert cond.is_true(job.status["conditions"], "Suspended")

    # Admitted again, it runs again as a new job.
    restarted = admit_and_start(kube_api, domain, job, t0 + timedelta(seconds=13))
    assert restarted.started == [key(kube_api, "evicted")]
    assert kube_api.get("jobs", kube_api.namespace, "evicted")["metadata"]["uid"] != first_uid


def test_a_job_that_may_not_be_suspended_is_deleted_instead(kube_api: Any, domain: Cluster,
                                                            t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.forbidden.add("jobs:patch")
    job = submit(kube_api, domain, "unpatchable", parallelism=2)
    admit_and_start(kube_api, domain, job, t0)
    kube_api.run_job_controller()
    services.evict_workload(workload(job), now=t0 + timedelta(seconds=10))

    outcome = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    assert (outcome.deleted, outcome.stopped) == ([key(kube_api, "unpatchable")],
                                                  [key(kube_api, "unpatchable")])
    assert kube_api.get("jobs", kube_api.namespace, "unpatchable") is None
    assert kube_api.objects("pods", kube_api.namespace) == []
    assert workload(job).phase == WorkloadPhase.PENDING


def test_a_refused_call_for_one_job_does_not_hold_up_the_others(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    grows = submit(kube_api, domain, "grows", parallelism=2,
                   annotations={jobframework.ELASTIC_JOB_ANNOTATION: "true"})
    ends = submit(kube_api, domain, "ends")
    for _ in range(2):  # one head per cluster queue and cycle
        admission.run_admission_cycle(domain.pk, now=t0)
    assert sync_kube_cluster(domain.pk, now=t0).started == [key(kube_api, "ends"),
                                                             key(kube_api, "grows")]
    kube_api.forbidden.add("jobs:patch")
    slices.scale_job(grows, 1, now=t0 + timedelta(seconds=5))
    kube_api.complete_job(kube_api.namespace, "ends")

    outcome = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=6))

    assert outcome.finished == [key(kube_api, "ends")]
    assert workload(ends).phase == WorkloadPhase.FINISHED
    [warning] = Event.objects.filter(reason="SyncFailed", type=EventType.WARNING)
    assert warning.object_name == "grows"
    assert "403 Forbidden" in warning.message
    assert kube_api.get("jobs", kube_api.namespace, "grows")["spec"]["parallelism"] == 2


def test_an_elastic_job_follows_its_admitted_count(kube_api: Any, domain: Cluster,
                                                   t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "elastic", parallelism=3,
                 annotations={jobframework.ELASTIC_JOB_ANNOTATION: "true"})
    admit_and_start(kube_api, domain, job, t0)
    assert kube_api.get("jobs", kube_api.namespace, "elastic")["spec"]["parallelism"] == 3

    slices.scale_job(job, 1, now=t0 + timedelta(seconds=5))
    down = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert down.scaled == [key(kube_api, "elastic")]
    assert kube_api.get("jobs", kube_api.namespace, "elastic")["spec"]["parallelism"] == 1

    slices.scale_job(job, 5, now=t0 + timedelta(seconds=10))
    waiting = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))
    assert waiting.scaled == []
    assert kube_api.get("jobs", kube_api.namespace, "elastic")["spec"]["parallelism"] == 1

    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=11))
    up = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    assert up.scaled == [key(kube_api, "elastic")]
    assert up.started == []
    assert kube_api.get("jobs", kube_api.namespace, "elastic")["spec"]["parallelism"] == 5
    patches = [r.body for r in kube_api.requests_to(
        "PATCH", f"/apis/batch/v1/namespaces/{kube_api.namespace}/jobs/elastic")]
    assert patches == [{"spec": {"parallelism": 1}}, {"spec": {"parallelism": 5}}]


def test_the_gang_workload_is_created_with_the_job(kube_api: Any, domain: Cluster,
                                                   t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.serve_gang_api = True
    job = submit(kube_api, domain, "gang", parallelism=4)

    admit_and_start(kube_api, domain, job, t0)

    gang = kube_api.get("workloads", kube_api.namespace, "job-gang")
    assert gang is not None
    assert gang["spec"]["podGroups"] == [{"name": "main", "policy": {"gang": {"minCount": 4}}}]
    remote = kube_api.get("jobs", kube_api.namespace, "gang")
    assert remote["spec"]["template"]["spec"]["workloadRef"] == {"name": "job-gang",
                                                                 "podGroup": "main"}
    assert gang["metadata"]["ownerReferences"][0]["uid"] == remote["metadata"]["uid"]

    kube_api.complete_job(kube_api.namespace, "gang")
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=30))
    assert kube_api.get("workloads", kube_api.namespace, "job-gang") is None


def test_no_gang_workload_where_the_api_is_not_served(kube_api: Any, domain: Cluster,
                                                      t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "plain", parallelism=2)

    admit_and_start(kube_api, domain, job, t0)

    assert kube_api.objects("workloads") == []
    assert kube_api.requests_to("POST", "/apis/scheduling.k8s.io") == []
    remote = kube_api.get("jobs", kube_api.namespace, "plain")
    assert "workloadRef" not in remote["spec"]["template"]["spec"]


def test_a_server_lost_mid_run_disconnects_the_cluster(kube_api: Any, domain: Cluster,
                                                       t0: datetime) -> None:
    kube_api.require_fake()
    job = submit(kube_api, domain, "lost")
    admit_and_start(kube_api, domain, job, t0)
    kube_api.refuse_connections()
    lost_at = t0 + timedelta(seconds=5)

    outcome = sync_kube_cluster(domain.pk, now=lost_at)

    assert (outcome.ran, outcome.connected) == (True, False)
    domain.refresh_from_db()
    active = cond.find(domain.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"]) == ("False", "ClientConnectionFailed")
    assert (domain.lost_since, domain.reconnect_attempts) == (lost_at, 1)
    assert workload(job).phase == WorkloadPhase.ADMITTED

    kube_api.accept_connections()
    back = sync_kube_cluster(domain.pk, now=lost_at + timedelta(seconds=5))
    assert back.connected is True
    domain.refresh_from_db()
    assert domain.lost_since is None


def test_a_job_that_cannot_be_created_is_reported_once(kube_api: Any, domain: Cluster,
                                                       t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.forbidden.add("namespaces")
    job = submit(kube_api, domain, "nowhere")

    first = admit_and_start(kube_api, domain, job, t0)
    second = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert first.started == second.started == []
    job.refresh_from_db()
    assert job.suspend is True
    warnings = Event.objects.filter(reason="FailedCreate", type=EventType.WARNING)
    assert [e.message for e in warnings] == [
        f"The job could not be created on cluster kube-worker: namespaces "
        f'"{kube_api.namespace}" not found']
    assert workload(job).phase == WorkloadPhase.ADMITTED


def test_another_worker_holding_the_cluster_skips_the_pass(kube_api: Any, domain: Cluster,
                                                           t0: datetime) -> None:
    job = submit(kube_api, domain, "held")
    admission.run_admission_cycle(domain.pk, now=t0)
    cache.add(f"kueueweb:kube:{domain.pk}:lease", "someone-else", timeout=60)

    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.ran is False
    job.refresh_from_db()
    assert job.suspend is True


# --- what kueueweb writes where: grants, system namespaces, namespace creation ---------


def namespace_writes(kube_api: Any) -> list[str]:
    """Every namespace the server was asked to create or delete, and every namespace a job
    was posted to."""
    created = [r.body["metadata"]["name"] for r in kube_api.requests_to("POST", "/api/v1/namespaces")
               if r.path.rstrip("/") == "/api/v1/namespaces"]
    jobs_posted = [r.path.split("/")[5] for r in kube_api.requests_to("POST", "/apis/batch/v1/")]
    deleted = [r.path.split("/")[4] for r in kube_api.requests_to("DELETE", "/api/v1/namespaces/")]
    return created + jobs_posted + deleted


def escape_job(name: str) -> dict[str, Any]:
    manifest = job_manifest(name, "lq-cq")
    spec = manifest["spec"]["template"]["spec"]
    spec.update(hostPID=True, hostNetwork=True, serviceAccountName="cluster-admin",
                volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    spec["containers"][0]["securityContext"] = {"privileged": True}
    return manifest


def test_a_refused_privileged_job_never_reaches_the_cluster(
    kube_api: Any, domain: Cluster, make_user: Callable[..., User], t0: datetime
) -> None:
    client = APIClient()
    client.force_authenticate(make_user("otto", "operator", namespaces=("*",)))
    url = f"/api/v1/namespaces/{kube_api.namespace}/jobs/?cluster={domain.name}"
    response = client.post(url, escape_job("escape"), format="json")
    assert response.status_code == 400
    assert "spec.template.spec.containers[0].securityContext.privileged" in response.json()
    for namespace in sorted(SYSTEM_NAMESPACES):
        response = client.post(f"/api/v1/namespaces/{namespace}/jobs/?cluster={domain.name}",
                               job_manifest("plain", "lq-cq"), format="json")
        assert list(response.json()) == ["metadata.namespace"]

    admission.run_admission_cycle(domain.pk, now=t0)
    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.connected
    assert not Job.objects.exists()
    assert kube_api.requests_to("POST", "/") == []
    assert namespace_writes(kube_api) == []


def test_a_job_stored_in_a_system_namespace_is_never_created(
    kube_api: Any, domain: Cluster, t0: datetime
) -> None:
    job = services.submit_job(job_manifest("old", "lq-cq"), namespace=kube_api.namespace,
                              cluster=domain)
    admission.run_admission_cycle(domain.pk, now=t0)
    # As a job submitted before system namespaces were refused would be.
    Job.objects.filter(pk=job.pk).update(namespace="kube-system")
    Workload.objects.filter(job=job).update(namespace="kube-system")

    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.finished == ["kube-system/old"]
    assert namespace_writes(kube_api) == []
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.FINISHED
    assert "does not create jobs in namespace 'kube-system'" in str(wl.conditions)


def test_a_missing_namespace_is_created_only_where_the_cluster_allows(
    kube_api: Any, domain: Cluster, t0: datetime
) -> None:
    kube_api.require_fake()
    Cluster.objects.filter(pk=domain.pk).update(create_namespaces=False)
    job = services.submit_job(job_manifest("waits", "lq-cq"), namespace=kube_api.namespace,
                              cluster=domain)
    admission.run_admission_cycle(domain.pk, now=t0)

    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.started == []
    assert kube_api.requests_to("POST", "/api/v1/namespaces") == []
    assert kube_api.get("jobs", kube_api.namespace, "waits") is None
    warning = Event.objects.get(reason="FailedCreate", object_name="waits")
    assert warning.type == EventType.WARNING

    Cluster.objects.filter(pk=domain.pk).update(create_namespaces=True)
    outcome = sync_kube_cluster(domain.pk, now=t0)
    assert outcome.started == [f"{kube_api.namespace}/waits"]
    assert kube_api.get("namespaces", "", kube_api.namespace) is not None
    assert Workload.objects.get(job=job).phase == WorkloadPhase.ADMITTED


@pytest.mark.parametrize("namespace", sorted(SYSTEM_NAMESPACES))
def test_the_backend_refuses_to_write_to_system_namespaces(
    kube_api: Any, kube_cluster: Cluster, namespace: str
) -> None:
    backend = KubeBackend(client_for(kube_cluster))
    body = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "x", "namespace": namespace}, "spec": {}}
    for write in (lambda: backend.ensure_namespace(namespace),
                  lambda: backend.delete_namespace(namespace),
                  lambda: backend.create_job(body),
                  lambda: backend.create_gang_workload(body)):
        with pytest.raises(SystemNamespaceRefused, match=namespace):
            write()
    assert kube_api.requests == []


def test_a_kubernetes_manager_leaves_jobs_placed_on_a_worker_to_multikueue(
    kube_api: Any, manager: Cluster, t0: datetime,
) -> None:
    # The demo's hub dispatches to simulated workers; here the hub itself is a Kubernetes
    # connection. A hub job whose workload a worker admitted runs there: the hub's
    # reconciler must neither stop it nor create it on the hub's own API server, while
    # MultiKueue mirrors the worker's job onto it.
    kube_api.require_fake()
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    Job.objects.exclude(name="dispatched-analysis").delete()
    Workload.objects.exclude(job__name="dispatched-analysis").delete()
    Cluster.objects.filter(role=ClusterRole.WORKER).update(
        simulation={"startDelaySeconds": 2, "defaultRunSeconds": 30})
    manager.refresh_from_db()
    manager.connection_type = "kubernetes"
    manager.set_kubeconfig(kube_api.kubeconfig)
    manager.save()
    hub_job = Job.objects.get(cluster=manager, name="dispatched-analysis")
    clusters = list(Cluster.objects.order_by("pk"))
    # The hub job's suspend after each pass once a worker admitted its workload: true while
    # the worker's job waits to start, then false until it finishes, never back and forth.
    suspended: list[bool] = []

    def observe() -> None:
        hub_job.refresh_from_db()
        if Workload.objects.get(job=hub_job).cluster_name:
            suspended.append(hub_job.suspend)

    def step(seconds: int) -> None:
        now = t0 + timedelta(seconds=seconds)
        for cluster in clusters:
            lifecycle.run_lifecycle(cluster.pk, now=now, rng=random.Random(0))
            if cluster.connection_type == "kubernetes":
                sync_kube_cluster(cluster.pk, now=now)
                observe()
            else:
                runner.sync_cluster(cluster.pk, now=now)
            admission.run_admission_cycle(cluster.pk, now=now)
        dispatch.sync_dispatch(manager.pk, now=now)
        observe()

    for second in range(8):
        step(second)
    hub = Workload.objects.get(job=hub_job)
    assert hub.cluster_name in {"worker-1", "worker-2"}
    assert hub.phase == WorkloadPhase.ADMITTED
    manager.refresh_from_db()
    assert cond.is_true(manager.conditions, "Active")
    assert False in suspended
    assert suspended == sorted(suspended, reverse=True)
    for second in range(40, 44):
        step(second)

    hub.refresh_from_db()
    hub_job.refresh_from_db()
    assert hub.phase == WorkloadPhase.FINISHED
    assert suspended == sorted(suspended, reverse=True)
    assert not any(c.get("type") == "Suspended" and c.get("status") == "True"
                   for c in hub_job.status.get("conditions", ()))
    assert kube_api.get("jobs", hub_job.namespace, hub_job.name) is None
    assert not kube_api.requests_to("POST", f"/apis/batch/v1/namespaces/{hub_job.namespace}")
