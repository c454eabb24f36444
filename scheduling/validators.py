"""Field validators shared by models, serializers and the Kueue YAML importer."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

from scheduling.core.quantities import QuantityError, parse_quantity

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Qualified names (label keys, resource names): optional DNS prefix, "/", then a name part.
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate_dns1123_subdomain(value: str) -> None:
    """Object names of Kueue's kinds (RFC 1123 subdomain, at most 253 characters)."""
    if not value or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise ValidationError(
            f"{value!r} is not a valid name: a lowercase RFC 1123 subdomain must consist of "
            "lower case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character",
            code="invalid_name",
        )


def validate_dns1123_label(value: str) -> None:
    """Namespace names (RFC 1123 label, at most 63 characters)."""
    if not value or len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValidationError(
            f"{value!r} is not a valid namespace: a lowercase RFC 1123 label must consist of "
            "lower case alphanumeric characters or '-', start and end with an alphanumeric "
            "character, and be at most 63 characters",
            code="invalid_namespace",
        )


def validate_qualified_name(value: str) -> None:
    """Label keys and resource names: ``[prefix/]name`` as Kubernetes validates them."""
    if not isinstance(value, str) or not value:
        raise ValidationError("must be a non-empty string", code="invalid_qualified_name")
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        raise ValidationError(
            f"{value!r}: prefix part must be a DNS-1123 subdomain", code="invalid_qualified_name"
        )
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        raise ValidationError(
            f"{value!r}: name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (at most 63 characters)",
            code="invalid_qualified_name",
        )


def validate_label_value(value: str) -> None:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValidationError(
            f"{value!r} is not a valid label value: at most 63 alphanumeric characters, '-', "
            "'_' or '.', starting and ending with an alphanumeric character",
            code="invalid_label_value",
        )


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
