"""Load tests of the web side: list endpoints and pages over a large database, and a burst of
changes reaching open browsers (``manage.py loadtest api|live``).

``seed`` fills a domain the way a busy installation looks: cluster queues in one cohort, two
local queues each, and tens of thousands of workloads in every phase (pending, holding quota
with running pods, finished, evicted and requeued) with their jobs, conditions, several
Events each and a day of usage samples. Rows go in with ``bulk_create`` in batches, under
names starting with ``load`` so they never collide with anyone's objects.

``measure_api`` requests every list and detail endpoint and the HTML pages many times,
interleaved, through real HTTP against a daphne server started for the run (the production
entry point, ``kueueweb.asgi:application``) or through Django's test client, and reports
latency percentiles and the SQL queries each request makes.

``measure_live`` commits workload status changes at a fixed rate, each through the path the
reconcilers use (a transaction, then ``kueueweb.live.notify`` after commit), while WebSocket
clients follow the domain on ``/ws/live/``. Messages carry no data and the consumer merges
bursts, so what must hold is that every change is followed by a message within a bounded
delay, and that this delay does not grow while the burst lasts (no backlog).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import json
import os
import platform
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import F
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.typing import Origin

from kueueweb.env import check_secret_key
from multicluster.models import Cluster, Pod, PodGroup
from scheduling.choices import EventType, QueueState, WorkloadPhase
from scheduling.manifests.apply import apply_manifests
from scheduling.models import (
    ClusterQueue,
    Event,
    Job,
    LocalQueue,
    QueueUsageSample,
    Workload,
)
from scheduling.workload.conditions import timestamp
from tools.bench.report import percentile

PREFIX = "load"
ADMIN_USERNAME = "loadtest-admin"
THRESHOLD_MS = 100.0
# Share of each phase among the seeded workloads (the rest are finished).
PHASE_SHARES = {"pending": 0.30, "admitted": 0.06, "evicted": 0.04}
REQUESTS = {"cpu": "1", "memory": "2Gi"}
Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


# =========================================================================================
# Seeding
# =========================================================================================


@dataclass
class SeedSummary:
    workloads: int = 0
    jobs: int = 0
    events: int = 0
    pods: int = 0
    usage_samples: int = 0
    cluster_queues: int = 0
    local_queues: int = 0
    phases: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    reused: bool = False


def namespace_of(index: int) -> str:
    return f"{PREFIX}-{index}"


def cluster_queue_name(index: int) -> str:
    return f"{PREFIX}-{index}-cq"


def quota_manifests(queues: int) -> list[dict[str, Any]]:
    """Two flavors, a cohort, ``queues`` cluster queues and two local queues for each."""
    docs: list[dict[str, Any]] = [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": f"{PREFIX}-{flavor}"},
         "spec": {"nodeLabels": {"instance-type": flavor}}}
        for flavor in ("on-demand", "spot")
    ]
    docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort",
                 "metadata": {"name": f"{PREFIX}-cohort"}})
    for i in range(queues):
        docs.append({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue_name(i)},
            "spec": {
                "cohortName": f"{PREFIX}-cohort",
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {"name": f"{PREFIX}-on-demand", "resources": [
                            {"name": "cpu", "nominalQuota": 1000, "borrowingLimit": 200},
                            {"name": "memory", "nominalQuota": "4000Gi"}]},
                        {"name": f"{PREFIX}-spot", "resources": [
                            {"name": "cpu", "nominalQuota": 500},
                            {"name": "memory", "nominalQuota": "2000Gi"}]},
                    ],
                }],
            },
        })
        for lq in ("queue", "batch"):
            docs.append({
                "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": namespace_of(i)},
                "spec": {"clusterQueue": cluster_queue_name(i)},
            })
    return docs


@contextlib.contextmanager
def explicit_timestamps() -> Iterator[None]:
    """Let bulk_create keep the creation times we give (a history spread over days) instead
    of stamping every row with now: auto_now/auto_now_add are switched off meanwhile."""
    fields = [
        model._meta.get_field(name) for model in (Workload, Job) for name in ("created_at",
                                                                              "updated_at")
    ]
    saved = [(f, f.auto_now, f.auto_now_add) for f in fields]  # type: ignore[union-attr]
    for f in fields:
        f.auto_now = f.auto_now_add = False  # type: ignore[union-attr]
    try:
        yield
    finally:
        for f, auto_now, auto_now_add in saved:
            f.auto_now, f.auto_now_add = auto_now, auto_now_add  # type: ignore[union-attr]


def _condition(type_: str, status: bool, reason: str, message: str,
               moment: datetime) -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message, "lastTransitionTime": timestamp(moment), "observedGeneration": 1}


def _pod_set(count: int) -> dict[str, Any]:
    return {"name": "main", "count": count, "template": {"spec": {
        "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "600"],
                        "resources": {"requests": dict(REQUESTS)}}],
        "restartPolicy": "Never"}}}


def _phase_of(rng: random.Random) -> str:
    draw = rng.random()
    for phase, share in PHASE_SHARES.items():
        if draw < share:
            return phase
        draw -= share
    return "finished"


@dataclass
class _Planned:
    job: Job
    workload: Workload
    kind: str
    count: int
    events: list[tuple[str, str, str, str, datetime]]  # kind, type, reason, message, when


def _plan(index: int, kind: str, rng: random.Random, *, cluster: Cluster, now: datetime,
          queues: int, total: int, lq_ids: dict[tuple[int, str], int],
          cq_ids: dict[int, int]) -> _Planned:
    q = index % queues
    lq = "queue" if index % 3 else "batch"
    namespace = namespace_of(q)
    job_name = f"{PREFIX}-job-{index:06d}"
    wl_name = f"job-{job_name}-{index % 100000:05x}"
    count = rng.randint(1, 4)
    # Creation times spread over the last week, oldest first.
    created = now - timedelta(seconds=(total - index) * (7 * 86400 / max(total, 1)))
    reserved = created + timedelta(seconds=rng.randint(1, 600))
    started = reserved + timedelta(seconds=rng.randint(2, 30))
    cq = cluster_queue_name(q)
    manifest = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": lq}},
        "spec": {"parallelism": count, "completions": count, "suspend": kind != "admitted",
                 "template": _pod_set(count)["template"]},
    }
    admission = {"clusterQueue": cq, "podSetAssignments": [{
        "name": "main", "count": count,
        "flavors": {"cpu": f"{PREFIX}-on-demand", "memory": f"{PREFIX}-on-demand"},
        "resourceUsage": {"cpu": str(count), "memory": f"{2 * count}Gi"},
    }]}
    created_msg = f"Created Workload: {namespace}/{wl_name}"
    events: list[tuple[str, str, str, str, datetime]] = [
        ("Job", EventType.NORMAL, "CreatedWorkload", created_msg, created)]
    conditions: list[dict[str, Any]] = []
    fields: dict[str, Any] = {"phase": WorkloadPhase.PENDING, "queued_at": created}
    job_status: dict[str, Any] = {}
    admitted_events = [
        ("Workload", EventType.NORMAL, "QuotaReserved",
         f"Quota reserved in ClusterQueue {cq}, wait time since queued was 1s", reserved),
        ("Workload", EventType.NORMAL, "Admitted",
         f"Admitted by ClusterQueue {cq}, wait time since reservation was 0s", reserved),
        ("Job", EventType.NORMAL, "Started",
         f"Admitted by clusterQueue {cq}", reserved),
    ]
    admitted_conditions = [
        _condition("QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}",
                   reserved),
        _condition("Admitted", True, "Admitted", "The workload is admitted", reserved),
        _condition("PodsReady", True, "PodsReady", "All pods reached readiness", started),
    ]
    if kind == "pending":
        if index % 2:
            message = ("couldn't assign flavors to pod set main: insufficient unused quota for "
                       f"cpu in flavor {PREFIX}-on-demand, {count} more needed")
            conditions = [_condition("QuotaReserved", False, "Pending", message, reserved)]
            fields["queue_state"] = QueueState.INADMISSIBLE
            events.append(("Workload", EventType.NORMAL, "Pending", message, reserved))
    elif kind == "admitted":
        conditions = admitted_conditions
        fields.update(phase=WorkloadPhase.ADMITTED, admission=admission,
                      quota_reserved_at=reserved, cluster_queue_id=cq_ids[q])
        events += admitted_events
        job_status = {"active": count, "ready": count, "startTime": timestamp(started)}
    elif kind == "evicted":
        evicted = started + timedelta(minutes=30)
        requeue = evicted + timedelta(seconds=60)
        conditions = [
            _condition("QuotaReserved", False, "Pending", "The workload is requeued", evicted),
            _condition("Admitted", False, "NoReservation", "The workload has no reservation",
                       evicted),
            _condition("Evicted", True, "PodsReadyTimeout",
                       "Exceeded the PodsReady timeout", evicted),
            _condition("Requeued", True, "BackoffFinished",
                       "The workload backoff was finished", requeue),
        ]
        fields.update(queued_at=evicted, requeue_at=requeue,
                      requeue_state={"count": 1, "requeueAt": timestamp(requeue)})
        events += [*admitted_events,
                   ("Workload", EventType.WARNING, "EvictedDueToPodsReadyTimeout",
                    "Exceeded the PodsReady timeout", evicted),
                   ("Job", EventType.NORMAL, "Stopped", "Exceeded the PodsReady timeout",
                    evicted),
                   ("Workload", EventType.NORMAL, "Requeued", "The workload backoff was finished",
                    requeue)]
    else:
        finished = started + timedelta(seconds=rng.randint(60, 3600))
        conditions = [*admitted_conditions, _condition(
            "Finished", True, "Succeeded", "Job finished successfully", finished)]
        fields.update(phase=WorkloadPhase.FINISHED, admission=admission,
                      quota_reserved_at=reserved, cluster_queue_id=cq_ids[q])
        events += [*admitted_events,
                   ("Job", EventType.NORMAL, "Completed", "Job completed", finished),
                   ("Workload", EventType.NORMAL, "Finished", "Job finished successfully",
                    finished)]
        job_status = {"succeeded": count, "startTime": timestamp(started),
                      "completionTime": timestamp(finished), "conditions": [
                          {"type": "Complete", "status": "True",
                           "lastTransitionTime": timestamp(finished)}]}
    job = Job(cluster=cluster, namespace=namespace, name=job_name, manifest=manifest,
              suspend=kind != "admitted", status=job_status, created_at=created,
              updated_at=created)
    workload = Workload(
        cluster=cluster, namespace=namespace, name=wl_name, queue_name=lq,
        priority=rng.choice((0, 0, 100, 10000)), pod_sets=[_pod_set(count)],
        local_queue_id=lq_ids[(q, lq)], conditions=conditions, created_at=created,
        updated_at=created, **fields,
    )
    return _Planned(job, workload, kind, count, events)


def seed(*, workloads: int, queues: int = 8, batch_size: int = 2000,
         now: datetime | None = None, log: Log = _quiet, rng_seed: int = 0,
         first: int = 0) -> SeedSummary:
    """Create the load domain in the manager's scheduling domain (see the module docstring).

    Workloads are numbered from ``first``, so a second call with ``first`` past the first
    call's workloads adds more (tests compare query counts at two sizes)."""
    started = time.perf_counter()
    now = now or timezone.now()
    rng = random.Random(rng_seed)
    cluster = Cluster.objects.get(role="manager")
    apply_manifests(quota_manifests(queues), cluster=cluster)
    cq_ids = {i: ClusterQueue.objects.get(cluster=cluster, name=cluster_queue_name(i)).pk
              for i in range(queues)}
    lq_ids = {(i, lq): LocalQueue.objects.get(cluster=cluster, namespace=namespace_of(i),
                                              name=lq).pk
              for i in range(queues) for lq in ("queue", "batch")}
    summary = SeedSummary(cluster_queues=queues, local_queues=2 * queues)
    nodes = list(cluster.nodes.values_list("name", flat=True)) or ["node-1"]
    with explicit_timestamps():
        end = first + workloads
        for start in range(first, end, batch_size):
            plans = [
                _plan(i, _phase_of(rng), rng, cluster=cluster, now=now, queues=queues,
                      total=end, lq_ids=lq_ids, cq_ids=cq_ids)
                for i in range(start, min(start + batch_size, end))
            ]
            with transaction.atomic():
                _insert_batch(plans, cluster, nodes, now, summary)
            log(f"  seeded {min(start + batch_size, end) - first}/{workloads} workloads")
    summary.usage_samples = _seed_usage_samples(cluster, queues, now, batch_size)
    settle_statistics()
    summary.seconds = round(time.perf_counter() - started, 1)
    return summary


