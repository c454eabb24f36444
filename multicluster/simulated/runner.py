"""The simulated cluster's reconciler: it runs the admitted jobs of a domain on its nodes.

One pass (``sync_cluster``) plays the parts of a Kubernetes cluster and of Kueue's job
reconciler, in order:

1. **stop** jobs whose workload is no longer admitted (evicted, deactivated, deleted):
   suspend the job, delete its running pods, then give the quota back (the second phase of
   an eviction: Kueue releases quota only once the pods are gone);
2. **start** jobs whose workload is admitted: unsuspend, create one pod group per pod set
   (the v1.35 Workload API gang, ``minCount`` = the pod set's minCount or all admitted
   pods) and its pods, with the assigned flavors' node labels as node selector and their
   tolerations;
3. **advance** pods in time: a bound pod is ready after the start delay, finishes after its
   run time (``kueueweb.io/run-seconds`` or a ``sleep`` in its command), or fails if a fault
   was injected;
4. **report** each job's status (active, ready, succeeded, failed, Complete / Failed after
   ``backoffLimit`` failures), create replacement pods as the Job controller does, and feed
   the status to the workload lifecycle (PodsReady, dynamic reclaim, Finished);
   **elastic jobs** (``kueue.x-k8s.io/elastic-job``, workload slices) run on their
   current slice (``scheduling.workload.slices.current_slice``: the admitted one while a scale-up
   slice waits) and follow ``spec.parallelism``: the Job controller keeps
   min(parallelism, pods still to succeed) pods, of which at most the slice's admitted
   count (lowered in place by a scale-down) run; the others wait with the scheduling gate
   ``kueue.x-k8s.io/elastic-job`` (Pending, SchedulingGated). When a new slice is admitted
   the gated pods are ungated (Kueue's elastic job ungater: lowest names first) and the
   job's pods and pod groups move to the new slice; on a scale-down the excess pods are
   deleted as the Job controller does (gated and unbound first, then not ready, then the
   most recently started; event ``SuccessfulDelete``). Parallelism 0 runs no pods and does
   not complete the job. The job status counts gated pods as active; the workload
   lifecycle sees the ungated ones only;
5. **schedule** waiting pods: a gang binds only when ``minCount`` of its pods fit at once,
   otherwise it waits and its attempt is rejected after the gang scheduling timeout
   (5 minutes) and retried; replacement and ungated pods are placed one by one; gated pods
   are never placed.

The pass runs in one transaction holding the cluster's row lock, so two workers never run
one cluster at once; it returns when it next needs to run (a pod becoming ready, a gang
timing out).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from kueueweb import live, reconcile
from multicluster.choices import ClusterRole, ConnectionType, PodPhase
from multicluster.core import placement
from multicluster.core.pods import run_seconds
from multicluster.models import Cluster, Node, Pod, PodGroup
from scheduling import job_reconciler as reconciler
from scheduling import jobframework
from scheduling.choices import EventType, WorkloadPhase
from scheduling.core.quantities import quantity_to_int
from scheduling.models import Event, Job, Workload, name_order
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle, slices

logger = logging.getLogger(__name__)

_ACTIVE_PHASES = (PodPhase.PENDING, PodPhase.RUNNING)
# A gated pod's PodScheduled condition (Kubernetes' pod strategy, PodReasonSchedulingGated).
GATED_REASON = "SchedulingGated"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


@dataclass(frozen=True)
class SimulationSettings:
    """How a simulated cluster behaves (``Cluster.simulation``)."""

    start_delay_seconds: float = 5.0
    default_run_seconds: float = 60.0
    # Pods start and run ``speed`` times faster than their nominal times.
    speed: float = 1.0
    gang_timeout_seconds: float = 300.0

    @classmethod
    def of(cls, cluster: Cluster) -> SimulationSettings:
        config: dict[str, Any] = settings.KUEUEWEB
        data = cluster.simulation or {}

        def number(key: str, default: float) -> float:
            try:
                value = float(data.get(key, default))
            except (TypeError, ValueError):
                return default
            return value if value >= 0 else default

        speed = number("speed", 1.0)
        return cls(
            start_delay_seconds=number("startDelaySeconds",
                                       float(config["SIMULATION_START_DELAY_SECONDS"])),
            default_run_seconds=number("defaultRunSeconds",
                                       float(config["SIMULATION_DEFAULT_RUN_SECONDS"])),
            speed=speed if speed > 0 else 1.0,
            gang_timeout_seconds=float(config["GANG_SCHEDULING_TIMEOUT_SECONDS"]),
        )

    def scaled(self, seconds: float) -> timedelta:
        return timedelta(seconds=seconds / self.speed)


@dataclass
class SyncOutcome:
    started: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    bound: int = 0
    finished: list[str] = field(default_factory=list)
    # Pods that became ready or terminated in this pass.
    advanced: int = 0
    next_wakeup: datetime | None = None
    # Another pass of the cluster was running: this one did nothing and asked again.
    busy: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.started or self.stopped or self.bound or self.finished or self.advanced)

    def due(self, moment: datetime | None) -> None:
        if moment is not None and (self.next_wakeup is None or moment < self.next_wakeup):
            self.next_wakeup = moment


# How soon a pass that found another one running asks again: about a pass's length, so
# that it runs once the other committed, without spinning through the queue meanwhile.
BUSY_RETRY_SECONDS = 1.0


def sync_cluster(cluster_id: int, *, now: datetime) -> SyncOutcome:
    """One pass of the simulated cluster ``cluster_id`` (a no-op for other connections)."""
    outcome = SyncOutcome()
    with transaction.atomic():
        # One pass per cluster at a time. FOR NO KEY UPDATE, not FOR UPDATE: every
        # transaction that inserts an event, job, workload or pod of this cluster takes FOR
        # KEY SHARE on its row (the foreign-key check), which FOR UPDATE would make wait for
        # the whole pass, and deadlock with a pass that then waits for that transaction.
        # SKIP LOCKED: a pass that waited for the running one held a worker process
        # meanwhile, and under load every worker process waited for the one pass while the
        # other reconcilers' messages piled up in the queue. It asks again instead, since
        # the running pass may have read before the change it was asked for.
        cluster = (Cluster.objects.select_for_update(no_key=True, skip_locked=True)
                   .filter(pk=cluster_id).first())
        if cluster is None:
            if Cluster.objects.filter(pk=cluster_id).exists():
                outcome.busy = True
                reconcile.request_cluster_sync(cluster_id, BUSY_RETRY_SECONDS)
            return outcome
        if cluster.connection_type != ConnectionType.SIMULATED:
            return outcome
        sim = SimulationSettings.of(cluster)
        events: list[Event] = []
        # The quota its stopped and finished jobs give back is written after every job row
        # of the pass: a scale holds its job's row while it writes the queue's.
        with admission.quota_releases_last():
            _stop_jobs(cluster, now=now, events=events, outcome=outcome)
            _start_jobs(cluster, sim, now=now, events=events, outcome=outcome)
            outcome.advanced = _advance_pods(cluster, now=now)
            _report(cluster, now=now, events=events, outcome=outcome)
            _schedule(cluster, sim, now=now, events=events, outcome=outcome)
        Event.objects.bulk_create(events)
        if events or outcome.changed:
            live.notify(cluster_id)
        if outcome.changed and cluster.role == ClusterRole.WORKER:
            # A MultiKueue worker: the hub copies job status and finishes its workload.
            admission.request_dispatch()
    return outcome


# =========================================================================================
# Jobs
# =========================================================================================


def _stop_jobs(cluster: Cluster, *, now: datetime, events: list[Event],
               outcome: SyncOutcome) -> None:
    """Suspend running jobs whose workload is not admitted any more; once their pods are
    gone, the workload's quota is released."""
    running = Job.objects.filter(cluster=cluster, suspend=False).prefetch_related("workloads")
    for job in running:
        if reconciler.is_finished(job):
            continue
        workloads = list(job.workloads.all())
        wl = slices.current_slice(workloads)
        if reconciler.should_run(wl) or reconciler.placed_on_worker(wl):
            # Running here, or a MultiKueue hub job whose status mirrors its worker's.
            continue
        Pod.objects.filter(job=job, phase__in=_ACTIVE_PHASES).delete()
        PodGroup.objects.filter(job=job).delete()
        reconciler.mark_suspended(job, now=now)
        outcome.stopped.append(f"{job.namespace}/{job.name}")
        reconciler.release_stopped(job, workloads, wl, now=now, events=events)


