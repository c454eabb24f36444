"""Bounds from the work alone: what no schedule of a shape can beat."""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from pathlib import Path
from typing import Any

import pytest

from scheduling.core.quantities import quantity_to_int
from tools.bench.bounds import Arrival, fluid, lower_bounds, work_weighted
from tools.bench.model import run_model
from tools.bench.shape import Creation, Shape, load_shape, read_shape

SHARED_BENCH = Path(__file__).resolve().parents[3].parent / "shared" / "bench"


def _shape(*sets: dict[str, Any], nominal: int = 1) -> Any:
    queues_set = {"className": "cq", "count": 1, "nominalQuota": nominal,
                  "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
                  "workloadsSets": list(sets)}
    return read_shape({"name": "t", "cohorts": [{"className": "cohort", "count": 1,
                                                 "queuesSets": [queues_set]}]})


def _set(count: int, interval_ms: int, klass: str, runtime_ms: int,
         request: int = 1) -> dict[str, Any]:
    return {"count": count, "creationIntervalMs": interval_ms,
            "workloads": [{"className": klass, "runtimeMs": runtime_ms, "priority": 0,
                           "request": request}]}


def test_two_workloads_in_a_row_give_the_exact_optimum() -> None:
    # 1 cpu; created at 1 s and 2 s, 2 s each: the second can start at 3 s at the earliest,
    # so the best schedule waits 1 s for one of the two and ends 4 s after the first creation.
    bounds = lower_bounds(_shape(_set(2, 1000, "w", 2000)))

    assert bounds.wall_ms == 4000
    assert bounds.min_work_weighted_time_to_admission_ms == pytest.approx(500)
    assert bounds.work_by_class == {"w": 2 * 1000 * 2000}


def test_work_that_never_queues_has_no_wait_and_ends_with_its_last_run() -> None:
    result = fluid([Arrival(0, 500, 100), Arrival(1000, 500, 3000)], capacity_milli=1000)

    assert result.min_weighted_wait == 0
    assert result.end_ms == 4000  # the last workload alone: created at 1 s, runs 3 s


def test_a_queue_cannot_use_more_than_its_borrowing_limit_allows() -> None:
    # A busy queue of 1 cpu and an idle one (a single 1 ms workload) of 1 cpu in a cohort.
    # Borrowing, the busy queue
    # may use both cpus; with a borrowing limit of 0 it has one, and its work waits longer.
    def cohort(borrowing_limit: int | None) -> Any:
        busy: dict[str, Any] = {
            "className": "busy", "count": 1, "nominalQuota": 1,
            "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
            "workloadsSets": [_set(4, 1, "w", 1000)]}
        if borrowing_limit is not None:
            busy["borrowingLimit"] = borrowing_limit
        idle = {"className": "idle", "count": 1, "nominalQuota": 1,
                "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
                "workloadsSets": [_set(1, 1, "w", 1)]}
        return read_shape({"name": "t", "cohorts": [{"className": "cohort", "count": 1,
                                                     "queuesSets": [busy, idle]}]})

    shared = lower_bounds(cohort(None))
    alone = lower_bounds(cohort(0))

    assert shared.wall_ms == pytest.approx(2000, abs=5)
    assert alone.wall_ms == pytest.approx(4000, abs=5)
    assert alone.min_work_weighted_time_to_admission_ms > (
        2 * shared.min_work_weighted_time_to_admission_ms)


def test_the_model_never_beats_the_bounds() -> None:
    shape = _shape(_set(30, 50, "small", 300), _set(6, 400, "large", 1000, request=2),
                   nominal=2)

    bounds = lower_bounds(shape)
    summary = run_model(shape, requeue_batch_seconds=0.0)

    assert summary["wallMs"] >= bounds.wall_ms
    assert summary["workWeightedTimeToAdmissionMs"] >= round(
        bounds.min_work_weighted_time_to_admission_ms)
    assert summary["comparison"]["workWeightedTimeToAdmissionMs"]["lowerBound"] == round(
        bounds.min_work_weighted_time_to_admission_ms)


def test_class_averages_weigh_by_the_work_of_their_class() -> None:
    work = {"small": 1.0, "large": 3.0}

    assert work_weighted({"small": 400, "large": 0}, work) == 100
    assert work_weighted({"small": 400}, work) is None


@pytest.mark.skipif(not SHARED_BENCH.is_dir(), reason="no directory of Kueue benchmark shapes (../shared/bench)")
def test_tenfold_kueue_on_every_class_of_baseline_is_below_what_any_schedule_can_do() -> None:
    # The issue asks for a time to admission 10x better than Kueue's in every class of
    # `baseline`; weighed by work, that is below the floor no schedule can go under.
    shape = load_shape(SHARED_BENCH / "baseline.yaml")
    bounds = lower_bounds(shape)
    assert shape.kueue is not None
    tenfold = work_weighted({k: v / 10 for k, v in shape.kueue.average_time_to_admission_ms.items()},
                            bounds.work_by_class)

    assert bounds.classes_uniform
    assert round(bounds.wall_ms) == 66740  # the file's own arithmetic says 66 s
    assert tenfold is not None
    assert tenfold < bounds.min_work_weighted_time_to_admission_ms


