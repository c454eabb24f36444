"""A simulated pod no node has room for says why as kube-scheduler would: its PodScheduled
condition (Unschedulable) and a FailedScheduling event about the pod, once per reason."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from multicluster.models import Cluster, Node, Pod
from scheduling import services
from scheduling.models import ClusterQueue, Event, Job
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

NO_ROOM = "0/3 nodes are available: 3 Insufficient cpu."


@pytest.fixture
def waiting_job(
    manager: Cluster,
    make_queue: Callable[..., ClusterQueue],
    reconcilers: Reconcilers,
    t0: datetime,
) -> Job:
    """A job admitted (10 CPUs of quota) whose 2-CPU pod fits none of three 1-CPU nodes."""
    Node.objects.filter(cluster=manager).delete()
    for index in range(3):
        Node.objects.create(cluster=manager, name=f"small-{index}", capacity={"cpu": "1"})
    make_queue("cq", {"cpu": "10"})
    job = services.submit_job(job_manifest("big", "lq-cq", cpu="2"), namespace="ns")
    reconcilers.step(t0)
    return job


def test_an_unplaceable_pod_gets_one_failed_scheduling_event(
    waiting_job: Job, reconcilers: Reconcilers, t0: datetime
) -> None:
    reconcilers.step(t0 + timedelta(seconds=5))

    (pod,) = Pod.objects.filter(job=waiting_job)
    assert (pod.phase, pod.node_name, pod.reason, pod.message) == (
        "Pending",
        "",
        "Unschedulable",
        NO_ROOM,
    )
    # Tried on every pass, recorded once: the same reason is not a new event.
    (event,) = Event.objects.filter(object_kind="Pod", object_name=pod.name)
    assert (event.type, event.reason, event.message, event.object_namespace) == (
        "Warning",
        "FailedScheduling",
        NO_ROOM,
        "ns",
    )
    assert event.workload_id == pod.workload_id


def test_a_pod_placed_later_loses_its_unschedulable_condition(
    waiting_job: Job, manager: Cluster, reconcilers: Reconcilers, t0: datetime
) -> None:
    Node.objects.create(cluster=manager, name="large", capacity={"cpu": "4"})

    reconcilers.step(t0 + timedelta(seconds=5))

    (pod,) = Pod.objects.filter(job=waiting_job)
    assert (pod.node_name, pod.reason, pod.message) == ("large", "", "")
    # The event stays in the history, as Kubernetes keeps it.
    assert Event.objects.filter(object_name=pod.name, reason="FailedScheduling").count() == 1