def _start_jobs(cluster: Cluster, sim: SimulationSettings, *, now: datetime,
                events: list[Event], outcome: SyncOutcome) -> None:
    """Unsuspend the jobs of admitted workloads and create their pod groups and pods."""
    admitted = Workload.objects.filter(
        cluster=cluster, phase=WorkloadPhase.ADMITTED, active=True, cluster_name="",
        job__isnull=False, job__suspend=True,
    ).select_related("job").order_by()
    for wl in sorted(admitted, key=name_order):  # sorted here: see name_order
        job = wl.job
        assert job is not None
        if cond.is_true(wl.conditions, "Evicted") or reconciler.is_finished(job):
            continue
        controller = reconciler.integration_of(job).simulated
        if controller is None:
            continue  # a kind the simulated cluster cannot run
        elastic_job = reconciler.is_elastic(job)
        if elastic_job:
            current = slices.current_slice(job.workloads.all())
            if current is None or current.pk != wl.pk:
                continue  # an older slice still admitted: the job runs on the newest
        pod_sets = {ps.get("name", "main"): ps for ps in wl.pod_sets}
        for info in reconciler.pod_set_infos(cluster.pk, wl, elastic_job=elastic_job):
            pod_set = pod_sets.get(info.name, {})
            remaining = controller.first_pods(job.manifest, job.status or {}, info, pod_set,
                                              elastic=elastic_job)
            if remaining <= 0:
                continue
            min_count = pod_set.get("minCount") or info.count
            group = PodGroup.objects.create(
                cluster=cluster, workload=wl, job=job, pod_set=info.name,
                min_count=min(int(min_count), remaining), created_at=now, waiting_since=now,
            )
            _create_pods(cluster, job, wl, pod_set, remaining, group=group, info=info, now=now)
        reconciler.mark_started(job, wl, now=now, events=events)
        outcome.started.append(f"{job.namespace}/{job.name}")


