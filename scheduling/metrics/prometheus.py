"""Prometheus metrics with Kueue's names and labels (Kueue's ``pkg/metrics``).

Two kinds of metrics, stored differently because kueueweb runs in several processes:

* **Event metrics** (counters and histograms: admissions, evictions, wait times, ...) are
  recorded by the reconcilers through the hooks below (``quota_reserved``, ``admitted``, ...).
  A hook records only once the current transaction commits, so a decision that is rolled
  back is never counted. The counts live in an ``EventStore``: Redis when ``REDIS_URL`` is
  set (production: web processes and Celery workers all add to the same hashes, one per
  metric family), otherwise the memory of the process (embedded mode: the one ``serve``
  process runs the web server and the reconcilers).
* **State metrics** (gauges: pending workloads, quota, usage, queue status, ...) are computed
  from the database at scrape time by ``KueueCollector``, with a fixed number of queries.
  Kueue keeps them up to date in its cache; here the database *is* the cache, so any process
  can answer a scrape and every answer is current.

Labels are Kueue's, with two deliberate differences:

* every per-queue metric has a leading ``cluster`` label, the name of the scheduling domain
  (``multicluster.Cluster``) the queue lives in: kueueweb holds several domains, and queue
  names are unique only within one. Hooks take the domain's id (``cluster_id``, the
  manager's when omitted); the scrape exports its current name. ``kueue_build_info`` and the
  admission attempt metrics keep Kueue's labels exactly.
* ``replica_role`` is omitted: kueueweb has no leader election between replicas, so the
  label would always read ``standalone``. Custom labels (``metrics.customLabels``) are not
  supported.

Histogram buckets follow Kueue's ``generateExponentialBuckets(n)``: 1, then n-1 buckets
starting at 2.5 and doubling (1, 2.5, 5, 10, ... 10240 for 14 buckets); Kueue uses 16 for
``admission_wait_time_seconds`` and the execution-time histograms, 14 for the other wait
times, and the Prometheus Go client's default buckets for the admission attempt duration.
The quota and usage gauges are always exported (Kueue exports them only with
``metrics.enableClusterQueueResources``), in Kubernetes base units: CPU in cores, memory in
bytes.
"""

from __future__ import annotations

import bisect
import functools
import json
import logging
import math
import platform
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from importlib import metadata
from typing import Any, NamedTuple, Protocol, cast

import redis
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, Min, OuterRef
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from scheduling.cache import snapshots
from scheduling.choices import QueueState, StopPolicy, WorkloadPhase
from scheduling.core.quantities import is_milli_resource, parse_quantity
from scheduling.models import (
    ClusterQueue,
    Cohort,
    FlavorQuota,
    LocalQueue,
    ParkedShape,
    Workload,
    examples,
)

logger = logging.getLogger(__name__)

__all__ = [
    "EVENT_FAMILIES",
    "REGISTRY",
    "EventStore",
    "KueueCollector",
    "MemoryEventStore",
    "RedisEventStore",
    "admission_attempt",
    "admitted",
    "clear_event_metrics",
    "event_store",
    "evicted",
    "finished",
    "gang_scheduling",
    "pods_ready",
    "preempted",
    "quota_reserved",
    "render",
    "replaced_workload_slice",
]

# Where the Redis hashes live: one key per metric family, ``<prefix><family name>``.
# ``settings.METRICS_REDIS_PREFIX`` overrides it (two installations sharing one Redis).
DEFAULT_REDIS_PREFIX = "kueueweb:metrics:"

LocalQueueRef = tuple[str, str]  # (namespace, name), as the hooks receive it

# A bucket bound as the exposition format spells it ("2.5", "+Inf"); typed here because
# prometheus_client leaves the helper unannotated.
_le = cast(Callable[[float], str], floatToGoString)


# --- Buckets -------------------------------------------------------------------------------


def kueue_buckets(count: int) -> tuple[float, ...]:
    """Kueue's wait-time buckets: 1, then ``count - 1`` doubling from 2.5."""
    return (1.0, *(2.5 * 2**index for index in range(count - 1)))


# The Prometheus Go client's DefBuckets, which Kueue's admission attempt histogram uses.
GO_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
WAIT_BUCKETS = kueue_buckets(14)
LONG_BUCKETS = kueue_buckets(16)


# --- Event metric families -----------------------------------------------------------------


class Increment(NamedTuple):
    """Add ``amount`` to ``field`` of the hash of metric family ``family``."""

    family: str
    field: str
    amount: int | float


# What a store's ``add`` takes: an ``Increment``, or the same three values as a tuple.
IncrementTuple = tuple[str, str, int | float]


@functools.lru_cache(maxsize=256)
def _bucket_part(buckets: tuple[float, ...], index: int) -> str:
    """The hash field part of bucket ``index`` of ``buckets`` (past the last: +Inf)."""
    return _le(buckets[index] if index < len(buckets) else math.inf)


def _field(labels: tuple[str, ...], part: str) -> str:
    # JSON keeps label values with any characters apart; ``part`` is "value" (counters),
    # "sum", or a bucket's upper bound (histograms). The text of
    # ``[list(labels), part]``, made of its two halves' texts.
    return f"[{_labels_text(labels)},{_part_text(part)}]"


# The JSON of each series' labels, made once per series rather than once per field: a
# flush of a call that admitted in a thousand queues writes several fields of a few series
# per queue, more distinct fields than a cache of whole fields could keep.
@functools.lru_cache(maxsize=32768)
def _labels_text(labels: tuple[str, ...]) -> str:
    return json.dumps(list(labels), separators=(",", ":"))


