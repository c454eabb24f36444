"""Prometheus metrics: the recording hooks, the event stores and the gauges read at scrape.

Scrapes are parsed with prometheus_client's own parser and compared sample by sample.
Without REDIS_URL the hooks record into this process's memory; in the production pass they
record into Redis (database 15) under a prefix of their own, and the last tests prove that
counts recorded by other processes reach this process's ``/metrics``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from multicluster.models import AdmissionCheck, Cluster
from scheduling.choices import QueueState, StopPolicy, WorkloadPhase
from scheduling.metrics import prometheus
from scheduling.models import ClusterQueue, Cohort, Workload

pytestmark = pytest.mark.django_db  # hooks register on_commit callbacks on a connection

ROOT = Path(__file__).resolve().parents[3]
GI = 2**30

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(autouse=True)
def store(settings: Any) -> Iterator[prometheus.EventStore]:
    """An empty event store: memory, or Redis keys under a prefix no other test uses."""
    if settings.REDIS_URL:
        settings.METRICS_REDIS_PREFIX = f"kueueweb-test:{uuid.uuid4().hex}:"
    current = prometheus.event_store()
    current.clear()
    yield current
    current.clear()


def scrape() -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(prometheus.render().decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, metric: str, /, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


def buckets(samples: Samples, metric: str, /, **labels: str) -> dict[str, float]:
    """A histogram's cumulative buckets by ``le``."""
    wanted = set(labels.items())
    return {
        dict(key)["le"]: amount
        for (sample, key), amount in samples.items()
        if sample == f"{metric}_bucket" and wanted <= set(key) and len(key) == len(wanted) + 1
    }


# --- Hooks ---------------------------------------------------------------------------------


