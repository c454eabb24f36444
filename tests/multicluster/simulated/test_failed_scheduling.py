"""A simulated pod no node has room for says why as kube-scheduler would: its PodScheduled
condition (Unschedulable) and a FailedScheduling event about the pod, once per reason."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from multicluster.models import Cluster, Node, Pod
from scheduling.models import Event, Job
from tests.fixtures.scheduling import Reconcilers

pytestmark = pytest.mark.django_db

NO_ROOM = "0/3 nodes are available: 3 Insufficient cpu."


@pytest.fixture
def waiting_job(unplaceable_job: Job, reconcilers: Reconcilers, t0: datetime) -> Job:
    reconcilers.step(t0)
    return unplaceable_job


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
