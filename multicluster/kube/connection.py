"""The connection state of a Kubernetes cluster: Kueue's ``Active`` condition, reconnect
back-off, ``lostSince``, and the nodes and capacity read from the cluster.

Kueue mapping (``pkg/controller/admissionchecks/multikueue/multikueuecluster.go``):

- connected: ``Active=True``, reason ``Active``, message ``Connected``; the failed attempts
  are reset and ``lostSince`` cleared;
- the kubeconfig cannot be loaded: ``Active=False``, reason ``BadConfig``, message
  ``load client config failed: …`` (no retry until the kubeconfig changes);
- the server cannot be used: ``Active=False``, reason ``ClientConnectionFailed``, the error
  suffixed with ``; connection attempts: n, next connection attempt: <RFC 3339>``; the next
  attempt comes ``retry_after(n) = 5 s · 2^(min(n, 7) − 1)`` later (5, 10, … 320 s);
- ``lostSince`` is the first loss of a streak (kept across failed attempts).

``probe_cluster`` asks for the server version, checks that jobs can be listed and lists the
nodes: allocatable resources,
labels, taints, schedulability and readiness become ``Node`` rows, their sum the cluster's
``capacity``. A service account that may not list nodes still connects (Kueue's MultiKueue
role has no node permissions); the nodes are then left as they were.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.cache import cache
from django.db import transaction

from kueueweb import live
from multicluster.choices import ConnectionType
from multicluster.kube.backend import KubeBackend
from multicluster.kube.client import client_for, config_fingerprint
from multicluster.kube.errors import KubeApiError, KubeConfigError, KubeUnavailable
from multicluster.kube.kinds import job_kinds
from multicluster.kube.manifests import reduce_node
from multicluster.models import Cluster, Node
from scheduling.core.quantities import QuantityError, int_to_quantity, quantity_to_int
from scheduling.workload import conditions as cond

logger = logging.getLogger(__name__)

ACTIVE = "Active"
REASON_ACTIVE = "Active"
MESSAGE_CONNECTED = "Connected"
REASON_CONNECTION_FAILED = "ClientConnectionFailed"
REASON_BAD_CONFIG = "BadConfig"
RETRY_INCREMENT_SECONDS = 5
RETRY_MAX_STEPS = 7


def retry_after(failed_attempts: int) -> timedelta:
    """Kueue's reconnect back-off: 0 before any failure, then 5 s · 2^(min(n, 7) − 1)."""
    if failed_attempts <= 0:
        return timedelta(0)
    return timedelta(seconds=RETRY_INCREMENT_SECONDS
                     * (1 << (min(failed_attempts, RETRY_MAX_STEPS) - 1)))


def rfc3339(moment: datetime) -> str:
    """Go's ``time.RFC3339`` in UTC (whole seconds, ``Z``), as Kueue prints the next attempt."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_connected(cluster: Cluster) -> bool:
    return cond.is_true(cluster.conditions or [], ACTIVE)


@dataclass(frozen=True)
class ProbeResult:
    connected: bool
    reason: str
    message: str
    nodes: int = 0


def _save(cluster: Cluster, fields: Iterable[str]) -> None:
    cluster.save(update_fields=[*fields, "resource_version", "updated_at"])
    live.notify(cluster.pk)


def mark_connected(cluster: Cluster, *, now: datetime) -> None:
    """Active=True (Connected): failed attempts reset, ``lostSince`` cleared."""
    conditions = cond.set_condition(cluster.conditions or [], ACTIVE, True, REASON_ACTIVE,
                                    MESSAGE_CONNECTED, now=now)
    if (conditions == cluster.conditions and cluster.reconnect_attempts == 0
            and cluster.next_reconnect_at is None and cluster.lost_since is None):
        return
    cluster.conditions = conditions
    cluster.reconnect_attempts = 0
    cluster.next_reconnect_at = None
    cluster.lost_since = None
    _save(cluster, ["conditions", "reconnect_attempts", "next_reconnect_at", "lost_since"])


def mark_unreachable(cluster: Cluster, message: str, *, now: datetime) -> ProbeResult:
    """One more failed connection attempt: Active=False (ClientConnectionFailed) with the
    attempt count and the time of the next attempt; ``lostSince`` set on the first loss."""
    attempts = cluster.reconnect_attempts + 1
    next_attempt = now + retry_after(attempts)
    full = (f"{message}; connection attempts: {attempts}, "
            f"next connection attempt: {rfc3339(next_attempt)}")
    cluster.conditions = cond.set_condition(cluster.conditions or [], ACTIVE, False,
                                            REASON_CONNECTION_FAILED, full, now=now)
    cluster.reconnect_attempts = attempts
    cluster.next_reconnect_at = next_attempt
    if cluster.lost_since is None:
        cluster.lost_since = now
    _save(cluster, ["conditions", "reconnect_attempts", "next_reconnect_at", "lost_since"])
    logger.warning("cluster %s unreachable (attempt %d, next at %s): %s", cluster.name,
                   attempts, rfc3339(next_attempt), message)
    return ProbeResult(False, REASON_CONNECTION_FAILED, full)


def mark_bad_config(cluster: Cluster, message: str, *, now: datetime) -> ProbeResult:
    """Active=False (BadConfig): nothing to retry until the kubeconfig changes."""
    full = f"load client config failed: {message}"
    conditions = cond.set_condition(cluster.conditions or [], ACTIVE, False, REASON_BAD_CONFIG,
                                    full, now=now)
    lost_since = cluster.lost_since or now
    if (conditions != cluster.conditions or cluster.reconnect_attempts
            or cluster.next_reconnect_at is not None or lost_since != cluster.lost_since):
        cluster.conditions = conditions
        cluster.reconnect_attempts = 0
        cluster.next_reconnect_at = None
        cluster.lost_since = lost_since
        _save(cluster, ["conditions", "reconnect_attempts", "next_reconnect_at", "lost_since"])
    return ProbeResult(False, REASON_BAD_CONFIG, full)


def reconnect_due(cluster: Cluster, *, now: datetime) -> bool:
    """A disconnected cluster may be tried again (its back-off has passed)."""
    return cluster.next_reconnect_at is None or cluster.next_reconnect_at <= now


def total_capacity(nodes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The sum of the nodes' allocatable resources, as quantities."""
    totals: dict[str, int] = {}
    for node in nodes:
        for resource, quantity in (node.get("allocatable") or {}).items():
            try:
                amount = quantity_to_int(resource, quantity)
            except (QuantityError, ValueError, TypeError):
                logger.warning("node %s: bad allocatable %s=%r", node.get("name"), resource,
                               quantity)
                continue
            totals[resource] = totals.get(resource, 0) + amount
    return {resource: int_to_quantity(resource, amount)
            for resource, amount in sorted(totals.items())}


