"""Elastic jobs: scaling an admitted job through workload slices (Kueue ``pkg/workloadslicing``), end to end on
the simulated cluster, with every reconciler stepped at chosen times."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from multicluster.choices import PodPhase
from multicluster.models import Cluster, Pod
from scheduling import jobframework, services
from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.jobs import job as batch_job
from scheduling.metrics import prometheus
from scheduling.models import (
    ClusterQueue,
    Event,
    FlavorQuota,
    Job,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from scheduling.workload import conditions as cond
from scheduling.workload import slices as elastic
from tests.fixtures.row_locks import held_open, write_without_waiting
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

ELASTIC = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}


def at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


def sample_scalable_job() -> dict[str, Any]:
    """Kueue's site/static/examples/jobs/sample-scalable-job.yaml, as a manifest."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "sample-elastic-job",
            "namespace": "default",
            "annotations": {"kueue.x-k8s.io/elastic-job": "true"},
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        },
        "spec": {
            "parallelism": 3,
            "completions": 100,
            "template": {"spec": {
                "containers": [{
                    "name": "dummy-job",
                    "image": "registry.k8s.io/e2e-test-images/agnhost:2.53",
                    "command": ["/bin/sh"],
                    "args": ["-c", "sleep 60"],
                    "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                }],
                "restartPolicy": "Never",
            }},
        },
    }


def reserved(cluster: Cluster, resource: str = "cpu") -> int:
    """Quota held in the domain (CPU in millis, memory in bytes), as the cycle counts it."""
    total = 0
    for row in snapshots.reserving_rows(cluster.pk):
        admission = snapshots.admitted_workload(row).admission
        assert admission is not None
        total += sum(ps.resource_usage.get(resource, 0) for ps in admission.pod_sets)
    return total


def slices(job: Job) -> list[Workload]:
    return elastic.ordered(Workload.objects.filter(job=job))


def admitted_count(wl: Workload) -> int:
    return sum(int(ps["count"]) for ps in (wl.admission or {}).get("podSetAssignments", ()))


def running_pods(job: Job) -> int:
    return Pod.objects.filter(job=job, phase__in=(PodPhase.PENDING, PodPhase.RUNNING),
                              scheduling_gates=[]).exclude(node_name="").count()


def user_queue(manager: Cluster, cpu: str, memory: str = "10Gi", **fields: Any) -> ClusterQueue:
    flavor, _ = ResourceFlavor.objects.get_or_create(cluster=manager, name="default-flavor")
    cq = ClusterQueue.objects.create(cluster=manager, name="cluster-queue", **fields)
    for position, (resource, value) in enumerate((("cpu", cpu), ("memory", memory))):
        FlavorQuota.objects.create(cluster_queue=cq, flavor=flavor, resource=resource,
                                   position=position, nominal_quota=value)
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def filler(name: str, cpu: str, *, priority_class: str | None = None,
           run_seconds: int = 600) -> dict[str, Any]:
    manifest = job_manifest(name, "user-queue", cpu=cpu, run_seconds=run_seconds)
    if priority_class:
        manifest["metadata"]["labels"][jobframework.PRIORITY_CLASS_LABEL] = priority_class
    return manifest


# =========================================================================================
# Kueue's sample-scalable-job: 3 → 5 → 2 pods
# =========================================================================================


def replaced_slices_total(cluster: Cluster, cluster_queue: str) -> float:
    for family in text_string_to_metric_families(prometheus.render().decode()):
        for sample in family.samples:
            if (sample.name == "kueue_replaced_workload_slices_total"
                    and sample.labels.get("cluster_queue") == cluster_queue
                    and sample.labels.get("cluster") == cluster.name):
                return float(sample.value)
    return 0.0


def test_sample_scalable_job_scales_up_through_a_slice_and_down_in_place(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime, settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    if settings.REDIS_URL:
        settings.METRICS_REDIS_PREFIX = f"kueueweb-test:{uuid.uuid4().hex}:"
    prometheus.event_store().clear()
    user_queue(manager, cpu="800m", memory="4Gi")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    reconcilers.step(t0)
    (first,) = slices(job)
    assert first.phase == WorkloadPhase.ADMITTED
    assert first.annotations[jobframework.WORKLOAD_SLICE_NAME_ANNOTATION] == first.name
    assert reserved(manager) == 300
    reconcilers.step(at(t0, 2))
    assert running_pods(job) == 3

    # --- scale up to 5: a new slice for 2 pods' worth of quota on the same flavor ---
    result = elastic.scale_job(job, 5, now=at(t0, 5))
    assert result.action == "scale-up"
    second = result.workload
    assert second is not None
    assert second.name != first.name
    # Kueue names each slice with the job's generation in the hash.
    assert second.name == jobframework.workload_name_for_owner(job.name, str(job.uid), extra="2")
    assert second.pod_sets[0]["count"] == 5
    assert second.annotations[elastic.WORKLOAD_SLICE_REPLACEMENT_FOR] == f"default/{first.name}"
    assert second.annotations[jobframework.WORKLOAD_SLICE_NAME_ANNOTATION] == first.name
    job.refresh_from_db()
    assert job.manifest["spec"]["parallelism"] == 5
    assert job.manifest["metadata"]["generation"] == 2
    assert job.suspend is False  # never suspended while the slice waits

    with django_capture_on_commit_callbacks(execute=True):
        reconcilers.step(at(t0, 6))
    first.refresh_from_db()
    second.refresh_from_db()
    assert second.phase == WorkloadPhase.ADMITTED
    assert admitted_count(second) == 5
    assignment = second.admission["podSetAssignments"][0]
    assert assignment["flavors"] == {"cpu": "default-flavor", "memory": "default-flavor"}
    assert assignment["resourceUsage"] == {"cpu": "500m", "memory": "500Mi"}
    assert first.phase == WorkloadPhase.FINISHED
    finished = cond.find(first.conditions, "Finished")
    assert finished is not None
    assert finished["reason"] == "WorkloadSliceReplaced"
    assert finished["message"] == (
        f"Replaced to accommodate a workload (UID: {second.uid}, JobUID: {job.uid}) due to "
        "workload slice aggregation")
    assert reserved(manager) == 500
    assert reserved(manager, "memory") == 500 * 1024**2
    assert replaced_slices_total(manager, "cluster-queue") == 1
    assert Event.objects.filter(workload=first, reason="WorkloadSliceReplaced").exists()
    reconcilers.step(at(t0, 9))
    assert running_pods(job) == 5
    # The old pods kept running through the scale-up: the job never restarted.
    assert Pod.objects.filter(job=job, phase=PodPhase.RUNNING,
                              scheduled_at=t0).count() == 3

    # --- a workload that needs 400m waits: 300m are free ---
    waiting = services.submit_job(filler("waiting", "400m"), namespace="default")
    reconcilers.step(at(t0, 10))
    (waiting_wl,) = Workload.objects.filter(job=waiting)
    assert waiting_wl.phase == WorkloadPhase.PENDING

    # --- scale down to 2: the same slice shrinks, its quota is free at once ---
    result = elastic.scale_job(job, 2, now=at(t0, 12))
    assert result.action == "scale-down"
    assert result.workload is not None
    assert result.workload.pk == second.pk
    assert reserved(manager) == 200
    reconcilers.step(at(t0, 12))
    waiting_wl.refresh_from_db()
    assert waiting_wl.phase == WorkloadPhase.ADMITTED
    assert reserved(manager) == 600
    assert [wl.pk for wl in slices(job)] == [first.pk, second.pk]  # no new slice
    second.refresh_from_db()
    assert second.phase == WorkloadPhase.ADMITTED
    assert second.pod_sets[0]["count"] == 2
    assert running_pods(job) == 2


# =========================================================================================
# Waiting, preemption, and the rules
# =========================================================================================


def test_scale_up_that_does_not_fit_waits_without_disturbing_the_running_pods(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="500m")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    other = services.submit_job(filler("other", "200m"), namespace="default")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 2))
    assert reserved(manager) == 500
    pods_before = set(Pod.objects.filter(job=job).values_list("name", flat=True))

    result = elastic.scale_job(job, 5, now=at(t0, 3))
    new = result.workload
    assert new is not None
    for second in (4, 30, 60):
        reconcilers.step(at(t0, second))
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.PENDING
    qr = cond.find(new.conditions, "QuotaReserved")
    assert qr is not None
    assert qr["status"] == "False"
    assert "insufficient unused quota for cpu in flavor default-flavor, 200m more needed" in (
        qr["message"])
    (old,) = [wl for wl in slices(job) if wl.pk != new.pk]
    assert old.phase == WorkloadPhase.ADMITTED
    assert running_pods(job) == 3
    assert set(Pod.objects.filter(job=job, scheduling_gates=[]).values_list(
        "name", flat=True)) == pods_before
    job.refresh_from_db()
    assert job.suspend is False

    # Capacity frees: the other job is deleted; the scale-up is admitted.
    services.delete_job(other)
    reconcilers.step(at(t0, 61))
    new.refresh_from_db()
    old.refresh_from_db()
    assert new.phase == WorkloadPhase.ADMITTED
    assert admitted_count(new) == 5
    assert old.phase == WorkloadPhase.FINISHED
    assert reserved(manager) == 500
    reconcilers.step(at(t0, 64))
    assert running_pods(job) == 5


