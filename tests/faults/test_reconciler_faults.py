"""Faults, really done, in production mode: PostgreSQL, a private Redis, real Celery worker
and beat processes, a live Daphne server.

1. A Celery worker is SIGKILLed in the middle of an admission cycle.
2. Redis goes away and comes back.
3. A MultiKueue worker cluster's API server goes away and comes back.
4. The database connection of a request is terminated mid-request.

After each, the invariants of ``tests.fixtures.faults.check_invariants`` hold: no queue over
its quota, no workload lost, none admitted twice.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.choices import WorkloadPhase
from scheduling.models import AdmissionLease, ClusterQueue, Workload
from scheduling.scheduler.admission import candidates_per_queue
from scheduling.services import WorkloadRequest, create_workloads
from tests.fixtures import faults
from tests.fixtures.faults import RedisServer, check_invariants
from tests.fixtures.processes import Processes, wait_for

# The fault fixtures, for this module only.
private_redis = faults.private_redis
fault_processes = faults.fault_processes

pytestmark = [pytest.mark.production, pytest.mark.slow]

RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


def _pod_set(cpu: str) -> dict[str, Any]:
    return {"name": "main", "count": 1, "template": {"spec": {"containers": [
        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}]}}}


def reserved_per_queue(cluster_id: int) -> Counter[str]:
    return Counter(
        Workload.objects.filter(cluster_id=cluster_id, phase__in=RESERVED)
        .values_list("cluster_queue__name", flat=True)
    )


# =========================================================================================
# 1. A worker killed in the middle of an admission cycle
# =========================================================================================

QUEUES = 60
# Per queue. One cycle admits the head of every queue; one admission run applies a few
# cycles (at most the candidates it loads per queue) in one transaction, so this takes
# four runs, and a kill in the run after the first still leaves work to finish.
FITTING = 4 * candidates_per_queue(QUEUES)


@pytest.mark.timeout(240)
def test_worker_killed_during_an_admission_cycle(
    fault_processes: Processes, manager: Cluster, make_queue: Any,
) -> None:
    """Every admission run applies whole cycles, each admitting the head of every queue, in
    one transaction, so after the kill all queues have admitted the same number of
    workloads: a run applied in part would leave some queues ahead. The dead worker's lease
    expires and a new worker finishes."""
    processes = fault_processes
    processes.env["KUEUEWEB_ADMISSION_LEASE_SECONDS"] = "3"
    requests = []
    for i in range(QUEUES):
        make_queue(f"cq-{i:03d}", {"cpu": str(FITTING)})
        # FITTING workloads that fit, then one that never does (its queue is full).
        for j in range(FITTING + 1):
            requests.append(WorkloadRequest(
                "ns", f"wl-{i:03d}-{j}",
                {"queueName": f"lq-cq-{i:03d}", "podSets": [_pod_set("1")]}, {}, {}))
    create_workloads(requests, cluster=manager)
    total = len(requests)

    processes.start_worker("worker-1", concurrency=1)
    processes.start_beat("beat")

    def holder() -> str:
        return AdmissionLease.objects.filter(cluster_id=manager.pk).values_list(
            "holder", flat=True).first() or ""

    def first_run_applied() -> str:
        return holder() if Workload.objects.filter(cluster_id=manager.pk,
                                                   phase__in=RESERVED).exists() else ""

    # A run applied its decisions; then the next run (a new holder id) starts: kill it.
    previous = wait_for(first_run_applied, timeout=90, what="a first admission run applied",
                        processes=processes, interval=0.01)
    wait_for(lambda: holder() not in ("", previous), timeout=60,
             what="the next admission run in progress", processes=processes, interval=0.01)
    processes.kill("worker-1")
    killed_at = timezone.now()

    # Nothing partially applied: every queue admitted the same number of workloads.
    per_queue = reserved_per_queue(manager.pk)
    counts = {per_queue.get(f"cq-{i:03d}", 0) for i in range(QUEUES)}
    assert len(counts) == 1, (
        f"a run was applied in part: {sorted(Counter(per_queue.values()).items())}")
    (admitted_before,) = counts
    assert admitted_before < FITTING, "the kill came too late to test anything"
    check_invariants(manager.pk, workloads=total)
    lease = AdmissionLease.objects.get(cluster_id=manager.pk)
    dead_lease = (lease.holder, lease.expires_at) if lease.holder else None

    # Another worker takes over (once the dead worker's lease expired) and admits the rest.
    processes.start_worker("worker-2", concurrency=1)

    def all_admitted() -> bool:
        per_queue = reserved_per_queue(manager.pk)
        return all(per_queue.get(f"cq-{i:03d}", 0) == FITTING for i in range(QUEUES))

    wait_for(all_admitted, timeout=120, what="every fitting workload admitted",
             processes=processes)
    check_invariants(manager.pk, workloads=total)
    assert Workload.objects.filter(cluster_id=manager.pk, phase=WorkloadPhase.PENDING).count() \
        == QUEUES
    if dead_lease is not None:
        dead_holder, expires_at = dead_lease
        after_kill = Workload.objects.filter(cluster_id=manager.pk, quota_reserved_at__gt=killed_at)
        first = min(after_kill.values_list("quota_reserved_at", flat=True))
        # The dead holder's lease was respected until it expired.
        assert expires_at is not None
        assert first >= expires_at, (dead_holder, expires_at, first)
    print(f"killed with {admitted_before} admitted per queue; lease then {dead_lease}")


# =========================================================================================
# 2. Redis goes away and comes back
# =========================================================================================

# Counts the live refreshes the page's live.js performs.
COUNT_REFRESHES = """() => {
  window.__refreshes = 0;
  document.addEventListener("live:refreshed", () => { window.__refreshes += 1; });
}"""


def _workload_document(name: str, queue: str, cpu: str = "1") -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"queueName": queue, "podSets": [_pod_set(cpu)]}}


def _phase(cluster_id: int, name: str) -> str | None:
    return (Workload.objects.filter(cluster_id=cluster_id, namespace="ns", name=name)
            .values_list("phase", flat=True).first())


BUSY_QUEUES = 60


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_redis_restart(
    fault_processes: Processes, private_redis: RedisServer, manager: Cluster,
    make_queue: Any, admin_user: Any, chromium: Any, tmp_path: Any,
) -> None:
    """Redis (broker and channel layer) dies and comes back empty: requests keep working
    meanwhile, the worker and beat reconnect and admit what was submitted, and the browser's
    live socket reconnects and receives updates again, with no operator action."""
    import requests
    from rest_framework.authtoken.models import Token

    from tests.fixtures.faults import start_daphne, web_env

    processes = fault_processes
    make_queue("cq", {"cpu": "100"})
    for i in range(BUSY_QUEUES):
        make_queue(f"busy-{i:02d}", {"cpu": "3"})
    token = Token.objects.create(user=admin_user)
    api = requests.Session()
    api.headers["Authorization"] = f"Token {token.key}"
    web = start_daphne(web_env(private_redis.url()), tmp_path)
    processes.start_worker("worker", concurrency=2)
    processes.start_beat("beat")

    def logs() -> str:
        return processes.logs() + "\n--- daphne\n" + web.logs()

    def submit(name: str) -> float:
        started = time.monotonic()
        response = api.post(f"{web.url}/api/v1/namespaces/ns/workloads",
                            json=_workload_document(name, "lq-cq"), timeout=60)
        elapsed = time.monotonic() - started
        assert response.status_code == 201, (response.status_code, response.text[:2000])
        return elapsed

    def admitted(name: str) -> bool:
        return _phase(manager.pk, name) == WorkloadPhase.ADMITTED

    try:
        context = chromium.new_context(base_url=web.url)
        context.set_default_timeout(30000)
        page = context.new_page()
        page.goto("/login/")
        page.fill("input[name=username]", admin_user.username)
        page.fill("input[name=password]", "pw-" + admin_user.username)
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/login/" not in url)
        page.goto("/")
        page.evaluate(COUNT_REFRESHES)
        page.wait_for_function("document.body.dataset.liveState === 'live'")

        # Before the fault: a workload is admitted and the page hears of it.
        submit("before")
        wait_for(lambda: admitted("before"), timeout=60, what="'before' admitted",
                 processes=processes)
        page.wait_for_function("window.__refreshes > 0")

        # Keep the worker busy (a task running holds an unacknowledged message), then the
        # broker and channel layer go away.
        create_workloads([
            WorkloadRequest("ns", f"busy-{i:02d}-{j}",
                            {"queueName": f"lq-busy-{i:02d}", "podSets": [_pod_set("1")]}, {}, {})
            for i in range(BUSY_QUEUES) for j in range(3)], cluster=manager)
        wait_for(lambda: AdmissionLease.objects.filter(cluster_id=manager.pk)
                 .exclude(holder="").exists(), timeout=60, what="an admission cycle running",
                 processes=processes, interval=0.01)
        private_redis.stop()
        # Requests still succeed, in bounded time: the task and the live notification that
        # cannot be sent are logged and dropped.
        elapsed = submit("during")
        assert elapsed < 20, f"the request took {elapsed:.1f}s with Redis down"
        # The browser notices its socket is gone.
        page.wait_for_function("document.body.dataset.liveState === 'reconnecting'")
        time.sleep(1)  # not an assertion: let the workers see the outage too
        elapsed = submit("during-2")
        assert elapsed < 20, f"the request took {elapsed:.1f}s with Redis down"

        print(f"requests with Redis down took {elapsed:.2f}s")
        private_redis.start()
        restarted = time.monotonic()
        # The worker and beat reconnect by themselves and admit what came in meanwhile.
        wait_for(lambda: admitted("during") and admitted("during-2"), timeout=120,
                 what="the work submitted during the outage admitted", processes=processes)
        # before, during, during-2 and the busy ones.
        wait_for(lambda: sum(reserved_per_queue(manager.pk).values()) == 3 + BUSY_QUEUES * 3,
                 timeout=120, what="every busy workload admitted", processes=processes)
        # The browser's socket reconnects (with back-off) ...
        page.wait_for_function("document.body.dataset.liveState === 'live'", timeout=90000)
        print(f"admitted and live again {time.monotonic() - restarted:.1f}s after the restart")
        # ... and receives updates again.
        before = page.evaluate("window.__refreshes")
        submit("after")
        wait_for(lambda: admitted("after"), timeout=60, what="'after' admitted",
                 processes=processes)
        page.wait_for_function(f"window.__refreshes > {before}", timeout=30000)
        context.close()
    except BaseException:
        print(logs())
        raise
    finally:
        web.stop()
        # Playwright's event loop gave this test's queries a connection of their own.
        connections.close_all()
    check_invariants(manager.pk, workloads=4 + BUSY_QUEUES * 3)
    connections.close_all()


@pytest.mark.timeout(60)
def test_a_worker_survives_losing_redis_with_unacknowledged_messages(
    private_redis: RedisServer,
) -> None:
    """The path that stopped workers ("Unrecoverable error: AttributeError: 'NoneType' object
    has no attribute 'hostname'"): the broker connection is lost while a message is
    unacknowledged (acks late), and closing the channel tries to restore it through the
    torn-down connection. ``kueueweb.celery`` turns that into a connection error that Celery
    handles, and the message stays in Redis for redelivery after the visibility timeout."""
    import redis
    from kombu import Connection

    import kueueweb.celery  # noqa: F401  (installs the guard)

    with Connection(private_redis.url(), transport_options={"visibility_timeout": 1}) as conn:
        queue = conn.SimpleQueue("faults")
        queue.put({"task": 1})
        message = queue.get(timeout=5)  # delivered, not acknowledged
        assert message.payload == {"task": 1}
        channel = queue.channel
        channel.connection.client = None  # what a lost connection leaves behind
        channel.close()  # no AttributeError
        assert not channel.qos._delivered
    # The message was not lost: Redis holds it as unacknowledged; any consumer restores it
    # once the visibility timeout passed.
    client = redis.Redis.from_url(private_redis.url())
    assert client.hlen("unacked") == 1
    time.sleep(1.1)  # past the 1 s visibility timeout (not an assertion)
    with Connection(private_redis.url(), transport_options={"visibility_timeout": 1}) as conn:
        queue = conn.SimpleQueue("faults")
        queue.channel.qos.restore_visible()
        again = queue.get(timeout=5)
        assert again.payload == {"task": 1}
        again.ack()


# =========================================================================================
# 3. A MultiKueue worker cluster disappears and comes back
# =========================================================================================

WORKER_LOST_TIMEOUT = 12


def _worker_setup() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
         "metadata": {"name": "default-flavor"}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
         "metadata": {"name": "cluster-queue"},
         "spec": {"namespaceSelector": {}, "resourceGroups": [{
             "coveredResources": ["cpu"],
             "flavors": [{"name": "default-flavor",
                          "resources": [{"name": "cpu", "nominalQuota": 9}]}]}]}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
         "metadata": {"namespace": "default", "name": "user-queue"},
         "spec": {"clusterQueue": "cluster-queue"}},
    ]


def _multikueue_setup(workers: list[str]) -> list[dict[str, Any]]:
    """The workers' queues on the hub, behind a MultiKueue admission check to ``workers``."""
    docs = _worker_setup()
    docs[1]["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": "mk"}]}
    docs += [
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck",
         "metadata": {"name": "mk"},
         "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                  "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                 "name": "mk-config"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
         "metadata": {"name": "mk-config"}, "spec": {"clusters": workers}},
    ]
    for name in workers:
        docs.append({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
                     "metadata": {"name": name},
                     "spec": {"clusterSource": {"kubeConfig": {
                         "locationType": "Secret", "location": f"{name}-secret"}}}})
    return docs


def _active(cluster_name: str) -> bool | None:
    from scheduling.workload import conditions as cond

    cluster = Cluster.objects.get(name=cluster_name)
    condition = cond.find(cluster.conditions, "Active")
    return None if condition is None else condition.get("status") == "True"


@pytest.mark.timeout(300)
def test_worker_cluster_disappears_and_returns(
    fault_processes: Processes, manager: Cluster, settings: Any,
) -> None:
    """Two Kubernetes workers (test API servers); a job dispatched from the hub runs on one.
    That worker's API server goes away: the worker becomes inactive, the hub keeps the
    workload there for workerLostTimeout, then dispatches it again, to the other worker.
    The lost server comes back on the same port: the worker is Active again, its leftover
    job is removed, and the job completes on the new worker."""
    import threading

    from multicluster.kube import client
    from scheduling.manifests.apply import apply_manifests
    from scheduling.models import Event, Job
    from scheduling.services import submit_job
    from tests.fixtures.kube_api import FakeKubeAPI

    processes = fault_processes
    processes.env.update({
        "KUEUEWEB_KUBE_WATCH_QUIET_SECONDS": "0.25",
        "KUEUEWEB_KUBE_WATCH_MAX_SECONDS": "2",
        "KUEUEWEB_KUBE_REQUEST_TIMEOUT_SECONDS": "3",
        "KUEUEWEB_KUBE_PROBE_INTERVAL_SECONDS": "2",
        "KUEUEWEB_WORKER_LOST_TIMEOUT_SECONDS": str(WORKER_LOST_TIMEOUT),
        "KUEUEWEB_MULTIKUEUE_GC_INTERVAL_SECONDS": "2",
    })
    client.forget_clients()
    apis = {"worker-a": FakeKubeAPI().start(), "worker-b": FakeKubeAPI().start()}
    stop = threading.Event()

    def job_controllers() -> None:  # the clusters' own controllers: pods follow the jobs
        while not stop.is_set():
            for api in apis.values():
                # A controller that fails retries on its next pass.
                with contextlib.suppress(Exception):
                    api.run_job_controller()
            stop.wait(0.2)

    controllers = threading.Thread(target=job_controllers, daemon=True)
    try:
        apply_manifests(_multikueue_setup(list(apis)), cluster=manager.name)
        for name, api in apis.items():
            worker = Cluster.objects.get(name=name)
            worker.set_kubeconfig(api.kubeconfig)
            worker.save()
            apply_manifests(_worker_setup(), cluster=name)
        controllers.start()
        processes.start_worker("worker", concurrency=2)
        processes.start_beat("beat")
        wait_for(lambda: all(_active(name) for name in apis), timeout=60,
                 what="both workers Active", processes=processes)

        manifest = yaml_job("sample-job")
        job = submit_job(manifest, namespace="default", cluster=manager)
        assert isinstance(job, Job)

        def hub() -> Workload:
            return Workload.objects.get(cluster=manager, job__name="sample-job")

        def running_on() -> str | None:
            wl = hub()
            if wl.phase != WorkloadPhase.ADMITTED or not wl.cluster_name:
                return None
            api = apis[wl.cluster_name]
            remote = api.get("jobs", "default", "sample-job")
            return wl.cluster_name if remote and not remote["spec"].get("suspend") else None

        first = wait_for(running_on, timeout=90, what="the job running on a worker",
                         processes=processes)
        other = next(name for name in apis if name != first)
        assert apis[other].get("jobs", "default", "sample-job") is None

        # The winner's API server goes away.
        apis[first].refuse_connections()
        wait_for(lambda: _active(first) is False, timeout=60,
                 what=f"{first} marked not Active", processes=processes)
        lost_since = Cluster.objects.get(name=first).lost_since
        assert lost_since is not None
        # Kept on the lost worker until workerLostTimeout (Kueue keeps it and retries).
        wl = hub()
        if timezone.now() < lost_since + timedelta(seconds=WORKER_LOST_TIMEOUT):
            assert (wl.phase, wl.cluster_name) == (WorkloadPhase.ADMITTED, first)
        # Then dispatched again, to the worker still connected.
        wait_for(lambda: running_on() == other, timeout=120,
                 what=f"the job dispatched again to {other}", processes=processes)
        retry = Event.objects.filter(workload=hub(), reason="MultiKueueRetry").order_by(
            "created_at").first()
        assert retry is not None
        assert retry.created_at >= lost_since + timedelta(seconds=WORKER_LOST_TIMEOUT)

        # The lost server comes back on the same port: Active again, its leftover job gone.
        apis[first].accept_connections()
        wait_for(lambda: _active(first) is True, timeout=120,
                 what=f"{first} Active again", processes=processes)
        wait_for(lambda: apis[first].get("jobs", "default", "sample-job") is None,
                 timeout=90, what=f"the leftover job removed from {first}",
                 processes=processes)
        assert Workload.objects.filter(cluster__name=first).count() == 0
        assert hub().cluster_name == other

        # State converges: the job completes on the new worker and on the hub.
        apis[other].complete_job("default", "sample-job")
        wait_for(lambda: hub().phase == WorkloadPhase.FINISHED, timeout=90,
                 what="the hub workload finished", processes=processes)
        for name in apis:
            check_invariants(Cluster.objects.get(name=name).pk)
        check_invariants(manager.pk, workloads=1)
    except BaseException:
        _print_multikueue_state(manager)
        raise
    finally:
        stop.set()
        processes.stop_all()
        for api in apis.values():
            api.stop()
        client.forget_clients()


