"""Live updates: after a transaction commits, tell the browsers watching a scheduling domain
that something in it changed; pages then re-fetch the parts they show.

One Channels group per domain (``domain.<cluster id>``). A notification carries no data, so
nothing leaks to a socket that could not read it and a missed one costs nothing but a
delay; the consumer coalesces bursts (``kueueweb.consumers.LiveConsumer``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from kueueweb.cooldown import Cooldown

logger = logging.getLogger(__name__)

# A notification is worth little: it is not worth stalling the request that committed.
SEND_TIMEOUT_SECONDS = 2.0
# After a failure (Redis down), this process sends none for a while rather than paying the
# timeout again on every write; browsers catch up when their socket reconnects.
LAYER_DOWN_BACKOFF_SECONDS = 5.0
_layer_down = Cooldown(LAYER_DOWN_BACKOFF_SECONDS)


def group_name(cluster_id: int) -> str:
    return f"domain.{int(cluster_id)}"


async def _group_send(layer: Any, cluster_ids: list[int]) -> None:
    for cluster_id in cluster_ids:
        await asyncio.wait_for(
            layer.group_send(group_name(cluster_id),
                             {"type": "domain.changed", "cluster": cluster_id}),
            timeout=SEND_TIMEOUT_SECONDS,
        )


def _send(cluster_ids: set[int]) -> None:
    layer = get_channel_layer()
    if layer is None or _layer_down.active:
        return
    try:
        async_to_sync(_group_send)(layer, sorted(cluster_ids))
    except Exception as error:  # a broken channel layer must not break the committed write
        _layer_down.trip()
        logger.warning("live update for domains %s not sent (%s: %s)", sorted(cluster_ids),
                       type(error).__name__, error)


# Per process and domain, at most one send per THROTTLE_SECONDS: the first change goes out at
# once, later ones in the window become one send at its end. A burst of thousands of commits
# a second then costs the channel layer (and every socket) a few messages, not thousands.
THROTTLE_SECONDS = 0.1
_throttle_lock = threading.Lock()
_last_sent: dict[int, float] = {}
_trailing: set[int] = set()


def _send_throttled(cluster_ids: set[int]) -> None:
    now = time.monotonic()
    due: set[int] = set()
    with _throttle_lock:
        for cluster_id in cluster_ids:
            if cluster_id in _trailing:
                continue  # already due at the end of the window
            wait = _last_sent.get(cluster_id, -THROTTLE_SECONDS) + THROTTLE_SECONDS - now
            if wait <= 0:
                _last_sent[cluster_id] = now
                due.add(cluster_id)
                continue
            _trailing.add(cluster_id)
            # Not a daemon: a process that exits right after a burst still sends its last one.
            timer = threading.Timer(wait, _send_trailing, args=(cluster_id,))
            timer.daemon = False
            timer.start()
    if due:
        _send(due)


def _send_trailing(cluster_id: int) -> None:
    with _throttle_lock:
        _trailing.discard(cluster_id)
        _last_sent[cluster_id] = time.monotonic()
    _send({cluster_id})


def notify(cluster_id: int | None) -> None:
    """Browsers watching ``cluster_id`` refresh once the current transaction commits.

    Call it once per service call or reconciler pass that changed something, not per row.
    """
    if cluster_id is None:
        return
    ids = {int(cluster_id)}
    transaction.on_commit(lambda: _send_throttled(ids))