def test_scale_up_preempts_lower_priority_work_as_kueue_would(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="500m", within_cluster_queue="LowerPriority")
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=1000)
    WorkloadPriorityClass.objects.create(cluster=manager, name="low", value=10)
    manifest = sample_scalable_job()
    manifest["metadata"]["labels"][jobframework.PRIORITY_CLASS_LABEL] = "high"
    job = services.submit_job(manifest, namespace="default")
    low_a = services.submit_job(filler("low-a", "100m", priority_class="low"),
                                namespace="default")
    low_b = services.submit_job(filler("low-b", "100m", priority_class="low"),
                                namespace="default")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 2))
    assert reserved(manager) == 500

    new = elastic.scale_job(job, 4, now=at(t0, 3)).workload
    assert new is not None
    assert new.priority == 1000
    reconcilers.step(at(t0, 4))
    victims = [wl for wl in Workload.objects.filter(job__in=[low_a, low_b])
               if cond.find(wl.conditions, "Preempted")]
    # One more pod needs 100m: exactly one low-priority victim, never the old slice.
    assert len(victims) == 1
    preempted = cond.find(victims[0].conditions, "Preempted")
    assert preempted is not None
    assert preempted["reason"] == "InClusterQueue"
    reconcilers.step(at(t0, 5))
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.ADMITTED
    assert admitted_count(new) == 4
    assert reserved(manager) == 500
    old = [wl for wl in slices(job) if wl.pk != new.pk][0]
    assert cond.find(old.conditions, "Finished")["reason"] == "WorkloadSliceReplaced"  # type: ignore[index]