@functools.lru_cache(maxsize=256)
def _part_text(part: str) -> str:
    return json.dumps(part)


@dataclass(frozen=True, slots=True)
class EventFamily:
    """A counter (``buckets`` None) or histogram recorded by the hooks.

    A histogram observation adds 1 to the one bucket it falls in (not to every bucket above
    it) and the value to ``sum``: two writes per observation. ``collect`` makes the buckets
    cumulative, as the exposition format wants them, and derives the count from them.
    """

    name: str
    documentation: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] | None = None

    @property
    def per_domain(self) -> bool:
        return self.labels[:1] == ("cluster",)

    def increments(self, labels: Sequence[str], value: float) -> list[Increment]:
        totals: dict[tuple[str, str], int | float] = {}
        self.add_to(totals, tuple(labels), (value,))
        return [Increment(family, name, amount) for (family, name), amount in totals.items()]

    def add_to(self, totals: dict[tuple[str, str], int | float], labels: tuple[str, ...],
               values: Sequence[float]) -> None:
        """Add the increments of observations ``values`` of one series to ``totals`` (keyed
        by family and hash field): ``increments`` without an object per increment, and the
        fields of the series made once for a batch of thousands of observations."""
        if self.buckets is None:
            key = (self.name, _field(labels, "value"))
            totals[key] = totals.get(key, 0) + len(values)
            return
        total = (self.name, _field(labels, "sum"))
        summed = totals.get(total, 0)
        per_bucket: dict[int, int] = {}
        for value in values:
            # The first bucket whose bound is at least the value (a NaN in none of them).
            index = (bisect.bisect_left(self.buckets, value) if value == value
                     else len(self.buckets))
            per_bucket[index] = per_bucket.get(index, 0) + 1
            summed += float(value)
        for index, count in per_bucket.items():
            bucket = (self.name, _field(labels, _bucket_part(self.buckets, index)))
            totals[bucket] = totals.get(bucket, 0) + count
        totals[total] = summed

    def collect(self, fields: Mapping[str, float], domains: Mapping[int, str]) -> Metric:
        """The exposition family from the stored fields of this family's hash.

        Per-domain series are stored under the domain's id and exported under its current
        name (``domains``); series of a deleted domain are dropped, as Kueue drops the
        series of a deleted queue.
        """
        series: dict[tuple[str, ...], dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for raw, amount in fields.items():
            labels, part = json.loads(raw)
            # A hash written under another label set (before an upgrade) is ignored rather
            # than breaking every scrape.
            if len(labels) != len(self.labels):
                continue
            if self.per_domain:
                name = domains.get(int(labels[0])) if labels[0].isdigit() else None
                if name is None:
                    continue
                labels[0] = name
            series[tuple(labels)][part] += amount
        if self.buckets is None:
            counter = CounterMetricFamily(self.name, self.documentation, labels=self.labels)
            for labels, parts in sorted(series.items()):
                counter.add_metric(labels, parts.get("value", 0.0))
            return counter
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=self.labels)
        for labels, parts in sorted(series.items()):
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound in (*self.buckets, math.inf):
                cumulative += parts.get(_le(bound), 0.0)
                buckets.append((_le(bound), cumulative))
            histogram.add_metric(labels, buckets, parts.get("sum", 0.0))
        return histogram


CQ = ("cluster", "cluster_queue")
CQ_PRIORITY = (*CQ, "priority_class")
LQ = ("cluster", "name", "namespace")
EVICTION = ("reason", "underlying_cause", "priority_class")


def _family(
    name: str, documentation: str, labels: tuple[str, ...],
    buckets: tuple[float, ...] | None = None,
) -> EventFamily:
    return EventFamily(f"kueue_{name}", documentation, labels, buckets)


def _local(family: EventFamily, buckets: tuple[float, ...] | None = None) -> EventFamily:
    """The local-queue twin of a cluster-queue family (Kueue's ``local_queue_*`` metrics):
    ``cluster, name, namespace`` in place of ``cluster, cluster_queue``."""
    return EventFamily(
        family.name.replace("kueue_", "kueue_local_queue_", 1),
        family.documentation.replace("cluster queue", "local queue"),
        (*LQ, *family.labels[len(CQ):]),
        buckets or family.buckets,
    )


_WAITED = "Seconds from a workload's creation or last requeue"
ADMISSION_ATTEMPTS = _family(
    "admission_attempts_total",
    "Admission attempts (scheduling cycles); result is success when the attempt admitted at "
    "least one workload, inadmissible otherwise.", ("result",))
ADMISSION_ATTEMPT_DURATION = _family(
    "admission_attempt_duration_seconds",
    "Duration of an admission attempt, by result (success or inadmissible).",
    ("result",), GO_DEFAULT_BUCKETS)
QUOTA_RESERVED = _family(
    "quota_reserved_workloads_total",
    "Workloads that got a quota reservation in the cluster queue.", CQ_PRIORITY)
QUOTA_RESERVED_WAIT = _family(
    "quota_reserved_wait_time_seconds", f"{_WAITED} to its quota reservation.",
    CQ_PRIORITY, WAIT_BUCKETS)
ADMITTED = _family(
    "admitted_workloads_total", "Workloads admitted in the cluster queue.", CQ_PRIORITY)
ADMISSION_WAIT = _family(
    "admission_wait_time_seconds", f"{_WAITED} to its admission.", CQ_PRIORITY, LONG_BUCKETS)