def _create_pods(cluster: Cluster, job: Job, wl: Workload, pod_set: Mapping[str, Any],
                 count: int, *, group: PodGroup | None, info: jobframework.PodSetInfo,
                 now: datetime, gates: Sequence[str] = ()) -> list[Pod]:
    """Create ``count`` pods of ``pod_set`` with the admission's placement ``info`` (with
    scheduling ``gates``: SchedulingGated)."""
    template = pod_set.get("template") or {}
    pod_spec = template.get("spec") or {}
    selector = {**(pod_spec.get("nodeSelector") or {}), **info.node_selector}
    all_tolerations = list(pod_spec.get("tolerations") or []) + list(info.tolerations)
    requests = jobframework.pod_set_requests(pod_set)
    taken = set(Pod.objects.filter(cluster=cluster, namespace=job.namespace,
                                   name__startswith=f"{job.name}-").values_list("name", flat=True))
    pods = []
    for _ in range(count):
        name = jobframework.generate_name(f"{job.name}-")
        while name in taken:
            name = jobframework.generate_name(f"{job.name}-")
        taken.add(name)
        pods.append(Pod(
            cluster=cluster, namespace=job.namespace, name=name, job=job, workload=wl,
            group=group, pod_set=pod_set.get("name", "main"), requests=requests,
            node_selector=selector, tolerations=all_tolerations, created_at=now,
            scheduling_gates=list(gates), reason=GATED_REASON if gates else "",
            message=GATED_MESSAGE if gates else "",
        ))
    return Pod.objects.bulk_create(pods)