def test_scaling_back_while_a_scale_up_waits_finishes_the_waiting_slice(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="300m")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    reconcilers.step(t0)
    new = elastic.scale_job(job, 6, now=at(t0, 1)).workload
    assert new is not None
    # A second scale-up resizes the waiting slice instead of making another.
    again = elastic.scale_job(job, 7, now=at(t0, 2))
    assert again.action == "scale-up-updated"
    assert again.workload is not None
    assert again.workload.pk == new.pk
    new.refresh_from_db()
    assert new.pod_sets[0]["count"] == 7
    back = elastic.scale_job(job, 2, now=at(t0, 3))
    assert back.action == "scale-down"
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.FINISHED
    assert cond.find(new.conditions, "Finished")["reason"] == "OutOfSync"  # type: ignore[index]
    assert reserved(manager) == 200
    assert len([wl for wl in slices(job) if wl.phase != WorkloadPhase.FINISHED]) == 1


def test_preempting_the_old_slice_while_a_scale_up_waits_restarts_the_job_at_its_new_size(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="400m")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    reconcilers.step(t0)
    old = slices(job)[0]
    new = elastic.scale_job(job, 5, now=at(t0, 1)).workload
    assert new is not None
    reconcilers.step(at(t0, 2))
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.PENDING  # 500m do not fit in 400m

    services.evict_workload(old, now=at(t0, 3))
    reconcilers.step(at(t0, 3))
    old.refresh_from_db()
    new.refresh_from_db()
    assert old.phase == WorkloadPhase.FINISHED
    assert cond.find(old.conditions, "Finished")["reason"] == "WorkloadSliceReplaced"  # type: ignore[index]
    # The waiting slice asks for the full 5 pods now: it does not fit, and holds nothing.
    assert new.phase == WorkloadPhase.PENDING
    assert reserved(manager) == 0
    job.refresh_from_db()
    assert job.suspend is True


def test_job_completion_finishes_a_waiting_scale_up(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="200m")
    manifest = job_manifest("short", "user-queue", cpu="100m", parallelism=2, completions=4,
                            run_seconds=10, annotations=ELASTIC)
    job = services.submit_job(manifest, namespace="default")
    reconcilers.step(t0)
    # Beyond completions: min(parallelism, completions) pods, so 4, not 10.
    new = elastic.scale_job(job, 10, now=at(t0, 1)).workload
    assert new is not None
    assert new.pod_sets[0]["count"] == 4
    job.refresh_from_db()
    assert job.manifest["spec"]["parallelism"] == 10
    for second in (2, 12, 14, 24, 30):
        reconcilers.step(at(t0, second))
    job.refresh_from_db()
    assert elastic.job_finished(job)
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.FINISHED
    assert new.admission is None  # never admitted: it waited for quota to the end
    assert reserved(manager) == 0


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "must be greater than or equal to 0"),
        ("3", "must be an integer, not '3'"),
        (True, "must be an integer, not True"),
        (2**31, "must be less than or equal to 2147483647"),
    ],
)
def test_parallelism_must_be_an_int32_of_at_least_zero(
    manager: Cluster, value: Any, message: str,
) -> None:
    user_queue(manager, cpu="1")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    with pytest.raises(ValidationError) as excinfo:
        elastic.scale_job(job, value)
    assert excinfo.value.message_dict == {"spec.parallelism": [message]}
    job.refresh_from_db()
    assert job.manifest["spec"]["parallelism"] == 3


