"""Scenarios the kinds' tests share (``test_appwrapper.py``, ``test_sparkapplication.py``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.models import Cluster, Pod
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import GenericJob
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from tests.fixtures.scheduling import Reconcilers


def deactivate_then_reactivate(client: APIClient, kind: GenericJob, job: Job,
                               reconcilers: Reconcilers, t0: datetime, *, pods: int,
                               finished_by: float) -> None:
    """A running job of ``kind`` with ``pods`` pods: its workload deactivated through the API
    suspends it, deletes its pods and gives the quota back; activated again, it is admitted
    and runs again, finished ``finished_by`` seconds after ``t0``."""
    wl = Workload.objects.get(job=job)
    url = f"/api/v1/namespaces/{job.namespace}/workloads/{wl.name}/"
    reconcilers.step(t0)
    assert Pod.objects.filter(job=job).count() == pods

    response = client.patch(url, {"spec": {"active": False}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=10))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert job.suspend
    assert kind.is_suspended(job.manifest)
    assert not Pod.objects.filter(job=job).exists()
    assert wl.phase == WorkloadPhase.PENDING
    assert not wl.admission
    assert "Stopped" in set(Event.objects.filter(workload=wl).values_list("reason", flat=True))

    response = client.patch(url, {"spec": {"active": True}}, format="json")
    assert response.status_code == 200, response.json()
    reconcilers.step(t0 + timedelta(seconds=20))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED
    assert not job.suspend
    assert Pod.objects.filter(job=job).count() == pods
    reconcilers.step(t0 + timedelta(seconds=finished_by))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED


def submit_sample(client: APIClient, sample: Path, kind: str) -> Job:
    """Kueue's ``sample`` of ``kind`` posted as YAML to the jobs API: accepted unchanged."""
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", sample.read_bytes(),
                              content_type="application/yaml")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == yaml.safe_load(sample.read_text())["spec"]
    return Job.objects.get(kind=kind)


def refused_unless_enabled(client: APIClient, sample: Path) -> None:
    """A sample of a kind that is not enabled is refused on its ``kind``."""
    response = client.generic("POST", "/api/v1/namespaces/default/jobs/", sample.read_bytes(),
                              content_type="application/yaml")

    assert response.status_code == 400
    assert "kind" in str(response.json())
    assert not Job.objects.exists()


@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    """The samples' ``user-queue`` in ``default``, on a cluster queue of 4 CPUs and 4Gi."""
    cq = make_queue("cq", {"cpu": "4", "memory": "4Gi"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq
