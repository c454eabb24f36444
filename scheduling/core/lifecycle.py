"""Time-based rules of a Workload's life, as pure functions of the state and ``now``.

Kueue mapping:
- requeue back-off: ``pkg/workload/workload.go`` ``UpdateRequeueState`` with
  ``k8s.io/apimachinery/pkg/util/wait`` ``Backoff``;
- the PodsReady condition: the job reconciler's ``generatePodsReadyCondition``
  (``pkg/controller/jobframework/reconciler.go``);
- the PodsReady timeout: the workload controller's ``admittedNotReadyWorkload``
  (``pkg/controller/core/workload_controller.go``);
- maximum execution time: the workload controller's ``reconcileMaxExecutionTime``;
- dynamic reclaim of a batch Job: ``ReclaimablePods`` of the Job integration
  (``pkg/controller/jobs/job/job_controller.go``).

Times are float seconds since the epoch; nothing here reads a clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

JITTER_FACTOR = 0.0001  # Kueue's requeuing back-off jitter

# PodsReady reasons.
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
STARTED = "Started"
RECOVERED = "Recovered"
LEGACY_PODS_READY = "PodsReady"

PODS_READY_MESSAGE = "All pods reached readiness and the workload is running"
PODS_NOT_READY_MESSAGE = "Not all pods are ready or succeeded"


@dataclass(frozen=True)
class WaitForPodsReady:
    """Kueue's ``waitForPodsReady`` configuration (v1beta2 defaults)."""

    enabled: bool = True
    timeout_seconds: float = 1800.0
    # None disables the recovery check (Kueue's ``recoveryTimeout: 0s``).
    recovery_timeout_seconds: float | None = 1800.0
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 3600.0
    # None: requeue without limit; 0: the first timeout deactivates.
    backoff_limit_count: int | None = None


# -----------------------------------------------------------------------------------------
# Requeue back-off
# -----------------------------------------------------------------------------------------


def backoff_seconds(count: int, *, base: float, cap: float) -> float:
    """The wait before the ``count``-th requeue (count ≥ 1), before jitter.

    The first step is the base, never capped; later steps double and are capped.
    """
    if count < 1:
        raise ValueError("count starts at 1")
    if count == 1:
        return base
    return min(base * 2.0 ** (count - 1), cap)


@dataclass(frozen=True)
class RequeueState:
    """``status.requeueState``: how many times the workload was requeued, and until when it
    waits (whole seconds, as the API stores it)."""

    count: int
    requeue_at: float


def next_requeue_state(
    previous_count: int | None,
    previous_requeue_at: float | None,
    *,
    now: float,
    base: float,
    cap: float,
    jitter: float,
) -> RequeueState:
    """The requeue state after one more eviction that waits for a back-off.

    ``jitter`` is a uniform draw in [0, 1) supplied by the caller, so results are exact in
    tests. An existing later ``requeueAt`` is kept (it only moves forward).
    """
    count = (previous_count or 0) + 1
    wait = backoff_seconds(count, base=base, cap=cap) * (1.0 + jitter * JITTER_FACTOR)
    requeue_at = float(math.floor(now + wait))
    if previous_requeue_at is not None and previous_requeue_at > requeue_at:
        requeue_at = previous_requeue_at
    return RequeueState(count=count, requeue_at=requeue_at)


def exceeds_backoff_limit(previous_count: int | None, limit: int | None) -> bool:
    """Another timeout would pass ``backoffLimitCount``: deactivate instead of requeueing."""
    return limit is not None and (previous_count or 0) + 1 > limit


# -----------------------------------------------------------------------------------------
# PodsReady
# -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodsReadyCondition:
    status: bool
    reason: str
    message: str


def pods_ready_condition(
    *,
    admitted: bool,
    all_ready: bool,
    previous_status: bool | None,
    previous_reason: str | None,
) -> PodsReadyCondition:
    """The PodsReady condition the job reconciler writes.

    ``all_ready``: the job's ready plus succeeded pods reach ``min(parallelism,
    completions)``. A workload that was ready and lost a pod waits for recovery.
    """
    if admitted and all_ready:
        recovered = previous_reason in (WAIT_FOR_RECOVERY, RECOVERED)
        return PodsReadyCondition(True, RECOVERED if recovered else STARTED, PODS_READY_MESSAGE)
    if not admitted or previous_status is None:
        return PodsReadyCondition(False, WAIT_FOR_START, PODS_NOT_READY_MESSAGE)
    if previous_status or previous_reason == WAIT_FOR_RECOVERY:
        return PodsReadyCondition(False, WAIT_FOR_RECOVERY, PODS_NOT_READY_MESSAGE)
    return PodsReadyCondition(False, WAIT_FOR_START, PODS_NOT_READY_MESSAGE)


@dataclass(frozen=True)
class PodsReadyDeadline:
    """When an admitted workload that is not ready times out, and why it waits."""

    at: float
    underlying_cause: str  # WaitForStart or WaitForRecovery


def pods_ready_deadline(
    config: WaitForPodsReady,
    *,
    admitted_since: float,
    pods_ready_status: bool | None,
    pods_ready_reason: str | None,
    pods_ready_since: float | None,
) -> PodsReadyDeadline | None:
    """The deadline of an admitted workload that is not PodsReady, or None if none runs."""
    if not config.enabled or pods_ready_status:
        return None
    if pods_ready_reason in (None, WAIT_FOR_START, LEGACY_PODS_READY):
        return PodsReadyDeadline(admitted_since + config.timeout_seconds, WAIT_FOR_START)
    if (pods_ready_reason == WAIT_FOR_RECOVERY and config.recovery_timeout_seconds
            and pods_ready_since is not None):
        return PodsReadyDeadline(pods_ready_since + config.recovery_timeout_seconds,
                                 WAIT_FOR_RECOVERY)
    return None


def pods_ready_timeout_message(namespace: str, name: str) -> str:
    return f"Exceeded the PodsReady timeout {namespace}/{name}"


# -----------------------------------------------------------------------------------------
# Maximum execution time
# -----------------------------------------------------------------------------------------


def remaining_execution_seconds(
    maximum_seconds: int, accumulated_seconds: int, *, admitted_since: float, now: float
) -> float:
    """Time left before the workload exceeds ``maximumExecutionTimeSeconds``; time spent
    admitted in earlier admissions counts too."""
    return float(maximum_seconds - accumulated_seconds) - (now - admitted_since)


def admitted_seconds(admitted_since: float, now: float) -> int:
    """Whole seconds of one admission, added to ``accumulatedPastExecutionTimeSeconds``
    when Admitted turns False."""
    return max(int(now - admitted_since), 0)


# -----------------------------------------------------------------------------------------
# Dynamic reclaim
# -----------------------------------------------------------------------------------------


def counted_pods(admitted: int, spec_count: int, reclaimable: int) -> int:
    """Pods of an admitted pod set that still hold quota (``totalRequestsFromAdmission``):
    the spec count less the reclaimable pods caps the admitted count."""
    return max(min(admitted, spec_count - min(reclaimable, spec_count)), 0)
