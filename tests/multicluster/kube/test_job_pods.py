"""The pods of a job on a Kubernetes cluster, read for its page: listed by the job's uid
label, and a container's log read through the official client, bounded and with the API
server's refusals as ``KubeApiError``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client as k8s  # noqa: TID251 - the user's client, reading the fake

from multicluster.kube import job_pods
from multicluster.kube.errors import KubeApiError
from multicluster.models import Cluster
from scheduling.models import Job
from tests.fixtures.kube_api import start_job

pytestmark = pytest.mark.django_db


def run_job(kube_api: Any, cluster: Cluster, now: datetime, name: str, **kw: Any) -> Job:
    return start_job(kube_api, cluster, name, now, **kw)[0]


def test_the_api_server_serves_a_container_log_as_the_real_one(
    kube_api: Any, kube_queue: Cluster, t0: datetime, kubectl_api: Any
) -> None:
    run_job(kube_api, kube_queue, t0, "train")
    (pod,) = (p["metadata"]["name"] for p in kube_api.objects("pods", kube_api.namespace))
    kube_api.write_log(kube_api.namespace, pod, "epoch 1", "epoch 2", "epoch 3")
    core = k8s.CoreV1Api(kubectl_api)

    assert core.read_namespaced_pod_log(pod, kube_api.namespace) == "epoch 1\nepoch 2\nepoch 3\n"
    assert core.read_namespaced_pod_log(pod, kube_api.namespace, tail_lines=2) == (
        "epoch 2\nepoch 3\n"
    )
    assert core.read_namespaced_pod_log(pod, kube_api.namespace, limit_bytes=10) == "epoch 1\nep"
    stamped = core.read_namespaced_pod_log(pod, kube_api.namespace, timestamps=True)
    assert [line.split(" ", 1)[1] for line in stamped.splitlines()] == [
        "epoch 1",
        "epoch 2",
        "epoch 3",
    ]
    with pytest.raises(k8s.ApiException) as refused:
        core.read_namespaced_pod_log(pod, kube_api.namespace, previous=True)
    assert (refused.value.status, json.loads(refused.value.body)["message"]) == (
        400,
        f'previous terminated container "main" in pod "{pod}" not found',
    )
    with pytest.raises(k8s.ApiException) as unknown:
        core.read_namespaced_pod_log(pod, kube_api.namespace, container="sidecar")
    assert json.loads(unknown.value.body)["message"] == (
        f"container sidecar is not valid for pod {pod}"
    )


def test_a_job_s_pods_are_listed_by_its_uid_and_no_other(
    kube_api: Any, kube_queue: Cluster, t0: datetime
) -> None:
    job = run_job(kube_api, kube_queue, t0, "train", parallelism=2)
    run_job(kube_api, kube_queue, t0, "other")

    pods = job_pods.list_job_pods(kube_queue, kube_api.namespace, str(job.uid), limit=10)

    assert [p.job_uid for p in pods] == [str(job.uid)] * 2
    assert all(p.name.startswith("train-") for p in pods)
    assert [(p.phase, p.ready, p.node_name, p.default_container) for p in pods] == [
        ("Running", True, "node-1", "main")
    ] * 2
    assert [c.name for c in pods[0].containers] == ["main"]


def test_a_log_is_read_bounded_and_a_waiting_container_is_refused(
    kube_api: Any, kube_queue: Cluster, t0: datetime
) -> None:
    job = run_job(kube_api, kube_queue, t0, "train")
    (pod,) = job_pods.list_job_pods(kube_queue, kube_api.namespace, str(job.uid), limit=10)
    kube_api.write_log(kube_api.namespace, pod.name, *(f"line {i}" for i in range(600)))

    log = job_pods.read_log(kube_queue, pod, container="main", tail_lines=500, limit_bytes=1024)
    assert log.text.startswith("line 100\nline 101\n")
    assert (len(log.text.encode()), log.truncated) == (1024, True)
    whole = job_pods.read_log(kube_queue, pod, container="main", tail_lines=2, limit_bytes=1024)
    assert (whole.text, whole.truncated) == ("line 598\nline 599\n", False)

    kube_api.set_container_waiting(kube_api.namespace, pod.name, "main", "ContainerCreating")
    waiting = job_pods.read_pod(kube_queue, kube_api.namespace, pod.name)
    assert (waiting.reason, waiting.containers[0].waiting) == (
        "ContainerCreating",
        "ContainerCreating",
    )
    with pytest.raises(KubeApiError) as refused:
        job_pods.read_log(kube_queue, waiting, container="main", tail_lines=10, limit_bytes=1024)
    assert (refused.value.status, refused.value.message) == (
        400,
        f'container "main" in pod "{pod.name}" is waiting to start: ContainerCreating',
    )
