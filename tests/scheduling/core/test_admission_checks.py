"""A workload's admission check states: the reset of an eviction, the retry time, the checks
a reservation requires, and the pod-set updates merged into what the pods get."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.core import admission_checks as checks

T = "2026-01-01T00:00:00Z"


def test_an_eviction_resets_the_checks_and_counts_a_retry() -> None:
    states = [{"name": "a", "state": "Retry", "message": "m", "lastTransitionTime": T,
               "requeueAfterSeconds": 60, "retryCount": 1},
              {"name": "b", "state": "Ready", "message": "ok", "podSetUpdates": [{"name": "x"}]},
              {"name": "c", "state": "Pending", "message": "waiting"}]
    assert checks.reset_on_eviction(states, "later") == [
        {"name": "a", "state": "Pending", "lastTransitionTime": "later",
         "message": "Reset to Pending after eviction. Previously: Retry",
         "requeueAfterSeconds": 60, "retryCount": 2},
        {"name": "b", "state": "Pending", "lastTransitionTime": "later",
         "message": "Reset to Pending after eviction. Previously: Ready"},
        {"name": "c", "state": "Pending", "message": "waiting"},
    ]


def test_the_retry_time_is_the_latest_a_retry_check_asks_for() -> None:
    states = [{"name": "a", "state": "Retry", "lastTransitionTime": T, "requeueAfterSeconds": 30},
              {"name": "b", "state": "Retry", "lastTransitionTime": T, "requeueAfterSeconds": 90},
              {"name": "c", "state": "Pending", "lastTransitionTime": T,
               "requeueAfterSeconds": 500}]
    assert checks.retry_time(states) == datetime(2026, 1, 1, 0, 1, 30, tzinfo=UTC)
    assert checks.retry_time(states[2:]) is None


def test_a_reservation_keeps_the_states_held_and_adds_the_missing_ones() -> None:
    held = [{"name": "b", "state": "Pending", "message": "", "retryCount": 2},
            {"name": "gone", "state": "Pending", "message": ""}]
    assert checks.sync_required(held, ["c", "b"], T) == [
        {"name": "b", "state": "Pending", "message": "", "retryCount": 2},
        {"name": "c", "state": "Pending", "lastTransitionTime": T, "message": ""}]


def test_pod_set_updates_merge_and_conflicting_keys_fail() -> None:
    labels = {"kueue.x-k8s.io/podset": "main"}
    annotations: dict[str, str] = {}
    selector = {"pool": "a"}
    tolerations = [{"key": "k", "operator": "Exists"}]
    states = [{"name": "prov", "podSetUpdates": [
        {"name": "main", "annotations": {"x": "1"}, "nodeSelector": {"pool": "a"},
         "tolerations": [{"key": "k", "operator": "Exists"}, {"key": "g"}]},
        {"name": "other", "labels": {"ignored": "yes"}}]}]
    checks.merge_pod_set_updates("main", labels, annotations, selector, tolerations, states)
    assert (labels, annotations, selector, tolerations) == (
        {"kueue.x-k8s.io/podset": "main"}, {"x": "1"}, {"pool": "a"},
        [{"key": "k", "operator": "Exists"}, {"key": "g"}])
    conflicting = [{"name": "other-check",
                    "podSetUpdates": [{"name": "main", "nodeSelector": {"pool": "b"}}]}]
    with pytest.raises(checks.PodSetUpdateConflict) as raised:
        checks.merge_pod_set_updates("main", labels, annotations, selector, tolerations,
                                     conflicting)
    assert str(raised.value) == (
        'in admission check "other-check": invalid admission check PodSetUpdate: conflict '
        "for nodeSelector: conflict for key=pool, value1=a, value2=b")
