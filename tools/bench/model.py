"""A benchmark shape run through the admission engine alone, in virtual time.

``bench scheduler --model`` answers a question the real run cannot: how fast can a
scheduler with Kueue's behaviour go on this shape at all? Everything here costs no time —
a cycle, writing its decisions, the cluster starting a pod, the eviction of a victim —
while the parts of Kueue's behaviour that do take time are kept: the shape's creation
times, each workload's run time, and the batched requeue of parked workloads
(``requeueBatchPeriod``: capacity freed in a cohort tree unparks its workloads that long
after the first release). The engine is the application's own (``scheduling.core``:
``QueueManager`` and ``run_cycle``), so the figures are the floor the real run is measured
against: what is left between the two is the cost of our implementation.

Nothing here touches the database; the summary has the same measures as the real run.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduling.core import (
    ClusterQueueSpec,
    CohortSpec,
    CyclePolicy,
    FlavorQuotas,
    LabelSelector,
    PodSet,
    PreemptionPolicy,
    QueueManager,
    ReclaimWithinCohortPolicy,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    Snapshot,
    WithinClusterQueuePolicy,
    Workload,
    WorkloadInfo,
    quantity_to_int,
    run_cycle,
)
from scheduling.core.ordering import EVICTED_BY_PREEMPTION
from tools.bench.report import (
    Timing,
    admission_times,
    class_figures,
    comparison,
    creation_lag,
    measure_lines,
    queue_limits,
    replay,
    usage_percent_per_class,
)
from tools.bench.shape import Creation, Shape

FLAVOR = "rf"
# Virtual time 0, for the event replay that checks quota.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
# Kueue's requeueBatchPeriod (pkg/cache/queue/inadmissible_workloads.go).
KUEUE_REQUEUE_BATCH_SECONDS = 1.0


def specs(shape: Shape) -> tuple[list[CohortSpec], list[ClusterQueueSpec]]:
    """The shape's cohorts and cluster queues as engine specs (one flavor, cpu only)."""
    queues = shape.queues()
    cohorts = [CohortSpec(name) for name in sorted({q.cohort for q in queues})]
    cqs = []
    for queue in queues:
        limit = queue.spec.borrowing_limit
        quota = ResourceQuota(
            quantity_to_int("cpu", queue.spec.nominal_quota),
            borrowing_limit=quantity_to_int("cpu", limit) if limit is not None else None,
        )
        cqs.append(ClusterQueueSpec(
            name=queue.name,
            cohort=queue.cohort,
            resource_groups=(ResourceGroup(("cpu",), (FlavorQuotas(FLAVOR, {"cpu": quota}),)),),
            namespace_selector=LabelSelector(),
            preemption=PreemptionPolicy(
                within_cluster_queue=WithinClusterQueuePolicy(queue.spec.within_cluster_queue),
                reclaim_within_cohort=ReclaimWithinCohortPolicy(queue.spec.reclaim_within_cohort),
            ),
        ))
    return cohorts, cqs


def workload_for(creation: Creation, *, now: float, name: str | None = None) -> Workload:
    """The engine's workload for a creation of the shape (one pod of the template's cpu),
    created at ``now``; ``name`` tells apart repeated creations."""
    template = creation.template
    name = name or creation.name
    return Workload(
        namespace=creation.queue, name=name, queue_name=creation.queue,
        priority=template.priority, creation_time=now, uid=name,
        pod_sets=(PodSet("main", 1, {"cpu": template.request_milli}),),
    )


def evicted(workload: Workload, now: float) -> Workload:
    """A preemption victim as it queues again: no admission, evicted and requeued at ``now``."""
    return dataclasses.replace(
        workload, admission=None, quota_reserved_time=None,
        evicted_reason=EVICTED_BY_PREEMPTION, evicted_time=now, requeued=True)


@dataclass
class _Tracked:
    id: int
    creation: Creation
    created: float
    cluster_queue: str
    reserved: float | None = None  # the last quota reservation
    finished: float | None = None
    evictions: int = 0
    run: int = 0  # bumped at every admission; a finish of an older run is stale


@dataclass(order=True)
class _Event:
    at: float
    seq: int
    kind: str = field(compare=False)
    payload: Any = field(compare=False)


