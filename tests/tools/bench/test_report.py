"""The benchmark's invariant check: replaying admissions and releases in commit order."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tools.bench.report import QueueLimits, percentile, replay

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
