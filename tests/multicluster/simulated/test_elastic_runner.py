"""The simulated cluster runs elastic jobs on their admitted workload slice:
scale-down deletes pods as the Job controller does, a pending scale-up leaves the extra
pods gated, an admitted one ungates them; non-elastic jobs are left as they are."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from multicluster.choices import PodPhase
from multicluster.models import Cluster, Pod, PodGroup
from multicluster.simulated import runner
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Event, Job, Workload, WorkloadPriorityClass
from scheduling.workload import conditions as cond
from scheduling.workload import slices as elastic
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

ELASTIC = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
GATE = elastic.ELASTIC_JOB_SCHEDULING_GATE
ACTIVE = (PodPhase.PENDING, PodPhase.RUNNING)


def at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


def elastic_job(name: str, *, parallelism: int, run_seconds: int = 1000,
                **kwargs: Any) -> Job:
    return services.submit_job(
        job_manifest(name, "lq-cq", parallelism=parallelism, run_seconds=run_seconds,
                     annotations=ELASTIC, **kwargs),
        namespace="ns")


def active_pods(job: Job) -> list[Pod]:
    return list(Pod.objects.filter(job=job, phase__in=ACTIVE).order_by("name"))


def gated(job: Job) -> list[Pod]:
    return [p for p in active_pods(job) if p.scheduling_gates]


def ungated(job: Job) -> list[Pod]:
    return [p for p in active_pods(job) if not p.scheduling_gates]


def slices(job: Job) -> list[Workload]:
    return elastic.ordered(Workload.objects.filter(job=job))


def deleted_pods(job: Job) -> list[str]:
    return sorted(
        message.removeprefix("Deleted pod: ")
        for message in Event.objects.filter(object_kind="Job", object_name=job.name,
                                            reason="SuccessfulDelete")
        .values_list("message", flat=True))


def job_status(job: Job) -> dict[str, Any]:
    job.refresh_from_db()
    return job.status


@pytest.fixture
def cq(make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    return make_queue("cq", {"cpu": "4"})


# =========================================================================================
# Scale-down
# =========================================================================================


def test_scale_down_deletes_pods_while_the_rest_keep_running(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = elastic_job("j", parallelism=4)
    reconcilers.step(t0)
    reconcilers.step(at(t0, 3))
    before = {p.pk: p for p in active_pods(job)}
    assert len(before) == 4
    assert all(p.phase == PodPhase.RUNNING for p in before.values())

    result = elastic.scale_job(job, 1, now=at(t0, 5))
    assert result.action == "scale-down"
    reconcilers.step(at(t0, 5))

    (kept,) = active_pods(job)
    # The survivor is one of the old pods, still running since it started (no restart).
    assert kept.pk in before
    assert kept.phase == PodPhase.RUNNING
    assert kept.ready
    assert kept.scheduled_at == t0
    assert kept.scheduling_gates == []
    assert not Pod.objects.filter(job=job).exclude(pk=kept.pk).exists()
    assert deleted_pods(job) == sorted(p.name for pk, p in before.items() if pk != kept.pk)
    status = job_status(job)
    assert (status["active"], status["ready"]) == (1, 1)
    assert not any(c["type"] == "Complete" for c in status.get("conditions", ()))
    (wl,) = slices(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert wl.pod_sets[0]["count"] == 1
    assert wl.admission["podSetAssignments"][0]["count"] == 4  # admission keeps the old count

    # Later passes leave the job at its new size.
    reconcilers.step(at(t0, 20))
    assert [p.pk for p in active_pods(job)] == [kept.pk]


def test_scale_down_deletes_pods_not_ready_before_running_ones(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = elastic_job("j", parallelism=2)
    reconcilers.step(t0)
    reconcilers.step(at(t0, 3))
    old = {p.name for p in active_pods(job)}
    assert len(old) == 2

    # Scale up to 4; the new slice is admitted and its 2 extra pods are bound at t0+10,
    # ready only at t0+12 (start delay 2 s).
    assert elastic.scale_job(job, 4, now=at(t0, 10)).action == "scale-up"
    reconcilers.step(at(t0, 10))
    new = {p.name for p in active_pods(job)} - old
    assert len(new) == 2
    assert all(p.node_name and not p.ready for p in active_pods(job) if p.name in new)

    # Scale down to 2 before they are ready: the Job controller removes the not-ready ones.
    assert elastic.scale_job(job, 2, now=at(t0, 11)).action == "scale-down"
    reconcilers.step(at(t0, 11))
    pods = active_pods(job)
    assert {p.name for p in pods} == old
    assert all(p.phase == PodPhase.RUNNING and p.ready for p in pods)
    assert deleted_pods(job) == sorted(new)


def test_pod_set_count_lowered_in_place_leaves_the_rest_gated(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    """The pods the slice lets run are min(admitted count, current pod set count); the
    job's other pods (parallelism is still 3) wait gated."""
    job = elastic_job("j", parallelism=3)
    reconcilers.step(t0)
    reconcilers.step(at(t0, 3))
    (wl,) = slices(job)
    Workload.objects.filter(pk=wl.pk).update(pod_sets=[{**wl.pod_sets[0], "count": 1}])
    runner.sync_cluster(wl.cluster_id, now=at(t0, 5))

    assert len(ungated(job)) == 1
    assert ungated(job)[0].phase == PodPhase.RUNNING
    assert len(gated(job)) == 2
    assert len(deleted_pods(job)) == 2
    status = job_status(job)
    assert (status["active"], status["ready"]) == (3, 1)


