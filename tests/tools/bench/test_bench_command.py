"""``manage.py bench scheduler`` end to end, on a small shape, in embedded mode: the real
command in its own process (scratch SQLite, the in-process reconciler loop)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SMALL_SHAPE = """
name: small
cohorts:
  - className: cohort
    count: 2
    queuesSets:
      - className: cq
        count: 2
        nominalQuota: 10
        borrowingLimit: 10
        reclaimWithinCohort: Any
        withinClusterQueue: LowerPriority
        workloadsSets:
          - {count: 20, creationIntervalMs: 50, workloads: [{className: small, runtimeMs: 100, priority: 50, request: 1}]}
          - {count: 4, creationIntervalMs: 200, workloads: [{className: large, runtimeMs: 300, priority: 200, request: 10}]}
kueue:
  wallMs: 20000
  averageTimeToAdmissionMs: {small: 5000, large: 1000}
lowerBoundWallMs: 1000
"""


def run_small_shape(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                    ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``bench scheduler`` on ``SMALL_SHAPE`` in embedded mode, in its own process."""
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_SHAPE)
    output = tmp_path / "summary.json"
    environ = {k: v for k, v in os.environ.items()
               if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run(
        [sys.executable, "manage.py", "bench", "scheduler", "--config", str(config),
         "--output", str(output), "--timeout", "180",
         "--model-cache", str(tmp_path / "model-cache"), *args],
        cwd=ROOT, env={**environ, **(env or {})}, capture_output=True, text=True, timeout=230,
    )
    return done, output


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_scheduler_admits_runs_and_finishes_every_workload(tmp_path: Path) -> None:
    done, output = run_small_shape(tmp_path,
                                   env={"KUEUEWEB_REQUEUE_BATCH_PERIOD_SECONDS": "0.5"})

    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(output.read_text())
    assert summary["mode"] == "embedded"
    assert summary["debug"] is False  # measured as production runs, whatever DEBUG says
    assert summary["requeueBatchPeriodSeconds"] == 0.5  # the setting the run used
    assert summary["waitForPodsReady"] is False  # Kueue's benchmark configuration
    assert summary["workloads"] == summary["finished"] == summary["expectedWorkloads"] == 96
    assert summary["quotaViolations"] == 0
    assert summary["admissions"] >= 96
    assert set(summary["classes"]) == {"small", "large"}
    assert summary["classes"]["small"]["count"] == 80
    assert summary["wallMs"] > 0
    assert 0 < summary["clusterQueueUsagePercent"]["cq"] <= 100
    assert summary["comparison"]["kueueAverageTimeToAdmissionOverOurs"]["large"] > 0
    # What the run measured can never beat what the work alone allows.
    # Counted from when they were due, they waited at least as long as from their creation.
    weighted = summary["comparison"]["workWeightedTimeToAdmissionMs"]
    assert weighted["ours"] == summary["workWeightedTimeToAdmissionMs"]
    assert weighted["oursFromScheduled"] == summary["workWeightedTimeToAdmissionFromScheduledMs"]
    assert weighted["oursFromScheduled"] >= weighted["ours"]
    assert weighted["oursFromScheduled"] >= weighted["lowerBound"]
    for figures in summary["classes"].values():
        assert (figures["averageTimeToAdmissionFromScheduledMs"]
                >= figures["averageTimeToAdmissionMs"])
    # The generator creates nothing early, and the shape's timeline lasts 0.8 s.
    lag = summary["creationLag"]
    assert 0 <= lag["p50Ms"] <= lag["p99Ms"] <= lag["maxMs"]
    assert 0 <= lag["atEndOfCreationMs"] <= lag["maxMs"]
    assert summary["wallFromScheduledMs"] >= summary["comparison"]["lowerBoundWallMs"] > 0
    # The shape's lowerBoundWallMs (1 s) is not the computed bound: noted, not used.
    assert summary["comparison"]["shapeLowerBoundWallMs"] == 1000
    assert summary["comparison"]["lowerBoundWallMs"] != 1000
    # The model was computed for this shape (and kept in the cache given).
    assert weighted["model"] > 0
    assert weighted["overModel"] > 0
    assert summary["modelReference"]["cached"] is False
    assert (tmp_path / "model-cache" / f"{summary['modelReference']['key']}.json").is_file()
    # The progress and the summary lines an operator reads.
    assert "summary: small in embedded mode" in done.stdout
    assert "requeue batch period 0.5s, waitForPodsReady off" in done.stdout
    assert "time to admission avg" in done.stdout
    assert "creation lag (actual - scheduled creation): p50" in done.stdout
    assert "lowerBoundWallMs: the shape says 1.00 s, computed" in done.stdout
    assert "reference ratios: wall / wall bound" in done.stdout
    assert "weighted TTA / zero-cost Kueue-rules model" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bench_scheduler_profiles_each_thread_of_an_embedded_run(tmp_path: Path) -> None:
    done, output = run_small_shape(tmp_path, "--profile")

    assert done.returncode == 0, done.stdout + done.stderr
    profile = json.loads(output.read_text())["profile"]
    assert set(profile) == {"reconcilers", "generator", "cluster"}
    # Each thread's profile holds its own work, and only the application's code is listed
    # by cumulative time.
    for thread, entry in (("reconcilers", "run_admission_cycle"),
                          ("generator", "create_workloads"),
                          ("cluster", "finish_workloads")):
        assert any(entry in line for line in profile[thread]["cumulative"]), thread
        assert any("tottime" in line for line in profile[thread]["ownTime"])
    assert not any("site-packages" in line for line in profile["reconcilers"]["cumulative"])
    assert not any("create_workloads" in line for line in profile["cluster"]["cumulative"])
    assert "profile of the reconcilers thread, by own time:" in done.stdout


def test_bench_scheduler_profile_is_refused_with_the_model(tmp_path: Path) -> None:
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_SHAPE)
    done = subprocess.run(
        [sys.executable, "manage.py", "bench", "scheduler", "--config", str(config),
         "--model", "--profile"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )

    assert done.returncode != 0
    assert "--profile profiles the embedded reconcilers" in done.stderr
