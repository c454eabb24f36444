"""The ProvisioningRequest admission check on a simulated cluster: the check is Active once
its config exists, a workload with quota reserved gets a request in Kueue's shape, the
simulated autoscaler adds the nodes after its delay and the workload is admitted and runs
on them; a request that cannot be provisioned is retried with the config's back-off, then
rejected and the workload deactivated."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import reverse
from rest_framework.test import APIClient

from multicluster.core import provisioning as core
from multicluster.models import AdmissionCheck, Cluster, Node, Pod, ProvisioningRequest
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import ClusterQueue, Event, Workload
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

DELAY = 30


@pytest.fixture(autouse=True)
def provisioning_delay() -> Any:
    with override_settings(KUEUEWEB={**settings.KUEUEWEB,
                                     "SIMULATION_PROVISIONING_DELAY_SECONDS": DELAY,
                                     "SIMULATION_PROVISIONING_MAX_NODES": 3}):
        yield


def provisioning_setup(manager: Cluster, make_queue: Callable[..., ClusterQueue], *,
                       provisioning_class: str, retry: dict[str, int] | None = None,
                       on_flavors: list[str] | None = None) -> ClusterQueue:
    """A queue requiring the check ``prov`` of config ``prov-config``; a cluster with no
    nodes, so that nothing runs without the capacity the request adds."""
    Node.objects.filter(cluster=manager).delete()
    cq = make_queue("cq", {"cpu": "10"}, flavor="default")
    spec: dict[str, Any] = {"provisioningClassName": provisioning_class,
                            "parameters": {"zone": "a"}}
    if retry is not None:
        spec["retryStrategy"] = retry
    check: dict[str, Any] = {"name": "prov"}
    if on_flavors is not None:
        check["onFlavors"] = on_flavors
    apply_manifests([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig",
         "metadata": {"name": "prov-config"}, "spec": spec},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
         "metadata": {"name": "prov"},
         "spec": {"controllerName": core.CONTROLLER_NAME,
                  "parameters": {"apiGroup": "kueue.x-k8s.io",
                                 "kind": "ProvisioningRequestConfig", "name": "prov-config"}}},
    ], cluster=manager)
    cq.admission_checks = [check]
    cq.save()
    return cq


def check_state(wl: Workload, name: str = "prov") -> dict[str, Any]:
    wl.refresh_from_db()
    return next(s for s in wl.admission_check_states if s["name"] == name)


def test_the_check_admits_only_once_the_provisioned_nodes_arrive_and_the_job_runs_on_them(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime, viewer_ui: Client, viewer_client: APIClient,
) -> None:
    provisioning_setup(manager, make_queue,
                       provisioning_class="best-effort-atomic-scale-up.autoscaling.x-k8s.io")
    job = services.submit_job(job_manifest("train", "lq-cq", cpu="2", parallelism=2),
                              namespace="ns")
    reconcilers.step(t0)

    wl = Workload.objects.get(job=job)
    check = AdmissionCheck.objects.get(cluster=manager, name="prov")
    active = cond.find(check.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"], active["message"]) == (
        "True", "Active", "The admission check is active")
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    request = ProvisioningRequest.objects.get(cluster=manager)
    name = f"{wl.name}-prov-1"
    template = f"ppt-{name}-main"
    assert (request.namespace, request.name, request.workload_id) == ("ns", name, wl.pk)
    assert request.labels == {"kueue.x-k8s.io/managed": "true"}
    assert request.spec == {
        "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "parameters": {"zone": "a"},
        "podSets": [{"podTemplateRef": {"name": template}, "count": 2}],
    }
    assert request.pod_templates[template]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "2"}}
    assert (check_state(wl)["state"], check_state(wl)["message"]) == (
        "Pending", "")
    assert not Pod.objects.filter(job=job).exists()

    # Before the autoscaler's delay: accepted, nothing added, still waiting.
    reconcilers.step(t0 + timedelta(seconds=DELAY - 5))
    assert Node.objects.filter(cluster=manager).count() == 0
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED

    reconcilers.step(t0 + timedelta(seconds=DELAY))
    nodes = list(Node.objects.filter(cluster=manager).order_by("name"))
    assert [(n.name, n.capacity) for n in nodes] == [
        (f"{name}-0", {"cpu": "2", "pods": "110"}), (f"{name}-1", {"cpu": "2", "pods": "110"})]
    state = check_state(wl)
    assert (state["state"], state["message"]) == (
        "Ready", "Capacity is provisioned: 2 node(s) added")
    assert state["podSetUpdates"] == [{"name": "main", "annotations": {
        "autoscaling.x-k8s.io/consume-provisioning-request": name,
        "autoscaling.x-k8s.io/provisioning-class-name":
            "best-effort-atomic-scale-up.autoscaling.x-k8s.io"}}]
    assert wl.phase == WorkloadPhase.ADMITTED
    assert sorted(p.node_name for p in Pod.objects.filter(job=job)) == [f"{name}-0", f"{name}-1"]
    # The workload page and the API show the check as Kueue's Workload status does.
    page = viewer_ui.get(reverse("ui-workload", kwargs={
        "cluster": manager.name, "namespace": "ns", "name": wl.name})).content.decode()
    assert "prov: Ready — Capacity is provisioned: 2 node(s) added" in page
    assert f"autoscaling.x-k8s.io/consume-provisioning-request={name}" in page
    assert f"{name}: Provisioned=True" in page
    body = viewer_client.get(f"/api/v1/namespaces/ns/workloads/{wl.name}/").json()
    assert body["status"]["admissionChecks"] == [state]
    reasons = list(Event.objects.filter(workload=wl).values_list("reason", flat=True))
    assert "ProvisioningRequestCreated" in reasons
    assert "AdmissionCheckUpdated" in reasons


def test_a_request_that_cannot_be_provisioned_is_retried_with_backoff_then_rejected(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    provisioning_setup(manager, make_queue, provisioning_class="unknown.example.com",
                       retry={"backoffLimitCount": 1, "backoffBaseSeconds": 100})
    job = services.submit_job(job_manifest("train", "lq-cq", cpu="2"), namespace="ns")
    reconcilers.step(t0)

    # Attempt 1 failed: Retry, evicted and released, waiting for the 100 s back-off.
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.PENDING
    assert wl.active
    state = check_state(wl)
    assert (state["state"], state["retryCount"], state["requeueAfterSeconds"]) == (
        "Pending", 1, 100)
    assert state["message"] == "Reset to Pending after eviction. Previously: Retry"
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["reason"], evicted["message"]) == (
        "AdmissionCheck", "Evicted due to AdmissionCheck(s) in Retry state: prov")
    assert wl.requeue_at is not None
    assert wl.requeue_at >= t0 + timedelta(seconds=100)
    assert not ProvisioningRequest.objects.exists()  # the evicted workload's request is gone

    reconcilers.step(t0 + timedelta(seconds=50))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING  # still backing off

    # Attempt 2 fails too: past backoffLimitCount, Rejected, the workload is deactivated.
    reconcilers.step(t0 + timedelta(seconds=101))
    wl.refresh_from_db()
    assert not wl.active
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["reason"], evicted["message"]) == (
        "DeactivatedDueToAdmissionCheck", "AdmissionCheck(s) in Rejected state: prov")
    created = list(Event.objects.filter(workload=wl, reason="ProvisioningRequestCreated")
                   .order_by("created_at", "id").values_list("message", flat=True))
    assert created == [f'Created ProvisioningRequest: "{wl.name}-prov-1"',
                       f'Created ProvisioningRequest: "{wl.name}-prov-2"']
    rejected = Event.objects.get(workload=wl, reason="AdmissionCheckUpdated",
                                 message__contains="to Rejected")
    assert rejected.message == (
        "Admission check prov updated state from Pending to Rejected with message: the "
        'simulated cluster autoscaler does not provision class "unknown.example.com"')
    assert not Pod.objects.filter(job=job).exists()


def test_more_nodes_than_the_autoscaler_adds_fail_the_request(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    provisioning_setup(manager, make_queue,
                       provisioning_class="best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                       retry={"backoffLimitCount": 0})
    job = services.submit_job(job_manifest("wide", "lq-cq", cpu="1", parallelism=4),
                              namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=DELAY))

    wl = Workload.objects.get(job=job)
    assert not wl.active
    assert Node.objects.filter(cluster=manager).count() == 0
    assert Event.objects.filter(workload=wl, reason="AdmissionCheckUpdated").get().message == (
        "Admission check prov updated state from Pending to Rejected with message: scaling up "
        "needs 4 nodes, more than the 3 the simulated cluster autoscaler adds for a request")


def test_check_capacity_waits_for_room_and_needs_no_request_for_unmanaged_pod_sets(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    provisioning_setup(manager, make_queue,
                       provisioning_class="check-capacity.autoscaling.x-k8s.io")
    job = services.submit_job(job_manifest("fits", "lq-cq", cpu="2"), namespace="ns")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=DELAY))
    wl = Workload.objects.get(job=job)
    assert (check_state(wl)["state"], check_state(wl)["message"]) == (
        "Pending", "Capacity is not found, CA will try to find it later.")

    Node.objects.create(cluster=manager, name="n1", capacity={"cpu": "4"})
    reconcilers.step(t0 + timedelta(seconds=DELAY + 1))
    assert (check_state(wl)["state"], check_state(wl)["message"]) == (
        "Ready", "Capacity is found in the cluster")
    assert wl.phase == WorkloadPhase.ADMITTED

    # managedResources: a job asking for none of them needs no request at all.
    from multicluster.models import ProvisioningRequestConfig

    ProvisioningRequestConfig.objects.filter(name="prov-config").update(
        managed_resources=["nvidia.com/gpu"])
    other = services.submit_job(job_manifest("cpu-only", "lq-cq", cpu="1"), namespace="ns")
    reconcilers.step(t0 + timedelta(seconds=DELAY + 2))
    cpu_only = Workload.objects.get(job=other)
    assert (check_state(cpu_only)["state"], check_state(cpu_only)["message"]) == (
        "Ready", core.NO_REQUEST_NEEDED)
    assert cpu_only.phase == WorkloadPhase.ADMITTED
    assert not ProvisioningRequest.objects.filter(workload=cpu_only).exists()


def test_the_check_is_inactive_without_its_config(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    provisioning_setup(manager, make_queue, provisioning_class="check-capacity.autoscaling.x-k8s.io")
    from multicluster.models import ProvisioningRequestConfig

    ProvisioningRequestConfig.objects.all().delete()
    job = services.submit_job(job_manifest("j", "lq-cq"), namespace="ns")
    reconcilers.step(t0)

    active = cond.find(AdmissionCheck.objects.get(name="prov").conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"], active["message"]) == (
        "False", "BadParametersRef",
        'provisioningrequestconfigs.kueue.x-k8s.io "prov-config" not found')
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.PENDING  # its queue is inactive


def test_a_check_on_flavors_applies_only_to_workloads_assigned_those_flavors(
    reconcilers: Reconcilers, manager: Cluster, t0: datetime,
) -> None:
    Node.objects.filter(cluster=manager).update(capacity={"cpu": "16"})
    flavor_quota = [{"name": "reservation", "resources": [{"name": "cpu", "nominalQuota": 2}]},
                    {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": 10}]}]
    apply_manifests([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "reservation"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "on-demand"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "cq"},
         "spec": {"namespaceSelector": {},
                  "resourceGroups": [{"coveredResources": ["cpu"], "flavors": flavor_quota}],
                  "admissionChecksStrategy": {"admissionChecks": [
                      {"name": "prov", "onFlavors": ["on-demand"]}]}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": "lq", "namespace": "ns"}, "spec": {"clusterQueue": "cq"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig",
         "metadata": {"name": "prov-config"},
         "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
         "metadata": {"name": "prov"},
         "spec": {"controllerName": core.CONTROLLER_NAME,
                  "parameters": {"apiGroup": "kueue.x-k8s.io",
                                 "kind": "ProvisioningRequestConfig", "name": "prov-config"}}},
    ], cluster=manager)

    first = services.submit_job(job_manifest("first", "lq", cpu="2", run_seconds=1000),
                                namespace="ns")
    reconcilers.step(t0)
    on_reservation = Workload.objects.get(job=first)
    assert on_reservation.admission["podSetAssignments"][0]["flavors"] == {"cpu": "reservation"}
    assert on_reservation.admission_check_states == []
    assert on_reservation.phase == WorkloadPhase.ADMITTED
    assert not ProvisioningRequest.objects.exists()

    # The reservation flavor is full: the next one gets on-demand, and with it the check.
    second = services.submit_job(job_manifest("second", "lq", cpu="2"), namespace="ns")
    reconcilers.step(t0 + timedelta(seconds=1))
    on_demand = Workload.objects.get(job=second)
    assert on_demand.admission["podSetAssignments"][0]["flavors"] == {"cpu": "on-demand"}
    assert [s["name"] for s in on_demand.admission_check_states] == ["prov"]
    assert on_demand.phase == WorkloadPhase.QUOTA_RESERVED
    assert list(ProvisioningRequest.objects.values_list("name", flat=True)) == [
        f"{on_demand.name}-prov-1"]

    reconcilers.step(t0 + timedelta(seconds=DELAY + 1))
    on_demand.refresh_from_db()
    assert on_demand.phase == WorkloadPhase.ADMITTED


def test_a_reserved_workload_follows_its_queues_checks_as_they_change(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    cq = provisioning_setup(manager, make_queue,
                            provisioning_class="check-capacity.autoscaling.x-k8s.io")
    job = services.submit_job(job_manifest("j", "lq-cq"), namespace="ns")
    reconcilers.step(t0)
    wl = Workload.objects.get(job=job)
    assert [(s["name"], s["state"]) for s in wl.admission_check_states] == [("prov", "Pending")]

    # A manual check joins the queue: the workload waits for it too.
    apply_manifests([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
                      "metadata": {"name": "approval"},
                      "spec": {"controllerName": "kueueweb.io/manual"}}], cluster=manager)
    cq.admission_checks = [{"name": "approval"}, {"name": "prov"}]
    cq.save()
    reconcilers.step(t0 + timedelta(seconds=1))
    wl.refresh_from_db()
    assert [(s["name"], s["state"]) for s in wl.admission_check_states] == [
        ("approval", "Pending"), ("prov", "Pending")]

    # Both go: the workload has nothing left to wait for and is admitted.
    cq.admission_checks = []
    cq.save()
    reconcilers.step(t0 + timedelta(seconds=2))
    wl.refresh_from_db()
    assert wl.admission_check_states == []
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not ProvisioningRequest.objects.exists()


def test_a_request_changed_by_hand_is_not_taken_and_the_pass_goes_on(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    provisioning_setup(manager, make_queue,
                       provisioning_class="check-capacity.autoscaling.x-k8s.io")
    job = services.submit_job(job_manifest("j", "lq-cq"), namespace="ns")
    reconcilers.step(t0)
    request = ProvisioningRequest.objects.get()
    request.spec = {**request.spec, "podSets": [{"podTemplateRef": {"name": "someone-elses"},
                                                 "count": 1}]}
    request.status = {"conditions": [{"type": "Provisioned", "status": "True",
                                      "message": "done"}]}
    request.save()

    reconcilers.step(t0 + timedelta(seconds=1))

    wl = Workload.objects.get(job=job)
    assert (wl.phase, check_state(wl)["state"]) == (WorkloadPhase.QUOTA_RESERVED, "Pending")
