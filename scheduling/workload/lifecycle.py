"""The workload lifecycle reconciler: what happens to a workload after admission.

Kueue mapping (``pkg/controller/core/workload_controller.go`` and
``pkg/controller/jobframework/reconciler.go``; ``docs/kueue-mapping.md``):

- ``run_lifecycle`` is the workload controller's time-based part, for one domain:
  deactivation (``spec.active=false`` evicts), the PodsReady timeout (eviction with
  ``PodsReadyTimeout`` and a requeue back-off, or deactivation past ``backoffLimitCount``),
  the maximum execution time (deactivation), the end of a back-off (``BackoffFinished``),
  reactivation (``Reactivated``), the stop policies of queues (``HoldAndDrain``), and the
  admission checks of workloads holding quota kept to their cluster queue's
  (``admission.sync_required_checks``).
- ``sync_job_status`` is the job reconciler's part, fed by the cluster a job runs on (the
  simulated cluster, or a Kubernetes cluster): the PodsReady condition, dynamic reclaim
  (``reclaimablePods``) and finishing.
- ``release_stopped`` is the second phase of an eviction, called by the cluster once the
  job's pods are gone: the quota is given back and the workload requeued.

Every function takes ``now``; decisions come from ``scheduling.core.lifecycle``. Writes are
conditional on the version read, so a workload changed meanwhile is looked at again on the
next pass instead of being overwritten; each transition appends an Event.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q

from kueueweb import live, reconcile
from scheduling.cache.snapshots import epoch as _epoch
from scheduling.choices import EventType, QueueState, StopPolicy, WorkloadPhase
from scheduling.core import admission_checks
from scheduling.core import lifecycle as core
from scheduling.jobframework.constants import WAITING_FOR_REPLACEMENT_PODS, WORKLOAD_ON_HOLD
from scheduling.jobframework.interface import JobReport
from scheduling.metrics import prometheus
from scheduling.models import ClusterQueue, Event, LocalQueue, Workload, name_order
from scheduling.scheduler import admission, bulk
from scheduling.workload import conditions as cond

logger = logging.getLogger(__name__)

LIFECYCLE_TASK = reconcile.LIFECYCLE_TASK
_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)

# Requeued=False reasons whose back-off ends by time (requeueAt).
_BACKOFF_REASONS = ("PodsReadyTimeout", "AdmissionCheck")
DEACTIVATED = "Deactivated"


def wait_for_pods_ready() -> core.WaitForPodsReady:
    """Kueue's waitForPodsReady configuration, from settings."""
    config: dict[str, Any] = settings.KUEUEWEB
    limit = int(config["REQUEUE_BACKOFF_LIMIT_COUNT"])
    recovery = int(config["PODS_READY_RECOVERY_TIMEOUT_SECONDS"])
    return core.WaitForPodsReady(
        enabled=bool(config["WAIT_FOR_PODS_READY"]),
        timeout_seconds=float(config["PODS_READY_TIMEOUT_SECONDS"]),
        recovery_timeout_seconds=float(recovery) if recovery > 0 else None,
        backoff_base_seconds=float(config["REQUEUE_BACKOFF_BASE_SECONDS"]),
        backoff_max_seconds=float(config["REQUEUE_BACKOFF_MAX_SECONDS"]),
        backoff_limit_count=limit if limit >= 0 else None,
    )


def request_lifecycle(cluster_id: int, delay_seconds: float = 0.0) -> None:
    reconcile.request_later(LIFECYCLE_TASK, delay_seconds, cluster_id)


@dataclass
class LifecycleOutcome:
    evicted: list[str] = field(default_factory=list)
    deactivated: list[str] = field(default_factory=list)
    requeued: list[str] = field(default_factory=list)
    # Workloads holding quota whose admission checks followed their cluster queue's.
    checks_synced: list[str] = field(default_factory=list)
    # The next moment something here becomes due (a timeout, the end of a back-off).
    next_deadline: datetime | None = None

    def due(self, moment: datetime) -> None:
        if self.next_deadline is None or moment < self.next_deadline:
            self.next_deadline = moment


# =========================================================================================
# Writing a workload
# =========================================================================================


def _save(wl: Workload, **changes: Any) -> bool:
    """Write ``changes`` if the workload is still at the version read; update ``wl``."""
    updated = Workload.objects.filter(pk=wl.pk, resource_version=wl.resource_version).update(
        **changes, resource_version=F("resource_version") + 1
    )
    if updated != 1:
        return False
    for name, value in changes.items():
        setattr(wl, name, value)
    wl.resource_version += 1
    return True


