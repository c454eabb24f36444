"""The time-based workload rules (back-off, PodsReady, maximum execution time, reclaim)."""

from __future__ import annotations

import pytest

from scheduling.core import lifecycle as lc


def test_backoff_sequence_with_kueue_defaults() -> None:
    waits = [lc.backoff_seconds(n, base=60, cap=3600) for n in range(1, 10)]
    assert waits == [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600]


def test_first_step_is_never_capped() -> None:
    assert lc.backoff_seconds(1, base=100, cap=10) == 100
    assert lc.backoff_seconds(2, base=100, cap=10) == 10


def test_backoff_count_starts_at_one() -> None:
    with pytest.raises(ValueError, match="count starts at 1"):
        lc.backoff_seconds(0, base=60, cap=3600)


def test_next_requeue_state_counts_and_applies_jitter_in_whole_seconds() -> None:
    state = lc.next_requeue_state(None, None, now=1000.0, base=60, cap=3600, jitter=0.0)
    assert state == lc.RequeueState(count=1, requeue_at=1060.0)
    # Jitter adds at most 0.01 % of the wait: 3600 s * 0.0001 = 0.36 s, floored away.
    state = lc.next_requeue_state(7, None, now=1000.0, base=60, cap=3600, jitter=0.999)
    assert state == lc.RequeueState(count=8, requeue_at=4600.0)
    # A large wait shows the jitter: 2^20 s * 0.0001 * 0.5 ≈ 52 s.
    state = lc.next_requeue_state(None, None, now=0.0, base=2**20, cap=2**30, jitter=0.5)
    assert state.requeue_at == float(int(2**20 * 1.00005))


def test_requeue_at_only_moves_forward() -> None:
    state = lc.next_requeue_state(1, 99999.0, now=1000.0, base=60, cap=3600, jitter=0.0)
    assert state == lc.RequeueState(count=2, requeue_at=99999.0)


@pytest.mark.parametrize(
    ("previous", "limit", "exceeds"),
    [(None, None, False), (None, 0, True), (0, 1, False), (1, 1, True), (2, 3, False)],
)
def test_backoff_limit(previous: int | None, limit: int | None, exceeds: bool) -> None:
    assert lc.exceeds_backoff_limit(previous, limit) is exceeds


@pytest.mark.parametrize(
    ("admitted", "ready", "prev_status", "prev_reason", "expected"),
    [
        (False, True, None, None, (False, "WaitForStart")),
        (True, False, None, None, (False, "WaitForStart")),
        (True, True, None, None, (True, "Started")),
        (True, True, False, "WaitForStart", (True, "Started")),
        (True, False, True, "Started", (False, "WaitForRecovery")),
        (True, False, False, "WaitForRecovery", (False, "WaitForRecovery")),
        (True, True, False, "WaitForRecovery", (True, "Recovered")),
        (True, False, True, "Recovered", (False, "WaitForRecovery")),
        (True, False, False, "WaitForStart", (False, "WaitForStart")),
    ],
)
def test_pods_ready_condition(admitted: bool, ready: bool, prev_status: bool | None,
                              prev_reason: str | None, expected: tuple[bool, str]) -> None:
    condition = lc.pods_ready_condition(admitted=admitted, all_ready=ready,
                                        previous_status=prev_status, previous_reason=prev_reason)
    assert (condition.status, condition.reason) == expected


def test_pods_ready_deadline_waits_for_start_then_recovery() -> None:
    config = lc.WaitForPodsReady(timeout_seconds=300, recovery_timeout_seconds=60)
    start = lc.pods_ready_deadline(config, admitted_since=100.0, pods_ready_status=False,
                                   pods_ready_reason="WaitForStart", pods_ready_since=100.0)
    assert start == lc.PodsReadyDeadline(400.0, "WaitForStart")
    assert lc.pods_ready_deadline(config, admitted_since=100.0, pods_ready_status=None,
                                  pods_ready_reason=None, pods_ready_since=None) == start
    recovery = lc.pods_ready_deadline(config, admitted_since=100.0, pods_ready_status=False,
                                      pods_ready_reason="WaitForRecovery", pods_ready_since=500.0)
    assert recovery == lc.PodsReadyDeadline(560.0, "WaitForRecovery")
    assert lc.pods_ready_deadline(config, admitted_since=100.0, pods_ready_status=True,
                                  pods_ready_reason="Started", pods_ready_since=150.0) is None


def test_recovery_timeout_disabled_and_feature_off() -> None:
    no_recovery = lc.WaitForPodsReady(recovery_timeout_seconds=None)
    assert lc.pods_ready_deadline(no_recovery, admitted_since=0.0, pods_ready_status=False,
                                  pods_ready_reason="WaitForRecovery",
                                  pods_ready_since=10.0) is None
    off = lc.WaitForPodsReady(enabled=False)
    assert lc.pods_ready_deadline(off, admitted_since=0.0, pods_ready_status=None,
                                  pods_ready_reason=None, pods_ready_since=None) is None


def test_remaining_execution_time_counts_past_admissions() -> None:
    assert lc.remaining_execution_seconds(100, 30, admitted_since=1000.0, now=1050.0) == 20.0
    assert lc.remaining_execution_seconds(100, 60, admitted_since=1000.0, now=1050.0) == -10.0
    assert lc.admitted_seconds(1000.0, 1042.7) == 42
