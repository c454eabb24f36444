"""MultiKueue on the hub, with simulated workers: every reconciler of every domain stepped at
chosen times (time travel), the dispatch pass among them."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command

from multicluster import dispatch
from multicluster.choices import ClusterRole, Dispatcher
from multicluster.models import AdmissionCheck, Cluster, Dispatch, MultiKueueConfig, Pod
from multicluster.simulated import faults
from scheduling import job_reconciler as reconciler
from scheduling.choices import WorkloadPhase
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle

pytestmark = pytest.mark.django_db


class Everything:
    """Every reconciler of every domain, and the hub's dispatch pass, at ``now``."""

    def step(self, now: datetime, *, rounds: int = 4) -> None:
        from multicluster.simulated import runner

        ids = list(Cluster.objects.order_by("pk").values_list("pk", flat=True))
        hub = Cluster.objects.manager_id()
        assert hub is not None
        for _ in range(rounds):
            for cluster_id in ids:
                lifecycle.run_lifecycle(cluster_id, now=now, rng=random.Random(0))
                runner.sync_cluster(cluster_id, now=now)
                admission.run_admission_cycle(cluster_id, now=now)
            dispatch.sync_dispatch(hub, now=now)


@pytest.fixture
def hub(manager: Cluster) -> Cluster:
    """The demo: a manager with multikueue-cq dispatching to worker-1 and worker-2."""
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    # Only the job this module looks at; the demo's other jobs are not in the way.
    Job.objects.exclude(name="dispatched-analysis").delete()
    Workload.objects.exclude(job__name="dispatched-analysis").delete()
    manager.simulation = {"startDelaySeconds": 2}
    manager.save()
    Cluster.objects.filter(role=ClusterRole.WORKER).update(
        simulation={"startDelaySeconds": 2, "defaultRunSeconds": 30})
    return manager


@pytest.fixture
def t0() -> datetime:
    from django.utils import timezone

    return timezone.now().replace(microsecond=0) + timedelta(seconds=1)


def at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


def hub_workload() -> Workload:
    return Workload.objects.get(job__name="dispatched-analysis",
                                cluster__role=ClusterRole.MANAGER)


def check_state(wl: Workload) -> dict[str, Any]:
    (state,) = wl.admission_check_states
    return dict(state)


def remote_copies() -> dict[str, Workload]:
    return {wl.cluster.name: wl for wl in Workload.objects.filter(
        cluster__role=ClusterRole.WORKER).select_related("cluster")}


