"""Requests for reconcilers (``kueueweb.reconcile``): in production, a burst of requests
for one target becomes one Celery message until a run takes it, whichever reconciler it
asks for and whenever it asks it to run.

Against the real Redis broker, with no worker, so that the messages stay in the queue to be
counted (the same stream served by real workers: ``tests/integration/test_request_stream.py``).
"""

from __future__ import annotations

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
