"""A production-mode soak: a steady stream of submissions and scale calls through the REST
API while real Celery workers and beat reconcile, and the figures that tell a healthy run:
deadlocks (``pg_stat_database.deadlocks``), 5xx answers, the Celery queue's length over the
run, and how late beat's periodic tasks ran.

Needs PostgreSQL and Redis (``DATABASE_URL``, ``REDIS_URL``). The workers and beat are
started for the run on the database this process uses, and stopped after it. The requests
go through Django's test client in this process: the views, middleware and transactions of
the web server, without its sockets.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from django.conf import settings
from django.db import connection, connections
from django.test import Client

from kueueweb import reconcile
from kueueweb.celery import PERIODIC_RUNS_KEY
from tools.loadtest import admin_user, allowed_host

Log = Callable[[str], None]

NAMESPACE = "soak"
QUEUE = "soak"
# The beat entry whose lateness is reported: the admission safety net.
SAFETY_NET = reconcile.ADMISSION_ALL_TASK


@dataclass
class SoakFigures:
    seconds: float
    requests: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    # The scale calls' answers alone: a scale of a job that has finished is refused (400).
    scale_statuses: dict[str, int] = field(default_factory=dict)
    server_errors: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    deadlocks: int = 0
    # (seconds since the start, LLEN of the default queue) once a second.
    queue_lengths: list[tuple[float, int]] = field(default_factory=list)
    # The longest wait between two runs of the safety net, and its period.
    safety_net_gap: float = 0.0
    safety_net_period: float = 0.0

    def queue_growth(self) -> int:
        """The queue's median length over the last quarter of the run, less its median over
        the second quarter (after the warm-up): about 0 when the queue stays flat."""
        lengths = [length for _, length in self.queue_lengths]
        quarter = max(len(lengths) // 4, 1)
        second, last = lengths[quarter:2 * quarter], lengths[-quarter:]
        if not second or not last:
            return 0
        return int(statistics.median(last) - statistics.median(second))

    def max_queue(self) -> int:
        return max((length for _, length in self.queue_lengths), default=0)


def _database_url() -> str:
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:"
            f"{db.get('PORT') or 5432}/{db['NAME']}")


def _environment(period: float) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": _database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "KUEUEWEB_RECONCILE_INTERVAL_SECONDS": str(period),
        "KUEUEWEB_LIFECYCLE_INTERVAL_SECONDS": str(max(int(period), 1)),
        "KUEUEWEB_CLUSTER_SYNC_INTERVAL_SECONDS": str(max(int(period), 1)),
        "PYTHONUNBUFFERED": "1",
    })
    if os.environ.get("DJANGO_SETTINGS_MODULE", "").endswith("settings_testing"):
        env["KUEUEWEB_TEST_RECONCILER_MODE"] = "celery"
    return env


@contextlib.contextmanager
def reconcilers(*, workers: int, concurrency: int, period: float,
                log_dir: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``workers`` Celery workers and beat on this process's database and Redis."""
    env = _environment(period)
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        out = (log_dir / f"{name}.log").open("ab")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "kueueweb", *args],
            cwd=str(settings.BASE_DIR), env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True))

    try:
        for index in range(workers):
            start(f"worker{index}", "worker", "--pool=prefork", f"--concurrency={concurrency}",
                  # As deployed: beat's queue first (``deploy/``, settings).
                  f"--queues={settings.PERIODIC_TASK_QUEUE},{settings.CELERY_TASK_DEFAULT_QUEUE}",
                  "--loglevel=WARNING", "--without-gossip", "--without-mingle",
                  "--without-heartbeat", f"--hostname=soak{index}-{os.getpid()}@%h")
        start("beat", "beat", "--loglevel=WARNING", f"--schedule={log_dir / 'beat-schedule'}")
        yield procs
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 15)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)


def prepare(*, speed: float) -> None:
    """A cluster queue for the soak in the manager domain, whose jobs run ``speed`` times
    faster than their nominal time."""
    from multicluster.models import Cluster
    from scheduling.manifests.apply import apply_manifests

    manager_id = Cluster.objects.manager_id()
    if manager_id is None:
        raise RuntimeError("the database has no manager cluster (run the migrations)")
    manager = Cluster.objects.get(pk=manager_id)
    manager.simulation = {**(manager.simulation or {}), "speed": speed}
    manager.save(update_fields=["simulation", "resource_version", "updated_at"])
    apply_manifests([
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "soak-flavor"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "soak-cq"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu"],
             "flavors": [{"name": "soak-flavor",
                          "resources": [{"name": "cpu", "nominalQuota": 32}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"name": QUEUE, "namespace": NAMESPACE},
         "spec": {"clusterQueue": "soak-cq"}},
    ], cluster=manager)


def job(name: str, run_seconds: int) -> dict[str, Any]:
    """An elastic Job of two one-CPU pods that sleep ``run_seconds``."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE},
                     "annotations": {"kueue.x-k8s.io/elastic-job": "true"}},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
            "containers": [{"name": "main", "image": "busybox",
                            "command": ["sleep", str(run_seconds)],
                            "resources": {"requests": {"cpu": "1"}}}],
            "restartPolicy": "Never"}}},
    }


def deadlocks() -> int:
    """PostgreSQL's deadlock count of this database, as of now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = "
                       "current_database()")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _client_loop(index: int, clients: int, rate: float, stop_at: float, run_seconds: int,
                 results: list[tuple[str, int, float]], lock: threading.Lock,
                 user: Any) -> None:
    """Every ``clients / rate`` seconds: submit a job, then scale the one before it."""
    client = Client(HTTP_HOST=allowed_host())
    client.force_login(user)
    interval = clients / rate
    base = f"/api/v1/namespaces/{NAMESPACE}/jobs"
    submitted: list[str] = []
    step = 0
    next_at = time.monotonic() + interval * index / clients
    try:
        while (now := time.monotonic()) < stop_at:
            if now < next_at:
                time.sleep(min(next_at - now, 0.2))
                continue
            next_at += interval
            name = f"soak-{os.getpid()}-{index}-{step}"
            step += 1
            started = time.monotonic()
            response = client.post(base, data=job(name, run_seconds),
                                   content_type="application/json")
            record = [("submit", response.status_code, time.monotonic() - started)]
            if response.status_code == 201:
                submitted.append(name)
            if len(submitted) >= 2:
                started = time.monotonic()
                response = client.post(f"{base}/{submitted[-2]}/scale",
                                       data={"parallelism": 1 + step % 3},
                                       content_type="application/json")
                record.append(("scale", response.status_code, time.monotonic() - started))
            with lock:
                results.extend(record)
    finally:
        client.logout()
        connections.close_all()


