"""The ProvisioningRequest admission check on a Kubernetes cluster: the request and its
PodTemplates are created in Kueue's shape through the API, followed to Provisioned (the job
then starts with the pod-set updates), a failure is retried and the stale request deleted,
and a cluster that does not serve the API leaves the check inactive."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest

from multicluster.core import provisioning as core
from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import AdmissionCheck, Cluster
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import ClusterQueue, Event, Job, ResourceFlavor, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    """The Kubernetes cluster's queue requiring the ProvisioningRequest check ``prov``."""
    kube_api.require_fake()
    cq = make_queue("cq", {"cpu": "10"}, flavor="spot", namespace=kube_api.namespace,
                    cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
        node_labels={"instance-type": "spot"}, tolerations=[SPOT])
    apply_manifests([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig",
         "metadata": {"name": "prov-config"},
         "spec": {"provisioningClassName": CLASS, "parameters": {"zone": "a"},
                  "retryStrategy": {"backoffLimitCount": 2, "backoffBaseSeconds": 0},
                  "podSetUpdates": {"nodeSelector": [
                      {"key": "cloud.example.com/pool",
                       "valueFromProvisioningClassDetail": "poolName"}]}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
         "metadata": {"name": "prov"},
         "spec": {"controllerName": core.CONTROLLER_NAME,
                  "parameters": {"apiGroup": "kueue.x-k8s.io",
                                 "kind": "ProvisioningRequestConfig", "name": "prov-config"}}},
    ], cluster=kube_cluster)
    cq.admission_checks = [{"name": "prov"}]
    cq.save()
    return kube_cluster


def reserve(kube_api: Any, domain: Cluster, now: datetime) -> Workload:
    job = services.submit_job(job_manifest("train", "lq-cq", cpu="2", parallelism=2),
                              namespace=kube_api.namespace, cluster=domain)
    sync_kube_cluster(domain.pk, now=now)  # the check becomes Active
    admission.run_admission_cycle(domain.pk, now=now)
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    return wl


def test_the_request_and_its_pod_templates_are_created_and_followed_to_provisioned(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.install_provisioning_request_crd()
    wl = reserve(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)

    ns, name = kube_api.namespace, f"{wl.name}-prov-1"
    template_name = f"ppt-{name}-main"
    request = kube_api.get("provisioningrequests", ns, name)
    assert request is not None
    assert request["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true",
                                             ORIGIN_LABEL: "multikueue"}
    assert request["metadata"]["annotations"] == {"kueueweb.io/workload": wl.name}
    assert request["spec"] == {
        "provisioningClassName": CLASS, "parameters": {"zone": "a"},
        "podSets": [{"podTemplateRef": {"name": template_name}, "count": 2}]}
    template = kube_api.get("podtemplates", ns, template_name)
    assert template is not None
    assert template["metadata"]["ownerReferences"] == [{
        "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "name": name,
        "uid": request["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    pod_spec = template["template"]["spec"]
    assert (pod_spec["nodeSelector"], pod_spec["tolerations"]) == (
        {"instance-type": "spot"}, [SPOT])
    assert pod_spec["containers"][0]["resources"] == {"requests": {"cpu": "2"}}
    assert kube_api.objects("jobs", ns) == []  # not admitted yet

    kube_api.provision_request(ns, name, details={"poolName": "pool-7"})
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    state = wl.admission_check_states[0]
    assert (state["state"], state["message"]) == (
        "Ready", "Provisioning Request was successfully provisioned.")
    annotations = {core.CONSUME_ANNOTATION: name, core.CLASS_ANNOTATION: CLASS}
    assert state["podSetUpdates"] == [{"name": "main", "annotations": annotations,
                                       "nodeSelector": {"cloud.example.com/pool": "pool-7"}}]
    remote = kube_api.get("jobs", ns, "train")
    assert remote is not None
    pod_template = remote["spec"]["template"]
    assert annotations.items() <= (pod_template["metadata"].get("annotations") or {}).items()
    assert pod_template["spec"]["nodeSelector"] == {
        "instance-type": "spot", "cloud.example.com/pool": "pool-7"}


def test_a_failed_request_is_retried_and_the_stale_one_deleted(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.install_provisioning_request_crd()
    wl = reserve(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)
    ns, first = kube_api.namespace, f"{wl.name}-prov-1"
    kube_api.fail_request(ns, first, "out of capacity")

    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))
    wl.refresh_from_db()
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert evicted["reason"] == "AdmissionCheck"
    assert wl.admission_check_states[0]["state"] == "Retry"

    # The quota goes back (the job never started) and, with no back-off, it is reserved
    # again; the evicted attempt's request went with the eviction, and attempt 2 is asked for.
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=2))
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=2))
    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=3))
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=3))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    assert wl.admission_check_states[0]["retryCount"] == 1
    assert [r["metadata"]["name"] for r in kube_api.objects("provisioningrequests", ns)] == [
        f"{wl.name}-prov-2"]
    # The first request's PodTemplate went with it (owned by it).
    assert [t["metadata"]["name"] for t in kube_api.objects("podtemplates", ns)] == [
        f"ppt-{wl.name}-prov-2-main"]
    assert Job.objects.get(pk=wl.job_id).suspend


