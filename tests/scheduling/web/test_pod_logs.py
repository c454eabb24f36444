"""A job's pods on its page (why each waits, its events) and, on a Kubernetes cluster, a
pod's log read through the cluster's client: bounded, escaped, downloadable, only for the
job's own pods, the API server's refusals said on the page."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from kubernetes import client as k8s  # noqa: TID251 - the user's client, as kubectl

from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.jobs import pod as pods
from scheduling.models import Job
from scheduling.web import slices
from tests.fixtures.kube_api import PODS, start_job
from tests.fixtures.scheduling import Reconcilers

pytestmark = pytest.mark.django_db

UNSCHEDULABLE = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def logs_url(job: Job, pod: str) -> str:
    return reverse(
        "ui-job-pod-logs",
        kwargs={
            "cluster": job.cluster.name,
            "namespace": job.namespace,
            "kind": job.kind_reference,
            "name": job.name,
            "pod": pod,
        },
    )


def run_job(kube_api: Any, cluster: Cluster, now: datetime, name: str) -> tuple[Job, str]:
    """A job started on the Kubernetes cluster, and its one pod, bound to a node."""
    job, (pod,) = start_job(kube_api, cluster, name, now)
    return job, pod


def log_requests(kube_api: Any, pod: str) -> list[Any]:
    return kube_api.requests_to("GET", f"/api/v1/namespaces/{kube_api.namespace}/pods/{pod}/log")


def test_a_reader_reads_a_pod_log_escaped_and_bounded(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")
    kube_api.write_log(kube_api.namespace, pod, "step 1 <b>loss</b> 0.5", "step 2 loss 0.4")

    response = viewer_ui.get(logs_url(job, pod))

    assert response.status_code == 200
    page = response.content.decode()
    assert "step 1 &lt;b&gt;loss&lt;/b&gt; 0.5\nstep 2 loss 0.4\n</pre>" in page
    (request,) = log_requests(kube_api, pod)
    assert request.query == {
        "container": "main",
        "tailLines": "500",
        "limitBytes": str(1024 * 1024),
        "previous": "false",
        "timestamps": "false",
    }
    assert 'id="pod-log-download"' in page


def test_the_log_downloads_as_text(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")
    kube_api.write_log(kube_api.namespace, pod, "a", "b", "c")

    response = viewer_ui.get(logs_url(job, pod), {"tailLines": "2", "download": "1"})

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="{pod}-main.log"'
    assert response.content == b"b\nc\n"


def test_a_pod_of_another_job_is_not_found(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, _ = run_job(kube_api, kube_queue, t0, "train")
    _, stranger = run_job(kube_api, kube_queue, t0, "other")

    assert viewer_ui.get(logs_url(job, stranger)).status_code == 404
    assert viewer_ui.get(logs_url(job, "no-such-pod")).status_code == 404
    assert log_requests(kube_api, stranger) == []


def test_a_container_waiting_to_start_is_said_not_a_server_error(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")
    kube_api.set_container_waiting(kube_api.namespace, pod, "main", "ContainerCreating")

    response = viewer_ui.get(logs_url(job, pod))

    assert response.status_code == 400
    assert (
        f"The cluster refused to read the log: container &quot;main&quot; in pod "
        f"&quot;{pod}&quot; is waiting to start: ContainerCreating"
    ) in response.content.decode()


def test_a_missing_previous_instance_and_a_forbidden_log_are_said(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")

    previous = viewer_ui.get(logs_url(job, pod), {"previous": "1"})
    assert previous.status_code == 400
    assert "previous terminated container" in previous.content.decode()

    kube_api.forbidden.add("pods/log")
    forbidden = viewer_ui.get(logs_url(job, pod))
    assert forbidden.status_code == 403
    assert "cannot get resource &quot;pods/log&quot;" in forbidden.content.decode()


@pytest.mark.parametrize(
    ("query", "want_field"),
    [
        ({"tailLines": "0"}, "tailLines"),
        ({"tailLines": "ten"}, "tailLines"),
        ({"tailLines": "99999999999999999999999"}, "tailLines"),
        ({"previous": "maybe"}, "previous"),
        ({"container": "sidecar"}, "container"),
    ],
    ids=["zero-lines", "not-a-number", "huge", "bad-flag", "unknown-container"],
)
def test_bad_parameters_are_refused_by_field_and_no_log_is_read(
    kube_api: Any,
    kube_queue: Cluster,
    t0: datetime,
    viewer_ui: Client,
    query: dict[str, str],
    want_field: str,
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")

    response = viewer_ui.get(logs_url(job, pod), query)

    assert response.status_code == 400
    assert f'data-field="{want_field}">{want_field}: ' in response.content.decode()
    assert log_requests(kube_api, pod) == []


def test_the_log_needs_a_signed_in_reader(
    kube_api: Any, kube_queue: Cluster, t0: datetime, client: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")

    response = client.get(logs_url(job, pod))

    assert response.status_code == 302
    assert log_requests(kube_api, pod) == []


def test_the_job_page_lists_kubernetes_pods_with_logs_and_why_they_wait(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")
    kube_api.set_pod(kube_api.namespace, pod, phase="Pending", ready=False)
    kube_api.record_event(kube_api.namespace, pod, "FailedScheduling", UNSCHEDULABLE)
    sync_kube_cluster(kube_queue.pk, now=t0 + timedelta(seconds=5))

    page = viewer_ui.get(slices.job_url(job)).content.decode()

    assert f'<tr data-pod="{pod}" data-pod-phase="Pending"' in page
    assert (
        f'<strong data-pod-reason="FailedScheduling">FailedScheduling</strong> {UNSCHEDULABLE}'
        in page
    )
    assert f'<tr class="pod-events" data-events-of="{pod}">' in page
    assert f'href="{logs_url(job, pod)}"' in page
    assert 'id="job-pod-logs-note"' not in page


def test_an_unreachable_cluster_leaves_the_pods_table_with_the_error(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, _ = run_job(kube_api, kube_queue, t0, "train")
    kube_api.refuse_connections()

    response = viewer_ui.get(slices.job_url(job))

    assert response.status_code == 200
    assert 'id="job-pods-error"' in response.content.decode()
    assert f"The pods could not be read from cluster {kube_queue.name}" in response.content.decode()


def test_a_simulated_pod_says_why_it_waits_and_offers_no_logs(
    unplaceable_job: Job, reconcilers: Reconcilers, t0: datetime, viewer_ui: Client
) -> None:
    job = unplaceable_job
    reconcilers.step(t0)
    (pod,) = job.pods.all()

    page = viewer_ui.get(slices.job_url(job)).content.decode()

    assert (
        '<strong data-pod-reason="FailedScheduling">FailedScheduling</strong> '
        "0/3 nodes are available: 3 Insufficient cpu."
    ) in page
    assert f'data-events-of="{pod.name}"' in page
    assert "Logs are available on Kubernetes clusters" in page
    assert 'class="pod-logs"' not in page
    assert viewer_ui.get(logs_url(job, pod.name)).status_code == 404


def test_a_pod_created_on_the_cluster_is_listed_gated_before_admission(
    kube_api: Any,
    kube_queue: Cluster,
    kubectl_api: Any,
    t0: datetime,
    viewer_ui: Client,
    settings: Any,
) -> None:
    """A Pod created with kubectl waits gated, without the job's uid label, until admitted:
    the job's page lists it and says why, and its log page reads it as the job's own."""
    settings.KUEUEWEB = {
        **settings.KUEUEWEB,
        "INTEGRATIONS_FRAMEWORKS": [*settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "pod"],
    }
    kube_api.create_namespace(kube_api.namespace)
    k8s.CoreV1Api(kubectl_api).create_namespaced_pod(
        kube_api.namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "solo", "labels": {jobframework.QUEUE_NAME_LABEL: "lq-cq"}},
            "spec": {
                "restartPolicy": "Never",
                "schedulingGates": [{"name": pods.SCHEDULING_GATE}],
                "containers": [{"name": "c", "image": "busybox"}],
            },
        },
    )
    sync_kube_cluster(kube_queue.pk, now=t0)
    job = Job.objects.get(cluster=kube_queue, kind="Pod", name="solo")

    page = viewer_ui.get(slices.job_url(job)).content.decode()

    assert '<tr data-pod="solo" data-pod-phase="Pending"' in page
    assert '<strong data-pod-reason="SchedulingGated">SchedulingGated</strong>' in page
    refused = viewer_ui.get(logs_url(job, "solo"))
    assert refused.status_code == 400
    assert "pod solo does not have a host assigned" in refused.content.decode()


def test_a_pod_of_several_containers_offers_each(
    kube_api: Any, kube_queue: Cluster, t0: datetime, viewer_ui: Client
) -> None:
    job, pod = run_job(kube_api, kube_queue, t0, "train")

    def add_sidecar(obj: dict[str, Any]) -> None:
        obj["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})

    kube_api._update(PODS, kube_api.namespace, pod, add_sidecar)
    kube_api.write_log(kube_api.namespace, pod, "main line")
    kube_api.write_log(kube_api.namespace, pod, "sidecar line", container="sidecar")

    first = viewer_ui.get(logs_url(job, pod)).content.decode()
    chosen = viewer_ui.get(logs_url(job, pod), {"container": "sidecar"}).content.decode()

    assert '<option value="main" selected>main</option>' in first
    assert '<option value="sidecar">sidecar</option>' in first
    assert "main line\n</pre>" in first
    assert '<option value="sidecar" selected>sidecar</option>' in chosen
    assert "sidecar line\n</pre>" in chosen