def gang_scheduling(*, cluster_id: int, attempts: int = 0, successes: int = 0,
                    timeouts: int = 0) -> None:
    """What a cluster's scheduler did with the gangs of the workloads' pods: attempts
    begun, gangs bound, attempts timed out (``prometheus.gang_scheduling``). The cluster
    backends report here, beside the rest of what the workloads' pods do."""
    prometheus.gang_scheduling(cluster_id=cluster_id, attempts=attempts, successes=successes,
                               timeouts=timeouts)


def workload_event(
    wl: Workload, reason: str, message: str, *, now: datetime, type_: str = EventType.NORMAL,
    kind: str = "Workload",
) -> Event:
    """An Event in the workload's history (``kind`` = the job's kind, e.g. ``"Job"``, for
    what happens to its job)."""
    return Event(**workload_event_row(wl, reason, message, now=now, type_=type_, kind=kind))


def workload_event_row(
    wl: Workload, reason: str, message: str, *, now: datetime, type_: str = EventType.NORMAL,
    kind: str = "Workload",
) -> dict[str, Any]:
    """``workload_event`` as a row for ``bulk.insert_rows``, for paths that write hundreds."""
    return {"cluster_id": domain_of(wl), "workload_id": wl.pk, "object_kind": kind,
            "object_namespace": wl.namespace,
            "object_name": wl.job.name if kind != "Workload" and wl.job is not None else wl.name,
            "type": type_, "reason": reason, "message": message, "created_at": now}


def domain_of(wl: Workload) -> int:
    """The workload's scheduling domain (its cluster's id; never null once saved)."""
    assert wl.cluster_id is not None
    return int(wl.cluster_id)


def _local_queue_key(wl: Workload) -> tuple[str, str] | None:
    return (wl.namespace, wl.queue_name) if wl.queue_name else None


def _cluster_queue_name(wl: Workload) -> str:
    return str((wl.admission or {}).get("clusterQueue", ""))


def _admitted_since(wl: Workload) -> datetime | None:
    return cond.transition_time(wl.conditions, "Admitted") if cond.is_true(
        wl.conditions, "Admitted") else None


def _from_epoch(seconds: float, like: datetime) -> datetime:
    return datetime.fromtimestamp(seconds, tz=like.tzinfo)


# =========================================================================================
# Eviction (Kueue pkg/workload/evict)
# =========================================================================================


def evict(
    wl: Workload,
    reason: str,
    message: str,
    *,
    now: datetime,
    events: list[Event],
    underlying_cause: str = "",
    **changes: Any,
) -> bool:
    """Set Evicted=True with ``reason``: the first phase of an eviction.

    As Kueue's ``prepareForEviction``: the MultiKueue placement is cleared, admission
    checks go back to Pending, the eviction is counted in ``schedulingStats``. The quota is
    held until the job's pods are gone (``release_stopped``), except for an inactive
    workload, which holds none. ``changes`` are written in the same update.
    """
    conditions = cond.set_condition(wl.conditions, "Evicted", True, reason, message, now=now)
    checks = admission_checks.reset_on_eviction(wl.admission_check_states or (),
                                                cond.timestamp(now))
    stats = dict(wl.scheduling_stats or {})
    evictions = [dict(e) for e in stats.get("evictions", ())]
    for entry in evictions:
        if entry.get("reason") == reason and entry.get("underlyingCause", "") == underlying_cause:
            entry["count"] = int(entry.get("count", 0)) + 1
            first_time = False
            break
    else:
        evictions.append({"reason": reason, "underlyingCause": underlying_cause, "count": 1})
        first_time = True
    stats["evictions"] = evictions
    if not _save(wl, conditions=conditions, admission_check_states=checks,
                 scheduling_stats=stats, cluster_name="", nominated_cluster_names=[], **changes):
        return False
    events.append(workload_event(wl, f"EvictedDueTo{reason}", message, now=now))
    prometheus.evicted(_cluster_queue_name(wl), reason, underlying_cause, wl.priority_class_name,
                    first_time=first_time, local_queue=_local_queue_key(wl),
                    cluster_id=domain_of(wl))
    return True


