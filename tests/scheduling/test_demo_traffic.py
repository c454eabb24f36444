"""Demo traffic: jobs from varied templates go into the demo's queues through the real
submission path, stop at the pending bound, old finished ones are deleted, and a seeded
random generator gives the same jobs again."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from random import Random
from typing import Any
from unittest.mock import patch

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from multicluster.choices import PodPhase
from multicluster.models import Cluster, Pod
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.demo.traffic import TRAFFIC_LABEL, submit_demo_jobs
from scheduling.models import Job, Workload
from scheduling.scheduler.admission import run_admission_cycle
from scheduling.tasks import demo_traffic_task
from scheduling.workload import conditions

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
DEMO_QUEUES = {("default", "user-queue"), ("team-a", "team-a-queue"),
               ("team-b", "team-b-queue"), ("research", "research-queue"),
               ("research", "multikueue-queue")}


@pytest.fixture
def demo(manager: Cluster) -> Cluster:
    call_command("demo", stdout=io.StringIO(), stderr=io.StringIO())
    return manager


def pending(cluster: Cluster) -> int:
    return Workload.objects.filter(cluster=cluster, phase=WorkloadPhase.PENDING).count()


def shape(job: Job) -> tuple[Any, ...]:
    """What the generator chose for a job: everything but the random name suffix."""
    metadata = job.manifest["metadata"]
    spec = job.manifest["spec"]
    container = spec["template"]["spec"]["containers"][0]
    return (
        job.namespace, metadata["labels"][TRAFFIC_LABEL],
        metadata["labels"]["kueue.x-k8s.io/queue-name"],
        metadata["labels"].get("kueue.x-k8s.io/priority-class", ""),
        spec["parallelism"], container["resources"]["requests"]["cpu"],
        spec["template"]["metadata"]["annotations"]["kueueweb.io/run-seconds"],
        container["args"],
    )


def finish(job: Job, at: datetime) -> None:
    """Mark the job's workload Finished at ``at``, as the lifecycle reconciler would."""
    workload = Workload.objects.get(job=job)
    Workload.objects.filter(pk=workload.pk).update(
        phase=WorkloadPhase.FINISHED,
        conditions=conditions.set_condition(workload.conditions, "Finished", True, "Succeeded",
                                            "Job finished successfully", now=at),
    )


def test_submits_jobs_with_workloads_in_the_demo_queues(demo: Cluster) -> None:
    jobs = submit_demo_jobs(now=NOW, rng=Random(6))

    assert [(job.namespace, *shape(job)[1:5]) for job in jobs] == [
        ("research", "simulation", "research-queue", "", 7),
        ("team-a", "train", "team-a-queue", "high-priority", 2),
        ("team-b", "report", "team-b-queue", "low-priority", 2),
    ]
    # partial admission: Kueue's job-min-parallelism becomes the pod set's minCount
    assert Workload.objects.get(job=jobs[0]).pod_sets[0]["minCount"] == 3
    assert Workload.objects.get(job=jobs[1]).priority == 10000
    for job in jobs:
        workload = Workload.objects.get(job=job)
        assert workload.local_queue is not None
        queue = (workload.local_queue.namespace, workload.local_queue.name)
        assert queue in DEMO_QUEUES
        assert (workload.namespace, workload.queue_name) == queue
        assert job.name.startswith(job.manifest["metadata"]["labels"][TRAFFIC_LABEL] + "-")
        run_seconds = job.manifest["spec"]["template"]["metadata"]["annotations"][
            "kueueweb.io/run-seconds"]
        assert 20 <= int(run_seconds) <= 120
        assert job.manifest["spec"]["template"]["spec"]["containers"][0]["args"] == [
            "sleep", run_seconds]


def test_nothing_is_submitted_without_the_demo(manager: Cluster) -> None:
    assert submit_demo_jobs(now=NOW, rng=Random(1)) == []
    assert not Job.objects.exists()


def test_stops_at_the_pending_bound(demo: Cluster) -> None:
    # given the demo's own nine jobs, all pending (no admission cycle has run)
    assert pending(demo) == 9

    # when three calls would submit three jobs each
    rounds = [len(submit_demo_jobs(now=NOW, rng=Random(seed), max_pending=13))
              for seed in (5, 6, 10)]

    # then the second fills the last place and the third submits nothing
    assert rounds == [3, 1, 0]
    assert pending(demo) == 13


def test_the_bound_comes_from_the_settings(demo: Cluster) -> None:
    with override_settings(KUEUEWEB={**settings.KUEUEWEB, "DEMO_TRAFFIC_MAX_PENDING": 9}):
        assert submit_demo_jobs(now=NOW, rng=Random(5)) == []
    assert pending(demo) == 9