def _print_multikueue_state(manager: Cluster) -> None:
    from scheduling.models import Event

    for wl in Workload.objects.order_by("pk"):
        print(f"workload {wl.cluster.name}/{wl.namespace}/{wl.name}: {wl.phase} "
              f"cluster_name={wl.cluster_name!r} checks={wl.admission_check_states} "
              f"requeue_at={wl.requeue_at} conditions={wl.conditions}")
    for cluster in Cluster.objects.order_by("pk"):
        print(f"cluster {cluster.name}: lost_since={cluster.lost_since} {cluster.conditions}")
    for event in Event.objects.order_by("created_at", "pk"):
        print(f"event {event.created_at:%H:%M:%S.%f} {event.cluster_id} {event.object_name} "
              f"{event.reason}: {event.message}")


def yaml_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
            "containers": [{"name": "main", "image": "busybox", "command": ["sleep", "60"],
                            "resources": {"requests": {"cpu": "1"}}}],
            "restartPolicy": "Never"}}},
    }


# =========================================================================================
# 4. The database connection drops during a request
# =========================================================================================


def _quota_manifests(prefix: str, count: int) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                   "metadata": {"name": f"{prefix}-flavor"}}]
    for i in range(count):
        docs.append({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": f"{prefix}-cq-{i}"},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu"],
                "flavors": [{"name": f"{prefix}-flavor",
                             "resources": [{"name": "cpu", "nominalQuota": 4}]}]}]},
        })
        docs.append({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": f"{prefix}-lq-{i}", "namespace": "ns"},
            "spec": {"clusterQueue": f"{prefix}-cq-{i}"},
        })
    return docs