def test_all_at_once_dispatches_to_every_worker_and_keeps_the_first_that_admits(
    hub: Cluster, t0: datetime,
) -> None:
    everything = Everything()
    # One pass of the hub only: quota reserved, then copies in both workers.
    admission.run_admission_cycle(hub.pk, now=t0)
    wl = hub_workload()
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    assert check_state(wl)["state"] == "Pending"
    dispatch.sync_dispatch(hub.pk, now=t0)
    copies = remote_copies()
    assert sorted(copies) == ["worker-1", "worker-2"]
    assert copies["worker-1"].labels[dispatch.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"
    assert "kueue.x-k8s.io/job-uid" not in copies["worker-1"].labels
    wl.refresh_from_db()
    assert wl.nominated_cluster_names == ["worker-1", "worker-2"]

    # worker-2 admits first: it wins, worker-1's copy is deleted.
    w2 = Cluster.objects.get(name="worker-2")
    admission.run_admission_cycle(w2.pk, now=at(t0, 1))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 2))
    wl.refresh_from_db()
    assert wl.cluster_name == "worker-2"
    assert wl.nominated_cluster_names == []
    assert check_state(wl)["state"] == "Ready"
    assert check_state(wl)["message"] == "The workload was admitted on worker-2"
    assert wl.phase == WorkloadPhase.ADMITTED
    assert sorted(remote_copies()) == ["worker-2"]
    remote_job = Job.objects.get(cluster=w2)
    labels = remote_job.manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl.name
    assert labels[dispatch.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"

    # The winner runs the job; its status comes back; the hub finishes with its reason.
    everything.step(at(t0, 3))
    assert Pod.objects.filter(cluster=w2).count() == 2
    assert not Pod.objects.filter(cluster=hub).exists()  # the hub runs no pods
    everything.step(at(t0, 6))
    hub_job = Job.objects.get(cluster=hub, name="dispatched-analysis")
    assert hub_job.status.get("ready") == 2
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    everything.step(at(t0, 40))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert finished["reason"] == "Succeeded"
    hub_job.refresh_from_db()
    assert hub_job.status.get("succeeded") == 2
    # Finished on the hub: the remote objects go.
    everything.step(at(t0, 41))
    assert remote_copies() == {}
    assert not Job.objects.filter(cluster=w2).exists()


def test_incremental_adds_clusters_every_round_in_config_order(
    hub: Cluster, t0: datetime, settings: Any,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "DISPATCH_STEP_SIZE": 1}
    MultiKueueConfig.objects.filter(name="multikueue-demo").update(
        dispatcher=Dispatcher.INCREMENTAL, clusters=["worker-2", "worker-1"])
    # Neither worker can admit: their queues hold nothing.
    from scheduling.models import FlavorQuota

    FlavorQuota.objects.filter(cluster_queue__cluster__role=ClusterRole.WORKER).update(
        nominal_quota="0")
    admission.run_admission_cycle(hub.pk, now=t0)
    outcome = dispatch.sync_dispatch(hub.pk, now=t0)
    assert sorted(remote_copies()) == ["worker-2"]
    assert outcome.next_at == at(t0, 300)
    dispatch.sync_dispatch(hub.pk, now=at(t0, 299))
    assert sorted(remote_copies()) == ["worker-2"]
    outcome = dispatch.sync_dispatch(hub.pk, now=at(t0, 300))
    assert sorted(remote_copies()) == ["worker-1", "worker-2"]
    assert outcome.next_at is None
    wl = hub_workload()
    assert wl.nominated_cluster_names == ["worker-2", "worker-1"]
    assert sorted(Dispatch.objects.values_list("worker__name", "round")) == [
        ("worker-1", 2), ("worker-2", 1)]


def test_nominations_are_refused_unless_the_dispatcher_is_external(
    hub: Cluster, t0: datetime,
) -> None:
    from django.core.exceptions import ValidationError

    admission.run_admission_cycle(hub.pk, now=t0)
    with pytest.raises(ValidationError) as excinfo:
        dispatch.set_nominated_clusters(hub_workload(), ["worker-1"], now=t0)
    assert excinfo.value.message_dict == {"status.nominatedClusterNames": [
        "MultiKueueConfig multikueue-demo uses the AllAtOnce dispatcher: only an External "
        "one takes nominations"]}


def test_external_dispatch_uses_the_nominated_names_it_is_given(
    hub: Cluster, t0: datetime,
) -> None:
    MultiKueueConfig.objects.filter(name="multikueue-demo").update(
        dispatcher=Dispatcher.EXTERNAL)
    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    assert remote_copies() == {}
    wl = hub_workload()
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError) as excinfo:
        dispatch.set_nominated_clusters(wl, ["worker-9"], now=t0)
    assert excinfo.value.message_dict == {"status.nominatedClusterNames": [
        "not in the workload's MultiKueueConfig: worker-9"]}
    dispatch.set_nominated_clusters(wl, ["worker-1"], now=t0)
    dispatch.sync_dispatch(hub.pk, now=at(t0, 1))
    assert sorted(remote_copies()) == ["worker-1"]


def test_remote_eviction_retries_and_dispatches_again(hub: Cluster, t0: datetime) -> None:
    everything = Everything()
    everything.step(t0)
    wl = hub_workload()
    winner = wl.cluster_name
    assert winner in ("worker-1", "worker-2")
    remote = remote_copies()[winner]
    from scheduling import services

    services.evict_workload(remote, now=at(t0, 1))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 1))
    wl.refresh_from_db()
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "AdmissionCheck"
    assert wl.cluster_name == ""
    # The check's Retry carries no requeueAfterSeconds: requeued at once, dispatched again.
    everything.step(at(t0, 2))
    everything.step(at(t0, 3))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert check_state(wl)["state"] == "Ready"
    assert wl.cluster_name in ("worker-1", "worker-2")
    assert len(remote_copies()) == 1
    everything.step(at(t0, 40))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED


def test_a_lost_winner_is_kept_for_the_worker_lost_timeout(hub: Cluster, t0: datetime) -> None:
    everything = Everything()
    everything.step(t0)
    wl = hub_workload()
    winner = Cluster.objects.get(name=wl.cluster_name)
    faults.disconnect_cluster(winner, now=at(t0, 10))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 10))
    check = AdmissionCheck.objects.get(name="multikueue-demo")
    active = cond.find(check.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"], active["message"]) == (
        "True", "SomeActiveClusters", f"Inactive clusters: [{winner.name}]")
    assert winner.lost_since == at(t0, 10)
    Workload.objects.filter(cluster=winner).delete()  # nothing seen there any more
    outcome = dispatch.sync_dispatch(hub.pk, now=at(t0, 20))
    wl.refresh_from_db()
    assert check_state(wl)["state"] == "Ready"
    assert outcome.next_at == at(t0, 910)
    dispatch.sync_dispatch(hub.pk, now=at(t0, 910))
    wl.refresh_from_db()
    assert check_state(wl)["state"] == "Retry"
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert evicted["message"] == "Evicted due to AdmissionCheck(s) in Retry state: " + (
        wl.admission_check_states[0]["name"])
    # Dispatched again, to the worker still connected only.
    everything.step(at(t0, 911))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert wl.cluster_name != winner.name
    faults.reconnect_cluster(winner, now=at(t0, 920))
    assert winner.lost_since is None
    assert dispatch.is_connected(winner)


def test_garbage_collector_removes_copies_whose_hub_workload_is_gone(
    hub: Cluster, t0: datetime,
) -> None:
    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    assert len(remote_copies()) == 2
    Workload.objects.filter(cluster=hub).delete()
    assert dispatch.collect_garbage(now=at(t0, 60)) == 2
    assert remote_copies() == {}


def test_an_elastic_scale_up_stays_on_the_winner(hub: Cluster, t0: datetime) -> None:
    from scheduling import services
    from scheduling.workload import slices
    from tests.fixtures.scheduling import job_manifest

    everything = Everything()
    Job.objects.all().delete()
    manifest = job_manifest("elastic", "multikueue-queue", cpu="1", parallelism=2,
                            run_seconds=600,
                            annotations={"kueue.x-k8s.io/elastic-job": "true"})
    job = services.submit_job(manifest, namespace="research", cluster=hub)
    everything.step(t0)
    (first,) = Workload.objects.filter(job=job)
    winner = first.cluster_name
    assert winner in ("worker-1", "worker-2")
    everything.step(at(t0, 3))
    assert Pod.objects.filter(cluster__name=winner, phase="Running").count() == 2

    new = slices.scale_job(job, 3, now=at(t0, 5)).workload
    assert new is not None
    everything.step(at(t0, 5))
    new.refresh_from_db()
    first.refresh_from_db()
    assert first.phase == WorkloadPhase.FINISHED
    assert new.phase == WorkloadPhase.ADMITTED
    assert new.cluster_name == winner
    assert check_state(new)["state"] == "Ready"
    # Only the winner holds a copy of the new slice, and it replaced the old remote slice.
    remote_new = Workload.objects.get(cluster__name=winner, name=new.name)
    remote_old = Workload.objects.get(cluster__name=winner, name=first.name)
    assert remote_new.phase == WorkloadPhase.ADMITTED
    assert remote_new.admission["podSetAssignments"][0]["count"] == 3
    assert remote_old.phase == WorkloadPhase.FINISHED
    assert not Workload.objects.filter(name=new.name, cluster__role=ClusterRole.WORKER).exclude(
        cluster__name=winner).exists()
    remote_job = Job.objects.get(cluster__name=winner)
    assert remote_job.manifest["spec"]["parallelism"] == 3
    everything.step(at(t0, 8))
    assert Pod.objects.filter(cluster__name=winner, phase="Running").count() == 3

    # Scale down on the hub: the copy on the winner shrinks in place, its pods follow.
    slices.scale_job(job, 1, now=at(t0, 10))
    everything.step(at(t0, 10))
    remote_new.refresh_from_db()
    assert remote_new.pod_sets[0]["count"] == 1
    remote_job.refresh_from_db()
    assert remote_job.manifest["spec"]["parallelism"] == 1
    assert Pod.objects.filter(cluster__name=winner, phase="Running").count() == 1
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.ADMITTED


