"""Jobs created with kubectl on a connected Kubernetes cluster: created with the official
client as kubectl would (suspended, or a Pod gated), adopted as local jobs with their
Workloads, run in place once admitted (the cluster's own object unsuspended or ungated with
the flavor's node selector, never a copy), stopped in place with their templates restored,
left on the cluster once finished, and removed locally when deleted there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
import yaml
from django.utils import timezone

# The user's side: kubectl, played with the official client against the test server.
from kubernetes import client as k8s  # noqa: TID251
from kubernetes import config as k8s_config  # noqa: TID251

from multicluster.kube.manifests import ADOPTED_ANNOTATION, ORIGIN_LABEL
from multicluster.kube.sync import KubeSyncOutcome, sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import EventType, JobSource, WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.jobs.statefulset import StatefulSet
from scheduling.models import Event, Job, LocalQueue, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

SPOT = {"instance-type": "spot"}
JOBSETS = ("jobset.x-k8s.io", "v1alpha2")


class Kubectl:
    """What a user does with kubectl, through the official client's typed APIs."""

    def __init__(self, kubeconfig: str, namespace: str) -> None:
        self.api = k8s_config.new_client_from_config_dict(yaml.safe_load(kubeconfig))
        self.namespace = namespace
        self.batch = k8s.BatchV1Api(self.api)
        self.core = k8s.CoreV1Api(self.api)
        self.custom = k8s.CustomObjectsApi(self.api)

    def create_job(self, name: str, *, labels: Mapping[str, str] | None = None,
                   namespace: str | None = None, parallelism: int = 2,
                   owner: Mapping[str, Any] | None = None,
                   suspend: bool = True) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": name, "labels": dict(labels or {})}
        if owner is not None:
            metadata["ownerReferences"] = [{**owner, "controller": True}]
        created = self.batch.create_namespaced_job(namespace or self.namespace, {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"suspend": suspend, "parallelism": parallelism, "completions": parallelism,
                     "template": {"spec": {
                         "restartPolicy": "Never",
                         "containers": [{"name": "c", "image": "busybox",
                                         "resources": {"requests": {"cpu": "1"}}}]}}}})
        result: dict[str, Any] = self.api.sanitize_for_serialization(created)
        return result

    def create_jobset(self, name: str) -> dict[str, Any]:
        def replicated(rj: str, cpu: str) -> dict[str, Any]:
            return {"name": rj, "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox",
                                    "resources": {"requests": {"cpu": cpu}}}]}}}}}
        created: dict[str, Any] = self.custom.create_namespaced_custom_object(
            *JOBSETS, self.namespace, "jobsets", {
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": name,
                             "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
                "spec": {"suspend": True, "replicatedJobs": [
                    replicated("driver", "1"), replicated("workers", "2")]}})
        return created

    def create_gated_pod(self, name: str, *, group: str | None = None, total: int = 2,
                         owner: Mapping[str, Any] | None = None,
                         finalizers: Sequence[str] = ()) -> None:
        metadata: dict[str, Any] = {
            "name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}}
        if finalizers:
            metadata["finalizers"] = list(finalizers)
        if group is not None:
            metadata["labels"][pods.GROUP_NAME_LABEL] = group
            metadata["annotations"] = {pods.GROUP_TOTAL_COUNT_ANNOTATION: str(total)}
        if owner is not None:
            metadata["ownerReferences"] = [{**owner, "controller": True}]
        self.core.create_namespaced_pod(self.namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"restartPolicy": "Never",
                     "schedulingGates": [{"name": pods.SCHEDULING_GATE}],
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}})


@pytest.fixture
def kubectl(kube_api: Any) -> Iterator[Kubectl]:
    kube_api.require_fake()
    kube_api.create_namespace(kube_api.namespace)
    user = Kubectl(kube_api.kubeconfig, kube_api.namespace)
    try:
        yield user
    finally:
        user.api.close()


@pytest.fixture
def with_pods(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "pod"]}


def key(kube_api: Any, name: str) -> str:
    return f"{kube_api.namespace}/{name}"