def _periodic_runs(redis: Any) -> dict[str, float]:
    return {key.decode(): float(value)
            for key, value in redis.hgetall(PERIODIC_RUNS_KEY).items()}


def run(*, seconds: float, rate: float, clients: int = 6, workers: int = 2,
        concurrency: int = 2, period: float = 2.0, speed: float = 10.0,
        run_seconds: int | None = None, log: Log = lambda _: None) -> SoakFigures:
    """Start workers and beat, send ``rate`` submissions (each followed by a scale call)
    per second from ``clients`` threads for ``seconds``, and measure.

    A job sleeps ``run_seconds`` (by default long enough that, at the cluster's ``speed``,
    it still runs two of its client's intervals later): the scale call targets the client's
    previous job, and must find it running for the soak to scale jobs under load."""
    if run_seconds is None:
        run_seconds = math.ceil(2 * clients / rate * speed)
    import redis as redis_client

    if connection.vendor != "postgresql" or not settings.REDIS_URL:
        raise RuntimeError("the soak needs PostgreSQL (DATABASE_URL) and Redis (REDIS_URL)")
    redis = redis_client.Redis.from_url(settings.REDIS_URL)
    prepare(speed=speed)
    user = admin_user()  # before the clients: each logs in as this one
    # An earlier soak's runs would pass for this one's until its beat ran: the first
    # samples would measure the gap since that run.
    redis.delete(PERIODIC_RUNS_KEY)
    figures = SoakFigures(seconds=seconds, safety_net_period=period)
    results: list[tuple[str, int, float]] = []
    lock = threading.Lock()
    with tempfile.TemporaryDirectory(prefix="kueueweb-soak-") as log_dir, \
            reconcilers(workers=workers, concurrency=concurrency, period=period,
                        log_dir=Path(log_dir)):
        deadline = time.monotonic() + 60
        while SAFETY_NET not in _periodic_runs(redis):  # beat and a worker are up
            if time.monotonic() > deadline:
                raise RuntimeError("no periodic task ran within 60 s of starting beat")
            time.sleep(0.2)
        before = deadlocks()
        start = time.monotonic()
        stop_at = start + seconds
        threads = [threading.Thread(target=_client_loop, args=(
            i, clients, rate, stop_at, run_seconds, results, lock, user))
            for i in range(clients)]
        for thread in threads:
            thread.start()
        log(f"Soak: {rate}/s submissions and scale calls from {clients} clients for "
            f"{seconds:.0f} s; {workers} workers x {concurrency}, beat every {period} s")
        while (now := time.monotonic()) < stop_at:
            length = cast(int, redis.llen(settings.CELERY_TASK_DEFAULT_QUEUE))
            figures.queue_lengths.append((round(now - start, 1), length))
            last = _periodic_runs(redis).get(SAFETY_NET, 0.0)
            figures.safety_net_gap = max(figures.safety_net_gap, time.time() - last)
            if len(figures.queue_lengths) % 30 == 0:
                log(f"  {now - start:5.0f} s: queue {length}, requests {len(results)}")
            time.sleep(1.0)
        for thread in threads:
            thread.join(timeout=120)
        time.sleep(1.5)  # backends report their statistics within a second
        figures.deadlocks = deadlocks() - before
    codes = Counter(str(status) for _, status, _ in results)
    figures.requests = len(results)
    figures.statuses = dict(sorted(codes.items()))
    figures.scale_statuses = dict(sorted(Counter(
        str(status) for kind, status, _ in results if kind == "scale").items()))
    figures.server_errors = sum(n for code, n in codes.items() if code.startswith("5"))
    for kind in ("submit", "scale"):
        times = sorted(t for k, _, t in results if k == kind)
        if times:
            figures.latency_ms[f"{kind}_p50"] = round(times[len(times) // 2] * 1000, 1)
            figures.latency_ms[f"{kind}_p99"] = round(
                times[min(int(len(times) * 0.99), len(times) - 1)] * 1000, 1)
    return figures


def format_figures(figures: SoakFigures) -> list[str]:
    lengths = [length for _, length in figures.queue_lengths]
    return [
        f"requests           {figures.requests} {figures.statuses}",
        f"scale calls        {figures.scale_statuses}",
        f"5xx answers        {figures.server_errors}",
        f"deadlocks          {figures.deadlocks}",
        f"queue length       max {figures.max_queue()}, last {lengths[-1] if lengths else 0}, "
        f"growth {figures.queue_growth()} (last quarter's median less the second's)",
        f"safety net         longest gap {figures.safety_net_gap:.1f} s "
        f"(period {figures.safety_net_period} s)",
        "latency ms         " + ", ".join(f"{k} {v}" for k, v in figures.latency_ms.items()),
    ]