ADMISSION_CHECKS_WAIT = _family(
    "admission_checks_wait_time_seconds",
    "Seconds from a workload's quota reservation to its admission (its admission checks).",
    CQ_PRIORITY, WAIT_BUCKETS)
READY_WAIT = _family(
    "ready_wait_time_seconds", f"{_WAITED} until its pods were ready.",
    CQ_PRIORITY, WAIT_BUCKETS)
ADMITTED_UNTIL_READY_WAIT = _family(
    "admitted_until_ready_wait_time_seconds",
    "Seconds from a workload's admission until its pods were ready.", CQ_PRIORITY, WAIT_BUCKETS)
EVICTED = _family(
    "evicted_workloads_total",
    "Workload evictions in the cluster queue, by the Evicted condition's reason and its "
    "underlying cause.", (*CQ, *EVICTION))
EVICTED_ONCE = _family(
    "evicted_workloads_once_total",
    "Workloads evicted at least once: each workload counts at its first eviction only.",
    (*CQ, *EVICTION))
PREEMPTED = _family(
    "preempted_workloads_total",
    "Workloads preempted on behalf of a workload of preempting_cluster_queue, by reason "
    "(InClusterQueue, InCohortReclamation, InCohortFairSharing, "
    "InCohortReclaimWhileBorrowing).", ("cluster", "preempting_cluster_queue", "reason"))
FINISHED = _family(
    "finished_workloads_total", "Workloads that finished in the cluster queue.", CQ_PRIORITY)
EXECUTION_TIME = _family(
    "execution_time_seconds",
    "Seconds a finished workload was admitted, summed over its admissions.",
    CQ_PRIORITY, LONG_BUCKETS)
REPLACED_SLICES = _family(
    "replaced_workload_slices_total",
    "Workload slices replaced by a new slice of the same elastic job.", CQ)
# Gang scheduling (the Kubernetes v1.35 Workload API's gang policy) is kube-scheduler's, not
# Kueue's: Kueue has no such metric, so these carry kueueweb's prefix.
GANG = ("cluster",)
GANG_ATTEMPTS = EventFamily(
    "kueueweb_gang_scheduling_attempts_total",
    "Gang scheduling attempts on the cluster: a gang's first attempt once its pods are there, "
    "and each retry after a timeout.", GANG)
GANG_SUCCESSES = EventFamily(
    "kueueweb_gang_scheduling_successes_total",
    "Gang scheduling attempts that bound the gang (at least minCount pods placed at once).",
    GANG)
GANG_TIMEOUTS = EventFamily(
    "kueueweb_gang_scheduling_timeouts_total",
    "Gang scheduling attempts rejected after the gang scheduling timeout (5 minutes).", GANG)
LQ_QUOTA_RESERVED = _local(QUOTA_RESERVED)
LQ_QUOTA_RESERVED_WAIT = _local(QUOTA_RESERVED_WAIT)
LQ_ADMITTED = _local(ADMITTED)
# Kueue gives the local-queue admission wait 14 buckets, the cluster-queue one 16.
LQ_ADMISSION_WAIT = _local(ADMISSION_WAIT, WAIT_BUCKETS)
LQ_ADMISSION_CHECKS_WAIT = _local(ADMISSION_CHECKS_WAIT)
LQ_READY_WAIT = _local(READY_WAIT)
LQ_ADMITTED_UNTIL_READY_WAIT = _local(ADMITTED_UNTIL_READY_WAIT)
LQ_EVICTED = _local(EVICTED)
LQ_FINISHED = _local(FINISHED)
LQ_EXECUTION_TIME = _local(EXECUTION_TIME)

EVENT_FAMILIES: tuple[EventFamily, ...] = (
    ADMISSION_ATTEMPTS, ADMISSION_ATTEMPT_DURATION,
    QUOTA_RESERVED, QUOTA_RESERVED_WAIT, ADMITTED, ADMISSION_WAIT, ADMISSION_CHECKS_WAIT,
    READY_WAIT, ADMITTED_UNTIL_READY_WAIT, EVICTED, EVICTED_ONCE, PREEMPTED,
    FINISHED, EXECUTION_TIME, REPLACED_SLICES, GANG_ATTEMPTS, GANG_SUCCESSES, GANG_TIMEOUTS,
    LQ_QUOTA_RESERVED, LQ_QUOTA_RESERVED_WAIT, LQ_ADMITTED, LQ_ADMISSION_WAIT,
    LQ_ADMISSION_CHECKS_WAIT, LQ_READY_WAIT, LQ_ADMITTED_UNTIL_READY_WAIT, LQ_EVICTED,
    LQ_FINISHED, LQ_EXECUTION_TIME,
)


# --- Event stores --------------------------------------------------------------------------


class EventStore(Protocol):
    """Where event metrics accumulate: a hash of numeric fields per metric family."""

    def add(self, increments: Sequence[IncrementTuple]) -> None:
        """Apply the increments of one event, all together."""

    def read(self, families: Sequence[str]) -> dict[str, dict[str, float]]:
        """Every field of each family's hash (a family never written maps to {})."""

    def clear(self) -> None:
        """Forget everything recorded (tests, and operators resetting counters)."""