# =========================================================================================
# Pods
# =========================================================================================


def _advance_pods(cluster: Cluster, *, now: datetime) -> int:
    """Bound pods become ready at their start time and finish at their end time; returns
    how many pods changed."""
    starting = Pod.objects.filter(cluster=cluster, phase=PodPhase.PENDING, ready_at__lte=now
                                  ).exclude(node_name="")
    changed = starting.filter(fail=True).update(
        phase=PodPhase.FAILED, reason="Error", finished_at=now,
        message="The container exited with a non-zero code")
    changed += starting.filter(fail=False).update(phase=PodPhase.RUNNING, ready=True, reason="")
    changed += Pod.objects.filter(cluster=cluster, phase=PodPhase.RUNNING, finish_at__lte=now
                                  ).update(phase=PodPhase.SUCCEEDED, ready=False,
                                           reason="Completed", finished_at=now)
    return changed


def _node_infos(cluster: Cluster) -> list[placement.NodeInfo]:
    infos = []
    for node in Node.objects.filter(cluster=cluster).order_by("name"):
        allocatable: dict[str, int] = {}
        for resource, quantity in (node.capacity or {}).items():
            try:
                allocatable[resource] = quantity_to_int(resource, quantity)
            except ValueError:
                logger.warning("node %s: bad capacity %s=%r", node.name, resource, quantity)
        taints = tuple(
            placement.Taint(str(t.get("key", "")), str(t.get("value", "")),
                            str(t.get("effect", "NoSchedule")))
            for t in node.taints or () if isinstance(t, Mapping)
        )
        infos.append(placement.NodeInfo(
            name=node.name, allocatable=allocatable, labels=dict(node.labels or {}),
            taints=taints, ready=node.ready, unschedulable=node.unschedulable,
        ))
    return infos


def _pod_info(pod: Pod) -> placement.PodInfo:
    requests = {r: quantity_to_int(r, q) for r, q in (pod.requests or {}).items()}
    tolerations = tuple(
        placement.Toleration(
            key=str(t.get("key", "")), operator=str(t.get("operator", "Equal")),
            value=str(t.get("value", "")), effect=str(t.get("effect", "")),
        )
        for t in pod.tolerations or () if isinstance(t, Mapping)
    )
    return placement.PodInfo(name=pod.name, requests=requests,
                             node_selector=dict(pod.node_selector or {}), tolerations=tolerations)


def _used(cluster: Cluster) -> dict[str, dict[str, int]]:
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    bound = Pod.objects.filter(cluster=cluster, phase__in=_ACTIVE_PHASES).exclude(
        node_name="").values_list("node_name", "requests")
    for node_name, requests in bound:
        for resource, quantity in (requests or {}).items():
            used[node_name][resource] += quantity_to_int(resource, quantity)
        used[node_name][placement.PODS] += 1
    return used


def _bind(pods: Iterable[Pod], bindings: Mapping[str, str], sim: SimulationSettings, *,
          now: datetime, free: dict[str, dict[str, int]]) -> int:
    placed = []
    for pod in pods:
        node_name = bindings.get(pod.name)
        if node_name is None:
            continue
        job = pod.job
        template = _template_of(pod)
        run = run_seconds(template, (job.manifest.get("metadata") or {}).get("annotations")
                          if job else None, default=sim.default_run_seconds)
        pod.node_name = node_name
        pod.scheduled_at = now
        pod.ready_at = now + sim.scaled(sim.start_delay_seconds)
        pod.finish_at = pod.ready_at + sim.scaled(run)
        placed.append(pod)
        room = free[node_name]
        for resource, quantity in (pod.requests or {}).items():
            room[resource] = room.get(resource, 0) - quantity_to_int(resource, quantity)
        if placement.PODS in room:
            room[placement.PODS] -= 1
    Pod.objects.bulk_update(placed, ["node_name", "scheduled_at", "ready_at", "finish_at"])
    return len(placed)


