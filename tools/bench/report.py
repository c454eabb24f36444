"""The benchmark's summary, computed from what the application recorded.

Times come from the workloads (``created_at``, ``quota_reserved_at``, the Finished
condition). Admissions and releases come from the Events the reconcilers wrote
(QuotaReserved, QuotaReleased, Finished, Preempted), replayed in the order they were
written, which is the order the transactions that wrote them committed: that replay checks
that no cluster queue or cohort ever held more than its quota and that no workload held
quota twice at once.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduling.choices import WorkloadPhase
from scheduling.models import Event, Workload
from scheduling.workload import conditions as cond
from tools.bench.bounds import lower_bounds, work_weighted
from tools.bench.shape import CLASS_LABEL, RUNNING_TIME_LABEL, Shape

_RESERVE = "QuotaReserved"
_RELEASES = ("QuotaReleased", "Finished")


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``; 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class QueueLimits:
    cohort: str
    nominal_milli: int
    borrowing_limit_milli: int | None
    class_name: str


def queue_limits(shape: Shape) -> dict[str, QueueLimits]:
    from scheduling.core.quantities import quantity_to_int

    return {
        q.name: QueueLimits(
            cohort=q.cohort,
            nominal_milli=quantity_to_int("cpu", q.spec.nominal_quota),
            borrowing_limit_milli=(quantity_to_int("cpu", q.spec.borrowing_limit)
                                   if q.spec.borrowing_limit is not None else None),
            class_name=q.spec.class_name,
        )
        for q in shape.queues()
    }


@dataclass
class Replay:
    """What replaying the admission events found."""

    admissions: int
    violations: list[str]
    # cpu-milliseconds × ms used per cluster queue while the workloads held quota.
    used_milli_ms: dict[str, float]


def replay(
    events: Iterable[tuple[int, str, datetime]],
    usage: Mapping[int, tuple[str, int]],
    limits: Mapping[str, QueueLimits],
) -> Replay:
    """Replay (workload id, reason, time) in commit order: every reservation must fit the
    queue's nominal quota plus its borrowing limit and the cohort's total nominal quota, and
    no workload may reserve twice without a release in between."""
    cohort_nominal: dict[str, int] = defaultdict(int)
    for limit in limits.values():
        cohort_nominal[limit.cohort] += limit.nominal_milli
    queue_used: dict[str, int] = defaultdict(int)
    cohort_used: dict[str, int] = defaultdict(int)
    holding: dict[int, datetime] = {}
    used: dict[str, float] = defaultdict(float)
    violations: list[str] = []
    admissions = 0
    for workload_id, reason, at in events:
        queue, milli = usage[workload_id]
        limit = limits[queue]
        if reason == _RESERVE:
            admissions += 1
            if workload_id in holding:
                violations.append(f"workload {workload_id} reserved quota twice")
                continue
            holding[workload_id] = at
            queue_used[queue] += milli
            cohort_used[limit.cohort] += milli
            ceiling = (limit.nominal_milli + limit.borrowing_limit_milli
                       if limit.borrowing_limit_milli is not None else math.inf)
            if queue_used[queue] > ceiling:
                violations.append(f"{queue} used {queue_used[queue]}m over {ceiling}m")
            if cohort_used[limit.cohort] > cohort_nominal[limit.cohort]:
                violations.append(f"cohort {limit.cohort} used {cohort_used[limit.cohort]}m "
                                  f"over {cohort_nominal[limit.cohort]}m")
        elif reason in _RELEASES and workload_id in holding:
            since = holding.pop(workload_id)
            queue_used[queue] -= milli
            cohort_used[limit.cohort] -= milli
            used[queue] += milli * max((at - since).total_seconds() * 1000, 0.0)
    return Replay(admissions=admissions, violations=violations, used_milli_ms=dict(used))


def summarize(
    shape: Shape, cluster_id: int, *, mode: str, process: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary of a finished run, with the measures of Kueue's scheduler benchmark
    (``test/performance/scheduler``, and ``docs/performance.md``), as JSON-ready data."""
    limits = queue_limits(shape)
    rows = list(Workload.objects.filter(cluster_id=cluster_id).values_list(
        "id", "namespace", "labels", "pod_sets", "phase", "created_at", "quota_reserved_at",
        "conditions"))
    usage: dict[int, tuple[str, int]] = {}
    class_of: dict[int, str] = {}
    per_class: dict[str, dict[str, list[float]]] = defaultdict(
        lambda: {"admission": [], "finish": []})
    waits: list[tuple[float, float]] = []  # (work, time to admission) per admitted workload
    first_created: datetime | None = None
    last_finished: datetime | None = None
    finished = 0
    for workload_id, namespace, labels, pod_sets, phase, created, reserved, conditions in rows:
        usage[workload_id] = (namespace, _cpu_milli(pod_sets))
        klass = class_of[workload_id] = (labels or {}).get(CLASS_LABEL, "")
        first_created = created if first_created is None else min(first_created, created)
        if reserved is not None:
            wait_ms = max((reserved - created).total_seconds() * 1000, 0.0)
            per_class[klass]["admission"].append(wait_ms)
            runtime_ms = int((labels or {}).get(RUNNING_TIME_LABEL, 0) or 0)
            waits.append((usage[workload_id][1] * runtime_ms, wait_ms))
        done_at = cond.transition_time(conditions, "Finished")
        if phase == WorkloadPhase.FINISHED and done_at is not None:
            finished += 1
            per_class[klass]["finish"].append((done_at - created).total_seconds() * 1000)
            last_finished = done_at if last_finished is None else max(last_finished, done_at)
    events = list(Event.objects.filter(
        cluster_id=cluster_id, object_kind="Workload",
        reason__in=(_RESERVE, *_RELEASES, "Preempted"),
    ).order_by("id").values_list("workload_id", "reason", "created_at"))
    evictions: dict[str, int] = defaultdict(int)
    for workload_id, reason, _ in events:
        if reason == "Preempted":
            evictions[class_of.get(workload_id, "")] += 1
    checked = replay(((w, r, t) for w, r, t in events if r != "Preempted"), usage, limits)
    wall_ms = ((last_finished - first_created).total_seconds() * 1000
               if first_created and last_finished else 0.0)

    counts = Counter(class_of.values())
    classes = {
        klass: class_figures(counts[klass], times["admission"], times["finish"],
                             evictions.get(klass, 0))
        for klass, times in sorted(per_class.items())
    }
    usage_percent = usage_percent_per_class(limits, checked.used_milli_ms, wall_ms)

    summary: dict[str, Any] = {
        "config": shape.name,
        "mode": mode,
        "wallMs": round(wall_ms),
        "workloads": len(rows),
        "expectedWorkloads": shape.total_workloads,
        "admitted": sum(1 for r in rows if r[6] is not None),
        "admissions": checked.admissions,
        "finished": finished,
        "evictions": sum(evictions.values()),
        "quotaViolations": len(checked.violations),
        "violations": checked.violations[:20],
        "classes": classes,
        "workWeightedTimeToAdmissionMs": work_weighted_mean(waits),
        "clusterQueueUsagePercent": usage_percent,
        "process": dict(process),
    }
    if extra:
        summary.update(extra)
    summary["comparison"] = comparison(shape, summary)
    return summary