def settle_statistics() -> None:
    """On PostgreSQL, what autovacuum does within minutes of a bulk load: planner statistics
    and the visibility map (index-only scans). SQLite is left as embedded mode runs it,
    without ANALYZE."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return
    with connection.cursor() as cursor:
        for model in (Workload, Job, Event, Pod, PodGroup, QueueUsageSample, ClusterQueue,
                      LocalQueue):
            cursor.execute(f'VACUUM ANALYZE "{model._meta.db_table}"')


def _insert_batch(plans: list[_Planned], cluster: Cluster, nodes: list[str], now: datetime,
                  summary: SeedSummary) -> None:
    jobs = Job.objects.bulk_create([p.job for p in plans])
    for plan, job in zip(plans, jobs, strict=True):
        plan.workload.job_id = job.pk
    created = Workload.objects.bulk_create([p.workload for p in plans])
    events: list[Event] = []
    groups: list[PodGroup] = []
    pods: list[Pod] = []
    for plan, wl in zip(plans, created, strict=True):
        summary.phases[plan.kind] = summary.phases.get(plan.kind, 0) + 1
        for kind, type_, reason, message, when in plan.events:
            events.append(Event(
                cluster=cluster, workload_id=wl.pk, object_kind=kind,
                object_namespace=wl.namespace,
                object_name=plan.job.name if kind == "Job" else wl.name,
                type=type_, reason=reason, message=message, created_at=when,
            ))
        if plan.kind == "admitted":
            groups.append(PodGroup(cluster=cluster, workload_id=wl.pk, job_id=plan.job.pk,
                                   pod_set="main", min_count=plan.count,
                                   created_at=wl.quota_reserved_at or now,
                                   bound_at=wl.quota_reserved_at or now))
    groups = PodGroup.objects.bulk_create(groups)
    group_of = {g.workload_id: g for g in groups}
    for plan, wl in zip(plans, created, strict=True):
        group = group_of.get(wl.pk)
        if group is None:
            continue
        for n in range(plan.count):
            pods.append(Pod(
                cluster=cluster, namespace=wl.namespace, name=f"{plan.job.name}-{n}",
                job_id=plan.job.pk, workload_id=wl.pk, group=group, pod_set="main",
                requests=dict(REQUESTS), node_name=nodes[(wl.pk + n) % len(nodes)],
                phase="Running", ready=True, created_at=group.created_at,
                scheduled_at=group.created_at, ready_at=group.created_at,
            ))
    Event.objects.bulk_create(events)
    Pod.objects.bulk_create(pods)
    summary.workloads += len(created)
    summary.jobs += len(jobs)
    summary.events += len(events)
    summary.pods += len(pods)


def _seed_usage_samples(cluster: Cluster, queues: int, now: datetime, batch_size: int) -> int:
    """A day of one-minute samples per cluster queue, as ``sample_usage`` writes them."""
    rows = []
    rng = random.Random(1)
    for minute in range(24 * 60):
        at = now - timedelta(minutes=24 * 60 - minute)
        for i in range(queues):
            rows.append(QueueUsageSample(
                cluster=cluster, cluster_queue=cluster_queue_name(i), sampled_at=at,
                pending=rng.randint(1000, 2500), admitted=rng.randint(200, 400),
                usage={f"{PREFIX}-on-demand/cpu": rng.randint(500, 1000)},
            ))
    QueueUsageSample.objects.bulk_create(rows, batch_size=batch_size)
    return len(rows)


def is_seeded() -> bool:
    return ClusterQueue.objects.filter(name=cluster_queue_name(0)).exists() and \
        Workload.objects.filter(namespace=namespace_of(0)).exists()


# =========================================================================================
# Endpoints
# =========================================================================================


@dataclass
class Endpoint:
    name: str
    path: str
    kind: str  # "api" or "page"


def endpoints() -> list[Endpoint]:
    """The lists (first page, filtered, sorted, a late page), details and pages measured."""
    cluster = Cluster.objects.get(role="manager").name

    def sample(kind: str, **filters: Any) -> Workload:
        wl = (Workload.objects.filter(namespace__startswith=f"{PREFIX}-", **filters)
              .select_related("job").order_by("id").first())
        if wl is None:
            raise RuntimeError(f"no seeded {kind} workload: seed the database first")
        return wl

    finished = sample("finished", phase=WorkloadPhase.FINISHED)
    admitted = sample("admitted", phase=WorkloadPhase.ADMITTED)
    pending = sample("pending", phase=WorkloadPhase.PENDING)
    total = Workload.objects.count()
    late = max(0, (total * 4) // 5 // 100 * 100)
    ui_late = max(1, (total * 4) // 5 // 50)
    ns = namespace_of(1)
    cq = cluster_queue_name(0)

    def wl_url(wl: Workload) -> str:
        return f"/c/{cluster}/namespaces/{wl.namespace}/workloads/{wl.name}/"

    api = [
        ("workloads: first page", "/api/v1/workloads/"),
        ("workloads: by queue", "/api/v1/workloads/?queueName=batch"),
        ("workloads: by phase", "/api/v1/workloads/?phase=Pending"),
        ("workloads: by cluster queue", f"/api/v1/workloads/?clusterQueue={cq}"),
        ("workloads: in a namespace", f"/api/v1/namespaces/{ns}/workloads/"),
        ("workloads: late page", f"/api/v1/workloads/?offset={late}&limit=100"),
        ("workloads: of a job", f"/api/v1/namespaces/{finished.namespace}/workloads/"
                                f"?job={finished.job.name if finished.job else ''}"),
        ("workload", f"/api/v1/namespaces/{admitted.namespace}/workloads/{admitted.name}/"),
        ("jobs: first page", "/api/v1/jobs/"),
        ("jobs: late page", f"/api/v1/jobs/?offset={late}&limit=100"),
        ("job", f"/api/v1/namespaces/{admitted.namespace}/jobs/"
                f"{admitted.job.name if admitted.job else ''}/?kind="
                f"{admitted.job.kind if admitted.job else ''}"),
        ("clusterqueues", "/api/v1/clusterqueues/"),
        ("clusterqueue", f"/api/v1/clusterqueues/{cq}/"),
        ("localqueues", "/api/v1/localqueues/"),
        ("pending workloads of a cluster queue",
         f"/api/v1/clusterqueues/{cq}/pendingworkloads?limit=100"),
        ("pending workloads of a local queue",
         f"/api/v1/namespaces/{namespace_of(0)}/localqueues/queue/pendingworkloads?limit=100"),
    ]
    pages = [
        ("overview", "/"),
        ("overview: domain region", f"/overview/domains/{cluster}/"),
        ("overview: history data", "/overview/history/data/?hours=24"),
        ("workloads page", "/workloads/"),
        ("workloads page: pending by priority", "/workloads/?state=Pending&sort=-priority"),
        ("workloads page: by cluster queue", f"/workloads/?cluster_queue={cq}"),
        ("workloads page: evicted", "/workloads/?state=evicted"),
        ("workloads page: late page", f"/workloads/?page={ui_late}"),
        ("workloads table region", "/workloads/partial/?sort=name"),
        ("workloads page: grouped, with positions and reasons",
         "/workloads/?group=cluster_queue&cols=name,state,position,reason&state=Pending"),
        ("jobs page", "/jobs/"),
        ("jobs page: grouped by state", "/jobs/?group=state&sort=-priority"),
        ("workload page: finished", wl_url(finished)),
        ("workload page: admitted", wl_url(admitted)),
        ("workload page: pending", wl_url(pending)),
        ("workload events region", wl_url(finished) + "partial/events/"),
        ("job page", f"/c/{cluster}/namespaces/{admitted.namespace}/jobs/"
                     f"{admitted.job.kind if admitted.job else ''}/"
                     f"{admitted.job.name if admitted.job else ''}/"),
        ("cluster queue page", f"/c/{cluster}/clusterqueues/{cq}/"),
        ("cluster queue pending region", f"/c/{cluster}/clusterqueues/{cq}/pending/"
                                         "?pending_page=20"),
        ("local queue page", f"/c/{cluster}/namespaces/{namespace_of(0)}/localqueues/queue/"),
        ("clusters page", "/clusters/"),
        ("cluster page", f"/clusters/{cluster}/"),
        ("metrics", "/metrics"),
    ]
    return ([Endpoint(n, p, "api") for n, p in api]
            + [Endpoint(n, p, "page") for n, p in pages])


# =========================================================================================
# Transports
# =========================================================================================


def admin_user() -> User:
    user, created = User.objects.get_or_create(
        username=ADMIN_USERNAME, defaults={"is_superuser": True, "is_staff": True})
    if created:
        user.set_unusable_password()
        user.save()
    return user


def allowed_host() -> str:
    hosts = [h for h in settings.ALLOWED_HOSTS if h and not h.startswith(".") and h != "*"]
    return "127.0.0.1" if "127.0.0.1" in hosts or "*" in settings.ALLOWED_HOSTS or not hosts \
        else hosts[0]


class ClientTransport:
    """Django's test client in this process (no network, no ASGI server)."""

    name = "django-test-client"

    def __init__(self, user: User) -> None:
        self.client = Client(HTTP_HOST=allowed_host())
        self.client.force_login(user)

    def get(self, path: str) -> tuple[int, int]:
        response = self.client.get(path)
        return response.status_code, len(response.content)

    def close(self) -> None:
        self.client.logout()


