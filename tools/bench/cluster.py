"""The two actors of Kueue's scheduler benchmark around the scheduler: the generator, which
creates the shape's workloads on time, and the simulated cluster, which runs each admitted
workload for its ``runtimeMs`` and then finishes it (Kueue's test runner ``controller.go``).

Both talk to the application only through its services (``create_workloads``,
``finish_workloads``), so what they trigger (admission requests after commit, quota
releases) goes through the same code and process model as in production.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import OperationalError, close_old_connections, connection
from django.db.models import Max, QuerySet
from django.utils import timezone

from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.models import AdmissionLease, Workload
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle
from tools.bench.shape import CLASS_LABEL, RUNNING_TIME_LABEL, Creation

logger = logging.getLogger(__name__)

# How often the actors look at the clock and the database. Kueue's runner learns of an
# admission from a watch, at once; a workload admitted between two looks holds its quota
# without running until the next one, so the look is frequent (a read of one row while
# no cycle has committed).
TICK_SECONDS = 0.005
# The most workloads one generator request creates (one INSERT batch per 500).
MAX_BATCH = 5000


@dataclass
class GeneratorStats:
    created: int = 0
    requests: int = 0
    max_lag_ms: float = 0.0
    done: bool = False
    error: str = ""


class Generator(threading.Thread):
    """Creates the timeline's workloads when they are due, every due one in one request."""

    def __init__(self, cluster_id: int, timeline: Iterator[Creation], *, start: float) -> None:
        super().__init__(name="bench-generator", daemon=True)
        self.cluster_id = cluster_id
        self.timeline = timeline
        self.start_at = start
        self.stats = GeneratorStats()
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported by the benchmark, which then stops
            logger.exception("benchmark generator failed")
            self.stats.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.stats.done = True
            close_old_connections()

    def _run(self) -> None:
        from multicluster.models import Cluster

        domain = Cluster.objects.get(pk=self.cluster_id)
        upcoming = iter(self.timeline)
        head = next(upcoming, None)
        while head is not None and not self.stop.is_set():
            wait = self.start_at + head.at_ms / 1000 - time.monotonic()
            if wait > 0:
                time.sleep(min(wait, TICK_SECONDS))
                continue
            elapsed_ms = (time.monotonic() - self.start_at) * 1000
            due: list[Creation] = []
            while head is not None and head.at_ms <= elapsed_ms and len(due) < MAX_BATCH:
                due.append(head)
                head = next(upcoming, None)
            self.stats.max_lag_ms = max(self.stats.max_lag_ms, elapsed_ms - due[0].at_ms)
            services.create_workloads([workload_request(c) for c in due], cluster=domain)
            self.stats.created += len(due)
            self.stats.requests += 1


def workload_request(creation: Creation) -> services.WorkloadRequest:
    """The request that creates ``creation`` as Kueue's generator would: one pod set, its
    cpu, the run time and class labels the simulated cluster and the summary read."""
    template = creation.template
    spec = {
        "queueName": creation.queue,
        "priority": template.priority,
        "podSets": [{
            "name": "main",
            "count": 1,
            "template": {"spec": {"containers": [{
                "name": "main",
                "resources": {"requests": {"cpu": template.request}},
            }]}},
        }],
    }
    labels = {RUNNING_TIME_LABEL: str(template.runtime_ms), CLASS_LABEL: template.class_name}
    return services.WorkloadRequest(creation.queue, creation.name, spec, labels)


@dataclass
class ClusterStats:
    started: int = 0
    finished: int = 0
    lost_runs: int = 0  # evicted (preempted) before their runtime was over
    retries: int = 0  # finish requests that failed (deadlock, lock timeout) and were retried
    error: str = ""
    done: bool = False


@dataclass(order=True)
class _Run:
    due: float
    workload_id: int = field(compare=False)
    version: int = field(compare=False)


