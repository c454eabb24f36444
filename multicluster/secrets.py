"""Encryption at rest for kubeconfigs (Fernet, key from KUEUEWEB_ENCRYPTION_KEY)."""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.views.decorators.debug import sensitive_variables


def _fernet() -> Fernet:
    try:
        return Fernet(settings.KUEUEWEB_ENCRYPTION_KEY.encode())
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            "KUEUEWEB_ENCRYPTION_KEY must be 32 url-safe base64-encoded bytes (a Fernet key)"
        ) from exc


@sensitive_variables()
def encrypt(plaintext: str) -> str:
    return _fernet().encrypt(plaintext.encode()).decode()


@sensitive_variables()
def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken as exc:
        raise ImproperlyConfigured(
            "a stored kubeconfig cannot be decrypted: KUEUEWEB_ENCRYPTION_KEY has changed"
        ) from exc