@pytest.mark.skipif(not SHARED_BENCH.is_dir(), reason="no directory of Kueue benchmark shapes (../shared/bench)")
def test_baseline_wall_bound_is_66_74_s_not_the_shapes_66_s() -> None:
    # The shape's arithmetic spreads 7920 cpu-s per cohort over 120 cpu from t=0 (66 s).
    # Kueue's generator waits one interval before each workload, so the first (small)
    # one is due at 0.1 s and the first large one at 1.2 s. Until then the small and
    # medium work keep about a third of the cohort's 120 cpu busy; from then on work
    # arrives faster than the cohort serves it. The fluid schedule ends at 66.84 s,
    # 66.74 s after the first creation.
    shape = load_shape(SHARED_BENCH / "baseline.yaml")
    due = {}
    for creation in shape.timeline():
        due.setdefault(creation.template.class_name, creation.at_ms)

    assert due == {"small": 100, "medium": 500, "large": 1200}
    assert round(lower_bounds(shape).wall_ms) == 66740
    assert shape.lower_bound_wall_ms == 66000  # what the file says, and why it is not used


@pytest.mark.skipif(not SHARED_BENCH.is_dir(), reason="no directory of Kueue benchmark shapes (../shared/bench)")
def test_large_scale_wall_bound_is_4_41_s_below_the_shapes_5_s() -> None:
    shape = load_shape(SHARED_BENCH / "large-scale.yaml")
    timeline = list(shape.timeline())
    bounds = lower_bounds(shape)

    assert len(timeline) == 50_000
    assert (timeline[0].at_ms, timeline[-1].at_ms) == (60, 3300)  # created over 3.3 s
    assert round(bounds.wall_ms) == 4410
    assert shape.lower_bound_wall_ms == 5000  # above the bound: a run could beat "the bound"
    assert round(bounds.min_work_weighted_time_to_admission_ms) == 442


def _greedy_wall_ms(shape: Shape) -> int:
    """The wall of a plain schedule: at every arrival or finish, each cluster queue admits
    its oldest workloads while they fit its nominal quota plus borrowing limit and the
    cohort's free quota. A schedule that exists is an upper bound on the best one."""
    ceiling, cohort_of, capacity = {}, {}, defaultdict(int)
    for queue in shape.queues():
        nominal = quantity_to_int("cpu", queue.spec.nominal_quota)
        limit = queue.spec.borrowing_limit
        ceiling[queue.name] = nominal + (quantity_to_int("cpu", limit) if limit else 10**12)
        cohort_of[queue.name] = queue.cohort
        capacity[queue.cohort] += nominal
    by_cohort: dict[str, list[Creation]] = defaultdict(list)
    for creation in shape.timeline():
        by_cohort[cohort_of[creation.queue]].append(creation)
    first = min(c.at_ms for creations in by_cohort.values() for c in creations)
    end = 0
    for cohort, creations in by_cohort.items():
        arrivals: dict[int, list[Creation]] = defaultdict(list)
        for creation in creations:
            arrivals[creation.at_ms].append(creation)
        finishes: dict[int, list[tuple[str, int]]] = defaultdict(list)
        times = sorted(arrivals)
        waiting: dict[str, deque[Creation]] = defaultdict(deque)
        used: dict[str, int] = defaultdict(int)
        free = capacity[cohort]
        while times:
            now = heapq.heappop(times)
            for creation in arrivals.pop(now, []):
                waiting[creation.queue].append(creation)
            for queue, cpu in finishes.pop(now, []):
                used[queue] -= cpu
                free += cpu
            for queue, queued in waiting.items():
                while queued and (cpu := queued[0].template.request_milli) <= free and (
                        used[queue] + cpu <= ceiling[queue]):
                    done = now + queued.popleft().template.runtime_ms
                    free -= cpu
                    used[queue] += cpu
                    if done not in arrivals and done not in finishes:
                        heapq.heappush(times, done)
                    finishes[done].append((queue, cpu))
                    end = max(end, done)
    return end - first


@pytest.mark.skipif(not SHARED_BENCH.is_dir(), reason="no directory of Kueue benchmark shapes (../shared/bench)")
@pytest.mark.parametrize(("name", "above"), [
    ("baseline", 70745),  # a schedule within 6 % of the bound exists
    ("large-scale", 5000),  # the file's "lower bound" is beaten
])
def test_a_plain_schedule_never_beats_the_bound_and_lands_close_to_it(
        name: str, above: int) -> None:
    # An independent check of bounds.py from the other side: no schedule that exists can
    # finish before the bound, and this simple one finishes not far after it.
    shape = load_shape(SHARED_BENCH / f"{name}.yaml")

    wall = _greedy_wall_ms(shape)

    assert lower_bounds(shape).wall_ms <= wall < above