class _Model:
    def __init__(self, shape: Shape, *, requeue_batch_seconds: float,
                 cycle_seconds: float) -> None:
        self.batch = requeue_batch_seconds
        self.cycle_cost = cycle_seconds
        cohorts, cqs = specs(shape)
        self.state = Snapshot.build(flavors=[ResourceFlavorSpec(FLAVOR)], cohorts=cohorts,
                                    cluster_queues=cqs)
        self.queues = QueueManager()
        for cohort in cohorts:
            self.queues.add_or_update_cohort(cohort.name)
        # A shape's cohorts have no parent: a queue's cohort is the root of its tree.
        self.cohort_of = {cq.name: cq.cohort for cq in cqs}
        self.a_member = {cq.cohort: cq.name for cq in cqs}
        for cq in cqs:
            self.queues.add_or_update_cluster_queue(cq)
            self.queues.add_or_update_local_queue(cq.name, cq.name, cq.name)
        self.policy = CyclePolicy()
        self.events: list[_Event] = []
        self.seq = itertools.count()
        self.tracked: dict[str, _Tracked] = {}
        self.requeue_due: set[str | None] = set()  # root cohorts with a requeue coming
        # (workload id, QuotaReserved | QuotaReleased, when), as the real run's Events.
        self.log: list[tuple[int, str, datetime]] = []
        self.cycles = 0

    def push(self, at: float, kind: str, payload: Any) -> None:
        heapq.heappush(self.events, _Event(at, next(self.seq), kind, payload))

    # --- what happens outside the scheduler ----------------------------------------------

    def create(self, creation: Creation, now: float) -> None:
        wl = workload_for(creation, now=now)
        self.tracked[wl.key] = _Tracked(len(self.tracked), creation, now, creation.queue)
        self.queues.add_or_update_workload(wl, now=now)

    def release(self, key: str, now: float) -> WorkloadInfo | None:
        """The workload stops holding quota; its cohort tree's parked workloads are
        requeued one batch period after the first release (Kueue's delaying queue)."""
        t = self.tracked[key]
        info = self.state.release_workload(key, t.cluster_queue)
        if info is None:
            return None
        self.log.append((t.id, "QuotaReleased", _EPOCH + timedelta(seconds=now)))
        root = self.cohort_of[t.cluster_queue]
        if root not in self.requeue_due:
            self.requeue_due.add(root)
            self.push(now + self.batch, "requeue", root)
        return info

    def finish(self, payload: tuple[str, int], now: float) -> None:
        key, run = payload
        t = self.tracked[key]
        if t.run != run or t.finished is not None:
            return  # preempted since: that run was cut short
        if self.release(key, now) is not None:
            t.finished = now

    def requeue(self, root: str | None, now: float) -> None:
        self.requeue_due.discard(root)
        # The queue manager requeues the whole tree of the queue it is given.
        self.queues.queue_inadmissible_workloads([self.a_member[root]], now=now)

    # --- the scheduler -------------------------------------------------------------------

    def cycle(self, now: float) -> bool:
        """One admission cycle that starts at ``now``; its decisions take effect when it is
        over, ``cycle_seconds`` later. False when it changed nothing."""
        heads = self.queues.heads()
        if not heads:
            return False
        self.cycles += 1
        result = run_cycle(self.state.clone(), heads, now=now, policy=self.policy,
                           cycle=self.cycles)
        done = now + self.cycle_cost
        for head in result.admitted:
            holder = dataclasses.replace(head.workload, admission=head.admission,
                                         quota_reserved_time=done)
            self.state.add_workload(WorkloadInfo(holder))
            t = self.tracked[head.key]
            t.reserved = done
            t.run += 1
            self.log.append((t.id, "QuotaReserved", _EPOCH + timedelta(seconds=done)))
            self.push(done + t.creation.template.runtime_ms / 1000, "finish", (head.key, t.run))
        self.queues.apply(result, now=done)
        # Victims are evicted at once and queue again, ordered by their eviction time.
        for target in result.preemption_targets:
            info = self.release(target.workload_key, done)
            if info is None:
                continue
            self.tracked[target.workload_key].evictions += 1
            self.queues.add_or_update_workload(evicted(info.workload, done), now=done)
        return bool(result.admitted or result.preemption_targets)

    def run(self, timeline: Iterator[Creation]) -> None:
        for creation in timeline:
            self.push(creation.at_ms / 1000, "create", creation)
        now = 0.0
        busy_until = 0.0  # the scheduler is in a cycle until then
        wanted = False
        while self.events or wanted:
            start = max(now, busy_until)
            # Whatever happens before the cycle starts, or at the same instant, is seen by it.
            if wanted and (not self.events or self.events[0].at > start):
                now = start
                wanted = self.cycle(now)
                busy_until = now + self.cycle_cost
                continue
            event = heapq.heappop(self.events)
            now = event.at
            if event.kind == "create":
                self.create(event.payload, now)
            elif event.kind == "finish":
                self.finish(event.payload, now)
            else:
                self.requeue(event.payload, now)
            wanted = True


