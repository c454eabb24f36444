"""Pod groups (``kueue.x-k8s.io/pod-group-name`` + ``pod-group-total-count``): the pods of a
group make ONE Workload named after the group, built only once the group is complete,
admitted and run as one, finished as a whole, and stopped by deleting every member, after
which the Workload waits for replacement pods (Kueue's ``WaitingForReplacementPods``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.urls import reverse

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.models import Cluster
from multicluster.models import Pod as ClusterPod
from scheduling import jobframework, services
from scheduling.choices import EventType, QueueState, WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from scheduling.workload import conditions as cond
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, at, hub  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "pods"
          / "kueue-pod-group.yaml")
KIND = pods.Pod()
WAITING = jobframework.WAITING_FOR_REPLACEMENT_PODS


@pytest.fixture
def enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "pod"]}


@pytest.fixture
def queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    """``user-queue`` in ``default`` with room for the sample group (2 × 3 CPUs) once."""
    cq = make_queue("cq", {"cpu": "8", "memory": "8Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def sample() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(SAMPLE.read_text()))


def submit(manifest: dict[str, Any]) -> Job:
    return services.submit_job(manifest, namespace="default")


def group_workload() -> Workload:
    return Workload.objects.get(name="sample-group")


def member(name: str, *, total: int = 2, group: str = "sample-group",
           **annotations: str) -> dict[str, Any]:
    manifest = copy.deepcopy(sample()[0])
    del manifest["metadata"]["generateName"]
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"][pods.GROUP_NAME_LABEL] = group
    manifest["metadata"]["annotations"] = {pods.GROUP_TOTAL_COUNT_ANNOTATION: str(total),
                                           **annotations}
    return manifest


# --- The Workload of a group -----------------------------------------------------------------


@pytest.mark.usefixtures("enabled", "queue")
def test_the_kueue_sample_group_is_one_workload_of_one_role_once_complete() -> None:
    leader_manifest, worker_manifest = sample()

    leader = submit(leader_manifest)

    # One pod of two: no Workload yet, and the pod says why.
    assert not Workload.objects.exists()
    assert leader.group_name == "sample-group"
    assert leader.suspend
    [warning] = Event.objects.filter(object_name=leader.name, reason="ErrWorkloadCompose")
    assert warning.type == EventType.WARNING
    assert warning.message == ("'sample-group' group has fewer runnable pods than expected: "
                               "1 of 2")

    worker = submit(worker_manifest)

    wl = group_workload()
    assert wl.annotations[pods.IS_GROUP_WORKLOAD_ANNOTATION] == "true"
    # Leader and worker differ only in their command: one role, named by its hash.
    role = pods.role_hash(leader_manifest["spec"])
    assert role == pods.role_hash(worker_manifest["spec"])
    assert [(ps["name"], ps["count"], jobframework.pod_set_requests(ps))
            for ps in wl.pod_sets] == [(role, 2, {"cpu": "3"})]
    assert wl.job_id == min((leader, worker), key=lambda j: j.name).pk
    assert wl.queue_name == "user-queue"
    assert {j.name for j in leader.group_members()} == {leader.name, worker.name}
    # Neither pod got a Workload of its own.
    assert Workload.objects.count() == 1


@pytest.mark.usefixtures("enabled", "queue")
def test_roles_are_pod_sets_sorted_by_name_and_counted() -> None:
    small = member("a-small", total=3)
    large = member("b-large", total=3)
    large["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1"
    submit(small)
    submit(large)
    assert not Workload.objects.exists()
    other_small = member("c-small", total=3)

    submit(other_small)

    expected = sorted([(pods.role_hash(small["spec"]), 2), (pods.role_hash(large["spec"]), 1)])
    assert [(ps["name"], ps["count"]) for ps in group_workload().pod_sets] == expected


@pytest.mark.usefixtures("enabled", "queue")
def test_fast_admission_builds_the_workload_from_the_first_pod_counted_as_the_group() -> None:
    first = submit(member("first", total=3, **{pods.FAST_ADMISSION_ANNOTATION: "true"}))

    wl = group_workload()
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [
        (pods.role_hash(first.manifest["spec"]), 3)]
    assert not Event.objects.filter(reason="ErrWorkloadCompose").exists()


@pytest.mark.usefixtures("enabled", "queue")
def test_a_workload_of_the_group_name_that_is_not_a_groups_is_not_adopted() -> None:
    services.submit_job(member("lone", total=1), namespace="default")
    assert group_workload().annotations[pods.IS_GROUP_WORKLOAD_ANNOTATION] == "true"
    Workload.objects.filter(name="sample-group").update(annotations={})

    with pytest.raises(services.ValidationError) as refused:
        submit(member("late", total=1))

    assert "metadata.labels[kueue.x-k8s.io/pod-group-name]" in str(refused.value)
    assert not Job.objects.filter(name="late").exists()


# --- Finished, ready, reclaimable ------------------------------------------------------------


def _status(phase: str, *, ready: bool = False) -> dict[str, Any]:
    return pods.pod_status({}, phase=phase, ready=ready, now=datetime(2025, 1, 1))


def _members(*phases: str, **annotations: str) -> list[dict[str, Any]]:
    return [{**member(f"m{i}", total=len(phases), **annotations), "status": _status(phase)}
            for i, phase in enumerate(phases)]


def test_a_group_finishes_when_all_succeeded_or_when_none_runs_and_one_may_not_retry() -> None:
    assert KIND.group_report(_members("Succeeded", "Running")).finished is None
    done = KIND.group_report(_members("Succeeded", "Succeeded"))
    assert done.finished == ("Succeeded", "Pods succeeded: 2/2.")
    role = pods.role_hash(member("x")["spec"])
    assert done.reclaimable_pods == {role: 2}

    failed = _members("Succeeded", "Failed")
    assert KIND.group_report(failed).finished is None
    failed[1]["metadata"]["annotations"][pods.RETRIABLE_IN_GROUP_ANNOTATION] = "false"
    # Kueue reports success even then.
    assert KIND.group_report(failed).finished == ("Succeeded", "Pods succeeded: 1/2.")
    running = _members("Running", "Failed")
    running[1]["metadata"]["annotations"][pods.RETRIABLE_IN_GROUP_ANNOTATION] = "false"
    assert KIND.group_report(running).finished is None

    serving = _members("Succeeded", "Succeeded", **{pods.SERVING_ANNOTATION: "true"})
    assert KIND.group_report(serving).finished is None
    assert KIND.group_report(serving).reclaimable_pods == {}

    assert KIND.absent_members(_members("Running", "Failed")) == 1
    assert KIND.absent_members(_members("Running", "Pending")) == 0


# --- On the simulated cluster ----------------------------------------------------------------


def assert_succeeded(wl: Workload, members: list[Job]) -> None:
    """The group's Workload finished successfully, every member pod Succeeded."""
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert (finished["reason"], finished["message"]) == ("Succeeded", "Pods succeeded: 2/2.")
    for job in members:
        job.refresh_from_db()
        assert job.status["phase"] == "Succeeded"


