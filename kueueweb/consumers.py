"""The browser's live-update socket: ``/ws/live/``.

Only signed-in users with a role connect (anonymous sockets are closed before accept;
the Origin header was checked by the ASGI stack). The browser sends
``{"subscribe": [cluster ids]}``; the message is validated (at most 64 integers of domains
that exist) and the socket joins those domains' groups. Each ``domain.changed``
notification is forwarded as ``{"type": "changed", "cluster": id}``, at most once per
``COALESCE_SECONDS`` per domain: a burst of thousands of changes becomes one refresh.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from kueueweb.live import group_name
from kueueweb.roles import Role, role_of

COALESCE_SECONDS = 0.5
MAX_SUBSCRIPTIONS = 64
MAX_MESSAGE_BYTES = 4096


class LiveConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or await _role(user) == Role.NONE:
            await self.close(code=4401)
            return
        self.groups_joined: set[str] = set()
        self.last_sent: dict[int, float] = {}
        self.scheduled: set[int] = set()
        await self.accept()

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data is None or len(text_data) > MAX_MESSAGE_BYTES:
            await self._error("messages must be JSON text of at most 4096 bytes")
            return
        try:
            message = json.loads(text_data)
        except ValueError:
            await self._error("messages must be JSON")
            return
        ids = message.get("subscribe") if isinstance(message, dict) else None
        if (not isinstance(ids, list) or len(ids) > MAX_SUBSCRIPTIONS
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
            await self._error(f"subscribe: must be a list of at most {MAX_SUBSCRIPTIONS} "
                              "cluster ids")
            return
        known = await _existing_clusters(ids)
        for cluster_id in known:
            group = group_name(cluster_id)
            if group not in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
                self.groups_joined.add(group)
        await self.send(json.dumps({"type": "subscribed", "clusters": sorted(known)}))

    async def domain_changed(self, event: dict[str, Any]) -> None:
        cluster_id = int(event["cluster"])
        if cluster_id in self.scheduled:
            return
        wait = self.last_sent.get(cluster_id, 0.0) + COALESCE_SECONDS - time.monotonic()
        if wait > 0:
            self.scheduled.add(cluster_id)
            asyncio.get_running_loop().call_later(
                wait, lambda: asyncio.ensure_future(self._flush(cluster_id)))
            return
        await self._flush(cluster_id)

    async def _flush(self, cluster_id: int) -> None:
        self.scheduled.discard(cluster_id)
        self.last_sent[cluster_id] = time.monotonic()
        await self.send(json.dumps({"type": "changed", "cluster": cluster_id}))

    async def _error(self, message: str) -> None:
        await self.send(json.dumps({"type": "error", "message": message}))


@database_sync_to_async
def _role(user: Any) -> Any:
    return role_of(user)


@database_sync_to_async
def _existing_clusters(ids: list[int]) -> list[int]:
    from multicluster.models import Cluster

    return list(Cluster.objects.filter(pk__in=ids).values_list("pk", flat=True))