def run_model(shape: Shape, *, requeue_batch_seconds: float = KUEUE_REQUEUE_BATCH_SECONDS,
              cycle_seconds: float = 0.0) -> dict[str, Any]:
    """Run ``shape`` in virtual time; the summary in the real run's shape (mode ``model``)."""
    started = time.process_time()
    model = _Model(shape, requeue_batch_seconds=requeue_batch_seconds,
                   cycle_seconds=cycle_seconds)
    model.run(shape.timeline())
    tracked = list(model.tracked.values())
    first = min((t.created for t in tracked), default=0.0)
    last = max((t.finished or 0.0 for t in tracked), default=0.0)
    wall_ms = (last - first) * 1000
    # The model creates every workload at its scheduled time: no lag, one time to admission.
    timings = [Timing(class_name=t.creation.template.class_name,
                      work=t.creation.template.request_milli * t.creation.template.runtime_ms,
                      scheduled_ms=t.creation.at_ms, created_ms=t.created * 1000,
                      reserved_ms=t.reserved * 1000 if t.reserved is not None else None)
               for t in tracked]
    per_class: dict[str, list[_Tracked]] = defaultdict(list)
    for t in tracked:
        per_class[t.creation.template.class_name].append(t)
    admissions, weighted, weighted_scheduled = admission_times(timings)
    classes = {
        klass: class_figures(
            len(items), admissions.get(klass, ([], []))[0],
            [(t.finished - t.created) * 1000 for t in items if t.finished is not None],
            sum(t.evictions for t in items), admissions.get(klass, ([], []))[1])
        for klass, items in sorted(per_class.items())
    }
    limits = queue_limits(shape)
    checked = replay(model.log, {t.id: (t.cluster_queue, t.creation.template.request_milli)
                                 for t in tracked}, limits)
    summary: dict[str, Any] = {
        "config": shape.name,
        "mode": "model",
        "wallMs": round(wall_ms),
        "wallFromScheduledMs": round(wall_ms),
        "workloads": len(tracked),
        "expectedWorkloads": shape.total_workloads,
        "admitted": sum(1 for t in tracked if t.reserved is not None),
        "admissions": checked.admissions,
        "finished": sum(1 for t in tracked if t.finished is not None),
        "evictions": sum(t.evictions for t in tracked),
        "quotaViolations": len(checked.violations),
        "violations": checked.violations[:20],
        "creationLag": creation_lag(timings),
        "classes": classes,
        "workWeightedTimeToAdmissionMs": weighted,
        "workWeightedTimeToAdmissionFromScheduledMs": weighted_scheduled,
        "clusterQueueUsagePercent": usage_percent_per_class(limits, checked.used_milli_ms,
                                                            wall_ms),
        "model": {"requeueBatchPeriodSeconds": requeue_batch_seconds,
                  "cycleSeconds": cycle_seconds, "cycles": model.cycles,
                  "cpuSeconds": round(time.process_time() - started, 2)},
    }
    summary["comparison"] = comparison(shape, summary, model_missing="this run is the model")
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """The model's summary as the lines an operator reads (the real run's measures)."""
    m = summary["model"]
    return "\n".join([
        f"model: {summary['config']} through the engine in virtual time (requeue batch "
        f"period {m['requeueBatchPeriodSeconds']}s, {m['cycleSeconds'] * 1000:g}ms per cycle; "
        f"{m['cycles']} cycles in {m['cpuSeconds']}s of cpu)",
        *measure_lines(summary),
    ])