def _submit_sample() -> list[Job]:
    return sorted((submit(m) for m in sample()), key=lambda j: j.name)


@pytest.mark.usefixtures("enabled", "queue")
def test_the_sample_group_is_admitted_as_one_and_runs_to_completion(
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    members = _submit_sample()

    reconcilers.step(t0)

    wl = group_workload()
    assert wl.phase == WorkloadPhase.ADMITTED
    for job in members:
        job.refresh_from_db()
        assert not job.suspend
        assert not pods.is_gated(job.manifest)
        (pod,) = ClusterPod.objects.filter(job=job)
        assert (pod.pod_set, pod.requests) == (wl.pod_sets[0]["name"], {"cpu": "3"})

    # The pods start 2 s after binding; the sample's sleep 2 and 3 s.
    reconcilers.step(t0 + timedelta(seconds=3))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    assert wl.phase == WorkloadPhase.ADMITTED

    reconcilers.step(t0 + timedelta(seconds=60))

    assert_succeeded(wl, members)


@pytest.mark.usefixtures("enabled", "queue")
def test_an_evicted_group_deletes_its_members_and_waits_for_their_replacements(
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    members = _submit_sample()
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=1))
    wl = group_workload()
    assert wl.phase == WorkloadPhase.ADMITTED

    services.evict_workload(wl, now=t0 + timedelta(seconds=2))
    reconcilers.step(t0 + timedelta(seconds=3))

    for job in members:
        job.refresh_from_db()
        assert not ClusterPod.objects.filter(job=job).exists()
        assert job.suspend
        assert job.status["phase"] == "Failed"
        assert cond.is_true(job.status["conditions"], pods.TERMINATION_TARGET)
    wl.refresh_from_db()
    # Its quota is back, but it is not admitted again: Kueue never recreates the pods.
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.queue_state == QueueState.INADMISSIBLE
    waiting = cond.find(wl.conditions, WAITING)
    assert (waiting["status"], waiting["reason"]) == ("True", "EvictedByUser")
    reconcilers.step(t0 + timedelta(seconds=30))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING

    # The owner replaces both pods: the group is admitted again and the new pods run.
    replacements = _submit_sample()
    wl.refresh_from_db()
    waiting = cond.find(wl.conditions, WAITING)
    assert (waiting["status"], waiting["reason"]) == ("False", "PodsReady")
    reconcilers.step(t0 + timedelta(seconds=31))

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    for job in replacements:
        job.refresh_from_db()
        assert not job.suspend
        assert ClusterPod.objects.filter(job=job).count() == 1
    for job in members:
        job.refresh_from_db()
        assert job.suspend
        assert not ClusterPod.objects.filter(job=job).exists()

    reconcilers.step(t0 + timedelta(seconds=90))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["message"] == "Pods succeeded: 2/2."


