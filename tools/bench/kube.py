"""``bench kube``: the Kubernetes backend creating and starting admitted jobs.

kueueweb's Kubernetes API test server (``tools.bench.kube_api.FakeKubeAPI``, the one the backend
tests run against: the real HTTP API, over a socket) stands in for the cluster. A worker
cluster is registered for it in a fresh database, with one cluster queue whose quota admits
every job; ``jobs`` batch/v1 Jobs are submitted to it and admitted by the admission cycle.
Then the clock starts, and the cluster's sync pass (``sync_kube_cluster``, as the
reconciler runs it) is run until every job exists on the server, unsuspended. The
server's request log says which calls that took: by verb and resource, per job, and how
many were lists or watches, which must not grow with the number of jobs.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.core.management import call_command
from django.utils import timezone

from tools.bench.kube_api import FakeKubeAPI, Recorded

BENCH_QUEUE = "bench"
# A job's requests are counted at their cpu; the queue holds all of them at once.
JOB_CPU_MILLI = 100


class KubeBenchError(RuntimeError):
    """The benchmark cannot run or did not complete; the message says why."""


@dataclass
class KubeBenchResult:
    jobs: int
    seconds: float
    passes: int
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / max(self.seconds, 1e-9)

    @property
    def list_calls(self) -> int:
        return sum(n for (verb, _), n in self.calls.items() if verb in ("list", "watch"))


def classify(request: Recorded) -> tuple[str, str]:
    """A request as (verb, resource), named as RBAC names them: get, list, watch, create,
    patch, update, delete; the resource is the plural (``jobs``), or the path for
    discovery and ``/version``."""
    parts = [p for p in request.path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        return "get", request.path
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    if not rest:
        return "get", request.path
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    named = len(rest) >= 2
    verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(
        request.method, "get"
    )
    if request.method == "GET" and not named:
        verb = "watch" if request.query.get("watch") in ("true", "1") else "list"
    return verb, resource


def job_manifest(name: str) -> dict[str, Any]:
    """A batch/v1 Job of one pod asking for ``JOB_CPU_MILLI`` cpu, in the bench's queue."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": BENCH_QUEUE}},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "command": ["sleep", "60"],
                            "resources": {"requests": {"cpu": f"{JOB_CPU_MILLI}m"}},
                        }
                    ],
                    "restartPolicy": "Never",
                }
            },
        },
    }


def _started(api: FakeKubeAPI, namespace: str, names: Iterable[str]) -> int:
    """How many of ``names`` exist on the server as unsuspended Jobs."""
    wanted = set(names)
    return sum(
        1
        for job in api.objects("jobs", namespace)
        if job["metadata"]["name"] in wanted and not (job.get("spec") or {}).get("suspend")
    )


def run(
    jobs: int,
    *,
    timeout_seconds: float = 600.0,
    log: Callable[[str], None] = print,
) -> KubeBenchResult:
    """Submit and admit ``jobs`` jobs, then time the sync passes that start them on the
    test server. The default database must be empty and the caller's to use."""
    from multicluster.kube import client
    from multicluster.kube.sync import sync_kube_cluster
    from multicluster.models import Cluster
    from scheduling import services
    from scheduling.models import ClusterQueue, FlavorQuota, LocalQueue, ResourceFlavor, Workload
    from scheduling.scheduler import admission

    call_command("migrate", verbosity=0, interactive=False)
    if Workload.objects.exists() or ClusterQueue.objects.exists():
        raise KubeBenchError(
            "bench kube needs a fresh database, and this one already holds cluster queues "
            "or workloads: point DATABASE_URL at an empty database"
        )
    api = FakeKubeAPI().start()
    client.forget_clients()
    try:
        cluster = Cluster(
            name="bench-kube",
            role="worker",
            connection_type="kubernetes",
            create_namespaces=True,
        )
        cluster.set_kubeconfig(api.kubeconfig)
        cluster.save()
        namespace = api.namespace
        flavor = ResourceFlavor.objects.create(cluster=cluster, name="default")
        cq = ClusterQueue.objects.create(cluster=cluster, name=BENCH_QUEUE)
        FlavorQuota.objects.create(
            cluster_queue=cq,
            flavor=flavor,
            resource="cpu",
            position=0,
            nominal_quota=f"{jobs * JOB_CPU_MILLI}m",
        )
        LocalQueue.objects.create(
            cluster=cluster, namespace=namespace, name=BENCH_QUEUE, cluster_queue=cq
        )
        names = [f"job-{i:05d}" for i in range(jobs)]
        started = time.perf_counter()
        for name in names:
            services.submit_job(job_manifest(name), namespace=namespace, cluster=cluster)
        log(f"submitted {jobs} jobs in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        for _ in range(jobs + 10):
            outcome = admission.run_admission_cycle(cluster.pk, now=timezone.now())
            if not outcome.admitted and not outcome.wants_next:
                break
        admitted = Workload.objects.filter(cluster=cluster, quota_reserved_at__isnull=False).count()
        if admitted != jobs:
            raise KubeBenchError(f"only {admitted} of {jobs} jobs were admitted")
        log(f"admitted {jobs} jobs in {time.perf_counter() - started:.1f}s")

        api.requests.clear()
        result = KubeBenchResult(jobs, 0.0, 0)
        started = time.perf_counter()
        done = 0
        while done < jobs:
            sync_kube_cluster(cluster.pk, now=timezone.now())
            result.passes += 1
            done = _started(api, namespace, names)
            elapsed = time.perf_counter() - started
            log(f"  pass {result.passes}: {done}/{jobs} created and unsuspended, {elapsed:.1f}s")
            if elapsed > timeout_seconds:
                raise KubeBenchError(f"not done after {timeout_seconds:.0f}s: {done}/{jobs}")
        result.seconds = time.perf_counter() - started
        result.calls = Counter(classify(r) for r in api.requests)
        return result
    finally:
        api.stop()
        client.forget_clients()


def format_result(result: KubeBenchResult) -> str:
    lines = [
        f"kube: {result.jobs} admitted jobs created and unsuspended in {result.seconds:.2f}s "
        f"({result.passes} sync passes): {result.jobs_per_second:.0f} jobs/s",
        f"  API calls: {sum(result.calls.values())} in all, "
        f"{sum(result.calls.values()) / result.jobs:.2f} per job; lists and watches: "
        f"{result.list_calls}",
    ]
    for (verb, resource), count in sorted(result.calls.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {verb:>6} {resource:<40} {count:>6}  {count / result.jobs:.3f}/job")
    return "\n".join(lines)
