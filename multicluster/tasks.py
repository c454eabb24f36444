"""Celery tasks of the multicluster app: ids in, one service call, nothing else."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from multicluster import dispatch
from multicluster.simulated import runner


@shared_task(name="multicluster.tasks.sync_cluster_task")
def sync_cluster_task(cluster_id: int) -> None:
    """One pass of the reconciler of a cluster's connection; it asks to run again when its
    next pod start, pod end or gang timeout comes within a sync period."""
    runner.sync_and_reschedule(cluster_id, now=timezone.now())


@shared_task(name="multicluster.tasks.sync_all_clusters_task")
def sync_all_clusters_task() -> None:
    """Periodic: a pass of every simulated cluster, so nothing waits for a missed trigger."""
    runner.request_all()


@shared_task(name="multicluster.tasks.dispatch_task")
def dispatch_task(cluster_id: int) -> None:
    """A MultiKueue dispatch pass of a hub domain (nominate, create copies, keep winners)."""
    dispatch.sync_and_reschedule(cluster_id, now=timezone.now())


@shared_task(name="multicluster.tasks.dispatch_all_task")
def dispatch_all_task() -> None:
    """Periodic: a dispatch pass of the hub, so nothing waits for a missed trigger."""
    dispatch.request_dispatch()


@shared_task(name="multicluster.tasks.garbage_collect_task")
def garbage_collect_task() -> None:
    """Periodic: remove remote copies whose hub workload is gone (Kueue's gcInterval)."""
    dispatch.collect_garbage(now=timezone.now())
