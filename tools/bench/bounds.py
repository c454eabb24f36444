"""What no scheduler can do better on a shape: bounds from the work alone.

A cluster queue can use at most its cohort's quota, so each cohort is a machine of that
many cpu, and cohorts share nothing. A workload holds its cpu from its admission (quota
reserved; the last one when it was evicted) for at least its run time. Whatever the order,
the preemptions or the speed of the scheduler:

* **Wall.** A cohort cannot have done its work before the *fluid* schedule has: the machine
  never idle while work waits, every cpu-millisecond served the moment it can be. Nor can a
  workload finish before its creation plus its run time.
* **Time to admission weighted by work.** Let ``p = cpu × run time`` of a workload, ``a`` its
  creation, ``s`` its admission and ``r`` its run time. Its work is done evenly over
  ``[s, s + r]``, so the mean time of its units of work is ``s + r/2`` and, summed over the
  workloads, ``Σ p (s + r/2) = ∫ t dD`` where ``D(t)`` is the work done by ``t``. Work is
  done no earlier than it arrives and at most at the cohort's rate, so ``D(t) ≤ D*(t)``,
  the fluid schedule's, at every ``t``; hence ``∫ t dD ≥ ∫ t dD*`` and
  ``Σ p (s − a) ≥ ∫ t dD* − Σ p (a + r/2)``. Work wasted by an eviction only lowers ``D``.

Per-class averages of time to admission weigh into the second bound by their class's work:
``Σ_class work × average ≥`` the bound. A set of per-class targets whose weighted sum is
below it cannot be met by any schedule. Borrowing limits narrower than the cohort and the
packing of whole workloads only raise the true minimum; the bounds ignore them, so they
stay bounds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduling.core.quantities import quantity_to_int
from tools.bench.shape import Shape


@dataclass(frozen=True)
class Arrival:
    at_ms: int
    cpu_milli: int
    runtime_ms: int


@dataclass(frozen=True)
class FluidResult:
    """One cohort's fluid schedule: when its work is done and the work-weighted wait sum."""

    end_ms: float
    # Σ p (s − a) can be no lower than this, in cpu-milli × ms × ms.
    min_weighted_wait: float


@dataclass(frozen=True)
class Bounds:
    wall_ms: float
    # cpu-milli × ms of work per workload class: the weights of the averages.
    work_by_class: Mapping[str, float]
    # Every workload of a class does the same work: only then do per-class averages weigh
    # exactly into the work-weighted figure.
    classes_uniform: bool
    # The lowest Σ work × time to admission / Σ work of any schedule, in ms.
    min_work_weighted_time_to_admission_ms: float


def fluid(arrivals: Iterable[Arrival], capacity_milli: int) -> FluidResult:
    """The fluid schedule of one cohort of ``capacity_milli`` cpu (module docstring)."""
    if capacity_milli <= 0:
        raise ValueError("a cohort needs quota to run its work")
    work_at: dict[int, float] = defaultdict(float)
    arrival_moment = 0.0  # Σ p (a + r/2)
    latest_alone = 0.0  # max(a + r): no workload finishes sooner than that
    for arrival in arrivals:
        work = float(arrival.cpu_milli * arrival.runtime_ms)
        work_at[arrival.at_ms] += work
        arrival_moment += work * (arrival.at_ms + arrival.runtime_ms / 2)
        latest_alone = max(latest_alone, float(arrival.at_ms + arrival.runtime_ms))
    rate = float(capacity_milli)  # cpu-milli × ms of work served per ms
    backlog = 0.0
    now = 0.0
    done_moment = 0.0  # ∫ t dD*
    for at in sorted(work_at):
        # Serve what waits until this arrival, or until nothing waits.
        busy = min(at - now, backlog / rate)
        done_moment += rate * ((now + busy) ** 2 - now ** 2) / 2
        backlog -= rate * busy
        now = float(at)
        backlog += work_at[at]
    busy = backlog / rate
    done_moment += rate * ((now + busy) ** 2 - now ** 2) / 2
    end = now + busy if work_at else 0.0
    return FluidResult(end_ms=max(end, latest_alone),
                       min_weighted_wait=max(done_moment - arrival_moment, 0.0))


def lower_bounds(shape: Shape) -> Bounds:
    """The wall and work-weighted time to admission no schedule of ``shape`` can beat.

    Each cohort is bounded twice, as one machine of its quota and as one machine per
    cluster queue of what the queue may use (nominal quota plus borrowing limit, at most
    the cohort's quota); both hold, so the higher counts."""
    cohort_quota: dict[str, int] = defaultdict(int)
    for queue in shape.queues():
        cohort_quota[queue.cohort] += quantity_to_int("cpu", queue.spec.nominal_quota)
    queue_quota: dict[str, int] = {}
    cohort_of: dict[str, str] = {}
    for queue in shape.queues():
        ceiling = cohort_quota[queue.cohort]
        if queue.spec.borrowing_limit is not None:
            ceiling = min(ceiling, quantity_to_int("cpu", queue.spec.nominal_quota)
                          + quantity_to_int("cpu", queue.spec.borrowing_limit))
        queue_quota[queue.name] = ceiling
        cohort_of[queue.name] = queue.cohort
    arrivals: dict[str, list[Arrival]] = defaultdict(list)
    work_by_class: dict[str, float] = defaultdict(float)
    work_shapes: dict[str, set[int]] = defaultdict(set)
    first_ms: int | None = None
    for creation in shape.timeline():
        template = creation.template
        arrivals[creation.queue].append(
            Arrival(creation.at_ms, template.request_milli, template.runtime_ms))
        work = template.request_milli * template.runtime_ms
        work_by_class[template.class_name] += work
        work_shapes[template.class_name].add(work)
        first_ms = creation.at_ms if first_ms is None else min(first_ms, creation.at_ms)
    per_queue = {name: fluid(queue_arrivals, queue_quota[name])
                 for name, queue_arrivals in arrivals.items()}
    by_cohort: dict[str, list[str]] = defaultdict(list)
    for name in per_queue:
        by_cohort[cohort_of[name]].append(name)
    end_ms = 0.0
    weighted_wait = 0.0
    for cohort, names in by_cohort.items():
        whole = fluid((a for name in names for a in arrivals[name]), cohort_quota[cohort])
        end_ms = max(end_ms, whole.end_ms, *(per_queue[name].end_ms for name in names))
        weighted_wait += max(whole.min_weighted_wait,
                             sum(per_queue[name].min_weighted_wait for name in names))
    total_work = sum(work_by_class.values())
    return Bounds(
        wall_ms=end_ms - (first_ms or 0),
        work_by_class=dict(work_by_class),
        classes_uniform=all(len(works) == 1 for works in work_shapes.values()),
        min_work_weighted_time_to_admission_ms=(
            weighted_wait / total_work if total_work else 0.0),
    )


def work_weighted(average_ms_by_class: Mapping[str, float],
                  work_by_class: Mapping[str, float]) -> float | None:
    """Per-class averages of time to admission weighed by each class's work, in ms; None
    when a class with work has no average."""
    total = sum(work_by_class.values())
    if not total or any(k not in average_ms_by_class for k in work_by_class):
        return None
    return sum(work * average_ms_by_class[k] for k, work in work_by_class.items()) / total
