"""A kubectl user's story on a Kubernetes cluster, end to end: kueueweb's webhooks installed
with ``manage.py webhooks install`` (the test API server calls kueueweb over HTTPS); a
batch/v1 Job, a JobSet and a pod group of two created with the official ``kubernetes``
client naming only a queue, as ``kubectl apply`` would; the webhooks suspend or gate them,
the pass adopts them, admission admits them, the pass runs them in place with the flavor's
node selector, the test server's controllers run them to completion, their workloads
finish, ``kubectl delete`` removes the local jobs, and ``manage.py webhooks remove`` takes
both configurations away."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from multicluster.admission import MUTATING_CONFIGURATION, VALIDATING_CONFIGURATION
from multicluster.kube.manifests import ADOPTED_ANNOTATION
from multicluster.kube.sync import KubeSyncOutcome, sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.choices import JobSource, WorkloadPhase
from scheduling.jobs import pod as pods
from scheduling.models import ClusterQueue, Job, LocalQueue, ResourceFlavor, Workload
from scheduling.scheduler import admission
from tests.fixtures.kube_api import FakeKubeAPI
from tests.fixtures.tls import HttpsServer

pytestmark = pytest.mark.slow

QUEUE = jobframework.QUEUE_NAME_LABEL
SPOT = {"instance-type": "spot"}
JOBSETS = ("jobset.x-k8s.io", "v1alpha2")


@pytest.fixture
def domain(https_kueueweb: HttpsServer, kube_api: FakeKubeAPI, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue], settings: Any) -> Cluster:
    """The cluster's domain: ``user-queue`` on a spot flavor with a node label and room for
    everything at once; Jobs, JobSets and Pods enabled, their webhooks installed."""
    kube_api.require_fake()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        "batch/job", "jobset.x-k8s.io/jobset", "pod"]}
    kube_api.create_namespace(kube_api.namespace)
    kube_api.install_jobset_crd()
    cq = make_queue("cq", {"cpu": "10"}, flavor="spot", namespace=kube_api.namespace,
                    cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(node_labels=SPOT)
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="user-queue", cluster_queue=cq)
    call_command("webhooks", "install", "--cluster", kube_cluster.name,
                 "--url", https_kueueweb.url,
                 "--ca-bundle", str(https_kueueweb.certificate.ca_file))
    return kube_cluster


def _container(cpu: str = "1") -> dict[str, Any]:
    return {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}


def _pod_templates(kube_api: FakeKubeAPI) -> dict[str, list[dict[str, Any]]]:
    """Each object's pod specs as the cluster has them now, by ``Kind/name``."""
    ns = kube_api.namespace
    job = kube_api.get("jobs", ns, "pi")
    jobset = kube_api.get("jobsets", ns, "js")
    return {
        "Job/pi": [job["spec"]["template"]["spec"]],
        "JobSet/js": [rj["template"]["spec"]["template"]["spec"]
                      for rj in jobset["spec"]["replicatedJobs"]],
        **{f"Pod/{name}": [kube_api.get("pods", ns, name)["spec"]]
           for name in ("leader", "worker")},
    }


