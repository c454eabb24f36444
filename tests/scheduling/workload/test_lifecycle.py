"""A workload's life after admission, with time travel: every reconciler runs at a chosen
``now`` (tests.fixtures.scheduling.Reconcilers), so timeouts and back-offs are exact."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from multicluster.choices import PodPhase
from multicluster.models import Cluster, Node, Pod
from scheduling import services
from scheduling.cache import snapshots
from scheduling.choices import QueueState, WorkloadPhase
from scheduling.models import ClusterQueue, Event, Job, Workload, WorkloadPriorityClass
from scheduling.workload import conditions as cond
from tests.fixtures import plans
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


def workload_of(job: Job) -> Workload:
    return Workload.objects.get(job=job)


def condition(wl: Workload, type_: str) -> dict[str, Any]:
    found = cond.find(wl.conditions, type_)
    assert found is not None, f"{type_} not set on {wl.name}: {wl.conditions}"
    return dict(found)


def reserved_cpu(cluster: Cluster) -> int:
    total = 0
    for row in snapshots.reserving_rows(cluster.pk):
        for ps in snapshots.admitted_workload(row).admission.pod_sets:  # type: ignore[union-attr]
            total += ps.resource_usage.get("cpu", 0)
    return total


def reasons(wl: Workload, *, about: str | None = None) -> list[str]:
    """The reasons of the workload's events, oldest first; ``about`` keeps only those about
    objects of that kind (its pods have FailedScheduling events of their own)."""
    events = Event.objects.filter(workload=wl)
    if about is not None:
        events = events.filter(object_kind=about)
    return list(events.order_by("id").values_list("reason", flat=True))


def set_config(settings: Any, **values: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, **values}


# =========================================================================================
# The happy path
# =========================================================================================


def test_job_runs_to_completion_and_gives_quota_back(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(job_manifest("work", "lq-cq", parallelism=3, run_seconds=60),
                              namespace="ns")

    reconcilers.step(t0)
    wl = workload_of(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert condition(wl, "PodsReady")["reason"] == "WaitForStart"
    job.refresh_from_db()
    assert job.suspend is False
    assert job.manifest["spec"]["suspend"] is False
    pods = list(Pod.objects.filter(job=job))
    assert len(pods) == 3
    assert all(p.node_name for p in pods)
    assert reserved_cpu(manager) == 3000

    reconcilers.step(at(t0, 2))
    wl.refresh_from_db()
    assert condition(wl, "PodsReady")["status"] == "True"
    assert condition(wl, "PodsReady")["reason"] == "Started"
    job.refresh_from_db()
    assert job.status["ready"] == 3
    assert job.status["active"] == 3

    reconcilers.step(at(t0, 61))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED  # the pods run 60 s from t0+2

    reconcilers.step(at(t0, 62))
    wl.refresh_from_db()
    job.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    assert condition(wl, "Finished")["reason"] == "Succeeded"
    assert job.status["succeeded"] == 3
    assert job.status["completionTime"]
    assert reserved_cpu(manager) == 0
    assert reasons(wl) == ["CreatedWorkload", "QuotaReserved", "Admitted", "Started", "PodsReady",
                           "Finished"]


def test_completions_beyond_parallelism_run_in_waves(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(
        job_manifest("waves", "lq-cq", parallelism=2, completions=4, run_seconds=10),
        namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 12))  # first wave done, second wave created and bound
    job.refresh_from_db()
    assert job.status["succeeded"] == 2
    assert job.status["active"] == 2
    reconcilers.step(at(t0, 14))
    reconcilers.step(at(t0, 24))
    job.refresh_from_db()
    assert job.status["succeeded"] == 4
    assert workload_of(job).phase == WorkloadPhase.FINISHED


def test_deleting_a_running_job_frees_quota_and_pods(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "2"})
    job = services.submit_job(job_manifest("a", "lq-cq", cpu="2"), namespace="ns")
    waiting = services.submit_job(job_manifest("b", "lq-cq", cpu="2"), namespace="ns")
    reconcilers.step(t0)
    assert Pod.objects.filter(job=job).count() == 1
    assert workload_of(waiting).phase == WorkloadPhase.PENDING
    services.delete_job(job)
    assert Pod.objects.filter(cluster=manager, namespace="ns", name__startswith="a-").count() == 0
    reconcilers.step(at(t0, 1))
    assert workload_of(waiting).phase == WorkloadPhase.ADMITTED


# =========================================================================================
# WaitForPodsReady, back-off and the back-off limit
# =========================================================================================


def test_pods_ready_timeout_backs_off_exponentially_then_deactivates(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, settings: Any,
    t0: datetime,
) -> None:
    """No node matches the job's selector: its pods never start. Each PodsReady timeout
    evicts and requeues after 60, 120, 240 s; the limit of 3 retries then deactivates."""
    set_config(settings, PODS_READY_TIMEOUT_SECONDS=300, REQUEUE_BACKOFF_LIMIT_COUNT=3)
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(
        job_manifest("stuck", "lq-cq", node_selector={"zone": "nowhere"}), namespace="ns")

    admitted_at = t0
    waits = []
    for attempt in range(1, 4):
        reconcilers.step(admitted_at)
        wl = workload_of(job)
        assert wl.phase == WorkloadPhase.ADMITTED, attempt
        reconcilers.step(admitted_at + timedelta(seconds=299))
        assert workload_of(job).phase == WorkloadPhase.ADMITTED
        evicted_at = admitted_at + timedelta(seconds=300)
        reconcilers.step(evicted_at)
        wl = workload_of(job)
        assert wl.phase == WorkloadPhase.PENDING
        assert condition(wl, "Evicted")["reason"] == "PodsReadyTimeout"
        assert condition(wl, "Evicted")["message"] == f"Exceeded the PodsReady timeout ns/{wl.name}"
        assert condition(wl, "Requeued")["status"] == "False"
        assert wl.queue_state == QueueState.INADMISSIBLE
        assert wl.requeue_state["count"] == attempt
        assert wl.requeue_at is not None
        wait = (wl.requeue_at - evicted_at).total_seconds()
        waits.append(wait)
        job.refresh_from_db()
        assert job.suspend is True
        assert not Pod.objects.filter(job=job).exists()
        # Still backing off one second before requeueAt; back in the queue at requeueAt.
        reconcilers.step(wl.requeue_at - timedelta(seconds=1))
        assert workload_of(job).phase == WorkloadPhase.PENDING
        admitted_at = wl.requeue_at
    assert waits == [60, 120, 240]

    reconcilers.step(admitted_at)
    wl = workload_of(job)
    assert condition(wl, "Requeued")["reason"] == "BackoffFinished"
    assert wl.phase == WorkloadPhase.ADMITTED
    reconcilers.step(admitted_at + timedelta(seconds=300))
    wl = workload_of(job)
    assert wl.active is False
    assert condition(wl, "Evicted")["reason"] == "DeactivatedDueToRequeuingLimitExceeded"
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.requeue_state is None
    assert "RequeuingLimitExceeded" in reasons(wl)
    assert wl.scheduling_stats["evictions"] == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 3},
        {"reason": "DeactivatedDueToRequeuingLimitExceeded", "underlyingCause": "", "count": 1},
    ]


def test_backoff_is_capped_at_the_maximum(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, settings: Any,
    t0: datetime,
) -> None:
    set_config(settings, PODS_READY_TIMEOUT_SECONDS=10, REQUEUE_BACKOFF_BASE_SECONDS=100,
               REQUEUE_BACKOFF_MAX_SECONDS=250)
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(
        job_manifest("stuck", "lq-cq", node_selector={"zone": "nowhere"}), namespace="ns")
    now, waits = t0, []
    for _ in range(3):
        reconcilers.step(now)
        reconcilers.step(now + timedelta(seconds=10))
        wl = workload_of(job)
        waits.append((wl.requeue_at - (now + timedelta(seconds=10))).total_seconds())
        now = wl.requeue_at
    assert waits == [100, 200, 250]


def test_lost_node_waits_for_recovery_and_recovers(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    from multicluster.simulated import faults

    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(job_manifest("fragile", "lq-cq", parallelism=2, run_seconds=600),
                              namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 2))
    assert condition(workload_of(job), "PodsReady")["reason"] == "Started"

    victim = Pod.objects.filter(job=job).first()
    assert victim is not None
    node = Node.objects.get(cluster=manager, name=victim.node_name)
    lost = faults.lose_node(node, now=at(t0, 10))
    assert lost == Pod.objects.filter(job=job, node_name=node.name).count() >= 1
    reconcilers.step(at(t0, 10))
    wl = workload_of(job)
    ready = condition(wl, "PodsReady")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False", "WaitForRecovery", "Not all pods are ready or succeeded")
    replacements = Pod.objects.filter(job=job, phase=PodPhase.PENDING)
    assert replacements.count() == lost
    assert node.name not in set(replacements.values_list("node_name", flat=True))
    job.refresh_from_db()
    assert job.status["failed"] == lost

    reconcilers.step(at(t0, 12))
    assert condition(workload_of(job), "PodsReady")["reason"] == "Recovered"


def test_pods_ready_starts_over_after_a_pods_ready_timeout_eviction(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    settings: Any, t0: datetime,
) -> None:
    """Kueue's job reconciler (``generatePodsReadyCondition``): a workload that is not
    admitted, evicted and requeued included, is PodsReady=False ``WaitForStart``. A
    workload evicted while waiting for recovery is admitted again waiting for its pods
    from the start: the PodsReady timeout counts from the new admission (not the recovery
    timeout from the old condition), and ready pods make it ``Started``, not ``Recovered``."""
    from multicluster.simulated import faults

    set_config(settings, PODS_READY_TIMEOUT_SECONDS=300, PODS_READY_RECOVERY_TIMEOUT_SECONDS=120,
               REQUEUE_BACKOFF_BASE_SECONDS=60)
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(job_manifest("fragile", "lq-cq", run_seconds=6000),
                              namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 2))
    assert condition(workload_of(job), "PodsReady")["reason"] == "Started"
    nodes = list(Node.objects.filter(cluster=manager))
    for node in nodes:  # the replacement pod has nowhere to go
        faults.lose_node(node, now=at(t0, 10))
    reconcilers.step(at(t0, 10))
    assert condition(workload_of(job), "PodsReady")["reason"] == "WaitForRecovery"

    reconcilers.step(at(t0, 130))
    wl = workload_of(job)
    assert wl.phase == WorkloadPhase.PENDING
    assert condition(wl, "Evicted")["reason"] == "PodsReadyTimeout"
    assert wl.scheduling_stats["evictions"] == [
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForRecovery", "count": 1}]
    ready = condition(wl, "PodsReady")
    assert (ready["status"], ready["reason"]) == ("False", "WaitForStart")

    for node in nodes:
        faults.restore_node(node)
    reconcilers.step(at(t0, 190))  # back-off over: admitted again, pods not ready yet
    wl = workload_of(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert condition(wl, "Evicted")["status"] == "False"
    assert condition(wl, "PodsReady")["reason"] == "WaitForStart"
    reconcilers.step(at(t0, 192))
    ready = condition(workload_of(job), "PodsReady")
    assert (ready["status"], ready["reason"]) == ("True", "Started")


def test_failed_pods_past_backoff_limit_fail_the_job(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    from multicluster.simulated import faults

    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(job_manifest("flaky", "lq-cq", backoff_limit=1, run_seconds=600),
                              namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(at(t0, 2))
    for moment in (3, 6):
        pod = Pod.objects.get(job=job, phase__in=(PodPhase.PENDING, PodPhase.RUNNING))
        reconcilers.step(at(t0, moment - 1))
        pod.refresh_from_db()
        assert faults.fail_pod(pod, now=at(t0, moment))
        reconcilers.step(at(t0, moment))
    wl = workload_of(job)
    assert wl.phase == WorkloadPhase.FINISHED
    assert condition(wl, "Finished") | {"lastTransitionTime": None} == {
        "type": "Finished", "status": "True", "reason": "Failed",
        "message": "Job has reached the specified backoff limit", "lastTransitionTime": None,
    }
    assert reserved_cpu(manager) == 0


# =========================================================================================
# Gangs
# =========================================================================================


def test_gang_on_fragmented_nodes_waits_then_is_requeued(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    settings: Any, t0: datetime,
) -> None:
    """Two 4-CPU nodes with 1 CPU taken on each: 6 CPUs free, but a gang of three 2-CPU
    pods cannot bind. It waits, its attempt times out after 5 minutes, and the PodsReady
    timeout (10 minutes here) evicts and requeues it."""
    set_config(settings, PODS_READY_TIMEOUT_SECONDS=600)
    Node.objects.filter(cluster=manager).delete()
    for name in ("n1", "n2"):
        Node.objects.create(cluster=manager, name=name, capacity={"cpu": "4", "pods": "110"},
                            labels={"kubernetes.io/hostname": name})
    make_queue("cq", {"cpu": "10"})
    for filler, node in (("f1", "n1"), ("f2", "n2")):
        services.submit_job(job_manifest(filler, "lq-cq", cpu="1", run_seconds=100000,
                                         node_selector={"kubernetes.io/hostname": node}),
                            namespace="ns")
    reconcilers.step(t0)
    assert sorted(Pod.objects.values_list("node_name", flat=True)) == ["n1", "n2"]

    gang = services.submit_job(job_manifest("gang", "lq-cq", cpu="2", parallelism=3),
                               namespace="ns")
    reconcilers.step(at(t0, 1))
    wl = workload_of(gang)
    assert wl.phase == WorkloadPhase.ADMITTED  # quota fits: 8 of 10 CPUs
    assert list(Pod.objects.filter(job=gang).values_list("node_name", flat=True)) == [""] * 3
    group = wl.pod_groups.get()
    assert group.min_count == 3
    assert group.bound_at is None
    assert "2 of 3 pods fit" in group.message

    reconcilers.step(at(t0, 300))
    assert "FailedScheduling" not in reasons(wl, about="Workload")
    reconcilers.step(at(t0, 301))
    assert "FailedScheduling" in reasons(wl, about="Workload")
    group.refresh_from_db()
    assert group.timeouts == 1
    assert group.bound_at is None

    reconcilers.step(at(t0, 601))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING
    assert condition(wl, "Evicted")["reason"] == "PodsReadyTimeout"
    assert wl.requeue_state["count"] == 1
    assert not Pod.objects.filter(job=gang).exists()


def test_gang_binds_once_room_frees(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    Node.objects.filter(cluster=manager).delete()
    Node.objects.create(cluster=manager, name="n1", capacity={"cpu": "4"})
    make_queue("cq", {"cpu": "10"})
    services.submit_job(job_manifest("short", "lq-cq", cpu="2", run_seconds=30), namespace="ns")
    reconcilers.step(t0)
    gang = services.submit_job(job_manifest("gang", "lq-cq", cpu="2", parallelism=2),
                               namespace="ns")
    reconcilers.step(at(t0, 1))
    assert not Pod.objects.filter(job=gang).exclude(node_name="").exists()
    reconcilers.step(at(t0, 32))  # the short job finished at t0+32
    assert Pod.objects.filter(job=gang).exclude(node_name="").count() == 2


# =========================================================================================
# Maximum execution time, deactivation and reactivation
# =========================================================================================


def test_deactivate_evicts_at_once_and_activate_requeues(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "2"})
    job = services.submit_job(job_manifest("a", "lq-cq", cpu="2", run_seconds=1000),
                              namespace="ns")
    other = services.submit_job(job_manifest("b", "lq-cq", cpu="2", run_seconds=1000),
                                namespace="ns")
    reconcilers.step(t0)
    wl = workload_of(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert workload_of(other).phase == WorkloadPhase.PENDING

    services.update_workload(wl, {"spec": {"active": False}})
    # The quota is free at once: the cache counts only active workloads.
    assert reserved_cpu(manager) == 0
    reconcilers.step(at(t0, 10))
    wl.refresh_from_db()
    assert condition(wl, "Evicted")["reason"] == "Deactivated"
    assert condition(wl, "Requeued") | {"lastTransitionTime": None} == {
        "type": "Requeued", "status": "False", "reason": "Deactivated",
        "message": "The workload is deactivated", "lastTransitionTime": None,
    }
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.requeue_state is None
    assert wl.accumulated_past_execution_time_seconds == 10
    assert not Pod.objects.filter(job=job).exists()
    assert workload_of(other).phase == WorkloadPhase.ADMITTED

    wl.refresh_from_db()
    services.update_workload(wl, {"spec": {"active": True}})
    reconcilers.step(at(t0, 11))
    wl.refresh_from_db()
    assert condition(wl, "Requeued")["reason"] == "Reactivated"
    assert condition(wl, "Requeued")["status"] == "True"
    assert wl.phase == WorkloadPhase.PENDING  # quota is taken by the other job
    assert wl.queue_state in (QueueState.ACTIVE, QueueState.INADMISSIBLE)
    services.delete_job(Job.objects.get(pk=other.pk))
    reconcilers.step(at(t0, 12))
    assert workload_of(job).phase == WorkloadPhase.ADMITTED


def test_maximum_execution_time_counts_across_admissions(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(
        job_manifest("capped", "lq-cq", run_seconds=1000,
                     labels={"kueue.x-k8s.io/max-exec-time-seconds": "100"}),
        namespace="ns")
    reconcilers.step(t0)
    wl = workload_of(job)
    assert wl.maximum_execution_time_seconds == 100

    # 60 s in the first admission, then an operator deactivates and reactivates it.
    reconcilers.step(at(t0, 30))
    wl.refresh_from_db()
    services.update_workload(wl, {"spec": {"active": False}})
    reconcilers.step(at(t0, 60))
    wl.refresh_from_db()
    assert wl.accumulated_past_execution_time_seconds == 60
    services.update_workload(wl, {"spec": {"active": True}})
    reconcilers.step(at(t0, 70))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED

    # 40 s left: still admitted at +39, deactivated at +40.
    reconcilers.step(at(t0, 109))
    wl.refresh_from_db()
    assert wl.active
    assert wl.phase == WorkloadPhase.ADMITTED
    reconcilers.step(at(t0, 110))
    wl.refresh_from_db()
    assert wl.active is False
    assert condition(wl, "Evicted")["reason"] == (
        "DeactivatedDueToMaximumExecutionTimeExceeded")
    assert condition(wl, "Evicted")["message"] == (
        "The workload is deactivated due to exceeding the maximum execution time")
    assert wl.accumulated_past_execution_time_seconds == 0
    assert "MaximumExecutionTimeExceeded" in reasons(wl)
    assert wl.phase == WorkloadPhase.PENDING


# =========================================================================================
# Dynamic reclaim
# =========================================================================================


def test_reclaimable_pods_let_a_waiting_workload_in(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    """Parallelism 2, completions 3: once two pods succeed only one is still needed, so one
    pod's quota goes back and a waiting 1-CPU job is admitted while the first still runs."""
    make_queue("cq", {"cpu": "2"})
    job = services.submit_job(
        job_manifest("reclaim", "lq-cq", parallelism=2, completions=3, run_seconds=50),
        namespace="ns")
    waiting = services.submit_job(job_manifest("small", "lq-cq", run_seconds=50),
                                  namespace="ns")
    reconcilers.step(t0)
    assert workload_of(waiting).phase == WorkloadPhase.PENDING
    assert reserved_cpu(manager) == 2000

    reconcilers.step(at(t0, 52))
    wl = workload_of(job)
    assert wl.reclaimable_pods == [{"name": "main", "count": 1}]
    assert wl.phase == WorkloadPhase.ADMITTED
    assert workload_of(waiting).phase == WorkloadPhase.ADMITTED
    assert reserved_cpu(manager) == 2000  # 1 CPU for the last pod + 1 for the small job
    assert "ReclaimablePods" in reasons(wl)


