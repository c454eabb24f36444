"""Usage history of cluster queues, sampled periodically for the overview's chart.

``sample_usage`` writes one ``QueueUsageSample`` per cluster queue of every domain with five
queries however many queues and workloads exist: the queues, the pending counts (grouped
in the database), the workloads holding quota (one values() row each, as the snapshot reads
them), one bulk insert and one delete of samples older than ``RETENTION``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count

from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.core.quantities import is_milli_resource
from scheduling.models import ClusterQueue, QueueUsageSample, Workload

RETENTION = timedelta(hours=24)


def base_units(resource: str, amount: int) -> float | int:
    """An engine amount (CPU in millis) in Kubernetes base units (cores, bytes)."""
    if is_milli_resource(resource):
        return amount // 1000 if amount % 1000 == 0 else amount / 1000
    return amount


def usage_by_queue(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Engine usage per cluster queue name, "flavor/resource" → amount, from reserving rows
    (``snapshots.reserving_rows``): counted exactly as the snapshot counts it."""
    usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        held = usage[row["admission"]["clusterQueue"]]
        for fr, value in snapshots.held_usage(row).items():
            held[f"{fr.flavor}/{fr.resource}"] += value
    return usage


def sample_usage(*, now: datetime) -> int:
    """Record one sample per cluster queue of every domain; forget samples older than a day.

    Returns the number of samples written.
    """
    queues = list(ClusterQueue.objects.values_list("id", "cluster_id", "name"))
    pending = dict(
        Workload.objects.filter(phase=WorkloadPhase.PENDING, active=True,
                                local_queue__isnull=False)
        .values("local_queue__cluster_queue_id").annotate(n=Count("*"))
        .values_list("local_queue__cluster_queue_id", "n").order_by()
    )
    reserving = list(
        Workload.objects.filter(
            phase__in=(WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED), active=True,
            cluster_queue__isnull=False,
        ).values(*snapshots.RESERVING_FIELDS, "cluster_id", "cluster_queue_id")
    )
    admitted: dict[int, int] = defaultdict(int)
    rows_by_domain: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in reserving:
        admitted[row["cluster_queue_id"]] += 1
        if row["admission"]:
            rows_by_domain[row["cluster_id"]].append(row)
    usage = {domain: usage_by_queue(rows) for domain, rows in rows_by_domain.items()}
    samples = []
    for cq_id, cluster_id, name in queues:
        held = usage.get(cluster_id, {}).get(name, {})
        samples.append(QueueUsageSample(
            cluster_id=cluster_id, cluster_queue=name, sampled_at=now,
            pending=pending.get(cq_id, 0), admitted=admitted.get(cq_id, 0),
            usage={key: base_units(key.rsplit("/", 1)[1], value)
                   for key, value in sorted(held.items())},
        ))
    QueueUsageSample.objects.bulk_create(samples)
    QueueUsageSample.objects.filter(sampled_at__lt=now - RETENTION).delete()
    return len(samples)
