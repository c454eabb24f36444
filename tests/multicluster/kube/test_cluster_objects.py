"""A Kubernetes cluster's own PriorityClasses, LimitRanges and RuntimeClasses: listed and
watched from its API server by the sync pass, mirrored into its domain (created, updated,
deleted), and read by submission and admission as Kueue reads its informers' cache."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import ApplyError, apply_manifests
from scheduling.models import ClusterQueue, Job, LimitRange, PriorityClass, RuntimeClass, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.kube_api import LIMIT_RANGES, PRIORITY_CLASSES, RUNTIME_CLASSES
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    """The Kubernetes cluster's queue: 4 CPUs, LocalQueue ``lq-cq`` in the test namespace,
    preempting lower priorities."""
    kube_api.require_fake()
    make_queue("cq", {"cpu": "4"}, namespace=kube_api.namespace, cluster=kube_cluster,
               within_cluster_queue="LowerPriority")
    return kube_cluster


def priority_class(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "value": value, **fields}


def submit(kube_api: Any, domain: Cluster, name: str, *, cpu: str = "1",
           resources: dict[str, Any] | None = None, **pod_spec: Any) -> Job:
    manifest = job_manifest(name, "lq-cq", cpu=cpu, run_seconds=1000)
    spec = manifest["spec"]["template"]["spec"]
    if resources is not None:
        spec["containers"][0]["resources"] = resources
    spec.update(pod_spec)
    return services.submit_job(manifest, namespace=kube_api.namespace, cluster=domain)


def workload(job: Job) -> Workload:
    return Workload.objects.get(job=job)


def test_the_pass_mirrors_the_clusters_objects(kube_api: Any, domain: Cluster,
                                               t0: datetime) -> None:
    """Listed on the first pass, then followed by watch: a change and a deletion on the
    cluster reach the domain on the next pass."""
    kube_api.put_cluster_object(PRIORITY_CLASSES, priority_class("high", 1000,
                                                                 description="urgent"))
    kube_api.put_cluster_object(LIMIT_RANGES, {"metadata": {"name": "defaults",
                                                            "namespace": kube_api.namespace},
                                               "spec": {"limits": [{"type": "Container",
                                                                    "max": {"cpu": "2"}}]}})
    kube_api.put_cluster_object(RUNTIME_CLASSES, {"metadata": {"name": "kata"},
                                                  "handler": "kata",
                                                  "overhead": {"podFixed": {"cpu": "250m"}}})
    outcome = sync_kube_cluster(domain.pk, now=t0)
    assert outcome.watches["priorityclasses.scheduling.k8s.io"].listed

    high = PriorityClass.objects.get(cluster=domain, name="high")
    assert (high.value, high.description, high.preemption_policy) == (
        1000, "urgent", "PreemptLowerPriority")
    assert LimitRange.objects.get(cluster=domain, namespace=kube_api.namespace).limits == [
        {"type": "Container", "max": {"cpu": "2"}}]
    assert RuntimeClass.objects.get(cluster=domain, name="kata").overhead == {"cpu": "250m"}

    kube_api.put_cluster_object(PRIORITY_CLASSES, priority_class("high", 1000,
                                                                 globalDefault=True))
    kube_api.delete_cluster_object(RUNTIME_CLASSES, "kata")
    outcome = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))
    watched = outcome.watches["priorityclasses.scheduling.k8s.io"]
    assert (watched.listed, watched.events) == (False, 1)
    assert PriorityClass.objects.get(cluster=domain, name="high").global_default is True
    assert not RuntimeClass.objects.filter(cluster=domain).exists()
    # The manager's domain is another cluster: nothing of this one lands there.
    assert not PriorityClass.objects.exclude(cluster=domain).exists()


def test_apply_refuses_them_for_the_kubernetes_cluster(kube_api: Any, domain: Cluster) -> None:
    with pytest.raises(ApplyError, match="its priorityclasses are the cluster's own"):
        apply_manifests([{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                          "metadata": {"name": "high"}, "value": 1}], cluster=domain)
    assert not PriorityClass.objects.exists()


def test_a_mirrored_priority_class_preempts(kube_api: Any, domain: Cluster,
                                            t0: datetime) -> None:
    """Kueue ``ExtractPriority``: the pod template's ``priorityClassName`` takes the value of
    the cluster's PriorityClass, which lets the newcomer preempt (withinClusterQueue
    LowerPriority); a global default gives the others theirs."""
    kube_api.put_cluster_object(PRIORITY_CLASSES, priority_class("high", 1000))
    kube_api.put_cluster_object(PRIORITY_CLASSES, priority_class("usual", 10,
                                                                 globalDefault=True))
    sync_kube_cluster(domain.pk, now=t0)
    running = submit(kube_api, domain, "running", cpu="4")
    assert (workload(running).priority_class_name, workload(running).priority) == ("usual", 10)
    admission.run_admission_cycle(domain.pk, now=t0)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))
    assert workload(running).phase == WorkloadPhase.ADMITTED

    urgent = submit(kube_api, domain, "urgent", cpu="4", priorityClassName="high")
    assert (workload(urgent).priority_class_source, workload(urgent).priority) == (
        "scheduling.k8s.io/priorityclass", 1000)
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=2))
    assert cond.is_true(workload(running).conditions, "Evicted")


def test_a_mirrored_limit_range_and_runtime_class_change_what_is_admitted(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    """Kueue ``AdjustResources`` and ``ValidateLimitRange`` with the cluster's own objects:
    the RuntimeClass overhead counts against the quota, and a request above the LimitRange
    max leaves the workload Misconfigured until the LimitRange changes on the cluster."""
    kube_api.put_cluster_object(RUNTIME_CLASSES, {"metadata": {"name": "kata"},
                                                  "handler": "kata",
                                                  "overhead": {"podFixed": {"cpu": "500m"}}})
    limits = {"metadata": {"name": "limits", "namespace": kube_api.namespace},
              "spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}}]}}
    kube_api.put_cluster_object(LIMIT_RANGES, limits)
    sync_kube_cluster(domain.pk, now=t0)

    sandboxed = submit(kube_api, domain, "sandboxed", cpu="2", runtimeClassName="kata")
    big = submit(kube_api, domain, "big", cpu="3")
    admission.run_admission_cycle(domain.pk, now=t0)
    assert workload(sandboxed).admission["podSetAssignments"][0]["resourceUsage"] == {
        "cpu": "2500m"}
    reserved = cond.find(workload(big).conditions, "QuotaReserved")
    assert reserved is not None
    assert (reserved["status"], reserved["reason"], reserved["message"]) == (
        "False", "Misconfigured",
        "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
        'containers[0]: Invalid value: ["cpu"]: requests must not be above the limitRange max')

    # The cluster's admin raises the max: the next pass mirrors it and requeues the
    # namespace's parked workloads; 3 CPUs do not fit beside 2.5 yet, but are no longer
    # refused for the LimitRange.
    limits["spec"]["limits"][0]["max"] = {"cpu": "4"}
    kube_api.put_cluster_object(LIMIT_RANGES, limits)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=5))
    reserved = cond.find(workload(big).conditions, "QuotaReserved")
    assert reserved is not None
    assert reserved["reason"] != "Misconfigured"
    assert "insufficient unused quota for cpu" in reserved["message"]


def test_a_service_account_that_may_not_read_them_still_runs_jobs(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    """An RBAC refusal (403) to list PriorityClasses leaves them out of the domain; the
    pass goes on with the others and with the jobs."""
    kube_api.forbidden = {"priorityclasses"}
    kube_api.put_cluster_object(PRIORITY_CLASSES, priority_class("high", 1000))
    kube_api.put_cluster_object(RUNTIME_CLASSES, {"metadata": {"name": "kata"},
                                                  "handler": "kata"})
    job = submit(kube_api, domain, "train")
    admission.run_admission_cycle(domain.pk, now=t0)
    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.started == [f"{kube_api.namespace}/train"]
    assert workload(job).phase == WorkloadPhase.ADMITTED
    assert not PriorityClass.objects.filter(cluster=domain).exists()
    assert RuntimeClass.objects.filter(cluster=domain, name="kata").exists()