class MemoryEventStore:
    """The store of embedded mode: this process's memory, behind a lock (the reconciler
    thread writes while request threads read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hashes: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def add(self, increments: Sequence[IncrementTuple]) -> None:
        with self._lock:
            for family, hash_field, amount in increments:
                self._hashes[family][hash_field] += amount

    def read(self, families: Sequence[str]) -> dict[str, dict[str, float]]:
        with self._lock:
            return {name: dict(self._hashes.get(name, {})) for name in families}

    def clear(self) -> None:
        with self._lock:
            self._hashes.clear()


class RedisEventStore:
    """The store of production: one Redis hash per family, shared by every process.

    HINCRBY / HINCRBYFLOAT are atomic in Redis, so concurrent writers never lose an
    increment; the writes of one event go in one MULTI/EXEC pipeline, so a scrape never
    sees a histogram's bucket without its sum.
    """

    def __init__(self, client: redis.Redis, prefix: str = DEFAULT_REDIS_PREFIX) -> None:
        self.client = client
        self.prefix = prefix

    def _key(self, family: str) -> str:
        return self.prefix + family

    def add(self, increments: Sequence[IncrementTuple]) -> None:
        pipe = self.client.pipeline(transaction=True)
        for family, hash_field, amount in increments:
            if isinstance(amount, int):
                pipe.hincrby(self._key(family), hash_field, amount)
            else:
                pipe.hincrbyfloat(self._key(family), hash_field, amount)
        try:
            pipe.execute()
        except redis.RedisError:
            # Metrics are best effort: a Redis outage must not fail the reconciler whose
            # decision is already committed. The lost counts are logged.
            logger.warning("metrics: could not record %d increments", len(increments),
                           exc_info=True)

    def read(self, families: Sequence[str]) -> dict[str, dict[str, float]]:
        # Unlike ``add``, errors propagate: a failed scrape is better than counters that
        # seem to drop to zero.
        pipe = self.client.pipeline(transaction=True)
        for family in families:
            pipe.hgetall(self._key(family))
        return {
            family: {key.decode(): float(value) for key, value in stored.items()}
            for family, stored in zip(families, pipe.execute(), strict=True)
        }

    def clear(self) -> None:
        self.client.delete(*(self._key(family.name) for family in EVENT_FAMILIES))


_memory_store = MemoryEventStore()
_redis_clients: dict[str, redis.Redis] = {}
_redis_clients_lock = threading.Lock()


def event_store() -> EventStore:
    """Redis when ``settings.REDIS_URL`` is set, else this process's memory.

    The choice follows REDIS_URL, not RECONCILER_MODE: whoever records and whoever scrapes
    must agree on the store, and every process of one installation sees the same REDIS_URL.
    """
    url: str = settings.REDIS_URL
    if not url:
        return _memory_store
    with _redis_clients_lock:
        client = _redis_clients.get(url)
        if client is None:
            # One connection pool per process; redis-py's pool reconnects after a fork
            # (Celery's prefork workers) by checking the pid.
            client = _redis_clients[url] = redis.Redis.from_url(url)
    prefix: str = getattr(settings, "METRICS_REDIS_PREFIX", DEFAULT_REDIS_PREFIX)
    return RedisEventStore(client, prefix)


def clear_event_metrics() -> None:
    """Reset every counter and histogram in the current store."""
    event_store().clear()


# --- Recording hooks -----------------------------------------------------------------------


class _Sample(NamedTuple):
    family: EventFamily
    labels: tuple[str, ...]  # without the leading ``cluster`` label of per-domain families
    value: float


_batch = threading.local()


@contextmanager
def batch() -> Iterator[None]:
    """Record the hooks called inside as one write to the store when the transaction
    commits, not one write per hook: a reconciler that decides about hundreds of workloads
    in one transaction wraps it in this. Identical series are summed first. Nothing is
    recorded if the block raises (its transaction rolls back)."""
    if getattr(_batch, "samples", None) is not None:
        yield  # an outer batch records these
        return
    collected: list[tuple[Sequence[_Sample], int | None]] = []
    _batch.samples = collected
    try:
        yield
    finally:
        _batch.samples = None
    if collected:
        transaction.on_commit(lambda: _flush(collected), robust=True)


def _record(samples: Sequence[_Sample], cluster_id: int | None) -> None:
    """Add ``samples`` to the store once the current transaction commits (at once outside
    a transaction); dropped if it rolls back.

    Per-domain series are stored under the domain's id (names can change; the scrape
    exports the current one); without ``cluster_id`` the manager's domain is meant.
    """
    pending: list[tuple[Sequence[_Sample], int | None]] | None = getattr(
        _batch, "samples", None)
    if pending is not None:
        pending.append((samples, cluster_id))
        return
    # robust: an error here is logged, never raised into the code that just committed.
    transaction.on_commit(lambda: _flush([(samples, cluster_id)]), robust=True)


def _flush(groups: Sequence[tuple[Sequence[_Sample], int | None]]) -> None:
    from multicluster.models import Cluster

    manager: int | None = None
    if any(cluster_id is None and any(s.family.per_domain for s in samples)
           for samples, cluster_id in groups):
        manager = Cluster.objects.manager_id()
    # The observations of each series first: a batch of hundreds of admissions observes a
    # few series hundreds of times each.
    series: dict[tuple[str, tuple[str, ...]], tuple[EventFamily, list[float]]] = {}
    for samples, cluster_id in groups:
        domain = str((cluster_id if cluster_id is not None else manager) or "")
        for family, labels, value in samples:
            key = (family.name, (domain, *labels) if family.per_domain else labels)
            found = series.get(key)
            if found is None:
                series[key] = (family, [value])
            else:
                found[1].append(value)
    totals: dict[tuple[str, str], int | float] = {}
    for (_, labels), (family, values) in series.items():
        family.add_to(totals, labels, values)
    # Plain tuples, not ``Increment``s: a flush writes thousands, and a named tuple costs
    # several times as much to make.
    event_store().add([(family, name, amount) for (family, name), amount in totals.items()])


def _seconds(value: float) -> float:
    # Clocks of different processes may disagree by a little; a wait is never negative.
    return max(0.0, float(value))


def _lq_labels(local_queue: LocalQueueRef) -> tuple[str, str]:
    namespace, name = local_queue
    return name, namespace


def quota_reserved(
    cluster_queue: str,
    priority_class: str,
    wait_seconds: float,
    *,
    local_queue: LocalQueueRef | None = None,
    cluster_id: int | None = None,
) -> None:
    """A workload got quota in ``cluster_queue`` after waiting ``wait_seconds`` since its
    creation or last requeue (Kueue ``QuotaReservedWorkload``).

    ``local_queue`` is (namespace, name) and adds the local-queue series. ``cluster_id`` is
    the domain's (``multicluster.Cluster``) id, the manager's when omitted; every hook below
    takes it too.
    """
    wait = _seconds(wait_seconds)
    labels = (cluster_queue, priority_class)
    samples = [_Sample(QUOTA_RESERVED, labels, 1), _Sample(QUOTA_RESERVED_WAIT, labels, wait)]
    if local_queue is not None:
        lq = (*_lq_labels(local_queue), priority_class)
        samples += [_Sample(LQ_QUOTA_RESERVED, lq, 1), _Sample(LQ_QUOTA_RESERVED_WAIT, lq, wait)]
    _record(samples, cluster_id)


def admitted(
    cluster_queue: str,
    priority_class: str,
    wait_seconds: float,
    checks_wait_seconds: float,
    *,
    local_queue: LocalQueueRef | None = None,
    cluster_id: int | None = None,
) -> None:
    """A workload was admitted: ``wait_seconds`` since creation or requeue, of which
    ``checks_wait_seconds`` since its quota reservation (Kueue ``AdmittedWorkload`` and
    ``ReportAdmissionChecksWaitTime``)."""
    wait, checks = _seconds(wait_seconds), _seconds(checks_wait_seconds)
    labels = (cluster_queue, priority_class)
    samples = [
        _Sample(ADMITTED, labels, 1),
        _Sample(ADMISSION_WAIT, labels, wait),
        _Sample(ADMISSION_CHECKS_WAIT, labels, checks),
    ]
    if local_queue is not None:
        lq = (*_lq_labels(local_queue), priority_class)
        samples += [
            _Sample(LQ_ADMITTED, lq, 1),
            _Sample(LQ_ADMISSION_WAIT, lq, wait),
            _Sample(LQ_ADMISSION_CHECKS_WAIT, lq, checks),
        ]
    _record(samples, cluster_id)


def evicted(
    cluster_queue: str,
    reason: str,
    underlying_cause: str,
    priority_class: str,
    *,
    first_time: bool = False,
    local_queue: LocalQueueRef | None = None,
    cluster_id: int | None = None,
) -> None:
    """A workload holding quota in ``cluster_queue`` was evicted (Kueue
    ``ReportEvictedWorkloads``); ``first_time`` also counts it in the once-per-workload
    counter (``ReportEvictedWorkloadsOnce``)."""
    labels = (cluster_queue, reason, underlying_cause, priority_class)
    samples = [_Sample(EVICTED, labels, 1)]
    if first_time:
        samples.append(_Sample(EVICTED_ONCE, labels, 1))
    if local_queue is not None:
        lq = (*_lq_labels(local_queue), reason, underlying_cause, priority_class)
        samples.append(_Sample(LQ_EVICTED, lq, 1))
    _record(samples, cluster_id)


def preempted(
    preempting_cluster_queue: str, reason: str, *, cluster_id: int | None = None
) -> None:
    """A workload was preempted for a workload of ``preempting_cluster_queue`` (Kueue
    ``ReportPreemption``). The victim's eviction is recorded separately with ``evicted``."""
    _record([_Sample(PREEMPTED, (preempting_cluster_queue, reason), 1)], cluster_id)