def release_stopped(wl: Workload, *, now: datetime) -> bool:
    """The evicted workload's job has stopped and its pods are gone: give back its quota
    and requeue it (Kueue's job reconciler after ``Stop``)."""
    row = {"id": wl.pk, "conditions": wl.conditions, "resource_version": wl.resource_version,
           "cluster_queue_id": wl.cluster_queue_id, "active": wl.active,
           "created_at": wl.created_at, "requeue_at": wl.requeue_at,
           "namespace": wl.namespace, "name": wl.name, "job_id": wl.job_id,
           "admission_check_states": wl.admission_check_states}
    if not admission.release_quota(domain_of(wl), row, now=now):
        return False
    if wl.cluster_queue_id is not None:
        admission.on_quota_released(domain_of(wl), [wl.cluster_queue_id], now=now)
    request_lifecycle(domain_of(wl))
    return True


def set_waiting_for_replacement(wl: Workload, absent: int, *, now: datetime) -> bool:
    """Kueue's ``WaitingForReplacementPods`` on a group's Workload: True while ``absent``
    members are gone or failed (the eviction's reason while evicted, else ``PodsFailed``),
    False once none is. A pending group waiting for replacements stays out of its queue
    (``admission.release_quota``); once they exist it goes back and a cycle is asked for.
    True when the workload changed."""
    current = cond.find(wl.conditions, WAITING_FOR_REPLACEMENT_PODS)
    if absent > 0:
        evicted = cond.find(wl.conditions, "Evicted")
        if evicted is not None and evicted.get("status") == "True":
            reason, message = str(evicted.get("reason")), str(evicted.get("message", ""))
        else:
            reason, message = "PodsFailed", "Some Failed pods need replacement"
        # Not admissible meanwhile (Kueue's ``IsAdmissible``): a pending one leaves its queue.
        park = wl.phase == WorkloadPhase.PENDING and wl.queue_state != QueueState.INADMISSIBLE
        if not park and current is not None and (
                current.get("status"), current.get("reason"),
                current.get("message")) == ("True", reason, message):
            return False
        absent_changes: dict[str, Any] = {"conditions": cond.set_condition(
            wl.conditions, WAITING_FOR_REPLACEMENT_PODS, True, reason, message, now=now)}
        if park:
            absent_changes["queue_state"] = QueueState.INADMISSIBLE
        return _save(wl, **absent_changes)
    if current is None or current.get("status") != "True":
        return False
    changes: dict[str, Any] = {"conditions": cond.set_condition(
        wl.conditions, WAITING_FOR_REPLACEMENT_PODS, False, "PodsReady",
        "No pods need replacement", now=now)}
    pending = wl.phase == WorkloadPhase.PENDING and not is_on_hold(wl)
    if pending:
        changes["queue_state"] = QueueState.ACTIVE
    if not _save(wl, **changes):
        return False
    if pending:
        admission.request_admission(domain_of(wl))
    return True


def is_on_hold(wl: Workload) -> bool:
    """Kueue's ``IsOnHold``: ``QuotaReserved=False`` with reason ``OnHold``."""
    held = cond.find(wl.conditions, "QuotaReserved")
    return held is not None and (held.get("status"), held.get("reason")) == (
        "False", WORKLOAD_ON_HOLD)


def put_on_hold(wl: Workload, message: str, *, now: datetime) -> bool:
    """Release the quota ``wl`` holds on its owner's behalf and keep it out of its queue
    (Kueue's ``UnsetQuotaReservationWithCondition`` with reason ``OnHold``: a StatefulSet
    scaled to 0). Unlike an eviction there is nothing to stop first and no requeue; unlike
    a deactivation the workload stays active, so lifting the hold queues it again. True
    when the workload changed."""
    if is_on_hold(wl) or wl.phase not in (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED):
        return False
    freed = wl.cluster_queue_id
    conditions = cond.set_condition(wl.conditions, "QuotaReserved", False, WORKLOAD_ON_HOLD,
                                    message, now=now)
    conditions = cond.set_condition(conditions, "Admitted", False, "NoReservation",
                                    "The workload has no reservation", now=now)
    if not _save(wl, phase=WorkloadPhase.PENDING, admission=None, cluster_queue=None,
                 quota_reserved_at=None, admission_check_states=[], conditions=conditions,
                 queue_state=QueueState.INADMISSIBLE, reclaimable_pods=[], preempting=False,
                 cluster_name="", nominated_cluster_names=[]):
        return False
    if freed is not None:
        admission.on_quota_released(domain_of(wl), [freed], now=now)
    return True


