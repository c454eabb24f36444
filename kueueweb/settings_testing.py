"""Settings for the test suite: the base settings with fast, isolated test-only values.

The database follows DATABASE_URL like the base settings do, so the same suite runs on SQLite
and on PostgreSQL (``make test`` runs both when PostgreSQL answers).
"""

import os

from kueueweb.settings import *  # noqa: F403
from kueueweb.settings import CACHES, KUEUEWEB, REST_FRAMEWORK

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = False
# Parked workloads are requeued at once when quota comes back, so a test needs no waiting;
# tests of the batched requeue set a period themselves.
KUEUEWEB = {**KUEUEWEB, "DEFAULT_NODE_COUNT": 4, "REQUEUE_BATCH_PERIOD_SECONDS": 0}
# The test process is no Celery client unless a production-mode test says so (those start
# real worker processes and override this): requested tasks must not pile up in a broker
# that no worker of this run reads.
RECONCILER_MODE = os.environ.get("KUEUEWEB_TEST_RECONCILER_MODE", "embedded")

# Rate-limit counters in process memory, whatever REDIS_URL says: counters kept in a shared
# Redis would outlive a test run and lock out the next one. Tests of the limits set their own
# rates and limits; the suite itself is never throttled.
CACHES = {**CACHES, "ratelimit": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache",
                                  "LOCATION": "kueueweb-ratelimit"}}
KUEUEWEB_RATE_LIMIT_CACHE = "ratelimit"
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"user": "off", "anon": "off"}}
KUEUEWEB = {**KUEUEWEB, "LOGIN_FAILURE_LIMIT": 1000, "TOKEN_FAILURE_LIMIT": 1000}