def pods_ready(
    cluster_queue: str,
    priority_class: str,
    ready_wait_seconds: float,
    admitted_until_ready_seconds: float,
    *,
    local_queue: LocalQueueRef | None = None,
    cluster_id: int | None = None,
) -> None:
    """A workload's pods became ready: ``ready_wait_seconds`` after its creation or requeue,
    ``admitted_until_ready_seconds`` after its admission (Kueue ``ReadyWaitTime`` and
    ``ReportAdmittedUntilReadyWaitTime``)."""
    ready, since_admitted = _seconds(ready_wait_seconds), _seconds(admitted_until_ready_seconds)
    labels = (cluster_queue, priority_class)
    samples = [
        _Sample(READY_WAIT, labels, ready),
        _Sample(ADMITTED_UNTIL_READY_WAIT, labels, since_admitted),
    ]
    if local_queue is not None:
        lq = (*_lq_labels(local_queue), priority_class)
        samples += [
            _Sample(LQ_READY_WAIT, lq, ready),
            _Sample(LQ_ADMITTED_UNTIL_READY_WAIT, lq, since_admitted),
        ]
    _record(samples, cluster_id)


def finished(
    cluster_queue: str,
    priority_class: str,
    execution_seconds: float,
    *,
    local_queue: LocalQueueRef | None = None,
    cluster_id: int | None = None,
) -> None:
    """A workload finished after being admitted for ``execution_seconds`` in total (Kueue
    ``IncrementFinishedWorkloadTotal`` and ``ReportExecutionTime``)."""
    execution = _seconds(execution_seconds)
    labels = (cluster_queue, priority_class)
    samples = [_Sample(FINISHED, labels, 1), _Sample(EXECUTION_TIME, labels, execution)]
    if local_queue is not None:
        lq = (*_lq_labels(local_queue), priority_class)
        samples += [_Sample(LQ_FINISHED, lq, 1), _Sample(LQ_EXECUTION_TIME, lq, execution)]
    _record(samples, cluster_id)