# =========================================================================================
# Priority: the pod priority class of a job's template
# =========================================================================================


def test_workload_priority_class_from_job_label(
    make_queue: Callable[..., ClusterQueue], manager: Cluster,
) -> None:
    make_queue("cq", {"cpu": "2"})
    WorkloadPriorityClass.objects.create(cluster=manager, name="urgent", value=1000)
    job = services.submit_job(
        job_manifest("p", "lq-cq", labels={"kueue.x-k8s.io/priority-class": "urgent"}),
        namespace="ns")
    assert workload_of(job).priority == 1000


def test_finishing_many_workloads_reads_them_in_a_fixed_number_of_queries(
    make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload],
    manager: Cluster,
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from scheduling.scheduler import admission
    from scheduling.workload import lifecycle

    make_queue("cq", {"cpu": "10"})
    for index in range(6):
        make_workload(f"w{index}", "lq-cq", {"cpu": "1"})
    admission.run_admission_cycle(manager.pk, now=timezone.now())
    admitted = list(Workload.objects.filter(phase=WorkloadPhase.ADMITTED).order_by("name"))
    assert len(admitted) == 6

    counts = []
    for batch in (admitted[:2], admitted[2:]):
        with CaptureQueriesContext(connection) as queries:
            done = lifecycle.finish_workloads(
                manager.pk, {wl.pk: wl.resource_version for wl in batch}, "Succeeded",
                "Job finished successfully", now=timezone.now())
        assert sorted(done) == sorted(wl.pk for wl in batch)
        counts.append(len(queries.captured_queries))
    # Two workloads or four: the same queries (no column is loaded row by row).
    assert counts[0] == counts[1]
    for wl in admitted:
        wl.refresh_from_db()
        assert wl.phase == WorkloadPhase.FINISHED
        assert condition(wl, "Finished")["reason"] == "Succeeded"
        assert reasons(wl)[-1] == "Finished"
    assert reserved_cpu(manager) == 0