def clear_on_hold(wl: Workload, *, now: datetime) -> bool:
    """Lift the hold (Kueue's ``clearOnHold``): ``QuotaReserved=False`` becomes ``Pending``
    and the workload goes back to its queue, where it waits for quota as any other. True
    when the workload changed."""
    if not is_on_hold(wl):
        return False
    conditions = cond.set_condition(
        wl.conditions, "QuotaReserved", False, "Pending",
        "Workload no longer on hold; waiting for quota reservation", now=now)
    waiting = cond.is_true(conditions, WAITING_FOR_REPLACEMENT_PODS)
    if not _save(wl, conditions=conditions,
                 queue_state=QueueState.INADMISSIBLE if waiting else QueueState.ACTIVE):
        return False
    admission.request_admission(domain_of(wl))
    return True


# =========================================================================================
# The periodic pass
# =========================================================================================


def run_lifecycle(cluster_id: int, *, now: datetime, rng: random.Random | None = None) -> LifecycleOutcome:
    """One pass of the workload controller's time-based rules over a domain."""
    config = wait_for_pods_ready()
    rng = rng or random.Random()
    outcome = LifecycleOutcome()
    with transaction.atomic():
        events: list[Event] = []
        # Queue rows after workload rows (``admission.quota_releases_last``).
        with admission.quota_releases_last():
            _evict_inactive(cluster_id, now=now, events=events, outcome=outcome)
            _evict_stopped_queues(cluster_id, now=now, events=events, outcome=outcome)
            _check_admitted(cluster_id, config, now=now, rng=rng, events=events,
                            outcome=outcome)
            _requeue_pending(cluster_id, now=now, events=events, outcome=outcome)
        # A cluster queue's checks changed since a reservation: the workload follows.
        outcome.checks_synced = admission.sync_required_checks(cluster_id, now=now)
        Event.objects.bulk_create(events)
        if outcome.checks_synced:
            reconcile.request_cluster_sync(cluster_id)  # an admitted job starts
        if outcome.evicted or outcome.deactivated or outcome.requeued:
            admission.request_admission(cluster_id)
        elif events:
            live.notify(cluster_id)
    return outcome


def _reserving(cluster_id: int) -> Any:
    return Workload.objects.filter(cluster_id=cluster_id, phase__in=_RESERVED).select_related("job")


def _not_evicted(queryset: Any) -> list[Workload]:
    """The workloads of ``queryset`` not being evicted, in name order (sorted here: see
    ``models.name_order``)."""
    return sorted((wl for wl in queryset.order_by() if not cond.is_true(wl.conditions, "Evicted")),
                  key=name_order)


def _evict_inactive(cluster_id: int, *, now: datetime, events: list[Event],
                    outcome: LifecycleOutcome) -> None:
    """``active=false`` on a workload holding quota: evict it (``Deactivated``, or
    ``DeactivatedDueTo<X>`` when Kueue itself asked for it) and clear its requeue state."""
    for wl in _not_evicted(_reserving(cluster_id).filter(active=False)):
        target = cond.find(wl.conditions, "DeactivationTarget")
        if target and target.get("status") == "True":
            reason = f"{DEACTIVATED}DueTo{target.get('reason', '')}"
            message = f"The workload is deactivated due to {target.get('message', '')}"
        else:
            reason, message = DEACTIVATED, "The workload is deactivated"
        wl.conditions = cond.remove(wl.conditions, "DeactivationTarget")
        if evict(wl, reason, message, now=now, events=events, requeue_state=None,
                 requeue_at=None):
            outcome.deactivated.append(f"{wl.namespace}/{wl.name}")


def _deactivate(wl: Workload, reason: str, message: str, *, now: datetime, events: list[Event],
                outcome: LifecycleOutcome, **changes: Any) -> None:
    """Kueue sets DeactivationTarget, then ``active=false``, then evicts; the end state is
    written at once here: inactive, evicted ``DeactivatedDueTo<reason>``."""
    if evict(wl, f"{DEACTIVATED}DueTo{reason}", f"The workload is deactivated due to {message}",
             now=now, events=events, active=False, requeue_state=None, requeue_at=None,
             **changes):
        events.append(workload_event(wl, reason, message, now=now, type_=EventType.WARNING))
        outcome.deactivated.append(f"{wl.namespace}/{wl.name}")
        if wl.cluster_queue_id is not None:
            admission.on_quota_released(domain_of(wl), [wl.cluster_queue_id], now=now)


