"""``GET /metrics``: Prometheus metrics (``scheduling.metrics.prometheus``) for signed-in users.

Like every page but the health check, the endpoint refuses anonymous requests: 401 with a
``WWW-Authenticate: Token`` challenge. Prometheus authenticates with an API token
(``authorization: {type: Token, credentials: <key>}`` in its scrape config sends
``Authorization: Token <key>``); a browser session works too. Any role may read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.authentication import SessionAuthentication
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from kueueweb.permissions import RolePermission
from kueueweb.throttling import ThrottledTokenAuthentication
from scheduling.metrics import prometheus


class PlainTextErrorRenderer(BaseRenderer):
    """Renders DRF's error bodies ({"detail": ...}) for clients that accept only text, as
    scrapers may; the metrics themselves bypass renderers."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        detail = data.get("detail", data) if isinstance(data, Mapping) else data
        return f"{detail}\n".encode()


class MetricsView(APIView):
    """Every metric in the Prometheus text format (content type ``CONTENT_TYPE_LATEST``)."""

    # Token first: its challenge is the one a 401 carries.
    authentication_classes = [ThrottledTokenAuthentication, SessionAuthentication]
    permission_classes = [RolePermission]  # GET: the viewer role
    renderer_classes = [JSONRenderer, PlainTextErrorRenderer]

    def perform_content_negotiation(
        self, request: Request, force: bool = False
    ) -> tuple[BaseRenderer, str]:
        # The body is always the text format, whatever the Accept header asks (Prometheus
        # prefers OpenMetrics but takes text): never answer 406.
        return super().perform_content_negotiation(request, force=True)

    @extend_schema(exclude=True)
    def get(self, request: Request) -> HttpResponse:
        return HttpResponse(prometheus.render(), content_type=CONTENT_TYPE_LATEST)
