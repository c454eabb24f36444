"""Faults injected into a simulated cluster: a node lost or restored, a pod failing, a
worker disconnected from the MultiKueue hub and reconnected.

Each takes effect in the database at once and asks the cluster's reconciler to run, which
replaces failed pods as the Job controller would and reports the job's status to Kueue's
side (PodsReady, recovery timeout, backoff limit).
"""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from kueueweb import reconcile
from multicluster.choices import PodPhase
from multicluster.models import Cluster, Node, Pod
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond


def lose_node(node: Node, *, now: datetime) -> int:
    """The node stops answering: it is NotReady and every pod bound to it fails
    (reason ``NodeLost``). Returns how many pods failed."""
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(ready=False)
        failed = Pod.objects.filter(
            cluster_id=node.cluster_id, node_name=node.name,
            phase__in=(PodPhase.PENDING, PodPhase.RUNNING),
        ).update(phase=PodPhase.FAILED, ready=False, reason="NodeLost",
                 message=f"Node {node.name} which was running the pod is unresponsive",
                 finished_at=now)
        reconcile.request_cluster_sync(node.cluster_id)
    node.ready = False
    return failed


def restore_node(node: Node) -> None:
    """The node is back and Ready; pods waiting for room may be placed on it."""
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(ready=True)
        reconcile.request_cluster_sync(node.cluster_id)
    node.ready = True


def fail_pod(pod: Pod, *, now: datetime) -> bool:
    """The pod's container exits with an error now (reason ``Error``); a pod not yet running
    is marked to fail when it starts. Returns False for a pod that already terminated."""
    with transaction.atomic():
        if pod.phase == PodPhase.RUNNING:
            changed = Pod.objects.filter(pk=pod.pk, phase=PodPhase.RUNNING).update(
                phase=PodPhase.FAILED, ready=False, reason="Error",
                message="The container exited with a non-zero code", finished_at=now)
        else:
            changed = Pod.objects.filter(pk=pod.pk, phase=PodPhase.PENDING).update(fail=True)
        if changed:
            reconcile.request_cluster_sync(pod.cluster_id)
    return bool(changed)


def disconnect_cluster(cluster: Cluster, *, now: datetime) -> None:
    """A simulated worker stops answering the hub: ``Active=False`` and ``lostSince`` (kept
    from the first loss). The hub keeps a workload it won for ``workerLostTimeout``, then
    dispatches it again; nothing is nominated to it meanwhile."""
    with transaction.atomic():
        locked = Cluster.objects.select_for_update(no_key=True).get(pk=cluster.pk)
        locked.conditions = cond.set_condition(
            locked.conditions, "Active", False, "ClientConnectionFailed",
            "The simulated cluster was disconnected (fault injected)", now=now)
        locked.lost_since = locked.lost_since or now
        locked.save(update_fields=["conditions", "lost_since", "resource_version", "updated_at"])
        admission.request_dispatch()
    cluster.refresh_from_db()


def reconnect_cluster(cluster: Cluster, *, now: datetime) -> None:
    """The simulated worker answers again: ``Active=True`` (``Connected``), no ``lostSince``."""
    with transaction.atomic():
        locked = Cluster.objects.select_for_update(no_key=True).get(pk=cluster.pk)
        locked.conditions = cond.set_condition(locked.conditions, "Active", True, "Active",
                                               "Connected", now=now)
        locked.lost_since = None
        locked.save(update_fields=["conditions", "lost_since", "resource_version", "updated_at"])
        admission.request_dispatch()
    cluster.refresh_from_db()