def _evict_stopped_queues(cluster_id: int, *, now: datetime, events: list[Event],
                          outcome: LifecycleOutcome) -> None:
    """Stop policies: ``HoldAndDrain`` evicts what the queue admitted; ``Hold`` cancels
    reservations that are not admitted yet (Kueue ``pkg/controller/core/workload_controller.go``)."""
    stopped_cqs = dict(ClusterQueue.objects.filter(cluster_id=cluster_id).exclude(
        stop_policy=StopPolicy.NONE).values_list("pk", "stop_policy"))
    stopped_lqs = dict(LocalQueue.objects.filter(cluster_id=cluster_id).exclude(
        stop_policy=StopPolicy.NONE).values_list("pk", "stop_policy"))
    if not stopped_cqs and not stopped_lqs:
        return
    candidates = _reserving(cluster_id).filter(active=True).filter(
        Q(cluster_queue_id__in=stopped_cqs) | Q(local_queue_id__in=stopped_lqs))
    for wl in _not_evicted(candidates):
        for policy, reason, queue in (
            (stopped_cqs.get(wl.cluster_queue_id), "ClusterQueueStopped",  # type: ignore[arg-type]
             f"ClusterQueue {_cluster_queue_name(wl)} is stopped"),
            (stopped_lqs.get(wl.local_queue_id), "LocalQueueStopped",  # type: ignore[arg-type]
             f"LocalQueue {wl.queue_name} is stopped"),
        ):
            drain = policy == StopPolicy.HOLD_AND_DRAIN
            hold = policy == StopPolicy.HOLD and wl.phase == WorkloadPhase.QUOTA_RESERVED
            if drain or hold:
                if evict(wl, reason, queue, now=now, events=events):
                    outcome.evicted.append(f"{wl.namespace}/{wl.name}")
                break


def _check_admitted(cluster_id: int, config: core.WaitForPodsReady, *, now: datetime,
                    rng: random.Random, events: list[Event], outcome: LifecycleOutcome) -> None:
    """Maximum execution time and the PodsReady timeout of admitted, active workloads."""
    rows = Workload.objects.filter(cluster_id=cluster_id, phase=WorkloadPhase.ADMITTED,
                                   active=True)
    # Only rows with a clock running are loaded: a maximum execution time, or (when Kueue
    # waits for pods) pods not ready yet. A busy domain's running workloads are mostly neither.
    timed = Q(maximum_execution_time_seconds__gt=0)
    if config.enabled:
        rows, pods_ready = cond.condition_q(rows, "PodsReady", "True")
        rows = rows.filter(timed | ~pods_ready)
    else:
        rows = rows.filter(timed)
    admitted = _not_evicted(rows.select_related("job"))
    for wl in admitted:
        since = _admitted_since(wl)
        if since is None:
            continue
        key = f"{wl.namespace}/{wl.name}"
        if wl.maximum_execution_time_seconds:
            remaining = core.remaining_execution_seconds(
                wl.maximum_execution_time_seconds, wl.accumulated_past_execution_time_seconds,
                admitted_since=_epoch(since), now=_epoch(now))
            if remaining <= 0:
                _deactivate(wl, "MaximumExecutionTimeExceeded",
                            "exceeding the maximum execution time", now=now, events=events,
                            outcome=outcome, accumulated_past_execution_time_seconds=0)
                continue
            outcome.due(now + timedelta(seconds=remaining))
        ready = cond.find(wl.conditions, "PodsReady")
        deadline = core.pods_ready_deadline(
            config, admitted_since=_epoch(since),
            pods_ready_status=(ready.get("status") == "True") if ready else None,
            pods_ready_reason=ready.get("reason") if ready else None,
            pods_ready_since=_epoch(cond.parse_timestamp(ready.get("lastTransitionTime")))
            if ready else None,
        )
        if deadline is None:
            continue
        if _epoch(now) < deadline.at:
            outcome.due(_from_epoch(deadline.at, now))
            continue
        state = wl.requeue_state or {}
        previous_count = state.get("count")
        if core.exceeds_backoff_limit(previous_count, config.backoff_limit_count):
            _deactivate(wl, "RequeuingLimitExceeded",
                        "exceeding the maximum number of re-queuing retries", now=now,
                        events=events, outcome=outcome)
            continue
        requeue = core.next_requeue_state(
            previous_count, _epoch(cond.parse_timestamp(state.get("requeueAt")))
            if state.get("requeueAt") else None, now=_epoch(now), base=config.backoff_base_seconds,
            cap=config.backoff_max_seconds, jitter=rng.random())
        requeue_at = _from_epoch(requeue.requeue_at, now)
        if evict(wl, "PodsReadyTimeout", core.pods_ready_timeout_message(wl.namespace, wl.name),
                 now=now, events=events, underlying_cause=deadline.underlying_cause,
                 requeue_state={"count": requeue.count, "requeueAt": cond.timestamp(requeue_at)},
                 requeue_at=requeue_at):
            outcome.evicted.append(key)
            outcome.due(requeue_at)


