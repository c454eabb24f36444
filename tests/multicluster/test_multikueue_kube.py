"""Kueue's MultiKueue setup with a Kubernetes worker: ``multikueue-setup.yaml`` applies to the
hub, a kubeconfig uploaded through the clusters API makes the worker Active, and Kueue's
``sample-job.yaml`` submitted to the hub runs on that worker's API server (the test API
server, or a real cluster when KUEUEWEB_TEST_KUBECONFIG is set)."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster import dispatch
from multicluster.kube import connection, sync
from multicluster.models import Cluster
from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle

pytestmark = pytest.mark.django_db

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue_examples"


def documents(path: str) -> list[Any]:
    return [d for d in yaml.safe_load_all((EXAMPLES / path).read_text()) if d]


def test_sample_job_on_the_hub_runs_on_a_kubernetes_worker(
    kube_api: Any, manager: Cluster, admin_client_api: APIClient,
) -> None:
    kube_api.require_fake()
    apply_manifests(documents("examples/multikueue/multikueue-setup.yaml"),
                    cluster=manager.name)
    worker = Cluster.objects.get(name="multikueue-test-worker1")
    assert worker.connection_type == "kubernetes"
    assert not worker.kubeconfig_encrypted

    response = admin_client_api.patch(
        f"/api/v1/clusters/{worker.name}/",
        {"spec": {"connection": {"type": "kubernetes", "kubeconfig": kube_api.kubeconfig}}},
        format="json")
    assert response.status_code == 200, response.content
    shown = response.json()["spec"]["connection"]
    assert "kubeconfig" not in shown  # the kubeconfig never leaves the server
    assert shown["hasKubeconfig"] is True
    now = timezone.now().replace(microsecond=0)
    connection.probe_cluster(worker.pk, now=now)
    worker.refresh_from_db()
    active = cond.find(worker.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"], active["message"]) == ("True", "Active",
                                                                        "Connected")
    # The worker's own Kueue setup: its queues live in its scheduling domain.
    apply_manifests(documents("examples/admin/single-clusterqueue-setup.yaml"),
                    cluster=worker.name)

    response = admin_client_api.post("/api/v1/namespaces/default/jobs",
                                     data=(EXAMPLES / "jobs/sample-job.yaml").read_text(),
                                     content_type="application/yaml")
    assert response.status_code == 201, response.content
    job = Job.objects.get(cluster=manager, name=response.json()["metadata"]["name"])

    def step(at: Any) -> None:
        for cluster_id in (manager.pk, worker.pk):
            lifecycle.run_lifecycle(cluster_id, now=at, rng=random.Random(0))
            admission.run_admission_cycle(cluster_id, now=at)
        dispatch.sync_dispatch(manager.pk, now=at)
        sync.sync_kube_cluster(worker.pk, now=at)
        kube_api.run_job_controller()
        sync.sync_kube_cluster(worker.pk, now=at)
        dispatch.sync_dispatch(manager.pk, now=at)

    for second in range(4):
        step(now + timedelta(seconds=second))
    hub = Workload.objects.get(job=job)
    assert hub.cluster_name == worker.name
    assert hub.phase == WorkloadPhase.ADMITTED
    (state,) = hub.admission_check_states
    assert (state["name"], state["state"]) == ("sample-multikueue", "Ready")
    remote_job = kube_api.get("jobs", "default", job.name)
    assert remote_job is not None
    assert remote_job["spec"]["parallelism"] == 3
    assert remote_job["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"] == "multikueue"
    assert len(kube_api.objects("pods", "default")) == 3

    kube_api.complete_job("default", job.name)
    for second in range(4, 8):
        step(now + timedelta(seconds=second))
    hub.refresh_from_db()
    assert hub.phase == WorkloadPhase.FINISHED
    finished = cond.find(hub.conditions, "Finished")
    assert finished is not None
    assert finished["status"] == "True"
    job.refresh_from_db()
    assert any(c.get("type") == "Complete" and c.get("status") == "True"
               for c in job.status.get("conditions", ()))
