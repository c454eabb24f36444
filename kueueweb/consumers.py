"""The browser's live-update socket: ``/ws/live/``.

Only signed-in users with a role connect (anonymous sockets are closed before accept with
4401; the Origin header was checked by the ASGI stack). The browser sends one kind of
message, ``{"subscribe": [cluster ids]}``, and the socket joins those domains' groups. Each
``domain.changed`` notification is forwarded as ``{"type": "changed", "cluster": id}``, at most
once per ``COALESCE_SECONDS`` per domain: a burst of thousands of changes becomes one refresh.
A notification or reply that finds the page gone is dropped quietly.

Every inbound message is validated before anything is done with it: text (not binary), at
most ``MAX_MESSAGE_BYTES``, a JSON object, no field but ``subscribe``, a list of at most
``MAX_SUBSCRIPTIONS`` cluster ids (positive 64-bit integers). A bad message is answered
``{"type": "error", "field": <the field at fault>, "message": <why>}`` and changes nothing; the
socket stays open. Only domains that exist and that the user may read are joined, and the
user's role is checked again on every subscription (a user whose role was taken away is
disconnected with 4403). A client sending more than ``MAX_MESSAGES_PER_MINUTE`` messages is
disconnected with 4429. A failure while handling one message is logged and answered with an
error; it never ends the consumer or touches other sockets.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from kueueweb import live
from kueueweb.live import group_name
from kueueweb.roles import Role, role_of

logger = logging.getLogger(__name__)

COALESCE_SECONDS = 0.5
MAX_SUBSCRIPTIONS = 64
MAX_MESSAGE_BYTES = 4096
MAX_MESSAGES_PER_MINUTE = 60
MAX_ID = 2**63 - 1  # a database primary key (bigint)
FIELDS = ("subscribe",)

CLOSE_ROLE_REVOKED = 4403
CLOSE_TOO_MANY_MESSAGES = 4429


class MessageError(ValueError):
    """A message that breaks the protocol; ``field`` names the part at fault."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class LiveConsumer(AsyncWebsocketConsumer):
    async def connect(self) -> None:
        live.serve_on(asyncio.get_running_loop())  # notifications go out on this loop
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or await _role(user) == Role.NONE:
            await self.close(code=4401)
            return
        self.groups_joined: set[str] = set()
        self.last_sent: dict[int, float] = {}
        self.scheduled: dict[int, asyncio.TimerHandle] = {}
        self.closed = False
        await self.accept()

    async def disconnect(self, code: int) -> None:
        # The page went away, maybe with a coalesced notification still due: nothing may be
        # sent on the closed socket after this.
        self.closed = True
        for timer in getattr(self, "scheduled", {}).values():
            timer.cancel()
        for group in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if not self._within_rate():
            await self.close(code=CLOSE_TOO_MANY_MESSAGES)
            return
        try:
            ids = parse_message(text_data, bytes_data)
            await self._subscribe(ids)
        except MessageError as exc:
            await self._error(exc.field, str(exc))
        except Exception:  # one message must never end the socket
            logger.exception("live socket message not handled")
            await self._error("", "the message could not be handled")

    def _within_rate(self) -> bool:
        now = time.monotonic()
        window: list[float] = getattr(self, "received_at", [])
        window = [t for t in window if now - t < 60.0]
        window.append(now)
        self.received_at = window
        return len(window) <= MAX_MESSAGES_PER_MINUTE

    async def _subscribe(self, ids: list[int]) -> None:
        user = self.scope.get("user")
        if user is None or await _current_role(user) < Role.VIEWER:
            await self.close(code=CLOSE_ROLE_REVOKED)
            return
        known = await _readable_clusters(user, ids)
        for cluster_id in known:
            group = group_name(cluster_id)
            if group not in self.groups_joined:
                await self.channel_layer.group_add(group, self.channel_name)
                self.groups_joined.add(group)
        await self._reply({"type": "subscribed", "clusters": sorted(known)})

    async def domain_changed(self, event: dict[str, Any]) -> None:
        cluster_id = int(event["cluster"])
        if cluster_id in self.scheduled or self.closed:
            return
        wait = self.last_sent.get(cluster_id, 0.0) + COALESCE_SECONDS - time.monotonic()
        if wait > 0:
            self.scheduled[cluster_id] = asyncio.get_running_loop().call_later(
                wait, lambda: asyncio.ensure_future(self._flush(cluster_id)))
            return
        await self._flush(cluster_id)

    async def _flush(self, cluster_id: int) -> None:
        self.scheduled.pop(cluster_id, None)
        if self.closed:
            return
        self.last_sent[cluster_id] = time.monotonic()
        await self._reply({"type": "changed", "cluster": cluster_id})

    async def _reply(self, message: dict[str, Any]) -> None:
        """Send ``message``, unless the socket closed meanwhile: a page that goes away while
        its subscription or a notification is under way is no error."""
        text = json.dumps(message)
        try:
            await self.send(text)
        except Exception as error:
            # The client closed the socket before the server told the consumer so (Daphne
            # raises autobahn's Disconnected): the message had nobody to go to.
            logger.debug("live socket message not sent: %s: %s", type(error).__name__, error)

    async def _error(self, field: str, message: str) -> None:
        await self._reply({"type": "error", "field": field,
                           "message": f"{field}: {message}" if field else message})


def parse_message(text_data: str | None, bytes_data: bytes | None) -> list[int]:
    """The cluster ids of a ``{"subscribe": [...]}`` message, or MessageError."""
    if text_data is None:
        raise MessageError("", "messages must be JSON text, not binary")
    if len(text_data.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise MessageError("", f"messages must be JSON text of at most {MAX_MESSAGE_BYTES} "
                           "bytes")
    try:
        message = json.loads(text_data)
    except (ValueError, RecursionError):
        raise MessageError("", "messages must be JSON") from None
    if not isinstance(message, dict):
        raise MessageError("", 'messages must be a JSON object: {"subscribe": [cluster ids]}')
    for key in message:
        if key not in FIELDS:
            raise MessageError(str(key)[:64], 'unknown field: messages are '
                               '{"subscribe": [cluster ids]}')
    if "subscribe" not in message:
        raise MessageError("subscribe", "required: a list of cluster ids")
    ids = message["subscribe"]
    if not isinstance(ids, list) or len(ids) > MAX_SUBSCRIPTIONS:
        raise MessageError("subscribe", f"must be a list of at most {MAX_SUBSCRIPTIONS} "
                           "cluster ids")
    for index, value in enumerate(ids):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= MAX_ID:
            raise MessageError(f"subscribe[{index}]", "must be a cluster id (a positive "
                               "integer)")
    return list(dict.fromkeys(ids))


@database_sync_to_async
def _role(user: Any) -> Any:
    return role_of(user)


@database_sync_to_async
def _current_role(user: Any) -> Role:
    """The user's role now, read afresh: the socket may have been open for hours, and the
    user object of its scope caches the role it had at connection."""
    from django.contrib.auth import get_user_model

    if not getattr(user, "is_authenticated", False):
        return Role.NONE
    fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    return role_of(fresh) if fresh is not None else Role.NONE


@database_sync_to_async
def _readable_clusters(user: Any, ids: list[int]) -> list[int]:
    """The ids among ``ids`` of clusters that exist and that ``user`` may read (every role
    reads every domain; the role was checked just before)."""
    from multicluster.models import Cluster

    if not ids:
        return []
    return list(Cluster.objects.filter(pk__in=ids).values_list("pk", flat=True))