def test_a_hub_queue_with_an_unusable_or_misused_multikueue_check_admits_nothing(
    hub: Cluster, t0: datetime,
) -> None:
    from scheduling.cache import snapshots
    from scheduling.models import ClusterQueue

    for worker in Cluster.objects.filter(role=ClusterRole.WORKER):
        faults.disconnect_cluster(worker, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    check = AdmissionCheck.objects.get(name="multikueue-demo")
    active = cond.find(check.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"]) == ("False", "NoUsableClusters")
    assert snapshots.load_domain_specs(hub.pk).inactive == {
        "multikueue-cq": "AdmissionCheckInactive"}
    admission.run_admission_cycle(hub.pk, now=at(t0, 1))
    assert hub_workload().phase == WorkloadPhase.PENDING

    for worker in Cluster.objects.filter(role=ClusterRole.WORKER):
        faults.reconnect_cluster(worker, now=at(t0, 2))
    dispatch.sync_dispatch(hub.pk, now=at(t0, 2))
    cq = ClusterQueue.objects.get(cluster=hub, name="multikueue-cq")
    cq.admission_checks = [{"name": "multikueue-demo", "onFlavors": ["default-flavor"]}]
    cq.save()
    assert snapshots.load_domain_specs(hub.pk).inactive == {
        "multikueue-cq": "MultiKueueAdmissionCheckAppliedPerFlavor"}
    AdmissionCheck.objects.create(cluster=hub, name="second", controller_name=(
        "kueue.x-k8s.io/multikueue"), parameters={"name": "multikueue-demo"})
    cq.admission_checks = [{"name": "multikueue-demo"}, {"name": "second"}]
    cq.save()
    assert snapshots.load_domain_specs(hub.pk).inactive == {
        "multikueue-cq": "MultipleMultiKueueAdmissionChecks"}
    cq.admission_checks = [{"name": "multikueue-demo"}]
    cq.save()
    assert snapshots.load_domain_specs(hub.pk).inactive == {}
    admission.run_admission_cycle(hub.pk, now=at(t0, 3))
    assert hub_workload().phase == WorkloadPhase.QUOTA_RESERVED


def test_a_jobset_runs_on_the_winner_and_finishes_on_the_hub(hub: Cluster, t0: datetime) -> None:
    from scheduling import services
    from scheduling.jobs.jobset import JobSet

    everything = Everything()
    Job.objects.all().delete()
    container = {"name": "c", "image": "busybox", "command": ["sleep", "20"],
                 "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}
    manifest = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "fanout",
                     "labels": {"kueue.x-k8s.io/queue-name": "multikueue-queue"}},
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "replicatedJobs": [
            {"name": "driver", "template": {"spec": {"template": {"spec": {
                "containers": [container]}}}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"template": {"spec": {
                "containers": [container]}}}}},
        ]},
    }
    job = services.submit_job(manifest, namespace="research", cluster=hub)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("JobSet", "fanout")
    assert "managedBy" not in remote_job.manifest["spec"]
    remote_wl = Workload.objects.get(cluster=winner)
    assert [(ps["name"], ps["count"]) for ps in remote_wl.pod_sets] == [
        ("driver", 1), ("workers", 2)]
    everything.step(at(t0, 3))
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == [
        "driver", "workers", "workers"]
    assert not Pod.objects.filter(cluster=hub).exists()

    everything.step(at(t0, 6))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert [(s["name"], s["ready"]) for s in job.status["replicatedJobsStatus"]] == [
        ("driver", 1), ("workers", 2)]

    everything.step(at(t0, 30))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == (
        "Succeeded", "jobset completed successfully")
    job.refresh_from_db()
    assert JobSet().finished(job.status) == ("Succeeded", "jobset completed successfully")
    everything.step(at(t0, 31))
    assert not Job.objects.filter(cluster=winner).exists()