def class_figures(count: int, admission_ms: Sequence[float], finish_ms: Sequence[float],
                  evictions: int) -> dict[str, int]:
    """One workload class's line of the summary."""
    return {
        "count": count,
        "averageTimeToAdmissionMs": round(sum(admission_ms) / max(len(admission_ms), 1)),
        "p50TimeToAdmissionMs": round(percentile(admission_ms, 50)),
        "p90TimeToAdmissionMs": round(percentile(admission_ms, 90)),
        "p99TimeToAdmissionMs": round(percentile(admission_ms, 99)),
        "averageTimeToFinishMs": round(sum(finish_ms) / max(len(finish_ms), 1)),
        "totalEvictions": evictions,
    }


def work_weighted_mean(waits: Iterable[tuple[float, float]]) -> int:
    """Σ work × time to admission / Σ work over (work, time to admission) pairs, in ms: the
    measure ``bounds`` gives a floor for (work = cpu × run time)."""
    total = weighted = 0.0
    for work, wait_ms in waits:
        total += work
        weighted += work * wait_ms
    return round(weighted / total) if total else 0


def usage_percent_per_class(limits: Mapping[str, QueueLimits],
                            used_milli_ms: Mapping[str, float], wall_ms: float) -> dict[str, float]:
    """Per cluster-queue class: cpu-milliseconds used / (nominal quota × wall)."""
    nominal_by_class: dict[str, int] = defaultdict(int)
    used_by_class: dict[str, float] = defaultdict(float)
    for queue, limit in limits.items():
        nominal_by_class[limit.class_name] += limit.nominal_milli
        used_by_class[limit.class_name] += used_milli_ms.get(queue, 0.0)
    return {klass: round(100 * used_by_class[klass] / (nominal * wall_ms), 1) if wall_ms else 0.0
            for klass, nominal in nominal_by_class.items()}


