"""The benchmark's process model: its workers run as production does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cryptography.fernet import Fernet

from tools.bench.run import Workers, production_environment

ROOT = Path(__file__).resolve().parents[3]


def test_workers_run_with_debug_off_and_throwaway_secrets_that_settings_accept() -> None:
    env = production_environment({})

    assert env["DEBUG"] == "false"
    assert env["KUEUEWEB_WAIT_FOR_PODS_READY"] == "false"  # Kueue's benchmark configuration
    Fernet(env["KUEUEWEB_ENCRYPTION_KEY"].encode())  # a valid key, or this raises
    # The settings refuse to start with DEBUG off and no secrets; these are enough.
    base = {k: v for k, v in os.environ.items()
            if k not in ("SECRET_KEY", "KUEUEWEB_ENCRYPTION_KEY", "DEBUG")}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import "
         "settings; print(settings.DEBUG, settings.KUEUEWEB['WAIT_FOR_PODS_READY'])"],
        cwd=ROOT, env={**base, **env, "DJANGO_SETTINGS_MODULE": "kueueweb.settings"},
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False False"


def test_the_deployments_own_secrets_are_kept() -> None:
    env = production_environment({"SECRET_KEY_FILE": "/run/secrets/key",
                                  "KUEUEWEB_ENCRYPTION_KEY": "k"})

    assert env == {"DEBUG": "false", "KUEUEWEB_WAIT_FOR_PODS_READY": "false"}


def test_workers_task_seconds_sum_each_tasks_runs_from_celerys_log_lines(tmp_path: Path) -> None:
    pool = Workers(log_dir=tmp_path)
    (tmp_path / "worker1.log").write_text(
        "[2026-11-27 21:17:48,444: INFO/ForkPoolWorker-1] Task scheduling.tasks."
        "admission_cycle_task[c65c5e77-7f10-4705-94a6-1937929d5997] succeeded in "
        "0.043538409999996475s: None\n"
        "[2026-11-27 21:17:48,450: INFO/MainProcess] Task scheduling.tasks.lifecycle_task"
        "[0b3d] received\n"
        "[2026-11-27 21:17:48,498: INFO/ForkPoolWorker-1] Task scheduling.tasks."
        "lifecycle_task[0b3d] succeeded in 0.5s: None\n")
    (tmp_path / "worker2.log").write_text(
        "[2026-11-27 21:17:48,777: INFO/ForkPoolWorker-1] Task scheduling.tasks."
        "admission_cycle_task[c80c] succeeded in 0.18270693600004506s: None\n")
    (tmp_path / "beat.log").write_text(  # beat runs no task
        "Task scheduling.tasks.admission_cycle_task[x] succeeded in 9.0s: None\n")

    tasks = pool.task_seconds()

    assert list(tasks) == ["lifecycle_task", "admission_cycle_task"]  # most time first
    assert tasks["admission_cycle_task"]["runs"] == 2
    assert abs(tasks["admission_cycle_task"]["seconds"] - 0.2262) < 1e-3
    assert tasks["lifecycle_task"] == {"runs": 1, "seconds": 0.5}
