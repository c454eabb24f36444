"""A job's gang through the v1alpha1 Workload API on a Kubernetes cluster: the Workload made
with the job, its pods (made by the cluster's Job controller) naming it, bound by the
scheduler once the gang can form, and the gang scheduling metrics counted from what the
pass observes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from rest_framework.test import APIClient

from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import services
from scheduling.metrics import prometheus
from scheduling.models import ClusterQueue
from scheduling.scheduler import admission
from tests.fixtures.gang_metrics import gang_metrics
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_metrics(settings: Any) -> Iterator[None]:
    if settings.REDIS_URL:
        settings.METRICS_REDIS_PREFIX = "kueueweb-test:kube-gangs:"
    prometheus.clear_event_metrics()
    yield
    prometheus.clear_event_metrics()


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    kube_api.require_fake()
    kube_api.serve_gang_api = True
    make_queue("cq", {"cpu": "10"}, namespace=kube_api.namespace, cluster=kube_cluster)
    return kube_cluster


def start(kube_api: Any, domain: Cluster, name: str, now: datetime, count: int) -> None:
    services.submit_job(job_manifest(name, "lq-cq", parallelism=count),
                        namespace=kube_api.namespace, cluster=domain)
    admission.run_admission_cycle(domain.pk, now=now)
    sync_kube_cluster(domain.pk, now=now)
    kube_api.run_job_controller()


def test_a_gang_goes_through_the_workload_api_and_is_counted_once_bound(
        kube_api: Any, domain: Cluster, t0: datetime, admin_client_api: APIClient,
        django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        start(kube_api, domain, "train", t0, 3)

    workload = kube_api.get("workloads", kube_api.namespace, "job-train")
    assert workload["spec"]["podGroups"] == [{"name": "main",
                                              "policy": {"gang": {"minCount": 3}}}]
    pods = kube_api.objects("pods", kube_api.namespace)
    assert [p["spec"]["workloadRef"] for p in pods] == [
        {"name": "job-train", "podGroup": "main"}] * 3
    assert gang_metrics(admin_client_api, domain.name) == {"attempts_total": 1.0}

    assert sorted(kube_api.run_scheduler()) == sorted(p["metadata"]["name"] for p in pods)
    with django_capture_on_commit_callbacks(execute=True):
        sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))
        sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=400))  # counted once

    assert all(p["spec"]["nodeName"] for p in kube_api.objects("pods", kube_api.namespace))
    assert gang_metrics(admin_client_api, domain.name) == {"attempts_total": 1.0,
                                                           "successes_total": 1.0}


def test_a_gang_still_unscheduled_after_the_timeout_is_counted_as_a_timeout(
        kube_api: Any, domain: Cluster, t0: datetime, admin_client_api: APIClient,
        django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        start(kube_api, domain, "stuck", t0, 2)
        sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=299))
    assert gang_metrics(admin_client_api, domain.name) == {"attempts_total": 1.0}
    with django_capture_on_commit_callbacks(execute=True):
        sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=300))

    assert gang_metrics(admin_client_api, domain.name) == {"attempts_total": 2.0,
                                                           "timeouts_total": 1.0}


def test_the_fake_scheduler_holds_a_gang_that_cannot_form(kube_api: Any) -> None:
    """Pods naming a Workload wait while it or their pod group is missing, or while fewer
    than minCount of them exist (the GangScheduling plugin's PreEnqueue)."""
    kube_api.require_fake()
    kube_api.serve_gang_api = True
    namespace = kube_api.namespace
    kube_api.create_namespace(namespace)
    owner = {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "o", "namespace": namespace, "uid": "u"}}
    template = {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                         "workloadRef": {"name": "w", "podGroup": "g"}}}
    first = kube_api._create_pod(owner, template, phase="Pending", ready=False)
    assert kube_api.run_scheduler() == []  # no Workload
    with kube_api._cond:
        kube_api._create(kube_api._resource("workloads"), namespace, {
            "metadata": {"name": "w"},
            "spec": {"podGroups": [{"name": "g", "policy": {"gang": {"minCount": 2}}}]}})
    assert kube_api.run_scheduler() == []  # one of two
    second = kube_api._create_pod(owner, template, phase="Pending", ready=False)
    assert sorted(kube_api.run_scheduler()) == sorted([first, second])
