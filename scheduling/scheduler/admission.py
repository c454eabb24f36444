"""The admission reconciler: one Kueue scheduling cycle per call, for one domain.

``run_admission_cycle`` is what the Celery task and the embedded loop call:

1. take the domain's lease (one cycle per domain at a time, any number of workers);
2. finish evictions whose workloads are gone, requeue what a quota change may now admit;
3. build the snapshot with a fixed number of queries (specs, workloads holding quota,
   one head per cluster queue picked by a window query in the database);
4. run the pure engine (``scheduling.core.cycle.run_cycle``);
5. apply every decision in one transaction, fenced by the lease and guarded by conditional
   updates, so a decision about a workload that changed since the snapshot is dropped and
   re-evaluated next cycle; events and follow-up work happen after commit.

Kueue mapping: ``pkg/scheduler/scheduler.go`` (schedule, admit, requeueAndUpdate),
``pkg/cache/queue`` (heads, parking, QueueInadmissibleWorkloads) and
``pkg/scheduler/preemption`` IssuePreemptions.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet

from kueueweb import collector, live, reconcile
from scheduling import jobframework
from scheduling.cache import snapshots
from scheduling.cache.rows import values_rows
from scheduling.choices import EventType, QueueState, StopPolicy, WorkloadPhase
from scheduling.core import admission_checks
from scheduling.core.cycle import (
    CyclePolicy,
    Head,
    HeadResult,
    PreemptionTarget,
    RequeueReason,
    run_cycle,
)
from scheduling.core.lifecycle import pods_ready_condition
from scheduling.core.quantities import int_to_quantity
from scheduling.core.snapshot import Snapshot
from scheduling.core.types import Admission, FairSharingStrategy, QueueingStrategy
from scheduling.core.workloads import AssignmentState, WorkloadInfo
from scheduling.metrics import prometheus
from scheduling.models import (
    AdmissionLease,
    ClusterQueue,
    Event,
    LocalQueue,
    ParkedShape,
    Workload,
)
from scheduling.queue_order import queue_order_sql, row_order_key, tuple_order_key
from scheduling.scheduler import bulk
from scheduling.scheduler.lease import (
    acquire_or_defer,
    hand_back,
    held_lease,
    new_holder_id,
    release,
)
from scheduling.workload import conditions as cond

logger = logging.getLogger(__name__)

ADMISSION_TASK = reconcile.ADMISSION_TASK
# MultiKueue's dispatch pass of the hub (multicluster.dispatch).
DISPATCH_TASK = reconcile.DISPATCH_TASK
_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


@dataclass
class CycleOutcome:
    """What one call did; ``wants_next`` asks for another cycle straight away."""

    ran: bool
    cycle: int = 0
    heads: int = 0
    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    released: int = 0
    dropped: int = 0
    # Every cohort tree's part of the round ended where its next cycle would decide the
    # same (``Rounds.settled``).
    settled: bool = False
    # The lease went back in the transaction that applied the decisions, and whether
    # another cycle was asked for while it was held.
    lease_returned: bool = False
    wanted_again: bool = False

    @property
    def progressed(self) -> bool:
        return bool(self.admitted or self.preempted or self.released)

    @property
    def wants_next(self) -> bool:
        """The call changed something and its round stopped short (at a bound, at the last
        candidate it loaded, at a preemption): the next cycle may decide more. A settled
        round already ran the cycle that follows its last change; the next one waits for
        something to change (a new workload, a release, a requeue), which asks for it."""
        return self.progressed and not self.settled


def cycle_policy() -> CyclePolicy:
    config: dict[str, Any] = settings.KUEUEWEB
    return CyclePolicy(
        fair_sharing=bool(config["FAIR_SHARING"]),
        fair_sharing_strategies=tuple(
            FairSharingStrategy(s) for s in config["FAIR_SHARING_PREEMPTION_STRATEGIES"]
        ),
        partial_admission=bool(config["PARTIAL_ADMISSION"]),
    )


def request_admission(cluster_id: int) -> None:
    """Ask for an admission cycle of the domain once the current transaction commits (and
    tell the browsers watching it that something changed)."""
    reconcile.request(ADMISSION_TASK, cluster_id)
    live.notify(cluster_id)


def request_dispatch() -> None:
    """Ask the MultiKueue hub (the manager domain) to look at its dispatched workloads:
    a hub workload reserved quota, or a remote copy was admitted in a worker's domain."""
    from multicluster.models import Cluster

    hub = Cluster.objects.manager_id()
    if hub is not None:
        reconcile.request(DISPATCH_TASK, hub)


# =========================================================================================
# The cycle
# =========================================================================================


