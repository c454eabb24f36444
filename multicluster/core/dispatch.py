"""MultiKueue's dispatch rules, pure (Kueue ``pkg/controller/admissionchecks/multikueue``,
``pkg/controller/workloaddispatcher``).

Which workers a hub workload is nominated to, by dispatcher; which remote copy wins; when a
lost winner is given up. Times are float seconds; nothing here reads a clock or a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "ALL_AT_ONCE",
    "EXTERNAL",
    "INCREMENTAL",
    "INCREMENTAL_ROUND_SECONDS",
    "INCREMENTAL_STEP",
    "MAX_NOMINATED",
    "Nomination",
    "RemoteCopy",
    "admitting_remote",
    "check_active_condition",
    "first_finished",
    "nominate",
    "validate_nominated",
    "winner_lost",
]

ALL_AT_ONCE = "AllAtOnce"
INCREMENTAL = "Incremental"
EXTERNAL = "External"
# Kueue's incremental dispatcher: rounds of 5 minutes, 3 more clusters per round.
INCREMENTAL_ROUND_SECONDS = 300.0
INCREMENTAL_STEP = 3
# status.nominatedClusterNames holds at most 20 names (Kueue's CRD).
MAX_NOMINATED = 20


@dataclass(frozen=True, slots=True)
class Nomination:
    """The clusters a workload is nominated to now, and when to look again.

    ``rounds`` counts the incremental rounds started so far (1 for the first); ``next_at``
    is when the next round starts (None when no round follows, or the dispatcher has none).
    """

    clusters: tuple[str, ...]
    rounds: int
    next_at: float | None


def nominate(
    dispatcher: str,
    *,
    configured: Sequence[str],
    connected: frozenset[str],
    nominated: Sequence[str],
    rounds: int,
    round_started_at: float | None,
    now: float,
    step: int = INCREMENTAL_STEP,
    round_seconds: float = INCREMENTAL_ROUND_SECONDS,
) -> Nomination:
    """The nomination of a pending workload (check Pending, quota reserved on the hub).

    * **AllAtOnce**: every connected cluster of the config, sorted by name.
    * **Incremental**: the first ``step`` clusters in config order (connected or not) in the
      first round, then ``step`` more at the start of every later round of
      ``round_seconds``, appended to the earlier ones; fewer remaining, all of them.
    * **External**: what an outside controller wrote (``nominated``), kept as is.
    """
    if dispatcher == ALL_AT_ONCE:
        return Nomination(tuple(sorted(c for c in configured if c in connected)), rounds, None)
    if dispatcher == INCREMENTAL:
        step = max(step, 1)
        current = [c for c in nominated if c in configured]
        if rounds == 0 or round_started_at is None:
            rounds, started = 1, now
            current = list(configured[:step])
        else:
            started = round_started_at
            while now >= started + round_seconds and len(current) < len(configured):
                remaining = [c for c in configured if c not in current]
                current.extend(remaining[:step])
                rounds += 1
                started += round_seconds
        more = len(current) < len(configured)
        return Nomination(tuple(current), rounds, started + round_seconds if more else None)
    return Nomination(tuple(nominated), rounds, None)


def validate_nominated(names: object, configured: Sequence[str]) -> list[str]:
    """Problems with an external controller's ``nominatedClusterNames`` (empty when fine)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return ["must be a list of cluster names"]
    problems = []
    if len(names) > MAX_NOMINATED:
        problems.append(f"must have at most {MAX_NOMINATED} items")
    if len(set(names)) != len(names):
        problems.append("must not repeat a cluster")
    unknown = sorted(set(names) - set(configured))
    if unknown:
        problems.append(f"not in the workload's MultiKueueConfig: {', '.join(unknown)}")
    return problems


@dataclass(frozen=True, slots=True)
class RemoteCopy:
    """A remote workload as the hub sees it: where it is and what its conditions say."""

    cluster: str
    admitted_at: float | None = None
    finished: tuple[str, str] | None = None  # (reason, message)
    finished_at: float | None = None
    evicted: bool = False


def admitting_remote(copies: Sequence[RemoteCopy]) -> RemoteCopy | None:
    """The winner: the copy admitted first (earliest Admitted transition, then by name)."""
    admitted = [c for c in copies if c.admitted_at is not None]
    if not admitted:
        return None
    return min(admitted, key=lambda c: (c.admitted_at, c.cluster))


def first_finished(copies: Sequence[RemoteCopy]) -> RemoteCopy | None:
    """The copy that finished first, if any (Kueue: the earliest Finished transition)."""
    finished = [c for c in copies if c.finished is not None]
    if not finished:
        return None
    return min(finished, key=lambda c: (c.finished_at or 0.0, c.cluster))


def winner_lost(lost_since: float | None, *, now: float, worker_lost_timeout: float) -> bool:
    """Whether an unreachable winner is given up (``lostSince + workerLostTimeout``)."""
    return lost_since is not None and now >= lost_since + worker_lost_timeout


def check_active_condition(
    configured: Sequence[str] | None, existing: frozenset[str], active: frozenset[str],
    *, config_name: str,
) -> tuple[bool, str, str]:
    """(status, reason, message) of a MultiKueue AdmissionCheck's ``Active`` condition
    (Kueue ``admissioncheck.go``): all clusters of its config exist and are Active, some
    are, none are, or the config cannot be loaded (``configured`` is None)."""
    if configured is None:
        return (False, "BadConfig", "Cannot load the AdmissionChecks parameters: "
                f'MultiKueueConfig.kueue.x-k8s.io "{config_name}" not found')
    missing = [c for c in configured if c not in existing]
    inactive = [c for c in configured if c in existing and c not in active]
    if not missing and not inactive:
        return True, "Active", "The admission check is active"
    parts = []
    if missing:
        parts.append(f"Missing clusters: [{' '.join(missing)}]")
    if inactive:
        parts.append(f"Inactive clusters: [{' '.join(inactive)}]")
    if len(missing) + len(inactive) < len(configured):
        return True, "SomeActiveClusters", ", ".join(parts)
    return False, "NoUsableClusters", ", ".join(parts)
