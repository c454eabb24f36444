"""Requests for reconcilers (``kueueweb.reconcile``): in production, a burst of requests
for one target becomes one Celery message until a run takes it, whichever reconciler it
asks for and whenever it asks it to run.

Against the real Redis broker: with no worker, so that the messages stay in the queue to
be counted, and with two real workers and no beat, so that a request held back and never
served would leave a workload pending.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import transaction

from kueueweb import reconcile
from kueueweb.reconcile import ADMISSION_TASK, CLUSTER_SYNC_TASK
from multicluster.models import Cluster
from tests.fixtures.broker import messages

pytestmark = pytest.mark.production


def _request_in_transaction(task_name: str, cluster_id: int) -> None:
    with transaction.atomic():  # sent when it commits
        reconcile.request(task_name, cluster_id)


def test_a_burst_is_one_message_until_a_run_takes_it(broker: redis.Redis,
                                                     manager: Cluster) -> None:
    other = manager.pk + 1  # another domain: only its id is sent
    for _ in range(5):
        _request_in_transaction(ADMISSION_TASK, manager.pk)
    assert messages(broker, ADMISSION_TASK, manager.pk) == 1
    # Another domain's requests are its own.
    _request_in_transaction(ADMISSION_TASK, other)
    assert messages(broker, ADMISSION_TASK, other) == 1

    # A cycle takes the message: the requests after that may bring changes it did not
    # read, so the next one is sent (and the burst after it is one message again).
    reconcile.taken(ADMISSION_TASK, manager.pk)
    for _ in range(3):
        _request_in_transaction(ADMISSION_TASK, manager.pk)
    assert messages(broker, ADMISSION_TASK, manager.pk) == 2
    assert messages(broker, ADMISSION_TASK, other) == 1


@pytest.mark.parametrize("task_name", sorted(reconcile.COALESCED_TASKS))
def test_every_reconciler_is_one_message_per_target(broker: redis.Redis, manager: Cluster,
                                                    task_name: str) -> None:
    for _ in range(5):
        _request_in_transaction(task_name, manager.pk)
    assert messages(broker, task_name, manager.pk) == 1


def test_a_wake_up_after_a_waiting_message_sends_none(broker: redis.Redis,
                                                      manager: Cluster) -> None:
    # A pass asks to be woken at its next pod start while a request's message waits: that
    # message's pass asks again for whatever is still ahead.
    _request_in_transaction(CLUSTER_SYNC_TASK, manager.pk)
    for delay in (0.5, 3.0, 3.0):
        with transaction.atomic():
            reconcile.request_later(CLUSTER_SYNC_TASK, delay, manager.pk)
    assert messages(broker, CLUSTER_SYNC_TASK, manager.pk) == 1


def test_an_earlier_request_is_sent_ahead_of_a_later_wake_up(broker: redis.Redis,
                                                             manager: Cluster) -> None:
    with transaction.atomic():
        reconcile.request_later(CLUSTER_SYNC_TASK, 60.0, manager.pk)
    _request_in_transaction(CLUSTER_SYNC_TASK, manager.pk)
    _request_in_transaction(CLUSTER_SYNC_TASK, manager.pk)  # finds the earlier one
    assert messages(broker, CLUSTER_SYNC_TASK, manager.pk) == 2


def test_a_mark_whose_message_is_lost_expires(broker: redis.Redis, manager: Cluster,
                                              settings: Any) -> None:
    import time

    _request_in_transaction(ADMISSION_TASK, manager.pk)
    broker.delete("celery")  # the message is gone (a host lost with it), its mark is not
    _request_in_transaction(ADMISSION_TASK, manager.pk)
    assert messages(broker, ADMISSION_TASK, manager.pk) == 0
    time.sleep(reconcile.REQUEST_ONCE_SECONDS + 0.5)
    _request_in_transaction(ADMISSION_TASK, manager.pk)
    assert messages(broker, ADMISSION_TASK, manager.pk) == 1


def test_a_request_without_redis_is_dropped_at_once(broker: redis.Redis, manager: Cluster,
                                                    settings: Any) -> None:
    import time

    from tests.fixtures.processes import free_port

    settings.CACHES = {**settings.CACHES, "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        "OPTIONS": {"socket_connect_timeout": 3, "socket_timeout": 5}}}
    started = time.monotonic()
    for _ in range(20):
        _request_in_transaction(ADMISSION_TASK, manager.pk)  # never raises
    reconcile.taken(ADMISSION_TASK, manager.pk)  # nor does a run that starts meanwhile
    assert time.monotonic() - started < 2  # one failed attempt, then the cooldown
    assert reconcile._broker_down.active
    assert messages(broker, ADMISSION_TASK, manager.pk) == 0  # the safety net catches up


@pytest.fixture
def worker_without_beat(broker: redis.Redis, settings: Any,
                        tmp_path: Any) -> Iterator[Any]:
    """Two Celery worker processes and no beat: no periodic safety net would hide a request
    that was held back and never served."""
    from tests.fixtures.processes import worker_only

    with worker_only(settings.REDIS_URL, tmp_path, concurrency=2) as processes:
        yield processes


@pytest.mark.slow
def test_every_submission_of_a_stream_is_admitted_without_the_periodic_net(
    worker_without_beat: Any, make_queue: Any,
) -> None:
    import random
    import time

    from scheduling import services
    from scheduling.models import Workload
    from tests.fixtures.processes import wait_for
    from tests.fixtures.scheduling import job_manifest

    make_queue("cq", {"cpu": "100"})
    rng = random.Random(7)
    names = [f"stream-{i}" for i in range(60)]
    for name in names:  # one transaction each, some while a cycle runs
        services.submit_job(job_manifest(name, "lq-cq", cpu="1"), namespace="ns")
        time.sleep(rng.uniform(0, 0.03))

    def pending() -> list[str]:
        return list(Workload.objects.filter(quota_reserved_at__isnull=True)
                    .values_list("job__name", flat=True))

    wait_for(lambda: not pending(), timeout=60, processes=worker_without_beat,
             what="every workload of the stream admitted", interval=0.1)
    assert Workload.objects.filter(job__name__in=names).count() == len(names)
    assert "Traceback" not in worker_without_beat.logs()