def store_nodes(cluster: Cluster, nodes: Sequence[Mapping[str, Any]]) -> None:
    """Upsert the observed nodes (``reduce_node`` shape), delete the vanished ones, and set
    the cluster's capacity to their sum."""
    with transaction.atomic():
        existing = {n.name: n for n in Node.objects.select_for_update(no_key=True).filter(cluster=cluster)}
        seen: set[str] = set()
        for data in nodes:
            name = str(data.get("name", ""))
            if not name:
                continue
            seen.add(name)
            values = {"capacity": dict(data.get("allocatable") or {}),
                      "labels": dict(data.get("labels") or {}),
                      "taints": list(data.get("taints") or []),
                      "unschedulable": bool(data.get("unschedulable", False)),
                      "ready": bool(data.get("ready", False))}
            node = existing.get(name)
            if node is None:
                Node.objects.create(cluster=cluster, name=name, **values)
            elif any(getattr(node, key) != value for key, value in values.items()):
                Node.objects.filter(pk=node.pk).update(**values)
        Node.objects.filter(cluster=cluster).exclude(name__in=seen).delete()
        capacity = total_capacity(nodes)
        if capacity != cluster.capacity:
            cluster.capacity = capacity
            _save(cluster, ["capacity"])


def _probed_config_key(cluster: Cluster) -> str:
    return f"kueueweb:kube:{cluster.pk}:probed-config"


def config_changed(cluster: Cluster) -> bool:
    """The kubeconfig is not the one the last probe used (an upload since, or no probe)."""
    return bool(cache.get(_probed_config_key(cluster)) != config_fingerprint(cluster))


def probe_cluster(cluster_id: int, *, now: datetime) -> ProbeResult | None:
    """Connect to the cluster: read its version and nodes, then set its connection state.

    A changed kubeconfig starts a new count of failed attempts (as Kueue does when a
    cluster's config changes). Returns None for a cluster that is gone or not a Kubernetes
    connection.
    """
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None or cluster.connection_type != ConnectionType.KUBERNETES:
        return None
    if config_changed(cluster):
        if cluster.reconnect_attempts or cluster.next_reconnect_at is not None:
            cluster.reconnect_attempts, cluster.next_reconnect_at = 0, None
            _save(cluster, ["reconnect_attempts", "next_reconnect_at"])
        cache.set(_probed_config_key(cluster), config_fingerprint(cluster), timeout=None)
    try:
        backend = KubeBackend(client_for(cluster))
    except KubeConfigError as exc:
        return mark_bad_config(cluster, str(exc), now=now)
    try:
        backend.server_version()
        # The jobs are what the reconciler lists and watches: credentials that may not read
        # every enabled kind make the cluster unusable, as a failed watch does in Kueue. A
        # kind whose CRD is not installed is not: the cluster runs the other kinds, and a
        # job of the missing kind waits with a warning until the CRD appears.
        for kind in job_kinds():
            if kind.resource is not None and backend.serves(kind.resource):
                backend.can_list_jobs(kind.resource)
        try:
            nodes: list[dict[str, Any]] | None = [reduce_node(n) for n in backend.list_nodes()]
        except KubeApiError as exc:
            if not exc.forbidden:
                raise
            logger.info("cluster %s: nodes not readable (%s)", cluster.name, exc.message)
            nodes = None
    except (KubeUnavailable, KubeApiError) as exc:
        return mark_unreachable(cluster, str(exc), now=now)
    if nodes is not None:
        store_nodes(cluster, nodes)
    mark_connected(cluster, now=now)
    return ProbeResult(True, REASON_ACTIVE, MESSAGE_CONNECTED, nodes=len(nodes or ()))