def _objects_named(prefix: str) -> int:
    from scheduling.models import LocalQueue, ResourceFlavor

    return (ClusterQueue.objects.filter(name__startswith=prefix).count()
            + LocalQueue.objects.filter(name__startswith=prefix).count()
            + ResourceFlavor.objects.filter(name__startswith=prefix).count())


@pytest.mark.timeout(120)
def test_database_connection_drops_during_a_request(
    transactional_db: None, settings: Any, manager: Cluster, admin_user: Any, tmp_path: Any,
) -> None:
    """The server's database backend is terminated in the middle of a multi-object apply:
    the client gets a 503 saying the database is unavailable, nothing of the apply is
    written, and the next request succeeds, also after every connection of the server was
    terminated between requests. (Under ASGI each request's thread opens its own
    connection; CONN_HEALTH_CHECKS is what saves long-lived threads with DB_CONN_MAX_AGE > 0,
    such as Celery workers, whose Django fixup checks connections before every task.)"""
    import requests
    from django.db import connection
    from rest_framework.authtoken.models import Token

    from tests.fixtures.faults import start_daphne_with_dropper, web_env

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    token = Token.objects.create(user=admin_user)
    arm = tmp_path / "drop-armed"
    # Persistent connections (DB_CONN_MAX_AGE), as a deployment without a pooler may use.
    web = start_daphne_with_dropper(
        web_env(settings.REDIS_URL, KUEUEWEB_TEST_RECONCILER_MODE="embedded",
                DB_CONN_MAX_AGE="300", KUEUEWEB_TEST_DROP_ON="INSERT",
                KUEUEWEB_TEST_DROP_SKIP="2"),
        tmp_path, arm)
    api = requests.Session()
    api.headers["Authorization"] = f"Token {token.key}"

    def apply(prefix: str) -> requests.Response:
        return api.post(f"{web.url}/api/v1/apply", json=_quota_manifests(prefix, 5), timeout=60)

    try:
        assert apply("warm").status_code == 200  # the server holds a connection now
        assert _objects_named("warm") == 11

        # 1. The backend is terminated before the third INSERT of the apply.
        arm.touch()
        response = apply("dropped")
        assert not arm.exists(), "the fault was not injected"
        assert response.status_code == 503, (response.status_code, response.text[:2000])
        assert response.headers["Content-Type"].startswith("application/json")
        body = response.json()
        assert body["code"] == "database_unavailable"
        assert "database is unavailable" in body["detail"]
        assert response.headers["Retry-After"]
        # All or nothing: the apply's transaction died with its connection.
        assert _objects_named("dropped") == 0
        # The next request gets a fresh connection.
        again = apply("dropped")
        assert again.status_code == 200, again.text[:2000]
        assert _objects_named("dropped") == 11

        # 2. Every connection of the server dies between requests.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            terminated = sum(1 for (ok,) in cursor.fetchall() if ok)
        assert terminated >= 1
        listed = api.get(f"{web.url}/api/v1/clusterqueues", timeout=60)
        assert listed.status_code == 200, listed.text[:2000]
        assert listed.json()["count"] == 10
    except BaseException:
        print(web.logs())
        raise
    finally:
        web.stop()
    check_invariants(manager.pk)
