"""The benchmark's summary, computed from what the application recorded.

Times come from the workloads (``created_at``, ``quota_reserved_at``, the Finished
condition) and from the shape's timeline: each workload's *scheduled* creation, the moment
Kueue's generator would create it. The generator may fall behind; the difference between
actual and scheduled creation is the creation lag, and time to admission is given from
both moments, since a lag hides waiting from the figure counted from actual creation.

Admissions and releases come from the Events the reconcilers wrote
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
from datetime import datetime, timedelta
from typing import Any

from scheduling.choices import WorkloadPhase
from scheduling.models import Event, Workload
from scheduling.workload import conditions as cond
from tools.bench.bounds import Bounds, lower_bounds, work_weighted
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
class Timing:
    """One workload's moments, in ms after the start of the shape's timeline."""

    class_name: str
    work: float  # cpu-milli × run time: the weight of its wait in the work-weighted figure
    scheduled_ms: float
    created_ms: float
    reserved_ms: float | None  # None while never admitted

    @property
    def lag_ms(self) -> float:
        return self.created_ms - self.scheduled_ms


def creation_lag(timings: Sequence[Timing]) -> dict[str, int]:
    """How late the workloads were created: p50, p99, max, and the lag of the workload
    created last (what the generator owed when the timeline ended)."""
    lags = [t.lag_ms for t in timings]
    last = max(timings, key=lambda t: (t.created_ms, t.scheduled_ms), default=None)
    return {
        "p50Ms": round(percentile(lags, 50)),
        "p99Ms": round(percentile(lags, 99)),
        "maxMs": round(max(lags, default=0.0)),
        "atEndOfCreationMs": round(last.lag_ms) if last is not None else 0,
    }


def admission_times(timings: Iterable[Timing]) -> tuple[
        dict[str, tuple[list[float], list[float]]], int, int]:
    """Time to admission per class, from actual creation and from scheduled creation, and
    both work-weighted means (ms). A workload admitted before its scheduled time (clock
    noise of a few microseconds) counts as waiting 0."""
    per_class: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    from_created: list[tuple[float, float]] = []
    from_scheduled: list[tuple[float, float]] = []
    for t in timings:
        if t.reserved_ms is None:
            continue
        created = max(t.reserved_ms - t.created_ms, 0.0)
        scheduled = max(t.reserved_ms - t.scheduled_ms, 0.0)
        per_class[t.class_name][0].append(created)
        per_class[t.class_name][1].append(scheduled)
        from_created.append((t.work, created))
        from_scheduled.append((t.work, scheduled))
    return (dict(per_class), work_weighted_mean(from_created),
            work_weighted_mean(from_scheduled))


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
    shape: Shape, cluster_id: int, *, started_at: datetime, mode: str,
    process: Mapping[str, Any], extra: Mapping[str, Any] | None = None,
    model: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary of a finished run, with the measures of Kueue's scheduler benchmark
    (``test/performance/scheduler``, and ``docs/performance.md``), as JSON-ready data.

    ``started_at`` is the time 0 of the shape's timeline; ``model`` the zero-cost
    Kueue-rules model's figures on the shape (``reference.model_reference``)."""
    limits = queue_limits(shape)
    scheduled = {(c.queue, c.name): c.at_ms for c in shape.timeline()}
    rows = list(Workload.objects.filter(cluster_id=cluster_id).values_list(
        "id", "namespace", "name", "labels", "pod_sets", "phase", "created_at",
        "quota_reserved_at", "conditions"))
    usage: dict[int, tuple[str, int]] = {}
    class_of: dict[int, str] = {}
    finish_ms: dict[str, list[float]] = defaultdict(list)
    timings: list[Timing] = []
    first_created: datetime | None = None
    last_finished: datetime | None = None
    finished = 0
    for (workload_id, namespace, name, labels, pod_sets, phase, created, reserved,
         conditions) in rows:
        usage[workload_id] = (namespace, _cpu_milli(pod_sets))
        klass = class_of[workload_id] = (labels or {}).get(CLASS_LABEL, "")
        first_created = created if first_created is None else min(first_created, created)
        runtime_ms = int((labels or {}).get(RUNNING_TIME_LABEL, 0) or 0)
        timings.append(Timing(
            class_name=klass, work=usage[workload_id][1] * runtime_ms,
            scheduled_ms=scheduled[(namespace, name)], created_ms=_ms(created - started_at),
            reserved_ms=_ms(reserved - started_at) if reserved is not None else None))
        done_at = cond.transition_time(conditions, "Finished")
        if phase == WorkloadPhase.FINISHED and done_at is not None:
            finished += 1
            finish_ms[klass].append(_ms(done_at - created))
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
    wall_ms = _ms(last_finished - first_created) if first_created and last_finished else 0.0
    first_scheduled = min(scheduled.values(), default=0)
    timeline_wall_ms = (_ms(last_finished - started_at) - first_scheduled
                        if last_finished else 0.0)

    counts = Counter(class_of.values())
    admissions, weighted, weighted_scheduled = admission_times(timings)
    classes = {}
    for klass in sorted(counts):  # every class, even one with nothing admitted
        from_created, from_scheduled = admissions.get(klass, ([], []))
        classes[klass] = class_figures(counts[klass], from_created, finish_ms[klass],
                                       evictions.get(klass, 0), from_scheduled)
    usage_percent = usage_percent_per_class(limits, checked.used_milli_ms, wall_ms)

    summary: dict[str, Any] = {
        "config": shape.name,
        "mode": mode,
        "wallMs": round(wall_ms),
        "wallFromScheduledMs": round(timeline_wall_ms),
        "workloads": len(rows),
        "expectedWorkloads": shape.total_workloads,
        "admitted": sum(1 for t in timings if t.reserved_ms is not None),
        "admissions": checked.admissions,
        "finished": finished,
        "evictions": sum(evictions.values()),
        "quotaViolations": len(checked.violations),
        "violations": checked.violations[:20],
        "creationLag": creation_lag(timings),
        "classes": classes,
        "workWeightedTimeToAdmissionMs": weighted,
        "workWeightedTimeToAdmissionFromScheduledMs": weighted_scheduled,
        "clusterQueueUsagePercent": usage_percent,
        "process": dict(process),
    }
    if extra:
        summary.update(extra)
    summary["comparison"] = comparison(shape, summary, model=model)
    return summary


