"""The garbage collector of web and reconciler processes: a request's or a task's reference
cycles are freed when it ends."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core.signals import request_finished
from django.test import Client

from kueueweb import collector


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


@contextmanager
def collector_restored() -> Iterator[None]:
    """Undo whatever the block tunes: thresholds, freeze and the receivers it connected
    (a worker's ``worker_init`` also connects ``kueueweb.connections``' receivers)."""
    from celery.signals import task_postrun, task_prerun

    threshold = gc.get_threshold()
    try:
        yield
    finally:
        request_finished.disconnect(dispatch_uid="kueueweb.collector")
        task_postrun.disconnect(dispatch_uid="kueueweb.collector.task")
        task_prerun.disconnect(dispatch_uid="kueueweb.connections.prerun")
        task_postrun.disconnect(dispatch_uid="kueueweb.connections.postrun")
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.fixture
def tuned() -> Iterator[None]:
    with collector_restored():
        collector.tune()
        yield


def test_young_objects_stay_young_through_a_request(tuned: None) -> None:
    assert gc.get_threshold()[0] == collector.YOUNG_THRESHOLD
    assert gc.get_freeze_count() > 0


@pytest.mark.django_db  # request_finished's other receivers close database connections
def test_a_cycle_is_freed_when_the_request_finishes(tuned: None) -> None:
    gc.collect()
    cycle = Node()
    ref = weakref.ref(cycle)
    del cycle
    assert ref() is not None  # nothing has collected it yet
    request_finished.send(sender=None)
    assert ref() is None


@pytest.mark.django_db
def test_a_page_request_ends_with_its_garbage_collected(tuned: None) -> None:
    gc.collect()
    Client().get("/healthz")
    # The young generation was collected when the response finished: what the request
    # allocated is either freed or promoted, not pending.
    assert gc.get_count()[0] < 1000


# =========================================================================================
# Reconciler processes: Celery workers and the embedded loop
# =========================================================================================


@pytest.fixture
def tuned_reconciler() -> Iterator[None]:
    from kueueweb.celery import _tune_reconciler

    with collector_restored():
        _tune_reconciler()  # what a Celery worker runs once it has started (worker_init)
        yield


def test_a_reconciler_gets_the_same_thresholds(tuned_reconciler: None) -> None:
    assert gc.get_threshold()[0] == collector.YOUNG_THRESHOLD
    assert gc.get_freeze_count() > 0


def test_a_cycle_is_freed_when_a_celery_task_finishes(tuned_reconciler: None) -> None:
    from celery.signals import task_postrun

    gc.collect()
    cycle = Node()
    ref = weakref.ref(cycle)
    del cycle
    assert ref() is not None
    task_postrun.send(sender=None, task_id="t", task=None, args=(), kwargs={}, retval=None,
                      state="SUCCESS")
    assert ref() is None


def test_the_embedded_loop_frees_a_tasks_cycles_when_it_returns() -> None:
    import threading
    import time

    from celery import current_app

    from kueueweb import embedded

    refs: list[weakref.ref[Node]] = []

    @current_app.task(name="tests.collector.cycle")
    def make_cycle() -> None:
        refs.append(weakref.ref(Node()))

    stop = threading.Event()
    thread = threading.Thread(target=embedded.run_forever, kwargs={"stop": stop, "tick": 0.02})
    with collector_restored():
        thread.start()
        try:
            embedded.submit("tests.collector.cycle", ())
            deadline = time.monotonic() + 5
            while not (refs and refs[0]() is None) and time.monotonic() < deadline:
                time.sleep(0.02)
            # Not by an automatic collection: the loop raised the threshold far above what
            # it allocates meanwhile.
            assert gc.get_threshold()[0] == collector.YOUNG_THRESHOLD
            assert refs
            assert refs[0]() is None
        finally:
            stop.set()
            thread.join(timeout=10)


def test_paused_holds_automatic_collections_off_until_the_last_overlapping_block_ends() -> None:
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
        with collector.paused():  # another thread's call, say
            assert not gc.isenabled()
        assert not gc.isenabled()  # the first block still runs
    assert gc.isenabled()


def test_paused_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with collector.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.django_db
def test_an_admission_call_runs_without_automatic_collections(manager) -> None:
    from django.utils import timezone

    from scheduling import services
    from scheduling.models import ClusterQueue, LocalQueue, ResourceFlavor
    from scheduling.scheduler import admission

    flavor = ResourceFlavor.objects.create(cluster=manager, name="default")
    cq = ClusterQueue.objects.create(cluster=manager, name="cq")
    cq.quotas.create(resource_group=0, position=0, flavor=flavor, resource="cpu",
                     nominal_quota="10")
    LocalQueue.objects.create(cluster=manager, namespace="team", name="q", cluster_queue=cq)

    def collections_during(call: Any, names: list[str]) -> tuple[int, int]:
        services.create_workloads([services.WorkloadRequest("team", name, {
            "queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}]})
            for name in names], cluster=manager)
        started: list[int] = []

        def count(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started.append(info["generation"])

        threshold = gc.get_threshold()
        gc.set_threshold(1)  # an automatic collection at nearly every allocation
        gc.callbacks.append(count)
        try:
            outcome = call(manager.pk, now=timezone.now())
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*threshold)
        return len(outcome.admitted), len(started)

    # The same call without the pause (the undecorated function) collects hundreds of
    # times; with it, only on the way in and out.
    assert collections_during(admission.run_admission_cycle.__wrapped__, ["a", "b"])[1] > 100
    admitted, collections = collections_during(admission.run_admission_cycle, ["c", "d"])
    assert admitted == 2
    assert collections < 10
    assert gc.isenabled()