class HttpTransport:
    """Real HTTP to a daphne server started for the run (``kueueweb.asgi:application``, as
    production serves it, with DEBUG off) on a free port; reconcilers do not run in it."""

    name = "http-daphne"

    def __init__(self, user: User, *, log: Log = _quiet) -> None:
        client = server_login(user)  # a session row in the database the server reads
        self._login_client = client
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        self.headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}",
                        "Host": allowed_host()}
        self.port = free_port()
        self.log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115  # closed in close()
            prefix="kueueweb-loadtest-daphne-", suffix=".log", delete=False)
        self.process = start_daphne(self.port, self.log_file)
        wait_for_port(self.port, self.process, self.log_file.name)
        self.connection = HTTPConnection("127.0.0.1", self.port, timeout=60)
        log(f"  daphne on 127.0.0.1:{self.port} (pid {self.process.pid})")

    def get(self, path: str) -> tuple[int, int]:
        for attempt in (1, 2):
            try:
                self.connection.request("GET", path, headers=self.headers)
                response = self.connection.getresponse()
                body = response.read()
                return response.status, len(body)
            except (ConnectionError, OSError):
                self.connection.close()
                self.connection = HTTPConnection("127.0.0.1", self.port, timeout=60)
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.connection.close()
        stop_process(self.process)
        self.log_file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log_file.name)
        self._login_client.logout()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.cache