def _requeue_pending(cluster_id: int, *, now: datetime, events: list[Event],
                     outcome: LifecycleOutcome) -> None:
    """Pending workloads parked with Requeued=False go back to their queue: at the end of
    their back-off (``BackoffFinished``), when reactivated (``Reactivated``, requeue state
    reset) or when their stopped queue restarts."""
    parked = cond.filter_by_condition(
        Workload.objects.filter(cluster_id=cluster_id, phase=WorkloadPhase.PENDING),
        "Requeued", "False")
    stopped_cqs = set(ClusterQueue.objects.filter(cluster_id=cluster_id).exclude(
        stop_policy=StopPolicy.NONE).values_list("name", flat=True))
    stopped_lqs = set(LocalQueue.objects.filter(cluster_id=cluster_id).exclude(
        stop_policy=StopPolicy.NONE).values_list("namespace", "name"))
    for wl in sorted(parked.select_related("local_queue__cluster_queue").order_by(),
                     key=name_order):
        if cond.is_true(wl.conditions, WAITING_FOR_REPLACEMENT_PODS):
            continue  # back in the queue once its missing members are replaced
        requeued = cond.find(wl.conditions, "Requeued") or {}
        reason = str(requeued.get("reason", ""))
        new_reason, message = "", ""
        changes: dict[str, Any] = {}
        if reason.startswith(DEACTIVATED):
            if wl.active:
                new_reason, message = "Reactivated", "The workload was reactivated"
                changes = {"requeue_state": None, "requeue_at": None}
        elif reason in _BACKOFF_REASONS:
            if wl.active and (wl.requeue_at is None or wl.requeue_at <= now):
                new_reason = "BackoffFinished"
                message = "The workload backoff was finished"
                changes = {"requeue_at": None}
                if wl.requeue_state:
                    changes["requeue_state"] = {"count": wl.requeue_state.get("count", 0)}
            elif wl.requeue_at is not None:
                outcome.due(wl.requeue_at)
        elif reason == "ClusterQueueStopped":
            cq = wl.local_queue.cluster_queue.name if wl.local_queue else None
            if cq is not None and cq not in stopped_cqs:
                new_reason, message = "ClusterQueueRestarted", "The ClusterQueue was restarted"
        elif reason == "LocalQueueStopped" and (wl.namespace, wl.queue_name) not in stopped_lqs:
            new_reason, message = "LocalQueueRestarted", "The LocalQueue was restarted"
        if not new_reason:
            continue
        conditions = cond.set_condition(wl.conditions, "Requeued", True, new_reason, message,
                                        now=now)
        if _save(wl, conditions=conditions, queue_state=QueueState.ACTIVE, **changes):
            events.append(workload_event(wl, new_reason, message, now=now))
            outcome.requeued.append(f"{wl.namespace}/{wl.name}")


# =========================================================================================
# Reports from the cluster a job runs on (the job reconciler's side)
# =========================================================================================




