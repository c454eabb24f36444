"""The Celery application: configured from Django settings under the CELERY_ namespace."""

import logging
import os
import time
from typing import Any

from celery import Celery
from celery.signals import task_prerun, worker_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kueueweb.settings")

logger = logging.getLogger(__name__)


def _survive_redis_loss() -> None:
    """Keep a worker alive when Redis goes away while it holds unacknowledged messages.

    With ``task_acks_late`` a worker running a task holds its message unacknowledged. When
    the broker connection is lost, kombu's Redis transport closes the channel and tries to
    put those messages back, or to acknowledge a task that just finished, through a
    connection it already tore down: ``_connparams`` then fails with ``AttributeError``
    (``'NoneType' object has no attribute 'hostname'``), which is no connection error, so
    Celery stops the worker ("Unrecoverable error") instead of reconnecting (kombu 5.7;
    the same family as celery/kombu#582 and celery/celery#10205).

    Here that case raises ``redis.ConnectionError``, which kombu and Celery handle (the
    worker reconnects; an acknowledgement that cannot be sent is logged), and a restore
    that cannot reach Redis leaves the messages in Redis's unacked set, from which any
    worker restores them after the visibility timeout. Tasks are idempotent: a task run
    twice is harmless.
    """
    try:
        import redis
        from kombu.transport import redis as kombu_redis
    except ImportError:  # pragma: no cover - redis is a dependency
        return
    channel_cls: Any = kombu_redis.Channel
    qos_cls: Any = kombu_redis.QoS
    if getattr(channel_cls._connparams, "_kueueweb", False):
        return
    connparams = channel_cls._connparams
    restore_unacked = qos_cls.restore_unacked

    def guarded_connparams(self: Any, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("the broker connection is closed")
        return connparams(self, asynchronous=asynchronous)

    def guarded_restore_unacked(self: Any, client: Any = None) -> Any:
        try:
            return restore_unacked(self, client)
        except redis.exceptions.ConnectionError as exc:
            logger.warning("%d unacknowledged message(s) left in Redis, redelivered after the "
                           "visibility timeout: %s", len(self._delivered), exc)
            self._delivered.clear()
            return None

    guarded_connparams._kueueweb = True  # type: ignore[attr-defined]
    channel_cls._connparams = guarded_connparams
    qos_cls.restore_unacked = guarded_restore_unacked


_survive_redis_loss()


def _tune_reconciler(**kwargs: Any) -> None:
    """Once the worker has loaded the application, before its pool forks: the collector
    and the database connections of a reconciler process (``kueueweb.collector``,
    ``kueueweb.connections``); the forked children inherit both."""
    from kueueweb import collector, connections

    collector.tune_reconciler()
    connections.keep_in_worker()


worker_init.connect(_tune_reconciler, weak=False)


# When each of beat's tasks last started, by task name (seconds since the epoch): a hash in
# Redis that tells whether the periodic tasks run on time (``tools.soak``).
PERIODIC_RUNS_KEY = "kueueweb:periodic-runs"
_redis_client: Any = None


def _record_periodic_run(name: str) -> None:
    global _redis_client
    from django.conf import settings

    try:
        if _redis_client is None:
            import redis

            _redis_client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0,
                                                 socket_connect_timeout=2.0)
        _redis_client.hset(PERIODIC_RUNS_KEY, name, time.time())
    except Exception as error:  # noqa: BLE001 - a figure, never a reason for a task to fail
        logger.debug("the run of %s was not recorded (%s)", name, error)


def _task_starts(sender: Any = None, args: Any = None, **kwargs: Any) -> None:
    """As a task starts, before it reads anything. A coalesced reconciler's run clears its
    target's mark, so the requests from now on send a message again (``kueueweb.reconcile``);
    a periodic task's run is recorded."""
    from django.conf import settings

    from kueueweb import reconcile

    name = getattr(sender, "name", None)
    if name in reconcile.COALESCED_TASKS:
        reconcile.taken(name, *(args or ()))
    elif settings.REDIS_URL and name in {
            entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}:
        _record_periodic_run(str(name))


task_prerun.connect(_task_starts, weak=False)

app = Celery("kueueweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