def server_secret_key() -> str:
    """The server's SECRET_KEY: this process's, unless that is the public development key,
    which the settings refuse with DEBUG off; then a fresh one for the run."""
    try:
        check_secret_key("SECRET_KEY", settings.SECRET_KEY)
    except ImproperlyConfigured:
        return secrets.token_urlsafe(50)
    return str(settings.SECRET_KEY)


def server_login(user: User, *, separate: bool = True) -> Client:
    """A client signed in with a session the server accepts: the session's hash is signed
    with the server's key (``separate``: a daphne process of the run; else this process)."""
    client = Client(HTTP_HOST=allowed_host())
    key = server_secret_key() if separate else settings.SECRET_KEY
    with override_settings(SECRET_KEY=key):
        client.force_login(user)
    return client


def server_environment() -> dict[str, str]:
    """The server shares this process's database, keys and Redis, with DEBUG off."""
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "kueueweb.settings"),
        "DEBUG": "false",
        "SECRET_KEY": server_secret_key(),
        "KUEUEWEB_ENCRYPTION_KEY": settings.KUEUEWEB_ENCRYPTION_KEY,
        "LOG_LEVEL": "WARNING",
        "PYTHONUNBUFFERED": "1",
    })
    env.pop("SECRET_KEY_FILE", None)
    env.pop("KUEUEWEB_ENCRYPTION_KEY_FILE", None)
    if not env.get("DATABASE_URL"):
        db = settings.DATABASES["default"]
        if db["ENGINE"].endswith("sqlite3"):
            env["DATABASE_URL"] = f"sqlite:///{db['NAME']}"
    return env