def _ms(delta: timedelta) -> float:
    return delta.total_seconds() * 1000


def class_figures(count: int, admission_ms: Sequence[float], finish_ms: Sequence[float],
                  evictions: int, from_scheduled_ms: Sequence[float]) -> dict[str, int]:
    """One workload class's line of the summary: time to admission from actual creation
    (Kueue's measure), and from scheduled creation."""
    return {
        "count": count,
        "averageTimeToAdmissionMs": round(sum(admission_ms) / max(len(admission_ms), 1)),
        "p50TimeToAdmissionMs": round(percentile(admission_ms, 50)),
        "p90TimeToAdmissionMs": round(percentile(admission_ms, 90)),
        "p99TimeToAdmissionMs": round(percentile(admission_ms, 99)),
        "averageTimeToAdmissionFromScheduledMs": round(
            sum(from_scheduled_ms) / max(len(from_scheduled_ms), 1)),
        "p99TimeToAdmissionFromScheduledMs": round(percentile(from_scheduled_ms, 99)),
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
    """The lines of a summary an operator compares between runs: wall, creation lag,
    counts, classes, usage, and the reference ratios (wall bound, TTA floor, model)."""
    comparison = summary.get("comparison", {})
    timeline_wall = summary.get("wallFromScheduledMs", summary["wallMs"])
    lines = [
        f"  wall {summary['wallMs'] / 1000:.2f}s from the first creation, "
        f"{timeline_wall / 1000:.2f}s from the first scheduled one"
        + (f"; Kueue {comparison['kueueWallMs'] / 1000:.0f}s "
           f"({comparison['kueueWallOverOurs']}x ours)" if comparison.get("kueueWallOverOurs")
           else ""),
    ]
    if "shapeLowerBoundWallMs" in comparison:
        lines.append(
            f"  lowerBoundWallMs: the shape says {comparison['shapeLowerBoundWallMs'] / 1000:.2f}"
            f" s, computed {comparison['lowerBoundWallMs'] / 1000:.2f} s; the computed one is "
            f"used")
    lag = summary.get("creationLag")
    if lag is not None:
        lines.append(
            f"  creation lag (actual - scheduled creation): p50 {lag['p50Ms']}ms p99 "
            f"{lag['p99Ms']}ms max {lag['maxMs']}ms, at the end of creation "
            f"{lag['atEndOfCreationMs']}ms")
    lines.append(
        f"  workloads {summary['workloads']}/{summary['expectedWorkloads']}, admitted "
        f"{summary['admitted']}, finished {summary['finished']}, evictions "
        f"{summary['evictions']}, quota violations {summary['quotaViolations']}")
    ratios = comparison.get("kueueAverageTimeToAdmissionOverOurs", {})
    for klass, c in summary["classes"].items():
        ratio = ratios.get(klass)
        lines.append(
            f"  {klass:>8}: {c['count']} workloads, time to admission avg "
            f"{c['averageTimeToAdmissionMs']}ms p50 {c['p50TimeToAdmissionMs']}ms p90 "
            f"{c['p90TimeToAdmissionMs']}ms p99 {c['p99TimeToAdmissionMs']}ms"
            + (f" (Kueue's avg is {ratio}x)" if ratio else "")
            + f"; from scheduled creation avg {c['averageTimeToAdmissionFromScheduledMs']}ms"
            f" p99 {c['p99TimeToAdmissionFromScheduledMs']}ms"
            + f"; to finish avg {c['averageTimeToFinishMs']}ms, evictions {c['totalEvictions']}")
    weighted = comparison.get("workWeightedTimeToAdmissionMs")
    if weighted:
        lines.append(
            f"  time to admission weighted by work (cpu x run time): from scheduled creation "
            f"{weighted['oursFromScheduled'] / 1000:.2f}s, from actual creation "
            f"{weighted['ours'] / 1000:.2f}s"
            + (f"; Kueue's {weighted['kueue'] / 1000:.2f}s" if weighted.get("kueue") else ""))
    usage = ", ".join(f"{k} {v}%" for k, v in summary["clusterQueueUsagePercent"].items())
    lines.append(f"  cluster queue usage: {usage}")
    lines.append("  reference ratios: " + "; ".join(reference_ratios(comparison)))
    return lines


def reference_ratios(comparison: Mapping[str, Any]) -> list[str]:
    """Our figures over the three references: wall bound, TTA floor, zero-cost model."""
    weighted = comparison.get("workWeightedTimeToAdmissionMs", {})
    parts = [f"wall / wall bound {_times(comparison.get('wallOverLowerBound'))} "
             f"(bound {comparison['lowerBoundWallMs'] / 1000:.2f}s)"]
    if weighted:
        parts.append(f"weighted TTA / TTA floor {_times(weighted.get('overLowerBound'))} "
                     f"(floor {weighted['lowerBound'] / 1000:.2f}s)")
        if "model" in weighted:
            parts.append(f"weighted TTA / zero-cost Kueue-rules model "
                         f"{_times(weighted.get('overModel'))} "
                         f"(model {weighted['model'] / 1000:.2f}s"
                         + (f", requeue batch period {period:g}s)"
                            if (period := weighted.get("modelRequeueBatchPeriodSeconds"))
                            is not None else ")"))
        else:
            parts.append("weighted TTA / zero-cost Kueue-rules model: "
                         + comparison.get("modelMissing", "not computed"))
    return parts


def _times(ratio: float | None) -> str:
    return f"{ratio:.3f}x" if ratio is not None else "n/a (reference is 0)"


def _ratio(ours: float, reference: float) -> float | None:
    return round(ours / reference, 3) if reference else None


def _cpu_milli(pod_sets: Sequence[Mapping[str, Any]]) -> int:
    from scheduling.cache.snapshots import per_pod_requests

    return sum(per_pod_requests(ps).get("cpu", 0) * int(ps.get("count", 1)) for ps in pod_sets)


def comparison(shape: Shape, summary: Mapping[str, Any], *, bounds: Bounds | None = None,
               model: Mapping[str, Any] | None = None,
               model_missing: str | None = None) -> dict[str, Any]:
    """Ratios to the bounds computed from the shape (the shape's own ``lowerBoundWallMs``
    is kept only to show where it differs), to the zero-cost Kueue-rules model's figures
    and to Kueue's. Our side of each reference ratio is measured from the scheduled
    creations, as the bounds and the model are: a late generator must not look fast."""
    wall = summary["wallMs"]
    bounds = bounds if bounds is not None else lower_bounds(shape)
    bound = round(bounds.wall_ms)
    result: dict[str, Any] = {
        "lowerBoundWallMs": bound,
        "wallOverLowerBound": _ratio(summary.get("wallFromScheduledMs", wall), bound),
    }
    if shape.lower_bound_wall_ms is not None and shape.lower_bound_wall_ms != bound:
        result["shapeLowerBoundWallMs"] = shape.lower_bound_wall_ms
    if "workWeightedTimeToAdmissionMs" in summary:
        ours = summary.get("workWeightedTimeToAdmissionFromScheduledMs",
                           summary["workWeightedTimeToAdmissionMs"])
        floor = round(bounds.min_work_weighted_time_to_admission_ms)
        weighted: dict[str, Any] = {
            "ours": summary["workWeightedTimeToAdmissionMs"],
            "oursFromScheduled": ours,
            "lowerBound": floor,
            "overLowerBound": _ratio(ours, floor),
        }
        if model is not None:
            weighted["model"] = model["workWeightedTimeToAdmissionMs"]
            weighted["modelRequeueBatchPeriodSeconds"] = model.get("model", {}).get(
                "requeueBatchPeriodSeconds")
            weighted["overModel"] = _ratio(ours, weighted["model"])
        if shape.kueue is not None and bounds.classes_uniform:
            kueue = work_weighted(shape.kueue.average_time_to_admission_ms,
                                  bounds.work_by_class)
            if kueue is not None:
                weighted["kueue"] = round(kueue)
        result["workWeightedTimeToAdmissionMs"] = weighted
    if model_missing:
        result["modelMissing"] = model_missing
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
