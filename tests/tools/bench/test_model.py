"""``bench scheduler --model``: a shape through the engine alone, in virtual time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tools.bench.model import run_model
from tools.bench.shape import read_shape


def _shape(*sets: dict[str, Any], nominal: int = 1) -> Any:
    queues = {"className": "cq", "count": 1, "nominalQuota": nominal, "borrowingLimit": 0,
              "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
              "workloadsSets": list(sets)}
    return read_shape({"name": "t", "cohorts": [{"className": "cohort", "count": 1,
                                                 "queuesSets": [queues]}],
                       "lowerBoundWallMs": 2000})


def _set(count: int, interval_ms: int, klass: str, priority: int, runtime_ms: int = 1000,
         request: int = 1) -> dict[str, Any]:
    return {"count": count, "creationIntervalMs": interval_ms,
            "workloads": [{"className": klass, "runtimeMs": runtime_ms, "priority": priority,
                           "request": request}]}


def test_a_parked_workload_waits_for_the_batched_requeue() -> None:
    # Created at 0.1 s and 0.2 s; one cpu: the second parks (NoFit) until the first
    # finishes at 1.1 s, and is requeued one batch period later.
    shape = _shape(_set(2, 100, "small", 50))

    batched = run_model(shape, requeue_batch_seconds=1.0)
    at_once = run_model(shape, requeue_batch_seconds=0.0)

    small = batched["classes"]["small"]
    assert (small["p50TimeToAdmissionMs"], small["p99TimeToAdmissionMs"]) == (0, 1900)
    assert batched["wallMs"] == 3000
    assert at_once["classes"]["small"]["p99TimeToAdmissionMs"] == 900
    assert at_once["wallMs"] == 2000
    assert batched["comparison"]["wallOverLowerBound"] == 1.5
    for summary in (batched, at_once):
        assert (summary["admitted"], summary["finished"], summary["quotaViolations"]) == (2, 2, 0)


def test_a_higher_priority_workload_preempts_and_the_victim_runs_again() -> None:
    # small at 0.1 s takes the cpu; large at 0.2 s preempts it (LowerPriority) and runs to
    # 1.2 s. The eviction released quota at 0.2 s, so the requeue of the tree comes at 1.2 s,
    # when the large one finishes: the small one is admitted again then and runs its whole
    # second run, to 2.2 s.
    shape = _shape(_set(1, 100, "small", 50), _set(1, 200, "large", 200))

    summary = run_model(shape)

    small, large = summary["classes"]["small"], summary["classes"]["large"]
    assert (large["averageTimeToAdmissionMs"], large["totalEvictions"]) == (0, 0)
    assert (small["averageTimeToAdmissionMs"], small["totalEvictions"]) == (1100, 1)
    assert small["averageTimeToFinishMs"] == 2100
    assert summary["wallMs"] == 2100
    assert summary["evictions"] == 1
    assert summary["admissions"] == 3  # the small one twice
    assert summary["quotaViolations"] == 0
    # The cpu was held without a gap: 0.1-0.2, 0.2-1.2 and 1.2-2.2 s.
    assert summary["clusterQueueUsagePercent"]["cq"] == 100.0


def test_a_cycle_cost_delays_what_the_cycle_decides() -> None:
    shape = _shape(_set(2, 100, "small", 50))

    summary = run_model(shape, requeue_batch_seconds=0.0, cycle_seconds=0.15)

    # The cycle that starts at 0.1 s admits the first workload at 0.25 s. The second one,
    # created at 0.2 s, is tried by the next cycle (0.25 s), which parks it at 0.4 s; the
    # first finishes at 1.25 s, and the cycle that starts then admits the second at 1.4 s.
    small = summary["classes"]["small"]
    assert (small["p50TimeToAdmissionMs"], small["p99TimeToAdmissionMs"]) == (150, 1200)
    assert summary["wallMs"] == 2300
    assert summary["quotaViolations"] == 0


def test_the_command_prints_and_writes_the_model_summary(tmp_path: Path) -> None:
    config = tmp_path / "shape.yaml"
    config.write_text(json.dumps({
        "name": "t",
        "cohorts": [{"className": "cohort", "count": 1, "queuesSets": [{
            "className": "cq", "count": 2, "nominalQuota": 2, "borrowingLimit": 2,
            "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
            "workloadsSets": [_set(5, 100, "small", 50, runtime_ms=300)]}]}],
    }))
    output = tmp_path / "summary.json"
    printed = _call("--config", str(config), "--model", "--requeue-batch-period", "0.5",
                    "--output", str(output))

    summary = json.loads(output.read_text())
    assert summary["mode"] == "model"
    assert summary["model"]["requeueBatchPeriodSeconds"] == 0.5
    assert (summary["workloads"], summary["finished"]) == (10, 10)
    assert "requeue batch period 0.5s" in printed
    assert "quota violations 0" in printed
    # The model creates every workload when it is due: no lag, one time to admission.
    assert summary["creationLag"] == {"p50Ms": 0, "p99Ms": 0, "maxMs": 0,
                                      "atEndOfCreationMs": 0}
    assert (summary["workWeightedTimeToAdmissionFromScheduledMs"]
            == summary["workWeightedTimeToAdmissionMs"])
    assert "reference ratios: wall / wall bound" in printed
    assert "weighted TTA / TTA floor" in printed
    assert "weighted TTA / zero-cost Kueue-rules model: this run is the model" in printed


@pytest.mark.parametrize(("args", "message"), [
    (["--cycle-ms", "5"], "need --model"),
    (["--model", "--cycle-ms", "-1"], "--cycle-ms must not be negative"),
    (["--model", "--requeue-batch-period", "-1"], "--requeue-batch-period must not be"),
])
def test_bad_model_options_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    config = _one_workload_shape(tmp_path)

    with pytest.raises(CommandError, match=message):
        _call("--config", str(config), *args)


def test_a_model_cache_that_is_a_file_is_refused(tmp_path: Path) -> None:
    config = _one_workload_shape(tmp_path)
    (tmp_path / "cache").write_text("")

    with pytest.raises(CommandError, match="--model-cache: .* is not a directory"):
        _call("--config", str(config), "--model-cache", str(tmp_path / "cache"))


def _one_workload_shape(tmp_path: Path) -> Path:
    config = tmp_path / "shape.yaml"
    config.write_text(json.dumps({"name": "t", "cohorts": [{"className": "c", "count": 1,
                                  "queuesSets": [{"className": "cq", "count": 1,
                                                  "nominalQuota": 1,
                                                  "workloadsSets": [_set(1, 100, "s", 1)]}]}]}))
    return config


def _call(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command("bench", "scheduler", *args, stdout=out)
    return out.getvalue()
