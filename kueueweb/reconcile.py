"""Asking for a reconciler to run: after the current transaction commits, by Celery in
production or by the embedded loop in the web process.

A request is a wake-up, never the only trigger: Celery beat asks every domain on a short
period (the safety net), so a request that cannot be sent is logged and dropped. Sending
must never fail or stall the web request or task that asked: when the broker is down, one
attempt with bounded timeouts fails, and the process sends nothing more for
``BROKER_DOWN_BACKOFF_SECONDS`` rather than paying that wait again on every request.

Every request is coalesced per target (task and arguments): while a message that runs the
task no later than the request asks still waits for a worker, no other is sent. Each
reconciler is level-triggered (it reads the state and converges) and asks again for its own
next deadline when it runs, so the waiting message serves every request it absorbed, and
the Celery queue holds about one message per target however many changes arrive.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from kueueweb import embedded
from kueueweb.cooldown import Cooldown

logger = logging.getLogger(__name__)

# Every Celery task, by the name it is registered and sent under: the task modules, beat's
# schedule (``kueueweb.settings``) and the requests below name them only through these.
#
# The reconcilers asked for per target (a domain or a cluster id). Each is coalesced by
# ``request``, and a run of it clears its target's mark as it starts (``taken``, called for
# every one of them by ``kueueweb.celery``).
ADMISSION_TASK = "scheduling.tasks.admission_cycle_task"
LIFECYCLE_TASK = "scheduling.tasks.lifecycle_task"
# A pass of a cluster's reconciler, whatever its connection (simulated or Kubernetes).
CLUSTER_SYNC_TASK = "multicluster.tasks.sync_cluster_task"
DISPATCH_TASK = "multicluster.tasks.dispatch_task"
# The ReplicaSet controller of one Deployment (a kind that keeps replicas): its Pods.
REPLICAS_TASK = "scheduling.tasks.replicas_task"
COALESCED_TASKS = frozenset(
    {ADMISSION_TASK, LIFECYCLE_TASK, CLUSTER_SYNC_TASK, DISPATCH_TASK, REPLICAS_TASK})
# Beat's periodic tasks: each asks for a pass of every target, so nothing waits for a
# missed request.
ADMISSION_ALL_TASK = "scheduling.tasks.schedule_admission_all_task"
LIFECYCLE_ALL_TASK = "scheduling.tasks.lifecycle_all_task"
CLUSTER_SYNC_ALL_TASK = "multicluster.tasks.sync_all_clusters_task"
DISPATCH_ALL_TASK = "multicluster.tasks.dispatch_all_task"
GARBAGE_COLLECT_TASK = "multicluster.tasks.garbage_collect_task"
SAMPLE_USAGE_TASK = "scheduling.tasks.sample_usage_task"
DEMO_TRAFFIC_TASK = "scheduling.tasks.demo_traffic_task"
# The CronJob controller: the Jobs every due schedule creates.
CRONJOB_ALL_TASK = "scheduling.tasks.cronjobs_task"
# The ReplicaSet controller of every Deployment: the Pods each keeps.
REPLICAS_ALL_TASK = "scheduling.tasks.replicas_all_task"
# Connect to a Kubernetes cluster now, outside its reconciler's probe interval.
PROBE_KUBE_CLUSTER_TASK = "multicluster.tasks.probe_kube_cluster_task"

BROKER_DOWN_BACKOFF_SECONDS = 5.0
_broker_down = Cooldown(BROKER_DOWN_BACKOFF_SECONDS)
# How long past its due time a request's mark stands in for the next requests of the same
# target: longer than a message normally waits for a worker, short enough that a lost
# message costs little, and shorter than the cooldown above (a mark left by a failed send
# expires first).
REQUEST_ONCE_SECONDS = 2


def request(task_name: str, *args: Any) -> None:
    """Run task ``task_name`` with ``args`` (ids and primitives) once this transaction commits.

    Outside a running embedded loop and without a broker (tests, management commands) the
    request is dropped: the periodic reconcilers pick the change up on their next pass.
    """
    request_later(task_name, 0.0, *args)


def request_later(task_name: str, delay_seconds: float, *args: Any) -> None:
    """As ``request``, but run no sooner than ``delay_seconds`` after the commit: a
    reconciler asks to be woken at its next deadline (a pod start, a timeout).

    In production the request marks its target as waiting, with the time its message is
    due (a key in the cache, which is Redis, until ``REQUEST_ONCE_SECONDS`` after that
    time). A request that finds a mark due no later than itself sends nothing: that
    message's run starts after this transaction committed, so it sees this change, and it
    asks again for any deadline still ahead. One due later is replaced by an earlier
    message. A message that is never run (a host lost with it) leaves its mark: the
    requests until it expires are dropped, and the periodic pass serves them, as it serves
    those dropped while the broker is down. The embedded loop runs requests that piled up
    once anyway."""
    delay = max(float(delay_seconds), 0.0)
    transaction.on_commit(lambda: _deliver(task_name, args, delay))


def request_cluster_sync(cluster_id: int, delay_seconds: float = 0.0) -> None:
    """Ask for a pass of the cluster's reconciler (``CLUSTER_SYNC_TASK``) after commit, no
    sooner than ``delay_seconds``: every trigger of a cluster's pass, of either connection,
    comes through here."""
    request_later(CLUSTER_SYNC_TASK, delay_seconds, cluster_id)


def _deliver(task_name: str, args: tuple[Any, ...], delay: float) -> None:
    """After the commit: send the request to Celery in production, or queue it for the
    embedded loop if it runs (else drop it). A send that fails leaves the mark to expire,
    before the broker's cooldown ends."""
    if settings.RECONCILER_MODE == "celery":
        delay = min(delay, max_countdown())
        if task_name in COALESCED_TASKS and (
                _broker_down.active or not _mark_waiting(task_name, args, delay)):
            return
        send_to_celery(task_name, list(args), delay)
    elif embedded.is_running():
        embedded.submit(task_name, args, delay=delay)