def start_daphne(port: int, log_file: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
         "kueueweb.asgi:application"],
        cwd=str(settings.BASE_DIR), env=server_environment(), stdout=log_file,
        stderr=subprocess.STDOUT,
    )


def wait_for_port(port: int, process: subprocess.Popen[bytes], log_name: str,
                  timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"daphne exited with {process.returncode}: "
                               f"{Path(log_name).read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.2)
    stop_process(process)
    raise RuntimeError(f"daphne did not listen on port {port} within {timeout:.0f} s")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


# =========================================================================================
# API and pages
# =========================================================================================


@dataclass
class EndpointResult:
    name: str
    path: str
    kind: str
    requests: int
    errors: int
    status: int
    queries: int | None
    bytes: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    passed: bool


def count_queries(user: User, targets: Sequence[Endpoint]) -> dict[str, int]:
    """SQL queries of one request to each endpoint (test client, after a warm-up request)."""
    transport = ClientTransport(user)
    counts = {}
    try:
        for target in targets:
            transport.get(target.path)
            with CaptureQueriesContext(connection) as captured:
                transport.get(target.path)
            counts[target.path] = len(captured.captured_queries)
    finally:
        transport.close()
    return counts


def measure_api(*, transport_name: str, requests: int, threshold_ms: float = THRESHOLD_MS,
                log: Log = _quiet, only: Sequence[str] = ()) -> dict[str, Any]:
    """Latency of every endpoint: ``requests`` rounds, each requesting every endpoint once
    (interleaved, so that noise on a shared machine spreads over all of them)."""
    user = admin_user()
    targets = [t for t in endpoints() if not only or any(o in t.name for o in only)]
    queries = count_queries(user, targets)
    transport: ClientTransport | HttpTransport = (
        HttpTransport(user, log=log) if transport_name == "http" else ClientTransport(user))
    timings: dict[str, list[float]] = {t.path: [] for t in targets}
    errors: dict[str, int] = dict.fromkeys(timings, 0)
    status: dict[str, int] = {}
    sizes: dict[str, int] = {}
    try:
        for target in targets:  # warm-up: connections, caches, templates
            status[target.path], sizes[target.path] = transport.get(target.path)
        for round_ in range(requests):
            for target in targets:
                started = time.perf_counter()
                code, size = transport.get(target.path)
                timings[target.path].append((time.perf_counter() - started) * 1000)
                if code != 200:
                    errors[target.path] += 1
                status[target.path] = code
                sizes[target.path] = size
            if (round_ + 1) % max(1, requests // 5) == 0:
                log(f"  round {round_ + 1}/{requests}")
    finally:
        transport.close()
    results = []
    for t in targets:
        values = timings[t.path]
        p99 = percentile(values, 99)
        results.append(EndpointResult(
            name=t.name, path=t.path, kind=t.kind, requests=len(values),
            errors=errors[t.path], status=status.get(t.path, 0), queries=queries.get(t.path),
            bytes=sizes.get(t.path, 0), p50_ms=round(percentile(values, 50), 2),
            p90_ms=round(percentile(values, 90), 2), p99_ms=round(p99, 2),
            max_ms=round(max(values, default=0.0), 2),
            passed=p99 < threshold_ms and errors[t.path] == 0,
        ))
    return {
        "transport": transport.name,
        "requests_per_endpoint": requests,
        "threshold_ms": threshold_ms,
        "endpoints": [asdict(r) for r in results],
        "errors": sum(r.errors for r in results),
        "passed": all(r.passed for r in results),
    }


def format_api(report: dict[str, Any]) -> list[str]:
    lines = [f"{'endpoint':44} {'q':>3} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8}  result"]
    for r in report["endpoints"]:
        verdict = "PASS" if r["passed"] else ("FAIL" if not r["errors"]
                                              else f"FAIL ({r['errors']} errors, {r['status']})")
        lines.append(f"{r['name'][:44]:44} {r['queries'] if r['queries'] is not None else '-':>3} "
                     f"{r['p50_ms']:8.1f} {r['p90_ms']:8.1f} {r['p99_ms']:8.1f} "
                     f"{r['max_ms']:8.1f}  {verdict}")
    failed = [r["name"] for r in report["endpoints"] if not r["passed"]]
    lines.append(f"{'PASS' if report['passed'] else 'FAIL'}: p99 < {report['threshold_ms']:.0f} ms"
                 f" on {len(report['endpoints']) - len(failed)}/{len(report['endpoints'])} "
                 "endpoints" + (f"; failing: {', '.join(failed)}" if failed else ""))
    return lines


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "database": connection.vendor,
        "channel_layer": str(_layer_settings()["BACKEND"]),
        # Other processes on the machine skew every figure: the 1, 5 and 15 minute averages.
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


# =========================================================================================
# Live updates
# =========================================================================================


@dataclass
class ClientStats:
    client: int
    messages: int
    missed: int
    lag_p50_ms: float
    lag_p99_ms: float
    lag_max_ms: float
    lag_p99_first_third_ms: float
    lag_p99_last_third_ms: float


def lag_stats(client: int, changes: Sequence[float], received: Sequence[float]) -> ClientStats:
    """For each change (commit time), the time until this client's next message: that is
    when its page re-reads the domain and shows the change."""
    received = sorted(received)
    lags: list[float] = []
    missed = 0
    for changed in changes:
        i = bisect.bisect_right(received, changed)
        if i == len(received):
            missed += 1
        else:
            lags.append((received[i] - changed) * 1000)
    third = max(1, len(lags) // 3)
    return ClientStats(
        client=client, messages=len(received), missed=missed,
        lag_p50_ms=round(percentile(lags, 50), 1), lag_p99_ms=round(percentile(lags, 99), 1),
        lag_max_ms=round(max(lags, default=0.0), 1),
        lag_p99_first_third_ms=round(percentile(lags[:third], 99), 1),
        lag_p99_last_third_ms=round(percentile(lags[-third:], 99), 1),
    )


class ChangeProducer:
    """Workload status changes at ``rate`` per second, each committed in its own transaction
    with ``kueueweb.live.notify`` (the reconcilers' path), from ``threads`` plain threads as
    Celery workers or the embedded loop run them (each thread takes every n-th change)."""

    def __init__(self, cluster_id: int, rate: float, seconds: float, threads: int = 2) -> None:
        self.cluster_id = cluster_id
        self.rate = rate
        self.seconds = seconds
        self.commit_times: list[float] = []
        self.errors: list[BaseException] = []
        ids = list(Workload.objects.filter(cluster_id=cluster_id, phase=WorkloadPhase.PENDING)
                   .order_by("id").values_list("id", flat=True)[:1000])
        if not ids:
            raise RuntimeError("no pending workload to change: seed the database first")
        self.ids = ids
        self.threads = [threading.Thread(target=self._run, args=(i, threads),
                                         name=f"loadtest-producer-{i}", daemon=True)
                        for i in range(max(1, threads))]

    def start(self) -> None:
        self.start_time = time.monotonic()
        for thread in self.threads:
            thread.start()

    def wait(self) -> None:
        for thread in self.threads:
            thread.join()

    def join(self) -> None:
        self.wait()
        if self.errors:
            raise self.errors[0]
        self.commit_times.sort()

    def _run(self, first: int, step: int) -> None:
        from django.db import close_old_connections

        from kueueweb import live

        total = int(self.rate * self.seconds)
        try:
            for n in range(first, total, step):
                delay = self.start_time + n / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pk = self.ids[n % len(self.ids)]
                with transaction.atomic():
                    Workload.objects.filter(pk=pk).update(
                        scheduling_stats={"loadtest": n},
                        resource_version=F("resource_version") + 1)
                    live.notify(self.cluster_id)
                self.commit_times.append(time.monotonic())
        except BaseException as exc:  # reported by join()
            self.errors.append(exc)
        finally:
            close_old_connections()


async def _asgi_clients(count: int, cookie: str, cluster_id: int, stop: asyncio.Event,
                        received: list[list[float]], backlog: list[tuple[float, int]]) -> None:
    """``count`` WebSocket clients through the ASGI application in this process (channels'
    WebsocketCommunicator); the channel layer's queues are sampled for a backlog."""
    from channels.layers import get_channel_layer
    from channels.testing import WebsocketCommunicator

    from kueueweb.asgi import application

    host = allowed_host()
    headers = [(b"origin", f"http://{host}".encode()), (b"host", host.encode()),
               (b"cookie", cookie.encode())]
    communicators = []
    for _ in range(count):
        comm = WebsocketCommunicator(application, "/ws/live/", headers=headers)
        connected, _code = await comm.connect(timeout=10)
        if not connected:
            raise RuntimeError("the live socket refused the load test's admin session")
        await comm.send_to(text_data=json.dumps({"subscribe": [cluster_id]}))
        reply = json.loads(await comm.receive_from(timeout=10))
        if reply.get("type") != "subscribed":
            raise RuntimeError(f"unexpected reply to subscribe: {reply}")
        communicators.append(comm)
    layer = get_channel_layer()

    async def listen(index: int, comm: Any) -> None:
        # The communicator's own receive cancels the application on a timeout: wait on its
        # output queue instead.
        while not stop.is_set():
            try:
                event = await asyncio.wait_for(comm.output_queue.get(), 0.2)
            except TimeoutError:
                continue
            if event.get("type") == "websocket.close":
                raise RuntimeError("the server closed a live socket")
            if json.loads(event.get("text") or "{}").get("type") == "changed":
                received[index].append(time.monotonic())

    async def sample() -> None:
        channels = getattr(layer, "channels", None)
        while not stop.is_set():
            if isinstance(channels, dict):
                backlog.append((time.monotonic(),
                                sum(q.qsize() for q in list(channels.values()))))
            await asyncio.sleep(0.1)

    tasks = [asyncio.ensure_future(listen(i, c)) for i, c in enumerate(communicators)]
    tasks.append(asyncio.ensure_future(sample()))
    await stop.wait()
    await asyncio.gather(*tasks)
    for comm in communicators:
        await comm.disconnect()


async def _socket_clients(count: int, port: int, cookie: str, cluster_id: int,
                          stop: asyncio.Event, received: list[list[float]]) -> None:
    """``count`` browsers' live sockets to the server on ``port``, each subscribed to the
    domain, recording when each ``changed`` message arrives."""
    sockets = []
    for _ in range(count):
        ws = await connect(f"ws://127.0.0.1:{port}/ws/live/",
                           origin=Origin(f"http://127.0.0.1:{port}"),
                           additional_headers={"Cookie": cookie})
        await ws.send(json.dumps({"subscribe": [cluster_id]}))
        reply = await asyncio.wait_for(ws.recv(), 10)
        if json.loads(reply).get("type") != "subscribed":
            raise RuntimeError(f"unexpected reply to subscribe: {reply!r}")
        sockets.append(ws)

    async def listen(index: int, ws: ClientConnection) -> None:
        while not stop.is_set():
            try:
                message = await asyncio.wait_for(ws.recv(), 0.2)
            except TimeoutError:
                continue
            except ConnectionClosed as closed:
                raise RuntimeError("the server closed a live socket") from closed
            if json.loads(message).get("type") == "changed":
                received[index].append(time.monotonic())

    await asyncio.gather(*(listen(i, ws) for i, ws in enumerate(sockets)))
    for ws in sockets:
        await ws.close()


def _layer_settings() -> dict[str, Any]:
    layers: dict[str, dict[str, Any]] = settings.CHANNEL_LAYERS
    return layers["default"]


def _group_members(client: Any, group: str) -> set[str]:
    prefix = str(_layer_settings().get("CONFIG", {}).get("prefix", "asgi"))
    return {m.decode() for m in client.zrange(f"{prefix}:group:{group}", 0, -1)}


def _redis_backlog(stop: threading.Event, group: str, before: set[str],
                   samples: list[tuple[float, int]]) -> None:
    """Messages waiting in the Redis channel layer for this run's consumers: the members of
    ``group`` that were not there before the clients connected (channels_redis keeps a
    server process's messages in one sorted set)."""
    import redis

    client: Any = redis.Redis.from_url(settings.REDIS_URL)
    prefix = str(_layer_settings().get("CONFIG", {}).get("prefix", "asgi"))
    try:
        while not stop.is_set():
            members = _group_members(client, group) - before
            keys = {prefix + m[:m.index("!") + 1] if "!" in m else prefix + m for m in members}
            total = sum(int(client.zcard(k)) for k in keys)
            samples.append((time.monotonic(), total))
            stop.wait(0.1)
    finally:
        client.close()


def measure_live(*, rate: float, seconds: float, clients: int, transport_name: str,
                 max_lag_ms: float = 2000.0, settle_seconds: float = 2.0, producers: int = 2,
                 log: Log = _quiet) -> dict[str, Any]:
    """Changes at ``rate``/s for ``seconds`` while ``clients`` sockets follow the domain."""
    user = admin_user()
    cluster_id = int(Cluster.objects.get(role="manager").pk)
    login = server_login(user, separate=transport_name == "http")
    cookie = f"{settings.SESSION_COOKIE_NAME}={login.cookies[settings.SESSION_COOKIE_NAME].value}"
    producer = ChangeProducer(cluster_id, rate, seconds, producers)
    received: list[list[float]] = [[] for _ in range(clients)]
    backlog: list[tuple[float, int]] = []
    process: subprocess.Popen[bytes] | None = None
    log_file = None
    try:
        if transport_name == "http":
            if "redis" not in str(_layer_settings()["BACKEND"]).lower():
                raise RuntimeError("--transport http needs REDIS_URL: the server and this "
                                   "process must share the channel layer")
            port = free_port()
            log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115  # closed below
                prefix="kueueweb-loadtest-daphne-", suffix=".log", delete=False)
            process = start_daphne(port, log_file)
            wait_for_port(port, process, log_file.name)
            transport = "websocket-daphne"
        else:
            port = 0
            transport = "asgi-in-process"

        async def main() -> None:
            stop = asyncio.Event()
            if transport_name == "http":
                import redis

                from kueueweb.live import group_name

                group = group_name(cluster_id)
                redis_client: Any = redis.Redis.from_url(settings.REDIS_URL)
                before = _group_members(redis_client, group)
                redis_client.close()
                clients_task = asyncio.ensure_future(
                    _socket_clients(clients, port, cookie, cluster_id, stop, received))
                stop_sampling = threading.Event()
                sampler = threading.Thread(
                    target=_redis_backlog, args=(stop_sampling, group, before, backlog),
                    daemon=True)
            else:
                clients_task = asyncio.ensure_future(
                    _asgi_clients(clients, cookie, cluster_id, stop, received, backlog))
            await asyncio.sleep(1.0)  # let every socket connect and subscribe
            if clients_task.done():
                clients_task.result()
            if transport_name == "http":
                sampler.start()
            log(f"  {clients} clients connected; {rate:.0f} changes/s for {seconds:.0f} s")
            producer.start()
            await asyncio.get_running_loop().run_in_executor(None, producer.wait)
            await asyncio.sleep(settle_seconds)  # the trailing, coalesced messages
            stop.set()
            await clients_task
            if transport_name == "http":
                stop_sampling.set()
                sampler.join()

        try:
            asyncio.run(main())
        except (OSError, RuntimeError) as exc:
            tail = Path(log_file.name).read_text()[-3000:] if log_file is not None else ""
            raise RuntimeError(f"{type(exc).__name__}: {exc}\nserver log:\n{tail}") from exc
        producer.join()
    finally:
        if process is not None:
            stop_process(process)
        if log_file is not None:
            log_file.close()
            with contextlib.suppress(OSError):
                os.unlink(log_file.name)
        login.logout()
    changes = producer.commit_times
    duration = (changes[-1] - changes[0]) if len(changes) > 1 else 0.0
    achieved = (len(changes) - 1) / duration if duration > 0 else 0.0
    stats = [lag_stats(i, changes, r) for i, r in enumerate(received)]
    start = changes[0] if changes else 0.0
    series = [{"t": round(t - start, 2), "queued": n} for t, n in backlog]
    during = [s["queued"] for s in series if 0 <= s["t"] <= duration]
    third = max(1, len(during) // 3)
    worst_p99 = max((s.lag_p99_ms for s in stats), default=0.0)
    growth = max((s.lag_p99_last_third_ms - s.lag_p99_first_third_ms for s in stats),
                 default=0.0)
    checks = {
        "rate_reached": achieved >= 0.9 * rate,
        "every_client_saw_the_last_change": all(s.missed == 0 for s in stats),
        "lag_p99_within_bound": worst_p99 <= max_lag_ms,
        # Backlog: the lag late in the burst is not longer than early on (250 ms slack for
        # the coalescing window's phase), and the layer's queues do not keep growing.
        "lag_not_growing": growth <= 250.0,
        "queue_not_growing": (not during) or max(during[-third:]) <= max(during[:third]) + 50,
    }
    return {
        "transport": transport,
        "rate_requested": rate,
        "rate_achieved": round(achieved, 1),
        "producer_threads": len(producer.threads),
        "seconds": seconds,
        "changes": len(changes),
        "clients": [asdict(s) for s in stats],
        "messages_per_client_per_second": round(
            sum(s.messages for s in stats) / max(1, len(stats)) / max(duration, 1e-9), 2),
        "max_lag_ms": max_lag_ms,
        "lag_p99_ms": worst_p99,
        "lag_max_ms": max((s.lag_max_ms for s in stats), default=0.0),
        "backlog": {"samples": len(series), "max_queued": max(during, default=0),
                    "queued_at_end": series[-1]["queued"] if series else 0,
                    "series": series[:: max(1, len(series) // 50)]},
        "checks": checks,
        "passed": all(checks.values()),
    }


def format_live(report: dict[str, Any]) -> list[str]:
    lines = [
        f"transport {report['transport']}: {report['changes']} changes, "
        f"{report['rate_achieved']:.0f}/s achieved of {report['rate_requested']:.0f}/s",
        f"{'client':>6} {'msgs':>6} {'missed':>6} {'lag p50':>9} {'lag p99':>9} {'lag max':>9} "
        f"{'p99 1st/3':>10} {'p99 3rd/3':>10}",
    ]
    for s in report["clients"]:
        lines.append(f"{s['client']:>6} {s['messages']:>6} {s['missed']:>6} "
                     f"{s['lag_p50_ms']:>9.0f} {s['lag_p99_ms']:>9.0f} {s['lag_max_ms']:>9.0f} "
                     f"{s['lag_p99_first_third_ms']:>10.0f} {s['lag_p99_last_third_ms']:>10.0f}")
    b = report["backlog"]
    lines.append(f"messages per client per second: {report['messages_per_client_per_second']}; "
                 f"channel-layer queue: max {b['max_queued']}, at end {b['queued_at_end']}")
    for name, ok in report["checks"].items():
        lines.append(f"  {'ok  ' if ok else 'FAIL'} {name.replace('_', ' ')}")
    lines.append(f"{'PASS' if report['passed'] else 'FAIL'}: lag p99 {report['lag_p99_ms']:.0f} ms"
                 f" (bound {report['max_lag_ms']:.0f} ms), not growing over the burst")
    return lines

