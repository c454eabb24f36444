"""Kubernetes' rules for names, label keys and label values, as messages (``None`` when the
value is valid). ``scheduling.validators`` raises them as Django validation errors."""

from __future__ import annotations

import re

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# Qualified names (label keys, resource names): optional DNS prefix, "/", then a name part.
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns1123_subdomain_error(value: str) -> str | None:
    """Object names of Kueue's kinds (RFC 1123 subdomain, at most 253 characters)."""
    if not value or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        return (f"{value!r} is not a valid name: a lowercase RFC 1123 subdomain must consist "
                "of lower case alphanumeric characters, '-' or '.', and must start and end "
                "with an alphanumeric character")
    return None


def dns1123_label_error(value: str) -> str | None:
    """Namespace names (RFC 1123 label, at most 63 characters)."""
    if not value or len(value) > 63 or not _DNS1123_LABEL.match(value):
        return (f"{value!r} is not a valid namespace: a lowercase RFC 1123 label must consist "
                "of lower case alphanumeric characters or '-', start and end with an "
                "alphanumeric character, and be at most 63 characters")
    return None


def qualified_name_error(value: object) -> str | None:
    """Label keys and resource names: ``[prefix/]name`` as Kubernetes validates them."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return f"{value!r}: prefix part must be a DNS-1123 subdomain"
    if len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (f"{value!r}: name part must consist of alphanumeric characters, '-', '_' or "
                "'.', and must start and end with an alphanumeric character (at most 63 "
                "characters)")
    return None


def label_value_error(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        return (f"{value!r} is not a valid label value: at most 63 alphanumeric characters, "
                "'-', '_' or '.', starting and ending with an alphanumeric character")
    return None