# --- Deleting a member -----------------------------------------------------------------------


@pytest.mark.usefixtures("enabled", "queue")
def test_deleting_the_member_the_workload_is_linked_to_keeps_it_for_a_replacement(
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    first, second = _submit_sample()
    wl = group_workload()
    assert wl.job_id == first.pk

    services.delete_job(first)

    # Kueue's group Workload is owned by every member: it stays, linked to the other one,
    # and is not admissible until the deleted pod is replaced.
    wl.refresh_from_db()
    assert wl.job_id == second.pk
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.queue_state == QueueState.INADMISSIBLE
    waiting = cond.find(wl.conditions, WAITING)
    assert (waiting["status"], waiting["reason"]) == ("True", "PodsFailed")
    reconcilers.step(t0)
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING
    assert not ClusterPod.objects.exists()

    (replacement,) = [submit(m) for m in sample()[:1]]

    wl.refresh_from_db()
    assert Workload.objects.count() == 1
    assert cond.find(wl.conditions, WAITING)["status"] == "False"
    assert wl.queue_state == QueueState.ACTIVE
    reconcilers.step(t0 + timedelta(seconds=1))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    for job in (second, replacement):
        assert ClusterPod.objects.filter(job=job).count() == 1
    reconcilers.step(t0 + timedelta(seconds=60))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["message"] == "Pods succeeded: 2/2."


@pytest.mark.usefixtures("enabled", "queue")
def test_a_running_group_keeps_its_workload_and_quota_until_its_last_member_is_deleted(
    reconcilers: Reconcilers, t0: datetime,
) -> None:
    first, second = _submit_sample()
    reconcilers.step(t0)
    wl = group_workload()
    assert wl.phase == WorkloadPhase.ADMITTED

    services.delete_job(first)

    wl.refresh_from_db()
    assert (wl.job_id, wl.phase) == (second.pk, WorkloadPhase.ADMITTED)
    assert wl.cluster_queue is not None
    assert cond.find(wl.conditions, WAITING)["status"] == "True"
    assert not ClusterPod.objects.filter(job_id=first.pk).exists()
    # The remaining member runs on through the Workload now linked to it.
    reconcilers.step(t0 + timedelta(seconds=3))
    second.refresh_from_db()
    assert second.status["phase"] == "Running"

    services.delete_job(second)

    assert not Workload.objects.exists()
    assert not Job.objects.exists()


@pytest.mark.usefixtures("enabled", "queue")
def test_the_delete_control_of_a_group_workload_deletes_one_member_and_stays_on_the_workload(
    admin_user: User,
) -> None:
    first, second = _submit_sample()
    wl = group_workload()
    page = reverse("ui-workload", kwargs={"cluster": wl.cluster.name, "namespace": "default",
                                          "name": wl.name})

    response = ui_client_for(admin_user).post(page + "actions/delete-job/", follow=True)

    assert response.redirect_chain == [(page, 302)]
    assert (f"Pod default/{first.name} deleted; workload default/sample-group waits for a "
            "replacement.") in response.content.decode()
    assert not Job.objects.filter(pk=first.pk).exists()
    assert Workload.objects.get(pk=wl.pk).job_id == second.pk


# --- MultiKueue ------------------------------------------------------------------------------


def test_the_sample_group_runs_on_one_worker_and_finishes_on_the_hub_whose_pods_stay_gated(
    hub: Cluster, t0: datetime, enabled: None,  # noqa: F811
) -> None:
    everything = Everything()
    Job.objects.all().delete()
    members = []
    for manifest in sample():
        manifest["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] = "multikueue-queue"
        members.append(services.submit_job(manifest, namespace="research", cluster=hub))
    members.sort(key=lambda j: j.name)

    everything.step(t0)

    wl = Workload.objects.get(cluster=hub, name="sample-group")
    (state,) = wl.admission_check_states
    assert state["state"] == "Ready"
    winner = Cluster.objects.get(name=wl.cluster_name)
    # One Workload, on the winner only, with the group's pod set.
    (remote_wl,) = Workload.objects.filter(cluster__role=ClusterRole.WORKER)
    assert (remote_wl.cluster, remote_wl.name) == (winner, "sample-group")
    assert remote_wl.pod_sets == wl.pod_sets
    assert remote_wl.annotations[pods.IS_GROUP_WORKLOAD_ANNOTATION] == "true"
    # Every member is copied there, in the group, with the group's Workload as prebuilt.
    copies = sorted(Job.objects.filter(cluster=winner), key=lambda j: j.name)
    assert [(j.kind, j.name, j.group_name) for j in copies] == [
        ("Pod", m.name, "sample-group") for m in members]
    for copy_ in copies:
        metadata = copy_.manifest["metadata"]
        assert metadata["labels"][jobframework.PREBUILT_WORKLOAD_LABEL] == "sample-group"
        assert metadata["labels"][dispatch.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"
        assert metadata["labels"][pods.GROUP_NAME_LABEL] == "sample-group"
        assert metadata["annotations"][pods.GROUP_TOTAL_COUNT_ANNOTATION] == "2"
    assert remote_wl.job_id == copies[0].pk
    assert not Job.objects.filter(cluster__name="worker-1" if winner.name == "worker-2"
                                  else "worker-2").exists()

    everything.step(at(t0, 3))
    assert ClusterPod.objects.filter(cluster=winner).count() == 2
    assert not ClusterPod.objects.filter(cluster=hub).exists()  # the hub runs no pods
    everything.step(at(t0, 4))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    for job in members:
        job.refresh_from_db()
        # The worker's status, while the hub's pod stays gated.
        assert job.status["phase"] == "Running"
        assert cond.is_true(job.status["conditions"], pods.POD_SCHEDULED)
        assert pods.is_gated(job.manifest)

    everything.step(at(t0, 60))
    assert_succeeded(wl, members)
    # Finished on the hub: every member's copy goes with the remote Workload.
    everything.step(at(t0, 61))
    assert not Workload.objects.filter(cluster__role=ClusterRole.WORKER).exists()
    assert not Job.objects.filter(cluster=winner).exists()


def test_a_hub_pod_keeps_scheduling_gated_until_the_workers_pod_is_scheduled() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    hub_pod = KIND.default(member("p"))
    unschedulable = {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}

    status = KIND.multikueue_status(hub_pod, {}, unschedulable, now=now)

    assert status["phase"] == "Pending"
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("PodScheduled", "False", "SchedulingGated")]
    # Kept as it is on later passes.
    assert KIND.multikueue_status(hub_pod, status, unschedulable, now=now) == status

    scheduled = {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "reason": "", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:05Z"}]}
    assert KIND.multikueue_status(hub_pod, status, scheduled, now=now) == scheduled
    # A pod that is not gated takes the worker's status as it is.
    ungated = KIND.run_with_pod_sets_info(hub_pod, [])
    assert KIND.multikueue_status(ungated, {}, unschedulable, now=now) == unschedulable
