"""Typed readers for settings that come from the environment.

Every knob kueueweb has is an environment variable; these helpers turn the raw strings into
typed values and fail loudly on values that cannot mean anything (``DEBUG=maybe``).
Secrets also accept a ``<NAME>_FILE`` variant that names a file holding the value, which
is how container orchestrators hand secrets over.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of true/false/1/0/yes/no, not {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be a number, not {raw!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_json(name: str, default: Any) -> Any:
    """A JSON value (a label selector, say); the default when unset or empty."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be JSON: {exc}") from exc


def env_secret(name: str) -> str | None:
    """The secret in ``name``, or in the file named by ``name_FILE``; None when neither is set."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE names {path!r}, which cannot be read") from exc
    return None


# The SECRET_KEY of development (DEBUG on and none set): public, so never one with DEBUG off.
DEVELOPMENT_SECRET_KEY = "kueueweb-development-only-secret-key-do-not-use-in-production"
# Values anybody can read: the development key and the env example's placeholder.
PUBLIC_SECRETS = (DEVELOPMENT_SECRET_KEY, "change-me")
# What a production secret must at least be, as Django's own deployment check asks of
# SECRET_KEY: long, and not one character repeated.
MIN_SECRET_KEY_LENGTH = 50
MIN_SECRET_KEY_UNIQUE_CHARACTERS = 5
# A Fernet key is 32 random bytes; one with this few distinct bytes was typed, not generated.
MIN_FERNET_KEY_UNIQUE_BYTES = 8
GENERATE_SECRET_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
GENERATE_FERNET_KEY = ("python -c 'from cryptography.fernet import Fernet; "
                       "print(Fernet.generate_key().decode())'")


def check_secret_key(name: str, value: str) -> None:
    """Refuse a secret key that is public (shipped in the source or an example) or too weak
    to sign sessions with."""
    if value in PUBLIC_SECRETS:
        raise ImproperlyConfigured(
            f"{name} is a value published with kueueweb, not a secret: set it to a long random "
            f"string ({GENERATE_SECRET_KEY}).")
    if len(value) < MIN_SECRET_KEY_LENGTH or len(set(value)) < MIN_SECRET_KEY_UNIQUE_CHARACTERS:
        raise ImproperlyConfigured(
            f"{name} is too weak: it needs at least {MIN_SECRET_KEY_LENGTH} characters, "
            f"{MIN_SECRET_KEY_UNIQUE_CHARACTERS} of them different ({GENERATE_SECRET_KEY}).")


def check_fernet_key(name: str, value: str) -> None:
    """Refuse a value that is no Fernet key (32 url-safe base64-encoded bytes), or one that
    was typed rather than generated."""
    try:
        raw = base64.urlsafe_b64decode(value.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ImproperlyConfigured(
            f"{name} must be a Fernet key, 32 url-safe base64-encoded bytes "
            f"({GENERATE_FERNET_KEY}).")
    if len(set(raw)) < MIN_FERNET_KEY_UNIQUE_BYTES:
        raise ImproperlyConfigured(
            f"{name} is too weak: generate it ({GENERATE_FERNET_KEY}).")


def derived_fernet_key(secret_key: str) -> str:
    """The Fernet key kueueweb derives from SECRET_KEY for development, when none is set."""
    return base64.urlsafe_b64encode(hashlib.sha256(secret_key.encode()).digest()).decode()