def measure_lines(summary: Mapping[str, Any]) -> list[str]:
    """The lines of a summary an operator compares between runs: wall, counts, classes,
    usage, with the ratios to Kueue's figures and to the lower bound."""
    comparison = summary.get("comparison", {})
    lines = [
        f"  wall {summary['wallMs'] / 1000:.1f}s"
        + (f" = {comparison['wallOverLowerBound']}x the lower bound "
           f"({comparison['lowerBoundWallMs'] / 1000:.0f}s)" if "wallOverLowerBound" in comparison
           else "")
        + (f"; Kueue {comparison['kueueWallMs'] / 1000:.0f}s "
           f"({comparison['kueueWallOverOurs']}x ours)" if comparison.get("kueueWallOverOurs")
           else ""),
        f"  workloads {summary['workloads']}/{summary['expectedWorkloads']}, admitted "
        f"{summary['admitted']}, finished {summary['finished']}, evictions "
        f"{summary['evictions']}, quota violations {summary['quotaViolations']}",
    ]
    ratios = comparison.get("kueueAverageTimeToAdmissionOverOurs", {})
    for klass, c in summary["classes"].items():
        ratio = ratios.get(klass)
        lines.append(
            f"  {klass:>8}: {c['count']} workloads, time to admission avg "
            f"{c['averageTimeToAdmissionMs']}ms p50 {c['p50TimeToAdmissionMs']}ms p90 "
            f"{c['p90TimeToAdmissionMs']}ms p99 {c['p99TimeToAdmissionMs']}ms"
            + (f" (Kueue's avg is {ratio}x)" if ratio else "")
            + f", to finish avg {c['averageTimeToFinishMs']}ms, evictions {c['totalEvictions']}")
    weighted = comparison.get("workWeightedTimeToAdmissionMs")
    if weighted:
        lines.append(
            f"  time to admission weighted by work (cpu x run time): ours "
            f"{weighted['ours'] / 1000:.1f}s"
            + (f", Kueue's {weighted['kueue'] / 1000:.1f}s" if weighted.get("kueue") else "")
            + f"; no schedule can go under {weighted['lowerBound'] / 1000:.1f}s")
    usage = ", ".join(f"{k} {v}%" for k, v in summary["clusterQueueUsagePercent"].items())
    lines.append(f"  cluster queue usage: {usage}")
    return lines


def _cpu_milli(pod_sets: Sequence[Mapping[str, Any]]) -> int:
    from scheduling.cache.snapshots import per_pod_requests

    return sum(per_pod_requests(ps).get("cpu", 0) * int(ps.get("count", 1)) for ps in pod_sets)


def comparison(shape: Shape, summary: Mapping[str, Any]) -> dict[str, Any]:
    """Ratios to Kueue's figures and to the lower bound of the shape."""
    wall = summary["wallMs"]
    bounds = lower_bounds(shape)
    result: dict[str, Any] = {"wallFromWorkMs": round(bounds.wall_ms)}
    if shape.lower_bound_wall_ms:
        result["lowerBoundWallMs"] = shape.lower_bound_wall_ms
        result["wallOverLowerBound"] = round(wall / shape.lower_bound_wall_ms, 3)
    if "workWeightedTimeToAdmissionMs" in summary:
        weighted: dict[str, Any] = {
            "ours": summary["workWeightedTimeToAdmissionMs"],
            "lowerBound": round(bounds.min_work_weighted_time_to_admission_ms),
        }
        if shape.kueue is not None and bounds.classes_uniform:
            kueue = work_weighted(shape.kueue.average_time_to_admission_ms,
                                  bounds.work_by_class)
            if kueue is not None:
                weighted["kueue"] = round(kueue)
        result["workWeightedTimeToAdmissionMs"] = weighted
    if shape.kueue is not None:
        result["kueueWallMs"] = shape.kueue.wall_ms
        result["kueueWallOverOurs"] = round(shape.kueue.wall_ms / wall, 2) if wall else None
        result["kueueAverageTimeToAdmissionOverOurs"] = {
            klass: (round(kueue_ms / max(summary["classes"][klass]["averageTimeToAdmissionMs"],
                                         1), 1)
                    if klass in summary["classes"] else None)
            for klass, kueue_ms in shape.kueue.average_time_to_admission_ms.items()
        }
    return result
