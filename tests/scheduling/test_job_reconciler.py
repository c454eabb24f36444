"""The job reconciler both cluster backends share: when a job runs, how many pods, and what
it asks of any backend."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import pytest
from django.contrib.auth.models import User

from multicluster.models import Cluster
from scheduling import job_reconciler as reconciler
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import PodSetInfo
from scheduling.models import ClusterQueue, Event, Job, ResourceFlavor, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

EVICTED = [{"type": "Evicted", "status": "True", "reason": "Preempted", "message": ""}]


def workload(**fields: Any) -> Workload:
    values: dict[str, Any] = {"phase": WorkloadPhase.ADMITTED, "active": True,
                              "cluster_name": "", "conditions": [],
                              "pod_sets": [{"name": "main", "count": 4}],
                              "admission": {"podSetAssignments": [{"name": "main", "count": 4}]}}
    values.update(fields)
    return Workload(**values)


@pytest.mark.parametrize(("fields", "runs", "on_worker"), [
    ({}, True, False),
    ({"phase": WorkloadPhase.QUOTA_RESERVED}, False, False),
    ({"active": False}, False, False),
    ({"conditions": EVICTED}, False, False),
    ({"cluster_name": "worker-1"}, False, True),
    ({"cluster_name": "worker-1", "conditions": EVICTED}, False, False),
], ids=["admitted", "reserved only", "deactivated", "evicted", "on a worker",
        "evicted on a worker"])
def test_a_job_runs_here_only_while_its_workload_is_admitted_here(
    fields: dict[str, Any], runs: bool, on_worker: bool,
) -> None:
    wl = workload(**fields)

    assert reconciler.should_run(wl) is runs
    assert reconciler.placed_on_worker(wl) is on_worker


def test_nothing_runs_without_a_workload() -> None:
    assert not reconciler.should_run(None)
    assert not reconciler.placed_on_worker(None)


def test_an_elastic_slice_runs_no_more_than_its_scaled_down_count() -> None:
    wl = workload(pod_sets=[{"name": "main", "count": 2}])

    assert reconciler.admitted_pods(wl, elastic_job=True) == 2
    assert reconciler.admitted_pods(wl, elastic_job=False) == 4


# --- one reconciler, any backend ---------------------------------------------------------


class CopyCluster:
    """A third backend, in memory: a cluster that runs copies of the stored objects and
    whose pods the test counts by hand. The reconciler needs nothing else."""

    location = " on cluster memory"

    def __init__(self, cluster_id: int) -> None:
        self.cluster_id = cluster_id
        self.objects: dict[str, dict[str, Any]] = {}
        self.active: dict[str, int] = {}
        self.calls: list[tuple[str, str]] = []
        self.refuse_patches = False
        # The jobs it runs in place (their own object, as one created on the cluster).
        self.in_place: set[str] = set()

    def create(self, job: Job, wl: Workload, infos: Sequence[PodSetInfo]) -> bool:
        self.calls.append(("create", job.name))
        self.objects[job.name] = {"spec": {"parallelism": sum(i.count for i in infos),
                                           "suspend": False}, "status": {}}
        return True

    def read(self, job: Job, wl: Workload | None, *, fetch: bool = True,
             full: bool = False) -> reconciler.ClusterObject | None:
        obj = self.objects.get(job.name)
        if obj is None:
            return None
        return reconciler.ClusterObject(
            suspended=bool(obj["spec"].get("suspend")), status=obj["status"],
            spec=obj["spec"], active_pods=self.active.get(job.name, 0))

    def patch(self, job: Job, patch: Mapping[str, Any]) -> reconciler.ClusterObject | None:
        self.calls.append(("patch", json.dumps(patch, sort_keys=True)))
        if self.refuse_patches:
            raise reconciler.PatchRefused("forbidden")
        self.objects[job.name]["spec"].update(patch.get("spec") or {})
        return self.read(job, None)

    def runs_copy(self, job: Job) -> bool:
        return job.name not in self.in_place

    def suspend(self, job: Job) -> reconciler.ClusterObject | None:
        return self.patch(job, reconciler.integration_of(job).suspend({}, True))

    def delete(self, job: Job, *, reason: str) -> None:
        self.calls.append(("delete", reason))
        self.objects.pop(job.name, None)


@pytest.fixture
def admitted_job(make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers,
                 manager: Cluster, t0: datetime) -> Job:
    """A Job whose workload the admission cycle admitted, not yet started anywhere."""
    make_queue("cq", {"cpu": "8"})
    job = services.submit_job(job_manifest("a", "lq-cq", parallelism=3), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    assert Workload.objects.get(job=job).phase == WorkloadPhase.ADMITTED
    return Job.objects.get(pk=job.pk)


def reconcile(job: Job, backend: CopyCluster, now: datetime,
              events: list[Event] | None = None) -> set[reconciler.Step]:
    return reconciler.reconcile(Job.objects.get(pk=job.pk), backend, now=now,
                                events=[] if events is None else events)


def test_any_backend_starts_reports_and_cleans_up_an_admitted_job(
    admitted_job: Job, manager: Cluster, t0: datetime,
) -> None:
    backend = CopyCluster(manager.pk)
    events: list[Event] = []

    assert reconcile(admitted_job, backend, t0, events) == {reconciler.Step.STARTED}
    assert backend.objects["a"]["spec"]["parallelism"] == 3
    assert not Job.objects.get(pk=admitted_job.pk).suspend
    assert [e.reason for e in events] == ["Started"]
    assert events[0].message.endswith("; running on cluster memory")

    backend.objects["a"]["status"] = {"succeeded": 3, "conditions": [
        {"type": "Complete", "status": "True"}]}
    assert reconcile(admitted_job, backend, t0) == {reconciler.Step.FINISHED}
    assert Workload.objects.get(job=admitted_job).phase == WorkloadPhase.FINISHED
    assert Job.objects.get(pk=admitted_job.pk).status["succeeded"] == 3
    assert backend.calls[-1] == ("delete", "its workload finished")
    assert "a" not in backend.objects


def test_any_backend_recreates_a_copy_deleted_behind_its_back(
    admitted_job: Job, manager: Cluster, t0: datetime,
) -> None:
    backend = CopyCluster(manager.pk)
    reconcile(admitted_job, backend, t0)
    backend.objects.clear()
    events: list[Event] = []

    assert reconcile(admitted_job, backend, t0, events) == {reconciler.Step.STARTED}
    assert [c for c, _ in backend.calls] == ["create", "create"]
    assert [(e.reason, e.message) for e in events] == [
        ("Recreated", "The job was missing on cluster memory and was created again")]


def test_any_backend_releases_quota_only_once_the_pods_are_gone(
    admitted_job: Job, manager: Cluster, admin_user: User, t0: datetime,
) -> None:
    backend = CopyCluster(manager.pk)
    reconcile(admitted_job, backend, t0)
    backend.active["a"] = 3
    services.evict_workload(Workload.objects.get(job=admitted_job), user=admin_user, now=t0)

    assert reconcile(admitted_job, backend, t0) == {reconciler.Step.STOPPING}
    assert backend.objects["a"]["spec"]["suspend"] is True
    assert Workload.objects.get(job=admitted_job).phase == WorkloadPhase.ADMITTED  # held

    backend.active["a"] = 0
    events: list[Event] = []
    assert reconcile(admitted_job, backend, t0, events) == {
        reconciler.Step.SUSPENDED, reconciler.Step.STOPPED}
    assert backend.calls[-1] == ("delete", "its workload was evicted")
    assert Job.objects.get(pk=admitted_job.pk).suspend
    assert Workload.objects.get(job=admitted_job).phase == WorkloadPhase.PENDING
    assert [e.reason for e in events] == ["Stopped"]


def test_a_copy_that_may_not_be_suspended_is_deleted(
    admitted_job: Job, manager: Cluster, admin_user: User, t0: datetime,
) -> None:
    backend = CopyCluster(manager.pk)
    reconcile(admitted_job, backend, t0)
    backend.refuse_patches = True
    services.evict_workload(Workload.objects.get(job=admitted_job), user=admin_user, now=t0)

    assert reconciler.Step.STOPPED in reconcile(admitted_job, backend, t0)
    assert backend.calls[-1] == ("delete", "it may not be suspended")
    assert "a" not in backend.objects


def test_the_ready_checks_pod_set_updates_reach_the_pods_and_a_conflict_fails_the_start(
    admitted_job: Job, manager: Cluster, t0: datetime,
) -> None:
    wl = Workload.objects.get(job=admitted_job)
    ResourceFlavor.objects.filter(cluster=manager, name="default").update(
        node_labels={"pool": "default"})
    wl.admission_check_states = [
        {"name": "prov", "state": "Ready", "message": "", "podSetUpdates": [
            {"name": "main", "annotations": {"autoscaling.x-k8s.io/consume-provisioning-request":
                                             "r-1"}, "nodeSelector": {"zone": "a"}}]}]
    wl.save()
    infos = reconciler.pod_set_infos(manager.pk, wl, elastic_job=False)
    assert (infos[0].node_selector, infos[0].annotations) == (
        {"pool": "default", "zone": "a"},
        {"autoscaling.x-k8s.io/consume-provisioning-request": "r-1"})

    # Another check wants the flavor's node label otherwise: the job cannot start, ever.
    wl.admission_check_states = [
        *wl.admission_check_states,
        {"name": "other", "state": "Ready", "message": "",
         "podSetUpdates": [{"name": "main", "nodeSelector": {"pool": "spot"}}]}]
    wl.save()
    backend = CopyCluster(manager.pk)
    events: list[Event] = []

    assert reconcile(admitted_job, backend, t0, events) == {reconciler.Step.FINISHED}
    assert backend.calls == []
    wl.refresh_from_db()
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert (wl.phase, finished["reason"], finished["message"]) == (
        WorkloadPhase.FINISHED, "FailedToStart",
        'in admission check "other": invalid admission check PodSetUpdate: conflict for '
        "nodeSelector: conflict for key=pool, value1=default, value2=spot")
    assert Job.objects.get(pk=admitted_job.pk).suspend


def test_a_job_run_in_place_is_suspended_but_never_deleted(
    admitted_job: Job, manager: Cluster, admin_user: User, t0: datetime,
) -> None:
    backend = CopyCluster(manager.pk)
    backend.in_place.add("a")
    reconcile(admitted_job, backend, t0)
    services.evict_workload(Workload.objects.get(job=admitted_job), user=admin_user, now=t0)

    assert reconcile(admitted_job, backend, t0) == {
        reconciler.Step.SUSPENDED, reconciler.Step.STOPPED}
    assert backend.objects["a"]["spec"]["suspend"] is True

    admission.run_admission_cycle(manager.pk, now=t0)
    reconcile(admitted_job, backend, t0)
    backend.objects["a"]["status"] = {"succeeded": 3, "conditions": [
        {"type": "Complete", "status": "True"}]}

    assert reconcile(admitted_job, backend, t0) == {reconciler.Step.FINISHED}
    assert reconcile(admitted_job, backend, t0) == set()
    assert "delete" not in [call for call, _ in backend.calls]
    assert backend.objects["a"]["status"]["succeeded"] == 3