def _template_of(pod: Pod) -> Mapping[str, Any]:
    wl = pod.workload
    for ps in (wl.pod_sets if wl is not None else ()) or ():
        if ps.get("name", "main") == pod.pod_set:
            return ps.get("template") or {}
    return {}


def _schedule(cluster: Cluster, sim: SimulationSettings, *, now: datetime,
              events: list[Event], outcome: SyncOutcome) -> None:
    """Place waiting pods: unbound gangs first (oldest first), then single pods. Pods with
    scheduling gates wait until the gates are removed."""
    waiting = [pod for pod in Pod.objects.filter(cluster=cluster, phase=PodPhase.PENDING,
                                                 node_name="")
               .select_related("group", "job", "workload").order_by("created_at", "id")
               if not pod.gated]
    if not waiting:
        return
    nodes = _node_infos(cluster)
    free = placement.free_resources(nodes, _used(cluster))
    groups: dict[int, list[Pod]] = defaultdict(list)
    singles: list[Pod] = []
    for pod in waiting:
        if pod.group is not None and pod.group.bound_at is None:
            groups[pod.group.pk].append(pod)
        else:
            singles.append(pod)
    for pods in groups.values():
        group = pods[0].group
        assert group is not None
        result = placement.place_group(nodes, [_pod_info(p) for p in pods],
                                       min_count=min(group.min_count, len(pods)), free=free)
        if result.bound:
            outcome.bound += _bind(pods, result.bindings, sim, now=now, free=free)
            PodGroup.objects.filter(pk=group.pk).update(bound_at=now, waiting_since=None,
                                                        message="")
            continue
        message = (f"pod group {group.pod_set}: {result.fitted} of {group.min_count} pods fit "
                   f"at once (minCount {group.min_count}); {result.message(len(nodes))}")
        since = group.waiting_since or now
        timeout = timedelta(seconds=sim.gang_timeout_seconds)
        changes: dict[str, Any] = {"message": message, "waiting_since": since}
        if now - since >= timeout:
            changes.update(waiting_since=now, timeouts=group.timeouts + 1)
            events.append(lifecycle.workload_event(
                group.workload, "FailedScheduling",
                f"Gang scheduling timed out after {int(timeout.total_seconds())}s: {message}; "
                "the pods go back to the scheduling queue", now=now, type_=EventType.WARNING))
            since = now
        PodGroup.objects.filter(pk=group.pk).update(**changes)
        outcome.due(since + timeout)
    for pod in singles:
        result = placement.place_group(nodes, [_pod_info(pod)], min_count=1, free=free)
        if result.bound:
            outcome.bound += _bind([pod], result.bindings, sim, now=now, free=free)


# =========================================================================================
# Job status
# =========================================================================================


class _JobPods:
    """The pods of one running job, as its kind's simulated controller sees them
    (``jobframework.SimulatedPods``)."""

    def __init__(self, cluster: Cluster, job: Job, wl: Workload, pods: list[Pod], *,
                 now: datetime, events: list[Event]) -> None:
        self.cluster, self.job, self.wl = cluster, job, wl
        self.pods = pods
        self.now, self.events = now, events
        self._infos: dict[str, jobframework.PodSetInfo] | None = None

    def all(self) -> list[jobframework.SimulatedPod]:
        return list(self.pods)

    def create(self, count: int, *, gates: Sequence[str] = (),
               pod_set: str | None = None) -> list[jobframework.SimulatedPod]:
        if self._infos is None:
            infos = reconciler.pod_set_infos(self.cluster.pk, self.wl, elastic_job=False)
            self._infos = {info.name: info for info in infos}
        pod_sets = self.wl.pod_sets or [{"name": "main"}]
        chosen = next((ps for ps in pod_sets if ps.get("name", "main") == pod_set),
                      pod_sets[0])
        name = chosen.get("name", "main")
        info = self._infos.get(name) or jobframework.PodSetInfo(name, 0)
        created = _create_pods(self.cluster, self.job, self.wl, chosen, count, group=None,
                               info=info, now=self.now, gates=gates)
        self.pods.extend(created)
        return list(created)

    def delete(self, pods: Sequence[jobframework.SimulatedPod], *, reason: str = "") -> None:
        doomed = {pod.name for pod in pods}
        Pod.objects.filter(job=self.job, name__in=doomed).delete()
        self.pods = [p for p in self.pods if p.name not in doomed]
        if reason:
            self.events.extend(lifecycle.workload_event(
                self.wl, reason, f"Deleted pod: {pod.name}", now=self.now, kind=self.job.kind)
                for pod in pods)

    def ungate(self, pods: Sequence[jobframework.SimulatedPod]) -> None:
        names = {pod.name for pod in pods}
        opened = [p for p in self.pods if p.name in names]
        for pod in opened:
            pod.scheduling_gates, pod.reason, pod.message = [], "", ""
        Pod.objects.bulk_update(opened, ["scheduling_gates", "reason", "message"])


