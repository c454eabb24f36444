"""The benchmark's invariant check: replaying admissions and releases in commit order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.tools.bench.shapes import one_queue_shape
from tools.bench.report import (
    QueueLimits,
    Timing,
    admission_times,
    class_figures,
    comparison,
    creation_lag,
    measure_lines,
    percentile,
    replay,
)
from tools.bench.shape import Shape

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = {"a": QueueLimits("c", 2000, 1000, "cq"), "b": QueueLimits("c", 2000, 1000, "cq")}


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_reservations_within_quota_pass_and_usage_is_measured() -> None:
    usage = {1: ("a", 2000), 2: ("a", 1000), 3: ("b", 1000)}
    events = [(1, "QuotaReserved", _at(0)), (2, "QuotaReserved", _at(0)),
              (3, "QuotaReserved", _at(0)), (1, "Finished", _at(1)),
              (2, "QuotaReleased", _at(2)), (3, "Finished", _at(2))]

    result = replay(events, usage, LIMITS)

    assert result.violations == []
    assert result.admissions == 3
    assert result.used_milli_ms == {"a": 2000 * 1000 + 1000 * 2000, "b": 1000 * 2000}


def test_over_borrowing_limit_over_cohort_and_double_reservation_are_violations() -> None:
    usage = {1: ("a", 3000), 2: ("a", 500), 3: ("b", 1000)}
    events = [(1, "QuotaReserved", _at(0)), (2, "QuotaReserved", _at(0)),
              (3, "QuotaReserved", _at(0)), (3, "QuotaReserved", _at(1))]

    violations = replay(events, usage, LIMITS).violations

    assert "a used 3500m over 3000m" in violations
    assert "cohort c used 4500m over 4000m" in violations
    assert "workload 3 reserved quota twice" in violations


def test_percentile_is_nearest_rank() -> None:
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile([5, 1, 3, 2, 4], 90) == 5
    assert percentile([], 99) == 0.0


# --- the shape's timeline: creation lag and both times to admission -------------------------


def _timing(scheduled: float, created: float, reserved: float | None, *, klass: str = "small",
            work: float = 1.0) -> Timing:
    return Timing(class_name=klass, work=work, scheduled_ms=scheduled, created_ms=created,
                  reserved_ms=reserved)


def test_creation_lag_gives_percentiles_max_and_the_lag_of_the_last_creation() -> None:
    # 101 lags, 0, 10, 20, ..., 990 ms and 300 ms: the 51st smallest is 490 ms, the 100th
    # 980 ms. The workload created last (at 5 s) was 300 ms late, the worst one 990 ms.
    timings = [_timing(i * 10, i * 10 + i * 10, None) for i in range(100)]
    timings[-1] = _timing(990, 1980, None)
    timings.append(_timing(4700, 5000, None))

    lag = creation_lag(timings)

    assert lag == {"p50Ms": 490, "p99Ms": 980, "maxMs": 990, "atEndOfCreationMs": 300}
    assert creation_lag([]) == {"p50Ms": 0, "p99Ms": 0, "maxMs": 0, "atEndOfCreationMs": 0}


def test_time_to_admission_counts_from_the_scheduled_and_from_the_actual_creation() -> None:
    timings = [
        # Due at 0, created 400 ms late, admitted 100 ms after its creation.
        _timing(0, 400, 500, klass="small", work=1),
        # On time, admitted 1 s later, with 3 times the work.
        _timing(1000, 1000, 2000, klass="large", work=3),
        # Never admitted: in no figure.
        _timing(2000, 2000, None, klass="large", work=100),
    ]

    per_class, weighted, weighted_scheduled = admission_times(timings)

    assert per_class == {"small": ([100.0], [500.0]), "large": ([1000.0], [1000.0])}
    assert weighted == round((1 * 100 + 3 * 1000) / 4)
    assert weighted_scheduled == round((1 * 500 + 3 * 1000) / 4)


def test_an_admission_a_hair_before_the_scheduled_time_waits_zero() -> None:
    per_class, _, weighted_scheduled = admission_times([_timing(100, 99.99, 99.995)])

    assert per_class["small"][1] == [0.0]
    assert weighted_scheduled == 0


# --- the reference ratios and the printed summary ----------------------------------------------


def _tiny_shape(lower_bound_wall_ms: int | None) -> Shape:
    # One cpu; two 1 cpu x 1 s workloads due at 0.1 s and 0.2 s: the bound is 2 s of wall
    # (0.1 s to 2.1 s), and one of the two must wait 0.9 s, so the floor is 0.45 s.
    return one_queue_shape(2, name="tiny", lower_bound_wall_ms=lower_bound_wall_ms)


def _summary(**overrides: Any) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "config": "tiny", "mode": "embedded", "wallMs": 2900, "wallFromScheduledMs": 3000,
        "workloads": 2, "expectedWorkloads": 2, "admitted": 2, "finished": 2,
        "evictions": 0, "quotaViolations": 0,
        "creationLag": {"p50Ms": 4, "p99Ms": 250, "maxMs": 250, "atEndOfCreationMs": 250},
        "classes": {"small": class_figures(2, [0, 800], [1000, 1800], 0, [4, 1050])},
        "workWeightedTimeToAdmissionMs": 400,
        "workWeightedTimeToAdmissionFromScheduledMs": 527,
        "clusterQueueUsagePercent": {"cq": 66.7},
    }
    summary.update(overrides)
    return summary


def test_ratios_use_the_computed_bounds_and_the_times_from_the_scheduled_creation() -> None:
    shape = _tiny_shape(lower_bound_wall_ms=1500)
    summary = _summary()

    result = comparison(shape, summary, model={"workWeightedTimeToAdmissionMs": 500})

    assert result["lowerBoundWallMs"] == 2000
    assert result["shapeLowerBoundWallMs"] == 1500  # kept only to show it is wrong
    assert result["wallOverLowerBound"] == 1.5  # 3000 from the first scheduled creation
    weighted = result["workWeightedTimeToAdmissionMs"]
    assert (weighted["ours"], weighted["oursFromScheduled"]) == (400, 527)
    assert weighted["lowerBound"] == 450
    assert weighted["overLowerBound"] == round(527 / 450, 3)
    assert (weighted["model"], weighted["overModel"]) == (500, 1.054)


def test_a_shape_whose_bound_is_right_is_not_flagged() -> None:
    result = comparison(_tiny_shape(lower_bound_wall_ms=2000), _summary())

    assert "shapeLowerBoundWallMs" not in result
    assert "model" not in result["workWeightedTimeToAdmissionMs"]


def test_the_summary_prints_the_lag_both_times_and_the_three_ratios() -> None:
    shape = _tiny_shape(lower_bound_wall_ms=1500)
    summary = _summary()
    summary["comparison"] = comparison(shape, summary, model={
        "workWeightedTimeToAdmissionMs": 500, "model": {"requeueBatchPeriodSeconds": 1.0}})

    text = "\n".join(measure_lines(summary))

    assert "wall 2.90s from the first creation, 3.00s from the first scheduled one" in text
    assert ("lowerBoundWallMs: the shape says 1.50 s, computed 2.00 s; the computed one is "
            "used") in text
    assert ("creation lag (actual - scheduled creation): p50 4ms p99 250ms max 250ms, at the "
            "end of creation 250ms") in text
    assert "from scheduled creation avg 527ms p99 1050ms" in text
    assert ("time to admission weighted by work (cpu x run time): from scheduled creation "
            "0.53s, from actual creation 0.40s") in text
    assert ("reference ratios: wall / wall bound 1.500x (bound 2.00s); weighted TTA / TTA "
            "floor 1.171x (floor 0.45s); weighted TTA / zero-cost Kueue-rules model 1.054x "
            "(model 0.50s, requeue batch period 1s)") in text


def test_without_the_model_the_summary_says_why() -> None:
    shape = _tiny_shape(lower_bound_wall_ms=None)
    summary = _summary()
    summary["comparison"] = comparison(shape, summary, model_missing="this run is the model")

    text = "\n".join(measure_lines(summary))

    assert "lowerBoundWallMs" not in text
    assert "weighted TTA / zero-cost Kueue-rules model: this run is the model" in text