def admission_attempt(result: str, duration_seconds: float) -> None:
    """One admission attempt (scheduling cycle) ended with ``result`` "success" (at least
    one workload admitted) or "inadmissible" (Kueue ``AdmissionAttempt``)."""
    duration = _seconds(duration_seconds)
    _record([
        _Sample(ADMISSION_ATTEMPTS, (result,), 1),
        _Sample(ADMISSION_ATTEMPT_DURATION, (result,), duration),
    ], None)


def replaced_workload_slice(cluster_queue: str, *, cluster_id: int | None = None) -> None:
    """An elastic job's workload slice was replaced by its successor (Kueue
    ``ReportReplacedWorkloadSlices``)."""
    _record([_Sample(REPLACED_SLICES, (cluster_queue,), 1)], cluster_id)


def gang_scheduling(*, cluster_id: int, attempts: int = 0, successes: int = 0,
                    timeouts: int = 0) -> None:
    """Gang scheduling on cluster ``cluster_id``: ``attempts`` begun, ``successes`` (gangs
    bound) and ``timeouts`` (attempts rejected after the gang scheduling timeout). The
    simulated cluster counts what its own gang placement does; a Kubernetes cluster counts
    what kueueweb observes of it (``multicluster.kube.gangs``)."""
    samples = ([_Sample(GANG_ATTEMPTS, (), 1)] * attempts
               + [_Sample(GANG_SUCCESSES, (), 1)] * successes
               + [_Sample(GANG_TIMEOUTS, (), 1)] * timeouts)
    if samples:
        _record(samples, cluster_id)


# --- State metrics (from the database at scrape time) --------------------------------------

CQ_STATUSES = ("pending", "active", "terminating")
PENDING_STATUSES = ("active", "inadmissible")
RESOURCE = ("cluster", "cohort", "cluster_queue", "flavor", "resource")


def _condition_false(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "False" for c in conditions or ())


def _quantity(value: str | None) -> float:
    """A quota in base units (cores, bytes); an unset limit is +Inf, as in Kueue."""
    return math.inf if value is None else float(parse_quantity(value))


def _usage(held: Mapping[str, Any]) -> Iterator[tuple[str, str, Fraction]]:
    """(flavor, resource, amount in base units) a workload holds, from a row with its
    admission, reclaimable pods and pod sets (``snapshots.held_usage``, as the cycle
    counts it)."""
    for fr, amount in snapshots.held_usage(held).items():
        yield fr.flavor, fr.resource, Fraction(amount, 1000 if is_milli_resource(fr.resource)
                                               else 1)


@dataclass(slots=True)
class _QueueCounts:
    """Workload counts of one cluster queue or local queue."""

    pending: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PENDING_STATUSES, 0))
    reserving: int = 0
    admitted: int = 0
    finished: int = 0