def _report(cluster: Cluster, *, now: datetime, events: list[Event],
            outcome: SyncOutcome) -> None:
    """Let each running job's kind controller replace, scale and finish its pods (elastic
    jobs: follow the admitted slice), store the job's status, and tell the workload
    lifecycle."""
    running = list(Job.objects.filter(cluster=cluster, suspend=False)
                   .prefetch_related("workloads"))
    if not running:
        return
    pods: dict[int | None, list[Pod]] = defaultdict(list)
    for pod in Pod.objects.filter(job__in=running).order_by("created_at", "id"):
        pods[pod.job_id].append(pod)
    for pending in Pod.objects.filter(cluster=cluster, phase__in=_ACTIVE_PHASES).filter(
            Q(ready_at__gt=now) | Q(finish_at__gt=now)).values_list("ready_at", "finish_at"):
        ready_at, finish_at = pending
        outcome.due(ready_at if ready_at and ready_at > now else finish_at)
    for job in running:
        if reconciler.is_finished(job):
            continue
        wl = slices.current_slice(job.workloads.all())
        if not reconciler.should_run(wl):
            continue
        assert wl is not None
        controller = reconciler.integration_of(job).simulated
        if controller is None:
            continue
        elastic_job = reconciler.is_elastic(job)
        if elastic_job:
            _follow_slice(job, wl)
        status, report = controller.reconcile(
            job.manifest, job.status or {},
            _JobPods(cluster, job, wl, pods[job.pk], now=now, events=events),
            admitted=reconciler.admitted_pods(wl, elastic_job=False),
            allowed=reconciler.admitted_pods(wl, elastic_job=elastic_job),
            elastic=elastic_job, now=now)
        if status != job.status:
            job.status = status
            job.save(update_fields=["status", "resource_version", "updated_at"])
        if not lifecycle.sync_job_status(wl, report, now=now, events=events):
            outcome.due(now)
        elif report.finished:
            outcome.finished.append(f"{job.namespace}/{job.name}")


def _follow_slice(job: Job, wl: Workload) -> None:
    """After a slice replacement the job's pods and pod groups belong to the new slice."""
    Pod.objects.filter(job=job).exclude(workload=wl).update(workload=wl)
    PodGroup.objects.filter(job=job).exclude(workload=wl).update(workload=wl)


def _sync_period() -> float:
    config: dict[str, Any] = settings.KUEUEWEB
    return float(config["CLUSTER_SYNC_INTERVAL_SECONDS"])


def sync_and_reschedule(cluster_id: int, *, now: datetime) -> SyncOutcome:
    """``sync_cluster``, then a wake-up at its next deadline when that comes before the
    periodic pass would (so pods start and finish on time without piling up timers)."""
    outcome = sync_cluster(cluster_id, now=now)
    if outcome.next_wakeup is not None:
        delay = (outcome.next_wakeup - now).total_seconds()
        if delay < _sync_period():
            with transaction.atomic():
                reconcile.request_cluster_sync(cluster_id, delay)
    return outcome

