"""The benchmark's process model: its workers run as production does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

from tools.bench.run import production_environment

ROOT = Path(__file__).resolve().parents[3]


def test_workers_run_with_debug_off_and_throwaway_secrets_that_settings_accept() -> None:
    env = production_environment({})

    assert env["DEBUG"] == "false"
    Fernet(env["KUEUEWEB_ENCRYPTION_KEY"].encode())  # a valid key, or this raises
    # The settings refuse to start with DEBUG off and no secrets; these are enough.
    base = {k: v for k, v in os.environ.items()
            if k not in ("SECRET_KEY", "KUEUEWEB_ENCRYPTION_KEY", "DEBUG")}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import "
         "settings; print(settings.DEBUG)"],
        cwd=ROOT, env={**base, **env, "DJANGO_SETTINGS_MODULE": "kueueweb.settings"},
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_deployments_own_secrets_are_kept() -> None:
    env = production_environment({"SECRET_KEY_FILE": "/run/secrets/key",
                                  "KUEUEWEB_ENCRYPTION_KEY": "k"})

    assert env == {"DEBUG": "false"}
