"""Settings for the test suite: the base settings with fast, isolated test-only values.

The database follows DATABASE_URL like the base settings do, so the same suite runs on SQLite
and on PostgreSQL (``make test`` runs both when PostgreSQL answers).
"""

import os

from kueueweb.settings import *  # noqa: F403
from kueueweb.settings import KUEUEWEB

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CELERY_TASK_ALWAYS_EAGER = False
KUEUEWEB = {**KUEUEWEB, "DEFAULT_NODE_COUNT": 4}
# The test process is no Celery client unless a production-mode test says so (those start
# real worker processes and override this): requested tasks must not pile up in a broker
# that no worker of this run reads.
RECONCILER_MODE = os.environ.get("KUEUEWEB_TEST_RECONCILER_MODE", "embedded")
