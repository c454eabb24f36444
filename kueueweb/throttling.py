"""Rate limits: API requests per user, and failed sign-ins and API tokens per client.

- **API requests** (DRF throttles): each signed-in user (session or token) may make
  ``KUEUEWEB_API_RATE_USER`` requests, anonymous clients ``KUEUEWEB_API_RATE_ANON`` per
  address. Over the rate: 429 with ``Retry-After``.
- **Failed sign-ins** (``/login/`` and ``/admin/login/``): after
  ``KUEUEWEB_LOGIN_FAILURE_LIMIT`` failures for one username from one address within
  ``KUEUEWEB_LOGIN_FAILURE_WINDOW_SECONDS``, that username is refused from that address, even
  with the right password, until the window has passed (429 and a message saying so).
- **Failed API tokens**: after ``KUEUEWEB_TOKEN_FAILURE_LIMIT`` unknown tokens from one address
  within the same kind of window, every token from that address is refused (429) until it
  has passed, so keys cannot be guessed.

Counters live in the cache named by ``KUEUEWEB_RATE_LIMIT_CACHE``: Redis in production
(``REDIS_URL``), shared by every web process, process memory in embedded mode.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, cast

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.http import HttpRequest
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication, get_authorization_header
from rest_framework.request import Request
from rest_framework.throttling import AnonRateThrottle, UserRateThrottle


def rate_limit_cache() -> BaseCache:
    return caches[settings.KUEUEWEB_RATE_LIMIT_CACHE]


def client_address(request: HttpRequest | Request) -> str:
    """The client's address: ``REMOTE_ADDR``, or behind ``NUM_PROXIES`` trusted proxies the
    address they saw (from ``X-Forwarded-For``), as DRF's throttles identify clients."""
    meta = request.META
    remote = str(meta.get("REMOTE_ADDR") or "")
    proxies = cast(dict[str, Any], settings.REST_FRAMEWORK).get("NUM_PROXIES")
    forwarded = meta.get("HTTP_X_FORWARDED_FOR")
    if proxies and forwarded:
        hops = [hop.strip() for hop in str(forwarded).split(",") if hop.strip()]
        if hops:
            return hops[-min(int(proxies), len(hops))]
    return remote


class FailureLimiter:
    """At most ``limit`` failures per identity in a fixed window of ``window`` seconds that
    starts at the first failure."""

    def __init__(self, scope: str, limit_setting: str, window_setting: str) -> None:
        self.scope = scope
        self.limit_setting = limit_setting
        self.window_setting = window_setting

    @property
    def limit(self) -> int:
        return int(settings.KUEUEWEB[self.limit_setting])

    @property
    def window(self) -> int:
        return int(settings.KUEUEWEB[self.window_setting])

    def _keys(self, identity: str) -> tuple[str, str]:
        digest = hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest()
        base = f"kueueweb:failures:{self.scope}:{digest}"
        return f"{base}:count", f"{base}:since"

    def retry_after(self, identity: str) -> int:
        """Seconds until ``identity`` may try again; 0 when it may now."""
        if self.limit <= 0:
            return 0
        count_key, since_key = self._keys(identity)
        cache = rate_limit_cache()
        values = cache.get_many([count_key, since_key])
        if int(values.get(count_key) or 0) < self.limit:
            return 0
        since = float(values.get(since_key) or time.time())
        return max(1, int(since + self.window - time.time() + 0.999))

    def failed(self, identity: str) -> None:
        if self.limit <= 0:
            return
        count_key, since_key = self._keys(identity)
        cache = rate_limit_cache()
        # The window starts at the first failure and both keys expire with it.
        cache.add(since_key, time.time(), timeout=self.window)
        cache.add(count_key, 0, timeout=self.window)
        try:
            cache.incr(count_key)
        except ValueError:  # expired between add and incr: this failure opens a new window
            cache.set(since_key, time.time(), timeout=self.window)
            cache.set(count_key, 1, timeout=self.window)

    def reset(self, identity: str) -> None:
        rate_limit_cache().delete_many(list(self._keys(identity)))


LOGIN_FAILURES = FailureLimiter("login", "LOGIN_FAILURE_LIMIT", "LOGIN_FAILURE_WINDOW_SECONDS")
TOKEN_FAILURES = FailureLimiter("token", "TOKEN_FAILURE_LIMIT", "TOKEN_FAILURE_WINDOW_SECONDS")


def login_identity(request: HttpRequest | None, username: str) -> str:
    address = client_address(request) if request is not None else ""
    return f"{username.strip().lower()}|{address}"


def wait_message(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    shown = f"{minutes} min {rest} s" if minutes else f"{rest} s"
    return f"try again in {shown}"


class ThrottledTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing every token from an address that sent too many
    unknown ones (``TOKEN_FAILURES``)."""

    def authenticate(self, request: Request) -> Any:
        auth = get_authorization_header(request).split()
        if not auth or auth[0].lower() != self.keyword.lower().encode():
            return None
        address = client_address(request)
        wait = TOKEN_FAILURES.retry_after(address)
        if wait:
            raise exceptions.Throttled(
                wait, detail="Too many requests with an unknown API token from your address; "
                + wait_message(wait) + ".")
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            TOKEN_FAILURES.failed(address)
            raise


class _SettingsRate:
    """Reads the rate from the settings at each request (not once at import, as DRF does), so
    the rates can change with the settings; ``off`` or empty means no limit."""

    def __init__(self) -> None:
        # Throttles are made for each request: the cache is looked up then too.
        self.cache = rate_limit_cache()
        super().__init__()  # DRF's throttle, later in the MRO

    def get_rate(self) -> str | None:
        rates = cast(dict[str, Any], settings.REST_FRAMEWORK).get("DEFAULT_THROTTLE_RATES", {})
        rate = rates.get(getattr(self, "scope", ""))
        if not rate or str(rate).strip().lower() in ("off", "none", "0"):
            return None
        return str(rate)


class UserRate(_SettingsRate, UserRateThrottle):
    """Per signed-in user, whether by session or token (anonymous: per address)."""


class AnonRate(_SettingsRate, AnonRateThrottle):
    """Per address, for anonymous requests."""