def adopted(domain: Cluster, name: str, kind: str = "Job") -> Job:
    return Job.objects.get(cluster=domain, name=name, kind=kind)


def sync(domain: Cluster, now: datetime) -> KubeSyncOutcome:
    return sync_kube_cluster(domain.pk, now=now)


def admit(domain: Cluster, job: Job, now: datetime) -> Workload:
    admission.run_admission_cycle(domain.pk, now=now)
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.ADMITTED
    return wl


def template_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = obj["spec"]["template"]
    return template


# --- a batch/v1 Job ----------------------------------------------------------------------


def test_a_job_created_with_kubectl_is_adopted_run_in_place_and_left_once_finished(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    created = kubectl.create_job("pi", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"})

    first = sync(user_queue_domain, t0)

    assert first.adopted == [key(kube_api, "pi")]
    job = adopted(user_queue_domain, "pi")
    assert (job.source, str(job.uid), job.suspend) == (
        JobSource.CLUSTER, created["metadata"]["uid"], True)
    assert job.manifest["spec"]["template"]["metadata"]["labels"]["job-name"] == "pi"
    assert "status" not in job.manifest
    wl = Workload.objects.get(job=job)
    assert (wl.queue_name, wl.phase, wl.pod_sets[0]["count"]) == (
        "user-queue", WorkloadPhase.PENDING, 2)
    remote = kube_api.get("jobs", kube_api.namespace, "pi")
    assert remote["metadata"]["annotations"] == {ADOPTED_ANNOTATION: "true"}
    assert remote["spec"]["suspend"] is True

    admit(user_queue_domain, job, t0)
    started = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert started.started == [key(kube_api, "pi")]
    [remote] = kube_api.objects("jobs", kube_api.namespace)  # the user's, no copy beside it
    assert remote["metadata"]["uid"] == created["metadata"]["uid"]
    assert remote["spec"]["suspend"] is False
    assert template_of(remote)["spec"]["nodeSelector"] == SPOT
    assert template_of(remote)["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
    assert ORIGIN_LABEL not in remote["metadata"].get("labels", {})
    assert len(kube_api.requests_to(  # kubectl's create alone
        "POST", f"/apis/batch/v1/namespaces/{kube_api.namespace}/jobs")) == 1
    assert not adopted(user_queue_domain, "pi").suspend

    kube_api.run_job_controller()
    sync(user_queue_domain, t0 + timedelta(seconds=10))

    ready = cond.find(Workload.objects.get(job=job).conditions, "PodsReady")
    assert ready is not None
    assert ready["status"] == "True"

    kube_api.complete_job(kube_api.namespace, "pi")
    finished = sync(user_queue_domain, t0 + timedelta(seconds=60))

    assert (finished.finished, finished.deleted) == ([key(kube_api, "pi")], [])
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.FINISHED
    assert kube_api.get("jobs", kube_api.namespace, "pi") is not None  # the user's to delete

    kubectl.batch.delete_namespaced_job("pi", kube_api.namespace,
                                        propagation_policy="Background")
    gone = sync(user_queue_domain, t0 + timedelta(seconds=70))

    assert gone.removed == [key(kube_api, "pi")]
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Workload.objects.filter(pk=wl.pk).exists()


def test_an_adopted_job_deleted_on_the_cluster_gives_its_quota_back(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_job("a", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"},
                       parallelism=8)
    kubectl.create_job("b", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"},
                       parallelism=8)
    sync(user_queue_domain, t0)
    admission.run_admission_cycle(user_queue_domain.pk, now=t0)
    phases = {wl.job.name: wl.phase for wl in Workload.objects.select_related("job")}
    assert phases == {"a": WorkloadPhase.ADMITTED, "b": WorkloadPhase.PENDING}
    sync(user_queue_domain, t0 + timedelta(seconds=1))

    kubectl.batch.delete_namespaced_job("a", kube_api.namespace)
    sync(user_queue_domain, t0 + timedelta(seconds=2))
    # The deletion requeues the parked workloads as of the pass (t0 + 2 s) or the wall clock,
    # whichever is later: a cycle after both. The wall clock alone can still be before the
    # pass when the test server answers quickly.
    after = max(timezone.now(), t0 + timedelta(seconds=2)) + timedelta(seconds=1)
    admission.run_admission_cycle(user_queue_domain.pk, now=after)

    assert [(wl.job.name, wl.phase) for wl in Workload.objects.select_related("job")] == [
        ("b", WorkloadPhase.ADMITTED)]


def test_an_evicted_job_is_suspended_in_place_with_its_template_restored(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_job("pi", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"})
    sync(user_queue_domain, t0)
    original = template_of(kube_api.get("jobs", kube_api.namespace, "pi"))
    job = adopted(user_queue_domain, "pi")
    wl = admit(user_queue_domain, job, t0)
    sync(user_queue_domain, t0 + timedelta(seconds=1))
    kube_api.run_job_controller()
    sync(user_queue_domain, t0 + timedelta(seconds=2))
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2

    services.evict_workload(wl, now=t0 + timedelta(seconds=3))
    stopping = sync(user_queue_domain, t0 + timedelta(seconds=4))

    assert stopping.stopping == [key(kube_api, "pi")]
    remote = kube_api.get("jobs", kube_api.namespace, "pi")
    assert remote["spec"]["suspend"] is True
    assert template_of(remote) == original  # node selector and job uid label gone again
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.ADMITTED  # pods still run

    kube_api.run_job_controller()
    stopped = sync(user_queue_domain, t0 + timedelta(seconds=5))

    assert stopped.stopped == [key(kube_api, "pi")]
    assert stopped.deleted == []
    assert kube_api.get("jobs", kube_api.namespace, "pi") is not None
    assert kube_api.objects("pods", kube_api.namespace) == []
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.PENDING
    assert adopted(user_queue_domain, "pi").suspend

    admit(user_queue_domain, job, t0 + timedelta(seconds=6))
    again = sync(user_queue_domain, t0 + timedelta(seconds=7))

    assert again.started == [key(kube_api, "pi")]
    remote = kube_api.get("jobs", kube_api.namespace, "pi")
    assert (remote["spec"]["suspend"], template_of(remote)["spec"]["nodeSelector"]) == (
        False, SPOT)


def test_a_job_created_running_is_suspended_until_admitted(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    # No webhook suspended it: Kueue stops a job that runs without an admitted Workload.
    kubectl.create_job("eager", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"},
                       suspend=False)

    first = sync(user_queue_domain, t0)

    assert first.adopted == [key(kube_api, "eager")]
    assert kube_api.get("jobs", kube_api.namespace, "eager")["spec"]["suspend"] is True
    job = adopted(user_queue_domain, "eager")
    admit(user_queue_domain, job, t0)
    started = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert started.started == [key(kube_api, "eager")]
    remote = kube_api.get("jobs", kube_api.namespace, "eager")
    assert (remote["spec"]["suspend"], template_of(remote)["spec"]["nodeSelector"]) == (
        False, SPOT)


# --- a JobSet and a pod group -----------------------------------------------------------


def test_a_jobset_created_with_kubectl_runs_in_place_and_its_jobs_are_not_adopted(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kube_api.install_jobset_crd()
    jobset = kubectl.create_jobset("js")
    # A child Job as the JobSet controller makes it, naming the queue too: the JobSet's
    # Workload covers it.
    kubectl.create_job("js-driver-0", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"},
                       owner={"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                              "name": "js", "uid": jobset["metadata"]["uid"]})

    first = sync(user_queue_domain, t0)

    assert first.adopted == [key(kube_api, "js")]
    assert list(Job.objects.values_list("kind", "name")) == [("JobSet", "js")]
    job = adopted(user_queue_domain, "js", kind="JobSet")
    wl = admit(user_queue_domain, job, t0)
    assert [ps["name"] for ps in wl.pod_sets] == ["driver", "workers"]

    started = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert started.started == [key(kube_api, "js")]
    remote = kube_api.get("jobsets", kube_api.namespace, "js")
    assert remote["spec"]["suspend"] is False
    assert [rj["template"]["spec"]["template"]["spec"]["nodeSelector"]
            for rj in remote["spec"]["replicatedJobs"]] == [SPOT, SPOT]
    assert kube_api.objects("jobsets", kube_api.namespace) == [remote]

    kube_api.run_jobset_controller()
    sync(user_queue_domain, t0 + timedelta(seconds=10))
    kube_api.complete_jobset(kube_api.namespace, "js")
    finished = sync(user_queue_domain, t0 + timedelta(seconds=20))

    assert finished.finished == [key(kube_api, "js")]
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.FINISHED
    assert kube_api.get("jobsets", kube_api.namespace, "js") is not None

    kubectl.custom.delete_namespaced_custom_object(*JOBSETS, kube_api.namespace, "jobsets",
                                                   "js")
    gone = sync(user_queue_domain, t0 + timedelta(seconds=30))

    assert gone.removed == [key(kube_api, "js")]
    assert not Job.objects.exists()


def test_an_evicted_jobset_is_suspended_in_place_with_its_templates_restored(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kube_api.install_jobset_crd()
    kubectl.create_jobset("js")
    sync(user_queue_domain, t0)
    original = kube_api.get("jobsets", kube_api.namespace, "js")["spec"]["replicatedJobs"]
    wl = admit(user_queue_domain, adopted(user_queue_domain, "js", kind="JobSet"), t0)
    sync(user_queue_domain, t0 + timedelta(seconds=1))
    kube_api.run_jobset_controller()
    sync(user_queue_domain, t0 + timedelta(seconds=2))
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2

    services.evict_workload(wl, now=t0 + timedelta(seconds=3))
    stopping = sync(user_queue_domain, t0 + timedelta(seconds=4))

    assert stopping.stopping == [key(kube_api, "js")]  # its pods, counted by the job uid
    remote = kube_api.get("jobsets", kube_api.namespace, "js")
    assert (remote["spec"]["suspend"], remote["spec"]["replicatedJobs"]) == (True, original)

    kube_api.run_jobset_controller()
    stopped = sync(user_queue_domain, t0 + timedelta(seconds=5))

    assert stopped.stopped == [key(kube_api, "js")]
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.PENDING
    assert kube_api.get("jobsets", kube_api.namespace, "js") is not None


@pytest.mark.usefixtures("with_pods")
def test_a_gated_pod_group_is_adopted_as_one_workload_and_ungated_with_its_placement(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_gated_pod("leader", group="grp")
    kubectl.create_gated_pod("worker", group="grp")

    first = sync(user_queue_domain, t0)

    assert sorted(first.adopted) == [key(kube_api, "leader"), key(kube_api, "worker")]
    [wl] = Workload.objects.all()
    assert (wl.name, sum(ps["count"] for ps in wl.pod_sets)) == ("grp", 2)
    admission.run_admission_cycle(user_queue_domain.pk, now=t0)
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.ADMITTED

    started = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert started.started  # the group runs through the member its Workload is linked to
    for name in ("leader", "worker"):
        pod = kube_api.get("pods", kube_api.namespace, name)
        assert pod["spec"].get("schedulingGates", []) == []
        assert pod["spec"]["nodeSelector"] == SPOT
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2  # no copies

    for name in ("leader", "worker"):
        kube_api.set_pod(kube_api.namespace, name, phase="Succeeded", ready=False)
    finished = sync(user_queue_domain, t0 + timedelta(seconds=10))

    assert finished.finished
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.FINISHED
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2

    for name in ("leader", "worker"):
        kubectl.core.delete_namespaced_pod(name, kube_api.namespace)
    gone = sync(user_queue_domain, t0 + timedelta(seconds=20))

    assert sorted(gone.removed) == [key(kube_api, "leader"), key(kube_api, "worker")]
    assert not Job.objects.exists()
    assert not Workload.objects.exists()


@pytest.mark.usefixtures("with_pods")
def test_a_running_pod_deleted_with_kubectl_loses_kueues_finalizer_and_its_job(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    # As Kueue's Pod webhook leaves it: gated, and held by Kueue's finalizer.
    kubectl.create_gated_pod("solo", finalizers=[pods.FINALIZER, "example.com/other"])
    sync(user_queue_domain, t0)
    job = adopted(user_queue_domain, "solo", kind="Pod")
    admit(user_queue_domain, job, t0)
    sync(user_queue_domain, t0 + timedelta(seconds=1))
    kube_api.set_pod(kube_api.namespace, "solo", phase="Running", ready=True)
    running = sync(user_queue_domain, t0 + timedelta(seconds=2))
    assert running.finished == []
    assert kube_api.get("pods", kube_api.namespace, "solo")["metadata"]["finalizers"] == [
        pods.FINALIZER, "example.com/other"]  # kept while its Workload runs

    kubectl.core.delete_namespaced_pod("solo", kube_api.namespace)
    terminating = kube_api.get("pods", kube_api.namespace, "solo")
    assert terminating["metadata"]["deletionTimestamp"]
    sync(user_queue_domain, t0 + timedelta(seconds=3))

    # Kueue's finalizer alone is taken off; the other one still holds the Pod.
    held = kube_api.get("pods", kube_api.namespace, "solo")
    assert held["metadata"]["finalizers"] == ["example.com/other"]
    kubectl.core.patch_namespaced_pod("solo", kube_api.namespace,
                                      {"metadata": {"finalizers": None}})
    assert kube_api.get("pods", kube_api.namespace, "solo") is None
    gone = sync(user_queue_domain, t0 + timedelta(seconds=4))

    assert gone.removed == [key(kube_api, "solo")]
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Workload.objects.exists()


# --- what is adopted, and what is not ----------------------------------------------------


@pytest.mark.usefixtures("with_pods")
def test_only_managed_objects_are_adopted(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_job("unlabelled")
    owner = kubectl.create_job("owner", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"})
    # A pod of the Job, naming a queue: the Job's Workload covers it.
    kubectl.create_gated_pod("owner-pod", owner={
        "apiVersion": "batch/v1", "kind": "Job", "name": "owner",
        "uid": owner["metadata"]["uid"]})
    # A job submitted through kueueweb runs as a copy, which is never adopted.
    submitted = services.submit_job(job_manifest("copy", "user-queue"),
                                    namespace=kube_api.namespace, cluster=user_queue_domain)

    first = sync(user_queue_domain, t0)
    admission.run_admission_cycle(user_queue_domain.pk, now=t0)
    second = sync(user_queue_domain, t0 + timedelta(seconds=1))
    third = sync(user_queue_domain, t0 + timedelta(seconds=2))

    assert (first.adopted, second.adopted, third.adopted) == ([key(kube_api, "owner")], [], [])
    assert sorted(second.started) == [key(kube_api, "copy"), key(kube_api, "owner")]
    copy = kube_api.get("jobs", kube_api.namespace, "copy")
    assert copy["metadata"]["labels"][ORIGIN_LABEL] == "multikueue"
    assert sorted(Job.objects.values_list("name", "source")) == [
        ("copy", JobSource.KUEUEWEB), ("owner", JobSource.CLUSTER)]
    assert Job.objects.get(name="copy").pk == submitted.pk
    assert kube_api.get("jobs", kube_api.namespace, "unlabelled")["metadata"].get(
        "annotations") is None


def test_without_a_queue_name_jobs_are_adopted_in_the_selected_namespaces_only(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
    settings: Any,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MANAGE_JOBS_WITHOUT_QUEUE_NAME": True,
                         "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchLabels": {"team": "a"}}}
    other = f"{kube_api.namespace}-other"
    kubectl.core.patch_namespace(kube_api.namespace, {"metadata": {"labels": {"team": "a"}}})
    kubectl.core.create_namespace({"metadata": {"name": other, "labels": {"team": "b"}}})
    cq = LocalQueue.objects.get(name="user-queue").cluster_queue
    for namespace in (kube_api.namespace, other):
        LocalQueue.objects.create(cluster=user_queue_domain, namespace=namespace,
                                  name="default", cluster_queue=cq)
        kubectl.create_job("plain", namespace=namespace)

    outcome = sync(user_queue_domain, t0)

    assert outcome.adopted == [key(kube_api, "plain")]
    job = adopted(user_queue_domain, "plain")
    assert (job.namespace, Workload.objects.get(job=job).queue_name) == (
        kube_api.namespace, "default")

    kubectl.core.patch_namespace(other, {"metadata": {"labels": {"team": "a"}}})
    later = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert later.adopted == [f"{other}/plain"]


def test_an_object_kueueweb_refuses_gets_a_warning_once_and_breaks_nothing(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_job("bad", labels={jobframework.QUEUE_NAME_LABEL: "user-queue",
                                      jobframework.PRIORITY_CLASS_LABEL: "missing"})
    kubectl.create_job("good", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"})

    first = sync(user_queue_domain, t0)
    second = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert (first.adopted, first.refused) == ([key(kube_api, "good")], [key(kube_api, "bad")])
    assert (second.adopted, second.refused) == ([], [])
    [event] = Event.objects.filter(object_name="bad")
    assert (event.type, event.reason, event.object_kind) == (
        EventType.WARNING, "FailedAdoption", "Job")
    assert "metadata.labels[kueue.x-k8s.io/priority-class]" in event.message
    assert list(Job.objects.values_list("name", flat=True)) == ["good"]


def test_an_adopted_job_deleted_through_kueueweb_is_deleted_on_the_cluster(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_job("pi", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"})
    sync(user_queue_domain, t0)

    services.delete_job(adopted(user_queue_domain, "pi"))
    outcome = sync(user_queue_domain, t0 + timedelta(seconds=1))
    again = sync(user_queue_domain, t0 + timedelta(seconds=2))

    assert (outcome.deleted, outcome.adopted) == ([key(kube_api, "pi")], [])
    assert kube_api.get("jobs", kube_api.namespace, "pi") is None
    assert again.adopted == []
    assert not Job.objects.exists()


# --- serving workloads: Pods of a Deployment or a StatefulSet -----------------------------


@pytest.fixture
def with_serving(settings: Any) -> None:
    """The serving frameworks only: the pod framework is enabled implicitly, for the Pods
    they hand it."""
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "deployment", "statefulset"]}


def serving_template(framework: str) -> dict[str, Any]:
    """A pod template as the kind's Kueue webhook leaves it (its ``default``), and gated as
    Kueue's pod webhook gates each Pod as it is created."""
    metadata: dict[str, Any] = {"labels": {"app": "web"}}
    if framework == "deployment":
        metadata["labels"].update({jobframework.QUEUE_NAME_LABEL: "user-queue",
                                   pods.MANAGED_LABEL: pods.MANAGED_LABEL_VALUE})
    metadata["annotations"] = {pods.SUSPENDING_PARENT_ANNOTATION: framework}
    return {"metadata": metadata, "spec": {
        "schedulingGates": [{"name": pods.SCHEDULING_GATE}],
        "containers": [{"name": "c", "image": "nginx",
                        "resources": {"requests": {"cpu": "1"}}}]}}


def create_deployment(kubectl: Kubectl, name: str, replicas: int) -> None:
    k8s.AppsV1Api(kubectl.api).create_namespaced_deployment(kubectl.namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": serving_template("deployment")}})


def scale_deployment(kubectl: Kubectl, name: str, replicas: int) -> None:
    k8s.AppsV1Api(kubectl.api).patch_namespaced_deployment(
        name, kubectl.namespace, {"spec": {"replicas": replicas}})


def pods_by_gate(kube_api: Any) -> tuple[list[str], list[str]]:
    """The namespace's pods: (ungated, gated), by name."""
    ungated, gated = [], []
    for pod in kube_api.objects("pods", kube_api.namespace):
        (gated if pod["spec"].get("schedulingGates") else ungated).append(
            pod["metadata"]["name"])
    return sorted(ungated), sorted(gated)


@pytest.mark.usefixtures("with_serving")
def test_a_deployments_pods_are_adopted_one_workload_each_and_admitted_as_quota_allows(
    kube_api: Any, kubectl: Kubectl, make_user_queue_domain: Any, t0: datetime,
) -> None:
    domain = make_user_queue_domain("2")
    create_deployment(kubectl, "web", 3)
    kube_api.run_deployment_controller()

    first = sync(domain, t0)

    created = sorted(p["metadata"]["name"] for p in kube_api.objects("pods", kube_api.namespace))
    assert sorted(first.adopted) == [key(kube_api, name) for name in created]
    assert not Job.objects.filter(kind="Deployment").exists()  # Kueue queues its Pods only
    assert sorted(Workload.objects.values_list("pod_sets__0__count", flat=True)) == [1, 1, 1]

    admission.run_admission_cycle(domain.pk, now=t0)
    started = sync(domain, t0 + timedelta(seconds=1))

    ungated, gated = pods_by_gate(kube_api)
    assert (len(started.started), len(ungated), len(gated)) == (2, 2, 1)
    assert sorted(name.split("/")[1] for name in started.started) == ungated
    for name in ungated:
        assert kube_api.get("pods", kube_api.namespace, name)["spec"]["nodeSelector"] == SPOT
    assert len(kube_api.objects("pods", kube_api.namespace)) == 3  # no copies

    kube_api.run_scheduler()
    for name in ungated:
        kube_api.set_pod(kube_api.namespace, name, phase="Running", ready=True)
    running = sync(domain, t0 + timedelta(seconds=10))

    assert running.finished == []  # serving: never finished while it runs
    phases = Counter(Workload.objects.values_list("phase", flat=True))
    assert phases == Counter({WorkloadPhase.ADMITTED: 2, WorkloadPhase.PENDING: 1})

    scale_deployment(kubectl, "web", 1)
    kube_api.run_deployment_controller()
    scaled = sync(domain, t0 + timedelta(seconds=20))

    # The ReplicaSet deletes the gated pod first, then a running one; their workloads go.
    [kept] = kube_api.objects("pods", kube_api.namespace)
    assert kept["metadata"]["name"] in ungated
    assert sorted(scaled.removed) == sorted(
        key(kube_api, name) for name in [*ungated, *gated] if name != kept["metadata"]["name"])
    [remaining] = Workload.objects.all()
    assert (remaining.job.name, remaining.phase) == (
        kept["metadata"]["name"], WorkloadPhase.ADMITTED)

    scale_deployment(kubectl, "web", 2)
    kube_api.run_deployment_controller()
    sync(domain, t0 + timedelta(seconds=30))
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=30))
    again = sync(domain, t0 + timedelta(seconds=31))

    # The quota the removed pods held is free again: the new pod is admitted.
    assert len(again.started) == 1
    assert pods_by_gate(kube_api)[1] == []
    assert Counter(Workload.objects.values_list("phase", flat=True)) == Counter(
        {WorkloadPhase.ADMITTED: 2})


@pytest.mark.usefixtures("with_pods", "with_serving")
def test_the_pods_of_a_job_are_left_to_it_even_when_they_name_a_queue(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    queued = {jobframework.QUEUE_NAME_LABEL: "user-queue"}
    kubectl.create_job("managed", labels=queued)
    # Not queued: kueueweb leaves it, and its pods, to the cluster (a copy of its own is
    # never in the adoption watch either, so a job kind's pods are never adopted).
    kubectl.create_job("unmanaged", suspend=False)
    for name in ("managed", "unmanaged"):
        kubectl.batch.patch_namespaced_job(name, kube_api.namespace, {"spec": {"template": {
            "metadata": {"labels": queued}}}})
    sync(user_queue_domain, t0)
    admission.run_admission_cycle(user_queue_domain.pk, now=t0)
    sync(user_queue_domain, t0 + timedelta(seconds=1))
    kube_api.run_job_controller()

    later = sync(user_queue_domain, t0 + timedelta(seconds=2))

    job_pods = kube_api.objects("pods", kube_api.namespace)
    assert len(job_pods) == 4
    assert all(p["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] == "user-queue"
               for p in job_pods)
    assert later.adopted == []
    assert list(Job.objects.values_list("kind", "name")) == [("Job", "managed")]


@pytest.mark.usefixtures("with_serving")
def test_a_statefulsets_pods_are_stamped_as_one_group_and_admitted_together(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    created = k8s.AppsV1Api(kubectl.api).create_namespaced_stateful_set(kube_api.namespace, {
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
        "spec": {"replicas": 2, "serviceName": "db", "podManagementPolicy": "Parallel",
                 "selector": {"matchLabels": {"app": "web"}},
                 "template": serving_template("statefulset")}})
    kube_api.run_statefulset_controller()

    stamped = sync(user_queue_domain, t0)
    adopting = sync(user_queue_domain, t0 + timedelta(seconds=1))

    group = StatefulSet().workload_name(kubectl.api.sanitize_for_serialization(created))
    for name in ("db-0", "db-1"):
        pod = kube_api.get("pods", kube_api.namespace, name)
        assert pod["metadata"]["labels"][pods.GROUP_NAME_LABEL] == group
        assert pod["metadata"]["labels"][jobframework.QUEUE_NAME_LABEL] == "user-queue"
        assert pod["metadata"]["annotations"][pods.GROUP_TOTAL_COUNT_ANNOTATION] == "2"
    assert stamped.adopted == []
    assert sorted(adopting.adopted) == [key(kube_api, "db-0"), key(kube_api, "db-1")]
    [wl] = Workload.objects.all()
    assert (wl.name, sum(ps["count"] for ps in wl.pod_sets)) == (group, 2)

    admission.run_admission_cycle(user_queue_domain.pk, now=t0 + timedelta(seconds=1))
    started = sync(user_queue_domain, t0 + timedelta(seconds=2))

    assert started.started
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.ADMITTED
    assert pods_by_gate(kube_api) == (["db-0", "db-1"], [])
    for name in ("db-0", "db-1"):
        assert kube_api.get("pods", kube_api.namespace, name)["spec"]["nodeSelector"] == SPOT
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2  # no copies


@pytest.mark.usefixtures("with_serving")
def test_an_evicted_deployment_pod_is_deleted_and_its_replacement_waits_gated(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    create_deployment(kubectl, "web", 1)
    kube_api.run_deployment_controller()
    sync(user_queue_domain, t0)
    [first] = kube_api.objects("pods", kube_api.namespace)
    wl = admit(user_queue_domain, adopted(user_queue_domain, first["metadata"]["name"], "Pod"),
               t0)
    sync(user_queue_domain, t0 + timedelta(seconds=1))
    assert pods_by_gate(kube_api) == ([first["metadata"]["name"]], [])

    services.evict_workload(wl, now=t0 + timedelta(seconds=2))
    stopping = sync(user_queue_domain, t0 + timedelta(seconds=3))
    kube_api.run_deployment_controller()
    replaced = sync(user_queue_domain, t0 + timedelta(seconds=4))

    # Kueue deletes the pod to stop it; its ReplicaSet's replacement waits for quota.
    assert stopping.deleted == [key(kube_api, first["metadata"]["name"])]
    [second] = kube_api.objects("pods", kube_api.namespace)
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert pods_by_gate(kube_api) == ([], [second["metadata"]["name"]])
    assert replaced.adopted == [key(kube_api, second["metadata"]["name"])]
    assert not Workload.objects.filter(pk=wl.pk).exists()
    [pending] = Workload.objects.all()
    assert (pending.job.name, pending.phase) == (second["metadata"]["name"],
                                                 WorkloadPhase.PENDING)


def test_an_adopted_job_whose_queue_label_is_removed_is_left_as_it_is(
    kube_api: Any, kubectl: Kubectl, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kubectl.create_job("pi", labels={jobframework.QUEUE_NAME_LABEL: "user-queue"})
    sync(user_queue_domain, t0)

    # The watch of queued objects now reports it deleted: it left the selection.
    kubectl.batch.patch_namespaced_job("pi", kube_api.namespace, {"metadata": {"labels": {
        jobframework.QUEUE_NAME_LABEL: None}}})
    outcome = sync(user_queue_domain, t0 + timedelta(seconds=1))

    assert (outcome.removed, outcome.deleted) == ([], [])
    assert adopted(user_queue_domain, "pi").suspend
    assert kube_api.get("jobs", kube_api.namespace, "pi") is not None