class _State:
    """Everything the gauges report, read with eight queries whatever the number of queues
    and workloads (no query per queue or per workload)."""

    def __init__(self, clusters: Mapping[int, str]) -> None:
        from multicluster.models import AdmissionCheck

        self.clusters = clusters
        cohorts = {c["id"]: c for c in Cohort.objects.values("id", "name", "parent_id")}
        self.cohorts = {cid: (c["name"], _root_name(cohorts, cid)) for cid, c in cohorts.items()}
        self.cluster_queues = list(
            ClusterQueue.objects.order_by("cluster_id", "name").values(
                "id", "name", "cluster_id", "cohort_id", "stop_policy", "admission_checks",
                "conditions",
            )
        )
        checks = {
            (c["cluster_id"], c["name"]): c["conditions"]
            for c in AdmissionCheck.objects.values("cluster_id", "name", "conditions")
        }
        self.status = {cq["id"]: _cluster_queue_status(cq, checks) for cq in self.cluster_queues}
        self.quotas = list(
            FlavorQuota.objects.filter(cluster_queue__isnull=False)
            .order_by("cluster_queue_id", "resource_group", "position", "id")
            .values("cluster_queue_id", "flavor__name", "resource", "nominal_quota",
                    "borrowing_limit", "lending_limit")
        )
        self.local_queues = list(
            LocalQueue.objects.order_by("cluster_id", "namespace", "name")
            .values("id", "name", "namespace", "cluster_id", "cluster_queue_id")
        )
        self.cq_counts = {cq["id"]: _QueueCounts() for cq in self.cluster_queues}
        self.lq_counts = {lq["id"]: _QueueCounts() for lq in self.local_queues}
        # (cluster queue id, flavor, resource) -> held by workloads reserving / admitted
        self.reserved: dict[tuple[int, str, str], Fraction] = defaultdict(Fraction)
        self.used: dict[tuple[int, str, str], Fraction] = defaultdict(Fraction)
        self._count_workloads()

    def _counts(self, cq_id: int | None, lq_id: int | None) -> list[_QueueCounts]:
        """The counts a workload adds to: its cluster queue's and its local queue's."""
        found = (self.cq_counts.get(cq_id or 0), self.lq_counts.get(lq_id or 0))
        return [counts for counts in found if counts is not None]

    def _count_workloads(self) -> None:
        lq_cq = {lq["id"]: lq["cluster_queue_id"] for lq in self.local_queues}
        # 1. Pending workloads, grouped in the database; a pending workload belongs to the
        #    cluster queue of its local queue.
        pending = (
            Workload.objects.filter(
                phase=WorkloadPhase.PENDING, active=True, local_queue__isnull=False
            )
            .values("local_queue_id", "queue_state").annotate(n=Count("*")).order_by()
        )
        # Active workloads of a parked shape wait in the inadmissible set (Kueue's bulk move).
        behind_shapes = dict(
            Workload.objects.filter(
                phase=WorkloadPhase.PENDING, active=True, queue_state=QueueState.ACTIVE,
                preempting=False, local_queue__isnull=False,
            ).filter(Exists(ParkedShape.objects.filter(
                cluster_queue_id=OuterRef("local_queue__cluster_queue_id"),
                priority=OuterRef("priority"), pod_sets_hash=OuterRef("pod_sets_hash"),
            ))).values("local_queue_id").annotate(n=Count("*")).order_by()
            .values_list("local_queue_id", "n")
        )
        for group in pending:
            cq_id = lq_cq.get(group["local_queue_id"])
            if group["queue_state"] == QueueState.ACTIVE:
                moved = behind_shapes.get(group["local_queue_id"], 0)
                if moved:
                    for counts in self._counts(cq_id, group["local_queue_id"]):
                        counts.pending["inadmissible"] += moved
                    group["n"] -= moved
            status = "active" if group["queue_state"] == QueueState.ACTIVE else "inadmissible"
            # Kueue counts every pending workload of an inactive queue as inadmissible.
            if self.status.get(cq_id or 0) != "active":
                status = "inadmissible"
            for counts in self._counts(cq_id, group["local_queue_id"]):
                counts.pending[status] += group["n"]
        # 2. Workloads holding quota: their admissions make the usage. Counted in the
        #    database per usage hash (the ``workload_holding`` index), so workloads of one
        #    shape are one group, and what a hash holds is read from one of them.
        holding = list(Workload.objects.filter(
            phase__in=(WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED), active=True
        ).values("cluster_queue_id", "local_queue_id", "phase", "usage_hash")
            .annotate(n=Count("*"), example=Min("id")).order_by())
        held_by = examples("usage_hash", (wl["example"] for wl in holding),
                           "admission", "reclaimable_pods", "pod_sets")
        for wl in holding:
            n = wl["n"]
            is_admitted = wl["phase"] == WorkloadPhase.ADMITTED
            for counts in self._counts(wl["cluster_queue_id"], wl["local_queue_id"]):
                counts.reserving += n
                counts.admitted += n if is_admitted else 0
            held = held_by.get(wl["usage_hash"])
            if wl["cluster_queue_id"] is None or held is None or not held["admission"]:
                continue
            for flavor, resource, amount in _usage(held):
                key = (wl["cluster_queue_id"], flavor, resource)
                self.reserved[key] += amount * n
                if is_admitted:
                    self.used[key] += amount * n
        # 3. Finished workloads count in the queue that admitted them, else their queue's.
        #    Per domain, so that the (cluster, phase, ...) index answers it: given ``phase``
        #    alone, SQLite scans the whole table.
        done = (
            Workload.objects.filter(cluster_id__in=list(self.clusters),
                                    phase=WorkloadPhase.FINISHED)
            .values("cluster_queue_id", "local_queue_id").annotate(n=Count("*")).order_by()
        )
        for group in done:
            owner = group["cluster_queue_id"] or lq_cq.get(group["local_queue_id"])
            for counts in self._counts(owner, group["local_queue_id"]):
                counts.finished += group["n"]

    def cohort_of(self, cohort_id: int | None) -> tuple[str, str]:
        """(parent cohort, root cohort) names; empty without a cohort."""
        return self.cohorts.get(cohort_id or 0, ("", ""))


def _root_name(cohorts: Mapping[int, Mapping[str, Any]], cohort_id: int) -> str:
    """The name of the root of a cohort's tree (stops, rather than loops, on a cycle)."""
    seen = {cohort_id}
    current = cohort_id
    while (parent := cohorts[current]["parent_id"]) in cohorts and parent not in seen:
        seen.add(parent)
        current = parent
    return str(cohorts[current]["name"])


def _cluster_queue_status(cq: Mapping[str, Any], checks: Mapping[tuple[int, str], Any]) -> str:
    """Kueue's cluster queue status: ``pending`` while stopped, marked inactive, or while a
    required admission check is missing or inactive; else ``active``. kueueweb deletes
    queues at once, so ``terminating`` is never current."""
    if cq["stop_policy"] != StopPolicy.NONE or _condition_false(cq["conditions"], "Active"):
        return "pending"
    for entry in cq["admission_checks"] or ():
        key = (cq["cluster_id"], entry.get("name"))
        if key not in checks or _condition_false(checks[key], "Active"):
            return "pending"
    return "active"


def _gauge(name: str, documentation: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"kueue_{name}", documentation, labels=labels)


