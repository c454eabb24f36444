"""Demo traffic: a trickle of batch/v1 Jobs into the demo's queues, so a demo left running
keeps admitting, preempting, running and finishing work.

Each call (``demo_traffic_task``, every ``KUEUEWEB["DEMO_TRAFFIC_INTERVAL_SECONDS"]``):

1. deletes the demo traffic's jobs that finished more than
   ``DEMO_TRAFFIC_KEEP_FINISHED_MINUTES`` ago, so the database stays small;
2. while fewer than ``DEMO_TRAFFIC_MAX_PENDING`` workloads of the manager are pending,
   submits one to three jobs made from ``TEMPLATES`` through ``services.submit_job`` (the path
   a user's submission takes), in the demo's queues that exist.

Jobs carry the label ``kueueweb.io/demo-traffic`` (the template's name): only those are ever
deleted, never the demo's own jobs or a user's. Every random choice comes from ``rng``, so a
seeded ``random.Random`` gives the same jobs again (their name suffixes aside).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from multicluster.choices import ClusterRole
from multicluster.core.pods import RUN_SECONDS_ANNOTATION
from multicluster.models import Cluster
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import PRIORITY_CLASS_LABEL, QUEUE_NAME_LABEL
from scheduling.jobs.job import JOB_MIN_PARALLELISM_ANNOTATION
from scheduling.models import Job, LocalQueue, Workload, WorkloadPriorityClass
from scheduling.workload import conditions

logger = logging.getLogger(__name__)

TRAFFIC_LABEL = "kueueweb.io/demo-traffic"
IMAGE = "busybox:1.36"
RUN_SECONDS = (20, 120)
JOBS_PER_CALL = (1, 3)
_UNFINISHED = (WorkloadPhase.PENDING, WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


@dataclass(frozen=True)
class JobTemplate:
    """A kind of job the demo's teams submit: where it goes and how big it may be."""

    name: str  # generateName prefix (without the dash) and value of TRAFFIC_LABEL
    namespace: str
    queue: str
    pods: tuple[int, int]  # parallelism = completions, drawn from this range
    cpu: str
    memory: str
    priority_class: str = ""
    # With Kueue's job-min-parallelism annotation (half the pods): partial admission.
    partial: bool = False
    weight: int = 4
    # More than the queue's cohort could ever give: stays pending, with the reason shown.
    too_large: bool = False

    def manifest(self, rng: random.Random, priority_classes: Collection[str]) -> dict[str, Any]:
        pods = rng.randint(*self.pods)
        run_seconds = str(rng.randint(*RUN_SECONDS))
        labels = {QUEUE_NAME_LABEL: self.queue, TRAFFIC_LABEL: self.name}
        if self.priority_class in priority_classes:
            labels[PRIORITY_CLASS_LABEL] = self.priority_class
        metadata: dict[str, Any] = {"generateName": f"{self.name}-", "namespace": self.namespace,
                                    "labels": labels}
        if self.partial:
            metadata["annotations"] = {JOB_MIN_PARALLELISM_ANNOTATION: str(max(1, pods // 2))}
        container = {
            "name": "main",
            "image": IMAGE,
            "args": ["sleep", run_seconds],
            "resources": {"requests": {"cpu": self.cpu, "memory": self.memory}},
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": metadata,
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "suspend": True,
                "template": {
                    # The simulated cluster reads the run time here (or from the sleep).
                    "metadata": {"annotations": {RUN_SECONDS_ANNOTATION: run_seconds}},
                    "spec": {"containers": [container], "restartPolicy": "Never"},
                },
            },
        }


# The demo's local queues (scheduling/demo/*.yaml) and priority classes.
TEMPLATES: tuple[JobTemplate, ...] = (
    JobTemplate("sample-job", "default", "user-queue", (1, 3), "1", "200Mi"),
    JobTemplate("train", "team-a", "team-a-queue", (2, 4), "2", "8Gi", "high-priority"),
    JobTemplate("sweep", "team-a", "team-a-queue", (2, 6), "1", "2Gi", "low-priority"),
    JobTemplate("etl", "team-b", "team-b-queue", (1, 4), "2", "4Gi"),
    JobTemplate("report", "team-b", "team-b-queue", (1, 2), "1", "1Gi", "low-priority"),
    JobTemplate("simulation", "research", "research-queue", (4, 8), "1", "4Gi", partial=True),
    JobTemplate("analysis", "research", "multikueue-queue", (1, 3), "1", "2Gi"),
    # 64 CPUs in one flavor: the all-teams cohort has 24 per flavor.
    JobTemplate("oversized", "team-b", "team-b-queue", (8, 8), "8", "16Gi", weight=1,
                too_large=True),
)


def submit_demo_jobs(
    *,
    now: datetime,
    rng: random.Random,
    max_pending: int | None = None,
    keep_finished: timedelta | None = None,
) -> list[Job]:
    """Delete old finished demo traffic, then submit a few jobs while there is room; returns
    the jobs submitted (none when the demo's queues do not exist). ``max_pending`` and
    ``keep_finished`` default to the DEMO_TRAFFIC settings."""
    options = settings.KUEUEWEB
    if max_pending is None:
        max_pending = int(options["DEMO_TRAFFIC_MAX_PENDING"])
    if keep_finished is None:
        keep_finished = timedelta(minutes=float(options["DEMO_TRAFFIC_KEEP_FINISHED_MINUTES"]))
    manager = Cluster.objects.filter(role=ClusterRole.MANAGER).first()
    if manager is None:
        return []
    delete_finished_demo_jobs(manager, now=now, keep_finished=keep_finished)

    queues = set(LocalQueue.objects.filter(cluster=manager).values_list("namespace", "name"))
    templates = [t for t in TEMPLATES if (t.namespace, t.queue) in queues]
    room = max_pending - Workload.objects.filter(cluster=manager,
                                                 phase=WorkloadPhase.PENDING).count()
    if not templates or room <= 0:
        return []
    priority_classes = set(
        WorkloadPriorityClass.objects.filter(cluster=manager).values_list("name", flat=True))
    # One job that cannot fit is enough to show a pending reason.
    oversized_waiting = Workload.objects.filter(
        cluster=manager, phase=WorkloadPhase.PENDING,
        **{f"job__manifest__metadata__labels__{TRAFFIC_LABEL}": "oversized"},
    ).exists()

    submitted: list[Job] = []
    for _ in range(min(room, rng.randint(*JOBS_PER_CALL))):
        choices = [t for t in templates if not (t.too_large and oversized_waiting)]
        template = _choose(choices, rng)
        manifest = template.manifest(rng, priority_classes)
        try:
            job = services.submit_job(manifest, namespace=template.namespace, cluster=manager)
        except (ValidationError, services.ConflictError) as exc:
            # The demo's objects were edited (a queue stopped, a class removed): skip it.
            logger.warning("demo traffic: %s job not submitted: %s", template.name, exc)
            continue
        oversized_waiting = oversized_waiting or template.too_large
        submitted.append(job)
    return submitted


def _choose(templates: Sequence[JobTemplate], rng: random.Random) -> JobTemplate:
    return rng.choices(templates, weights=[t.weight for t in templates])[0]


def delete_finished_demo_jobs(cluster: Cluster, *, now: datetime,
                              keep_finished: timedelta) -> int:
    """Delete the demo traffic's jobs of ``cluster`` whose workloads all finished before
    ``now - keep_finished`` (the Finished condition's time), through ``services.delete_job``
    so their pods go too; returns how many."""
    finished_jobs = (
        Job.objects.filter(cluster=cluster, manifest__metadata__labels__has_key=TRAFFIC_LABEL,
                           workloads__phase=WorkloadPhase.FINISHED)
        .exclude(workloads__phase__in=_UNFINISHED)
        .values("pk")
    )
    finished_at: dict[int, datetime] = {}
    rows = Workload.objects.filter(job__in=finished_jobs) \
        .values_list("job_id", "conditions", "updated_at")
    for job_id, workload_conditions, updated_at in rows:
        moment = _finished_time(workload_conditions) or updated_at
        finished_at[job_id] = max(moment, finished_at.get(job_id, moment))
    cutoff = now - keep_finished
    old = sorted(job_id for job_id, moment in finished_at.items() if moment < cutoff)
    for job in Job.objects.filter(pk__in=old).order_by("pk"):
        services.delete_job(job)
    return len(old)


def _finished_time(workload_conditions: Any) -> datetime | None:
    if not conditions.is_true(workload_conditions or [], "Finished"):
        return None
    return conditions.transition_time(workload_conditions, "Finished")
