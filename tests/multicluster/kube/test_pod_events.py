"""Why pods are pending on a Kubernetes cluster: the Warning events about the pods of
kueueweb's jobs, watched with a field selector, kept on their workload (a repeat updates
its row), and shown by the workload's events API, its page and its job's page."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from multicluster.kube import pod_events
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import services
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.scheduler import admission
from scheduling.web import slices as web_slices
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    kube_api.require_fake()
    make_queue("cq", {"cpu": "10"}, namespace=kube_api.namespace, cluster=kube_cluster)
    return kube_cluster


def started(kube_api: Any, domain: Cluster, now: datetime) -> tuple[Job, Workload, list[str]]:
    job = services.submit_job(job_manifest("train", "lq-cq", parallelism=2),
                              namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=now)
    sync_kube_cluster(domain.pk, now=now)
    kube_api.run_job_controller()
    pods = sorted(p["metadata"]["name"] for p in kube_api.objects("pods", kube_api.namespace))
    return job, Workload.objects.get(job=job), pods


def test_a_failed_scheduling_event_reaches_the_workload_api_and_pages(
        kube_api: Any, domain: Cluster, t0: datetime, admin_client_api: APIClient,
        admin_ui: Client) -> None:
    job, wl, pods = started(kube_api, domain, t0)
    # The cluster's scheduler finds no room for one pod: the job has one ready pod of two.
    kube_api.set_pod(kube_api.namespace, pods[0], phase="Pending", ready=False)
    kube_api.set_job_status(kube_api.namespace, "train", active=2, ready=1)
    kube_api.record_event(kube_api.namespace, pods[0], "FailedScheduling", UNSCHEDULABLE)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    (row,) = Event.objects.filter(workload=wl, object_kind="Pod")
    assert (row.object_name, row.type, row.reason, row.message, row.count) == (
        pods[0], "Warning", "FailedScheduling", UNSCHEDULABLE, 1)

    # Seen again by the scheduler: the same event counted twice, one row.
    kube_api.record_event(kube_api.namespace, pods[0], "FailedScheduling", UNSCHEDULABLE)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))
    (row,) = Event.objects.filter(workload=wl, object_kind="Pod")
    assert row.count == 2

    response = admin_client_api.get(
        f"/api/v1/namespaces/{kube_api.namespace}/workloads/{wl.name}/events/",
        {"cluster": domain.name})
    assert response.status_code == 200
    items = response.json()["items"]
    assert {"involvedObject": {"kind": "Pod", "name": pods[0],
                               "namespace": kube_api.namespace},
            "type": "Warning", "reason": "FailedScheduling", "message": UNSCHEDULABLE,
            "count": 2} in [{k: v for k, v in item.items() if k != "lastTimestamp"}
                            for item in items]

    page = admin_ui.get(reverse("ui-workload", kwargs={
        "cluster": domain.name, "namespace": wl.namespace, "name": wl.name}))
    assert page.status_code == 200
    assert f"{UNSCHEDULABLE} <span" in page.content.decode()
    assert "(×2)" in page.content.decode()
    job_page = admin_ui.get(web_slices.job_url(job)).content.decode()
    assert 'id="job-why-pending"' in job_page
    assert f'data-pod="{pods[0]}" data-reason="FailedScheduling"' in job_page


def test_only_warnings_about_our_pods_are_asked_for_and_kept(
        kube_api: Any, domain: Cluster, t0: datetime) -> None:
    _, wl, pods = started(kube_api, domain, t0)
    stranger = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "other", "namespace": kube_api.namespace, "uid": "x"}}
    foreign = kube_api._create_pod(stranger, {"spec": {"containers": []}}, phase="Pending",
                                   ready=False)
    kube_api.record_event(kube_api.namespace, foreign, "FailedMount", "not ours")
    kube_api.record_event(kube_api.namespace, pods[1], "Pulled", "image pulled",
                          type_="Normal", component="kubelet")
    kube_api.record_event(kube_api.namespace, pods[1], "Failed",
                          'Failed to pull image "nope": not found', component="kubelet")
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert list(Event.objects.filter(object_kind="Pod").values_list("reason", "workload")) == [
        ("Failed", wl.pk)]
    lists = [r.query for r in kube_api.requests_to("GET", "/api/v1/events")]
    assert lists
    assert {q.get("fieldSelector") for q in lists} == {"involvedObject.kind=Pod,type=Warning"}


def test_a_workload_keeps_its_newest_pod_events(
        kube_api: Any, domain: Cluster, t0: datetime, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pod_events, "MAX_POD_EVENTS_PER_WORKLOAD", 2)
    _, wl, pods = started(kube_api, domain, t0)
    for index in range(3):
        kube_api.record_event(kube_api.namespace, pods[0], "BackOff", f"back-off {index}")
        sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5 + index))

    assert sorted(Event.objects.filter(workload=wl, object_kind="Pod")
                  .values_list("message", flat=True)) == ["back-off 1", "back-off 2"]
    # kueueweb's own events of the workload are not pod events: none was dropped.
    assert Event.objects.filter(workload=wl, reason="QuotaReserved").exists()
