"""MultiKueue external frameworks (Kueue's ``multiKueue.externalFrameworks``): an object of a
kind kueueweb does not know, listed as ``Kind.version.group``, submitted to the hub with its
Workload created through the API, dispatched to a simulated or a Kubernetes worker through the
generic adapter, its status copied back."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.kube import sync
from multicluster.models import Cluster, Pod
from scheduling import services
from scheduling.apps import configure_external_frameworks
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs.external import (
    ExternalFramework,
    finished_of,
    guess_plural,
    parse_external_framework,
    report_of,
)
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle
from tests.multicluster.test_multikueue_kube import connect_worker

pytestmark = pytest.mark.django_db

WIDGET = "Widget.v1.example.com"


def widget(name: str = "w1", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {"size": 2, **spec}}


def workload_for(job: dict[str, Any], queue: str, *, cpu: str = "1") -> dict[str, Any]:
    """The Workload an outside controller would create for the object: its owner reference
    names the object, its pod sets are the controller's to say."""
    metadata = job["metadata"]
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"widget-{metadata['name']}", "ownerReferences": [{
            "apiVersion": job["apiVersion"], "kind": job["kind"], "name": metadata["name"],
            "uid": metadata["uid"], "controller": True}]},
        "spec": {"queueName": queue, "podSets": [{
            "name": "main", "count": 2, "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox",
                                "resources": {"requests": {"cpu": cpu}}}]}}}]},
    }


