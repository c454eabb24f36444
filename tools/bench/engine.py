"""``bench engine --config SHAPE.yaml``: the pure admission engine on a benchmark shape.

The shape's cohorts and cluster queues become engine specs as ``bench scheduler --model``
builds them (``model.specs``), and a backlog of the shape's workloads waits in the queue
manager: its creation timeline, repeated as often as the backlog size needs, every workload
pending from the start, in an order shuffled with a fixed seed. Cycles are driven as the scheduler loop drives them — heads, a
clone of the snapshot, ``run_cycle``, the admitted workloads added to the snapshot, the
queues told the outcome — in a virtual clock that advances ``tick`` per cycle: an admitted
workload gives its quota back after its run time, which requeues its cohort tree's parked
workloads at once (kueueweb's default ``requeueBatchPeriod`` of 0), and a preempted one
queues again. The backlog is topped up between cycles by as many workloads as the cycle
admitted, so every cycle of a run sees the same number pending.

What is measured is the CPU time of the process (``time.process_time``) spent in the
cycle itself; the work done between cycles (releases, requeues, creations) is counted
apart. Nothing touches the database.

A head costs more when it is parked after a preemption search than when it is admitted,
and the mix of outcomes depends on the backlog (deep backlogs put the high-priority large
workloads at every queue's head, and once their cohorts are full those park). So each run
also counts heads by outcome and, over the cycles whose heads nearly all had one outcome,
reports that outcome's cost per head: the figures to compare between backlog sizes.
"""

from __future__ import annotations

import cProfile
import dataclasses
import gc
import heapq
import itertools
import random
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from kueueweb import collector
from scheduling.core import (
    CyclePolicy,
    CycleResult,
    Decision,
    QueueManager,
    ResourceFlavorSpec,
    Snapshot,
    Workload,
    WorkloadInfo,
    run_cycle,
)
from tools.bench.model import FLAVOR, evicted, specs, workload_for
from tools.bench.shape import Shape


@dataclass
class ShapeEngineRun:
    """The figures of one run at one backlog size."""

    pending: int
    cycle_cpu_seconds: list[float] = field(default_factory=list)
    between_cpu_seconds: float = 0.0
    # The young collection after each cycle (what the reconcilers do after each call).
    collect_cpu_seconds: float = 0.0
    heads: int = 0
    admissions: int = 0
    preemptions: int = 0
    # Workloads waiting in the queue manager after the last cycle (active and parked).
    pending_after: int = 0
    # Heads by outcome (``OUTCOMES``) over the run.
    outcomes: dict[str, int] = field(default_factory=dict)
    # Per outcome, (cpu seconds, heads) of the cycles whose heads nearly all had it.
    single_outcome_cycles: dict[str, list[tuple[float, int]]] = field(default_factory=dict)

    @property
    def cycles(self) -> int:
        return len(self.cycle_cpu_seconds)

    @property
    def admissions_per_second(self) -> float:
        return self.admissions / max(sum(self.cycle_cpu_seconds), 1e-9)

    @property
    def admissions_per_second_collected(self) -> float:
        """Counting the collections after the cycles as well."""
        return self.admissions / max(sum(self.cycle_cpu_seconds) + self.collect_cpu_seconds,
                                     1e-9)

    def per_head_us(self, outcome: str) -> float | None:
        """Cost per head (µs) in the cycles whose heads nearly all had ``outcome``."""
        cycles = self.single_outcome_cycles.get(outcome)
        if not cycles:
            return None
        return sum(cpu for cpu, _ in cycles) * 1e6 / max(sum(n for _, n in cycles), 1)

    def cycle_ms(self, quantile: float | None = None) -> float:
        """The mean cost of a cycle in ms, or the given quantile (0.5, 0.99)."""
        costs = self.cycle_cpu_seconds
        if not costs:
            return 0.0
        if quantile is None:
            return statistics.fmean(costs) * 1000
        ordered = sorted(costs)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000


# What happened to a head: the cost of a cycle depends on its mix of these.
ADMITTED = "admitted"
# Parked after a preemption search that found no victim (NoCandidates).
SEARCHED = "parked after a preemption search"
# Parked without a search (NoFit: no flavor could take it even with preemption).
NO_FIT = "parked without a search"
# Skipped, preempting, waiting for preemptions, inadmissible.
OTHER = "other"
OUTCOMES = (ADMITTED, SEARCHED, NO_FIT, OTHER)
# A cycle is counted for an outcome's cost per head when this share of its heads had it.
SINGLE_OUTCOME_SHARE = 0.95


def _outcome(decision: Decision) -> str:
    if decision is Decision.ADMITTED:
        return ADMITTED
    if decision is Decision.NO_CANDIDATES:
        return SEARCHED
    if decision is Decision.NO_FIT:
        return NO_FIT
    return OTHER


