"""End to end in production mode: PostgreSQL, Redis, a real Celery worker and beat.

Kueue's getting-started setup is applied and its ``sample-job.yaml`` submitted through the
REST API; the worker processes admit it, run its pods on the simulated manager cluster and
finish it, and the quota comes back. Nothing here calls a reconciler directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from rest_framework.test import APIClient

from multicluster.choices import PodPhase
from multicluster.models import Cluster, Pod
from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import Event, Job, Workload
from scheduling.workload import conditions as cond
from tests.fixtures.processes import Processes, wait_for

EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue_examples"

pytestmark = [pytest.mark.production, pytest.mark.slow, pytest.mark.timeout(180)]


def test_sample_job_runs_to_completion_through_celery(
    celery_processes: Processes, manager: Cluster, admin_client_api: APIClient,
) -> None:
    # Pods start 10x faster than nominal: sample-job sleeps 60 s, so it runs 6 s here.
    manager.simulation = {"speed": 10, "startDelaySeconds": 5}
    manager.save()
    setup = list(yaml.safe_load_all(
        (EXAMPLES / "examples/admin/single-clusterqueue-setup.yaml").read_text()))
    apply_manifests(setup, cluster=manager.name)

    response = admin_client_api.post(
        "/api/v1/namespaces/default/jobs",
        data=(EXAMPLES / "jobs/sample-job.yaml").read_text(),
        content_type="application/yaml",
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(name=response.json()["metadata"]["name"])
    assert job.name.startswith("sample-job-")

    def workload() -> Workload:
        return Workload.objects.get(job=job)

    def has(type_: str) -> Workload | None:
        wl = workload()
        return wl if cond.is_true(wl.conditions, type_) else None

    admitted = wait_for(lambda: has("Admitted"), timeout=60, what="admission",
                        processes=celery_processes)
    assert admitted.admission["podSetAssignments"][0]["count"] == 3
    assert admitted.admission["podSetAssignments"][0]["flavors"] == {
        "cpu": "default-flavor", "memory": "default-flavor"}

    def placed() -> list[Pod] | None:
        pods = list(Pod.objects.filter(job=job).exclude(node_name=""))
        return pods if len(pods) == 3 else None

    wait_for(placed, timeout=30, what="pods placed on nodes", processes=celery_processes)
    ready = wait_for(lambda: has("PodsReady"), timeout=30, what="PodsReady",
                     processes=celery_processes)
    ready_at = cond.find(ready.conditions, "PodsReady")
    assert ready_at is not None
    assert ready_at["reason"] == "Started"

    finished = wait_for(lambda: has("Finished"), timeout=60, what="Finished",
                        processes=celery_processes)
    assert finished.phase == WorkloadPhase.FINISHED
    finished_condition = cond.find(finished.conditions, "Finished")
    assert finished_condition is not None
    assert finished_condition["reason"] == "Succeeded"
    # The pods ran their 6 s (60 s at speed 10) after becoming ready. Measured from the
    # pods' own ready time: the PodsReady condition carries the time a pass of the cluster
    # saw them ready, which lags by a second or more when the worker is busy.
    pods = Pod.objects.filter(job=job)
    last_ready = max(pod.ready_at for pod in pods if pod.ready_at is not None)
    elapsed = (snapshots_time(finished_condition) - last_ready).total_seconds()
    assert elapsed >= 5, elapsed
    assert sorted(pods.values_list("phase", flat=True)) == [PodPhase.SUCCEEDED] * 3
    job.refresh_from_db()
    assert job.status["succeeded"] == 3
    assert snapshots.reserving_rows(manager.pk) == []
    assert {"QuotaReserved", "Admitted", "Started", "PodsReady", "Finished"} <= set(
        Event.objects.filter(workload=finished).values_list("reason", flat=True))


def snapshots_time(condition: dict[str, Any]) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(str(condition["lastTransitionTime"]).replace("Z", "+00:00"))


def test_sample_scalable_job_scales_through_celery_and_survives_restarts(
    celery_processes: Processes, manager: Cluster, admin_client_api: APIClient,
) -> None:
    """Kueue's sample-scalable-job, 3 → 5 → 2 pods through the REST API, with every worker
    process killed and started again while the scale-up waits: the slice chain lives in
    the database, so the new worker processes carry it on."""
    setup = list(yaml.safe_load_all(
        (EXAMPLES / "examples/admin/single-clusterqueue-setup.yaml").read_text()))
    apply_manifests(setup, cluster=manager.name)
    response = admin_client_api.post(
        "/api/v1/namespaces/default/jobs",
        data=(EXAMPLES / "jobs/sample-scalable-job.yaml").read_text(),
        content_type="application/yaml",
    )
    assert response.status_code == 201, response.content
    job = Job.objects.get(name="sample-elastic-job")

    def running(count: int) -> list[Pod] | None:
        pods = list(Pod.objects.filter(job=job, phase=PodPhase.RUNNING, scheduling_gates=[]))
        return pods if len(pods) == count else None

    wait_for(lambda: running(3), timeout=60, what="3 running pods", processes=celery_processes)
    (first,) = Workload.objects.filter(job=job)

    # Every process goes away; the scale request lands while none runs.
    celery_processes.stop_all()
    response = admin_client_api.post("/api/v1/namespaces/default/jobs/sample-elastic-job/scale",
                                     {"parallelism": 5}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["spec"]["parallelism"] == 5
    new = Workload.objects.exclude(pk=first.pk).get(job=job)
    assert new.phase == WorkloadPhase.PENDING
    celery_processes.start("worker", "worker", "--pool=prefork", "--concurrency=2",
                           "--loglevel=INFO", "--without-gossip", "--without-mingle",
                           "--without-heartbeat", "--hostname=worker-again@%h")
    celery_processes.start("beat", "beat", "--loglevel=INFO",
                           f"--schedule={celery_processes.log_dir / 'beat-schedule-2'}")

    def replaced() -> Workload | None:
        first.refresh_from_db()
        return first if first.phase == WorkloadPhase.FINISHED else None

    wait_for(replaced, timeout=60, what="the old slice replaced", processes=celery_processes)
    finished = cond.find(first.conditions, "Finished")
    assert finished is not None
    assert finished["reason"] == "WorkloadSliceReplaced"
    new.refresh_from_db()
    assert new.admission["podSetAssignments"][0]["count"] == 5
    wait_for(lambda: running(5), timeout=60, what="5 running pods", processes=celery_processes)

    response = admin_client_api.patch(
        "/api/v1/namespaces/default/jobs/sample-elastic-job",
        {"spec": {"parallelism": 2}}, format="json")
    assert response.status_code == 200, response.content
    wait_for(lambda: running(2), timeout=60, what="2 running pods", processes=celery_processes)
    new.refresh_from_db()
    assert new.phase == WorkloadPhase.ADMITTED
    assert new.pod_sets[0]["count"] == 2
    assert Workload.objects.filter(job=job).count() == 2