@pytest.fixture
def external(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MULTIKUEUE_EXTERNAL_FRAMEWORKS": [WIDGET]}


def submit(client: APIClient, namespace: str, queue: str) -> tuple[dict[str, Any], Workload]:
    response = client.post(f"/api/v1/namespaces/{namespace}/jobs", widget(), format="json")
    assert response.status_code == 201, response.content
    job = response.json()
    assert job["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
    # No Workload yet: kueueweb cannot tell an unknown kind's pods.
    assert not Workload.objects.filter(job__name="w1").exists()
    response = client.post(f"/api/v1/namespaces/{namespace}/workloads",
                           workload_for(job, queue), format="json")
    assert response.status_code == 201, response.content
    owner = response.json()["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Widget", "w1", job["metadata"]["uid"])
    return job, Workload.objects.get(name="widget-w1", cluster__role=ClusterRole.MANAGER)


# --- the setting ------------------------------------------------------------------------


def test_the_setting_names_each_bad_entry() -> None:
    with pytest.raises(ImproperlyConfigured) as raised:
        configure_external_frameworks({"MULTIKUEUE_EXTERNAL_FRAMEWORKS": [
            WIDGET, "Widget.v1", "Job.v1.batch", "gadget.V1.example.com"]})
    message = str(raised.value)
    assert message.startswith("KUEUEWEB['MULTIKUEUE_EXTERNAL_FRAMEWORKS']: ")
    assert "'Widget.v1' is not Kind.version.group" in message
    assert "'Job.v1.batch' is the built-in kind batch/job" in message
    assert "version 'V1' must be a DNS label" in message
    assert WIDGET not in [i.framework_name for i in registry.registered()]  # nothing changed

    with pytest.raises(ImproperlyConfigured, match="listed twice"):
        configure_external_frameworks({"MULTIKUEUE_EXTERNAL_FRAMEWORKS": [WIDGET, WIDGET]})
    with pytest.raises(ImproperlyConfigured, match="must be a list of Kind.version.group"):
        configure_external_frameworks({"MULTIKUEUE_EXTERNAL_FRAMEWORKS": WIDGET})


def test_listing_a_kind_registers_it_and_unlisting_drops_it(settings: Any) -> None:
    gvk, problem = parse_external_framework("Policy.v1beta1.policy.example.io")
    assert problem is None
    assert gvk is not None
    assert (gvk.group, gvk.version, gvk.kind) == ("policy.example.io", "v1beta1", "Policy")
    assert guess_plural("Policy") == "policies"
    assert guess_plural("Class") == "classes"
    assert registry.by_kind("example.com/v1", "Widget") is None
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MULTIKUEUE_EXTERNAL_FRAMEWORKS": [WIDGET]}
    integration = registry.by_kind("example.com/v1", "Widget")
    assert isinstance(integration, ExternalFramework)
    assert (integration.framework_name, integration.plural) == (WIDGET, "widgets")
    assert WIDGET in registry.enabled_names(settings.KUEUEWEB)
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MULTIKUEUE_EXTERNAL_FRAMEWORKS": []}
    assert registry.by_kind("example.com/v1", "Widget") is None


# --- submission -------------------------------------------------------------------------


def test_an_unlisted_kind_is_refused_naming_kind(manager: Cluster,
                                                 admin_client_api: APIClient) -> None:
    response = admin_client_api.post("/api/v1/namespaces/default/jobs", widget(), format="json")
    assert response.status_code == 400
    (message,) = response.json()["kind"]
    assert message.startswith("example.com/v1 'Widget' is not an enabled job kind")
    assert not Job.objects.exists()


def test_an_object_managed_by_another_controller_is_refused(
        manager: Cluster, admin_client_api: APIClient, external: None) -> None:
    response = admin_client_api.post("/api/v1/namespaces/default/jobs",
                                     widget(managedBy="example.com/widget-controller"),
                                     format="json")
    assert response.status_code == 400
    assert response.json()["spec.managedBy"] == [
        'must be "kueue.x-k8s.io/multikueue" for the external framework '
        "Widget.v1.example.com, not 'example.com/widget-controller'"]
    assert not Job.objects.exists()


def test_a_workload_owner_must_be_a_stored_external_object(
        manager: Cluster, admin_client_api: APIClient, external: None) -> None:
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    job = admin_client_api.post("/api/v1/namespaces/research/jobs", widget(),
                                format="json").json()
    url = "/api/v1/namespaces/research/workloads"

    def refused(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        body = workload_for(job, "multikueue-queue")
        change(body["metadata"]["ownerReferences"][0])
        before = Workload.objects.count()
        response = admin_client_api.post(url, body, format="json")
        assert response.status_code == 400, response.content
        assert Workload.objects.count() == before
        result: dict[str, Any] = response.json()
        return result

    path = "metadata.ownerReferences[0]"
    message = refused(lambda ref: ref.update(apiVersion="batch/v1", kind="Job"))[f"{path}.kind"][0]
    assert message.startswith("batch/v1 'Job' is not a MultiKueue external framework")
    assert refused(lambda ref: ref.update(name="w2"))[f"{path}.name"] == [
        "widgets.example.com \"w2\" not found in namespace 'research'"]
    assert f"{path}.uid" in refused(lambda ref: ref.update(uid="other"))
    assert refused(lambda ref: ref.pop("kind"))[f"{path}.kind"] == ["is required"]

    assert admin_client_api.post(url, workload_for(job, "multikueue-queue"),
                                 format="json").status_code == 201
    again = workload_for(job, "multikueue-queue")
    again["metadata"]["name"] = "another"
    response = admin_client_api.post(url, again, format="json")
    assert response.status_code == 400
    assert response.json()[path] == ["Widget 'w1' already has the Workload 'widget-w1'"]


# --- a simulated worker -----------------------------------------------------------------


def step_simulated(now: datetime) -> None:
    from multicluster.simulated import runner

    hub = Cluster.objects.manager_id()
    assert hub is not None
    for _ in range(4):
        for cluster_id in Cluster.objects.order_by("pk").values_list("pk", flat=True):
            lifecycle.run_lifecycle(cluster_id, now=now, rng=random.Random(0))
            runner.sync_cluster(cluster_id, now=now)
            admission.run_admission_cycle(cluster_id, now=now)
        dispatch.sync_dispatch(hub, now=now)


def test_a_listed_kind_runs_on_a_simulated_worker_and_its_status_returns(
        manager: Cluster, admin_client_api: APIClient, admin_ui: Client, external: None,
) -> None:
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    Workload.objects.all().delete()
    Job.objects.all().delete()
    Cluster.objects.filter(role=ClusterRole.WORKER).update(
        simulation={"startDelaySeconds": 1, "defaultRunSeconds": 10})
    job, hub_wl = submit(admin_client_api, "research", "multikueue-queue")
    t0 = timezone.now().replace(microsecond=0) + timedelta(seconds=1)

    step_simulated(t0)
    hub_wl.refresh_from_db()
    assert hub_wl.phase == WorkloadPhase.ADMITTED
    assert hub_wl.cluster_name.startswith("worker-")
    worker = Cluster.objects.get(name=hub_wl.cluster_name)
    remote = Job.objects.get(cluster=worker, kind="Widget")
    labels = remote.manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == "widget-w1"
    assert labels[dispatch.MULTIKUEUE_ORIGIN_LABEL] == "multikueue"
    assert remote.manifest["spec"]["size"] == 2
    assert "managedBy" not in remote.manifest["spec"]
    assert Pod.objects.filter(cluster=worker, job=remote).count() == 2
    assert not Pod.objects.filter(cluster=manager).exists()

    step_simulated(t0 + timedelta(seconds=3))
    hub_job = Job.objects.get(cluster=manager, kind="Widget")
    assert (hub_job.status["active"], hub_job.status["ready"]) == (2, 2)
    hub_wl.refresh_from_db()
    assert cond.is_true(hub_wl.conditions, "PodsReady")

    step_simulated(t0 + timedelta(seconds=20))
    hub_job.refresh_from_db()
    assert hub_job.status["succeeded"] == 2
    assert cond.find(hub_job.status["conditions"], "Complete")["status"] == "True"
    hub_wl.refresh_from_db()
    finished = cond.find(hub_wl.conditions, "Finished")
    assert finished is not None
    assert finished["reason"] == "Succeeded"
    page = admin_ui.get(f"/c/{manager.name}/namespaces/research/jobs/w1/", follow=True)
    assert page.status_code == 200
    assert b"widget-w1" in page.content
    step_simulated(t0 + timedelta(seconds=21))
    # The worker's object and workload go once the hub workload finished.
    assert not Job.objects.filter(cluster=worker).exists()
    assert not Workload.objects.filter(cluster=worker).exists()


# --- a Kubernetes worker ----------------------------------------------------------------


def kube_stepper(kube_api: Any, manager: Cluster, worker: Cluster) -> Callable[[datetime], None]:
    """One round of the hub, the Kubernetes worker and the Widget controller, which makes a
    newly created Widget run (two pods, both ready)."""
    def step(at: datetime) -> None:
        for cluster_id in (manager.pk, worker.pk):
            lifecycle.run_lifecycle(cluster_id, now=at, rng=random.Random(0))
            admission.run_admission_cycle(cluster_id, now=at)
        dispatch.sync_dispatch(manager.pk, now=at)
        sync.sync_kube_cluster(worker.pk, now=at)
        for obj in kube_api.objects("widgets", "default"):
            if not obj.get("status"):
                kube_api.set_status("widgets", "default", obj["metadata"]["name"],
                                    active=2, ready=2, conditions=[
                                        {"type": "Running", "status": "True"}])
        sync.sync_kube_cluster(worker.pk, now=at)
        dispatch.sync_dispatch(manager.pk, now=at)
    return step


def test_a_listed_kind_runs_on_a_kubernetes_worker_and_its_status_returns(
        kube_api: Any, manager: Cluster, admin_client_api: APIClient, external: None) -> None:
    kube_api.install_crd("example.com", "v1", "widgets", "Widget")
    worker = connect_worker(kube_api, manager, admin_client_api)
    job, hub_wl = submit(admin_client_api, "default", "user-queue")

    step = kube_stepper(kube_api, manager, worker)
    now = timezone.now().replace(microsecond=0)
    for second in range(4):
        step(now + timedelta(seconds=second))
    hub_wl.refresh_from_db()
    assert (hub_wl.cluster_name, hub_wl.phase) == (worker.name, WorkloadPhase.ADMITTED)
    assert cond.is_true(hub_wl.conditions, "PodsReady")
    remote = kube_api.get("widgets", "default", "w1")
    assert remote is not None
    assert remote["spec"] == {"size": 2}
    labels = remote["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/prebuilt-workload-name"] == "widget-w1"
    assert labels["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    hub_job = Job.objects.get(cluster=manager, kind="Widget")
    assert hub_job.status["conditions"] == [{"type": "Running", "status": "True"}]

    kube_api.set_status("widgets", "default", "w1", active=0, ready=0, succeeded=2,
                        conditions=[{"type": "Complete", "status": "True",
                                     "message": "the widget is built"}])
    for second in range(4, 8):
        step(now + timedelta(seconds=second))
    hub_wl.refresh_from_db()
    finished = cond.find(hub_wl.conditions, "Finished")
    assert finished is not None
    assert (finished["reason"], finished["message"]) == ("Succeeded", "the widget is built")
    hub_job.refresh_from_db()
    assert hub_job.status["succeeded"] == 2
    # Deleted on the worker once the hub workload finished.
    assert kube_api.get("widgets", "default", "w1") is None
    assert not Workload.objects.filter(cluster=worker).exists()


def test_evicting_the_hub_workload_deletes_the_object_on_the_kubernetes_worker(
        kube_api: Any, manager: Cluster, admin_client_api: APIClient, external: None) -> None:
    kube_api.install_crd("example.com", "v1", "widgets", "Widget")
    worker = connect_worker(kube_api, manager, admin_client_api)
    _, hub_wl = submit(admin_client_api, "default", "user-queue")

    step = kube_stepper(kube_api, manager, worker)
    now = timezone.now().replace(microsecond=0)
    for second in range(3):
        step(now + timedelta(seconds=second))
    assert kube_api.get("widgets", "default", "w1") is not None
    hub_wl.refresh_from_db()
    services.evict_workload(hub_wl, now=now + timedelta(seconds=3))
    step(now + timedelta(seconds=3))
    assert kube_api.get("widgets", "default", "w1") is None
    assert not Job.objects.filter(cluster=worker).exists()


def test_the_status_convention() -> None:
    def status(*conditions: tuple[str, str], **counts: int) -> dict[str, Any]:
        return {"conditions": [{"type": t, "status": s} for t, s in conditions], **counts}

    assert finished_of(status(("Running", "True"))) is None
    assert finished_of(status(("Succeeded", "True"))) == ("Succeeded", "the object completed")
    # A failure wins over a completion reported beside it.
    assert finished_of(status(("Complete", "True"), ("Failed", "True"))) == (
        "Failed", "the object failed")
    assert finished_of(status(("Complete", "False"))) is None
    report = report_of(status(("Completed", "True")), wanted=3, ready_pods=0)
    assert (report.succeeded, report.finished) == (3, ("Succeeded", "the object completed"))
    report = report_of(status(ready=2, active=2), wanted=3, ready_pods=0)
    assert (report.ready, report.active, report.all_ready) == (2, 2, False)
