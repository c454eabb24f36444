"""Celery tasks of the scheduling app: ids in, one service call, nothing else."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from kueueweb import reconcile
from scheduling import cronjobs, deployments, leaderworkersets, statefulsets
from scheduling.scheduler import admission
from scheduling.workload import lifecycle


@shared_task(name=reconcile.ADMISSION_TASK)
def admission_cycle_task(cluster_id: int) -> None:
    """One scheduling cycle of a domain (skipped if another worker holds its lease)."""
    admission.run_admission_cycle(cluster_id, now=timezone.now())


@shared_task(name=reconcile.ADMISSION_ALL_TASK)
def schedule_admission_all_task() -> None:
    """Periodic: ask for a cycle of every domain, so nothing waits for a missed trigger."""
    admission.request_all_domains()


@shared_task(name=reconcile.LIFECYCLE_TASK)
def lifecycle_task(cluster_id: int) -> None:
    """The time-based workload rules of a domain (timeouts, back-off, deactivation)."""
    lifecycle.run_and_reschedule(cluster_id, now=timezone.now())


@shared_task(name=reconcile.LIFECYCLE_ALL_TASK)
def lifecycle_all_task() -> None:
    """Periodic: a lifecycle pass of every domain."""
    lifecycle.request_all_domains()


@shared_task(name=reconcile.DEMO_TRAFFIC_TASK)
def demo_traffic_task() -> None:
    """Periodic when KUEUEWEB["DEMO_TRAFFIC_INTERVAL_SECONDS"] > 0: a few demo jobs in, old
    finished ones out (``scheduling.demo.traffic``)."""
    import random

    # Imported here: only processes that run the demo need the demo's module.
    from scheduling.demo import traffic

    traffic.submit_demo_jobs(now=timezone.now(), rng=random.Random())


@shared_task(name=reconcile.SAMPLE_USAGE_TASK)
def sample_usage_task() -> None:
    """Periodic: one usage sample per cluster queue, for the overview's chart."""
    from scheduling.metrics import history

    history.sample_usage(now=timezone.now())


@shared_task(name=reconcile.CRONJOB_ALL_TASK)
def cronjobs_task() -> None:
    """Periodic: every CronJob creates the Job of a schedule time that came, and prunes its
    history (``scheduling.cronjobs``)."""
    cronjobs.sync_all(now=timezone.now())


@shared_task(name=reconcile.REPLICAS_TASK)
def replicas_task(job_id: int) -> None:
    """The controller of an object that keeps replicas: a Deployment's ReplicaSet
    controller (``scheduling.deployments``), a StatefulSet's controller and Kueue's
    reconcilers (``scheduling.statefulsets``), a LeaderWorkerSet's
    (``scheduling.leaderworkersets``); each passes over its own kind only."""
    now = timezone.now()
    deployments.sync_deployment(job_id, now=now)
    statefulsets.sync_statefulset(job_id, now=now)
    leaderworkersets.sync_leaderworkerset(job_id, now=now)


@shared_task(name=reconcile.REPLICAS_ALL_TASK)
def replicas_all_task() -> None:
    """Periodic: every Deployment's, StatefulSet's and LeaderWorkerSet's pass, which
    replaces the Pods Kueue stopped."""
    now = timezone.now()
    deployments.sync_all(now=now)
    statefulsets.sync_all(now=now)
    leaderworkersets.sync_all(now=now)
