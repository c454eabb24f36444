"""``manage.py bench scheduler``: Kueue's scheduler benchmark, run on the application.

1. The shape's flavor, cohorts, cluster queues and local queues are applied
   (``apply_manifests``, as ``kubectl apply`` would) on a fresh database.
2. The reconcilers start as the mode says: in embedded mode the in-process loop the web
   process runs; in production mode (``DATABASE_URL`` and ``REDIS_URL``) Celery workers
   and beat, as separate processes.
3. The generator creates the workloads on time and the simulated cluster runs and finishes
   them; progress is printed until every workload has finished.
4. The summary is computed from what the application recorded (``report.summarize``),
   against the shape's timeline (when each workload was due), the bounds computed from
   the shape and the zero-cost Kueue-rules model (``reference.model_reference``, computed
   after the run so that it takes no cpu from it, and cached per shape).
"""

from __future__ import annotations

import cProfile
import os
import re
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import override_settings
from django.utils import timezone

from scheduling.choices import WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import ClusterQueue, Workload
from scheduling.services import resolve_cluster
from tools.bench.cluster import Generator, SimulatedCluster
from tools.bench.profiling import OWN_CODE, profile_lines, profiled
from tools.bench.reference import model_reference
from tools.bench.report import measure_lines, summarize
from tools.bench.shape import Shape

FLAVOR = "rf"  # Kueue's generator default flavor name
# Kueue's benchmark scheduler runs with an empty Configuration: no waitForPodsReady.
KUEUE_WAIT_FOR_PODS_READY = False
ROOT = Path(__file__).resolve().parents[2]


class BenchError(RuntimeError):
    """The benchmark cannot run or did not complete; the message says why."""


def manifests(shape: Shape) -> list[dict[str, Any]]:
    """The shape's objects as Kueue v1beta2 manifests."""
    api = "kueue.x-k8s.io/v1beta2"
    docs: list[dict[str, Any]] = [{"apiVersion": api, "kind": "ResourceFlavor",
                                   "metadata": {"name": FLAVOR}}]
    queues = shape.queues()
    for cohort in sorted({q.cohort for q in queues}):
        docs.append({"apiVersion": api, "kind": "Cohort", "metadata": {"name": cohort}})
    for queue in queues:
        quota: dict[str, Any] = {"name": "cpu", "nominalQuota": queue.spec.nominal_quota}
        if queue.spec.borrowing_limit is not None:
            quota["borrowingLimit"] = queue.spec.borrowing_limit
        docs.append({
            "apiVersion": api, "kind": "ClusterQueue",
            "metadata": {"name": queue.name,
                         "labels": {"kueue.x-k8s.io/performance-scheduler-class":
                                    queue.spec.class_name}},
            "spec": {
                "cohortName": queue.cohort,
                "namespaceSelector": {},
                "resourceGroups": [{"coveredResources": ["cpu"],
                                    "flavors": [{"name": FLAVOR, "resources": [quota]}]}],
                "preemption": {"reclaimWithinCohort": queue.spec.reclaim_within_cohort,
                               "withinClusterQueue": queue.spec.within_cluster_queue},
            },
        })
        docs.append({"apiVersion": api, "kind": "LocalQueue",
                     "metadata": {"name": queue.name, "namespace": queue.name},
                     "spec": {"clusterQueue": queue.name}})
    return docs


def use_scratch_sqlite() -> Path:
    """Point the default database at a new, empty SQLite file (embedded mode without a
    DATABASE_URL), so the benchmark never touches the data of ``make run``."""
    path = Path(tempfile.mkdtemp(prefix="kueueweb-bench-")) / "bench.sqlite3"
    connection.close()
    settings.DATABASES["default"]["NAME"] = str(path)
    connection.settings_dict["NAME"] = str(path)
    return path