def test_an_mpijob_runs_on_the_winner_and_its_status_comes_back(
    hub: Cluster, t0: datetime,
) -> None:
    from scheduling import services
    from scheduling.jobs.mpijob import MPIJob

    everything = Everything()
    Job.objects.all().delete()

    def replica(seconds: int, replicas: int = 1) -> dict[str, Any]:
        return {"replicas": replicas, "template": {
            "metadata": {"annotations": {"kueueweb.io/run-seconds": str(seconds)}},
            "spec": {"containers": [{"name": "mpi", "image": "mpi-pi", "resources": {
                "requests": {"cpu": "1", "memory": "100Mi"}}}]}}}

    manifest = {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "pi",
                     "labels": {"kueue.x-k8s.io/queue-name": "multikueue-queue"}},
        "spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"},
                 "mpiReplicaSpecs": {"Launcher": replica(20), "Worker": replica(9999, 2)}},
    }
    job = services.submit_job(manifest, namespace="research", cluster=hub)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == ("MPIJob", "pi")
    assert "managedBy" not in remote_job.manifest["spec"]["runPolicy"]
    everything.step(at(t0, 3))
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == [
        "launcher", "worker", "worker"]
    assert not Pod.objects.filter(cluster=hub).exists()

    everything.step(at(t0, 6))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    assert job.status["replicaStatuses"]["Worker"]["active"] == 2

    everything.step(at(t0, 30))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == (
        "Succeeded", "MPIJob pi is successfully completed.")
    job.refresh_from_db()
    assert MPIJob().finished(job.status) == ("Succeeded", "MPIJob pi is successfully completed.")


# --- Kueue's examples of the Ray and Kubeflow kinds --------------------------------------

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue_examples" / "jobs"
KUBEFLOW_FRAMEWORKS = ["kubeflow.org/pytorchjob", "kubeflow.org/tfjob",
                       "kubeflow.org/xgboostjob", "kubeflow.org/paddlejob",
                       "kubeflow.org/jaxjob"]


@pytest.fixture
def kubeflow_enabled(settings: Any) -> None:
    """The Kubeflow v1 kinds enabled (Kueue's shipped config leaves them commented out)."""
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], *KUBEFLOW_FRAMEWORKS]}


def managed_by(manifest: dict[str, Any]) -> dict[str, Any]:
    """Where the kind keeps its managedBy: a Kubeflow job under ``spec.runPolicy``."""
    spec: dict[str, Any] = manifest["spec"]
    if manifest["apiVersion"].startswith("kubeflow.org/"):
        return spec.setdefault("runPolicy", {})  # type: ignore[no-any-return]
    return spec


def submit_example(hub: Cluster, file: str) -> Job:
    """Kueue's example in the demo's MultiKueue queue, managed by MultiKueue as Kueue's
    webhook defaults a job of a MultiKueue queue."""
    from scheduling import services

    Job.objects.all().delete()
    manifest = yaml.safe_load((EXAMPLES / file).read_text())
    manifest["metadata"].pop("namespace", None)
    manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "multikueue-queue"
    managed_by(manifest)["managedBy"] = "kueue.x-k8s.io/multikueue"
    return services.submit_job(manifest, namespace="research", cluster=hub)


