"""Field validators shared by models, serializers and the Kueue YAML importer (Kubernetes'
name rules from ``scheduling.core.names``, raised as Django validation errors)."""

from __future__ import annotations

from django.core.exceptions import ValidationError

from scheduling.core.names import (
    dns1123_label_error,
    dns1123_subdomain_error,
    label_value_error,
    qualified_name_error,
)
from scheduling.core.quantities import QuantityError, parse_quantity


def _raise(message: str | None, code: str) -> None:
    if message is not None:
        raise ValidationError(message, code=code)


def validate_dns1123_subdomain(value: str) -> None:
    """Object names of Kueue's kinds (RFC 1123 subdomain, at most 253 characters)."""
    _raise(dns1123_subdomain_error(value), "invalid_name")


def validate_dns1123_label(value: str) -> None:
    """Namespace names (RFC 1123 label, at most 63 characters)."""
    _raise(dns1123_label_error(value), "invalid_namespace")


def validate_qualified_name(value: str) -> None:
    """Label keys and resource names: ``[prefix/]name`` as Kubernetes validates them."""
    _raise(qualified_name_error(value), "invalid_qualified_name")


def validate_label_value(value: str) -> None:
    _raise(label_value_error(value), "invalid_label_value")


def validate_labels(value: object) -> None:
    if not isinstance(value, dict):
        raise ValidationError("must be a map of label keys to values", code="invalid_labels")
    for key, item in value.items():
        validate_qualified_name(key)
        validate_label_value(item)


def validate_quantity(value: object) -> None:
    """A non-negative Kubernetes quantity ("500m", "1Gi", "1e3")."""
    try:
        parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError as exc:
        raise ValidationError(str(exc), code="invalid_quantity") from exc