# =========================================================================================
# Scale-up
# =========================================================================================


def test_pending_scale_up_keeps_the_old_pods_and_gates_the_new_ones(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = elastic_job("j", parallelism=2)
    blocker = services.submit_job(job_manifest("blocker", "lq-cq", cpu="2", run_seconds=30),
                                  namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 3))
    old = {p.pk for p in active_pods(job)}
    assert len(old) == 2

    result = elastic.scale_job(job, 4, now=at(t0, 5))
    assert result.action == "scale-up"
    reconcilers.step(at(t0, 5))
    reconcilers.step(at(t0, 10))

    first, second = slices(job)
    assert first.phase == WorkloadPhase.ADMITTED
    assert second.phase == WorkloadPhase.PENDING  # no quota until the blocker finishes
    job.refresh_from_db()
    assert job.suspend is False
    running = ungated(job)
    assert {p.pk for p in running} == old
    assert all(p.phase == PodPhase.RUNNING and p.scheduled_at == t0 for p in running)
    waiting = gated(job)
    assert len(waiting) == 2
    for pod in waiting:
        assert pod.scheduling_gates == [GATE]
        assert pod.phase == PodPhase.PENDING
        assert pod.node_name == ""
        assert pod.reason == "SchedulingGated"
        assert pod.message == "Scheduling is blocked due to non-empty scheduling gates"
    # The job runs on the admitted slice: its pods belong to it.
    assert set(Pod.objects.filter(job=job).values_list("workload_id", flat=True)) == {first.pk}
    status = job_status(job)
    assert (status["active"], status["ready"]) == (4, 2)  # gated pods are active
    assert not deleted_pods(job)

    # --- the blocker finishes, the new slice is admitted: the gated pods run ---
    reconcilers.step(at(t0, 40))
    first.refresh_from_db()
    second.refresh_from_db()
    assert Workload.objects.get(job=blocker).phase == WorkloadPhase.FINISHED
    assert second.phase == WorkloadPhase.ADMITTED
    assert first.phase == WorkloadPhase.FINISHED
    assert not gated(job)
    opened = [p for p in active_pods(job) if p.pk not in old]
    assert {p.pk for p in opened} == {p.pk for p in waiting}  # ungated, not recreated
    assert all(p.node_name and p.scheduled_at == at(t0, 40) for p in opened)
    assert all(p.reason == "" for p in opened)
    assert {p.pk for p in active_pods(job)} >= old
    # Pods and the pod group moved to the new slice.
    assert set(Pod.objects.filter(job=job).values_list("workload_id", flat=True)) == {second.pk}
    assert set(PodGroup.objects.filter(job=job).values_list("workload_id", flat=True)) == {
        second.pk}
    reconcilers.step(at(t0, 42))
    status = job_status(job)
    assert (status["active"], status["ready"]) == (4, 4)
    assert all(p.phase == PodPhase.RUNNING for p in active_pods(job))