def test_without_the_provisioning_request_api_the_check_is_inactive(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = services.submit_job(job_manifest("train", "lq-cq"), namespace=kube_api.namespace,
                              cluster=domain)
    sync_kube_cluster(domain.pk, now=t0)
    admission.run_admission_cycle(domain.pk, now=t0)

    active = cond.find(AdmissionCheck.objects.get(cluster=domain, name="prov").conditions,
                       "Active")
    assert active is not None
    assert (active["status"], active["reason"]) == ("False", "ProvisioningRequestNotServed")
    assert "install the ProvisioningRequest CustomResourceDefinition" in active["message"]
    assert Workload.objects.get(job=job).phase == WorkloadPhase.PENDING
    assert kube_api.requests_to("POST", "/apis/autoscaling.x-k8s.io") == []


def test_an_expired_booking_after_admission_is_ignored_and_revoked_capacity_deactivates(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.install_provisioning_request_crd()
    wl = reserve(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)
    ns, name = kube_api.namespace, f"{wl.name}-prov-1"
    kube_api.provision_request(ns, name)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED

    # The job runs: an expired booking changes nothing for an admitted workload.
    kube_api.expire_booking(ns, name)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=2))
    wl.refresh_from_db()
    assert (wl.phase, wl.active, wl.admission_check_states[0]["state"]) == (
        WorkloadPhase.ADMITTED, True, "Ready")

    kube_api.revoke_capacity(ns, name)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=3))
    wl.refresh_from_db()
    assert not wl.active
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["reason"], evicted["message"]) == (
        "DeactivatedDueToAdmissionCheck", "AdmissionCheck(s) in Rejected state: prov")
    assert Event.objects.get(workload=wl, reason="AdmissionCheckUpdated",
                             message__contains="to Rejected").message == (
        "Admission check prov updated state from Ready to Rejected with message: Capacity for "
        "the Provisioning Request was revoked")


def test_a_refused_request_is_reported_on_the_check_and_made_at_the_next_pass(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    kube_api.install_provisioning_request_crd()
    kube_api.forbidden.add("provisioningrequests:create")
    wl = reserve(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)

    wl.refresh_from_db()
    name = f"{wl.name}-prov-1"
    message = (f'Error creating ProvisioningRequest "{name}": 403 Forbidden: '
               'provisioningrequests is forbidden: User "system:serviceaccount:kueue-system:'
               'test" cannot create resource "provisioningrequests"')
    state = wl.admission_check_states[0]
    assert (state["state"], state["message"]) == ("Pending", message)
    event = Event.objects.get(workload=wl, reason="FailedCreate")
    assert (event.type, event.message) == ("Warning", message)
    assert kube_api.objects("provisioningrequests", kube_api.namespace) == []

    kube_api.forbidden.clear()
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=1))
    assert [r["metadata"]["name"] for r in kube_api.objects(
        "provisioningrequests", kube_api.namespace)] == [name]
    # Once the request exists, the error no longer holds: the next pass clears it.
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=2))
    wl.refresh_from_db()
    assert wl.admission_check_states[0]["message"] == ""
