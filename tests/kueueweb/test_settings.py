"""Settings come from the environment; production refuses to start on default secrets."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from kueueweb.env import DEVELOPMENT_SECRET_KEY

ROOT = Path(__file__).resolve().parents[2]


SECRET_KEY = secrets.token_urlsafe(50)
ENCRYPTION_KEY = Fernet.generate_key().decode()


def _load_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "KUEUEWEB_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL",
                                                                 "SECRET_KEY_FILE", "KUEUEWEB_ENCRYPTION_KEY_FILE"}}
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", "import kueueweb.settings as s; print(s.DATABASES['default']['ENGINE'], s.RECONCILER_MODE, s.CHANNEL_LAYERS['default']['BACKEND'])"],
        cwd=ROOT, env=clean, capture_output=True, text=True, check=False,
    )


def test_embedded_default_needs_nothing_but_python() -> None:
    result = _load_settings({})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "kueueweb.db.sqlite3", "embedded", "channels.layers.InMemoryChannelLayer",
    ]


def test_production_mode_from_database_and_redis_urls() -> None:
    result = _load_settings({"DATABASE_URL": "postgres://u@db:5432/kw", "REDIS_URL": "redis://r:6379/0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.postgresql", "celery", "channels_redis.core.RedisChannelLayer",
    ]


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"DEBUG": "false"}, "SECRET_KEY is not set"),
        ({"DEBUG": "false", "SECRET_KEY": " "}, "SECRET_KEY is not set"),
        ({"DEBUG": "false", "SECRET_KEY": SECRET_KEY}, "KUEUEWEB_ENCRYPTION_KEY is not set"),
    ],
    ids=["no-secret-key", "blank-secret-key", "no-encryption-key"],
)
def test_debug_off_refuses_default_secrets(env: dict[str, str], missing: str) -> None:
    result = _load_settings(env)
    assert result.returncode != 0
    assert missing in result.stderr


@pytest.mark.parametrize(
    ("env", "refusal"),
    [
        ({"SECRET_KEY": "change-me"}, "SECRET_KEY is a value published with kueueweb"),
        ({"SECRET_KEY": DEVELOPMENT_SECRET_KEY}, "SECRET_KEY is a value published with kueueweb"),
        ({"SECRET_KEY": "short-but-not-blank"}, "SECRET_KEY is too weak"),
        ({"SECRET_KEY": "x" * 60}, "SECRET_KEY is too weak"),
        ({"KUEUEWEB_ENCRYPTION_KEY": "change-me"},
         "KUEUEWEB_ENCRYPTION_KEY must be a Fernet key"),
        ({"KUEUEWEB_ENCRYPTION_KEY": "f" * 43 + "="}, "KUEUEWEB_ENCRYPTION_KEY is too weak"),
    ],
    ids=["placeholder", "development-key", "short", "one-character", "not-a-fernet-key",
         "typed-fernet-key"],
)
def test_debug_off_refuses_weak_or_public_secrets(env: dict[str, str], refusal: str) -> None:
    result = _load_settings({"DEBUG": "false", "SECRET_KEY": SECRET_KEY,
                             "KUEUEWEB_ENCRYPTION_KEY": ENCRYPTION_KEY, **env})
    assert result.returncode != 0
    assert refusal in result.stderr
    assert env[next(iter(env))] not in result.stderr.replace(refusal, "")  # never echoed


def test_a_malformed_encryption_key_is_refused_at_start_even_in_development() -> None:
    result = _load_settings({"KUEUEWEB_ENCRYPTION_KEY": "change-me"})
    assert result.returncode != 0
    assert "KUEUEWEB_ENCRYPTION_KEY must be a Fernet key" in result.stderr


def test_debug_off_starts_with_its_secrets(tmp_path: Path) -> None:
    key_file = tmp_path / "secret"
    key_file.write_text(SECRET_KEY + "\n")
    result = _load_settings({
        "DEBUG": "false",
        "SECRET_KEY_FILE": str(key_file),
        "KUEUEWEB_ENCRYPTION_KEY": ENCRYPTION_KEY,
    })
    assert result.returncode == 0, result.stderr


def test_invalid_boolean_is_rejected_with_its_name() -> None:
    result = _load_settings({"DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DEBUG must be one of" in result.stderr


@pytest.mark.django_db
def test_postgresql_connections_run_without_jit() -> None:
    # Short queries only: compiling the head query took longer than running it (settings).
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL setting")
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"


def test_beat_sends_to_a_queue_every_worker_reads_and_drops_what_waited_a_period() -> None:
    from django.conf import settings

    queues = set(settings.CELERY_TASK_QUEUES)
    assert {settings.CELERY_TASK_DEFAULT_QUEUE, settings.PERIODIC_TASK_QUEUE} <= queues
    assert settings.PERIODIC_TASK_QUEUE != settings.CELERY_TASK_DEFAULT_QUEUE
    # Read first by every worker: a free worker process takes beat's task before the
    # reconcilers' messages, rather than taking the queues in turn.
    assert list(settings.CELERY_TASK_QUEUES)[0] == settings.PERIODIC_TASK_QUEUE
    assert settings.CELERY_BROKER_TRANSPORT_OPTIONS["queue_order_strategy"] == "priority"
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert entry["options"] == {"queue": settings.PERIODIC_TASK_QUEUE,
                                    "expires": float(entry["schedule"])}, name