class SimulatedCluster(threading.Thread):
    """Starts each admitted workload when it sees it, finishes it ``runtimeMs`` later.

    A workload counts as started when this thread first sees it admitted (not at the
    cycle's timestamp), so the simulated run never overlaps the admission. One that is
    preempted meanwhile changes version and is not finished; once admitted again it runs
    again from the start, as Kueue's runner does. New admissions are found by their
    reservation time: cycles of a domain run one at a time, so a cycle that commits later
    never carries an earlier timestamp than one already seen (less a margin for clocks).
    """

    MARGIN = timedelta(seconds=1)

    def __init__(self, cluster_id: int, *, expected: int) -> None:
        super().__init__(name="bench-cluster", daemon=True)
        self.cluster_id = cluster_id
        self.expected = expected
        self.stats = ClusterStats()
        self.stop = threading.Event()
        self._running: dict[int, int] = {}  # workload id -> version it was started at
        self._due: list[_Run] = []
        self._watermark: datetime | None = None
        self._cycles_seen: int | None = None
        self._cycles_sql = ""

    def run(self) -> None:
        try:
            while not self.stop.is_set() and self.stats.finished < self.expected:
                self._start_admitted()
                self._finish_due()
                time.sleep(self._pause())
        except Exception as exc:
            logger.exception("benchmark cluster failed")
            self.stats.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.stats.done = True
            close_old_connections()

    def _pause(self) -> float:
        """Until the next look: a tick, or less if a run ends sooner. A run ends when its
        time is up, as with the timer Kueue's runner sets, not at the next tick."""
        if not self._due:
            return TICK_SECONDS
        return min(TICK_SECONDS, max(self._due[0].due - time.monotonic(), 0.0))

    def _admitted(self, **lookups: Any) -> QuerySet[Workload]:
        """Admitted workloads not being evicted (a preempted one holds its quota a while)."""
        return cond.filter_by_condition(
            Workload.objects.filter(cluster_id=self.cluster_id, phase=WorkloadPhase.ADMITTED,
                                    active=True, **lookups).order_by(),
            "Evicted", "True", present=False)

    def _start_admitted(self) -> None:
        """Start the workloads admitted since the last look. The recent reservations are
        read as ids and the newest reservation time, which need no conversion in Python;
        only those not running yet are checked for an eviction and their labels read, so a
        tick that finds nothing new parses no JSON and no timestamp but one."""
        cycles = self._cycles_applied()
        if cycles is not None and cycles == self._cycles_seen:
            return  # no admission cycle has committed since the last look
        self._cycles_seen = cycles
        lookups = {}
        if self._watermark is not None:
            lookups["quota_reserved_at__gte"] = self._watermark - self.MARGIN
        recent = Workload.objects.filter(cluster_id=self.cluster_id,
                                         phase=WorkloadPhase.ADMITTED, active=True,
                                         **lookups).order_by()
        # The newest time first: a reservation committed between the two reads is found
        # on the next tick, within the margin.
        newest = recent.aggregate(newest=Max("quota_reserved_at"))["newest"]
        if newest is not None and (self._watermark is None or newest > self._watermark):
            self._watermark = newest
        new = [pk for pk in recent.values_list("id", flat=True) if pk not in self._running]
        if not new:
            return
        for workload_id, version, labels in self._admitted(pk__in=new).values_list(
                "id", "resource_version", "labels"):
            self._start(workload_id, version, labels)

    def _cycles_applied(self) -> int | None:
        """How many admission cycles the domain has applied (``AdmissionLease.cycle``).

        Every call of the admission reconciler that writes decisions moves it on in the
        same transaction, so while it stands still nothing was admitted and the look for
        new admissions (two queries through the ORM, most of this thread's time on a tick)
        is skipped: Kueue's runner is told of admissions by a watch, it does not poll. One
        row read by its key, with its SQL built once. None before the domain's first
        cycle."""
        if not self._cycles_sql:
            meta, quote = AdmissionLease._meta, connection.ops.quote_name
            self._cycles_sql = (
                f"SELECT {quote(meta.get_field('cycle').column)} FROM {quote(meta.db_table)} "
                f"WHERE {quote(meta.get_field('cluster').column)} = %s")
        with connection.cursor() as cursor:
            cursor.execute(self._cycles_sql, [self.cluster_id])
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    def _start(self, workload_id: int, version: int, labels: dict[str, str] | None) -> None:
        runtime_ms = int((labels or {}).get(RUNNING_TIME_LABEL, "0") or 0)
        self._running[workload_id] = version
        heapq.heappush(self._due, _Run(time.monotonic() + runtime_ms / 1000, workload_id,
                                       version))
        self.stats.started += 1

    def _finish_due(self) -> None:
        now = time.monotonic()
        due: dict[int, int] = {}
        while self._due and self._due[0].due <= now:
            run = heapq.heappop(self._due)
            if self._running.get(run.workload_id) == run.version:
                due[run.workload_id] = run.version
        if not due:
            return
        try:
            finished = set(lifecycle.finish_workloads(
                self.cluster_id, due, "Succeeded", "Job finished successfully",
                now=timezone.now()))
        except OperationalError:
            # A deadlock or lock timeout rolled the transaction back; nothing was written.
            # Like a job controller, try again on the next tick.
            logger.warning("benchmark cluster: finishing %d workloads failed; retrying",
                           len(due), exc_info=True)
            self.stats.retries += 1
            for workload_id, version in due.items():
                heapq.heappush(self._due, _Run(now, workload_id, version))
            return
        self.stats.finished += len(finished)
        for workload_id in due:
            del self._running[workload_id]
        changed = set(due) - finished
        if not changed:
            return
        # Preempted since it started: if it is already admitted again, it runs again from
        # now; if it still waits, the watermark query finds it when it is readmitted.
        self.stats.lost_runs += len(changed)
        for workload_id, version, labels, _ in self._admitted(pk__in=changed).values_list("id", "resource_version", "labels",
                                            "quota_reserved_at"):
            self._start(workload_id, version, labels)