def _cluster_queue_gauges(state: _State) -> list[Metric]:
    pending = _gauge("pending_workloads",
                     "Pending workloads of the cluster queue: active ones wait in the queue, "
                     "inadmissible ones are parked until something changes.", (*CQ, "status"))
    reserving = _gauge("reserving_active_workloads",
                       "Workloads holding a quota reservation in the cluster queue.", CQ)
    admitted_now = _gauge("admitted_active_workloads",
                          "Admitted workloads of the cluster queue that are active.", CQ)
    finished_now = _gauge("finished_workloads", "Finished workloads of the cluster queue.", CQ)
    status = _gauge("cluster_queue_status",
                    "1 for the cluster queue's current status (pending, active or "
                    "terminating), 0 for the others.", (*CQ, "status"))
    info = _gauge("cluster_queue_info",
                  "Always 1; the labels name the queue's parent cohort and the root of its "
                  "cohort tree (empty without a cohort).", (*CQ, "parent_cohort", "root_cohort"))
    for cq in state.cluster_queues:
        labels = [state.clusters[cq["cluster_id"]], cq["name"]]
        counts = state.cq_counts[cq["id"]]
        for key in PENDING_STATUSES:
            pending.add_metric([*labels, key], counts.pending[key])
        reserving.add_metric(labels, counts.reserving)
        admitted_now.add_metric(labels, counts.admitted)
        finished_now.add_metric(labels, counts.finished)
        for key in CQ_STATUSES:
            status.add_metric([*labels, key], float(key == state.status[cq["id"]]))
        info.add_metric([*labels, *state.cohort_of(cq["cohort_id"])], 1.0)
    return [pending, reserving, admitted_now, finished_now, status, info]


def _quota_gauges(state: _State) -> list[Metric]:
    units = "in base units (CPU cores, bytes)"
    nominal = _gauge("cluster_queue_nominal_quota",
                     f"Nominal quota of the cluster queue per flavor and resource, {units}.",
                     RESOURCE)
    borrowing = _gauge("cluster_queue_borrowing_limit",
                       f"Borrowing limit per flavor and resource, {units}; +Inf when unset.",
                       RESOURCE)
    lending = _gauge("cluster_queue_lending_limit",
                     f"Lending limit per flavor and resource, {units}; +Inf when unset.",
                     RESOURCE)
    reservation = _gauge("cluster_queue_resource_reservation",
                         "Quota reserved by the cluster queue's workloads (quota reserved or "
                         f"admitted), per flavor and resource, {units}.", RESOURCE)
    usage = _gauge("cluster_queue_resource_usage",
                   "Quota used by the cluster queue's admitted workloads, per flavor and "
                   f"resource, {units}.", RESOURCE)
    by_id = {cq["id"]: cq for cq in state.cluster_queues}
    for quota in state.quotas:
        cq = by_id.get(quota["cluster_queue_id"])
        if cq is None:
            continue
        flavor, resource = quota["flavor__name"], quota["resource"]
        parent, _ = state.cohort_of(cq["cohort_id"])
        labels = [state.clusters[cq["cluster_id"]], parent, cq["name"], flavor, resource]
        held = (cq["id"], flavor, resource)
        nominal.add_metric(labels, _quantity(quota["nominal_quota"]))
        borrowing.add_metric(labels, _quantity(quota["borrowing_limit"]))
        lending.add_metric(labels, _quantity(quota["lending_limit"]))
        reservation.add_metric(labels, float(state.reserved.get(held, Fraction())))
        usage.add_metric(labels, float(state.used.get(held, Fraction())))
    return [nominal, borrowing, lending, reservation, usage]


def _local_queue_gauges(state: _State) -> list[Metric]:
    pending = _gauge("local_queue_pending_workloads",
                     "Pending workloads of the local queue, by status (active or "
                     "inadmissible).", (*LQ, "status"))
    reserving = _gauge("local_queue_reserving_active_workloads",
                       "Workloads of the local queue holding a quota reservation.", LQ)
    admitted_now = _gauge("local_queue_admitted_active_workloads",
                          "Admitted workloads of the local queue that are active.", LQ)
    finished_now = _gauge("local_queue_finished_workloads",
                          "Finished workloads of the local queue.", LQ)
    for lq in state.local_queues:
        labels = [state.clusters[lq["cluster_id"]], lq["name"], lq["namespace"]]
        counts = state.lq_counts[lq["id"]]
        for key in PENDING_STATUSES:
            pending.add_metric([*labels, key], counts.pending[key])
        reserving.add_metric(labels, counts.reserving)
        admitted_now.add_metric(labels, counts.admitted)
        finished_now.add_metric(labels, counts.finished)
    return [pending, reserving, admitted_now, finished_now]


def _build_info() -> Metric:
    """kueue_build_info with Kueue's label names; go_version and compiler describe the
    Python interpreter instead."""
    try:
        version = metadata.version("kueueweb")
    except metadata.PackageNotFoundError:
        version = "unknown"
    gauge = _gauge("build_info", "Always 1; the labels describe this kueueweb build.",
                   ("git_version", "git_commit", "build_date", "go_version", "compiler",
                    "platform"))
    gauge.add_metric(
        [version, "", "", f"python{platform.python_version()}",
         platform.python_implementation(), f"{platform.system().lower()}/{platform.machine()}"],
        1.0,
    )
    return gauge


class KueueCollector:
    """The prometheus_client collector behind ``/metrics``: build info, the event metrics
    from the store, and the state gauges from the database."""

    def collect(self) -> Iterator[Metric]:
        from multicluster.models import Cluster

        domains = dict(Cluster.objects.values_list("id", "name"))
        yield _build_info()
        stored = event_store().read([family.name for family in EVENT_FAMILIES])
        for family in EVENT_FAMILIES:
            yield family.collect(stored[family.name], domains)
        state = _State(domains)
        yield from _cluster_queue_gauges(state)
        yield from _quota_gauges(state)
        yield from _local_queue_gauges(state)


# auto_describe stays off: registering must not query the database.
REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(KueueCollector())


def render() -> bytes:
    """Every kueueweb metric in the Prometheus text format (``CONTENT_TYPE_LATEST``)."""
    return generate_latest(REGISTRY)
