"""Celery tasks of the multicluster app: ids in, one service call, nothing else."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from multicluster import dispatch
from multicluster.choices import ConnectionType
from multicluster.models import Cluster
from multicluster.simulated import runner


@shared_task(name="multicluster.tasks.sync_cluster_task")
def sync_cluster_task(cluster_id: int) -> None:
    """One pass of the reconciler of a cluster's connection: the simulated runner (which
    asks to run again at its next pod start, pod end or gang timeout) or, for a Kubernetes
    cluster, the kube backend."""
    if Cluster.objects.filter(pk=cluster_id, connection_type=ConnectionType.KUBERNETES).exists():
        from multicluster.kube import sync

        sync.sync_kube_cluster(cluster_id, now=timezone.now())
        return
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


@shared_task(name="multicluster.tasks.sync_kube_cluster_task")
def sync_kube_cluster_task(cluster_id: int) -> None:
    """A pass of a Kubernetes cluster's reconciler (multicluster.kube.sync)."""
    from multicluster.kube import sync  # the kubernetes client loads only where it is used

    sync.sync_kube_cluster(cluster_id, now=timezone.now())


@shared_task(name="multicluster.tasks.sync_kube_clusters_task")
def sync_kube_clusters_task() -> None:
    """Periodic: a pass of every Kubernetes cluster."""
    from multicluster.kube import sync

    sync.request_all()


@shared_task(name="multicluster.tasks.probe_kube_cluster_task")
def probe_kube_cluster_task(cluster_id: int) -> None:
    """Connect to a Kubernetes cluster now (after its kubeconfig changed, "test connection")."""
    from multicluster.kube import connection

    connection.probe_cluster(cluster_id, now=timezone.now())