def _record_outcomes(run: ShapeEngineRun, outcome: CycleResult, cpu_seconds: float) -> None:
    counts: dict[str, int] = {}
    for result in outcome.results:
        kind = _outcome(result.decision)
        counts[kind] = counts.get(kind, 0) + 1
        run.outcomes[kind] = run.outcomes.get(kind, 0) + 1
    heads = len(outcome.results)
    for kind, n in counts.items():
        if n >= SINGLE_OUTCOME_SHARE * heads:
            run.single_outcome_cycles.setdefault(kind, []).append((cpu_seconds, heads))


def _backlog(shape: Shape, seed: int) -> Iterator[tuple[Workload, float]]:
    """The shape's workloads and their run times (s), each pass over the shape's timeline
    shuffled, without end; a repetition is named apart from the previous ones. Shuffled,
    any prefix of the backlog holds the shape's mix of classes (in timeline order, the
    first 10,000 of ``large-scale`` would all be small and medium), so two backlog sizes
    differ in depth only."""
    rng = random.Random(seed)
    created = itertools.count()
    for round_ in itertools.count():
        creations = list(shape.timeline())
        rng.shuffle(creations)
        for creation in creations:
            wl = workload_for(
                creation,
                now=next(created) / 1000,
                name=f"{creation.name}-r{round_}" if round_ else creation.name,
            )
            yield wl, creation.template.runtime_ms / 1000


def run_shape_engine(
    shape: Shape,
    *,
    pending: int,
    cycles: int,
    tick_seconds: float = 0.05,
    seed: int = 1,
    profiler: cProfile.Profile | None = None,
) -> ShapeEngineRun:
    """Drive ``cycles`` cycles over the shape with ``pending`` workloads waiting in each."""
    cohorts, cqs = specs(shape)
    state = Snapshot.build(
        flavors=[ResourceFlavorSpec(FLAVOR)], cohorts=cohorts, cluster_queues=cqs
    )
    queues = QueueManager()
    for cohort in cohorts:
        queues.add_or_update_cohort(cohort.name)
    for cq in cqs:
        queues.add_or_update_cluster_queue(cq)
        queues.add_or_update_local_queue(cq.name, cq.name, cq.name)
    backlog = _backlog(shape, seed)
    runtime_of: dict[str, float] = {}

    def create(count: int, now: float) -> None:
        for wl, runtime in itertools.islice(backlog, count):
            runtime_of[wl.key] = runtime
            queues.add_or_update_workload(wl, now=now)

    create(pending, 0.0)
    policy = CyclePolicy()
    # The backlog is long-lived: out of the collector's way, as a server freezes what it
    # loads at start, so full collections do not scale with the backlog.
    gc.collect()
    gc.freeze()
    # The collector as a reconciler process tunes it (``kueueweb.collector``): no automatic
    # collection inside a cycle, as none runs inside an admission call, and the young
    # generation collected after each one, counted apart.
    threshold = gc.get_threshold()
    gc.set_threshold(collector.YOUNG_THRESHOLD, *threshold[1:])

    run = ShapeEngineRun(pending)
    finishing: list[tuple[float, int, str, str]] = []  # (when, seq, key, cluster queue)
    seq = itertools.count()
    try:
        for cycle in range(1, cycles + 1):
            now = cycle * tick_seconds
            between = time.process_time()
            freed: set[str] = set()
            while finishing and finishing[0][0] <= now:
                _, _, key, cq_name = heapq.heappop(finishing)
                if state.release_workload(key, cq_name) is not None:
                    freed.add(cq_name)
            if freed:
                queues.queue_inadmissible_workloads(freed, now=now)
            run.between_cpu_seconds += time.process_time() - between

            started = time.process_time()
            if profiler is not None:
                profiler.enable()
            with collector.paused():
                heads = queues.heads()
                outcome = run_cycle(state.clone(), heads, now=now, policy=policy, cycle=cycle)
                for head in outcome.admitted:
                    holder = dataclasses.replace(
                        head.workload, admission=head.admission, quota_reserved_time=now
                    )
                    state.add_workload(WorkloadInfo(holder))
                queues.apply(outcome, now=now)
            if profiler is not None:
                profiler.disable()
            run.cycle_cpu_seconds.append(time.process_time() - started)
            collecting = time.process_time()
            collector.collect_young()
            run.collect_cpu_seconds += time.process_time() - collecting
            _record_outcomes(run, outcome, run.cycle_cpu_seconds[-1])

            between = time.process_time()
            for head in outcome.admitted:
                heapq.heappush(
                    finishing,
                    (now + runtime_of[head.key], next(seq), head.key, head.cluster_queue),
                )
            # Victims are gone by the next cycle and queue again.
            for target in outcome.preemption_targets:
                info = state.release_workload(target.workload_key, target.cluster_queue)
                if info is not None:
                    queues.add_or_update_workload(evicted(info.workload, now), now=now)
            create(len(outcome.admitted), now)
            run.between_cpu_seconds += time.process_time() - between
            run.heads += len(heads)
            run.admissions += len(outcome.admitted)
            run.preemptions += len(outcome.preemption_targets)
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
    run.pending_after = sum(sum(queues.pending_counts(cq.name)) for cq in cqs)
    return run