@pytest.mark.parametrize(("file", "pod_sets", "message"), [
    ("ray-job-sample.yaml", ["head", "small-group", "submitter"], ""),
    ("sample-pytorchjob.yaml", ["master", "worker"],
     "PyTorchJob pytorch-simple is successfully completed."),
    ("sample-tfjob.yaml", ["ps", "worker", "worker"],
     "TFJob tensorflow-dist-mnist is successfully completed."),
    ("sample-xgboostjob.yaml", ["master", "worker", "worker"],
     "XGBoostJob xgboost-dist-iris-test-train is successfully completed."),
    ("sample-paddlejob.yaml", ["worker", "worker"],
     "PaddleJob paddle-simple-cpu is successfully completed."),
    ("sample-jaxjob.yaml", ["worker", "worker"], "JAXJob jax-simple is successfully completed."),
])
def test_a_ray_or_kubeflow_example_runs_on_the_winner_and_finishes_on_the_hub(
    hub: Cluster, t0: datetime, kubeflow_enabled: None, file: str, pod_sets: list[str],
    message: str,
) -> None:
    everything = Everything()
    job = submit_example(hub, file)
    integration = reconciler.integration_of(job)

    everything.step(t0)

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    assert check_state(wl)["state"] == "Ready"
    remote_job = Job.objects.get(cluster=winner)
    assert (remote_job.kind, remote_job.name) == (job.kind, job.name)
    # Kueue's adapter clears managedBy on the copy, so the worker's own controller runs it;
    # the hub's object stays managed by MultiKueue.
    assert "managedBy" not in managed_by(remote_job.manifest)
    assert managed_by(job.manifest)["managedBy"] == "kueue.x-k8s.io/multikueue"
    labels = remote_job.manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == wl.name
    assert labels[dispatch.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"

    everything.step(at(t0, 3))
    everything.step(at(t0, 6))
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == (
        pod_sets)
    assert not Pod.objects.filter(cluster=hub).exists()  # the hub runs no pods
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    job.refresh_from_db()
    remote_job.refresh_from_db()
    assert job.status == remote_job.status  # the worker's status, copied back
    assert integration.finished(job.status) is None

    everything.step(at(t0, 60))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    finished = cond.find(wl.conditions, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == ("Succeeded", message)
    job.refresh_from_db()
    assert integration.finished(job.status) == ("Succeeded", message)
    everything.step(at(t0, 61))
    assert not Job.objects.filter(cluster=winner).exists()
    assert remote_copies() == {}


def test_a_raycluster_runs_on_the_winner_until_deactivated_on_the_hub(
    hub: Cluster, t0: datetime,
) -> None:
    from scheduling import services

    everything = Everything()
    job = submit_example(hub, "ray-cluster-sample.yaml")

    everything.step(t0)
    everything.step(at(t0, 3))
    everything.step(at(t0, 6))

    (wl,) = Workload.objects.filter(job=job)
    winner = Cluster.objects.get(name=wl.cluster_name)
    remote_job = Job.objects.get(cluster=winner)
    assert "managedBy" not in remote_job.manifest["spec"]
    assert sorted(Pod.objects.filter(cluster=winner).values_list("pod_set", flat=True)) == [
        "head", "small-group"]
    job.refresh_from_db()
    remote_job.refresh_from_db()
    assert job.status["state"] == "ready"  # the worker's status, copied back
    assert job.status == remote_job.status
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")

    # A cluster never finishes: it holds the quota until its workload is deactivated.
    everything.step(at(t0, 600))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    services.update_workload(wl, {"spec": {"active": False}})
    everything.step(at(t0, 602))

    wl.refresh_from_db()
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["status"], evicted["reason"]) == ("True", "Deactivated")
    assert remote_copies() == {}
    assert not Job.objects.filter(cluster=winner).exists()
    assert not Pod.objects.filter(cluster=winner).exists()


def test_a_job_and_a_jobset_of_one_name_run_apart_on_the_workers(
    hub: Cluster, t0: datetime,
) -> None:
    from scheduling import services

    everything = Everything()
    Job.objects.all().delete()
    container = {"name": "c", "image": "busybox", "command": ["sleep", "20"],
                 "resources": {"requests": {"cpu": "500m", "memory": "100Mi"}}}
    labels = {"kueue.x-k8s.io/queue-name": "multikueue-queue"}
    jobset = services.submit_job({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "twin", "labels": labels},
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "replicatedJobs": [
            {"name": "workers", "replicas": 2, "template": {"spec": {"template": {"spec": {
                "containers": [container]}}}}},
        ]},
    }, namespace="research", cluster=hub)
    job = services.submit_job({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "twin", "labels": labels},
        "spec": {"managedBy": "kueue.x-k8s.io/multikueue", "template": {"spec": {
            "containers": [container], "restartPolicy": "Never"}}},
    }, namespace="research", cluster=hub)

    everything.step(t0)

    remote = {}
    for hub_job in (job, jobset):
        (wl,) = Workload.objects.filter(job=hub_job)
        assert wl.name.startswith(f"{hub_job.kind.lower()}-twin-")
        copy = Workload.objects.select_related("job").get(cluster__name=wl.cluster_name,
                                                          name=wl.name)
        assert copy.job is not None
        remote[hub_job.kind] = copy.job
    assert {(j.kind, j.name) for j in remote.values()} == {("Job", "twin"), ("JobSet", "twin")}
    # Both won on the same worker (the first in the config), where the names meet.
    assert remote["Job"].cluster_id == remote["JobSet"].cluster_id
    assert remote["Job"].pk != remote["JobSet"].pk

    everything.step(at(t0, 30))
    for hub_job in (job, jobset):
        assert Workload.objects.get(job=hub_job).phase == WorkloadPhase.FINISHED