def prepare_database(shape: Shape, *, log: Callable[[str], None]) -> int:
    """Migrate, refuse a database that already holds scheduling objects, apply the shape;
    returns the domain's id."""
    call_command("migrate", verbosity=0, interactive=False)
    if Workload.objects.exists() or ClusterQueue.objects.exists():
        raise BenchError(
            "bench scheduler needs a fresh database, and this one already holds cluster "
            "queues or workloads: point DATABASE_URL at an empty database")
    docs = manifests(shape)
    started = time.perf_counter()
    domain = resolve_cluster(None)
    apply_manifests(docs, cluster=domain)
    log(f"applied {len(docs)} objects in {time.perf_counter() - started:.1f}s")
    return domain.pk


# Celery's INFO line for a task run: "Task scheduling.tasks.x[<id>] succeeded in 0.04s: None".
TASK_LINE = re.compile(r"Task (?P<task>[\w.]+)\[[^\]]*\] succeeded in (?P<seconds>[\d.e-]+)s")


@dataclass
class Workers:
    """The Celery processes of production mode."""

    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="kueueweb-bench-")))

    def start(self, count: int) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **production_environment(os.environ)}
        celery = [sys.executable, "-m", "celery", "-A", "kueueweb"]
        for index in range(count):
            # INFO: a line per task run, with its duration (``task_seconds``).
            self._spawn(f"worker{index + 1}", [*celery, "worker", "--concurrency", "1",
                                                "--hostname", f"bench{index + 1}@%h",
                                                "--loglevel", "INFO"], env)
        self._spawn("beat", [*celery, "beat", "--loglevel", "WARNING",
                             "--schedule", str(self.log_dir / "beat-schedule")], env)

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = (self.log_dir / f"{name}.log").open("wb")
        self.procs.append(subprocess.Popen(args, cwd=ROOT, env=env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def task_seconds(self) -> dict[str, dict[str, float]]:
        """Per task name, the runs the workers logged and the seconds they took in all."""
        tasks: dict[str, dict[str, float]] = {}
        for path in sorted(self.log_dir.glob("worker*.log")):
            for match in TASK_LINE.finditer(path.read_text(errors="replace")):
                entry = tasks.setdefault(match["task"].rsplit(".", 1)[-1],
                                         {"runs": 0, "seconds": 0.0})
                entry["runs"] += 1
                entry["seconds"] += float(match["seconds"])
        return dict(sorted(tasks.items(), key=lambda item: -item[1]["seconds"]))

    def check(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise BenchError(f"a Celery process exited ({proc.returncode}); logs in "
                                 f"{self.log_dir}")

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def production_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What the workers need to run as production does, with DEBUG off and Kueue's
    benchmark configuration (``run``): the deployment's secrets when it has them, else
    throwaway ones (a benchmark stores no session or kubeconfig that must outlive it)."""
    from cryptography.fernet import Fernet

    env = {"DEBUG": "false",
           "KUEUEWEB_WAIT_FOR_PODS_READY": str(KUEUE_WAIT_FOR_PODS_READY).lower()}
    if not (environ.get("SECRET_KEY") or environ.get("SECRET_KEY_FILE")):
        env["SECRET_KEY"] = secrets.token_urlsafe(50)
    if not (environ.get("KUEUEWEB_ENCRYPTION_KEY") or environ.get("KUEUEWEB_ENCRYPTION_KEY_FILE")):
        env["KUEUEWEB_ENCRYPTION_KEY"] = Fernet.generate_key().decode()
    return env


def purge_broker() -> None:
    """Drop tasks a previous run left in the broker: they name objects that are gone."""
    from kueueweb.celery import app

    app.control.purge()


def run(
    shape: Shape,
    *,
    workers: int = 2,
    timeout_seconds: float = 1800.0,
    progress_seconds: float = 5.0,
    model_cache: Path | None = None,
    profile: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the benchmark; returns the summary. Raises BenchError.

    It measures what production runs: DEBUG off, here and in the workers. With DEBUG on,
    Django's debug cursor records every statement, and on SQLite renders each one's
    parameters through one more query (a tenth of the admission loop's time).

    It runs Kueue's configuration of the benchmark: Kueue's runner starts its scheduler
    (``test/performance/scheduler/minimalkueue``) with an empty Configuration, so without
    waitForPodsReady, which kueueweb turns on by default. The simulated cluster has no
    pods to become ready either: with it on, every admitted workload would look stuck to
    the lifecycle pass, which would read them all on every pass."""
    bench_settings = {**settings.KUEUEWEB, "WAIT_FOR_PODS_READY": KUEUE_WAIT_FOR_PODS_READY}
    with override_settings(DEBUG=False, KUEUEWEB=bench_settings):
        return _run(shape, workers=workers, timeout_seconds=timeout_seconds,
                    progress_seconds=progress_seconds, model_cache=model_cache,
                    profile=profile, log=log)


def _run(shape: Shape, *, workers: int, timeout_seconds: float, progress_seconds: float,
         model_cache: Path | None, profile: bool, log: Callable[[str], None]) -> dict[str, Any]:
    mode = "production" if settings.RECONCILER_MODE == "celery" else "embedded"
    if mode == "embedded" and not os.environ.get("DATABASE_URL"):
        path = use_scratch_sqlite()
        log(f"embedded mode: scratch SQLite database {path}")
    db = settings.DATABASES["default"]
    log(f"{shape.name}: {len(shape.queues())} cluster queues, {shape.total_workloads} "
        f"workloads; mode {mode} ({db['ENGINE'].rsplit('.', 1)[-1]})")
    cluster_id = prepare_database(shape, log=log)

    pool = Workers()
    stop_loop = threading.Event()
    # One profiler per thread (cProfile follows the thread that enables it).
    profilers = ({name: cProfile.Profile() for name in ("reconcilers", "generator", "cluster")}
                 if profile else {})
    if mode == "production":
        purge_broker()
        pool.start(workers)
        log(f"started {workers} Celery workers and beat (logs in {pool.log_dir})")
        time.sleep(3.0)  # let them connect before the clock starts
    else:
        from kueueweb import embedded

        loop: Callable[..., None] = embedded.run_forever
        if profile:
            loop = profiled(loop, profilers["reconcilers"])
        threading.Thread(target=loop, kwargs={"stop": stop_loop, "tick": 0.05},
                         name="kueueweb-reconcilers", daemon=True).start()

    # Time 0 of the shape's timeline, on both clocks: the generator paces itself on the
    # monotonic one, the application stamps creations and admissions on the wall clock.
    start = time.monotonic()
    started_at = timezone.now()
    generator = Generator(cluster_id, shape.timeline(), start=start)
    cluster = SimulatedCluster(cluster_id, expected=shape.total_workloads)
    if profile:
        generator.run = profiled(generator.run, profilers["generator"])  # type: ignore[method-assign]
        cluster.run = profiled(cluster.run, profilers["cluster"])  # type: ignore[method-assign]
    generator.start()
    cluster.start()
    try:
        _wait(shape, cluster_id, generator, cluster, pool, start=start,
              timeout_seconds=timeout_seconds, progress_seconds=progress_seconds, log=log)
    finally:
        generator.stop.set()
        cluster.stop.set()
        stop_loop.set()
        generator.join(timeout=10)
        cluster.join(timeout=10)
        pool.stop()
    usage_self = resource.getrusage(resource.RUSAGE_SELF)
    usage_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    process: dict[str, Any] = {
        "userSeconds": round(usage_self.ru_utime, 2),
        "systemSeconds": round(usage_self.ru_stime, 2),
        "maxRssKb": usage_self.ru_maxrss,
    }
    if mode == "production":
        process["workers"] = {
            "count": workers,
            "userSeconds": round(usage_children.ru_utime, 2),
            "systemSeconds": round(usage_children.ru_stime, 2),
            "maxRssKb": usage_children.ru_maxrss,
            "tasks": {name: {"runs": int(entry["runs"]), "seconds": round(entry["seconds"], 2)}
                      for name, entry in pool.task_seconds().items()},
        }
    # The reference is Kueue's rules, its requeue batch period included, whatever this
    # run's own setting: the figure every scheduler is compared with stays the same.
    model = model_reference(shape, cache_dir=model_cache, log=log)
    summary = summarize(shape, cluster_id, started_at=started_at, mode=mode, process=process,
                        model=model, extra={
        "database": db["ENGINE"].rsplit(".", 1)[-1],
        "debug": settings.DEBUG,
        "requeueBatchPeriodSeconds": float(settings.KUEUEWEB["REQUEUE_BATCH_PERIOD_SECONDS"]),
        "waitForPodsReady": bool(settings.KUEUEWEB["WAIT_FOR_PODS_READY"]),
        "generator": {"requests": generator.stats.requests,
                      "maxLagMs": round(generator.stats.max_lag_ms)},
        "simulatedCluster": {"runsStarted": cluster.stats.started,
                             "runsCutByPreemption": cluster.stats.lost_runs,
                             "finishRetries": cluster.stats.retries},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "modelReference": {"cached": model["cached"], "key": model["key"],
                           "seconds": model["model"].get("seconds"),
                           "requeueBatchPeriodSeconds":
                               model["model"]["requeueBatchPeriodSeconds"]},
    })
    if profilers:
        summary["profile"] = profile_tops(profilers)
    return summary


def profile_tops(profilers: Mapping[str, cProfile.Profile]) -> dict[str, dict[str, list[str]]]:
    """Per thread, the top of its profile by own time, and by cumulative time over the
    application's own functions (where a reader can act on it)."""
    return {name: {"ownTime": profile_lines(profiler, PROFILE_TOP),
                   "cumulative": profile_lines(profiler, PROFILE_TOP, cumulative=True,
                                               restrict=OWN_CODE)}
            for name, profiler in profilers.items()}


# Entries of each list of ``profile_tops``.
PROFILE_TOP = 25


def _wait(shape: Shape, cluster_id: int, generator: Generator, cluster: SimulatedCluster,
          pool: Workers, *, start: float, timeout_seconds: float, progress_seconds: float,
          log: Callable[[str], None]) -> None:
    next_progress = start + progress_seconds
    while cluster.stats.finished < shape.total_workloads:
        time.sleep(0.1)
        for actor in (generator, cluster):
            if actor.stats.error:
                raise BenchError(f"{actor.name}: {actor.stats.error}")
        pool.check()
        now = time.monotonic()
        if now >= next_progress:
            next_progress = now + progress_seconds
            pending = Workload.objects.filter(cluster_id=cluster_id,
                                              phase=WorkloadPhase.PENDING).count()
            log(f"  t={now - start:6.1f}s created {generator.stats.created}/"
                f"{shape.total_workloads} pending {pending} running "
                f"{cluster.stats.started - cluster.stats.finished - cluster.stats.lost_runs} "
                f"finished {cluster.stats.finished}")
        if now - start > timeout_seconds:
            raise BenchError(f"not finished after {timeout_seconds:.0f}s: "
                             f"{cluster.stats.finished}/{shape.total_workloads} finished")


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as the lines an operator reads."""
    lines = [
        f"summary: {summary['config']} in {summary['mode']} mode ({summary['database']}, "
        f"{summary['machine']['cpus']} cpus, requeue batch period "
        f"{summary['requeueBatchPeriodSeconds']:g}s, waitForPodsReady "
        f"{'on' if summary.get('waitForPodsReady') else 'off'})",
        *measure_lines(summary),
    ]
    p = summary["process"]
    lines.append(f"  process: user {p['userSeconds']}s system {p['systemSeconds']}s "
                 f"max RSS {p['maxRssKb'] // 1024} MiB")
    if "workers" in p:
        w = p["workers"]
        lines.append(f"  {w['count']} Celery workers + beat: user {w['userSeconds']}s system "
                     f"{w['systemSeconds']}s max RSS {w['maxRssKb'] // 1024} MiB")
        if w.get("tasks"):
            lines.append("  worker tasks (runs, seconds): " + ", ".join(
                f"{name} {entry['runs']} {entry['seconds']:.1f}s"
                for name, entry in w["tasks"].items()))
    for thread, tops in summary.get("profile", {}).items():
        for view, label in (("ownTime", "by own time"),
                            ("cumulative", "by cumulative time, own code")):
            lines.append(f"profile of the {thread} thread, {label}:")
            lines.extend(f"  {line}" for line in tops[view])
    return "\n".join(lines)