def test_deletes_demo_jobs_that_finished_long_ago(demo: Cluster) -> None:
    # given two traffic jobs that finished 31 and 5 minutes ago, and a demo job of
    # `manage.py demo` that finished two hours ago
    old, recent = submit_demo_jobs(now=NOW, rng=Random(7))
    finish(old, NOW - timedelta(minutes=31))
    pod = Pod.objects.create(cluster=demo, namespace=old.namespace, name=f"{old.name}-0",
                             job=old, phase=PodPhase.SUCCEEDED, created_at=NOW)
    finish(recent, NOW - timedelta(minutes=5))
    own = Job.objects.get(cluster=demo, name="train-resnet")
    finish(own, NOW - timedelta(hours=2))

    # when traffic runs with the default of 30 minutes
    submit_demo_jobs(now=NOW, rng=Random(2), max_pending=0)

    # then only the old traffic job is gone, with its workload and pods
    assert not Job.objects.filter(pk=old.pk).exists()
    assert not Workload.objects.filter(job_id=old.pk).exists()
    assert not Pod.objects.filter(pk=pod.pk).exists()
    assert Job.objects.filter(pk__in=[recent.pk, own.pk]).count() == 2

    # and a shorter retention takes the recent one too
    submit_demo_jobs(now=NOW, rng=Random(2), max_pending=0, keep_finished=timedelta(minutes=1))
    assert not Job.objects.filter(pk=recent.pk).exists()
    assert Job.objects.filter(pk=own.pk).exists()


def test_is_deterministic_with_a_seeded_random(demo: Cluster) -> None:
    first = [shape(job) for job in submit_demo_jobs(now=NOW, rng=Random(7))]
    for job in Job.objects.filter(manifest__metadata__labels__has_key=TRAFFIC_LABEL):
        services.delete_job(job)

    second = [shape(job) for job in submit_demo_jobs(now=NOW, rng=Random(7))]

    assert first == second
    assert first == [
        ("research", "analysis", "multikueue-queue", "", 2, "1", "103", ["sleep", "103"]),
        ("default", "sample-job", "user-queue", "", 3, "1", "32", ["sleep", "32"]),
    ]


def test_one_oversized_job_waits_with_its_reason(demo: Cluster) -> None:
    rng = Random(3)
    for _ in range(40):
        submit_demo_jobs(now=NOW, rng=rng, max_pending=1000)

    oversized = Workload.objects.filter(
        **{f"job__manifest__metadata__labels__{TRAFFIC_LABEL}": "oversized"})
    assert oversized.count() == 1
    # Each cycle tries the head of each queue: a few cycles reach it.
    for second in range(20):
        run_admission_cycle(demo.pk, now=NOW + timedelta(seconds=second))
    workload = oversized.get()
    condition = conditions.find(workload.conditions, "QuotaReserved") or {}
    assert (workload.phase, condition.get("status"), condition.get("reason")) == (
        WorkloadPhase.PENDING, "False", "ExceedsMaxQuota")
    assert "insufficient quota for cpu in flavor on-demand" in condition["message"]


def test_task_calls_the_service_with_the_time_and_a_fresh_generator(demo: Cluster) -> None:
    with patch("scheduling.demo.traffic.submit_demo_jobs", return_value=[]) as service:
        demo_traffic_task()

    [call] = service.call_args_list
    assert (call.args, sorted(call.kwargs)) == ((), ["now", "rng"])
    assert isinstance(call.kwargs["rng"], Random)
    assert call.kwargs["now"].tzinfo is not None


@pytest.mark.parametrize(("interval", "want_entry"), [("15", True), ("0", False), (None, False)],
                         ids=["set", "zero", "unset"])
def test_beat_runs_demo_traffic_only_when_an_interval_is_set(
    interval: str | None, want_entry: bool
) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in {"KUEUEWEB_DEMO_TRAFFIC_INTERVAL_SECONDS", "DATABASE_URL", "REDIS_URL"}}
    if interval is not None:
        env["KUEUEWEB_DEMO_TRAFFIC_INTERVAL_SECONDS"] = interval
    result = subprocess.run(
        [sys.executable, "-c", "import kueueweb.settings as s; "
         "print(s.CELERY_BEAT_SCHEDULE.get('demo-traffic'))"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )

    assert result.returncode == 0, result.stderr
    # Like every periodic task, on beat's own queue, dropped once the next one is due.
    want = ("{'task': 'scheduling.tasks.demo_traffic_task', 'schedule': 15.0, "
            "'options': {'queue': 'periodic', 'expires': 15.0}}")
    assert result.stdout.strip() == (want if want_entry else "None")
