"""Properties over random clusters and workload streams driven through many cycles.

* No queue or cohort ever holds more than its limits allow (once victims are gone).
* Incremental usage bookkeeping equals a snapshot rebuilt from scratch.
* A workload is never both admitted and pending.
* The same input gives the same decisions.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core import (
    ClusterQueueSpec,
    CohortSpec,
    CyclePolicy,
    FungibilityPolicy,
    QueueingStrategy,
    QueueManager,
    ReclaimWithinCohortPolicy,
    Snapshot,
    WithinClusterQueuePolicy,
    Workload,
    WorkloadInfo,
    run_cycle,
)
from scheduling.core.snapshot import ClusterQueueNode, QuotaNode
from tests.builders import cluster_queue, cohort, flavors, pod_set, workload

FLAVORS = ("on-demand", "spot")


@dataclass(frozen=True)
class World:
    cohorts: tuple[CohortSpec, ...]
    queues: tuple[ClusterQueueSpec, ...]
    stream: tuple[Workload, ...]
    fair_sharing: bool
    seed: int


@st.composite
def worlds(draw: st.DrawFn) -> World:
    # Cohort tree: up to three cohorts, each optionally under an earlier one.
    n_cohorts = draw(st.integers(0, 3))
    cohort_specs = []
    for i in range(n_cohorts):
        parent = draw(st.sampled_from([None, *[f"co{j}" for j in range(i)]]))
        own = draw(st.integers(0, 4))
        limits: tuple[Any, ...] = (str(own),)
        if parent is not None:
            limits = (
                str(own),
                draw(st.sampled_from([None, "0", "2", "6"])),
                draw(st.sampled_from([None, "0", "1", "3"])),
            )
        quotas = {"on-demand": {"cpu": limits}} if own or parent else None
        cohort_specs.append(
            cohort(
                f"co{i}",
                parent=parent,
                quotas=quotas,
                weight=draw(st.sampled_from([1.0, 2.0, 0.0])),
            )
        )
    queues = []
    for i in range(draw(st.integers(1, 5))):
        parent = draw(st.sampled_from([None, *[c.name for c in cohort_specs]]))
        groups: dict[str, dict[str, Any]] = {}
        for flavor in draw(
            st.sampled_from([("on-demand",), ("on-demand", "spot"), ("spot", "on-demand")])
        ):
            nominal = str(draw(st.integers(0, 6)))
            if parent is None:
                groups[flavor] = {"cpu": nominal}
            else:
                groups[flavor] = {
                    "cpu": (
                        nominal,
                        draw(st.sampled_from([None, "0", "1", "4"])),
                        draw(st.sampled_from([None, "0", "2"])),
                    )
                }
        queues.append(
            cluster_queue(
                f"cq{i}",
                quotas=groups,
                cohort=parent,
                strategy=draw(st.sampled_from(list(QueueingStrategy))),
                within=draw(st.sampled_from(list(WithinClusterQueuePolicy))),
                reclaim=draw(st.sampled_from(list(ReclaimWithinCohortPolicy))),
                when_can_borrow=draw(st.sampled_from(list(FungibilityPolicy))),
                when_can_preempt=draw(st.sampled_from(list(FungibilityPolicy))),
                weight=draw(st.sampled_from([1.0, 3.0, 0.0])),
            )
        )
    stream = []
    for n in range(draw(st.integers(1, 18))):
        count = draw(st.integers(1, 4))
        min_count = draw(st.sampled_from([None, None, 1]))
        stream.append(
            workload(
                f"w{n}",
                queue=f"lq{draw(st.integers(0, len(queues) - 1))}",
                priority=draw(st.integers(-2, 2)),
                created=float(n),
                pod_sets=[
                    pod_set(
                        "main",
                        count,
                        min_count=min_count if min_count and min_count < count else None,
                        cpu=str(draw(st.sampled_from([1, 2, 3]))),
                    )
                ],
            )
        )
    return World(
        tuple(cohort_specs),
        tuple(queues),
        tuple(stream),
        draw(st.booleans()),
        draw(st.integers(0, 2**16)),
    )


def _check_limits(state: Snapshot) -> None:
    nodes: list[QuotaNode] = [
        *state.cohorts.values(),
        *(_queue(state, n) for n in _all_cq_names(state)),
    ]
    for node in nodes:
        for fr, used in node.usage.items():
            assert used >= 0, (node.name, fr, used)
            quota = node.quotas.get(fr)
            if node.parent is None:
                assert used <= node.subtree_quota.get(fr, 0), (node.name, fr)
            elif quota is not None and quota.borrowing_limit is not None:
                assert used <= node.subtree_quota.get(fr, 0) + quota.borrowing_limit, (
                    node.name,
                    fr,
                )


def _all_cq_names(state: Snapshot) -> list[str]:
    return sorted(state._all_cqs)  # noqa: SLF001 - a test looking at every queue


def _queue(state: Snapshot, name: str) -> ClusterQueueNode:
    node = state.any_cluster_queue(name)
    assert node is not None
    return node


def _usage_map(state: Snapshot) -> dict[str, dict[Any, int]]:
    out = {}
    for name in _all_cq_names(state):
        out[name] = {fr: v for fr, v in _queue(state, name).usage.items() if v}
    for name, node in state.cohorts.items():
        out[f"cohort:{name}"] = {fr: v for fr, v in node.usage.items() if v}
    return out


def _drive(world: World, cycles: int = 10) -> list[tuple[Any, ...]]:
    rng = random.Random(world.seed)
    flavor_specs = flavors(*FLAVORS)
    state = Snapshot.build(flavors=flavor_specs, cohorts=world.cohorts, cluster_queues=world.queues)
    queues = QueueManager()
    for c in world.cohorts:
        queues.add_or_update_cohort(c.name, c.parent)
    for spec in world.queues:
        queues.add_or_update_cluster_queue(spec, inactive_reason=state.inactive.get(spec.name))
        queues.add_or_update_local_queue("default", f"lq{spec.name[2:]}", spec.name)
    admitted: dict[str, Workload] = {}
    trace: list[tuple[Any, ...]] = []
    arrivals = list(world.stream)
    policy = CyclePolicy(fair_sharing=world.fair_sharing)
    for cycle in range(1, cycles + 1):
        now = float(cycle)
        # a few workloads arrive, a few running ones finish
        for _ in range(rng.randint(0, 3)):
            if arrivals:
                queues.add_or_update_workload(arrivals.pop(0), now=now)
        freed = set()
        for key in sorted(admitted):
            if rng.random() < 0.2:
                wl = admitted.pop(key)
                assert wl.admission is not None
                state.release_workload(key, wl.admission.cluster_queue)
                freed.add(wl.admission.cluster_queue)
        queues.queue_inadmissible_workloads(freed, now=now)

        result = run_cycle(state.clone(), queues.heads(), now=now, policy=policy, cycle=cycle)
        for head in result.admitted:
            holder = dataclasses.replace(
                head.workload, admission=head.admission, quota_reserved_time=now
            )
            state.add_workload(WorkloadInfo(holder))
            admitted[head.key] = holder
        queues.apply(result, now=now)
        victims = set()
        for target in result.preemption_targets:
            wl = admitted.pop(target.workload_key, None)
            if wl is not None:
                state.release_workload(target.workload_key, target.cluster_queue)
                victims.add(target.cluster_queue)
                queues.add_or_update_workload(
                    dataclasses.replace(
                        wl, admission=None, quota_reserved_time=None, evicted_reason="Preempted"
                    ),
                    now=now,
                )
        queues.queue_inadmissible_workloads(victims, now=now)
        trace.append(
            tuple(
                (
                    r.key,
                    r.decision.value,
                    r.admission,
                    tuple(t.workload_key for t in r.preemption_targets),
                )
                for r in result.results
            )
        )

        # --- invariants after every cycle, victims gone ---
        _check_limits(state)
        rebuilt = Snapshot.build(
            flavors=flavor_specs,
            cohorts=world.cohorts,
            cluster_queues=world.queues,
            admitted=list(admitted.values()),
        )
        assert _usage_map(rebuilt) == _usage_map(state)
        for key in admitted:
            assert queues.tracked_workload(key) is None, key
        holders = [k for name in _all_cq_names(state) for k in _queue(state, name).workloads]
        assert sorted(holders) == sorted(admitted)
    return trace


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_limits_hold_and_bookkeeping_is_consistent(world: World) -> None:
    _drive(world, cycles=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_same_input_same_decisions(world: World) -> None:
    assert _drive(world, cycles=6) == _drive(world, cycles=6)
