"""``manage.py bench scheduler``: Kueue's scheduler benchmark on the whole application
(``tools.bench``); ``manage.py bench engine``: throughput of the pure admission
engine, in memory.

The engine benchmark:

A synthetic cluster (cluster queues in cohorts, two flavors, borrowing and lending
limits) and a backlog of pending workloads are driven through the queue manager and
``run_cycle`` like the scheduler loop does: heads, snapshot, cycle, requeue, while
admitted workloads finish after a few cycles and free quota. The same cluster is run
with several backlog sizes to show that a cycle costs what its heads cost, not what
the backlog holds. Nothing touches the database.
"""

from __future__ import annotations

import dataclasses
import gc
import random
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.core import (
    ClusterQueueSpec,
    CohortSpec,
    CyclePolicy,
    FlavorQuotas,
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
    run_cycle,
)
from scheduling.core.ordering import EVICTED_BY_PREEMPTION

GIB = 1024**3
# Kueue batches "capacity freed" requeues per second; the bench does it every few cycles.
REQUEUE_EVERY_CYCLES = 5


@dataclass
class EngineRun:
    """Measurements of one engine run."""

    pending: int
    cycles: int
    heads: int
    admissions: int
    preemptions: int
    cycle_seconds: float
    total_seconds: float


def build_cluster(
    cluster_queues: int, cohort_size: int, rng: random.Random
) -> tuple[list[ResourceFlavorSpec], list[CohortSpec], list[ClusterQueueSpec]]:
    """Cluster queues of ``cohort_size`` per cohort, quotas on two flavors."""
    flavors = [ResourceFlavorSpec("on-demand"), ResourceFlavorSpec("spot")]
    cohorts = [
        CohortSpec(f"cohort-{i}") for i in range((cluster_queues + cohort_size - 1) // cohort_size)
    ]
    cqs: list[ClusterQueueSpec] = []
    for i in range(cluster_queues):
        cpu = rng.choice((16, 24, 32)) * 1000
        mem = cpu // 1000 * 4 * GIB
        groups = (
            ResourceGroup(
                ("cpu", "memory"),
                (
                    FlavorQuotas(
                        "on-demand",
                        {
                            "cpu": ResourceQuota(
                                cpu, borrowing_limit=cpu // 2, lending_limit=cpu // 2
                            ),
                            "memory": ResourceQuota(mem),
                        },
                    ),
                    FlavorQuotas(
                        "spot", {"cpu": ResourceQuota(cpu // 2), "memory": ResourceQuota(mem // 2)}
                    ),
                ),
            ),
        )
        cqs.append(
            ClusterQueueSpec(
                name=f"cq-{i:04d}",
                cohort=cohorts[i // cohort_size].name,
                resource_groups=groups,
                preemption=PreemptionPolicy(
                    within_cluster_queue=WithinClusterQueuePolicy.LOWER_PRIORITY,
                    reclaim_within_cohort=ReclaimWithinCohortPolicy.ANY,
                ),
            )
        )
    return flavors, cohorts, cqs


def build_backlog(cqs: list[ClusterQueueSpec], pending: int, rng: random.Random) -> list[Workload]:
    """``pending`` workloads spread over the queues' local queues, a few dozen shapes."""
    out: list[Workload] = []
    for n in range(pending):
        cq = cqs[n % len(cqs)]
        cpu = rng.choice((500, 1000, 2000, 4000))
        count = rng.choice((1, 1, 2, 4))
        out.append(
            Workload(
                namespace=f"ns-{cq.name}",
                name=f"wl-{n:06d}",
                queue_name="main",
                priority=rng.choice((0, 0, 0, 10, 100)),
                creation_time=float(n),
                uid=f"{n:06d}",
                pod_sets=(
                    PodSet("main", count, {"cpu": cpu, "memory": cpu // 1000 * 2 * GIB or GIB}),
                ),
            )
        )
    return out


def run_engine(
    *,
    cluster_queues: int,
    cohort_size: int,
    pending: int,
    cycles: int,
    seed: int,
    fair_sharing: bool,
) -> EngineRun:
    """Drive ``cycles`` scheduler cycles over a fresh cluster with ``pending`` workloads."""
    rng = random.Random(seed)
    flavors, cohorts, cqs = build_cluster(cluster_queues, cohort_size, rng)
    state = Snapshot.build(flavors=flavors, cohorts=cohorts, cluster_queues=cqs)
    queues = QueueManager()
    for cohort in cohorts:
        queues.add_or_update_cohort(cohort.name)
    for cq in cqs:
        queues.add_or_update_cluster_queue(cq)
        queues.add_or_update_local_queue(f"ns-{cq.name}", "main", cq.name)
    for wl in build_backlog(cqs, pending, rng):
        queues.add_or_update_workload(wl, now=0.0)
    policy = CyclePolicy(fair_sharing=fair_sharing)
    # The backlog is long-lived: move it out of the collector's way, as a server would
    # after loading its state, so full collections do not scale with the backlog.
    gc.collect()
    gc.freeze()

    running: dict[int, list[tuple[str, str]]] = {}
    freed: set[str] = set()
    result = EngineRun(pending, 0, 0, 0, 0, 0.0, 0.0)
    started = time.perf_counter()
    for cycle in range(1, cycles + 1):
        now = float(cycle)
        # Workloads finish and give their quota back; the queues notice in batches.
        for key, cq_name in running.pop(cycle, []):
            if state.release_workload(key, cq_name) is not None:
                freed.add(cq_name)
        if freed and cycle % REQUEUE_EVERY_CYCLES == 0:
            queues.queue_inadmissible_workloads(freed, now=now)
            freed.clear()

        t0 = time.perf_counter()
        heads = queues.heads()
        if not heads:
            break
        outcome = run_cycle(state.clone(), heads, now=now, policy=policy, cycle=cycle)
        for head in outcome.admitted:
            holder = dataclasses.replace(
                head.workload, admission=head.admission, quota_reserved_time=now
            )
            state.add_workload(WorkloadInfo(holder))
            running.setdefault(cycle + rng.randint(3, 12), []).append(
                (head.key, head.cluster_queue)
            )
        queues.apply(outcome, now=now)
        result.cycle_seconds += time.perf_counter() - t0

        # Victims are gone by the next cycle and queue again.
        for target in outcome.preemption_targets:
            info = state.release_workload(target.workload_key, target.cluster_queue)
            if info is not None:
                freed.add(target.cluster_queue)
                queues.add_or_update_workload(
                    dataclasses.replace(
                        info.workload,
                        admission=None,
                        quota_reserved_time=None,
                        evicted_reason=EVICTED_BY_PREEMPTION,
                    ),
                    now=now,
                )
        result.cycles += 1
        result.heads += len(heads)
        result.admissions += len(outcome.admitted)
        result.preemptions += len(outcome.preemption_targets)
    result.total_seconds = time.perf_counter() - started
    gc.unfreeze()
    return result


def _load_shape(path: str) -> Any:
    """The shape ``--config`` names; a CommandError naming the option and field if bad."""
    from tools.bench.shape import ShapeError, load_shape

    try:
        return load_shape(path)
    except OSError as exc:
        raise CommandError(f"--config: cannot read {path}: {exc}") from exc
    except ShapeError as exc:
        raise CommandError(f"--config {path}: {exc}") from exc


def _outcome_line(run: Any) -> str:
    """Heads per outcome and, from the cycles whose heads nearly all had one outcome,
    its cost per head: a cycle of parked heads costs more per head than one of
    admissions, so two backlogs compare like with like per outcome."""
    from tools.bench.engine import OUTCOMES, SINGLE_OUTCOME_SHARE

    parts = []
    for kind in OUTCOMES:
        heads = run.outcomes.get(kind, 0)
        if not heads:
            continue
        cost = run.per_head_us(kind)
        cycles = len(run.single_outcome_cycles.get(kind, ()))
        figure = f"{cost:.0f} µs per head in {cycles} such cycles" if cost is not None else (
            "no cycle of these alone")
        parts.append(f"{kind} {heads} ({figure})")
    return "; ".join(parts) + f" [cycles with ≥{SINGLE_OUTCOME_SHARE:.0%} of one outcome]"


class Command(BaseCommand):
    help = "Benchmarks: the scheduler on the whole application, or the engine in memory."

    def add_arguments(self, parser: CommandParser) -> None:
        subparsers = parser.add_subparsers(dest="target", metavar="TARGET")
        subparsers.required = True
        engine = subparsers.add_parser(
            "engine",
            help="admission cycles of the pure engine over a benchmark shape (--config) "
            "or a synthetic cluster",
            description="Run admission cycles of the pure engine over backlogs of a "
            "benchmark shape's workloads (--config), or of a synthetic cluster's.",
        )
        engine.add_argument(
            "--config",
            help="shape file (generator YAML, e.g. ../shared/bench/large-scale.yaml); "
            "without it, a synthetic cluster",
        )
        engine.add_argument(
            "--tick-ms",
            type=float,
            default=50.0,
            help="with --config: virtual time between two cycles, in which admitted "
            "workloads run (default 50)",
        )
        engine.add_argument(
            "--profile", action="store_true", help="print the top of a profile of the cycles"
        )
        engine.add_argument(
            "--cluster-queues", type=int, default=300, help="number of cluster queues"
        )
        engine.add_argument("--cohort-size", type=int, default=10, help="cluster queues per cohort")
        engine.add_argument(
            "--pending",
            type=int,
            nargs="+",
            default=None,
            help="backlog sizes to compare (each run uses the same cluster; default "
            "10000 100000 with --config, 10000 50000 without)",
        )
        engine.add_argument(
            "--cycles", type=int, default=None, help="cycles per run (default 50, or 25 synthetic)"
        )
        engine.add_argument("--seed", type=int, default=1, help="random seed")
        engine.add_argument(
            "--repeat", type=int, default=3, help="runs per backlog size; the fastest is reported"
        )
        engine.add_argument("--fair-sharing", action="store_true", help="enable fair sharing")
        kube = subparsers.add_parser(
            "kube",
            help="the Kubernetes backend creating and unsuspending admitted jobs on the "
            "Kubernetes API test server",
            description="Admit jobs in a fresh database, then time the Kubernetes "
            "cluster's sync passes that create and unsuspend them on kueueweb's "
            "Kubernetes API test server, and count the API calls they take.",
        )
        kube.add_argument(
            "--jobs",
            type=int,
            nargs="+",
            default=[1000],
            help="number of admitted jobs; several sizes show whether list and watch calls "
            "grow with the jobs (each size in its own scratch SQLite database)",
        )
        kube.add_argument(
            "--timeout", type=float, default=600.0, help="give up after this many seconds"
        )
        scheduler = subparsers.add_parser(
            "scheduler",
            help="a shape of Kueue's scheduler benchmark (a generator YAML of "
            "test/performance/scheduler, e.g. ../shared/bench/baseline.yaml) run on the "
            "application",
            description="Generate a benchmark shape's workloads in real time, admit them with "
            "the application's reconcilers (embedded loop, or Celery workers when "
            "REDIS_URL is set), run them on a simulated cluster and print a summary.",
        )
        scheduler.add_argument("--config", required=True, help="shape file (generator YAML)")
        scheduler.add_argument("--output", help="write the summary as JSON to this path")
        scheduler.add_argument("--workers", type=int, default=2,
                               help="Celery workers to start in production mode (default 2)")
        scheduler.add_argument("--timeout", type=float, default=1800.0,
                               help="give up after this many seconds (default 1800)")
        scheduler.add_argument(
            "--model-cache", metavar="DIR", default=None,
            help="where the zero-cost Kueue-rules model's figures are kept, per shape and "
            "code (default $XDG_CACHE_HOME/kueueweb/bench-model)")
        scheduler.add_argument(
            "--profile", action="store_true",
            help="embedded mode: profile the reconcilers, the generator and the simulated "
            "cluster and print the top of each (the profiler slows the run: its figures are "
            "not comparable with an unprofiled run's)")
        scheduler.add_argument(
            "--model", action="store_true",
            help="run the shape through the engine alone in virtual time (every cycle, "
            "write and pod start costs nothing): the figures a scheduler with Kueue's "
            "behaviour reaches at best, to compare the real run with")
        scheduler.add_argument(
            "--requeue-batch-period", type=float, default=None, metavar="SECONDS",
            help="with --model: Kueue's requeueBatchPeriod (default 1)")
        scheduler.add_argument(
            "--cycle-ms", type=float, default=0.0,
            help="with --model: what one admission cycle costs in virtual time (default 0)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["target"] == "engine":
            self._engine(options)
            return
        if options["target"] == "scheduler":
            self._scheduler(options)
            return
        if options["target"] == "kube":
            self._kube(options)
            return
        raise CommandError(f"unknown benchmark {options['target']!r}")

    def _scheduler(self, options: dict[str, Any]) -> None:

        from tools.bench import run as bench_run
        if options["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        if options["profile"] and (options["model"] or settings.RECONCILER_MODE == "celery"):
            raise CommandError("--profile profiles the embedded reconcilers: run it without "
                               "REDIS_URL (embedded mode) and without --model")
        if not options["model"] and (options["requeue_batch_period"] is not None
                                     or options["cycle_ms"]):
            raise CommandError("--requeue-batch-period and --cycle-ms need --model")
        shape = _load_shape(options["config"])
        if options["model"]:
            self._model(shape, options)
            return
        from pathlib import Path

        from tools.bench.reference import default_cache_dir

        cache = Path(options["model_cache"]) if options["model_cache"] else default_cache_dir()
        if cache.exists() and not cache.is_dir():
            raise CommandError(f"--model-cache: {cache} is not a directory")
        try:
            summary = bench_run.run(shape, workers=options["workers"],
                                    timeout_seconds=options["timeout"], model_cache=cache,
                                    profile=options["profile"],
                                    log=lambda line: self.stdout.write(line))
        except bench_run.BenchError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(bench_run.format_summary(summary))
        self._write(summary, options["output"])
        if summary["quotaViolations"] or summary["finished"] != summary["expectedWorkloads"]:
            raise CommandError("the run broke an invariant: see quotaViolations / finished")

    def _write(self, summary: dict[str, Any], path: str | None) -> None:
        """Write the summary as JSON to ``--output``, if given."""
        if not path:
            return
        import json

        with open(path, "w", encoding="utf-8") as out:
            json.dump(summary, out, indent=2)
            out.write("\n")
        self.stdout.write(f"summary written to {path}")

    def _model(self, shape: Any, options: dict[str, Any]) -> None:
        from tools.bench import model

        period = options["requeue_batch_period"]
        if period is None:
            period = model.KUEUE_REQUEUE_BATCH_SECONDS
        if period < 0:
            raise CommandError("--requeue-batch-period must not be negative")
        if options["cycle_ms"] < 0:
            raise CommandError("--cycle-ms must not be negative")
        summary = model.run_model(shape, requeue_batch_seconds=period,
                                  cycle_seconds=options["cycle_ms"] / 1000)
        self.stdout.write(model.format_summary(summary))
        self._write(summary, options["output"])

    def _engine(self, options: dict[str, Any]) -> None:
        if options["config"]:
            self._engine_shape(options)
            return
        if options["profile"]:
            raise CommandError("--profile needs --config")
        options["pending"] = options["pending"] or [10_000, 50_000]
        cqs: int = options["cluster_queues"]
        cycles: int = 25 if options["cycles"] is None else options["cycles"]
        if cqs < 1 or cycles < 1 or options["cohort_size"] < 1 or min(options["pending"]) < 1:
            raise CommandError(
                "--cluster-queues, --cohort-size, --pending and --cycles must be positive"
            )
        self.stdout.write(
            f"engine: {cqs} cluster queues in cohorts of {options['cohort_size']}, "
            f"{cycles} cycles per run, fair sharing {'on' if options['fair_sharing'] else 'off'}"
        )
        for pending in options["pending"]:
            runs = [
                run_engine(
                    cluster_queues=cqs,
                    cohort_size=options["cohort_size"],
                    pending=pending,
                    cycles=cycles,
                    seed=options["seed"],
                    fair_sharing=options["fair_sharing"],
                )
                for _ in range(max(1, options["repeat"]))
            ]
            # Same seed, same decisions: runs differ only in timing, so report the
            # fastest (the least disturbed by other processes) and the median.
            runs.sort(key=lambda r: r.cycle_seconds)
            run = runs[0]
            median_ms = runs[len(runs) // 2].cycle_seconds * 1000 / max(run.cycles, 1)
            cycle_s = run.cycle_seconds or 1e-9
            self.stdout.write(
                f"  pending={pending:>7}: {run.cycles} cycles, "
                f"{run.heads / max(run.cycles, 1):.0f} heads/cycle, "
                f"{run.cycles / cycle_s:.1f} cycles/s, {run.admissions / cycle_s:.0f} admissions/s, "
                f"{cycle_s * 1000 / max(run.cycles, 1):.1f} ms/cycle (median {median_ms:.1f}), "
                f"{run.admissions} admitted, {run.preemptions} preempted"
            )

    def _engine_shape(self, options: dict[str, Any]) -> None:
        import cProfile

        from tools.bench.engine import run_shape_engine
        from tools.bench.profiling import profile_lines

        pending: list[int] = options["pending"] or [10_000, 100_000]
        cycles: int = 50 if options["cycles"] is None else options["cycles"]
        if min(pending) < 1:
            raise CommandError("--pending: every backlog size must be positive")
        if cycles < 1:
            raise CommandError("--cycles must be positive")
        if options["tick_ms"] <= 0:
            raise CommandError("--tick-ms must be positive")
        shape = _load_shape(options["config"])
        self.stdout.write(
            f"engine: {shape.name}, {len(shape.queues())} cluster queues, {cycles} cycles "
            f"per run {options['tick_ms']:g} ms apart in virtual time, best of "
            f"{max(1, options['repeat'])} runs (cpu time of the cycles)"
        )
        profiler = cProfile.Profile() if options["profile"] else None
        means: list[float] = []
        per_head: list[float] = []
        for size in pending:
            runs = []
            for attempt in range(max(1, options["repeat"])):
                # Profile one run only: the profiler's cost would blur the best of the rest.
                profiled = profiler if attempt == 0 and size == pending[-1] else None
                runs.append(
                    run_shape_engine(
                        shape,
                        pending=size,
                        cycles=cycles,
                        tick_seconds=options["tick_ms"] / 1000,
                        seed=options["seed"],
                        profiler=profiled,
                    )
                )
            if profiler is not None and len(runs) > 1:
                runs = runs[1:]
            # Same shape, same decisions: runs differ only in timing; the fastest is the
            # least disturbed by other processes.
            run = min(runs, key=lambda r: sum(r.cycle_cpu_seconds))
            means.append(run.cycle_ms())
            per_head.append(sum(run.cycle_cpu_seconds) * 1e6 / max(run.heads, 1))
            self.stdout.write(
                f"  pending={size:>7}: {run.admissions / run.cycles:.0f} admissions and "
                f"{run.heads / run.cycles:.0f} heads per cycle, "
                f"{run.admissions_per_second:,.0f} admissions/s "
                f"({run.admissions_per_second_collected:,.0f} counting the collections "
                f"after the cycles); cycle mean "
                f"{run.cycle_ms():.1f} ms, p50 {run.cycle_ms(0.5):.1f} ms, p99 "
                f"{run.cycle_ms(0.99):.1f} ms, {per_head[-1]:.0f} µs per head; "
                f"{run.preemptions} preempted; collecting after a cycle "
                f"{run.collect_cpu_seconds * 1000 / run.cycles:.1f} ms; between "
                f"cycles {run.between_cpu_seconds * 1000 / run.cycles:.1f} ms"
            )
            self.stdout.write(f"    heads by outcome: {_outcome_line(run)}")
        if len(means) > 1 and means[0] > 0:
            self.stdout.write(
                f"  cycle cost at {pending[-1]} pending / at {pending[0]}: "
                f"{means[-1] / means[0]:.2f} (per head: {per_head[-1] / per_head[0]:.2f})"
            )
        if profiler is not None:
            self.stdout.write(f"profile of the cycles at pending={pending[-1]}:")
            for line in profile_lines(profiler):
                self.stdout.write(f"  {line}")

    def _kube(self, options: dict[str, Any]) -> None:
        import os

        from django.test.utils import override_settings

        from tools.bench import kube
        from tools.bench.run import use_scratch_sqlite

        sizes: list[int] = options["jobs"]
        if min(sizes) < 1:
            raise CommandError("--jobs: every number of jobs must be positive")
        if os.environ.get("DATABASE_URL") and len(sizes) > 1:
            raise CommandError("--jobs: one size only with DATABASE_URL (each needs a fresh "
                               "database)")
        results = []
        # A cache of this process only: a shared one would hold the watch state and lease
        # of an earlier run's cluster of the same id. DEBUG off, as production runs.
        with override_settings(
            DEBUG=False,
            CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
        ):
            for size in sizes:
                if not os.environ.get("DATABASE_URL"):
                    path = use_scratch_sqlite()
                    self.stdout.write(f"scratch SQLite database {path}")
                try:
                    result = kube.run(size, timeout_seconds=options["timeout"],
                                      log=lambda line: self.stdout.write(line))
                except kube.KubeBenchError as exc:
                    raise CommandError(str(exc)) from exc
                self.stdout.write(kube.format_result(result))
                results.append(result)
        if len(results) > 1:
            self.stdout.write(
                "lists and watches by number of jobs: "
                + ", ".join(f"{r.jobs}: {r.list_calls}" for r in results)
                + (" (the same: none is per job)"
                   if len({r.list_calls for r in results}) == 1 else " (they grow with the jobs)")
            )
