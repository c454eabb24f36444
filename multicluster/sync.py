"""A pass of a cluster's reconciler, whatever its connection: the simulated runner
(``multicluster.simulated.runner``) or the Kubernetes sync (``multicluster.kube.sync``).

One Celery task runs it (``kueueweb.reconcile.CLUSTER_SYNC_TASK``), asked for through
``kueueweb.reconcile.request_cluster_sync``; each backend keeps its own guard against two
passes at once and its own wake-ups: the runner skips a cluster row another pass holds and
asks again, and asks for a pass at its next pod event; the Kubernetes sync holds a lease in
the cache and probes the server on its own interval.
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from kueueweb import reconcile
from multicluster.choices import ConnectionType
from multicluster.models import Cluster
from multicluster.simulated import runner

SYNCED_CONNECTIONS = (ConnectionType.SIMULATED, ConnectionType.KUBERNETES)


def sync_and_reschedule(cluster_id: int, *, now: datetime) -> None:
    """One pass of the cluster's reconciler (nothing for a cluster that is gone)."""
    connection_type = (Cluster.objects.filter(pk=cluster_id)
                       .values_list("connection_type", flat=True).first())
    if connection_type == ConnectionType.KUBERNETES:
        # The kubernetes client loads only in processes that run a Kubernetes cluster.
        from multicluster.kube import sync as kube_sync

        kube_sync.sync_kube_cluster(cluster_id, now=now)
    elif connection_type == ConnectionType.SIMULATED:
        runner.sync_and_reschedule(cluster_id, now=now)


def request_all() -> None:
    """Ask for a pass of every cluster with a reconciler."""
    with transaction.atomic():
        for cluster_id in Cluster.objects.filter(
                connection_type__in=SYNCED_CONNECTIONS).values_list("pk", flat=True):
            reconcile.request_cluster_sync(cluster_id)
