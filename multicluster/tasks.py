"""Celery tasks of the multicluster app: ids in, one service call, nothing else."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from kueueweb import reconcile
from multicluster import dispatch, sync


@shared_task(name=reconcile.CLUSTER_SYNC_TASK)
def sync_cluster_task(cluster_id: int) -> None:
    """One pass of the reconciler of a cluster's connection: the simulated runner (which
    asks to run again at its next pod start, pod end or gang timeout) or the Kubernetes
    sync."""
    sync.sync_and_reschedule(cluster_id, now=timezone.now())


@shared_task(name=reconcile.CLUSTER_SYNC_ALL_TASK)
def sync_all_clusters_task() -> None:
    """Periodic: a pass of every cluster, so nothing waits for a missed trigger."""
    sync.request_all()


@shared_task(name=reconcile.DISPATCH_TASK)
def dispatch_task(cluster_id: int) -> None:
    """A MultiKueue dispatch pass of a hub domain (nominate, create copies, keep winners)."""
    dispatch.sync_and_reschedule(cluster_id, now=timezone.now())


@shared_task(name=reconcile.DISPATCH_ALL_TASK)
def dispatch_all_task() -> None:
    """Periodic: a dispatch pass of the hub, so nothing waits for a missed trigger."""
    dispatch.request_dispatch()


@shared_task(name=reconcile.GARBAGE_COLLECT_TASK)
def garbage_collect_task() -> None:
    """Periodic: remove remote copies whose hub workload is gone (Kueue's gcInterval)."""
    dispatch.collect_garbage(now=timezone.now())


@shared_task(name=reconcile.PROBE_KUBE_CLUSTER_TASK)
def probe_kube_cluster_task(cluster_id: int) -> None:
    """Connect to a Kubernetes cluster now (after its kubeconfig changed, "test connection")."""
    from multicluster.kube import connection  # the kubernetes client loads only where used

    connection.probe_cluster(cluster_id, now=timezone.now())