@pytest.mark.django_db(transaction=True)
def test_finishing_reads_before_its_transaction_and_leaves_a_workload_changed_meanwhile(
    make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload],
    manager: Cluster, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from django.db import connection
    from django.utils import timezone

    from scheduling.scheduler import admission
    from scheduling.workload import lifecycle

    make_queue("cq", {"cpu": "10"})
    for name in ("kept", "changed"):
        make_workload(name, "lq-cq", {"cpu": "1"})
    admission.run_admission_cycle(manager.pk, now=timezone.now())
    seen = {wl.pk: wl.resource_version for wl in Workload.objects.all()}
    changed = Workload.objects.get(name="changed")
    compute = lifecycle._finished_values
    in_transaction: list[bool] = []

    def finished_values(wl: Workload, *args: Any, **kwargs: Any) -> dict[str, Any]:
        # Computed outside any transaction: SQLite's write lock is not held meanwhile.
        in_transaction.append(connection.in_atomic_block)
        if wl.pk == changed.pk:  # another writer (a preemption) moves it on meanwhile
            Workload.objects.filter(pk=wl.pk).update(
                resource_version=wl.resource_version + 1)
        return compute(wl, *args, **kwargs)

    monkeypatch.setattr(lifecycle, "_finished_values", finished_values)
    done = lifecycle.finish_workloads(manager.pk, seen, "Succeeded", "Job finished",
                                      now=timezone.now())

    assert in_transaction == [False, False]
    assert done == [Workload.objects.get(name="kept").pk]
    changed.refresh_from_db()
    assert changed.phase == WorkloadPhase.ADMITTED
    assert reserved_cpu(manager) == 1000
    assert reasons(changed)[-1] != "Finished"


def test_finishing_reads_its_workloads_by_key_without_statistics(manager: Cluster) -> None:
    # Asked by domain and phase, a table without statistics yet (a new database, or one
    # autovacuum has not analysed) was read through the domain's index: every finished
    # workload of the domain, to finish a few.
    from django.db import connection
    from django.utils import timezone

    from scheduling.workload import lifecycle

    if connection.vendor != "postgresql":
        pytest.skip("a plan of PostgreSQL's")
    running = plans.job_sized_workloads(manager, 120, "running", phase=WorkloadPhase.ADMITTED)
    plans.job_sized_workloads(manager, 12_000, "done", phase=WorkloadPhase.FINISHED)
    plans.without_statistics("scheduling_workload")

    with plans.rows_read("scheduling_workload", 'SELECT "scheduling_workload"."id"') as reads:
        done = lifecycle.finish_workloads(manager.pk, {wl.pk: 1 for wl in running},
                                          "Succeeded", "Job finished", now=timezone.now())

    assert sorted(done) == [wl.pk for wl in running]
    assert reads[0] <= len(running), reads