def taken(task_name: str, *args: Any) -> None:
    """Called as a run of a coalesced task starts, before it reads anything: the requests
    from now on are sent again, since this run may read before their changes."""
    if settings.RECONCILER_MODE != "celery" or _broker_down.active:
        return
    try:
        cache.delete(_waiting_key(task_name, args))
    except Exception as error:  # noqa: BLE001 - Redis is down; the mark expires on its own
        _broker_down.trip()
        logger.warning("the request mark of %s%r was not cleared (%s: %s)",
                       task_name, tuple(args), type(error).__name__, error)


def _waiting_key(task_name: str, args: tuple[Any, ...]) -> str:
    return ":".join(["kueueweb:waiting", task_name, *map(str, args)])


def _mark_waiting(task_name: str, args: tuple[Any, ...], delay: float) -> bool:
    """Mark the target as waiting for a message due in ``delay`` seconds; False if a
    message due no later already waits, or if Redis failed (then the broker is down too:
    the request is dropped, as ``send_to_celery`` drops it, and the periodic reconcilers
    catch up).

    Two requests that race here may both send: one run more, never one fewer."""
    key = _waiting_key(task_name, args)
    due = time.time() + delay
    timeout = delay + REQUEST_ONCE_SECONDS
    try:
        if cache.add(key, due, timeout=timeout):
            return True
        waiting = cache.get(key)
        if waiting is not None and float(waiting) <= due:
            return False
        cache.set(key, due, timeout=timeout)
        return True
    except Exception as error:  # noqa: BLE001 - any Redis failure
        _broker_down.trip()
        logger.warning("task %s not sent (%s: %s); the periodic reconcilers will catch up",
                       task_name, type(error).__name__, error)
        return False


def max_countdown() -> float:
    """The longest countdown sent: half the broker's visibility timeout. Redis redelivers a
    message still unacknowledged after that timeout, and a worker holds a countdown message
    unacknowledged until it runs; waking a reconciler early is harmless (it computes its
    next deadline again)."""
    timeout = float(settings.CELERY_VISIBILITY_TIMEOUT_SECONDS)
    return max(timeout / 2, 1.0)


def send_to_celery(task_name: str, args: list[Any], delay: float) -> bool:
    """Send the task now; False (logged) if the broker could not take it."""
    if _broker_down.active:
        return False
    from kueueweb.celery import app

    countdown = min(delay, max_countdown()) or None
    try:
        app.send_task(task_name, args=args, countdown=countdown)
    except Exception as error:  # noqa: BLE001 - any broker failure: the safety net covers it
        _broker_down.trip()
        logger.warning("task %s not sent (%s: %s); the periodic reconcilers will catch up",
                       task_name, type(error).__name__, error)
        return False
    return True