def test_ungating_is_capped_by_the_admitted_count_lowest_names_first(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = elastic_job("j", parallelism=1)
    reconcilers.step(t0)
    (wl,) = slices(job)
    # The job wants 4 pods, the slice lets 1 run: 3 gated pods.
    manifest = job.manifest
    manifest["spec"]["parallelism"] = 4
    Job.objects.filter(pk=job.pk).update(manifest=manifest)
    runner.sync_cluster(wl.cluster_id, now=at(t0, 1))
    names = sorted(p.name for p in gated(job))
    assert len(names) == 3
    # An admission for 3 pods: 2 more may run, the lowest names.
    admission = dict(wl.admission)
    admission["podSetAssignments"] = [{**admission["podSetAssignments"][0], "count": 3}]
    Workload.objects.filter(pk=wl.pk).update(
        admission=admission, pod_sets=[{**wl.pod_sets[0], "count": 3}])
    runner.sync_cluster(wl.cluster_id, now=at(t0, 2))
    assert [p.name for p in gated(job)] == names[2:]
    assert len(ungated(job)) == 3
    assert all(p.node_name for p in ungated(job))


# =========================================================================================
# Parallelism 0
# =========================================================================================


def test_parallelism_zero_runs_no_pods_and_does_not_complete(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = elastic_job("j", parallelism=2, run_seconds=30)
    reconcilers.step(t0)
    reconcilers.step(at(t0, 3))
    assert len(active_pods(job)) == 2

    assert elastic.scale_job(job, 0, now=at(t0, 5)).action == "scale-down"
    reconcilers.step(at(t0, 5))
    reconcilers.step(at(t0, 100))  # long after the pods would have finished
    assert not active_pods(job)
    assert not Pod.objects.filter(job=job, phase=PodPhase.SUCCEEDED).exists()
    assert len(deleted_pods(job)) == 2
    status = job_status(job)
    assert status["active"] == 0
    assert not any(c["type"] in ("Complete", "Failed") for c in status.get("conditions", ()))
    assert job.suspend is False
    (wl,) = slices(job)
    assert wl.phase == WorkloadPhase.ADMITTED

    # Scaling back up runs the job again, on a new slice.
    assert elastic.scale_job(job, 2, now=at(t0, 110)).action == "scale-up"
    reconcilers.step(at(t0, 110))
    reconcilers.step(at(t0, 112))
    assert [p.phase for p in active_pods(job)] == [PodPhase.RUNNING, PodPhase.RUNNING]
    reconcilers.step(at(t0, 142))
    status = job_status(job)
    assert any(c["type"] == "Complete" and c["status"] == "True"
               for c in status.get("conditions", ()))
    assert status["succeeded"] == 2


# =========================================================================================
# Eviction while a scale-up waits
# =========================================================================================


def test_preempted_slice_is_released_while_its_scale_up_waits(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "2"}, within_cluster_queue="LowerPriority")
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    job = elastic_job("j", parallelism=2)
    reconcilers.step(t0)
    assert elastic.scale_job(job, 3, now=at(t0, 5)).action == "scale-up"
    reconcilers.step(at(t0, 5))
    first, second = slices(job)
    assert (first.phase, second.phase) == (WorkloadPhase.ADMITTED, WorkloadPhase.PENDING)

    high = services.submit_job(
        job_manifest("high", "lq-cq", cpu="2",
                     labels={"kueue.x-k8s.io/priority-class": "high"}), namespace="ns")
    reconcilers.step(at(t0, 10))
    assert Workload.objects.get(job=high).phase == WorkloadPhase.ADMITTED
    first.refresh_from_db()
    assert first.phase != WorkloadPhase.ADMITTED
    job.refresh_from_db()
    assert job.suspend is True
    assert not active_pods(job)
    # The job was stopped for the evicted slice (not for the waiting one).
    stopped = Event.objects.get(object_kind="Job", object_name="j", reason="Stopped")
    assert stopped.workload_id == first.pk
    evicted = cond.find(first.conditions, "Evicted")
    assert evicted is not None
    assert stopped.message == evicted["message"]


# =========================================================================================
# Non-elastic jobs
# =========================================================================================


def test_non_elastic_job_ignores_parallelism_changes(
    cq: ClusterQueue, reconcilers: Reconcilers, t0: datetime,
) -> None:
    job = services.submit_job(job_manifest("plain", "lq-cq", parallelism=3, run_seconds=1000),
                              namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 3))
    before = [p.pk for p in active_pods(job)]
    assert len(before) == 3
    (wl,) = slices(job)
    for parallelism in (1, 0, 5):
        manifest = job.manifest
        manifest["spec"]["parallelism"] = parallelism
        Job.objects.filter(pk=job.pk).update(manifest=manifest)
        runner.sync_cluster(wl.cluster_id, now=at(t0, 5 + parallelism))
        assert [p.pk for p in active_pods(job)] == before
        assert not gated(job)
    # Lowering the pod set count in place does nothing either: the admission counts.
    Workload.objects.filter(pk=wl.pk).update(pod_sets=[{**wl.pod_sets[0], "count": 1}])
    runner.sync_cluster(wl.cluster_id, now=at(t0, 20))
    assert [p.pk for p in active_pods(job)] == before
    assert not deleted_pods(job)
    status = job_status(job)
    assert (status["active"], status["ready"]) == (3, 3)
