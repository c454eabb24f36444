"""Settings for the test suite: the base settings with fast, isolated test-only values.

The database follows DATABASE_URL like the base settings do, so the same suite runs on SQLite
and on PostgreSQL (``make test`` runs both when PostgreSQL answers).
"""

from kueueweb.settings import *  # noqa: F403
from kueueweb.settings import KUEUEWEB

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = False
KUEUEWEB = {**KUEUEWEB, "DEFAULT_NODE_COUNT": 4}