def sync_job_status(wl: Workload, report: JobReport, *, now: datetime,
                    events: list[Event]) -> bool:
    """Bring the workload in line with its job: PodsReady, reclaimable pods, Finished.

    Returns False when the workload changed meanwhile (the caller tries again later).
    """
    if wl.phase == WorkloadPhase.FINISHED:
        return True
    if report.finished is not None:
        return finish(wl, *report.finished, now=now, events=events)
    changes: dict[str, Any] = {}
    conditions = wl.conditions
    config = wait_for_pods_ready()
    became_ready = False
    if config.enabled:
        previous = cond.find(conditions, "PodsReady")
        wanted = core.pods_ready_condition(
            admitted=wl.phase == WorkloadPhase.ADMITTED, all_ready=report.all_ready,
            previous_status=(previous.get("status") == "True") if previous else None,
            previous_reason=previous.get("reason") if previous else None,
        )
        conditions = cond.set_condition(conditions, "PodsReady", wanted.status, wanted.reason,
                                        wanted.message, now=now)
        if conditions != wl.conditions:
            changes["conditions"] = conditions
            became_ready = wanted.status and not (previous and previous.get("status") == "True")
    # As the job's kind counts them (Kueue's JobWithReclaimablePods), in pod-set order.
    names = [str(ps.get("name", "")) for ps in wl.pod_sets or ()]
    reclaimable_pods = [{"name": name, "count": int(report.reclaimable_pods[name])}
                        for name in names if report.reclaimable_pods.get(name)]
    reclaim_changed = reclaimable_pods != (wl.reclaimable_pods or [])
    if reclaim_changed:
        changes["reclaimable_pods"] = reclaimable_pods
    if not changes:
        return True
    if not _save(wl, **changes):
        return False
    if became_ready:
        events.append(workload_event(wl, "PodsReady", core.PODS_READY_MESSAGE, now=now))
        since = _admitted_since(wl)
        waited = (now - (wl.queued_at or wl.created_at)).total_seconds()
        after_admission = (now - since).total_seconds() if since else 0.0
        prometheus.pods_ready(_cluster_queue_name(wl), wl.priority_class_name, waited,
                           after_admission, local_queue=_local_queue_key(wl),
                           cluster_id=domain_of(wl))
    if reclaim_changed and wl.cluster_queue_id is not None and wl.phase in _RESERVED:
        freed = ", ".join(f"{rp['count']} pod(s) of pod set {rp['name']}"
                          for rp in reclaimable_pods) or "0 pod(s)"
        events.append(workload_event(wl, "ReclaimablePods", f"{freed} no longer need quota",
                                     now=now))
        admission.on_quota_released(domain_of(wl), [wl.cluster_queue_id], now=now)
    return True


def finish(wl: Workload, reason: str, message: str, *, now: datetime,
           events: list[Event], siblings: bool = True,
           freed: set[int] | None = None) -> bool:
    """Finished=True: the workload leaves its queue and its quota is released at once.

    The job's other workloads that are not finished (an elastic job's scale-up slice still
    waiting for quota) finish with it: they must not be admitted for a job that is done.
    With ``freed``, the caller releases the quota of the queues added to it, once for many
    workloads (``finish_workloads``).
    """
    was = _Finishing.of(wl)
    if not _save(wl, **_finished_values(wl, reason, message, now=now)):
        return False
    _after_finish(wl, was, reason, message, now=now, events=events, siblings=siblings,
                  freed=freed)
    return True


@dataclass(frozen=True)
class _Finishing:
    """What ``finish`` needs to know of a workload as it was before it finished."""

    queue_id: int | None  # the cluster queue whose quota it held
    since: datetime | None  # admitted since

    @classmethod
    def of(cls, wl: Workload) -> _Finishing:
        return cls(wl.cluster_queue_id if wl.phase in _RESERVED else None, _admitted_since(wl))


def _finished_values(wl: Workload, reason: str, message: str, *, now: datetime) -> dict[str, Any]:
    return {"phase": WorkloadPhase.FINISHED, "queue_state": QueueState.ACTIVE,
            "preempting": False,
            "conditions": cond.set_condition(wl.conditions, "Finished", True, reason, message,
                                             now=now)}


def _finished_event(wl: Workload, reason: str, message: str, *, now: datetime,
                    ) -> dict[str, Any]:
    return workload_event_row(wl, "Finished", message or reason, now=now,
                              type_=EventType.NORMAL if reason == "Succeeded"
                              else EventType.WARNING)


def _after_finish(wl: Workload, was: _Finishing, reason: str, message: str, *, now: datetime,
                  events: list[Event], siblings: bool, freed: set[int] | None,
                  event: bool = True) -> None:
    """The event (unless the caller writes it: ``event``), the metrics, the quota release
    and the job's other workloads, once the workload is written finished."""
    if event:
        events.append(Event(**_finished_event(wl, reason, message, now=now)))
    executed = wl.accumulated_past_execution_time_seconds + (
        core.admitted_seconds(_epoch(was.since), _epoch(now)) if was.since else 0)
    prometheus.finished(_cluster_queue_name(wl), wl.priority_class_name, float(executed),
                     local_queue=_local_queue_key(wl), cluster_id=domain_of(wl))
    if was.queue_id is not None:
        if freed is not None:
            freed.add(was.queue_id)
        else:
            admission.on_quota_released(domain_of(wl), [was.queue_id], now=now)
    if siblings and wl.job_id is not None:
        for other in Workload.objects.filter(job_id=wl.job_id).exclude(
                phase=WorkloadPhase.FINISHED).exclude(pk=wl.pk):
            finish(other, reason, message, now=now, events=events, siblings=False, freed=freed)


