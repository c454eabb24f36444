"""API-wide behaviour: errors that always name the field at fault."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "payload_too_large"


class ConflictError(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The object already exists, has changed, or is in use."
    default_code = "conflict"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus:

    - Django ValidationErrors raised by models become 400s by field;
    - a body that cannot be read at all (not JSON/YAML, not UTF-8, anchors, too deep, no
      object) names the field at fault too, ``body``, beside DRF's ``detail``:
      ``{"detail": "not valid JSON: ...", "body": ["not valid JSON: ..."]}``.
    """
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            exc = exceptions.ValidationError(exc.message_dict)
        else:
            exc = exceptions.ValidationError({"non_field_errors": exc.messages})
    response = drf_exception_handler(exc, context)
    if (response is not None and isinstance(exc, exceptions.ParseError)
            and isinstance(response.data, dict) and "detail" in response.data):
        response.data["body"] = [str(response.data["detail"])]
    return response


class URLArgumentsMixin:
    """Refuses URL arguments no object can match before any query uses them.

    Names in the path (``{name}``, ``{namespace}``) and ``?cluster=`` come from the client
    as they are; PostgreSQL cannot even compare a string holding a NUL character. A path
    argument that no object could have is "not found" (404); ``?cluster=`` is refused by name
    (400).
    """

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            if isinstance(value, str) and not _storable(value):
                raise exceptions.NotFound(f"no object has that {key}")
        cluster = request.query_params.get("cluster")
        if cluster is not None and not _storable(cluster):
            raise exceptions.ValidationError(
                {"cluster": ["must be the name of a cluster (no control characters)"]})
        super().initial(request, *args, **kwargs)  # type: ignore[misc]


def _storable(value: str) -> bool:
    return "\x00" not in value
