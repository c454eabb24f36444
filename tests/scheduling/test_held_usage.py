"""The quota a workload holds has one definition (``snapshots.held_usage``): the admission
cycle, the queue status of the API, the queue pages and the metrics all report it.

Kueue (``pkg/workload/workload.go`` ``totalRequestsFromAdmission``): ``status.admission``
never changes while set, but a pod set holds quota only for the pods it still has, its
spec count (smaller after an elastic scale-down in place) less its reclaimable pods.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.core import types as core_types
from scheduling.core.quantities import quantity_to_int
from scheduling.metrics import history, prometheus
from scheduling.models import ClusterQueue, Job, QueueUsageSample, Workload
from scheduling.web.queues import domain_usage
from scheduling.workload import slices
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def store(settings: Any) -> Iterator[None]:
    """An empty metrics store: memory, or Redis keys under a prefix no other test uses."""
    if settings.REDIS_URL:
        settings.METRICS_REDIS_PREFIX = f"kueueweb-test:{uuid.uuid4().hex}:"
    prometheus.event_store().clear()
    yield
    prometheus.event_store().clear()


def workload_of(job: Job) -> Workload:
    return Workload.objects.exclude(phase=WorkloadPhase.FINISHED).get(job=job)


def admitted_cpu(cluster: Cluster) -> int:
    """CPU (millis) in the admissions of the workloads holding quota: what the readers
    summed before they shared the engine's count."""
    total = 0
    for row in snapshots.reserving_rows(cluster.pk):
        for psa in row["admission"]["podSetAssignments"]:
            total += quantity_to_int("cpu", psa["resourceUsage"]["cpu"])
    return total


def engine_cpu(cluster: Cluster) -> int:
    """CPU (millis) the admission cycle's snapshot holds for the workloads holding quota."""
    total = 0
    for row in snapshots.reserving_rows(cluster.pk):
        for fr, amount in snapshots.admitted_info(row).usage.items():
            if fr.resource == "cpu":
                total += amount
    return total


def metric(name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(prometheus.render().decode()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return float(sample.value)
    return None


def test_reclaimed_pods_and_an_elastic_scale_down_count_the_same_everywhere(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime, viewer_client: APIClient, viewer_ui: Client,
) -> None:
    """A 4-CPU queue without a cohort: a job that reclaims one of its two pods, an elastic
    job scaled from 2 pods to 1, and a 2-CPU job admitted on the freed quota. Their
    admissions add up to 6 CPU; they hold 4, and every reader says 4."""
    cq = make_queue("cq", {"cpu": "4"})
    reclaiming = services.submit_job(
        job_manifest("reclaim", "lq-cq", parallelism=2, completions=3, run_seconds=50),
        namespace="ns")
    scaled = services.submit_job(
        job_manifest("elastic", "lq-cq", parallelism=2, run_seconds=600,
                     annotations={jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
        namespace="ns")
    late = services.submit_job(
        job_manifest("late", "lq-cq", parallelism=2, run_seconds=600), namespace="ns")
    reconcilers.step(t0)
    assert workload_of(late).phase == WorkloadPhase.PENDING

    reconcilers.step(t0 + timedelta(seconds=52))  # two pods done: one of two is reclaimable
    assert workload_of(reclaiming).reclaimable_pods == [{"name": "main", "count": 1}]
    assert slices.scale_job(scaled, 1, now=t0 + timedelta(seconds=53)).action == "scale-down"
    reconcilers.step(t0 + timedelta(seconds=53))
    assert workload_of(late).phase == WorkloadPhase.ADMITTED
    assert workload_of(reclaiming).phase == WorkloadPhase.ADMITTED
    assert workload_of(scaled).phase == WorkloadPhase.ADMITTED
    assert admitted_cpu(manager) == 6000  # what summing status.admission reports

    # The engine.
    assert engine_cpu(manager) == 4000

    # The API: ClusterQueue and LocalQueue status.
    cq_status = viewer_client.get("/api/v1/clusterqueues/cq/").json()["status"]
    held = [{"name": "default", "resources": [{"name": "cpu", "total": "4", "borrowed": "0"}]}]
    assert cq_status["flavorsReservation"] == held
    assert cq_status["flavorsUsage"] == held
    lq_status = viewer_client.get("/api/v1/namespaces/ns/localqueues/lq-cq/").json()["status"]
    assert lq_status["flavorsUsage"] == [
        {"name": "default", "resources": [{"name": "cpu", "total": "4"}]}]

    # The UI: the queue's bars and its table of workloads holding quota.
    (group,) = domain_usage(manager, only=cq).queue("cq").resource_groups
    assert [(u.resource, u.used) for u in group] == [("cpu", 4000)]
    page = viewer_ui.get(reverse("ui-clusterqueue", kwargs={"cluster": manager.name,
                                                             "name": "cq"}))
    assert page.status_code == 200
    usage = {row["label"]: row["usage"] for row in page.context["admitted"]}
    assert usage == {f"ns/{workload_of(reclaiming).name}": "cpu: 1",
                     f"ns/{workload_of(scaled).name}": "cpu: 1",
                     f"ns/{workload_of(late).name}": "cpu: 2"}

    # The metrics, and the usage history.
    labels = {"cluster": manager.name, "cluster_queue": "cq", "flavor": "default",
              "resource": "cpu"}
    assert metric("kueue_cluster_queue_resource_usage", **labels) == 4.0
    assert metric("kueue_cluster_queue_resource_reservation", **labels) == 4.0
    history.sample_usage(now=t0 + timedelta(seconds=54))
    assert QueueUsageSample.objects.get(cluster_queue="cq").usage == {"default/cpu": 4}


def test_held_admission_scales_down_only_pod_sets_smaller_than_admitted() -> None:
    admission = core_types.Admission("cq", (
        core_types.PodSetAssignment("main", {"cpu": "f"}, 4, {"cpu": 4000}),
        core_types.PodSetAssignment("aux", {"cpu": "f"}, 2, {"cpu": 1000}),
    ))
    held = snapshots.held_admission({
        "admission": {"clusterQueue": "cq", "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "f"}, "count": 4, "resourceUsage": {"cpu": "4"}},
            {"name": "aux", "flavors": {"cpu": "f"}, "count": 2, "resourceUsage": {"cpu": "1"}},
        ]},
        "pod_sets": [{"name": "main", "count": 3}, {"name": "aux", "count": 5}],
        "reclaimable_pods": [{"name": "main", "count": 1}],
    })
    assert held == core_types.Admission("cq", (
        core_types.PodSetAssignment("main", {"cpu": "f"}, 2, {"cpu": 2000}),
        admission.pod_sets[1],
    ))