def test_quota_reserved_counts_and_observes_wait_after_commit(
    manager: Cluster, django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        for wait in (3.0, 30.0):
            prometheus.quota_reserved("cq-a", "high", wait, local_queue=("ns", "lq-a"),
                                   cluster_id=manager.pk)

    samples = scrape()
    cq = {"cluster": "manager", "cluster_queue": "cq-a", "priority_class": "high"}
    assert value(samples, "kueue_quota_reserved_workloads_total", **cq) == 2
    assert buckets(samples, "kueue_quota_reserved_wait_time_seconds", **cq) == {
        "1.0": 0, "2.5": 0, "5.0": 1, "10.0": 1, "20.0": 1, "40.0": 2, "80.0": 2,
        "160.0": 2, "320.0": 2, "640.0": 2, "1280.0": 2, "2560.0": 2, "5120.0": 2,
        "10240.0": 2, "+Inf": 2,
    }
    assert value(samples, "kueue_quota_reserved_wait_time_seconds_count", **cq) == 2
    assert value(samples, "kueue_quota_reserved_wait_time_seconds_sum", **cq) == 33.0
    lq = {"cluster": "manager", "name": "lq-a", "namespace": "ns", "priority_class": "high"}
    assert value(samples, "kueue_local_queue_quota_reserved_workloads_total", **lq) == 2
    assert value(samples, "kueue_local_queue_quota_reserved_wait_time_seconds_sum", **lq) == 33.0


def test_every_hook_records_its_kueue_series(
    manager: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    lq_ref = ("ns", "lq-a")
    with django_capture_on_commit_callbacks(execute=True):
        prometheus.admitted("cq-a", "", 12.0, 2.0, local_queue=lq_ref, cluster_id=manager.pk)
        prometheus.evicted("cq-a", "Preempted", "", "low", first_time=True, local_queue=lq_ref,
                        cluster_id=manager.pk)
        prometheus.evicted("cq-a", "Preempted", "", "low", cluster_id=manager.pk)
        prometheus.preempted("cq-b", "InCohortReclamation", cluster_id=manager.pk)
        prometheus.pods_ready("cq-a", "", 20.0, 8.0, local_queue=lq_ref, cluster_id=manager.pk)
        prometheus.finished("cq-a", "", 100.0, local_queue=lq_ref, cluster_id=manager.pk)
        prometheus.admission_attempt("success", 0.03)
        prometheus.admission_attempt("inadmissible", 0.2)
        prometheus.replaced_workload_slice("cq-a", cluster_id=manager.pk)

    s = scrape()
    cq = {"cluster": "manager", "cluster_queue": "cq-a", "priority_class": ""}
    lq = {"cluster": "manager", "name": "lq-a", "namespace": "ns", "priority_class": ""}
    eviction = {"cluster": "manager", "cluster_queue": "cq-a", "reason": "Preempted",
                "underlying_cause": "", "priority_class": "low"}
    assert value(s, "kueue_admitted_workloads_total", **cq) == 1
    assert value(s, "kueue_admission_wait_time_seconds_sum", **cq) == 12.0
    # The cluster-queue admission wait has Kueue's 16 buckets, the local-queue one 14.
    assert len(buckets(s, "kueue_admission_wait_time_seconds", **cq)) == 17
    assert len(buckets(s, "kueue_local_queue_admission_wait_time_seconds", **lq)) == 15
    assert value(s, "kueue_admission_checks_wait_time_seconds_sum", **cq) == 2.0
    assert value(s, "kueue_local_queue_admitted_workloads_total", **lq) == 1
    assert value(s, "kueue_local_queue_admission_checks_wait_time_seconds_count", **lq) == 1
    assert value(s, "kueue_evicted_workloads_total", **eviction) == 2
    assert value(s, "kueue_evicted_workloads_once_total", **eviction) == 1
    assert value(s, "kueue_local_queue_evicted_workloads_total", cluster="manager", name="lq-a",
                 namespace="ns", reason="Preempted", underlying_cause="", priority_class="low") == 1
    assert value(s, "kueue_preempted_workloads_total", cluster="manager",
                 preempting_cluster_queue="cq-b", reason="InCohortReclamation") == 1
    assert value(s, "kueue_ready_wait_time_seconds_sum", **cq) == 20.0
    assert value(s, "kueue_admitted_until_ready_wait_time_seconds_sum", **cq) == 8.0
    assert value(s, "kueue_local_queue_ready_wait_time_seconds_count", **lq) == 1
    assert value(s, "kueue_local_queue_admitted_until_ready_wait_time_seconds_sum", **lq) == 8.0
    assert value(s, "kueue_finished_workloads_total", **cq) == 1
    assert value(s, "kueue_execution_time_seconds_sum", **cq) == 100.0
    assert buckets(s, "kueue_execution_time_seconds", **cq)["80.0"] == 0
    assert buckets(s, "kueue_execution_time_seconds", **cq)["160.0"] == 1
    assert value(s, "kueue_local_queue_finished_workloads_total", **lq) == 1
    assert value(s, "kueue_local_queue_execution_time_seconds_sum", **lq) == 100.0
    assert value(s, "kueue_admission_attempts_total", result="success") == 1
    assert value(s, "kueue_admission_attempts_total", result="inadmissible") == 1
    # The attempt duration uses the Prometheus Go client's default buckets, as Kueue does.
    assert buckets(s, "kueue_admission_attempt_duration_seconds", result="success") == {
        "0.005": 0, "0.01": 0, "0.025": 0, "0.05": 1, "0.1": 1, "0.25": 1, "0.5": 1,
        "1.0": 1, "2.5": 1, "5.0": 1, "10.0": 1, "+Inf": 1,
    }
    assert value(s, "kueue_replaced_workload_slices_total", cluster="manager",
                 cluster_queue="cq-a") == 1


def test_negative_waits_count_as_zero(
    manager: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        prometheus.quota_reserved("cq-a", "", -0.5, cluster_id=manager.pk)
    samples = scrape()
    labels = {"cluster": "manager", "cluster_queue": "cq-a", "priority_class": ""}
    assert value(samples, "kueue_quota_reserved_wait_time_seconds_sum", **labels) == 0.0
    assert buckets(samples, "kueue_quota_reserved_wait_time_seconds", **labels)["1.0"] == 1


def test_series_carry_the_current_name_of_their_domain(
    manager: Cluster, django_capture_on_commit_callbacks: Any
) -> None:
    worker = Cluster.objects.create(name="worker-1", role="worker")
    gone = Cluster.objects.create(name="worker-2", role="worker")
    with django_capture_on_commit_callbacks(execute=True):
        prometheus.replaced_workload_slice("cq-a")  # no domain: the manager's
        prometheus.replaced_workload_slice("cq-a", cluster_id=manager.pk)
        prometheus.replaced_workload_slice("cq-a", cluster_id=worker.pk)
        prometheus.replaced_workload_slice("cq-a", cluster_id=gone.pk)
    Cluster.objects.filter(pk=worker.pk).update(name="gpu-pool")
    gone.delete()

    s = scrape()
    series = {
        dict(labels)["cluster"]: amount for (name, labels), amount in s.items()
        if name == "kueue_replaced_workload_slices_total"
    }
    assert series == {"manager": 2, "gpu-pool": 1}


@pytest.mark.django_db(transaction=True)
def test_only_committed_decisions_are_counted(manager: Cluster) -> None:
    labels = {"cluster": "manager", "cluster_queue": "cq-a", "priority_class": ""}

    def admit_then_fail() -> None:
        with transaction.atomic():
            prometheus.admitted("cq-a", "", 1.0, 0.0, cluster_id=manager.pk)
            raise RuntimeError("the admission is rolled back")

    with pytest.raises(RuntimeError, match="rolled back"):
        admit_then_fail()
    assert value(scrape(), "kueue_admitted_workloads_total", **labels) is None

    with transaction.atomic():
        prometheus.admitted("cq-a", "", 1.0, 0.0, cluster_id=manager.pk)
        try:
            with transaction.atomic():  # a savepoint that rolls back
                prometheus.admitted("cq-a", "", 1.0, 0.0, cluster_id=manager.pk)
                raise RuntimeError("this one is undone")
        except RuntimeError:
            pass
        # Nothing is counted before the commit.
        assert value(scrape(), "kueue_admitted_workloads_total", **labels) is None
    assert value(scrape(), "kueue_admitted_workloads_total", **labels) == 1


def test_a_failing_store_never_fails_the_committed_work(
    manager: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    django_capture_on_commit_callbacks: Any,
) -> None:
    class Broken:
        def add(self, increments: Any) -> None:
            raise ConnectionError("store down")

    monkeypatch.setattr(prometheus, "event_store", lambda: Broken())
    with django_capture_on_commit_callbacks(execute=True):
        prometheus.preempted("cq-a", "InClusterQueue", cluster_id=manager.pk)
    assert "store down" in caplog.text


# --- Stores --------------------------------------------------------------------------------


def test_the_store_follows_redis_url_not_the_reconciler_mode(settings: Any) -> None:
    settings.RECONCILER_MODE = "embedded"
    settings.REDIS_URL = ""
    assert isinstance(prometheus.event_store(), prometheus.MemoryEventStore)
    settings.REDIS_URL = "redis://127.0.0.1:6379/15"
    settings.METRICS_REDIS_PREFIX = "kueueweb-test:selection:"
    chosen = prometheus.event_store()
    assert isinstance(chosen, prometheus.RedisEventStore)
    assert chosen.prefix == "kueueweb-test:selection:"


def test_memory_store_loses_no_increment_under_concurrent_writers() -> None:
    memory = prometheus.MemoryEventStore()
    family = prometheus.ADMISSION_ATTEMPT_DURATION
    barrier = threading.Barrier(8)

    def write() -> None:
        barrier.wait()
        for _ in range(500):
            memory.add(family.increments(("success",), 0.5))

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    collected = family.collect(memory.read([family.name])[family.name], domains={})
    by_name = {(s.name, s.labels.get("le")): s.value for s in collected.samples}
    assert by_name[("kueue_admission_attempt_duration_seconds_count", None)] == 4000
    assert by_name[("kueue_admission_attempt_duration_seconds_sum", None)] == 2000.0
    assert by_name[("kueue_admission_attempt_duration_seconds_bucket", "0.25")] == 0
    assert by_name[("kueue_admission_attempt_duration_seconds_bucket", "0.5")] == 4000


# --- State gauges --------------------------------------------------------------------------


def _admission(cq: str, count: int, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "clusterQueue": cq,
        "podSetAssignments": [{
            "name": "main", "count": count,
            "flavors": {"cpu": "default", "memory": "default"},
            "resourceUsage": {"cpu": cpu, "memory": memory},
        }],
    }


def _set(workload: Workload, **fields: Any) -> None:
    Workload.objects.filter(pk=workload.pk).update(**fields)


@pytest.fixture
def domain(
    manager: Cluster, make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload]
) -> dict[str, ClusterQueue]:
    """cq-a (cohort team under org) with pending, reserving, admitted and finished workloads;
    cq-b stopped, with one pending workload."""
    cq_a = make_queue("cq-a", {"cpu": ("10", "4", None), "memory": "64Gi"}, cohort="team")
    org = Cohort.objects.create(cluster=manager, name="org")
    Cohort.objects.filter(name="team").update(parent=org)
    cq_b = make_queue("cq-b", {"cpu": "500m"}, stop_policy=StopPolicy.HOLD)
    make_workload("p1", "lq-cq-a", {"cpu": "1"})
    make_workload("p2", "lq-cq-a", {"cpu": "1"})
    _set(make_workload("p3", "lq-cq-a", {"cpu": "1"}), queue_state=QueueState.INADMISSIBLE)
    _set(make_workload("p4", "lq-cq-a", {"cpu": "1"}), active=False)
    _set(make_workload("r1", "lq-cq-a", {"cpu": "750m"}, count=2),
         phase=WorkloadPhase.QUOTA_RESERVED, cluster_queue=cq_a,
         admission=_admission("cq-a", 2, "1500m", "2Gi"))
    # Admitted with 2 pods, one of them declared reclaimable: it holds half its admission.
    _set(make_workload("a1", "lq-cq-a", {"cpu": "1"}, count=2),
         phase=WorkloadPhase.ADMITTED, cluster_queue=cq_a,
         admission=_admission("cq-a", 2, "2", "1Gi"),
         reclaimable_pods=[{"name": "main", "count": 1}])
    _set(make_workload("f1", "lq-cq-a", {"cpu": "1"}), phase=WorkloadPhase.FINISHED,
         cluster_queue=cq_a)
    make_workload("q1", "lq-cq-b", {"cpu": "100m"})
    return {"a": cq_a, "b": cq_b}


@pytest.mark.usefixtures("domain")
def test_workload_gauges_per_cluster_queue_and_local_queue() -> None:
    s = scrape()
    a = {"cluster": "manager", "cluster_queue": "cq-a"}
    b = {"cluster": "manager", "cluster_queue": "cq-b"}
    assert value(s, "kueue_pending_workloads", **a, status="active") == 2
    assert value(s, "kueue_pending_workloads", **a, status="inadmissible") == 1
    # A stopped queue admits nothing: Kueue reports its pending workloads as inadmissible.
    assert value(s, "kueue_pending_workloads", **b, status="active") == 0
    assert value(s, "kueue_pending_workloads", **b, status="inadmissible") == 1
    assert value(s, "kueue_reserving_active_workloads", **a) == 2
    assert value(s, "kueue_admitted_active_workloads", **a) == 1
    assert value(s, "kueue_finished_workloads", **a) == 1
    assert value(s, "kueue_reserving_active_workloads", **b) == 0
    lq = {"cluster": "manager", "name": "lq-cq-a", "namespace": "ns"}
    assert value(s, "kueue_local_queue_pending_workloads", **lq, status="active") == 2
    assert value(s, "kueue_local_queue_pending_workloads", **lq, status="inadmissible") == 1
    assert value(s, "kueue_local_queue_reserving_active_workloads", **lq) == 2
    assert value(s, "kueue_local_queue_admitted_active_workloads", **lq) == 1
    assert value(s, "kueue_local_queue_finished_workloads", **lq) == 1
    assert value(s, "kueue_local_queue_pending_workloads", cluster="manager", name="lq-cq-b",
                 namespace="ns", status="inadmissible") == 1


def test_workloads_of_a_parked_shape_count_as_inadmissible(domain) -> None:
    # Kueue's bulk move puts them in the inadmissible set; the sticky preemptor stays active.
    from django.utils import timezone

    from scheduling.models import ParkedShape

    p1 = Workload.objects.get(name="p1")
    ParkedShape.objects.create(cluster_queue=domain["a"], priority=p1.priority,
                               pod_sets_hash=p1.pod_sets_hash, reason="Pending",
                               parked_at=timezone.now())
    Workload.objects.filter(name="p2").update(preempting=True)
    s = scrape()
    a = {"cluster": "manager", "cluster_queue": "cq-a"}
    assert value(s, "kueue_pending_workloads", **a, status="active") == 1
    assert value(s, "kueue_pending_workloads", **a, status="inadmissible") == 2
    lq = {"cluster": "manager", "name": "lq-cq-a", "namespace": "ns"}
    assert value(s, "kueue_local_queue_pending_workloads", **lq, status="active") == 1
    assert value(s, "kueue_local_queue_pending_workloads", **lq, status="inadmissible") == 2


@pytest.mark.usefixtures("domain")
def test_queue_status_and_info() -> None:
    s = scrape()
    for name, current in (("cq-a", "active"), ("cq-b", "pending")):
        for status in ("active", "pending", "terminating"):
            assert value(s, "kueue_cluster_queue_status", cluster="manager", cluster_queue=name,
                         status=status) == (1 if status == current else 0)
    assert value(s, "kueue_cluster_queue_info", cluster="manager", cluster_queue="cq-a",
                 parent_cohort="team", root_cohort="org") == 1
    assert value(s, "kueue_cluster_queue_info", cluster="manager", cluster_queue="cq-b",
                 parent_cohort="", root_cohort="") == 1


@pytest.mark.usefixtures("domain")
def test_quota_and_usage_in_base_units() -> None:
    s = scrape()

    def labels(resource: str) -> dict[str, str]:
        return {"cluster": "manager", "cohort": "team", "cluster_queue": "cq-a",
                "flavor": "default", "resource": resource}

    assert value(s, "kueue_cluster_queue_nominal_quota", **labels("cpu")) == 10
    assert value(s, "kueue_cluster_queue_nominal_quota", **labels("memory")) == 64 * GI
    assert value(s, "kueue_cluster_queue_borrowing_limit", **labels("cpu")) == 4
    assert value(s, "kueue_cluster_queue_borrowing_limit", **labels("memory")) == math.inf
    assert value(s, "kueue_cluster_queue_lending_limit", **labels("cpu")) == math.inf
    # Reservation: r1 (1.5 cpu, 2Gi) + half of a1 (1 cpu, 0.5Gi); usage: admitted a1 only.
    assert value(s, "kueue_cluster_queue_resource_reservation", **labels("cpu")) == 2.5
    assert value(s, "kueue_cluster_queue_resource_reservation", **labels("memory")) == 2.5 * GI
    assert value(s, "kueue_cluster_queue_resource_usage", **labels("cpu")) == 1.0
    assert value(s, "kueue_cluster_queue_resource_usage", **labels("memory")) == 0.5 * GI
    assert value(s, "kueue_cluster_queue_nominal_quota", cluster="manager", cohort="",
                 cluster_queue="cq-b", flavor="default", resource="cpu") == 0.5
    assert value(s, "kueue_cluster_queue_resource_usage", cluster="manager", cohort="",
                 cluster_queue="cq-b", flavor="default", resource="cpu") == 0


def test_a_missing_admission_check_leaves_the_queue_pending(
    manager: Cluster, make_queue: Callable[..., ClusterQueue]
) -> None:
    make_queue("checked", {"cpu": "1"}, admission_checks=[{"name": "prov"}])
    labels = {"cluster": "manager", "cluster_queue": "checked"}
    assert value(scrape(), "kueue_cluster_queue_status", **labels, status="pending") == 1
    AdmissionCheck.objects.create(cluster=manager, name="prov", controller_name="x/y")
    assert value(scrape(), "kueue_cluster_queue_status", **labels, status="active") == 1


def test_each_domain_has_its_own_series(
    manager: Cluster, make_queue: Callable[..., ClusterQueue],
    make_workload: Callable[..., Workload],
) -> None:
    worker = Cluster.objects.create(name="worker-1", role="worker")
    make_queue("cq-a", {"cpu": "2"})
    make_queue("cq-a", {"cpu": "8"}, cluster=worker)
    make_workload("w", "lq-cq-a", {"cpu": "1"}, cluster=worker)
    s = scrape()
    for cluster, nominal, pending in (("manager", 2, 0), ("worker-1", 8, 1)):
        assert value(s, "kueue_cluster_queue_nominal_quota", cluster=cluster, cohort="",
                     cluster_queue="cq-a", flavor="default", resource="cpu") == nominal
        assert value(s, "kueue_pending_workloads", cluster=cluster, cluster_queue="cq-a",
                     status="active") == pending


def test_scrape_queries_do_not_grow_with_queues_or_workloads(
    manager: Cluster, make_queue: Callable[..., ClusterQueue],
    make_workload: Callable[..., Workload],
) -> None:
    cq = make_queue("cq-0", {"cpu": "100"})
    make_workload("w-0", "lq-cq-0", {"cpu": "1"})
    _set(make_workload("a-0", "lq-cq-0", {"cpu": "1"}), phase=WorkloadPhase.ADMITTED,
         cluster_queue=cq, admission=_admission(cq.name, 1, "1", "1Mi"))

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            prometheus.render()
        return len(queries)

    few = count_queries()
    for index in range(1, 6):
        other = make_queue(f"cq-{index}", {"cpu": "10", "memory": "1Gi"})
        for n in range(4):
            wl = make_workload(f"w-{index}-{n}", f"lq-cq-{index}", {"cpu": "1"})
            if n % 2:
                _set(wl, phase=WorkloadPhase.ADMITTED, cluster_queue=other,
                     admission=_admission(other.name, 1, "1", "1Mi"))
    _set(make_workload("f", "lq-cq-0", {"cpu": "1"}), phase=WorkloadPhase.FINISHED,
         cluster_queue=cq)
    assert count_queries() == few == 11


# --- Several processes (production: PostgreSQL and Redis) ----------------------------------

# Records ``n`` admissions and attempts, as a Celery worker's reconciler would.
RECORDER = textwrap.dedent("""
    import sys
    import django
    django.setup()
    from django.conf import settings
    settings.METRICS_REDIS_PREFIX = sys.argv[1]
    from scheduling.metrics import prometheus
    assert isinstance(prometheus.event_store(), prometheus.RedisEventStore)
    for _ in range(int(sys.argv[3])):
        prometheus.admitted("cq-a", "high", 7.0, 1.0, local_queue=("ns", "lq-a"),
                         cluster_id=int(sys.argv[2]))
        prometheus.admission_attempt("success", 0.01)
""")


def _database_url_of_this_test_run() -> str:
    """DATABASE_URL with the test database's name, so the recorder connects where we do."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    return urlunsplit(parts._replace(path="/" + connection.settings_dict["NAME"]))


@pytest.mark.production
def test_counts_from_other_processes_reach_this_scrape(
    settings: Any, manager: Cluster, viewer_client: APIClient
) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "kueueweb.settings_testing",
        "DATABASE_URL": _database_url_of_this_test_run(),
        "REDIS_URL": settings.REDIS_URL,
    }
    # Two recorders at once, like two Celery workers: no increment may be lost.
    recorders = [
        subprocess.Popen(
            [sys.executable, "-c", RECORDER, settings.METRICS_REDIS_PREFIX, str(manager.pk),
             "150"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for _ in range(2)
    ]
    for recorder in recorders:
        _, stderr = recorder.communicate(timeout=120)
        assert recorder.returncode == 0, stderr

    response = viewer_client.get("/metrics")
    assert response.status_code == 200
    s: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            s[(sample.name, frozenset(sample.labels.items()))] = sample.value
    cq = {"cluster": "manager", "cluster_queue": "cq-a", "priority_class": "high"}
    assert value(s, "kueue_admitted_workloads_total", **cq) == 300
    assert value(s, "kueue_admission_wait_time_seconds_count", **cq) == 300
    assert value(s, "kueue_admission_wait_time_seconds_sum", **cq) == 2100.0
    assert buckets(s, "kueue_admission_wait_time_seconds", **cq)["5.0"] == 0
    assert buckets(s, "kueue_admission_wait_time_seconds", **cq)["10.0"] == 300
    assert value(s, "kueue_local_queue_admitted_workloads_total", cluster="manager",
                 name="lq-a", namespace="ns", priority_class="high") == 300
    assert value(s, "kueue_admission_attempts_total", result="success") == 300


@pytest.mark.production
def test_redis_store_keeps_one_hash_per_family_under_its_prefix(
    store: prometheus.EventStore,
) -> None:
    assert isinstance(store, prometheus.RedisEventStore)
    store.add(prometheus.PREEMPTED.increments(("1", "cq-a", "InClusterQueue"), 1))
    store.add(prometheus.EXECUTION_TIME.increments(("1", "cq-a", ""), 12.5))
    neighbour = f"{store.prefix}unrelated"
    store.client.set(neighbour, "kept")

    keys = {key.decode() for key in store.client.scan_iter(match=f"{store.prefix}*")}
    assert keys == {f"{store.prefix}kueue_preempted_workloads_total",
                    f"{store.prefix}kueue_execution_time_seconds", neighbour}
    stored = store.read(["kueue_execution_time_seconds"])["kueue_execution_time_seconds"]
    assert sorted(stored.values()) == [1.0, 12.5]

    store.clear()
    remaining = {key.decode() for key in store.client.scan_iter(match=f"{store.prefix}*")}
    assert remaining == {neighbour}
    store.client.delete(neighbour)


@pytest.mark.parametrize(("value", "bucket"), [
    (0.0, "0.005"), (0.005, "0.005"), (0.0050001, "0.01"), (10.0, "10.0"), (10.5, "+Inf"),
    (float("nan"), "+Inf"),
])
def test_an_observation_counts_in_the_first_bucket_whose_bound_holds_it(value: float,
                                                                        bucket: str) -> None:
    family = prometheus.ADMISSION_ATTEMPT_DURATION  # the Go client's default buckets
    increments = {json.loads(i.field)[1]: i.amount for i in family.increments(("success",), value)}
    assert set(increments) == {bucket, "sum"}
    assert increments[bucket] == 1


def test_a_batch_records_exactly_what_its_observations_record_one_by_one(
    manager: Cluster, django_capture_on_commit_callbacks: Any,
) -> None:
    # Observations of several series, in several buckets each, some twice: the batch
    # groups them by series before it makes the increments.
    observations = [("cq-a", "high", wait, lq) for wait in (0.5, 3.0, 3.0, 7.5, 1e9)
                    for lq in (("ns", "lq-a"), None)]
    observations += [("cq-b", "", 30.0, ("ns", "lq-b")), ("cq-a", "low", 3.0, None)]

    def record() -> None:
        for cq, priority, wait, lq in observations:
            prometheus.quota_reserved(cq, priority, wait, local_queue=lq, cluster_id=manager.pk)
            prometheus.admitted(cq, priority, wait, 0.0, local_queue=lq, cluster_id=manager.pk)

    with django_capture_on_commit_callbacks(execute=True):
        record()  # one write per hook
    one_by_one = scrape()
    prometheus.event_store().clear()
    with django_capture_on_commit_callbacks(execute=True) as flushes, prometheus.batch():
        record()
    assert len(flushes) == 1
    assert scrape() == one_by_one
    cq = {"cluster": "manager", "cluster_queue": "cq-a", "priority_class": "high"}
    assert value(one_by_one, "kueue_quota_reserved_workloads_total", **cq) == 10
    assert buckets(one_by_one, "kueue_quota_reserved_wait_time_seconds", **cq)["5.0"] == 6
    assert value(one_by_one, "kueue_quota_reserved_wait_time_seconds_sum", **cq) == 2 * (
        0.5 + 3.0 + 3.0 + 7.5 + 1e9)


def test_a_series_field_is_the_json_of_its_labels_and_part() -> None:
    from scheduling.metrics import prometheus

    for labels in [("cq", ""), ('q"uote', "back\\slash", "ünï"), ()]:
        for part in ("value", "sum", "0.5", "+Inf"):
            assert prometheus._field(labels, part) == json.dumps(
                [list(labels), part], separators=(",", ":"))
