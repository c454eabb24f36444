"""The simulated cluster's reconciler: placement by flavor, two-phase eviction, stop
policies and wake-ups."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
import redis
from django.db import connection, connections, transaction
from django.utils import timezone

from kueueweb.reconcile import CLUSTER_SYNC_TASK
from multicluster.models import Cluster, Node, Pod
from multicluster.simulated import runner
from scheduling import services
from scheduling.choices import StopPolicy, WorkloadPhase
from scheduling.models import (
    ClusterQueue,
    Event,
    Job,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.broker import messages
from tests.fixtures.row_locks import (
    LOCK_TIMEOUT,
    held_open,
    wait_until_another_waits,
    write_without_waiting,
)
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def test_pods_follow_the_flavor_node_labels_and_tolerations(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    Node.objects.filter(cluster=manager).delete()
    Node.objects.create(cluster=manager, name="plain", capacity={"cpu": "64"})
    Node.objects.create(cluster=manager, name="spot-1", capacity={"cpu": "8"},
                        labels={"instance-type": "spot"},
                        taints=[{"key": "spot", "value": "true", "effect": "NoSchedule"}])
    make_queue("cq", {"cpu": "10"}, flavor="spot")
    ResourceFlavor.objects.filter(cluster=manager, name="spot").update(
        node_labels={"instance-type": "spot"},
        tolerations=[{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])
    job = services.submit_job(job_manifest("j", "lq-cq", parallelism=2), namespace="ns")
    reconcilers.step(t0)
    pods = list(Pod.objects.filter(job=job))
    assert [p.node_name for p in pods] == ["spot-1", "spot-1"]
    assert pods[0].node_selector == {"instance-type": "spot"}
    assert pods[0].tolerations == [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}]


def test_pods_take_the_room_kubernetes_admission_gives_them(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    """A pod is placed by its requests as Kubernetes' LimitRanger and RuntimeClass admission
    leave them: the namespace's default request and the RuntimeClass's overhead. A gang of
    two such pods does not fit a 2-CPU node, though their containers ask for no CPU."""
    from scheduling.manifests.apply import apply_manifests

    Node.objects.filter(cluster=manager).delete()
    Node.objects.create(cluster=manager, name="small", capacity={"cpu": "2"})
    make_queue("cq", {"cpu": "10"})
    apply_manifests([
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "d", "namespace": "ns"},
         "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "1"}}]}},
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"},
         "handler": "kata", "overhead": {"podFixed": {"cpu": "500m"}}},
    ])
    manifest = job_manifest("j", "lq-cq", parallelism=2)
    spec = manifest["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {}
    spec["runtimeClassName"] = "kata"
    job = services.submit_job(manifest, namespace="ns")
    reconcilers.step(t0)

    assert Workload.objects.get(job=job).phase == WorkloadPhase.ADMITTED
    pods = list(Pod.objects.filter(job=job))
    assert [pod.requests for pod in pods] == [{"cpu": "1500m"}, {"cpu": "1500m"}]
    assert [pod.node_name for pod in pods] == ["", ""]
    Node.objects.filter(cluster=manager, name="small").update(capacity={"cpu": "3"})
    reconcilers.step(t0 + timedelta(seconds=1))
    assert sorted(Pod.objects.filter(job=job).values_list("node_name", flat=True)) == [
        "small", "small"]


def test_preempted_workload_keeps_quota_until_its_pods_are_gone(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "2"}, within_cluster_queue="LowerPriority")
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    low = services.submit_job(job_manifest("low", "lq-cq", cpu="2", run_seconds=1000),
                              namespace="ns")
    reconcilers.step(t0)
    high = services.submit_job(
        job_manifest("high", "lq-cq", cpu="2",
                     labels={"kueue.x-k8s.io/priority-class": "high"}), namespace="ns")

    # The cycle marks the victim; it still holds its quota while its pods run.
    admission.run_admission_cycle(manager.pk, now=t0 + timedelta(seconds=5))
    victim = Workload.objects.get(job=low)
    assert cond.is_true(victim.conditions, "Evicted")
    assert victim.phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=low).count() == 1
    admission.run_admission_cycle(manager.pk, now=t0 + timedelta(seconds=5))
    assert Workload.objects.get(job=high).phase == WorkloadPhase.PENDING

    # The cluster stops the job; then the quota is released and the preemptor admitted.
    outcome = runner.sync_cluster(manager.pk, now=t0 + timedelta(seconds=6))
    assert outcome.stopped == ["ns/low"]
    victim.refresh_from_db()
    assert victim.phase == WorkloadPhase.PENDING
    requeued = cond.find(victim.conditions, "Requeued")
    assert requeued is not None
    assert (requeued["status"], requeued["reason"]) == (
        "True", "Preempted")
    reconcilers.step(t0 + timedelta(seconds=6))
    assert Workload.objects.get(job=high).phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=high).count() == 1
    assert not Pod.objects.filter(job=low).exists()


def test_hold_and_drain_evicts_and_restart_requeues(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
) -> None:
    cq = make_queue("cq", {"cpu": "2"})
    job = services.submit_job(job_manifest("j", "lq-cq", run_seconds=1000), namespace="ns")
    reconcilers.step(t0)
    ClusterQueue.objects.filter(pk=cq.pk).update(stop_policy=StopPolicy.HOLD_AND_DRAIN)
    reconcilers.step(t0 + timedelta(seconds=5))
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.PENDING
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "ClusterQueueStopped"
    assert not Pod.objects.filter(job=job).exists()

    ClusterQueue.objects.filter(pk=cq.pk).update(stop_policy=StopPolicy.NONE)
    reconcilers.step(t0 + timedelta(seconds=10))
    wl.refresh_from_db()
    requeued = cond.find(wl.conditions, "Requeued")
    assert requeued is not None
    assert requeued["reason"] == "ClusterQueueRestarted"
    assert wl.phase == WorkloadPhase.ADMITTED


def test_next_wakeup_is_the_next_pod_start_or_end(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "2"})
    services.submit_job(job_manifest("j", "lq-cq", run_seconds=30), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    first = runner.sync_cluster(manager.pk, now=t0)
    assert first.started == ["ns/j"]
    assert first.bound == 1
    second = runner.sync_cluster(manager.pk, now=t0)
    assert second.next_wakeup == t0 + timedelta(seconds=2)  # the start delay
    third = runner.sync_cluster(manager.pk, now=t0 + timedelta(seconds=2))
    assert third.next_wakeup == t0 + timedelta(seconds=32)


def test_other_connections_are_left_alone(manager: Cluster) -> None:
    manager.connection_type = "kubernetes"
    manager.save()
    assert runner.sync_cluster(manager.pk, now=timezone.now()) == runner.SyncOutcome()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL row locks")
def test_a_pass_leaves_rows_that_reference_the_cluster_free_to_insert(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "2"})
    services.submit_job(job_manifest("j", "lq-cq"), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)

    # A submission's event (and job, workload, pods) checks its cluster's key on insert; a
    # pass that locked the row against that made submissions wait for it, and deadlock.
    with held_open(lambda: runner.sync_cluster(manager.pk, now=t0)):
        write_without_waiting(lambda: Event.objects.create(
            cluster=manager, object_kind="Job", object_name="j", reason="Created",
            created_at=t0))

    assert Pod.objects.filter(cluster=manager).count() == 1
    assert Event.objects.filter(reason="Created", object_name="j").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL row locks")
def test_a_pass_that_frees_quota_and_a_scale_that_frees_quota_do_not_deadlock(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    cq = make_queue("cq", {"cpu": "4"})
    short = services.submit_job(job_manifest("a", "lq-cq", run_seconds=5), namespace="ns")
    long = services.submit_job(job_manifest("b", "lq-cq", run_seconds=1000), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    runner.sync_cluster(manager.pk, now=t0)
    generation = ClusterQueue.objects.get(pk=cq.pk).allocatable_generation
    # At t0 + 10 the pass finishes "a" (its quota comes back) and then reports "b", whose
    # pod became ready; meanwhile a scale of "b" holds its job's row and then releases
    # quota in the same queue. A pass that wrote the queue's row as "a" finished held it
    # while it waited for "b", and the scale waited for it: PostgreSQL aborted one.
    later = t0 + timedelta(seconds=10)
    locked, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def scale() -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update(no_key=True).get(pk=long.pk)
                locked.set()
                assert go.wait(timeout=60)
                with connection.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
                admission.on_quota_released(manager.pk, [cq.pk], now=later)
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            errors.append(exc)
        finally:
            locked.set()
            connections.close_all()

    def sync() -> None:
        try:
            runner.sync_cluster(manager.pk, now=later)
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    scaler, passer = threading.Thread(target=scale), threading.Thread(target=sync)
    scaler.start()
    assert locked.wait(timeout=60)
    passer.start()
    try:
        wait_until_another_waits()  # the pass reached "b"
    finally:
        go.set()
        scaler.join(timeout=60)
        passer.join(timeout=60)

    assert errors == []
    assert Workload.objects.get(job=short).phase == WorkloadPhase.FINISHED
    assert Job.objects.get(pk=long.pk).status["ready"] == 1
    # Both releases were written: the pass's at its end, the scale's before it.
    assert ClusterQueue.objects.get(pk=cq.pk).allocatable_generation == generation + 2


@pytest.mark.production
def test_a_pass_that_finds_another_running_asks_again_instead_of_waiting(
    broker: redis.Redis, manager: Cluster, t0: datetime,
) -> None:
    # A pass that waited for the running one held a worker process meanwhile: under load
    # every worker process waited for one cluster's pass.
    second: list[runner.SyncOutcome] = []
    with held_open(lambda: runner.sync_cluster(manager.pk, now=t0)):
        write_without_waiting(lambda: second.append(runner.sync_cluster(manager.pk, now=t0)))

    assert [outcome.busy for outcome in second] == [True]
    # It asked for a pass again, for when the running one has committed.
    assert messages(broker, CLUSTER_SYNC_TASK, manager.pk) == 1
