"""Usage history of cluster queues, sampled periodically for the charts.

``sample_usage`` writes one ``QueueUsageSample`` per cluster queue of every domain with eight
queries however many queues and workloads exist: the queues, the pending counts per local
queue (grouped in the database), the workloads holding quota (one values() row each, as the
snapshot reads them), the nominal quotas, the time of the previous sample, the quota
reservations made since then, one bulk insert and one delete of samples older than
``RETENTION``.

The waits are Kueue's (``QueuedWaitTime``, what ``quota_reserved_wait_time_seconds``
observes): from the last transition of the workload's ``Requeued`` condition, else from its
creation, to its quota reservation. They are read once, for the reservations of one sampling
interval, and kept in the sample as a median and a 90th percentile: a workload evicted or
deleted later keeps counting in the interval it was admitted in.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Max

from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.core.conditions import find, parse_timestamp
from scheduling.core.quantities import QuantityError, is_milli_resource, quantity_to_int
from scheduling.models import ClusterQueue, FlavorQuota, QueueUsageSample, Workload

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


def percentile(ordered: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``ordered`` (ascending, not empty): the smallest value
    that at least ``fraction`` of the values do not exceed."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def queued_since(created_at: datetime, conditions: Any) -> datetime:
    """When a workload last started waiting, as Kueue's ``QueuedWaitTime`` reads it: the
    last transition of its ``Requeued`` condition, else its creation."""
    requeued = find(conditions or [], "Requeued")
    moment = parse_timestamp(requeued.get("lastTransitionTime")) if requeued else None
    return moment or created_at


def _waits(since: datetime, now: datetime) -> dict[int, list[float]]:
    """Seconds waited by each workload that got quota in (since, now], per cluster queue id,
    ascending. One query on the ``workload_reserved_at`` index: one interval's
    reservations."""
    waits: dict[int, list[float]] = defaultdict(list)
    for cq_id, reserved_at, created_at, conditions in Workload.objects.filter(
        quota_reserved_at__gt=since,
        quota_reserved_at__lte=now,
        cluster_queue__isnull=False,
    ).values_list("cluster_queue_id", "quota_reserved_at", "created_at", "conditions"):
        assert reserved_at is not None  # filtered on
        # Clocks of different processes may disagree by a little; a wait is never negative.
        waited = (reserved_at - queued_since(created_at, conditions)).total_seconds()
        waits[cq_id].append(max(0.0, waited))
    for values in waits.values():
        values.sort()
    return waits


def _nominal_quotas() -> dict[int, dict[str, float | int]]:
    """Each cluster queue's nominal quota per "flavor/resource", in base units; a quota that
    does not parse (validation keeps them out) counts as none."""
    nominal: dict[int, dict[str, float | int]] = defaultdict(dict)
    for cq_id, flavor, resource, text in FlavorQuota.objects.filter(
        cluster_queue__isnull=False,
    ).values_list("cluster_queue_id", "flavor__name", "resource", "nominal_quota"):
        try:
            amount = quantity_to_int(resource, text)
        except (QuantityError, ValueError):
            continue
        nominal[cq_id][f"{flavor}/{resource}"] = base_units(resource, amount)
    return nominal


def sample_usage(*, now: datetime) -> int:
    """Record one sample per cluster queue of every domain; forget samples older than a day.

    Returns the number of samples written.
    """
    queues = list(ClusterQueue.objects.values_list("id", "cluster_id", "name", "cohort__name"))
    pending: dict[int, int] = defaultdict(int)
    local_pending: dict[int, dict[str, int]] = defaultdict(dict)
    for cq_id, namespace, name, n in (
        Workload.objects.filter(phase=WorkloadPhase.PENDING, active=True, local_queue__isnull=False)
        .values_list("local_queue__cluster_queue_id", "local_queue__namespace", "local_queue__name")
        .annotate(n=Count("*"))
        .order_by()
    ):
        pending[cq_id] += n
        local_pending[cq_id][f"{namespace}/{name}"] = n
    reserving = list(
        Workload.objects.filter(
            phase__in=(WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED),
            active=True,
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
    nominal = _nominal_quotas()
    # The interval since the previous sample (one interval on the first): no reservation is
    # counted twice or missed, however late the periodic task runs.
    previous = QueueUsageSample.objects.filter(sampled_at__lt=now).aggregate(
        last=Max("sampled_at")
    )["last"]
    since = max(previous or now - interval(), now - RETENTION)
    waits = _waits(since, now)
    samples = []
    for cq_id, cluster_id, name, cohort in queues:
        held = usage.get(cluster_id, {}).get(name, {})
        waited = waits.get(cq_id, [])
        samples.append(
            QueueUsageSample(
                cluster_id=cluster_id,
                cluster_queue=name,
                sampled_at=now,
                pending=pending.get(cq_id, 0),
                admitted=admitted.get(cq_id, 0),
                usage={
                    key: base_units(key.rsplit("/", 1)[1], value)
                    for key, value in sorted(held.items())
                },
                cohort=cohort or "",
                nominal=dict(sorted(nominal.get(cq_id, {}).items())),
                local_pending=dict(sorted(local_pending.get(cq_id, {}).items())),
                reservations=len(waited),
                wait_p50_seconds=percentile(waited, 0.5) if waited else None,
                wait_p90_seconds=percentile(waited, 0.9) if waited else None,
            )
        )
    QueueUsageSample.objects.bulk_create(samples)
    QueueUsageSample.objects.filter(sampled_at__lt=now - RETENTION).delete()
    return len(samples)


def interval() -> timedelta:
    """How often ``sample_usage`` runs (the periodic task's schedule)."""
    return timedelta(seconds=settings.USAGE_SAMPLE_INTERVAL_SECONDS)