# What finishing a workload reads of it (``_finished_values``, ``_after_finish``): a job
# controller finishes hundreds at a time, and the other JSON columns (pod sets, labels,
# scheduler state ...) would be parsed for nothing.
_FINISHING_FIELDS = (
    "id", "cluster_id", "namespace", "name", "queue_name", "priority_class_name", "admission",
    "conditions", "accumulated_past_execution_time_seconds", "job_id", "cluster_queue_id",
    "phase", "resource_version",
)


def finish_workloads(
    cluster_id: int, versions: Mapping[int, int], reason: str, message: str, *, now: datetime,
) -> list[int]:
    """Finish many workloads of a domain at once, as their jobs ended: one transaction, one
    batched write (``bulk.update_versioned``), one quota release per queue, events in one
    INSERT. ``versions`` maps a workload id to the ``resource_version`` the caller saw it
    at; a workload that changed since (evicted, preempted) is left alone. Returns the ids
    finished.

    The rows are read, and their new values computed, before the transaction: the write
    is conditional on the version read, so a workload that changed in between is left
    alone as one that changed before. On SQLite a transaction holds the database's only
    write lock from its start, and the admission cycle waited for these reads."""
    done: list[int] = []
    finished: list[dict[str, Any]] = []  # their Finished events, as rows
    events: list[Event] = []  # those of their jobs' other workloads
    freed: set[int] = set()
    # Read by primary key alone, the domain and the phase checked here: asked of the
    # database, a table without statistics yet was read through the domain's index, every
    # finished workload of the domain with it, to find the few that finish now.
    workloads = [wl for wl in bulk.load(Workload, versions, _FINISHING_FIELDS)
                 if wl.cluster_id == cluster_id and wl.phase != WorkloadPhase.FINISHED
                 and wl.resource_version == versions[wl.pk]]
    changes = {wl.pk: _finished_values(wl, reason, message, now=now) for wl in workloads}
    with transaction.atomic(), prometheus.batch():
        written = bulk.update_versioned(Workload, [
            bulk.VersionedChange(wl.pk, wl.resource_version, changes[wl.pk]) for wl in workloads])
        for wl in workloads:
            if wl.pk not in written:
                continue
            was = _Finishing.of(wl)
            for name, value in changes[wl.pk].items():
                setattr(wl, name, value)
            wl.resource_version += 1
            finished.append(_finished_event(wl, reason, message, now=now))
            _after_finish(wl, was, reason, message, now=now, events=events, siblings=True,
                          freed=freed, event=False)
            done.append(wl.pk)
        bulk.insert_rows(Event, finished)
        bulk.insert(Event, events)
        if freed:
            admission.on_quota_released(cluster_id, freed, now=now)
    return done


def set_active(wl: Workload, active: bool, *, now: datetime) -> None:
    """After a user changed ``spec.active``: deactivation releases the quota at once (the
    quota cache counts only active workloads) and the lifecycle evicts; reactivation
    requeues. Called by the services after the change is saved."""
    if not active and wl.phase in _RESERVED and wl.cluster_queue_id is not None:
        admission.on_quota_released(domain_of(wl), [wl.cluster_queue_id], now=now)
    request_lifecycle(domain_of(wl))


def run_and_reschedule(cluster_id: int, *, now: datetime) -> LifecycleOutcome:
    """``run_lifecycle``, then a wake-up at its next deadline when that comes before the
    periodic pass would."""
    outcome = run_lifecycle(cluster_id, now=now)
    if outcome.next_deadline is not None:
        config: dict[str, Any] = settings.KUEUEWEB
        delay = (outcome.next_deadline - now).total_seconds()
        if delay < float(config["LIFECYCLE_INTERVAL_SECONDS"]):
            with transaction.atomic():
                request_lifecycle(cluster_id, delay)
    return outcome


def request_all_domains() -> None:
    from multicluster.models import Cluster

    with transaction.atomic():
        for cluster_id in Cluster.objects.values_list("pk", flat=True):
            request_lifecycle(cluster_id)
