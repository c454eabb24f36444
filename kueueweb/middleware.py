"""Database outages answer 503, not 500.

When PostgreSQL restarts, fails over or terminates a backend, the view's query raises
``OperationalError`` (or ``InterfaceError`` on a connection already closed). That is no bug
in the request: the client should retry. The transaction the view was in is rolled back by
the database, so nothing is half-written; Django drops the broken connection when the
request ends and ``CONN_HEALTH_CHECKS`` makes the next request open a fresh one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
MESSAGE = "The database is unavailable; try again shortly."


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        logger.warning("database unavailable during %s %s: %s", request.method,
                       request.path, exception)
        response: HttpResponse
        if _wants_json(request):
            response = JsonResponse({"detail": MESSAGE, "code": "database_unavailable"},
                                    status=503)
        else:
            response = HttpResponse(
                f"<!doctype html><title>Service unavailable</title><h1>Service unavailable</h1>"
                f"<p>{MESSAGE}</p>", status=503, content_type="text/html; charset=utf-8")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response


def _wants_json(request: HttpRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return (request.path.startswith("/api/") or "json" in accept
            or "html" not in accept)