@collector.paused()  # what a call builds lives until it returns (``kueueweb.collector``)
def run_admission_cycle(
    cluster_id: int,
    *,
    now: datetime,
    policy: CyclePolicy | None = None,
    max_cycles: int | None = None,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> CycleOutcome:
    """Run one scheduling cycle of the domain; a no-op if another worker holds its lease.

    ``policy`` (default: the settings' ``cycle_policy``), ``max_cycles`` (default
    ``MAX_CYCLES_PER_ROUND``) and ``namespaces`` (the labels of each namespace; default
    ``snapshots.namespace_labels``, as kueueweb keeps no Namespace objects) let ``manage.py
    simulate`` run a scenario's own configuration, one Kueue cycle at a time when the
    scenario asks for one."""
    holder = new_holder_id()
    config: dict[str, Any] = settings.KUEUEWEB
    lease_for = timedelta(seconds=int(config["ADMISSION_LEASE_SECONDS"]))
    if not acquire_or_defer(cluster_id, holder, now=now, duration=lease_for):
        return CycleOutcome(ran=False)
    outcome: CycleOutcome | None = None
    try:
        outcome = _cycle_under_lease(cluster_id, holder, now=now, policy=policy,
                                     max_cycles=max_cycles, namespaces=namespaces)
        return outcome
    finally:
        # A cycle that applied its decisions gave the lease back with them (committed).
        if outcome is not None and outcome.lease_returned:
            wanted = outcome.wanted_again
        else:
            wanted = release(cluster_id, holder)
        if wanted:
            # Asked for while we ran: the change may have come after our snapshot.
            reconcile.request(ADMISSION_TASK, cluster_id)


def _cycle_under_lease(cluster_id: int, holder: str, *, now: datetime,
                       policy: CyclePolicy | None = None, max_cycles: int | None = None,
                       namespaces: Mapping[str, Mapping[str, str]] | None = None
                       ) -> CycleOutcome:
    # 1. Housekeeping that changes what the cycle sees.
    released = release_evicted_workloads(cluster_id, now=now)
    requeue_due_queues(cluster_id, now=now)
    resolve_local_queues(cluster_id, now=now)
    specs = snapshots.load_domain_specs(cluster_id)
    _requeue_on_spec_change(cluster_id, specs, now=now)
    lease = AdmissionLease.objects.get(cluster_id=cluster_id)
    cycle = lease.cycle + 1

    # 2. The quota tree and the workloads holding quota.
    reserving = snapshots.reserving_rows(cluster_id)
    generations = dict(
        ClusterQueue.objects.filter(cluster_id=cluster_id).values_list(
            "name", "allocatable_generation"
        )
    )
    # 3. The first few workloads of every cluster queue, in Kueue's queue order.
    per_queue = candidates_per_queue(len(specs.cluster_queues))
    head_rows = select_heads(cluster_id, now=now, per_queue=per_queue)
    snapshot = Snapshot.build(
        flavors=specs.flavors,
        cohorts=specs.cohorts,
        cluster_queues=specs.cluster_queues,
        admitted=[snapshots.reserving_cache.built(cluster_id, row) for row in reserving],
        namespaces=(namespaces if namespaces is not None
                    else snapshots.namespace_labels(row["namespace"] for row in head_rows)),
        generations=generations,
        inactive=specs.inactive,
    )

    # 4. Decide: consecutive cycles in memory, as long as only this round's decisions
    # change what the next cycle would see.
    started = time.perf_counter()
    best_effort = {cq.name for cq in specs.cluster_queues
                   if cq.queueing_strategy is QueueingStrategy.BEST_EFFORT_FIFO}
    objects = snapshots.load_cluster_objects(cluster_id)
    rounds = run_cycles(snapshot, head_rows, per_queue=per_queue, now=now, first_cycle=cycle,
                        bulk_park=best_effort - _limit_range_queues(cluster_id, objects),
                        cluster_id=cluster_id, policy=policy, max_cycles=max_cycles,
                        objects=objects)
    cycle = rounds.last_cycle
    outcome = CycleOutcome(ran=True, cycle=cycle, heads=rounds.heads, released=released,
                           settled=rounds.settled)
    per_head = (time.perf_counter() - started) / max(rounds.heads, 1)

    # 5. Apply, fenced: if the lease was lost meanwhile, nothing is written.
    rows_by_key = {f"{r['namespace']}/{r['name']}": r for r in head_rows}
    reserving_by_key = {f"{r['namespace']}/{r['name']}": r for r in reserving}
    result = rounds
    with transaction.atomic(), prometheus.batch():
        fenced = held_lease(cluster_id, holder, now=now)
        if fenced is None:
            logger.warning("admission cycle of cluster %s lost its lease; discarded", cluster_id)
            return CycleOutcome(ran=False)
        outcome.wanted_again = hand_back(fenced, cycle=cycle)
        outcome.lease_returned = True
        events: list[dict[str, Any]] = []  # Event rows (``_event_row``)
        reservations: list[tuple[dict[str, Any], HeadResult, bulk.VersionedChange]] = []
        writes: list[bulk.VersionedChange] = []
        shapes_parked = {move.shape for move in result.bulk_parked}
        for head in result.results:
            row = rows_by_key[head.key]
            if head.admitted:
                reservations.append((row, head, _reservation(row, head, specs, now=now)))
            else:
                _record_pending(cluster_id, row, head, now=now, events=events, writes=writes,
                                with_shape=_shape(head.cluster_queue, row) in shapes_parked,
                                sticky=head.cluster_queue in best_effort)
                prometheus.admission_attempt("inadmissible", per_head)
        # Each decision is conditional on the version the round read: a workload changed
        # meanwhile keeps its own state and is looked at again next round.
        reserved = bulk.update_versioned(Workload, [change for _, _, change in reservations],
                                         where={"phase": WorkloadPhase.PENDING, "active": True})
        bulk.update_versioned(Workload, writes, where={"phase": WorkloadPhase.PENDING})
        park_same_shapes(cluster_id, result.bulk_parked, specs.cluster_queue_ids, now=now)
        for row, head, change in reservations:
            if row["id"] in reserved:
                _quota_reserved(cluster_id, row, head, change, now=now, events=events)
                outcome.admitted.append(head.key)
                prometheus.admission_attempt("success", per_head)
            else:
                outcome.dropped += 1
        # The next cycle reads these rows as workloads holding quota: they are what was
        # just written, so it need not load them (once committed: a rollback keeps none).
        seeded = [snapshots.reserved_row(row, change.values, head.cluster_queue)
                  for row, head, change in reservations if row["id"] in reserved]
        if seeded:
            transaction.on_commit(lambda: snapshots.reserving_cache.add(cluster_id, seeded))
        # Victims in id order, as every batched write locks rows (no lock-order deadlock
        # with a concurrent finish of the same workloads).
        victims = sorted(((reserving_by_key[t.workload_key], t)
                          for t in result.preemption_targets
                          if t.workload_key in reserving_by_key and not t.already_evicted),
                         key=lambda pair: pair[0]["id"])
        for victim, target in victims:
            if _issue_preemption(cluster_id, victim, target, now=now, events=events):
                outcome.preempted.append(target.workload_key)
        bulk.insert_rows(Event, events)
        if outcome.wants_next:
            request_admission(cluster_id)
        elif events or outcome.progressed:
            live.notify(cluster_id)
        # The cluster's reconciler starts and stops jobs; a workload with none (created
        # through the API) has nothing there to start or stop.
        if (any(rows_by_key[key]["job_id"] for key in outcome.admitted)
                or any(reserving_by_key[key]["job_id"] for key in outcome.preempted)):
            reconcile.request_cluster_sync(cluster_id)
        if outcome.admitted:
            request_dispatch()
    return outcome


def _limit_range_queues(cluster_id: int, objects: snapshots.ClusterObjects) -> set[str]:
    """The cluster queues serving a namespace with LimitRanges. Equal stored pod sets ask
    for other amounts there than in another namespace, so a head that does not fit parks
    only itself in them, not every workload of its stored pod sets."""
    if not objects.summaries:
        return set()
    return set(LocalQueue.objects.filter(cluster_id=cluster_id,
                                         namespace__in=list(objects.summaries))
               .values_list("cluster_queue__name", flat=True))


# How many engine cycles one call may run, and for how long, before it writes what it
# decided: a bound on the work lost to a crash and on how stale the round's view gets.
MAX_CYCLES_PER_ROUND = 64
MAX_ROUND_SECONDS = 0.2
# How many pending workloads of each cluster queue a round loads (between these bounds,
# about 4,000 rows in all, at most 16 each): the heads of the cycles it may run. A round
# stops in a cohort tree once a queue has used every candidate loaded for it, so this is
# also the most one call admits per queue. Too few, and a call that admits many short
# workloads runs out of candidates, stops and starts again, paying a read and a write for
# every few admissions.
_CANDIDATES = (2, 16, 4000)


def candidates_per_queue(cluster_queues: int) -> int:
    low, high, total = _CANDIDATES
    return max(low, min(high, total // max(cluster_queues, 1)))


@dataclass
class Rounds:
    """What ``run_cycles`` decided: the last decision about each workload it looked at
    (admitted, or pending with its reason) and the preemptions of its last cycle.
    ``settled``: every tree's part ended after a cycle that changed nothing there, or with
    no head left, not at a bound, a preemption or the last loaded candidate."""

    results: list[HeadResult]
    preemption_targets: tuple[PreemptionTarget, ...]
    cycles: int
    heads: int
    last_cycle: int
    bulk_parked: list[BulkMove] = field(default_factory=list)
    settled: bool = False


def run_cycles(
    snapshot: Snapshot,
    rows: Sequence[Mapping[str, Any]],
    *,
    per_queue: int,
    now: datetime,
    first_cycle: int,
    bulk_park: frozenset[str] | set[str] = frozenset(),
    cluster_id: int,
    policy: CyclePolicy | None = None,
    max_cycles: int | None = None,
    objects: snapshots.ClusterObjects = snapshots.NO_CLUSTER_OBJECTS,
) -> Rounds:
    """Run Kueue scheduling cycles over ``rows`` (``select_heads``) until one would need
    the database again.

    Every cycle takes the head of every cluster queue, exactly as consecutive cycles of
    Kueue's scheduler would with nothing else happening: an admitted head adds its usage to
    the snapshot, a parked head leaves its queue's heap and the next workload becomes the
    head, a head that stays (another flavor to try) is tried again. A cohort tree's part of
    the round stops after a cycle that preempts in it (victims must stop first) or involves
    a sticky preemptor or a workload slice, after a cycle that changes nothing in it, or
    when one of its queues has used every candidate loaded for it while more may wait in
    the database; trees share no quota, so the others go on. The round ends when every
    tree has stopped, or at its bounds.

    In the queues named in ``bulk_park`` (BestEffortFIFO), a head parked for NoFit or
    PreemptionNoCandidates parks every pending workload of the same shape with it (Kueue's
    scheduling-equivalence hashing): later candidates of that shape are skipped here and
    ``Rounds.bulk_parked`` names the shapes for ``park_same_shapes``.

    The engine's workload of a row the domain read before at the same version comes from
    ``snapshots.heads_cache``; its requests are adjusted for the domain's LimitRanges and
    RuntimeClasses (``objects``), as Kueue adjusts a workload's when it queues it.
    """
    queues: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        queues.setdefault(row["local_queue__cluster_queue__name"], []).append(row)
    truncated = {name for name, items in queues.items() if len(items) >= per_queue}
    position = dict.fromkeys(queues, 0)
    assignment = {f"{r['namespace']}/{r['name']}": _assignment_state(r["scheduler_state"])
                  for r in rows}
    items_by_key = {f"{r['namespace']}/{r['name']}": r for r in rows}
    final: dict[str, HeadResult] = {}
    parked_shapes: dict[str, set[SchedulingShape]] = {}
    moves: list[BulkMove] = []
    targets: tuple[PreemptionTarget, ...] = ()
    cycle, cycles, heads_seen = first_cycle, 0, 0
    policy, epoch_now = policy or cycle_policy(), snapshots.epoch(now)
    max_cycles = MAX_CYCLES_PER_ROUND if max_cycles is None else max_cycles
    deadline = time.perf_counter() + MAX_ROUND_SECONDS
    # Cohort trees (by root) whose round is over. Trees share no quota, so one tree's
    # preemption or exhausted candidates does not stop the others.
    nodes = snapshot.cluster_queues
    tree = {name: nodes[name].root().name if name in nodes else name for name in queues}
    frozen: set[str] = set()
    settled = True
    while True:
        if cycles >= max_cycles or (cycles and time.perf_counter() > deadline):
            settled = False
            break
        # A queue that used every candidate loaded for it may have more in the database.
        exhausted = {tree[name] for name in truncated
                     if position[name] >= len(queues[name])} - frozen
        settled = settled and not exhausted
        frozen |= exhausted
        heads = []
        for name, items in queues.items():
            if tree[name] in frozen:
                continue
            shapes = parked_shapes.get(name)
            while shapes and position[name] < len(items) and not items[position[name]][
                    "preempting"] and _shape(name, items[position[name]]) in shapes:
                position[name] += 1
            if position[name] < len(items):
                row = items[position[name]]
                key = f"{row['namespace']}/{row['name']}"
                heads.append(Head(
                    workload=snapshots.pending_head(cluster_id, row, objects),
                    cluster_queue=name,
                    last_assignment=assignment[key],
                    is_preemptor=row["preempting"],
                    replaces=(row["annotations"] or {}).get(
                        jobframework.WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION) or None,
                ))
        if not heads:
            break
        if cycles:
            cycle += 1
        cycles += 1
        heads_seen += len(heads)
        result = run_cycle(snapshot.clone(), heads, now=epoch_now, policy=policy, cycle=cycle)
        changed: set[str] = set()  # trees where this cycle changed something
        for head in result.results:
            final[head.key] = head
            if head.admitted:
                assert head.admission is not None
                snapshot.add_workload(WorkloadInfo(dataclasses.replace(
                    head.workload, admission=head.admission, quota_reserved_time=epoch_now)))
                position[head.cluster_queue] += 1
                changed.add(tree[head.cluster_queue])
            elif head.parked:
                position[head.cluster_queue] += 1
                changed.add(tree[head.cluster_queue])
                if head.cluster_queue in bulk_park and head.requeue_reason in _BULK_PARK:
                    shape = _shape(head.cluster_queue, items_by_key[head.key])
                    if shape not in parked_shapes.setdefault(head.cluster_queue, set()):
                        parked_shapes[head.cluster_queue].add(shape)
                        moves.append(BulkMove(shape, head.quota_reserved_reason or "Pending",
                                              head.message))
            elif head.last_assignment != assignment[head.key]:
                changed.add(tree[head.cluster_queue])
            assignment[head.key] = head.last_assignment
        targets += result.preemption_targets
        # Stop a tree after a cycle that preempts there (victims must stop first), that
        # involves a sticky preemptor or a workload slice there, or that changed nothing
        # there (the next cycle would decide the same).
        stopped = {tree[t.preempting_cluster_queue] for t in result.preemption_targets
                   if t.preempting_cluster_queue in tree}
        stopped.update(tree[h.cluster_queue] for h in heads if h.is_preemptor or h.replaces)
        stopped.update(tree[h.cluster_queue] for h in result.results
                       if h.preemption_targets or h.replaced_slice
                       or h.requeue_reason is RequeueReason.PENDING_PREEMPTION)
        settled = settled and not stopped
        frozen |= stopped
        frozen.update(tree[h.cluster_queue] for h in heads if tree[h.cluster_queue] not in changed)
    return Rounds(results=list(final.values()), preemption_targets=targets, cycles=cycles,
                  heads=heads_seen, last_cycle=cycle, bulk_parked=moves, settled=settled)


# Requeue reasons that park every workload of the head's shape with it (Kueue
# ``SchedulingEquivalenceHashing``, on by default).
_BULK_PARK = (RequeueReason.NO_FIT, RequeueReason.PREEMPTION_NO_CANDIDATES)


@dataclass(frozen=True)
class SchedulingShape:
    """Workloads of a cluster queue that would fail as a parked head did: the same
    priority and the same pod sets (a stricter match than Kueue's scheduling hash of
    priority and pod-set shapes, so nothing is parked that Kueue would not park). Equal
    pod sets are matched by their stored hash (``Workload.pod_sets_hash``)."""

    cluster_queue: str
    priority: int
    pod_sets_hash: str


@dataclass(frozen=True)
class BulkMove:
    """A shape parked by a round, with the reason and message of the head that parked it."""

    shape: SchedulingShape
    reason: str
    message: str


def _shape(cluster_queue: str, row: Mapping[str, Any]) -> SchedulingShape:
    return SchedulingShape(cluster_queue, row["priority"], row["pod_sets_hash"])


def park_same_shapes(cluster_id: int, moves: Sequence[BulkMove],
                     cluster_queue_ids: Mapping[str, int], *, now: datetime) -> None:
    """Park the other pending workloads of each shape in its cluster queue: one row per
    shape (``ParkedShape``), which head selection skips until the queue's next requeue
    (``queue_inadmissible_workloads``) deletes it. The workloads themselves are not
    written: they keep their conditions, as Kueue's bulk move touches only its in-memory
    queue. A shape parked already keeps its first reason (one row, and no write)."""
    if not moves:
        return
    ParkedShape.objects.bulk_create(
        [ParkedShape(cluster_queue_id=cluster_queue_ids[move.shape.cluster_queue],
                     priority=move.shape.priority, pod_sets_hash=move.shape.pod_sets_hash,
                     reason=move.reason, message=move.message, parked_at=now)
         for move in moves],
        ignore_conflicts=True,
    )


def select_heads(cluster_id: int, *, now: datetime, per_queue: int = 1) -> list[dict[str, Any]]:
    """The first ``per_queue`` workloads of every cluster queue of the domain, in queue
    order, as values() rows grouped by cluster queue.

    Kueue's heap order (``cluster_queue.go``): the sticky preemptor first, then higher
    priority, then the earlier queue-order timestamp, then UID. Only admissible workloads
    that are not parked, whose LocalQueue is not stopped and whose back-off has ended are
    candidates.

    The cost does not grow with the backlog (``_head_keys``): a cluster queue's heads are
    among its local queues' first candidates, those are ranked by their sort keys, and
    only the ``per_queue`` first of each cluster queue are loaded.
    """
    taken: dict[int, int] = {}
    chosen: dict[int, tuple[Any, int]] = {}  # id: (uid, resource_version)
    queue_of: dict[int, int] = {}
    for key in sorted(_head_keys(cluster_id, now=now, per_queue=per_queue), key=_key_order):
        if taken.get(key[0], 0) < per_queue:
            taken[key[0]] = taken.get(key[0], 0) + 1
            chosen[key[2]] = (key[7], key[8])
            queue_of[key[2]] = key[0]

    def load(ids: Sequence[int]) -> Iterable[dict[str, Any]]:
        return values_rows(Workload.objects.filter(pk__in=ids), [
            *snapshots.WORKLOAD_FIELDS, "annotations", "pod_sets_hash", "admission_check_states"])

    # The cluster queue is the local queue's, as the keys read it; the rest of a row is
    # the workload's own, cached at its version (``snapshots.heads_cache``).
    names = dict(ClusterQueue.objects.filter(pk__in=set(queue_of.values()))
                 .values_list("id", "name"))
    rows = [dict(row, local_queue__cluster_queue_id=queue_of[row["id"]],
                 local_queue__cluster_queue__name=names[queue_of[row["id"]]])
            for row in snapshots.heads_cache.rows(cluster_id, chosen, load)
            if queue_of[row["id"]] in names]
    rows.sort(key=lambda r: (r["local_queue__cluster_queue_id"], row_order_key(r)))
    return rows


# How many of a local queue's first pending rows head selection reads, looking for its
# candidates, before it reads the queue by shapes instead: this many per candidate.
_SCAN_ROWS_PER_CANDIDATE = 4


def _head_keys(cluster_id: int, *, now: datetime, per_queue: int) -> list[tuple[Any, ...]]:
    """(cluster queue id, local queue id, id, preempting, priority, queued_at, created_at,
    uid, resource_version) of at least the first ``per_queue`` candidates of every running
    local queue of the domain.

    The cost does not grow with the backlog. A local queue's first rows are read in queue
    order (``workload_queue_order``), passing over those of a parked shape, but no more
    than a few times ``per_queue`` of them, and most queues find their candidates there.
    A queue that does not, and holds more rows than were read, may have thousands of
    workloads of a parked shape ahead of its candidates, too many to pass over row by row
    on every call: it is read again by its shapes (``_shape_keys``).
    """
    sql = _HeadSql(now, per_queue)
    scan = max(per_queue * _SCAN_ROWS_PER_CANDIDATE, 32)
    # SQLite, without statistics, would rather take the shapes index (one more equal
    # column) and sort every pending row of the queue.
    order_index = ("INDEXED BY workload_queue_order" if connection.vendor == "sqlite" else "")
    first_rows = (
        f"SELECT s.id FROM (SELECT r.id, r.preempting, r.priority, r.pod_sets_hash "
        f"FROM {sql.workloads} r {order_index} "
        f"WHERE r.local_queue_id = lq.id AND {sql.candidate('r')} "
        f"ORDER BY {queue_order_sql('r')} "
        f"LIMIT %s) s WHERE s.preempting OR NOT {sql.parked('s', 'lq.cluster_queue_id')} "
        "LIMIT %s"
    )
    if connection.vendor == "postgresql":
        query = (f"SELECT lq.cluster_queue_id, lq.id, {sql.columns('w')} "
                 f"FROM {sql.local_queues} lq CROSS JOIN LATERAL ({first_rows}) c "
                 f"JOIN {sql.workloads} w ON w.id = c.id "
                 "WHERE lq.cluster_id = %s AND lq.stop_policy = %s")
    else:  # SQLite runs a correlated IN once per outer row
        query = (f"SELECT lq.cluster_queue_id, lq.id, {sql.columns('w')} "
                 f"FROM {sql.local_queues} lq JOIN {sql.workloads} w ON w.id IN ({first_rows}) "
                 "WHERE lq.cluster_id = %s AND lq.stop_policy = %s")
    with connection.cursor() as cursor:
        cursor.execute(query, [*sql.candidate_params, scan, per_queue, cluster_id,
                               StopPolicy.NONE])
        keys = list(cursor.fetchall())
    found: dict[int, int] = {}
    for key in keys:
        found[key[1]] = found.get(key[1], 0) + 1
    complete = [queue for queue, count in found.items() if count >= per_queue]
    by_shape = _longer_than(cluster_id, scan, sql, exclude=complete)
    if not by_shape:
        return keys
    # Their sticky preemptors come first in queue order, so the rows read hold them.
    return ([key for key in keys if key[1] not in by_shape or key[3]]
            + _shape_keys(sorted(by_shape), sql))


# The columns of a key of ``_head_keys`` (``_HeadSql.columns``, after the two queue ids).
_key_order = tuple_order_key(("cluster_queue_id", "local_queue_id", "id", "preempting",
                              "priority", "queued_at", "created_at", "uid", "resource_version"),
                             group="cluster_queue_id")


class _HeadSql:
    """Tables, SQL fragments and parameters shared by the head queries."""

    def __init__(self, now: datetime, per_queue: int) -> None:
        quote = connection.ops.quote_name
        self.workloads = quote(Workload._meta.db_table)
        self.local_queues = quote(LocalQueue._meta.db_table)
        self.parked_shapes = quote(ParkedShape._meta.db_table)
        self.per_queue = per_queue
        # An active pending workload in the heap whose back-off, if any, has ended.
        self.candidate_params: list[Any] = [
            WorkloadPhase.PENDING, QueueState.ACTIVE, True,
            Workload._meta.get_field("requeue_at").get_db_prep_value(now, connection)]

    @staticmethod
    def candidate(w: str) -> str:
        return (f"{w}.phase = %s AND {w}.queue_state = %s AND {w}.active = %s "
                f"AND ({w}.requeue_at IS NULL OR {w}.requeue_at <= %s)")

    @staticmethod
    def columns(w: str) -> str:
        return (f"{w}.id, {w}.preempting, {w}.priority, {w}.queued_at, {w}.created_at, "
                f"{w}.uid, {w}.resource_version")

    def parked(self, w: str, cluster_queue: str) -> str:
        return (f"EXISTS (SELECT 1 FROM {self.parked_shapes} p WHERE p.cluster_queue_id = "
                f"{cluster_queue} AND p.priority = {w}.priority "
                f"AND p.pod_sets_hash = {w}.pod_sets_hash)")


def _longer_than(cluster_id: int, scan: int, sql: _HeadSql, *,
                 exclude: Sequence[int]) -> set[int]:
    """The running local queues of the domain, other than ``exclude``, with more than
    ``scan`` active pending rows, parked or backing off or not (counted on the index, no
    further than that)."""
    query = (f"SELECT lq.id FROM {sql.local_queues} lq WHERE lq.cluster_id = %s "
             "AND lq.stop_policy = %s AND (SELECT count(*) FROM (SELECT 1 FROM "
             f"{sql.workloads} r WHERE r.local_queue_id = lq.id AND r.phase = %s "
             "AND r.queue_state = %s AND r.active = %s LIMIT %s) n) > %s")
    params: list[Any] = [cluster_id, StopPolicy.NONE, *sql.candidate_params[:3], scan + 1,
                         scan]
    if exclude:
        query += f" AND lq.id NOT IN ({', '.join(['%s'] * len(exclude))})"
        params += list(exclude)
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return {queue for (queue,) in cursor.fetchall()}


def _shape_keys(local_queues: Sequence[int], sql: _HeadSql) -> list[tuple[Any, ...]]:
    """The keys of ``_head_keys`` for the first ``per_queue`` candidates of each unparked
    shape of ``local_queues`` (sticky preemptors aside), read by shape.

    A recursive query walks each queue's distinct (priority, pod sets hash) pairs on the
    ``workload_queue_shapes`` index, two seeks a pair (a loose index scan), drops the
    parked pairs, and reads the first rows of each other pair in queue order.
    """
    pending = ("{w}.phase = %s AND {w}.queue_state = %s AND {w}.active = %s "
               "AND {w}.preempting = %s")
    pending_params = [*sql.candidate_params[:3], False]

    def next_shape(queue: str, after: str, columns: str = "n.id") -> str:
        # The local queue's first shape in (priority, hash) order after ``after``: one seek.
        return (f"(SELECT {columns} FROM {sql.workloads} n WHERE n.local_queue_id = {queue} "
                "AND " + pending.format(w="n") + f"{after} "
                "ORDER BY n.priority, n.pod_sets_hash LIMIT 1)")

    queues = ", ".join(["%s"] * len(local_queues))
    if connection.vendor == "postgresql":
        # The next shape is one seek past the current one, a row-value bound on the
        # shapes index. Bounded by two seeks (the next hash of the same priority, else the
        # first of a higher one), the first ran over the partial index of pending rows,
        # which orders by hash alone, and filtered out the other priorities row by row:
        # ten times the cost of the whole walk.
        # The shape is read from the seek itself. Joined on the id the seek found, as on
        # SQLite, PostgreSQL planned the recursive step as a hash join over a scan of the
        # whole table, finished workloads included, which grows with the history.
        shape = "n.priority, n.pod_sets_hash"
        after_shape = " AND (n.priority, n.pod_sets_hash) > (s.priority, s.pod_sets_hash)"
        first = f"CROSS JOIN LATERAL {next_shape('lq.id', '', shape)} f"
        step = f"CROSS JOIN LATERAL {next_shape('s.lq_id', after_shape, shape)} f"
    else:
        # Two seeks: the next hash of the same priority, else the first of a higher one.
        # Bounded by a row value, SQLite steps over every row of the current shape.
        same_priority = " AND n.priority = s.priority AND n.pod_sets_hash > s.pod_sets_hash"
        higher_priority = " AND n.priority > s.priority"
        first = f"JOIN {sql.workloads} f ON f.id = {next_shape('lq.id', '')}"
        step = (f"JOIN {sql.workloads} f ON f.id = COALESCE("
                f"{next_shape('s.lq_id', same_priority)}, "
                f"{next_shape('s.lq_id', higher_priority)})")
    shapes = (
        "WITH RECURSIVE shapes(lq_id, cq_id, priority, pod_sets_hash) AS ("
        f"SELECT lq.id, lq.cluster_queue_id, f.priority, f.pod_sets_hash "
        f"FROM {sql.local_queues} lq {first} WHERE lq.id IN ({queues}) "
        "UNION ALL "
        f"SELECT s.lq_id, s.cq_id, f.priority, f.pod_sets_hash FROM shapes s {step})"
    )
    seeks = 1 if connection.vendor == "postgresql" else 2  # in a recursive step
    shape_params = [*pending_params, *local_queues, *pending_params * seeks]
    in_shape = (f"SELECT {{columns}} FROM {sql.workloads} c WHERE c.local_queue_id = s.lq_id "
                "AND " + pending.format(w="c") + " AND c.priority = s.priority "
                "AND c.pod_sets_hash = s.pod_sets_hash "
                "AND (c.requeue_at IS NULL OR c.requeue_at <= %s) "
                f"ORDER BY {queue_order_sql('c', after='priority')} LIMIT %s")
    in_shape_params = [*pending_params, sql.candidate_params[3], sql.per_queue]
    unparked = f"NOT {sql.parked('s', 's.cq_id')}"
    if connection.vendor == "postgresql":
        heads = (f"SELECT s.cq_id, s.lq_id, h.* FROM shapes s CROSS JOIN LATERAL "
                 f"({in_shape.format(columns=sql.columns('c'))}) h WHERE {unparked}")
    else:  # SQLite runs a correlated IN once per outer row
        heads = (f"SELECT s.cq_id, s.lq_id, {sql.columns('w')} FROM shapes s "
                 f"JOIN {sql.workloads} w ON w.id IN ({in_shape.format(columns='c.id')}) "
                 f"WHERE {unparked}")
    with connection.cursor() as cursor:
        cursor.execute(f"{shapes} {heads}", [*shape_params, *in_shape_params])
        return list(cursor.fetchall())


def _assignment_state(state: Mapping[str, Any] | None) -> AssignmentState | None:
    data = (state or {}).get("lastAssignment")
    return AssignmentState.from_dict(data) if data else None


# =========================================================================================
# Applying decisions
# =========================================================================================


def admission_to_json(admission: Admission) -> dict[str, Any]:
    """``status.admission`` in Kueue's shape, quantities as Kubernetes strings."""
    return {
        "clusterQueue": admission.cluster_queue,
        "podSetAssignments": [
            {
                "name": ps.name,
                "flavors": dict(ps.flavors),
                "resourceUsage": {
                    r: int_to_quantity(r, v) for r, v in sorted(ps.resource_usage.items())
                },
                "count": ps.count,
            }
            for ps in admission.pod_sets
        ],
    }


def required_checks(
    specs: snapshots.DomainSpecs, cluster_queue: str, admission: Admission
) -> list[str]:
    """Checks the queue requires for the assigned flavors (Kueue AdmissionChecksForWorkload)."""
    return checks_for_flavors(specs, cluster_queue,
                              {f for ps in admission.pod_sets for f in ps.flavors.values()})


def checks_for_flavors(specs: snapshots.DomainSpecs, cluster_queue: str,
                       assigned: set[str]) -> list[str]:
    """The checks of ``cluster_queue`` that apply to a workload assigned these flavors: those
    for every flavor, and those whose ``onFlavors`` names one of them."""
    names = [
        name for name, on_flavors in specs.admission_checks.get(cluster_queue, [])
        if not on_flavors or assigned.intersection(on_flavors)
    ]
    return sorted(set(names))


def sync_required_checks(cluster_id: int, *, now: datetime) -> list[str]:
    """Kueue's workload controller (``reconcileSyncAdmissionChecks``) for the domain's
    workloads holding quota and waiting for their checks: a check the cluster queue now
    requires for their flavors is added as Pending, one it no longer requires goes; with
    every remaining check Ready (or none left) the workload is admitted. Returns the
    ``namespace/name`` of the workloads changed."""
    specs = snapshots.load_domain_specs(cluster_id)
    changed: list[str] = []
    rows = Workload.objects.filter(cluster_id=cluster_id, phase=WorkloadPhase.QUOTA_RESERVED)
    for wl in rows.order_by("namespace", "name"):
        admission = wl.admission or {}
        cq = str(admission.get("clusterQueue", ""))
        if cond.is_true(wl.conditions, "Evicted") or cq not in specs.cluster_queue_ids:
            continue
        assigned = {str(f) for ps in admission.get("podSetAssignments") or ()
                    for f in (ps.get("flavors") or {}).values()}
        states = list(wl.admission_check_states or ())
        wanted = admission_checks.sync_required(states, checks_for_flavors(specs, cq, assigned),
                                                cond.timestamp(now))
        if wanted == states:
            continue
        with transaction.atomic():
            updated = Workload.objects.filter(
                pk=wl.pk, resource_version=wl.resource_version).update(
                admission_check_states=wanted, resource_version=F("resource_version") + 1)
            if updated != 1:
                continue  # changed meanwhile: the next pass looks again
            changed.append(f"{wl.namespace}/{wl.name}")
            if all(s.get("state") == "Ready" for s in wanted):
                set_admission_check_states(wl.pk, [], now=now)
    return changed


def _reservation(
    row: Mapping[str, Any],
    head: HeadResult,
    specs: snapshots.DomainSpecs,
    *,
    now: datetime,
) -> bulk.VersionedChange:
    """The write that reserves quota: QuotaReserved, and Admitted when the queue requires no
    admission checks (Kueue's SetQuotaReservation)."""
    assert head.admission is not None
    cq_name = head.cluster_queue
    checks = required_checks(specs, cq_name, head.admission)
    conditions = cond.set_condition(
        row["conditions"], "QuotaReserved", True, "QuotaReserved",
        f"Quota reserved in ClusterQueue {cq_name}", now=now,
    )
    # Evicted and Preempted are reset ("Previously: ...").
    for type_ in ("Evicted", "Preempted"):
        previous = cond.find(conditions, type_)
        if previous and previous.get("status") == "True":
            conditions = cond.set_condition(
                conditions, type_, False, "QuotaReserved",
                f"Previously: {previous.get('message', '')}", now=now,
            )
    if checks:
        phase = WorkloadPhase.QUOTA_RESERVED
        conditions = cond.set_condition(
            conditions, "Admitted", False, "UnsatisfiedAdmissionChecks",
            "The workload has not all admission checks", now=now,
        )
    else:
        phase = WorkloadPhase.ADMITTED
        conditions = cond.set_condition(
            conditions, "Admitted", True, "Admitted", "The workload is admitted", now=now,
        )
    # A check the workload held before (Pending again after an eviction) keeps its retry
    # count, which names its controller's next attempt.
    check_states = admission_checks.sync_required(row.get("admission_check_states") or (),
                                                  checks, cond.timestamp(now))
    return bulk.VersionedChange(row["id"], row["resource_version"], {
        "phase": phase,
        "admission": admission_to_json(head.admission),
        "cluster_queue": specs.cluster_queue_ids[cq_name],
        "conditions": conditions,
        "quota_reserved_at": now,
        "admission_check_states": check_states,
        "scheduler_state": {},
        "preempting": False,
        "queue_state": QueueState.ACTIVE,
    })


def _quota_reserved(
    cluster_id: int,
    row: Mapping[str, Any],
    head: HeadResult,
    change: bulk.VersionedChange,
    *,
    now: datetime,
    events: list[dict[str, Any]],
) -> None:
    """After the reservation is written: the replaced slice, events and metrics."""
    cq_name = head.cluster_queue
    if head.replaced_slice:
        _replace_slice(cluster_id, row, head, now=now)
    waited = (now - (row["queued_at"] or row["created_at"])).total_seconds()
    events.append(_event_row(cluster_id, row, "QuotaReserved",
                             f"Quota reserved in ClusterQueue {cq_name}, wait time since "
                             f"queued was {int(waited)}s", now=now))
    local_queue = (row["namespace"], row["queue_name"]) if row["queue_name"] else None
    priority_class = row.get("priority_class_name", "")
    prometheus.quota_reserved(cq_name, priority_class, waited, local_queue=local_queue,
                           cluster_id=cluster_id)
    if change.values["phase"] == WorkloadPhase.ADMITTED:
        events.append(_event_row(cluster_id, row, "Admitted",
                                 f"Admitted by ClusterQueue {cq_name}, wait time since "
                                 "reservation was 0s", now=now))
        prometheus.admitted(cq_name, priority_class, waited, 0.0, local_queue=local_queue,
                         cluster_id=cluster_id)


def _replace_slice(
    cluster_id: int, row: Mapping[str, Any], head: HeadResult, *, now: datetime,
) -> None:
    """The scale-up slice holds the quota now: the slice it replaces finishes
    (``WorkloadSliceReplaced``) in the same transaction, and its MultiKueue placement
    passes on (Kueue ``replaceWorkloadSlice``). If the old slice changed meanwhile (it was
    evicted and released), there is nothing left to replace."""
    namespace, _, name = head.replaced_slice.partition("/")
    old = Workload.objects.filter(cluster_id=cluster_id, namespace=namespace, name=name,
                                  phase__in=_RESERVED).first()
    if old is None:
        return
    message = (f"Replaced to accommodate a workload (UID: {row['uid']}, JobUID: "
               f"{(row.get('labels') or {}).get(jobframework.JOB_UID_LABEL, '')}) due to workload slice "
               "aggregation")
    old_row = {"id": old.pk, "namespace": old.namespace, "name": old.name,
               "conditions": old.conditions, "resource_version": old.resource_version}
    if not finish_without_release(cluster_id, old_row, jobframework.WORKLOAD_SLICE_REPLACED, message,
                                  now=now):
        return
    if old.cluster_name:
        Workload.objects.filter(pk=row["id"]).update(cluster_name=old.cluster_name)
    prometheus.replaced_workload_slice(head.cluster_queue, cluster_id=cluster_id)


def _record_pending(
    cluster_id: int,
    row: Mapping[str, Any],
    head: HeadResult,
    *,
    now: datetime,
    events: list[dict[str, Any]],
    writes: list[bulk.VersionedChange],
    with_shape: bool = False,
    sticky: bool,
) -> None:
    """QuotaReserved=False with the reason an operator reads, and the queue position.

    Written only when something changed, so a head that waits for many cycles costs one
    write, not one per cycle; the writes of a round go out together. A head parked
    ``with_shape`` (its shape's ``ParkedShape`` row is written in the same transaction)
    is held by that row, like the rest of its shape, and its own row keeps its queue
    state: a head that parks again with the same message after every release is then not
    written at all, nor flipped back by the requeue.
    """
    conditions = cond.set_condition(
        row["conditions"], "QuotaReserved", False, head.quota_reserved_reason or "Pending",
        head.message, now=now,
    )
    queue_state = (QueueState.INADMISSIBLE if head.parked and not with_shape
                   else QueueState.ACTIVE)
    state = dict(row["scheduler_state"] or {})
    # The flavor scan's progress is kept while flavors are left to try. A scan that
    # reached the end starts over at the first flavor, as with no state at all, so it is
    # not kept: its cycle number alone would rewrite a waiting head on every attempt.
    if head.last_assignment is not None and head.last_assignment.pending_flavors():
        state["lastAssignment"] = head.last_assignment.to_dict()
    else:
        state.pop("lastAssignment", None)
    # The sticky preemptor of a ``sticky`` (BestEffortFIFO) queue: it issued preemptions
    # (or waits for earlier ones) and keeps its queue's head until admitted. A StrictFIFO
    # queue has none: its head keeps its place by the queue order alone, so a workload
    # that comes ahead of it in that order takes the head.
    preempting = sticky and (bool(head.preemption_targets) or (
        head.requeue_reason is RequeueReason.PENDING_PREEMPTION))
    message_changed = not _same_conditions(conditions, row["conditions"])
    unchanged = (
        not message_changed
        and queue_state == row["queue_state"]
        and state == (row["scheduler_state"] or {})
        and preempting == row["preempting"]
    )
    if unchanged:
        return
    writes.append(bulk.VersionedChange(row["id"], row["resource_version"], {
        "conditions": conditions, "queue_state": queue_state, "scheduler_state": state,
        "preempting": preempting}))
    if message_changed:
        events.append(_event_row(cluster_id, row, head.quota_reserved_reason or "Pending",
                                 head.message, now=now, type_=EventType.WARNING))


def _same_conditions(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    def key(items: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                      for c in items or ())
    return key(a) == key(b)


def _issue_preemption(
    cluster_id: int,
    victim: Mapping[str, Any],
    target: PreemptionTarget,
    *,
    now: datetime,
    events: list[dict[str, Any]],
) -> bool:
    """Evicted=True (Preempted) and Preempted=True with the target's reason (Kueue
    IssuePreemptions). The victim keeps its quota until its pods are gone."""
    message = target.message
    conditions = cond.set_condition(victim["conditions"], "Evicted", True, "Preempted",
                                    message, now=now)
    conditions = cond.set_condition(conditions, "Preempted", True, target.reason, message,
                                    now=now)
    updated = Workload.objects.filter(
        pk=victim["id"], phase__in=_RESERVED, resource_version=victim["resource_version"],
    ).update(conditions=conditions, resource_version=F("resource_version") + 1)
    if updated != 1:
        return False
    events.append(_event_row(cluster_id, victim, "Preempted", message, now=now))
    prometheus.preempted(target.preempting_cluster_queue, target.reason, cluster_id=cluster_id)
    prometheus.evicted(victim["cluster_queue__name"] or "", "Preempted", target.reason,
                    victim.get("priority_class_name", ""),
                    local_queue=(victim["namespace"], victim["queue_name"]),
                    cluster_id=cluster_id)
    return True


def _event_row(
    cluster_id: int,
    row: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    now: datetime,
    type_: str = EventType.NORMAL,
) -> dict[str, Any]:
    """The Event of a workload's ``row``, as a row for ``bulk.insert_rows``: a cycle writes
    hundreds, and making each a model instance was a tenth of its work."""
    return {"cluster_id": cluster_id, "workload_id": row["id"], "object_kind": "Workload",
            "object_namespace": row["namespace"], "object_name": row["name"], "type": type_,
            "reason": reason, "message": message, "created_at": now}


# =========================================================================================
# Queue housekeeping (Kueue's queue manager, on rows)
# =========================================================================================


def release_evicted_workloads(cluster_id: int, *, now: datetime) -> int:
    """Second phase of eviction: give back the quota of evicted workloads and requeue them.

    Kueue releases quota only once the evicted workload's pods are gone. A workload whose
    job runs (not suspended) is released by its cluster's reconciler once it has stopped
    the job (``scheduling.workload.lifecycle.release_stopped``); the others are released here.
    """
    evicted = cond.filter_by_condition(
        Workload.objects.filter(cluster_id=cluster_id, phase__in=_RESERVED), "Evicted", "True"
    ).filter(Q(job__isnull=True) | Q(job__suspend=True))
    # Sorted here, not in SQL: see ``models.name_order``.
    rows = sorted(evicted.order_by().values(
        "id", "namespace", "name", "conditions", "resource_version", "cluster_queue_id",
        "active", "created_at", "requeue_at", "job_id", "admission_check_states"),
        key=lambda row: row["id"])
    if not rows:
        return 0  # no transaction: on SQLite it would take the write lock for nothing
    released = 0
    freed_queues: set[int] = set()
    with transaction.atomic(), prometheus.batch():
        for row in rows:
            if release_quota(cluster_id, row, now=now):
                released += 1
                freed_queues.add(row["cluster_queue_id"])
        if freed_queues:
            on_quota_released(cluster_id, freed_queues, now=now)
    return released


# Evictions whose workload goes back to the queue at once (Requeued=True).
_IMMEDIATE_REQUEUE = ("Preempted", "NodeFailures", "EvictedByUser")
# Evictions that requeue after a back-off (requeueAt), then ``BackoffFinished``.
_BACKOFF_REQUEUE = ("PodsReadyTimeout", "AdmissionCheck")


def release_quota(cluster_id: int, row: Mapping[str, Any], *, now: datetime) -> bool:
    """Clear the admission of an evicted workload and put it back in its queue.

    Preempted workloads are requeued at once (Requeued=True); other evictions set
    Requeued=False with the eviction reason until their back-off ends or the workload is
    reactivated (Kueue ``pkg/controller/core/workload_controller.go``); a back-off already
    over ends here. The time spent admitted adds to
    ``accumulatedPastExecutionTimeSeconds``, and the queue-order timestamp becomes the
    eviction time for PodsReadyTimeout and AdmissionCheck evictions (``requeuingStrategy
    timestamp: Eviction``).
    """
    if _replaced_on_release(cluster_id, row, now=now):
        return True
    evicted = cond.find(row["conditions"], "Evicted") or {}
    reason = evicted_reason = evicted.get("reason", "Preempted")
    evicted_at = cond.parse_timestamp(evicted.get("lastTransitionTime")) or now
    admitted = cond.find(row["conditions"], "Admitted") or {}
    extra: dict[str, Any] = {}
    if admitted.get("status") == "True":
        since = cond.parse_timestamp(admitted.get("lastTransitionTime"))
        if since is not None and reason != "DeactivatedDueToMaximumExecutionTimeExceeded":
            extra["accumulated_past_execution_time_seconds"] = F(
                "accumulated_past_execution_time_seconds") + max(int((now - since).total_seconds()), 0)
    conditions = cond.set_condition(row["conditions"], "QuotaReserved", False, "Pending",
                                    evicted.get("message", "Evicted"), now=now)
    conditions = cond.set_condition(conditions, "Admitted", False, "NoReservation",
                                    "The workload has no reservation", now=now)
    conditions = _pods_ready_not_admitted(conditions, now=now)
    immediate = reason in _IMMEDIATE_REQUEUE
    requeue_at = row.get("requeue_at")
    if reason in _BACKOFF_REQUEUE:
        extra["queued_at"] = evicted_at
        if row.get("active", True) and (requeue_at is None or requeue_at <= now):
            conditions = cond.set_condition(conditions, "Requeued", False, reason,
                                            evicted.get("message", ""), now=now)
            reason, immediate = "BackoffFinished", True
            evicted = {"message": "The workload backoff was finished"}
            extra["requeue_at"] = None
    elif row.get("created_at") is not None:
        extra["queued_at"] = row["created_at"]
    conditions = cond.set_condition(conditions, "Requeued", immediate, reason,
                                    evicted.get("message", ""), now=now)
    # A pod group missing members is not admissible until they are replaced (Kueue's
    # ``IsAdmissible``): it stays out of the heap until the condition clears.
    waiting = cond.is_true(row["conditions"], jobframework.WAITING_FOR_REPLACEMENT_PODS)
    updated = Workload.objects.filter(
        pk=row["id"], resource_version=row["resource_version"]
    ).update(
        **extra,
        phase=WorkloadPhase.PENDING,
        admission=None,
        cluster_queue=None,
        quota_reserved_at=None,
        # Kept, Pending again: a retried check's count names its controller's next attempt.
        admission_check_states=admission_checks.reset_on_eviction(
            row.get("admission_check_states") or (), cond.timestamp(now)),
        conditions=conditions,
        queue_state=(QueueState.ACTIVE if immediate and not waiting
                     else QueueState.INADMISSIBLE),
        cluster_name="",
        nominated_cluster_names=[],
        reclaimable_pods=[],
        preempting=False,
        resource_version=F("resource_version") + 1,
    )
    if updated != 1:
        return False
    requeue = "requeued" if immediate else f"waiting ({reason}) before it is requeued"
    Event.objects.create(**_event_row(
        cluster_id, row, "QuotaReleased",
        f"Quota released after eviction ({evicted_reason}); the workload is {requeue}",
        now=now))
    return True



def _pods_ready_not_admitted(conditions: list[cond.Condition], *, now: datetime,
                             ) -> list[cond.Condition]:
    """PodsReady of a workload that is no longer admitted (Kueue's job reconciler,
    ``generatePodsReadyCondition``: evicted or requeued, it is False ``WaitForStart``). Its
    next admission then waits for its pods from the start: the PodsReady timeout runs from
    that admission, not the recovery timeout from the old condition, and ready pods make
    it ``Started``. Only a workload that has the condition (it is written while
    waitForPodsReady is on) gets it."""
    previous = cond.find(conditions, "PodsReady")
    if previous is None:
        return conditions
    wanted = pods_ready_condition(
        admitted=False, all_ready=False, previous_status=previous.get("status") == "True",
        previous_reason=previous.get("reason"))
    return cond.set_condition(conditions, "PodsReady", wanted.status, wanted.reason,
                              wanted.message, now=now)


def _replaced_on_release(cluster_id: int, row: Mapping[str, Any], *, now: datetime) -> bool:
    """An evicted slice with a scale-up slice waiting to replace it is not requeued: it
    finishes (``WorkloadSliceReplaced``) and the waiting slice, which asks for the job's
    full size, is scheduled like any workload (Kueue ``normalizeActiveSlices``)."""
    if not row.get("job_id"):
        return False
    key = f"{row['namespace']}/{row['name']}"
    waiting = any(
        (annotations or {}).get(jobframework.WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION) == key
        for annotations in Workload.objects.filter(
            job_id=row["job_id"], phase=WorkloadPhase.PENDING).values_list("annotations",
                                                                            flat=True)
    )
    if not waiting:
        return False
    return finish_without_release(cluster_id, row, jobframework.WORKLOAD_SLICE_REPLACED,
                                  "Replaced to accommodate a new workload slice", now=now)


def finish_without_release(cluster_id: int, row: Mapping[str, Any], reason: str, message: str,
                           *, now: datetime) -> bool:
    """Finished=True for a workload slice, with an event, without giving quota back to its
    queue: a replaced slice's quota passes to its replacement, a waiting slice holds none.
    Conditional on the version read (``row``: id, namespace, name, conditions,
    resource_version)."""
    conditions = cond.set_condition(row["conditions"], "Finished", True, reason, message,
                                    now=now)
    updated = Workload.objects.filter(
        pk=row["id"], resource_version=row["resource_version"]
    ).exclude(phase=WorkloadPhase.FINISHED).update(
        phase=WorkloadPhase.FINISHED, conditions=conditions, preempting=False,
        queue_state=QueueState.ACTIVE, resource_version=F("resource_version") + 1)
    if updated == 1:
        Event.objects.create(**_event_row(cluster_id, row, reason, message, now=now))
    return updated == 1


# The releases of the innermost ``quota_releases_last`` block: domain -> (queue ids, the time
# of the first release).
_pending_releases: ContextVar[dict[int, tuple[set[int], datetime]] | None] = ContextVar(
    "pending_quota_releases", default=None)


@contextmanager
def quota_releases_last() -> Iterator[None]:
    """Write the quota releases made in this block when it ends, as the last writes of a
    transaction that writes many jobs and workloads (a cluster's pass, the lifecycle pass).

    A cluster queue's row is shared by every job of the queue, and every release writes it
    (``on_quota_released``). A pass that released one job's quota and then wrote another
    job's row held the queue's row while it waited for that job, which a scale of the job
    held while it waited for the queue's row to release its own quota: a deadlock. Every
    transaction writes the queue rows after its job and workload rows, and those in id
    order, so no transaction holding a queue row waits for anything but another queue row
    of a higher id. Nested blocks write with the outermost; a block left by an exception
    writes nothing (its transaction rolls back)."""
    if _pending_releases.get() is not None:
        yield
        return
    pending: dict[int, tuple[set[int], datetime]] = {}
    token = _pending_releases.set(pending)
    try:
        yield
    finally:
        _pending_releases.reset(token)
    for cluster_id, (ids, now) in sorted(pending.items()):
        on_quota_released(cluster_id, ids, now=now)


def on_quota_released(cluster_id: int, cluster_queue_ids: Iterable[int], *, now: datetime) -> None:
    """Quota came back in these queues: bump their generation (scan progress restarts) and
    give parked workloads of their cohort trees another chance (QueueInadmissibleWorkloads).

    The requeue itself is left to the domain's next admission cycle, which runs it under the
    lease before it reads anything (``requeue_due_queues``). Run here, it could land between
    a running cycle's snapshot and its writes, and that cycle would then park a shape again
    on the quota it saw before the release: its workloads would wait for the next release
    (Kueue's queueInadmissibleCycle guards the same race).

    Call it after the transaction's job and workload writes, or inside
    ``quota_releases_last``, which defers it to the end of the block."""
    ids = set(cluster_queue_ids)
    pending = _pending_releases.get()
    if pending is not None:
        pending.setdefault(cluster_id, (set(), now))[0].update(ids)
        return
    if len(ids) > 1 and connection.in_atomic_block:
        # In id order: two releases of overlapping queues never take them crosswise.
        list(ClusterQueue.objects.filter(pk__in=ids).order_by("pk")
             .select_for_update(no_key=True).values_list("pk", flat=True))
    ClusterQueue.objects.filter(pk__in=ids).update(
        allocatable_generation=F("allocatable_generation") + 1
    )
    config: dict[str, Any] = settings.KUEUEWEB
    period = max(float(config["REQUEUE_BATCH_PERIOD_SECONDS"]), 0.0)
    # Kueue's requeuer: one requeue of the tree a batch period after the first release,
    # however many releases come meanwhile; the next cycle still runs at once (the active
    # heads may fit now). Only the released queues are marked (a few rows, not a tree of
    # hundreds on every release); the requeue covers their trees and clears the marks of
    # every queue in them.
    scheduled = ClusterQueue.objects.filter(
        pk__in=ids, requeue_due_at__isnull=True,
    ).update(requeue_due_at=now + timedelta(seconds=period))
    request_admission(cluster_id)
    if scheduled and period > 0:
        # One wake-up per batch: the releases that joined it find their queues already due.
        reconcile.request_later(ADMISSION_TASK, period, cluster_id)


def requeue_due_queues(cluster_id: int, *, now: datetime) -> int:
    """Requeue the parked workloads of the queues whose batched requeue is due.

    The marks are cleared in the transaction that requeues: a requeue that fails leaves
    them for the next cycle rather than its workloads parked until another release.

    A requeue still ahead is asked for again: the wake-up that ``queue_inadmissible_workloads``
    asked for was dropped if this cycle's message was due earlier (``kueueweb.reconcile``
    sends one message per domain, the earliest)."""
    marked = list(ClusterQueue.objects.filter(cluster_id=cluster_id, requeue_due_at__isnull=False)
                  .values_list("pk", "requeue_due_at"))
    due = [pk for pk, due_at in marked if due_at is not None and due_at <= now]
    ahead = [due_at for _, due_at in marked if due_at is not None and due_at > now]
    if ahead:
        reconcile.request_later(ADMISSION_TASK, (min(ahead) - now).total_seconds(), cluster_id)
    if not due:
        return 0
    tree = cohort_tree_queue_ids(cluster_id, due)
    with transaction.atomic():
        requeued = _requeue(cluster_id, tree, now=now)
        # A release elsewhere in these trees, due later, is covered by this requeue. The
        # marks are cleared after the workloads are written, as every transaction writes
        # queue rows (``quota_releases_last``): a scale holding its job's parked slice
        # waits for the queue's row to release quota. A release that marks a queue
        # meanwhile finds nothing parked to requeue: only the cycle parks workloads.
        ClusterQueue.objects.filter(pk__in=tree, requeue_due_at__isnull=False).update(
            requeue_due_at=None)
        return requeued


def cohort_tree_queue_ids(cluster_id: int, cluster_queue_ids: Iterable[int]) -> set[int]:
    """Every cluster queue in the cohort trees (from the root) of the given queues."""
    queues = list(ClusterQueue.objects.filter(cluster_id=cluster_id)
                  .values("id", "cohort_id"))
    from scheduling.models import Cohort

    parents = dict(Cohort.objects.filter(cluster_id=cluster_id).values_list("id", "parent_id"))

    def root(cohort_id: int | None) -> int | None:
        seen: set[int] = set()
        while cohort_id is not None and parents.get(cohort_id) is not None:
            if cohort_id in seen:
                break
            seen.add(cohort_id)
            cohort_id = parents[cohort_id]
        return cohort_id

    wanted = set(cluster_queue_ids)
    roots = {root(q["cohort_id"]) for q in queues if q["id"] in wanted and q["cohort_id"]}
    return wanted | {q["id"] for q in queues if q["cohort_id"] and root(q["cohort_id"]) in roots}


def queue_inadmissible_workloads(
    cluster_id: int, cluster_queue_ids: Iterable[int] | None, *, now: datetime
) -> int:
    """Move parked workloads back to their queues' heaps (Kueue's
    QueueInadmissibleWorkloads): the queues' parked shapes are dropped, and workloads parked
    one by one become active again. None means every queue; otherwise the cohort trees of
    the given queues. Returns how many workloads were parked one by one."""
    tree = (None if cluster_queue_ids is None
            else cohort_tree_queue_ids(cluster_id, cluster_queue_ids))
    return _requeue(cluster_id, tree, now=now)


def requeue_pending_of(cluster_id: int, namespaces: Iterable[str] | None, *,
                       now: datetime) -> int:
    """What the pending workloads of ``namespaces`` (None: all of the domain) ask for may
    have changed (a LimitRange or a RuntimeClass did): their parked ones go back to their
    queues' heaps, the shapes parked in those queues with them, and a cycle looks at them
    again (Kueue's workload controller re-adds them to the queues). Returns how many
    workloads were parked one by one."""
    wanted = None if namespaces is None else set(namespaces)
    local_queues = LocalQueue.objects.filter(cluster_id=cluster_id)
    if wanted is not None:
        local_queues = local_queues.filter(namespace__in=wanted)
    queue_ids = set(local_queues.values_list("cluster_queue_id", flat=True))
    requeued = _requeue(cluster_id, queue_ids, now=now, namespaces=wanted)
    request_admission(cluster_id)
    return requeued


def _requeue(cluster_id: int, cluster_queue_ids: set[int] | None, *, now: datetime,
             namespaces: set[str] | None = None) -> int:
    """``queue_inadmissible_workloads`` for exactly these queues (None: all of the domain);
    with ``namespaces``, the workloads of those namespaces only.

    The workloads are found by their local queues on an index that leads with (local
    queue, phase, queue state), so only the parked rows are read: filtered by domain
    and phase, SQLite read every pending row and parsed its conditions, on every release."""
    local_queues = LocalQueue.objects.filter(cluster_id=cluster_id)
    shapes = ParkedShape.objects.filter(cluster_queue__cluster_id=cluster_id)
    if cluster_queue_ids is not None:
        local_queues = local_queues.filter(cluster_queue_id__in=cluster_queue_ids)
        shapes = ParkedShape.objects.filter(cluster_queue_id__in=cluster_queue_ids)
    if namespaces is not None:
        local_queues = local_queues.filter(namespace__in=namespaces)
    parked = Workload.objects.filter(
        local_queue_id__in=list(local_queues.order_by().values_list("pk", flat=True)),
        phase=WorkloadPhase.PENDING, queue_state=QueueState.INADMISSIBLE,
    ).filter(Q(requeue_at__isnull=True) | Q(requeue_at__lte=now))
    # Workloads still backing off (Requeued=False) stay parked: the lifecycle reconciler
    # flips them when their back-off ends.
    parked = cond.filter_by_condition(parked, "Requeued", "False", present=False)
    parked = cond.filter_by_condition(parked, jobframework.WAITING_FOR_REPLACEMENT_PODS, "True",
                                      present=False)
    # A workload on hold (a StatefulSet scaled to 0) stays out until its owner lifts it.
    parked = cond.filter_by_condition(parked, "QuotaReserved", "False", present=False,
                                      reason=jobframework.WORKLOAD_ON_HOLD)
    # Both kinds of parking end together (one write lock on SQLite, not one per statement).
    with transaction.atomic(savepoint=False):
        shapes.delete()
        return parked.update(queue_state=QueueState.ACTIVE,
                             resource_version=F("resource_version") + 1)


def orphaned_workloads(cluster_id: int) -> QuerySet[Workload]:
    """Pending workloads of the domain not linked to a LocalQueue.

    Found on an index that leads with the local queue (a seek to NULL), the domain checked
    on the few rows found. Given ``cluster_id = ?``, SQLite, which has no statistics, took
    the index on (domain, phase) instead and read every pending entry of the domain, on
    every cycle; ``cluster_id + 0`` cannot use an index."""
    return Workload.objects.alias(domain=F("cluster_id") + 0).filter(
        domain=cluster_id, phase=WorkloadPhase.PENDING, local_queue__isnull=True).order_by()


def resolve_local_queues(cluster_id: int, *, now: datetime) -> int:
    """Link pending workloads to their LocalQueue once it exists (Kueue queues a workload
    only when its LocalQueue exists); say why the others wait."""
    orphans = sorted(
        orphaned_workloads(cluster_id).values("id", "namespace", "queue_name", "conditions",
                                              "resource_version"),
        key=lambda row: row["id"],
    )
    if not orphans:
        return 0
    queues = {
        (lq.namespace, lq.name): lq.pk
        for lq in LocalQueue.objects.filter(
            cluster_id=cluster_id,
            namespace__in={o["namespace"] for o in orphans},
            name__in={o["queue_name"] for o in orphans},
        )
    }
    linked = 0
    for orphan in orphans:
        lq = queues.get((orphan["namespace"], orphan["queue_name"]))
        if lq is not None:
            linked += Workload.objects.filter(pk=orphan["id"], local_queue__isnull=True).update(
                local_queue_id=lq, queue_state=QueueState.ACTIVE,
                resource_version=F("resource_version") + 1,
            )
            continue
        message = (f"LocalQueue {orphan['queue_name']} doesn't exist" if orphan["queue_name"]
                   else "The workload has no queue name")
        conditions = cond.set_condition(orphan["conditions"], "QuotaReserved", False,
                                        "Inadmissible", message, now=now)
        if not _same_conditions(conditions, orphan["conditions"]):
            Workload.objects.filter(pk=orphan["id"],
                                    resource_version=orphan["resource_version"]).update(
                conditions=conditions, resource_version=F("resource_version") + 1)
    return linked


def _requeue_on_spec_change(cluster_id: int, specs: snapshots.DomainSpecs, *, now: datetime) -> None:
    """A changed quota tree (queue, cohort or flavor edited) may admit parked workloads."""
    fingerprint = specs.fingerprint
    stale = AdmissionLease.objects.filter(cluster_id=cluster_id).exclude(
        spec_fingerprint=fingerprint)
    # Read first: on most cycles nothing changed, and on SQLite a write, even of no row,
    # waits for the write lock (a finish or a new workload being written).
    if stale.exists() and stale.update(spec_fingerprint=fingerprint):
        queue_inadmissible_workloads(cluster_id, None, now=now)


def request_all_domains() -> None:
    """Ask for a cycle of every domain (the periodic safety net behind the triggers)."""
    from multicluster.models import Cluster

    for cluster_id in Cluster.objects.values_list("pk", flat=True):
        request_admission(cluster_id)


# =========================================================================================
# Admission checks: the second phase (Kueue pkg/workload/admissionchecks.go)
# =========================================================================================

CHECK_STATES = admission_checks.CHECK_STATES
# Kueue's AdmissionCheckState.podSetUpdates: at most 18, each naming a pod set.
MAX_POD_SET_UPDATES = 18
_POD_SET_UPDATE_FIELDS = ("name", "labels", "annotations", "nodeSelector", "tolerations")


class AdmissionCheckError(ValueError):
    """A check state update that names an unknown check or state; ``path`` is the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _read_pod_set_updates(value: Any, path: str, pod_sets: set[str]) -> list[dict[str, Any]]:
    """``podSetUpdates`` of a check state, checked: each names a pod set of the workload and
    holds string maps and a list of tolerations."""
    if not isinstance(value, list):
        raise AdmissionCheckError(path, "must be a list of pod set updates")
    if len(value) > MAX_POD_SET_UPDATES:
        raise AdmissionCheckError(path, f"must have at most {MAX_POD_SET_UPDATES} items")
    updates = []
    for index, raw in enumerate(value):
        item = f"{path}[{index}]"
        if not isinstance(raw, Mapping):
            raise AdmissionCheckError(item, "must be an object")
        unknown = sorted(set(raw) - set(_POD_SET_UPDATE_FIELDS))
        if unknown:
            raise AdmissionCheckError(f"{item}.{unknown[0]}", f'unknown field "{unknown[0]}"')
        if raw.get("name") not in pod_sets:
            raise AdmissionCheckError(f"{item}.name",
                                      f"must name a pod set of the workload, not {raw.get('name')!r}")
        update: dict[str, Any] = {"name": raw["name"]}
        for key in ("labels", "annotations", "nodeSelector"):
            entries = raw.get(key)
            if entries is None:
                continue
            if not isinstance(entries, Mapping) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in entries.items()):
                raise AdmissionCheckError(f"{item}.{key}", "must map strings to strings")
            update[key] = dict(entries)
        tolerations = raw.get("tolerations")
        if tolerations is not None:
            if not isinstance(tolerations, list) or not all(
                    isinstance(t, Mapping) for t in tolerations):
                raise AdmissionCheckError(f"{item}.tolerations", "must be a list of tolerations")
            update["tolerations"] = [dict(t) for t in tolerations]
        updates.append(update)
    return updates


def _apply_check_update(entry: dict[str, Any], update: Mapping[str, Any], path: str,
                        pod_sets: set[str], *, now: datetime) -> None:
    state = update.get("state")
    if state not in CHECK_STATES:
        raise AdmissionCheckError(f"{path}.state", f"must be one of {', '.join(CHECK_STATES)}")
    if "podSetUpdates" in update:
        updates = _read_pod_set_updates(update["podSetUpdates"], f"{path}.podSetUpdates",
                                        pod_sets)
        if (entry.get("state") == "Ready" and state == "Ready"
                and updates != (entry.get("podSetUpdates") or [])):
            # Kueue's webhook: the pods may already carry them.
            raise AdmissionCheckError(f"{path}.podSetUpdates",
                                      "field is immutable while the check is Ready")
        if updates:
            entry["podSetUpdates"] = updates
        else:
            entry.pop("podSetUpdates", None)
    after = update.get("requeueAfterSeconds")
    if after is not None:
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise AdmissionCheckError(f"{path}.requeueAfterSeconds",
                                      "must be a non-negative integer")
        entry["requeueAfterSeconds"] = after
    if entry.get("state") != state:
        entry["lastTransitionTime"] = cond.timestamp(now)
    entry["state"] = state
    entry["message"] = str(update.get("message", entry.get("message", "")))[:32768]


def set_admission_check_states(
    workload_id: int, updates: Sequence[Mapping[str, Any]], *, now: datetime
) -> Workload:
    """Set the state of admission checks a workload carries, as a check controller does
    (with the ``podSetUpdates`` of a Ready check and the ``requeueAfterSeconds`` of a Retry).

    All Ready → Admitted. Any Retry → evicted (reason AdmissionCheck), queued again once
    its quota is released and the longest ``requeueAfterSeconds`` has passed. Any Rejected →
    deactivated (DeactivatedDueToAdmissionCheck). Releasing the quota resets the checks to
    Pending (a Retry counting one more retry). Applied in one transaction on a locked row.
    """
    with transaction.atomic():
        wl = Workload.objects.select_for_update(no_key=True).get(pk=workload_id)
        states = [dict(s) for s in wl.admission_check_states or ()]
        by_name = {s["name"]: s for s in states}
        pod_sets = {str(ps.get("name", "main")) for ps in wl.pod_sets or ()}
        for index, update in enumerate(updates):
            path = f"status.admissionChecks[{index}]"
            name = update.get("name")
            if name not in by_name:
                raise AdmissionCheckError(
                    f"{path}.name",
                    f"workload {wl.namespace}/{wl.name} does not carry admission check {name!r}",
                )
            _apply_check_update(by_name[name], update, path, pod_sets, now=now)
        wl.admission_check_states = states
        events: list[Event] = []
        row = {"id": wl.pk, "namespace": wl.namespace, "name": wl.name}
        cluster_id: int = wl.cluster_id  # type: ignore[assignment]  # non-null foreign key
        rejected = [s["name"] for s in states if s["state"] == "Rejected"]
        retry = [s["name"] for s in states if s["state"] == "Retry"]
        evicted = cond.is_true(wl.conditions, "Evicted")
        changed = ["admission_check_states", "conditions", "phase", "active", "cluster_name",
                   "nominated_cluster_names"]
        if rejected and not evicted:
            message = f"AdmissionCheck(s) in Rejected state: {', '.join(rejected)}"
            wl.active = False
            wl.conditions = cond.set_condition(wl.conditions, "Evicted", True,
                                               "DeactivatedDueToAdmissionCheck", message, now=now)
            events.append(Event(**_event_row(cluster_id, row, "AdmissionCheckRejected", message,
                                             now=now, type_=EventType.WARNING)))
        elif retry and not evicted:
            message = f"Evicted due to AdmissionCheck(s) in Retry state: {', '.join(retry)}"
            wl.conditions = cond.set_condition(wl.conditions, "Evicted", True, "AdmissionCheck",
                                               message, now=now)
            events.append(Event(**_event_row(cluster_id, row, "EvictedDueToAdmissionCheck",
                                             message, now=now)))
            # The requeue waits for the latest retry time the checks ask for (Kueue's
            # ``NeedsRequeueAtUpdate``); it only moves forward.
            retry_at = admission_checks.retry_time(states)
            if retry_at is not None and retry_at > now and (
                    wl.requeue_at is None or wl.requeue_at < retry_at):
                wl.requeue_at = retry_at
                wl.requeue_state = {**(wl.requeue_state or {}),
                                    "requeueAt": cond.timestamp(retry_at)}
                changed += ["requeue_at", "requeue_state"]
        elif (all(s["state"] == "Ready" for s in states)
              and wl.phase == WorkloadPhase.QUOTA_RESERVED):
            wl.phase = WorkloadPhase.ADMITTED
            wl.conditions = cond.set_condition(wl.conditions, "Admitted", True, "Admitted",
                                               "The workload is admitted", now=now)
            cq = (wl.admission or {}).get("clusterQueue", "")
            events.append(Event(**_event_row(cluster_id, row, "Admitted",
                                             f"Admitted by ClusterQueue {cq}", now=now)))
            reserved_at = wl.quota_reserved_at or now
            prometheus.admitted(cq, wl.priority_class_name,
                             (now - (wl.queued_at or wl.created_at)).total_seconds(),
                             (now - reserved_at).total_seconds(),
                             local_queue=(wl.namespace, wl.queue_name) if wl.queue_name else None,
                             cluster_id=cluster_id)
        if cond.is_true(wl.conditions, "Evicted"):
            # Kueue's prepareForEviction: the MultiKueue placement goes with the admission.
            # The checks go back to Pending when the quota is released (``release_quota``):
            # until then a Retry or Rejected check keeps its controller from acting again.
            wl.cluster_name = ""
            wl.nominated_cluster_names = []
        wl.save(update_fields=changed)
        Event.objects.bulk_create(events)
        request_admission(cluster_id)
    return wl
