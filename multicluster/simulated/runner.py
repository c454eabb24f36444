"""The simulated cluster's reconciler: it runs the admitted jobs of a domain on its nodes.

One pass (``sync_cluster``) plays the parts of a Kubernetes cluster and of Kueue's job
reconciler, in order:

1. **advance** pods in time: a bound pod is ready after the start delay, finishes after its
   run time (``kueueweb.io/run-seconds`` or a ``sleep`` in its command), or fails if a fault
   was injected;
2. **reconcile** each job with ``scheduling.job_reconciler.reconcile`` on this cluster as its
   backend (``SimulatedCluster``):

   - **stop** a job whose workload is no longer admitted (evicted, deactivated, deleted):
     suspending it deletes its running pods, then the quota is given back (the second phase
     of an eviction: Kueue releases quota only once the pods are gone);
   - **start** a job whose workload is admitted: one pod group per pod set (the v1.35
     Workload API gang, ``minCount`` = the pod set's minCount or all admitted pods) and its
     pods, with the assigned flavors' node labels as node selector and their tolerations;
   - **run** it: the kind's simulated controller replaces, scales and finishes its pods
     and reports its status (active, ready, succeeded, failed, Complete / Failed after
     ``backoffLimit`` failures), which goes to the workload lifecycle (PodsReady, dynamic
     reclaim, Finished). **Elastic jobs** (``kueue.x-k8s.io/elastic-job``, workload slices)
     run on their current slice (``scheduling.workload.slices.current_slice``: the admitted
     one while a scale-up slice waits) and follow ``spec.parallelism``: the Job controller
     keeps min(parallelism, pods still to succeed) pods, of which at most the slice's
     admitted count (lowered in place by a scale-down) run; the others wait with the
     scheduling gate ``kueue.x-k8s.io/elastic-job`` (Pending, SchedulingGated). When a new
     slice is admitted the gated pods are ungated (Kueue's elastic job ungater: lowest names
     first) and the job's pods and pod groups move to the new slice; on a scale-down the
     excess pods are deleted as the Job controller does (gated and unbound first, then not
     ready, then the most recently started; event ``SuccessfulDelete``). Parallelism 0 runs
     no pods and does not complete the job. The job status counts gated pods as active; the
     workload lifecycle sees the ungated ones only;
3. **schedule** waiting pods: a gang binds only when ``minCount`` of its pods fit at once,
   otherwise it waits and its attempt is rejected after the gang scheduling timeout
   (5 minutes) and retried; replacement and ungated pods are placed one by one; gated pods
   are never placed. A pod whose spec names a ``scheduling.k8s.io/v1alpha1`` Workload
   (``spec.workloadRef``; applied as a manifest, ``GangWorkload``) is scheduled by that
   Workload's pod group instead, whatever its job: it waits (kube-scheduler's PreEnqueue)
   until the Workload and its pod group exist, with an event saying which is missing, and
   for a gang until ``minCount`` pods of the group (per ``podGroupReplicaKey``) exist; a
   ``basic`` group's pods are placed one by one.

Each gang attempt, bound gang and timed-out attempt is counted in the gang scheduling
metrics (``scheduling.metrics.prometheus.gang_scheduling``).

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
from multicluster import provisioning
from multicluster.choices import ClusterRole, ConnectionType, PodPhase
from multicluster.core import placement
from multicluster.core.pods import run_seconds
from multicluster.models import Cluster, GangWorkload, Node, Pod, PodGroup
from multicluster.simulated import provisioner
from scheduling import job_reconciler as reconciler
from scheduling import jobframework
from scheduling.choices import EventType, WorkloadPhase
from scheduling.core.patch import merge_patch
from scheduling.core.quantities import quantity_to_int
from scheduling.models import Event, Job, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle
from scheduling.workload import resources as workload_resources

logger = logging.getLogger(__name__)

_ACTIVE_PHASES = (PodPhase.PENDING, PodPhase.RUNNING)
# A gated pod's PodScheduled condition (Kubernetes' pod strategy, PodReasonSchedulingGated).
GATED_REASON = "SchedulingGated"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"
# A pod no node has room for: its PodScheduled condition (PodReasonUnschedulable) and the
# scheduler's event, both with kube-scheduler's "0/3 nodes are available: ..." message.
UNSCHEDULABLE_REASON = "Unschedulable"
FAILED_SCHEDULING = "FailedScheduling"
# FailedScheduling events written for one unplaced gang in one pass: its other pods still
# say why in their condition. client-go's event correlator likewise stops recording
# separate similar events after ten.
MAX_FAILED_SCHEDULING_EVENTS = 10


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
    # Gang scheduling: attempts begun, gangs bound, attempts timed out.
    gang_attempts: int = 0
    gang_successes: int = 0
    gang_timeouts: int = 0

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
            outcome.advanced = _advance_pods(cluster, now=now)
            # The autoscaler answers requests first, so that a check made Ready now lets
            # its job start in this pass.
            outcome.due(provisioner.provision(cluster, now=now, scale=sim.speed))
            provisioning.sync_provisioning(
                cluster.pk, provisioner.SimulatedRequests(cluster, now=now), now=now)
            _reconcile_jobs(cluster, now=now, events=events, outcome=outcome)
            _schedule(cluster, sim, now=now, events=events, outcome=outcome)
        Event.objects.bulk_create(events)
        lifecycle.gang_scheduling(cluster_id=cluster_id, attempts=outcome.gang_attempts,
                                   successes=outcome.gang_successes,
                                   timeouts=outcome.gang_timeouts)
        if events or outcome.changed:
            live.notify(cluster_id)
        if outcome.changed and cluster.role == ClusterRole.WORKER:
            # A MultiKueue worker: the hub copies job status and finishes its workload.
            admission.request_dispatch()
    return outcome


# =========================================================================================
# Jobs
# =========================================================================================


class SimulatedCluster:
    """The simulated cluster as a ``job_reconciler.ClusterBackend``: it runs the stored job
    itself (never a copy), as pods of the ``Pod`` table that its kind's simulated
    controller (``GenericJob.simulated``) creates, replaces, gates and deletes."""

    location = ""

    def __init__(self, cluster: Cluster, *, now: datetime, events: list[Event]) -> None:
        self.cluster, self.cluster_id = cluster, cluster.pk
        self.now, self.events = now, events
        self.pods: dict[int, list[Pod]] = defaultdict(list)
        self.gang_attempts = 0

    def load_pods(self, jobs: Sequence[Job]) -> None:
        """Read the pods of ``jobs`` (one query for a pass)."""
        for job in jobs:
            self.pods[job.pk] = []
        for pod in Pod.objects.filter(job__in=jobs).order_by("created_at", "id"):
            assert pod.job_id is not None
            self.pods[pod.job_id].append(pod)

    def create(self, job: Job, wl: Workload, infos: Sequence[jobframework.PodSetInfo]) -> bool:
        """One pod group per pod set (the v1.35 Workload API gang, ``minCount`` = the pod
        set's minCount or all its first pods) and its pods."""
        controller = reconciler.integration_of(job).simulated
        if controller is None:
            return False  # a kind the simulated cluster cannot run
        elastic_job = reconciler.is_elastic(job)
        pod_sets = {ps.get("name", "main"): ps for ps in wl.pod_sets}
        for info in infos:
            pod_set = pod_sets.get(info.name, {})
            remaining = controller.first_pods(job.manifest, job.status or {}, info, pod_set,
                                              elastic=elastic_job)
            if remaining <= 0:
                continue
            if workload_ref_of(pod_set):
                # Scheduled by the Workload it names, not by a gang of its own pod set.
                _create_pods(self.cluster, job, wl, pod_set, remaining, group=None, info=info,
                             now=self.now)
                continue
            min_count = int(pod_set.get("minCount") or info.count)
            group = PodGroup.objects.filter(workload=wl, pod_set=info.name).first()
            if group is None:
                group = PodGroup.objects.create(
                    cluster=self.cluster, workload=wl, job=job, pod_set=info.name,
                    min_count=min(min_count, remaining), created_at=self.now,
                    waiting_since=self.now,
                )
                self.gang_attempts += 1
            else:
                # Several objects run one pod set (the members of a pod group): their pods
                # join its gang, which binds once the whole pod set is there.
                group.min_count = min(min_count, group.min_count + remaining)
                group.save(update_fields=["min_count"])
            _create_pods(self.cluster, job, wl, pod_set, remaining, group=group, info=info,
                         now=self.now)
        self.pods.pop(job.pk, None)  # read again when the job is next reconciled
        return True

    def read(self, job: Job, wl: Workload | None, *, fetch: bool = True,
             full: bool = False) -> reconciler.ClusterObject | None:
        """The stored job and its pods. For a job that runs, its kind's controller acts on
        its pods first (replacing, scaling and finishing them) and tells what they say;
        an elastic job's pods and pod groups follow its current slice."""
        if job.suspend:
            return None
        if job.pk not in self.pods:
            self.load_pods([job])
        pods = self.pods[job.pk]
        integration = reconciler.integration_of(job)
        controller = integration.simulated
        if (wl is None or not reconciler.should_run(wl) or controller is None
                or integration.finished(job.status) is not None):
            return self._as_is(job, pods)
        elastic_job = reconciler.is_elastic(job)
        if elastic_job:
            _follow_slice(job, wl)
        status, report = controller.reconcile(
            job.manifest, job.status or {},
            _JobPods(self.cluster, job, wl, pods, now=self.now, events=self.events),
            admitted=reconciler.admitted_pods(wl, elastic_job=False),
            allowed=reconciler.admitted_pods(wl, elastic_job=elastic_job),
            elastic=elastic_job, now=self.now)
        return reconciler.ClusterObject(suspended=False, status=status, report=report)

    @staticmethod
    def _as_is(job: Job, pods: Sequence[Pod]) -> reconciler.ClusterObject:
        active = [p for p in pods if p.phase in _ACTIVE_PHASES]
        return reconciler.ClusterObject(
            suspended=job.suspend, status=job.status or {}, active_pods=len(active),
            ready_pods=sum(1 for p in active if p.ready))

    def patch(self, job: Job, patch: Mapping[str, Any]) -> reconciler.ClusterObject | None:
        """The kind's controller acts on the patched spec: suspending deletes the job's
        active pods and its pod groups. The stored job is written by the reconciler."""
        patched = merge_patch(job.manifest, patch)
        if not reconciler.integration_of(job).is_suspended(patched):
            return self._as_is(job, self.pods.get(job.pk, []))
        Pod.objects.filter(job=job, phase__in=_ACTIVE_PHASES).delete()
        PodGroup.objects.filter(job=job).delete()
        self.pods.pop(job.pk, None)
        return reconciler.ClusterObject(suspended=True, status=job.status or {})

    def runs_copy(self, job: Job) -> bool:
        return False

    def suspend(self, job: Job) -> reconciler.ClusterObject | None:
        return self.patch(job, reconciler.integration_of(job).suspend({}, True))

    def delete(self, job: Job, *, reason: str) -> None:
        """The object is the stored job: deleting it is the job's deletion (its pods and
        pod groups go with it through their foreign keys)."""
        Pod.objects.filter(job=job).delete()
        PodGroup.objects.filter(job=job).delete()
        self.pods.pop(job.pk, None)


def _candidates(cluster: Cluster) -> list[Job]:
    """The jobs a pass reconciles: those that run (or are marked so) and the suspended jobs
    of admitted workloads that are not evicted."""
    running = list(Job.objects.filter(cluster=cluster, suspend=False)
                   .prefetch_related("workloads"))
    admitted = Workload.objects.filter(
        cluster=cluster, phase=WorkloadPhase.ADMITTED, active=True, cluster_name="",
        job__isnull=False, job__suspend=True,
    ).order_by().values_list("job_id", "conditions")
    starting = {job_id for job_id, conditions in admitted
                if not cond.is_true(conditions, "Evicted")}
    jobs = running + list(Job.objects.filter(pk__in=starting).prefetch_related("workloads"))
    # In the default order, sorted here rather than in SQL: see models.name_order.
    return sorted(jobs, key=lambda job: (job.namespace, job.name))


def _reconcile_jobs(cluster: Cluster, *, now: datetime, events: list[Event],
                    outcome: SyncOutcome) -> None:
    """``job_reconciler.reconcile`` for every job of the pass. A job started here is
    reconciled once more, as its update would have it in Kubernetes, so that its first
    pods are reported in the same pass."""
    backend = SimulatedCluster(cluster, now=now, events=events)
    jobs = _candidates(cluster)
    backend.load_pods([job for job in jobs if not job.suspend])
    started = []
    for job in jobs:
        steps = reconciler.reconcile(job, backend, now=now, events=events)
        _record(job, steps, outcome, now=now)
        if reconciler.Step.STARTED in steps:
            started.append(job)
    backend.load_pods(started)
    for job in started:
        _record(job, reconciler.reconcile(job, backend, now=now, events=events), outcome,
                now=now)
    outcome.gang_attempts += backend.gang_attempts
    for ready_at, finish_at in Pod.objects.filter(cluster=cluster, phase__in=_ACTIVE_PHASES
                                                  ).filter(Q(ready_at__gt=now)
                                                           | Q(finish_at__gt=now)
                                                           ).values_list("ready_at",
                                                                         "finish_at"):
        outcome.due(ready_at if ready_at and ready_at > now else finish_at)


def _record(job: Job, steps: set[reconciler.Step], outcome: SyncOutcome, *,
            now: datetime) -> None:
    key = f"{job.namespace}/{job.name}"
    if reconciler.Step.STARTED in steps:
        outcome.started.append(key)
    if reconciler.Step.SUSPENDED in steps:
        outcome.stopped.append(key)
    if reconciler.Step.FINISHED in steps:
        outcome.finished.append(key)
    if reconciler.Step.RETRY in steps:
        outcome.due(now)


def _create_pods(cluster: Cluster, job: Job, wl: Workload, pod_set: Mapping[str, Any],
                 count: int, *, group: PodGroup | None, info: jobframework.PodSetInfo,
                 now: datetime, gates: Sequence[str] = ()) -> list[Pod]:
    """Create ``count`` pods of ``pod_set`` with the admission's placement ``info`` (with
    scheduling ``gates``: SchedulingGated)."""
    template = pod_set.get("template") or {}
    pod_spec = template.get("spec") or {}
    selector = {**(pod_spec.get("nodeSelector") or {}), **info.node_selector}
    all_tolerations = list(pod_spec.get("tolerations") or []) + list(info.tolerations)
    # What the node must have room for: the pod as Kubernetes' admission leaves it, with
    # its namespace's LimitRange defaults and its RuntimeClass's overhead.
    requests = workload_resources.admitted_pod_requests(cluster.pk, job.namespace, pod_set)
    workload_ref = workload_ref_of(pod_set)
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
            scheduling_gates=list(gates), workload_ref=workload_ref,
            reason=GATED_REASON if gates else "",
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


def node_infos(cluster: Cluster) -> list[placement.NodeInfo]:
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


def used_resources(cluster: Cluster) -> dict[str, dict[str, int]]:
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
        pod.reason, pod.message = "", ""
        pod.scheduled_at = now
        pod.ready_at = now + sim.scaled(sim.start_delay_seconds)
        # A pod that runs until deleted (a serving pod) has no end.
        pod.finish_at = None if run is None else pod.ready_at + sim.scaled(run)
        placed.append(pod)
        room = free[node_name]
        for resource, quantity in (pod.requests or {}).items():
            room[resource] = room.get(resource, 0) - quantity_to_int(resource, quantity)
        if placement.PODS in room:
            room[placement.PODS] -= 1
    Pod.objects.bulk_update(placed, ["node_name", "reason", "message", "scheduled_at",
                                     "ready_at", "finish_at"])
    return len(placed)


def _unschedulable(pods: Sequence[Pod], message: str, *, now: datetime,
                   events: list[Event]) -> None:
    """Mark ``pods`` as kube-scheduler leaves a pod it found no node for (PodScheduled
    False, Unschedulable) and record its FailedScheduling event about each pod, once per
    new message: a pod that keeps waiting for the same reason is not written every pass."""
    changed = [pod for pod in pods
               if (pod.reason, pod.message) != (UNSCHEDULABLE_REASON, message)]
    for index, pod in enumerate(changed):
        pod.reason, pod.message = UNSCHEDULABLE_REASON, message
        if index < MAX_FAILED_SCHEDULING_EVENTS and pod.workload is not None:
            event = lifecycle.workload_event(pod.workload, FAILED_SCHEDULING, message, now=now,
                                             type_=EventType.WARNING, kind="Pod")
            event.object_name = pod.name
            events.append(event)
    Pod.objects.bulk_update(changed, ["reason", "message"])


def workload_ref_of(pod_set: Mapping[str, Any]) -> dict[str, str]:
    """The pod template's ``spec.workloadRef`` (its string fields), {} when it has none."""
    spec = (pod_set.get("template") or {}).get("spec") or {}
    ref = spec.get("workloadRef") if isinstance(spec, Mapping) else None
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return {}
    return {key: str(ref[key]) for key in ("name", "podGroup", "podGroupReplicaKey")
            if ref.get(key)}


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
    waiting = _through_workloads(cluster, waiting, now=now, events=events, outcome=outcome)
    if not waiting:
        return
    nodes = node_infos(cluster)
    free = placement.free_resources(nodes, used_resources(cluster))
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
        # A job's own gang binds the pods it has (its pods may be fewer than its minCount
        # after a scale-down); a Workload's gang needs minCount of them, however many exist.
        needed = group.min_count if group.gang_id is not None else min(group.min_count,
                                                                       len(pods))
        result = placement.place_group(nodes, [_pod_info(p) for p in pods],
                                       min_count=needed, free=free)
        if result.bound:
            outcome.bound += _bind(pods, result.bindings, sim, now=now, free=free)
            PodGroup.objects.filter(pk=group.pk).update(bound_at=now, waiting_since=None,
                                                        message="")
            outcome.gang_successes += 1
            continue
        message = (f"pod group {group.pod_set}: {result.fitted} of {group.min_count} pods fit "
                   f"at once (minCount {group.min_count}); {result.message(len(nodes))}")
        why = result.message(len(nodes))
        if group.min_count > 1:
            why += f" (gang: {result.fitted} of {group.min_count} pods fit at once)"
        _unschedulable(pods, why, now=now, events=events)
        since = group.waiting_since or now
        timeout = timedelta(seconds=sim.gang_timeout_seconds)
        changes: dict[str, Any] = {"message": message, "waiting_since": since}
        if now - since >= timeout:
            changes.update(waiting_since=now, timeouts=group.timeouts + 1)
            text = (f"Gang scheduling timed out after {int(timeout.total_seconds())}s: "
                    f"{message}; the pods go back to the scheduling queue")
            # Every workload whose pods are in the gang hears of it (a Workload's gang
            # gathers the pods of several jobs).
            members = {p.workload_id: p.workload for p in pods if p.workload is not None}
            events.extend(lifecycle.workload_event(wl, "FailedScheduling", text, now=now,
                                                   type_=EventType.WARNING)
                          for wl in members.values() or [group.workload])
            outcome.gang_timeouts += 1
            outcome.gang_attempts += 1  # the retry
            since = now
        PodGroup.objects.filter(pk=group.pk).update(**changes)
        outcome.due(since + timeout)
    for pod in singles:
        result = placement.place_group(nodes, [_pod_info(pod)], min_count=1, free=free)
        if result.bound:
            outcome.bound += _bind([pod], result.bindings, sim, now=now, free=free)
        else:
            _unschedulable([pod], result.message(len(nodes)), now=now, events=events)


# Why a pod naming a Workload waits before kube-scheduler even tries it (PreEnqueue).
WAITING_FOR_WORKLOAD = "WaitingForWorkload"


def _through_workloads(cluster: Cluster, waiting: list[Pod], *, now: datetime,
                       events: list[Event], outcome: SyncOutcome) -> list[Pod]:
    """The waiting pods the scheduler tries now. A pod naming a Workload (``workloadRef``)
    and not yet in one of its gangs joins the gang of its pod group and replica key once
    the Workload and the group exist, and that gang is formed once ``minCount`` of its pods
    exist (an attempt begins); a ``basic`` group's pod is tried on its own. The others wait:
    their message says why, and a missing Workload or pod group is also an event."""
    referring = [p for p in waiting if p.workload_ref and p.group is None]
    if not referring:
        return waiting
    # A Workload's gang that lost its pods before it bound (their jobs stopped) is gone:
    # pods naming it later form a new one, with an attempt of their own.
    PodGroup.objects.filter(cluster=cluster, gang__isnull=False, bound_at__isnull=True).exclude(
        pods__phase__in=_ACTIVE_PHASES).delete()
    names = {(p.namespace, str(p.workload_ref.get("name"))) for p in referring}
    gangs = {(g.namespace, g.name): g for g in GangWorkload.objects.filter(
        cluster=cluster, namespace__in={ns for ns, _ in names},
        name__in={name for _, name in names})}
    tried: list[Pod] = [p for p in waiting if not (p.workload_ref and p.group is None)]
    joining: dict[tuple[int, str, str], list[Pod]] = defaultdict(list)
    held: list[tuple[Pod, str, bool]] = []  # (pod, why, worth an event)
    for pod in referring:
        ref = pod.workload_ref
        gang = gangs.get((pod.namespace, str(ref.get("name"))))
        group_name = str(ref.get("podGroup") or "")
        if gang is None:
            held.append((pod, f'its Workload "{ref.get("name")}" (spec.workloadRef.name) does '
                              f"not exist in namespace {pod.namespace}", True))
            continue
        definition = gang.pod_group(group_name)
        if definition is None:
            held.append((pod, f'Workload "{gang.name}" has no pod group "{group_name}" '
                              "(spec.workloadRef.podGroup)", True))
            continue
        if "gang" not in (definition.get("policy") or {}):
            tried.append(pod)  # basic: scheduled on its own
            continue
        joining[(gang.pk, group_name, str(ref.get("podGroupReplicaKey") or ""))].append(pod)
    by_id = {g.pk: g for g in gangs.values()}
    existing = {(g.gang_id, g.pod_set, g.replica_key): g for g in PodGroup.objects.filter(
        gang_id__in={key[0] for key in joining})}
    for key, pods in joining.items():
        gang = by_id[key[0]]
        group = existing.get(key)
        if group is None:
            definition = gang.pod_group(key[1]) or {}
            min_count = int(((definition.get("policy") or {}).get("gang") or {})
                            .get("minCount") or 1)
            if len(pods) < min_count:
                where = f' (replica key "{key[2]}")' if key[2] else ""
                held.extend((pod, f'{len(pods)} of {min_count} pods of pod group "{key[1]}"'
                                  f'{where} of Workload "{gang.name}" exist (minCount '
                                  f"{min_count})", False) for pod in pods)
                continue
            anchor = pods[0].workload
            if anchor is None:
                continue  # its Kueue Workload is gone: the pod goes with its job
            group = PodGroup.objects.create(
                cluster=cluster, workload=anchor, gang=gang, pod_set=key[1],
                replica_key=key[2], min_count=min_count, created_at=now, waiting_since=now)
            outcome.gang_attempts += 1
        for pod in pods:
            pod.group = group
            pod.reason, pod.message = "", ""
        Pod.objects.bulk_update(pods, ["group", "reason", "message"])
        # Into the gang's attempt; once the gang is bound, a later pod is placed on its own.
        tried.extend(pods)
    changed = []
    for pod, why, notable in held:
        message = f"Waiting for the gang: {why}"
        if pod.message == message:
            continue
        pod.message = message
        changed.append(pod)
        if notable and pod.workload is not None:
            event = lifecycle.workload_event(
                pod.workload, WAITING_FOR_WORKLOAD, f"Pod {pod.name} waits: {why}", now=now,
                type_=EventType.WARNING, kind="Pod")
            event.object_name = pod.name
            events.append(event)
    Pod.objects.bulk_update(changed, ["message"])
    return sorted(tried, key=lambda p: (p.created_at, p.pk))


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

