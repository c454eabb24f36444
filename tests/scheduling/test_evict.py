"""Evicting a workload on a user's request (``services.evict_workload``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError

from multicluster.models import Pod
from multicluster.simulated import runner
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Event, Workload
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def test_an_evicted_running_job_loses_its_pods_and_is_requeued(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
    admin_user: User,
) -> None:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(job_manifest("a", "lq-cq", parallelism=2, run_seconds=1000),
                              namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=3))
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert Pod.objects.filter(job=job).count() == 2

    services.evict_workload(wl, user=admin_user, now=t0 + timedelta(seconds=5))
    wl.refresh_from_db()
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["status"], evicted["reason"], evicted["message"]) == (
        "True", "EvictedByUser", "Evicted by ada")
    assert Event.objects.filter(workload=wl, reason="EvictedDueToEvictedByUser").exists()

    old_pods = set(Pod.objects.filter(job=job).values_list("name", flat=True))
    runner.sync_cluster(wl.cluster_id, now=t0 + timedelta(seconds=6))
    wl.refresh_from_db()
    assert not Pod.objects.filter(job=job).exists()
    assert wl.phase == WorkloadPhase.PENDING
    requeued = cond.find(wl.conditions, "Requeued")
    assert requeued is not None
    assert (requeued["status"], requeued["reason"]) == ("True", "EvictedByUser")

    # Requeued at once (no back-off): the free quota admits it again, with new pods.
    reconcilers.step(t0 + timedelta(seconds=7), cycles=1)
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    new_pods = set(Pod.objects.filter(job=job).values_list("name", flat=True))
    assert len(new_pods) == 2
    assert not new_pods & old_pods


def test_a_pending_workload_cannot_be_evicted(
    make_queue: Callable[..., ClusterQueue], admin_user: User,
) -> None:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(job_manifest("a", "lq-cq"), namespace="ns")
    wl = Workload.objects.get(job=job)
    with pytest.raises(ValidationError) as info:
        services.evict_workload(wl, user=admin_user)
    assert "status.admission" in info.value.message_dict
    wl.refresh_from_db()
    assert cond.find(wl.conditions, "Evicted") is None


def test_an_operator_may_not_evict_outside_their_namespaces(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
    operator: User,
) -> None:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(job_manifest("a", "lq-cq"), namespace="ns")
    reconcilers.step(t0)
    wl = Workload.objects.get(job=job)
    with pytest.raises(PermissionDenied):
        services.evict_workload(wl, user=operator)
    wl.refresh_from_db()
    assert not cond.is_true(wl.conditions, "Evicted")
