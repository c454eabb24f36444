"""Which actions a workload's state allows (``scheduling.workload.actions``): the services refuse the
others, naming the field and the reason. A finished workload (a completed job's, a slice
replaced by a scale-up) takes no eviction and no change of ``spec.active``: Kueue's
workload controller ignores a Finished workload."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from rest_framework.test import APIClient

from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.workload import actions, slices
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def finished_workload(job: Job) -> Workload:
    return Workload.objects.get(job=job, phase=WorkloadPhase.FINISHED)


def state(wl: Workload) -> tuple[object, ...]:
    """What an action would change: the stored row and the workload's events."""
    row = Workload.objects.get(pk=wl.pk)
    return (row.phase, row.active, row.conditions, row.resource_version,
            Event.objects.filter(workload=wl).count())


def refused(call: Callable[[], object]) -> dict[str, list[str]]:
    with pytest.raises(ValidationError) as caught:
        call()
    return caught.value.message_dict


@pytest.fixture
def succeeded(make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers,
              t0: datetime) -> Workload:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(job_manifest("done", "lq-cq", run_seconds=10), namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=20))
    return finished_workload(job)


def test_a_finished_workload_is_neither_evicted_nor_deactivated(
    succeeded: Workload, admin_user: User,
) -> None:
    before = state(succeeded)
    message = ("the workload has finished (Succeeded): a finished workload does not change; "
               "only its job can be deleted")
    assert refused(lambda: services.evict_workload(succeeded, user=admin_user)) == {
        "status.conditions": [message]}
    assert refused(lambda: services.update_workload(
        succeeded, {"spec": {"active": False}})) == {"spec.active": [message]}
    assert state(succeeded) == before
    assert actions.allowed(succeeded) == {"deactivate": False, "activate": False,
                                          "evict": False, "delete_job": True}


def test_the_api_refuses_to_deactivate_a_finished_workload(
    succeeded: Workload, admin_client_api: APIClient,
) -> None:
    before = state(succeeded)
    response = admin_client_api.patch(
        f"/api/v1/namespaces/ns/workloads/{succeeded.name}/", {"spec": {"active": False}},
        format="json")
    assert response.status_code == 400
    assert list(response.json()) == ["spec.active"]
    assert state(succeeded) == before


def test_a_slice_replaced_by_a_scale_up_is_neither_evicted_nor_deactivated(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
    admin_user: User,
) -> None:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(
        job_manifest("grow", "lq-cq", parallelism=1, run_seconds=600,
                     annotations={jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
        namespace="ns")
    reconcilers.step(t0)
    assert slices.scale_job(job, 2, now=t0 + timedelta(seconds=5)).action == "scale-up"
    reconcilers.step(t0 + timedelta(seconds=6))
    old = finished_workload(job)
    assert (cond.find(old.conditions, "Finished") or {}).get("reason") == (
        jobframework.WORKLOAD_SLICE_REPLACED)
    before = state(old)

    assert list(refused(lambda: services.evict_workload(old, user=admin_user))) == [
        "status.conditions"]
    assert list(refused(lambda: services.update_workload(
        old, {"spec": {"active": False}}))) == ["spec.active"]
    assert state(old) == before
    running = Workload.objects.get(job=job, phase=WorkloadPhase.ADMITTED)
    assert actions.allowed(running) == {"deactivate": True, "activate": False, "evict": True,
                                        "delete_job": True}


def test_a_deactivated_workload_holding_quota_is_not_evicted_by_hand(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime,
    admin_user: User,
) -> None:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(job_manifest("run", "lq-cq", run_seconds=600), namespace="ns")
    reconcilers.step(t0)
    wl = services.update_workload(Workload.objects.get(job=job), {"spec": {"active": False}})
    assert wl.phase == WorkloadPhase.ADMITTED  # the lifecycle evicts it on its next pass
    assert refused(lambda: services.evict_workload(wl, user=admin_user)) == {
        "spec.active": ["the workload is deactivated: its deactivation evicts it"]}
