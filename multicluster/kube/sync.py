"""The Kubernetes cluster's reconciler: it runs the admitted jobs of a domain on a real API
server. The counterpart of ``multicluster.simulated.runner`` for ``connection_type ==
"kubernetes"``; the cluster's own Job controller, scheduler and kubelets do the rest.

One pass (``sync_kube_cluster``), under a lease so that one worker at a time runs a cluster:

0. **connect**: a disconnected cluster is probed once its back-off has passed (at once when
   its kubeconfig changed); a connected one is probed again every
   ``KUBE_PROBE_INTERVAL_SECONDS`` to refresh its nodes and capacity;
1. **observe**: list + watch (every watch at once) the job objects carrying our
   ``kueue.x-k8s.io/multikueue-origin`` label, those created on the cluster that kueueweb
   may manage (below) and the Pods carrying a ``kueue.x-k8s.io/job-uid``, resuming from the
   resource versions of the last pass (kept in the cache, not in process memory, so any
   worker can take over); the gangs' progress (``gangs``: the gang scheduling metrics), the
   Warning events about our pods (``pod_events``: why they do not run, on their workloads'
   pages), and the cluster's own PriorityClasses, LimitRanges and RuntimeClasses, mirrored
   into its domain (``multicluster.kube.cluster_objects``);
1b. **adopt** the managed objects created on the cluster (kubectl): each new one becomes a
   local job submitted as any job is, whose object is run in place; a local job whose
   object was deleted there is removed, and an adopted object whose local job was deleted
   is deleted there; an adopted Pod loses Kueue's finalizer once its Workload finished or
   it is being deleted; a Deployment's or StatefulSet's Pods are adopted as Pods (a
   StatefulSet's first stamped as one pod group, ``statefulset_pods``, a
   LeaderWorkerSet's as one pod group per replica, ``leaderworkerset_pods``);
2. for each local job of the domain, ``scheduling.job_reconciler.reconcile`` with this pass
   as its backend (for a job submitted through kueueweb the cluster runs a copy of the
   stored object; one created on the cluster is started and suspended in place by patches
   of its own object, which is never created or deleted by kueueweb):

   - **start** the job of an admitted workload: create the remote Job (and the gang
     Workload where served) and mark the local job unsuspended;
   - **scale** a running elastic job whose admitted count changed (merge patch of
     ``spec.parallelism``);
   - **report** a running job's remote status (active, ready, succeeded, failed, Complete /
     Failed) to the workload lifecycle (PodsReady, reclaimable pods, Finished), and delete
     the remote Job once its workload finished;
   - **stop** the job of a workload that is no longer admitted (evicted, deactivated):
     suspend the remote Job, and once it has no active pods delete it, mark the local job
     suspended and give the quota back (``lifecycle.release_stopped``; the local job stays
     unsuspended until then, so the admission cycle does not release the quota early);
   - **clean up** the remote Job of a finished workload.

A server that cannot be reached in the middle of a pass disconnects the cluster
(``connection.mark_unreachable``): the next pass reconnects with back-off.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q

from kueueweb import live
from multicluster import provisioning
from multicluster.choices import ConnectionType
from multicluster.kube import (
    cluster_objects,
    connection,
    gangs,
    leaderworkerset_pods,
    pod_events,
    statefulset_pods,
)
from multicluster.kube.backend import (
    NAMESPACES,
    POD_EVENTS,
    PODS,
    TOMBSTONE,
    KubeBackend,
    RefreshResult,
    WatchKind,
    WatchState,
)
from multicluster.kube.client import client_for, config_fingerprint
from multicluster.kube.errors import KubeApiError, KubeConfigError, KubeUnavailable
from multicluster.kube.kinds import (
    adoptable_job_kinds,
    adoption_watch,
    enabled_job_kinds,
    implicitly_enabled_job_kinds,
    resource,
    watch_kind,
)
from multicluster.kube.manifests import (
    ADOPTED_ANNOTATION,
    ORIGIN_LABEL,
    adopted_manifest,
    gang_owner_reference,
    gang_workload,
    gang_workload_name,
    group_gang_workload,
    pod_is_active,
    reduce_job,
    remote_object,
)
from multicluster.kube.provisioning import KubeRequests
from multicluster.models import Cluster
from scheduling import job_reconciler as reconciler
from scheduling import services
from scheduling.choices import EventType, JobSource, WorkloadPhase
from scheduling.core.patch import merge_patch_from
from scheduling.core.pod_security import SYSTEM_NAMESPACES
from scheduling.jobframework import JOB_UID_LABEL, QUEUE_NAME_LABEL, GenericJob, PodSetInfo
from scheduling.jobframework.managed import ManagedJobs, namespace_labels_of
from scheduling.jobs import pod as pods
from scheduling.jobs.pod import SUSPENDING_PARENT_ANNOTATION
from scheduling.models import Event, Job, Workload
from scheduling.workload import lifecycle, slices

logger = logging.getLogger(__name__)

DEFAULT_WATCH_QUIET_SECONDS = 1.0
DEFAULT_WATCH_MAX_SECONDS = 5.0
DEFAULT_PROBE_INTERVAL_SECONDS = 60
DEFAULT_LEASE_SECONDS = 120
STATE_TIMEOUT_SECONDS = 24 * 3600
REFUSED_RETRY_SECONDS = 300


def _options() -> Mapping[str, Any]:
    config: Mapping[str, Any] = settings.KUEUEWEB
    return config


def origin() -> str:
    return str(_options().get("MULTIKUEUE_ORIGIN") or "multikueue")


def origin_selector() -> str:
    return f"{ORIGIN_LABEL}={origin()}"


def adoption_selector(managed: ManagedJobs) -> str:
    """The objects created on the cluster that may be kueueweb's to adopt: those naming a
    queue or, with manageJobsWithoutQueueName, any; never a copy of kueueweb's (of any
    origin)."""
    if managed.without_queue_name:
        return f"!{ORIGIN_LABEL}"
    return f"{QUEUE_NAME_LABEL},!{ORIGIN_LABEL}"


# The pods of every job kueueweb runs carry the job's uid (the pod templates of its copies,
# and those of an object created on the cluster once it starts there): they are listed by
# it, and attributed to their job by its value.
PODS_SELECTOR = JOB_UID_LABEL


@dataclass
class KubeSyncOutcome:
    """What a pass did (names are ``namespace/name`` of jobs)."""

    ran: bool = False
    connected: bool = False
    started: list[str] = field(default_factory=list)
    scaled: list[str] = field(default_factory=list)
    stopping: list[str] = field(default_factory=list)  # suspended, waiting for pods to go
    stopped: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    # Objects created on the cluster: adopted as local jobs, refused (an event says why),
    # and gone from the cluster (their local jobs removed).
    adopted: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    watches: dict[str, RefreshResult] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.started or self.scaled or self.stopping or self.stopped
                    or self.finished or self.deleted or self.adopted or self.removed)


# =========================================================================================
# Shared state in the cache: the lease, watch state, the probe schedule
# =========================================================================================


def _key(cluster_id: int, *parts: str) -> str:
    return ":".join(("kueueweb", "kube", str(cluster_id), *parts))


def _state_key(cluster: Cluster, kind: WatchKind, selector: str) -> str:
    # The selector is part of the key: a watch whose selector changed (another origin, the
    # managed-jobs settings) starts with a fresh list.
    return _key(cluster.pk, config_fingerprint(cluster), selector, kind.name)


def load_state(cluster: Cluster, kind: WatchKind, selector: str) -> WatchState:
    return WatchState.from_json(cache.get(_state_key(cluster, kind, selector)))


def save_state(cluster: Cluster, kind: WatchKind, selector: str, state: WatchState) -> None:
    cache.set(_state_key(cluster, kind, selector), state.to_json(),
              timeout=STATE_TIMEOUT_SECONDS)


@contextmanager
def _lease(cluster_id: int) -> Iterator[bool]:
    """Hold the cluster for one pass (``cache.add`` is atomic in Redis and in locmem)."""
    key = _key(cluster_id, "lease")
    token = uuid.uuid4().hex
    seconds = int(_options().get("KUBE_SYNC_LEASE_SECONDS", DEFAULT_LEASE_SECONDS))
    held = bool(cache.add(key, token, timeout=seconds))
    try:
        yield held
    finally:
        if held and cache.get(key) == token:
            cache.delete(key)


def _probe_due(cluster: Cluster, *, now: datetime) -> bool:
    """Probe when disconnected and the back-off has passed, when the kubeconfig changed
    (Kueue resets the failed attempts then), or every probe interval while connected."""
    if connection.config_changed(cluster):
        return True
    if not connection.is_connected(cluster):
        return connection.reconnect_due(cluster, now=now)
    return bool(cache.add(_key(cluster.pk, "probe-fresh"), 1, timeout=_probe_interval()))


def _probe_interval() -> int:
    interval = int(_options().get("KUBE_PROBE_INTERVAL_SECONDS", DEFAULT_PROBE_INTERVAL_SECONDS))
    return max(interval, 1)


# =========================================================================================
# The pass
# =========================================================================================


def sync_kube_cluster(cluster_id: int, *, now: datetime) -> KubeSyncOutcome:
    """One pass of the Kubernetes cluster ``cluster_id`` (a no-op for other connections,
    or while another worker runs it)."""
    outcome = KubeSyncOutcome()
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None or cluster.connection_type != ConnectionType.KUBERNETES:
        return outcome
    with _lease(cluster_id) as held:
        if not held:
            return outcome
        outcome.ran = True
        if _probe_due(cluster, now=now):
            result = connection.probe_cluster(cluster_id, now=now)
            cluster.refresh_from_db()
            if result is None or not result.connected:
                return outcome
            cache.set(_key(cluster_id, "probe-fresh"), 1, timeout=_probe_interval())
        if not connection.is_connected(cluster):
            return outcome
        try:
            backend = KubeBackend(client_for(cluster))
        except KubeConfigError as exc:
            connection.mark_bad_config(cluster, str(exc), now=now)
            return outcome
        outcome.connected = True
        try:
            _Pass(cluster, backend, now=now, outcome=outcome).run()
        except KubeUnavailable as exc:
            outcome.connected = False
            connection.mark_unreachable(cluster, str(exc), now=now)
    return outcome


def _adopted_pod_sets(integration: GenericJob, job: Job) -> list[dict[str, Any]]:
    """The pod sets of an adopted object as it was adopted, each with its pod template as
    the object has it (a Workload's leaves out what the kind's controller added, such as a
    Job's selector labels, which must stay); a pod set the object has no template of (a
    RayJob's submitter) keeps the Workload's."""
    templates = [template for template, _ in integration.pod_templates(job.manifest)]
    pod_sets = integration.pod_sets(job.manifest, partial_admission=False)
    return [{**pod_set, "template": templates[i]} if i < len(templates) else pod_set
            for i, pod_set in enumerate(pod_sets)]


def _workload_names(job: Job) -> set[str]:
    """The Workloads a copy of ``job`` may belong to: its own, and its group's (named after
    the group, linked to one member)."""
    names = {wl.name for wl in job.workloads.all()}
    if job.group_name:
        names.add(job.group_name)
    return names


class _Pass:
    def __init__(self, cluster: Cluster, backend: KubeBackend, *, now: datetime,
                 outcome: KubeSyncOutcome) -> None:
        self.cluster = cluster
        self.cluster_id = cluster.pk
        self.location = f" on cluster {cluster.name}"
        self.backend = backend
        self.now = now
        self.outcome = outcome
        self.events: list[Event] = []
        # The namespaces this pass has made sure of: one read per namespace and pass,
        # not one per job created in it.
        self.namespaces_ensured: set[str] = set()
        # The cluster's job objects of ours, by watch kind name and "namespace/name".
        self.remote: dict[tuple[str, str], dict[str, Any]] = {}
        self.integrations = enabled_job_kinds()
        self.kinds = {name: watch_kind(i) for name, i in self.integrations.items()}
        # The enabled kinds the cluster does not serve (their CRD is not installed).
        self.unserved: set[str] = set()
        # Objects created on the cluster (kubectl) that kueueweb adopts and runs in place:
        # by adoption watch name and "namespace/name", deleted ones as tombstones.
        self.managed = ManagedJobs.from_settings(_options())
        self.adoptable = adoptable_job_kinds()
        self.implicit = implicitly_enabled_job_kinds()
        # The kinds whose objects' Pods are theirs (``apiVersion kind``): the enabled kinds
        # that make their own Workload (a Deployment or a StatefulSet hands its Pods over).
        self.job_kinds = {f"{i.api_version} {i.kind}" for i in self.integrations.values()
                          if i.constructs_workload and not i.keeps_replicas
                          and not i.prebuilds_group_workloads}
        self.created: dict[tuple[str, str], dict[str, Any]] = {}
        # The namespaces' labels, when the managed-jobs namespace selector needs them.
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.active_pods: Counter[str] = Counter()
        self.ready_pods: Counter[str] = Counter()
        self._gang: bool | None = None
        self.pod_events_changed = False
        # What this pass's refresh of each watch (kind name, selector) left: its state and
        # how it went, or what it raised.
        self.refreshed: dict[tuple[str, str], tuple[WatchState, RefreshResult | Exception]] = {}

    # --- 1. observe ---------------------------------------------------------------------

    def _refresh(self, kind: WatchKind, selector: str, *, save: bool = True) -> WatchState:
        """The state of watch ``(kind, selector)`` as this pass's refresh left it (saved in
        the cache unless the caller saves it), or what that refresh raised. A watch the
        pass did not plan (its kind served since) is refreshed now."""
        key = (kind.name, selector)
        if key not in self.refreshed:
            self._refresh_all([(kind, selector)])
        state, result = self.refreshed.pop(key)
        if isinstance(result, Exception):
            raise result
        if save:
            save_state(self.cluster, kind, selector, state)
        self.outcome.watches[kind.name] = result
        return state

    def _refresh_all(self, watches: Sequence[tuple[WatchKind, str]]) -> None:
        """Refresh ``watches`` at once (``KubeBackend.refresh_all``). Their states are read
        from and written to the cache here, in the pass's own thread; a server that cannot
        be reached disconnects the cluster whichever watch found it, while other errors are
        left to each watch's reader, which may tolerate them (a 403 on events)."""
        states = [load_state(self.cluster, kind, selector) for kind, selector in watches]
        results = self.backend.refresh_all(
            [(kind, state, selector or None) for (kind, selector), state in zip(
                watches, states, strict=True)],
            quiet_seconds=float(_options().get("KUBE_WATCH_QUIET_SECONDS",
                                               DEFAULT_WATCH_QUIET_SECONDS)),
            max_seconds=float(_options().get("KUBE_WATCH_MAX_SECONDS", DEFAULT_WATCH_MAX_SECONDS)))
        for result in results:
            if isinstance(result, KubeUnavailable):
                raise result
        for (kind, selector), state, result in zip(watches, states, results, strict=True):
            self.refreshed[(kind.name, selector)] = (state, result)

    def _watches(self) -> list[tuple[WatchKind, str]]:
        """The job kinds' watches with their selectors: kueueweb's copies, and the objects
        created on the cluster."""
        return [*((kind, origin_selector()) for kind in self.kinds.values()),
                *((adoption_watch(i), adoption_selector(self.managed))
                  for i in self.adoptable.values())]

    def _planned_watches(self) -> list[tuple[WatchKind, str]]:
        """Every watch of this pass: the served job kinds' copies, the cluster's own
        objects, the objects created on the cluster, the namespaces when their labels
        are needed, a StatefulSet's or a LeaderWorkerSet's Pods not yet stamped, the pods
        and their Warning events."""
        for kind in self.kinds.values():
            if kind.resource is not None and not self.backend.serves(kind.resource):
                self.unserved.add(kind.name)
        watches = [(kind, origin_selector()) for kind in self.kinds.values()
                   if kind.name not in self.unserved]
        watches += [(mirrored.watch, "") for mirrored in cluster_objects.MIRRORED_KINDS
                    if mirrored.watch.resource is not None
                    and self.backend.serves(mirrored.watch.resource)]
        watches += [(adoption_watch(integration), adoption_selector(self.managed))
                    for integration in self.adoptable.values()
                    if watch_kind(integration).name not in self.unserved]
        if self.managed.without_queue_name and self.managed.namespace_selector is not None:
            watches.append((NAMESPACES, ""))
        if statefulset_pods.enabled():
            watches.append((statefulset_pods.UNSTAMPED_PODS, statefulset_pods.UNSTAMPED_SELECTOR))
        if leaderworkerset_pods.enabled():
            watches.append((leaderworkerset_pods.UNSTAMPED_PODS,
                            leaderworkerset_pods.UNSTAMPED_SELECTOR))
        return [*watches, (PODS, PODS_SELECTOR), (POD_EVENTS, "")]

    def observe(self) -> None:
        self._refresh_all(self._planned_watches())
        for kind in self.kinds.values():
            if kind.name in self.unserved:
                continue
            state = self._refresh(kind, origin_selector())
            self.remote.update(((kind.name, key), obj) for key, obj in state.objects.items())
        cluster_objects.sync_cluster_objects(
            self.cluster, serves=self.backend.serves,
            refresh=lambda kind: self._refresh(kind, ""), now=self.now)
        for name, integration in self.adoptable.items():
            if watch_kind(integration).name in self.unserved:
                continue
            state = self._refresh(adoption_watch(integration), adoption_selector(self.managed))
            self.created.update(((name, key), obj) for key, obj in state.objects.items())
        if self.managed.without_queue_name and self.managed.namespace_selector is not None:
            state = self._refresh(NAMESPACES, "")
            self.namespace_labels = {str(ns.get("name")): dict(ns.get("labels") or {})
                                     for ns in state.objects.values()}
        pods_state = self._refresh(PODS, PODS_SELECTOR)
        for pod in pods_state.objects.values():
            key = str(pod.get("job_uid") or "")
            if key and pod_is_active(pod):
                self.active_pods[key] += 1
                self.ready_pods[key] += int(bool(pod.get("ready")))
        gangs.observe(self.cluster_id, pods_state.objects.values(), now=self.now)
        self._observe_pod_events(pods_state.objects.values())

    def _observe_pod_events(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """The Warning events about our pods since the last pass, stored on their workloads
        (``pod_events``). Each pass keeps only the watch's resource version: the events
        are in the database once read, and most of a cluster's are about other pods."""
        try:
            state = self._refresh(POD_EVENTS, "", save=False)
        except KubeApiError as exc:
            # Events are an explanation, not what runs the jobs: a service account that
            # may not read them loses the explanation only.
            logger.warning("cluster %s: pod events not read: %s", self.cluster.name, exc)
            return
        if pod_events.record_pod_events(self.cluster, state.objects.values(), pods,
                                        now=self.now):
            self.pod_events_changed = True
        state.objects = {}
        save_state(self.cluster, POD_EVENTS, "", state)

    # --- 2. per job ---------------------------------------------------------------------

    def _candidates(self) -> list[Job]:
        """The local jobs that may need something: unsuspended ones, those of admitted
        workloads, and those the cluster has a Job for."""
        condition = Q(suspend=False) | Q(workloads__phase=WorkloadPhase.ADMITTED)
        by_namespace: dict[str, list[str]] = {}
        for remote in self.remote.values():
            by_namespace.setdefault(str(remote.get("namespace")), []).append(
                str(remote.get("name")))
        for namespace, names in by_namespace.items():
            condition |= Q(namespace=namespace, name__in=names)
        created: dict[str, list[str]] = {}
        for obj in self.created.values():
            if not obj.get(TOMBSTONE):
                created.setdefault(str(obj.get("namespace")), []).append(str(obj.get("name")))
        for namespace, names in created.items():
            condition |= Q(source=JobSource.CLUSTER, namespace=namespace, name__in=names)
        return list(Job.objects.filter(cluster=self.cluster).filter(condition).distinct()
                    .prefetch_related("workloads").order_by("namespace", "name"))

    def run(self) -> None:
        self.observe()
        self._provision()
        if statefulset_pods.enabled():
            statefulset_pods.stamp_members(self.backend, self.managed, self.namespace_labels,
                                           refresh=self._refresh)
        if leaderworkerset_pods.enabled():
            leaderworkerset_pods.stamp_members(self.backend, self.managed,
                                               self.namespace_labels, refresh=self._refresh)
        self._follow_created()
        candidates = self._candidates()
        self._delete_orphans(candidates)
        for job in candidates:
            try:
                self._reconcile(job)
            except (KubeApiError, reconciler.PatchRefused) as exc:
                # One job's refused call must not hold up the others.
                wl = slices.current_slice(job.workloads.all())
                message = f"Syncing the job with cluster {self.cluster.name} failed: {exc}"
                if wl is not None:
                    self._warn(wl, "SyncFailed", message)
                else:
                    logger.warning("cluster %s: %s", self.cluster.name, message)
        self._finalize_created()
        with transaction.atomic():
            Event.objects.bulk_create(self.events)
            if self.events or self.outcome.changed or self.pod_events_changed:
                live.notify(self.cluster.pk)
        self._drop_tombstones()

    def _provision(self) -> None:
        """The ProvisioningRequest admission check on this cluster's autoscaler, before the
        jobs: a check made Ready now lets its job start in this pass."""
        try:
            requests = KubeRequests(self.backend, origin=origin(),
                                    create_namespaces=self.cluster.create_namespaces)
            provisioning.sync_provisioning(self.cluster_id, requests, now=self.now)
        except KubeApiError as exc:
            # A refused call must not hold up the jobs; the next pass tries again.
            logger.warning("cluster %s: syncing ProvisioningRequests failed: %s",
                           self.cluster.name, exc)

    def _drop_tombstones(self) -> None:
        for kind, selector in self._watches():
            state = load_state(self.cluster, kind, selector)
            if any(obj.get(TOMBSTONE) for obj in state.objects.values()):
                state.objects = {k: v for k, v in state.objects.items()
                                 if not v.get(TOMBSTONE)}
                save_state(self.cluster, kind, selector, state)

    @staticmethod
    def _key(job: Job) -> tuple[str, str]:
        return watch_kind(reconciler.integration_of(job)).name, f"{job.namespace}/{job.name}"

    def _remote_of(self, job: Job) -> dict[str, Any] | None:
        """The cluster's object of ``job`` if it belongs to one of its workloads."""
        remote = self.remote.get(self._key(job))
        if remote is None or remote.get(TOMBSTONE):
            return None
        names = _workload_names(job)
        if remote.get("workload") and remote["workload"] not in names:
            # A job of the same name from an earlier local job: it must go first.
            self._delete_remote(job, reason="a leftover of an earlier job")
            return None
        return remote

    def _reconcile(self, job: Job) -> None:
        steps = reconciler.reconcile(job, self, now=self.now, events=self.events)
        key = f"{job.namespace}/{job.name}"
        for step, names in ((reconciler.Step.STARTED, self.outcome.started),
                            (reconciler.Step.SCALED, self.outcome.scaled),
                            (reconciler.Step.FINISHED, self.outcome.finished),
                            (reconciler.Step.STOPPING, self.outcome.stopping),
                            (reconciler.Step.STOPPED, self.outcome.stopped)):
            if step in steps:
                names.append(key)

    # --- objects created on the cluster (kubectl) ---------------------------------------

    def _manages(self, obj: Mapping[str, Any], watch: str, managed_uids: set[str]) -> bool:
        """Kueue's rule (``ManagedJobs``) on an object created on the cluster: not in one of
        Kubernetes' own namespaces, not one of kueueweb's copies, and not controlled by an
        object that is managed itself (a JobSet's Jobs, a Job's Pods), whose Workload
        covers it. A kind enabled only through another framework takes only what that
        framework hands it (a Deployment's Pods)."""
        namespace = str(obj.get("namespace"))
        labels = obj.get("labels") or {}
        if namespace in SYSTEM_NAMESPACES or labels.get(ORIGIN_LABEL):
            return False
        integration = self.adoptable[watch]
        if watch in self.implicit and not integration.accepts_implicitly(
                {"metadata": {"annotations": obj.get("annotations") or {}}}):
            return False
        return self.managed.manages(
            labels, namespace_labels=namespace_labels_of(
                namespace, self.namespace_labels.get(namespace)),
            ancestor_managed=self._ancestor_managed(obj, integration, managed_uids))

    def _ancestor_managed(self, obj: Mapping[str, Any], integration: GenericJob,
                          managed_uids: set[str]) -> bool:
        """Whether the object's controller is managed, so that its Workload covers the
        object. A Pod is handed to the pod integration by a parent that suspends it (the
        ``pod-suspending-parent`` annotation: a Deployment's, a StatefulSet's) whatever its
        controller, as Kueue's pod webhook does; any other Pod controlled by an object of a
        kind kueueweb runs is left to that object (a Job's, a JobSet's, a RayCluster's, a
        copy's), while one whose controller is no job kind (a ReplicaSet) is managed by
        its own labels."""
        controller = str(obj.get("controller") or "")
        if not controller:
            return False
        if controller in managed_uids:
            return True
        if integration.kind != "Pod" or integration.group:
            return False
        if (obj.get("annotations") or {}).get(SUSPENDING_PARENT_ANNOTATION):
            return False
        kind = obj.get("controller_kind")
        # A state read before the controller's kind was kept: left to it, as it was then.
        return kind is None or str(kind) in self.job_kinds

    def _managed_created(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The objects created on the cluster that kueueweb manages, by watch and name."""
        live = {key: obj for key, obj in self.created.items() if not obj.get(TOMBSTONE)}
        # An owner counts as managed by its own labels: a Job of a JobSet is left to the
        # JobSet's Workload even when it names a queue, and while the garbage collector
        # deletes it after the JobSet.
        owners = {str(obj.get("uid")) for key, obj in self.created.items()
                  if self._manages(obj, key[0], set())}
        return {key: obj for key, obj in live.items() if self._manages(obj, key[0], owners)}

    def _adopted_jobs(self) -> dict[tuple[str, str], Job]:
        """The local jobs adopted from this cluster, by adoption watch and name."""
        watches = {(i.api_version, i.kind): name for name, i in self.adoptable.items()}
        found: dict[tuple[str, str], Job] = {}
        for job in Job.objects.filter(cluster=self.cluster, source=JobSource.CLUSTER).only(
                "pk", "uid", "namespace", "name", "api_version", "kind", "cluster",
                "group_name", "source"):
            name = watches.get((job.api_version, job.kind))
            if name is not None:
                found[(name, f"{job.namespace}/{job.name}")] = job
        return found

    def _follow_created(self) -> None:
        """Adopt the new managed objects created on the cluster, remove the local jobs whose
        object was deleted there, and delete there the adopted objects whose local job was
        deleted through kueueweb."""
        if not self.adoptable:
            return
        managed = self._managed_created()
        adopted = self._adopted_jobs()
        for key, job in adopted.items():
            obj = self.created.get(key)
            if obj is not None and not obj.get(TOMBSTONE) and obj.get("uid") == str(job.uid):
                continue
            # An object that leaves the watch's selection comes as deleted (the API
            # server's watch cache does so): only one the server no longer has is gone.
            if (obj is None or obj.get(TOMBSTONE)) and self._still_there(job):
                continue  # no longer managed (its queue label removed): left as it is
            self._remove_local(job)
        for key, obj in managed.items():
            local = adopted.get(key)
            if local is not None and obj.get("uid") == str(local.uid):
                continue
            integration = self.adoptable[key[0]]
            if obj.get("adopted"):
                self._delete_created(integration, obj)
            else:
                self._adopt(integration, obj)

    def _finalize_created(self) -> None:
        """Take Kueue's finalizer off the adopted Pods whose Workload finished (this pass
        included) or that are being deleted (Kueue's ``Finalize``): Kueue's Pod webhook puts
        it on every Pod it manages so that one is not gone before its Workload counts it,
        and kubectl's deletion of a Pod waits for it to go."""
        held = {key: obj for key, obj in self.created.items()
                if not obj.get(TOMBSTONE) and pods.FINALIZER in (obj.get("finalizers") or ())}
        if not held:
            return
        adopted = {key: job for key, job in self._adopted_jobs().items()
                   if key in held and held[key].get("uid") == str(job.uid)}
        finished = Workload.objects.filter(phase=WorkloadPhase.FINISHED)
        finished_jobs = set(finished.filter(job__in=list(adopted.values()))
                            .values_list("job_id", flat=True))
        # A pod group's Workload is linked to one member and finishes for all of them.
        groups = {job.group_name for job in adopted.values() if job.group_name}
        finished_groups = set(finished.filter(
            job__cluster=self.cluster, job__group_name__in=groups,
        ).values_list("job__namespace", "job__group_name")) if groups else set()
        for key, job in adopted.items():
            obj = held[key]
            if not (obj.get("deleting") or job.pk in finished_jobs
                    or (job.group_name and (job.namespace, job.group_name) in finished_groups)):
                continue
            rest = [f for f in obj.get("finalizers") or () if f != pods.FINALIZER]
            try:
                self.backend.patch_job(job.namespace, job.name, {"metadata": {
                    "finalizers": rest or None}}, resource=self._resource(job))
            except KubeApiError as exc:
                logger.warning("cluster %s: the finalizer of %s %s/%s not removed: %s",
                               self.cluster.name, job.kind, job.namespace, job.name, exc)

    def _still_there(self, job: Job) -> bool:
        """An adopted object the watch no longer lists: deleted, or no longer selected."""
        kind = watch_kind(reconciler.integration_of(job)).name
        if kind in self.unserved:
            return True  # its kind is not served now: nothing to tell, nothing removed
        return self.backend.get_job(job.namespace, job.name,
                                    resource=self._resource(job)) is not None

    def _remove_local(self, job: Job) -> None:
        """The object was deleted on the cluster: its local job and Workload go (the quota
        they held with them)."""
        services.delete_job(job, now=self.now)
        name = f"{job.namespace}/{job.name}"
        self.outcome.removed.append(name)
        logger.info("cluster %s: %s %s was deleted there; its job is removed",
                    self.cluster.name, job.kind, name)

    def _delete_created(self, integration: GenericJob, obj: Mapping[str, Any]) -> None:
        """An object kueueweb adopted whose local job was deleted (through kueueweb's API or
        pages): deleted on the cluster too, its pods with it."""
        namespace, name = str(obj.get("namespace")), str(obj.get("name"))
        if self.backend.delete_job(namespace, name, resource=resource(integration)):
            logger.info("cluster %s: deleted %s %s/%s (its job was deleted)",
                        self.cluster.name, integration.kind, namespace, name)
            self.outcome.deleted.append(f"{namespace}/{name}")

    def _adopt(self, integration: GenericJob, obj: Mapping[str, Any]) -> None:
        """A local job for a managed object created on the cluster, submitted as any job
        is (its queue, priority, pod sets, every validation), marked as adopted there. An
        object that is refused gets a warning event; it is tried again when it changes, or
        after a while (what refused it, a missing priority class say, may be fixed here)."""
        namespace, name = str(obj.get("namespace")), str(obj.get("name"))
        refused_key = _key(self.cluster.pk, "refused", str(obj.get("uid")),
                           str(obj.get("resourceVersion")))
        if cache.get(refused_key):
            return
        current = self.backend.get_job(namespace, name, resource=resource(integration))
        if current is None:
            return
        try:
            with transaction.atomic():
                services.submit_job(adopted_manifest(current), namespace=namespace,
                                    cluster=self.cluster, source=JobSource.CLUSTER)
        except (ValidationError, services.ConflictError) as error:
            cache.set(refused_key, 1, timeout=REFUSED_RETRY_SECONDS)
            message = (f"kueueweb does not run {integration.kind} {namespace}/{name} created "
                       f"on cluster {self.cluster.name}: {services.refusal_text(error)}")
            self.events.append(Event(
                cluster=self.cluster, object_kind=integration.kind, object_namespace=namespace,
                object_name=name, type=EventType.WARNING, reason="FailedAdoption",
                message=message, created_at=self.now))
            self.outcome.refused.append(f"{namespace}/{name}")
            logger.warning("cluster %s: %s", self.cluster.name, message)
            return
        self.outcome.adopted.append(f"{namespace}/{name}")
        self.backend.patch_job(namespace, name, {"metadata": {"annotations": {
            ADOPTED_ANNOTATION: "true"}}}, resource=resource(integration))

    # --- start --------------------------------------------------------------------------

    def _gang_supported(self) -> bool:
        if self._gang is None:
            self._gang = self.backend.supports_gang_workloads()
        return self._gang

    def _create_remote(self, job: Job, wl: Workload, infos: Sequence[PodSetInfo]) -> bool:
        """Create the cluster's Job (and gang Workload); False when it must wait."""
        if job.namespace in SYSTEM_NAMESPACES:
            # Refused at submission; a job stored before that rule still never gets there.
            lifecycle.finish(wl, "Failed", f"kueueweb does not create jobs in namespace "
                             f"{job.namespace!r} on cluster {self.cluster.name}",
                             now=self.now, events=self.events)
            self.outcome.finished.append(f"{job.namespace}/{job.name}")
            return False
        integration = reconciler.integration_of(job)
        gang = self._gang_supported()
        # A pod group's member points at its group's gang, not at one of its own.
        gang_owner = job.group_name or job.name
        body = remote_object(
            integration, job.manifest, namespace=job.namespace, origin=origin(),
            workload_name=wl.name, job_uid=str(job.uid), infos=infos,
            gang_workload=gang_workload_name(integration, gang_owner) if gang else None)
        if self.cluster.create_namespaces and job.namespace not in self.namespaces_ensured:
            self.backend.ensure_namespace(job.namespace)
            self.namespaces_ensured.add(job.namespace)
        try:
            created = self.backend.create_job(body, resource=self._resource(job))
        except KubeApiError as exc:
            if not exc.conflict:
                self._failed_to_create(job, wl, exc)
                return False
            # Created by an earlier pass that did not get to record it, or a stale copy.
            adopted = self._adopt_existing(job, wl)
            if adopted is None:
                return False
            created = adopted
        if gang and job.group_name:
            self._join_group_gang(job, wl, created)
        elif gang:
            pod_groups = {info.name: info.count for info in infos}
            if self.backend.create_gang_workload(gang_workload(
                    integration, namespace=job.namespace, job_name=job.name, origin=origin(),
                    pod_groups=pod_groups,
                    job_uid=(created.get("metadata") or {}).get("uid"))) is not None:
                gangs.created(self.cluster_id, job.namespace,
                              gang_workload_name(integration, job.name), pod_groups,
                              now=self.now)
        return True

    def _join_group_gang(self, member: Job, wl: Workload, created: Mapping[str, Any]) -> None:
        """The pod group's gang Workload, with the created ``member`` among its owners: the
        first member creates it with the admitted count of each of the group's pod sets,
        the others add themselves (guarded by its resourceVersion), so it lasts as long as
        one of them does."""
        integration = reconciler.integration_of(member)
        name = gang_workload_name(integration, member.group_name)
        counts = {str(ps.get("name")): int(ps.get("count", 0))
                  for ps in (wl.admission or {}).get("podSetAssignments", ())}
        if self.backend.create_gang_workload(group_gang_workload(
                integration, namespace=member.namespace, group_name=member.group_name,
                origin=origin(), pod_groups=counts, member=created)) is not None:
            gangs.created(self.cluster_id, member.namespace, name, counts, now=self.now)
            return
        existing = self.backend.get_gang_workload(member.namespace, name) or {}
        metadata = existing.get("metadata") or {}
        owners = list(metadata.get("ownerReferences") or ())
        owner = gang_owner_reference(integration, created)
        if metadata and all(ref.get("uid") != owner["uid"] for ref in owners):
            self.backend.patch_gang_workload(member.namespace, name, {"metadata": {
                "resourceVersion": metadata.get("resourceVersion"),
                "ownerReferences": [*owners, owner]}})

    @staticmethod
    def _resource(job: Job) -> tuple[str, str, str]:
        return resource(reconciler.integration_of(job))

    def _adopt_existing(self, job: Job, wl: Workload) -> dict[str, Any] | None:
        """The name is taken: ours and running is adopted (returned); a suspended or stale
        one of ours is deleted, a foreign one reported (None: try again later)."""
        existing = self.backend.get_job(job.namespace, job.name, resource=self._resource(job))
        if existing is None:
            return None
        found = reduce_job(existing, reconciler.integration_of(job).is_suspended)
        names = _workload_names(job)
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if labels.get(ORIGIN_LABEL) != origin():
            self._warn(wl, "FailedCreate",
                       f"A job {job.namespace}/{job.name} not created by kueueweb exists on "
                       f"cluster {self.cluster.name}")
            return None
        if found["suspend"] or found["deleting"] or found["workload"] not in names:
            self._delete_remote(job, reason="a stale copy")
            return None
        return existing

    def _failed_to_create(self, job: Job, wl: Workload, exc: KubeApiError) -> None:
        message = (f"The job could not be created on cluster {self.cluster.name}: "
                   f"{exc.message or exc.reason}")
        if exc.invalid:
            # Kueue finishes a workload whose job cannot start for a permanent reason.
            lifecycle.finish(wl, "Failed", message, now=self.now, events=self.events)
            self.outcome.finished.append(f"{job.namespace}/{job.name}")
        else:
            self._warn(wl, "FailedCreate", message)

    def _warn(self, wl: Workload, reason: str, message: str) -> None:
        """A warning event, at most once per 5 minutes for the same workload and text."""
        key = _key(self.cluster.pk, "warned", str(wl.pk), str(abs(hash((reason, message)))))
        if cache.add(key, 1, timeout=300):
            self.events.append(lifecycle.workload_event(
                wl, reason, message, now=self.now, type_=EventType.WARNING,
                kind=wl.job.kind if wl.job is not None else "Workload"))
        logger.warning("cluster %s: %s", self.cluster.name, message)

    # --- the reconciler's backend (job_reconciler.ClusterBackend) ---------------------

    def runs_copy(self, job: Job) -> bool:
        """A job submitted through kueueweb runs as a copy; one created on the cluster runs
        as the object the cluster has, which kueueweb does not create, and deletes only to
        stop a Pod or once its job was deleted through kueueweb."""
        return not job.created_on_cluster

    def create(self, job: Job, wl: Workload, infos: Sequence[PodSetInfo]) -> bool:
        if job.created_on_cluster:
            return self._start_in_place(job, infos)
        kind = self._key(job)[0]
        if kind in self.unserved:
            integration = reconciler.integration_of(job)
            self._warn(wl, "FailedCreate", f"Cluster {self.cluster.name} does not serve "
                       f"{integration.plural}.{integration.group}/{integration.version}: the "
                       f"CustomResourceDefinition of {integration.kind} is not installed; the "
                       "job starts once it is")
            return False
        return self._create_remote(job, wl, infos)

    def read(self, job: Job, wl: Workload | None, *, fetch: bool = True,
             full: bool = False) -> reconciler.ClusterObject | None:
        integration = reconciler.integration_of(job)
        if job.created_on_cluster and not full:
            return self._read_created(job, fetch=fetch)
        if full:
            fetched = self.backend.get_job(job.namespace, job.name, resource=self._resource(job))
            if fetched is None:
                return None
            metadata = fetched.get("metadata") or {}
            return self._object(job, reduce_job(fetched, integration.is_suspended),
                                spec=fetched.get("spec") or {},
                                resource_version=str(metadata.get("resourceVersion") or ""))
        remote = self._remote_of(job)
        if remote is None:
            tombstone = self.remote.get(self._key(job))
            if (tombstone is not None and tombstone.get(TOMBSTONE)
                    and integration.finished(tombstone.get("status"))):
                # Finished, then deleted (ttlSecondsAfterFinished): its status still counts.
                return self._object(job, tombstone, gone=True)
            remote = self._fetched(job) if fetch else None
            if remote is None:
                return None
        return self._object(job, remote)

    def _fetched(self, job: Job) -> dict[str, Any] | None:
        """The job's object as the server has it now (the watch may not have seen one
        created moments ago), reduced as the watch keeps it."""
        fetched = self.backend.get_job(job.namespace, job.name, resource=self._resource(job))
        if fetched is None:
            return None
        return reduce_job(fetched, reconciler.integration_of(job).is_suspended)

    def _object(self, job: Job, remote: Mapping[str, Any], *, gone: bool = False,
                spec: Mapping[str, Any] | None = None,
                resource_version: str = "") -> reconciler.ClusterObject:
        status = remote.get("status") or {}
        uid = str(job.uid)
        return reconciler.ClusterObject(
            suspended=bool(remote.get("suspend")), status=status,
            spec=remote.get("spec") or {} if spec is None else spec,
            resource_version=resource_version, deleting=bool(remote.get("deleting")),
            active_pods=max(int(status.get("active", 0) or 0), self.active_pods[uid]),
            ready_pods=self.ready_pods[uid], gone=gone)

    def patch(self, job: Job, patch: Mapping[str, Any]) -> reconciler.ClusterObject | None:
        integration = reconciler.integration_of(job)
        try:
            patched = self.backend.patch_job(job.namespace, job.name, patch,
                                             resource=self._resource(job))
        except KubeApiError as exc:
            if exc.forbidden:
                raise reconciler.PatchRefused(str(exc)) from exc
            raise
        if patched is None:
            return None
        return self._object(job, reduce_job(patched, integration.is_suspended))

    def suspend(self, job: Job) -> reconciler.ClusterObject | None:
        integration = reconciler.integration_of(job)
        if not job.created_on_cluster:
            return self.patch(job, integration.suspend({}, True))
        return self._stop_in_place(job)

    def delete(self, job: Job, *, reason: str) -> None:
        self._delete_remote(job, reason=reason)

    # --- run in place (an object created on the cluster) -------------------------------

    def _start_in_place(self, job: Job, infos: Sequence[PodSetInfo]) -> bool:
        """Run the cluster's own object (Kueue's ``RunWithPodSetsInfo``): unsuspended (a
        Pod ungated), the admission's node selector, tolerations, labels and annotations in
        its pod templates, and the job's uid on its pods, by which they are counted. Only
        those fields are patched; False when the object is gone."""
        integration = reconciler.integration_of(job)
        infos = [replace(info, labels={**info.labels, JOB_UID_LABEL: str(job.uid)})
                 for info in infos]
        suspended = integration.suspend(job.manifest, True)
        patch = merge_patch_from(suspended, integration.run_with_pod_sets_info(suspended, infos))
        return self.patch(job, patch) is not None

    def _stop_in_place(self, job: Job) -> reconciler.ClusterObject | None:
        """Suspend the cluster's own object and put its pod templates back as they were
        when it was adopted (Kueue's ``StopJob``: ``Suspend`` and ``RestorePodSetsInfo``),
        as one patch guarded by the object's resourceVersion."""
        integration = reconciler.integration_of(job)
        current = self.backend.get_job(job.namespace, job.name, resource=self._resource(job))
        if current is None:
            return None
        restored = integration.restore_pod_sets_info(integration.suspend(current, True),
                                                     _adopted_pod_sets(integration, job))
        patch = merge_patch_from(current, restored)
        patch.setdefault("metadata", {})["resourceVersion"] = (
            current.get("metadata") or {}).get("resourceVersion")
        return self.patch(job, patch)

    def _read_created(self, job: Job, *, fetch: bool) -> reconciler.ClusterObject | None:
        """The object created on the cluster as the watch saw it (or, with ``fetch``, as
        the server has it when the watch has it not)."""
        integration = reconciler.integration_of(job)
        obj = self.created.get((adoption_watch(integration).name, f"{job.namespace}/{job.name}"))
        if obj is not None and obj.get(TOMBSTONE):
            return None
        if obj is None:
            obj = self._fetched(job) if fetch else None
            if obj is None:
                return None
        return self._object(job, obj)

    # --- stop and clean up --------------------------------------------------------------

    def _delete_remote(self, job: Job, *, reason: str) -> None:
        self._delete_remote_named(self._key(job)[0], job.namespace, job.name, reason=reason)

    def _delete_remote_named(self, kind: str, namespace: str, name: str, *,
                             reason: str) -> None:
        resource = self.kinds[kind].resource if kind in self.kinds else None
        if resource is None:
            return
        deleted = self.backend.delete_job(namespace, name, resource=resource)
        if self._gang_supported():
            gang = gang_workload_name(self.integrations[kind], name)
            self.backend.delete_gang_workload(namespace, gang)
            gangs.deleted(self.cluster_id, namespace, gang)
        if deleted:
            logger.info("cluster %s: deleted %s %s/%s (%s)", self.cluster.name, kind,
                        namespace, name, reason)
            self.outcome.deleted.append(f"{namespace}/{name}")
        self.remote.pop((kind, f"{namespace}/{name}"), None)

    def _delete_orphans(self, local: Sequence[Job]) -> None:
        """Delete the cluster's job objects of ours whose local job is gone: a MultiKueue
        copy removed while this worker was unreachable (its workload was dispatched again
        elsewhere), or a job deleted meanwhile. Kueue removes such remote objects once the
        worker is back; left running, the job would run twice."""
        # An object whose Workloads are prebuilt (a StatefulSet, a LeaderWorkerSet) has no
        # copy of its own there: its members' copies are what the cluster runs.
        known = {self._key(job) for job in local if not reconciler.runs_through_members(job)}
        for key, remote in list(self.remote.items()):
            if key in known or remote.get(TOMBSTONE):
                continue
            try:
                self._delete_remote_named(key[0], str(remote.get("namespace")),
                                          str(remote.get("name")), reason="its job is gone")
            except KubeApiError as exc:
                logger.warning("cluster %s: leftover %s %s not deleted: %s",
                               self.cluster.name, key[0], key[1], exc)