def test_objects_applied_with_kubectl_are_queued_run_in_place_and_cleaned_up(
        domain: Cluster, kube_api: FakeKubeAPI, kubectl_api: Any) -> None:
    from kubernetes import client as k8s  # noqa: TID251 - the user's client

    ns = kube_api.namespace
    batch, core = k8s.BatchV1Api(kubectl_api), k8s.CoreV1Api(kubectl_api)
    custom = k8s.CustomObjectsApi(kubectl_api)
    t0 = timezone.now().replace(microsecond=0)

    def sync(seconds: int) -> KubeSyncOutcome:
        return sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=seconds))

    # 1. Applied with only a queue label: no suspend, no scheduling gate.
    batch.create_namespaced_job(ns, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "pi", "labels": {QUEUE: "user-queue"}},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
            "restartPolicy": "Never", "containers": [_container()]}}}})
    custom.create_namespaced_custom_object(*JOBSETS, ns, "jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "js", "labels": {QUEUE: "user-queue"}},
        "spec": {"replicatedJobs": [
            {"name": rj, "replicas": 1, "template": {"spec": {
                "parallelism": 1, "completions": 1, "template": {"spec": {
                    "restartPolicy": "Never", "containers": [_container()]}}}}}
            for rj in ("driver", "workers")]}})
    for name in ("leader", "worker"):
        core.create_namespaced_pod(ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {QUEUE: "user-queue",
                                                  pods.GROUP_NAME_LABEL: "grp"},
                         "annotations": {pods.GROUP_TOTAL_COUNT_ANNOTATION: "2"}},
            "spec": {"restartPolicy": "Never", "containers": [_container()]}})

    # 2. The webhooks suspended the Job and the JobSet and gated the Pods.
    assert kube_api.get("jobs", ns, "pi")["spec"]["suspend"] is True
    assert kube_api.get("jobsets", ns, "js")["spec"]["suspend"] is True
    for name in ("leader", "worker"):
        gated = kube_api.get("pods", ns, name)
        assert gated["spec"]["schedulingGates"] == [{"name": pods.SCHEDULING_GATE}]
        assert gated["metadata"]["finalizers"] == [pods.FINALIZER]
    assert {call[0] for call in kube_api.admission_calls} == {
        "mjob.kb.io", "vjob.kb.io", "mjobset.kb.io", "vjobset.kb.io", "mpod.kb.io",
        "vpod.kb.io"}
    assert all(call[2] == "allowed" for call in kube_api.admission_calls)
    before = _pod_templates(kube_api)
    assert all("nodeSelector" not in spec for specs in before.values() for spec in specs)

    # 3. The pass adopts them: a local job each (the group's members as one Workload).
    adoption = sync(0)

    assert sorted(adoption.adopted) == sorted(f"{ns}/{name}" for name in (
        "pi", "js", "leader", "worker"))
    assert adoption.refused == []
    jobs = {f"{job.kind}/{job.name}": job for job in Job.objects.filter(cluster=domain)}
    assert sorted(jobs) == ["Job/pi", "JobSet/js", "Pod/leader", "Pod/worker"]
    assert {job.source for job in jobs.values()} == {JobSource.CLUSTER}
    assert all(job.suspend for job in jobs.values())
    assert sorted((wl.queue_name, wl.phase) for wl in Workload.objects.all()) == [
        ("user-queue", WorkloadPhase.PENDING)] * 3
    assert Workload.objects.get(job=jobs["Pod/leader"]).name == "grp"
    assert kube_api.get("jobs", ns, "pi")["metadata"]["annotations"][ADOPTED_ANNOTATION] == "true"

    # 4. Admission admits all three on the spot flavor.
    admission.run_admission_cycle(domain.pk, now=t0)
    assert sorted(wl.phase for wl in Workload.objects.all()) == [WorkloadPhase.ADMITTED] * 3

    # 5. The pass runs each in place: unsuspended or ungated, the flavor's node selector in
    # every pod template, no copy created beside it.
    started = sync(1)

    assert started.started
    assert kube_api.get("jobs", ns, "pi")["spec"]["suspend"] is False
    assert kube_api.get("jobsets", ns, "js")["spec"]["suspend"] is False
    for name in ("leader", "worker"):
        assert kube_api.get("pods", ns, name)["spec"].get("schedulingGates", []) == []
    placed = _pod_templates(kube_api)
    assert {key: [spec.get("nodeSelector") for spec in specs]
            for key, specs in placed.items()} == {
        "Job/pi": [SPOT], "JobSet/js": [SPOT, SPOT], "Pod/leader": [SPOT],
        "Pod/worker": [SPOT]}
    # kubectl's creates alone: kueueweb created nothing on the cluster.
    assert len(kube_api.requests_to("POST", f"/apis/batch/v1/namespaces/{ns}/jobs")) == 1
    assert len(kube_api.requests_to("POST", f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")) == 1
    assert len(kube_api.requests_to("POST", f"/api/v1/namespaces/{ns}/pods")) == 2

    # 6. The cluster's controllers run them; they complete; their workloads finish.
    kube_api.run_job_controller()
    kube_api.run_jobset_controller()
    for name in ("leader", "worker"):
        kube_api.set_pod(ns, name, phase="Running", ready=True)
    sync(10)
    kube_api.complete_job(ns, "pi")
    kube_api.complete_jobset(ns, "js")
    for name in ("leader", "worker"):
        kube_api.set_pod(ns, name, phase="Succeeded", ready=False)
    finished = sync(60)

    # A pod group finishes through the member its Workload is linked to.
    assert sorted(finished.finished) == sorted(started.started) == [
        f"{ns}/js", f"{ns}/leader", f"{ns}/pi"]
    assert sorted(wl.phase for wl in Workload.objects.all()) == [WorkloadPhase.FINISHED] * 3
    # Kueue's finalizer comes off the Pods once their Workload finished.
    for name in ("leader", "worker"):
        assert "finalizers" not in kube_api.get("pods", ns, name)["metadata"]
    # Finished objects are the user's: they stay on the cluster.
    assert kube_api.get("jobs", ns, "pi") is not None
    assert kube_api.get("jobsets", ns, "js") is not None

    # 7. kubectl delete: the local jobs and their workloads go with the objects.
    batch.delete_namespaced_job("pi", ns, propagation_policy="Background")
    custom.delete_namespaced_custom_object(*JOBSETS, ns, "jobsets", "js")
    for name in ("leader", "worker"):
        core.delete_namespaced_pod(name, ns)
    gone = sync(70)

    assert sorted(gone.removed) == sorted(f"{ns}/{name}" for name in (
        "pi", "js", "leader", "worker"))
    assert not Job.objects.filter(cluster=domain).exists()
    assert not Workload.objects.exists()

    # 8. manage.py webhooks remove: both configurations are gone, and nothing is called.
    call_command("webhooks", "remove", "--cluster", domain.name)
    assert kube_api.get("mutatingwebhookconfigurations", "", MUTATING_CONFIGURATION) is None
    assert kube_api.get("validatingwebhookconfigurations", "",
                        VALIDATING_CONFIGURATION) is None
    calls = len(kube_api.admission_calls)
    after = batch.create_namespaced_job(ns, {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "later", "labels": {QUEUE: "user-queue"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [_container()]}}}})
    assert after.spec.suspend is False
    assert len(kube_api.admission_calls) == calls
