"""Live updates: after a transaction commits, tell the browsers watching a scheduling domain
that something in it changed; pages then re-fetch the parts they show.

One Channels group per domain (``domain.<cluster id>``). A notification carries no data, so
nothing leaks to a socket that could not read it and a missed one costs nothing but a
delay; the consumer coalesces bursts (``kueueweb.consumers.LiveConsumer``).
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

def group_name(cluster_id: int) -> str:
    return f"domain.{int(cluster_id)}"


def _send(cluster_ids: set[int]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for cluster_id in sorted(cluster_ids):
        try:
            async_to_sync(layer.group_send)(group_name(cluster_id),
                                            {"type": "domain.changed", "cluster": cluster_id})
        except Exception:  # a broken channel layer must not break the committed write
            logger.exception("live update for domain %s not sent", cluster_id)


def notify(cluster_id: int | None) -> None:
    """Browsers watching ``cluster_id`` refresh once the current transaction commits.

    Call it once per service call or reconciler pass that changed something, not per row.
    """
    if cluster_id is None:
        return
    ids = {int(cluster_id)}
    transaction.on_commit(lambda: _send(ids))