def test_partial_admission_jobs_cannot_scale_while_running(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="1")
    manifest = job_manifest("partial", "user-queue", cpu="100m", parallelism=4,
                            annotations={batch_job.JOB_MIN_PARALLELISM_ANNOTATION: "2"})
    job = services.submit_job(manifest, namespace="default")
    reconcilers.step(t0)
    job.refresh_from_db()
    assert job.suspend is False
    with pytest.raises(ValidationError) as excinfo:
        elastic.scale_job(job, 6)
    assert excinfo.value.message_dict == {"spec.parallelism": [
        "Forbidden: cannot change when partial admission is enabled and the job is not "
        "suspended"]}


def test_non_elastic_jobs_keep_their_size_while_admitted_but_resize_while_queued(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="300m")
    running = services.submit_job(job_manifest("plain", "user-queue", cpu="100m", parallelism=3),
                                  namespace="default")
    queued = services.submit_job(job_manifest("queued", "user-queue", cpu="100m", parallelism=3),
                                 namespace="default")
    reconcilers.step(t0)
    with pytest.raises(ValidationError) as excinfo:
        elastic.scale_job(running, 5)
    (message,) = excinfo.value.message_dict["spec.parallelism"]
    assert message.startswith("Forbidden: cannot change while the job's workload holds quota")
    result = elastic.scale_job(queued, 1)
    assert result.action == "updated"
    (wl,) = Workload.objects.filter(job=queued)
    assert wl.pod_sets[0]["count"] == 1
    assert Workload.objects.filter(job=queued).count() == 1
    # The gate off: even an annotated job is a classic one.


def test_the_feature_gate_off_makes_annotated_jobs_classic(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime, settings: Any,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "ELASTIC_JOBS_VIA_WORKLOAD_SLICES": False}
    user_queue(manager, cpu="1")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    reconcilers.step(t0)
    (wl,) = Workload.objects.filter(job=job)
    assert jobframework.WORKLOAD_SLICE_NAME_ANNOTATION not in wl.annotations
    with pytest.raises(ValidationError):
        elastic.scale_job(job, 5)


def test_finished_jobs_cannot_be_scaled(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="1")
    job = services.submit_job(job_manifest("done", "user-queue", cpu="100m", run_seconds=5,
                                           annotations=ELASTIC), namespace="default")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 30))
    job.refresh_from_db()
    assert elastic.job_finished(job)
    with pytest.raises(ValidationError) as excinfo:
        elastic.scale_job(job, 3)
    assert excinfo.value.message_dict == {"spec.parallelism": ["Forbidden: the job has finished"]}


def test_scaling_to_zero_frees_the_quota_and_keeps_the_job(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="1")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    reconcilers.step(t0)
    result = elastic.scale_job(job, 0, now=at(t0, 1))
    assert result.action == "scale-down"
    assert reserved(manager) == 0
    reconcilers.step(at(t0, 2))
    job.refresh_from_db()
    assert not elastic.job_finished(job)
    assert running_pods(job) == 0
    (wl,) = slices(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    # And back up to 2: a new slice, admitted for 2 pods.
    new = elastic.scale_job(job, 2, now=at(t0, 3)).workload
    assert new is not None
    assert new.pk != wl.pk
    reconcilers.step(at(t0, 4))
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.ADMITTED
    assert reserved(manager) == 200


def test_only_operators_of_the_namespace_may_scale(
    manager: Cluster, django_user_model: Any,
) -> None:
    user_queue(manager, cpu="1")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    viewer = django_user_model.objects.create_user("viewer", password="x")
    with pytest.raises(PermissionDenied):
        elastic.scale_job(job, 5, user=viewer)


def test_unchanged_parallelism_is_a_no_op(manager: Cluster) -> None:
    user_queue(manager, cpu="1")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    result = elastic.scale_job(job, 3)
    assert result.action == "unchanged"
    job.refresh_from_db()
    assert job.manifest["metadata"]["generation"] == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL row locks")
def test_scaling_leaves_rows_that_reference_the_job_free_to_insert(
    manager: Cluster, reconcilers: Reconcilers, t0: datetime,
) -> None:
    user_queue(manager, cpu="1")
    job = services.submit_job(sample_scalable_job(), namespace="default")
    reconcilers.step(t0)
    (wl,) = slices(job)

    # The cluster's pass inserts the job's pods while a user scales it.
    with held_open(lambda: elastic.scale_job(job, 2, now=at(t0, 1))):
        write_without_waiting(lambda: Pod.objects.create(
            cluster=manager, job=job, workload=wl, namespace="default", name="extra",
            created_at=t0))

    assert Pod.objects.filter(job=job, name="extra").exists()
    assert Job.objects.get(pk=job.pk).manifest["spec"]["parallelism"] == 2
