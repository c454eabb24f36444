"""What a job kind implements so that kueueweb queues, admits, runs and finishes it
(Kueue's ``GenericJob`` and ``IntegrationCallbacks``, ``pkg/controller/jobframework/interface.go``).

A kind is one subclass of ``GenericJob`` in ``scheduling/jobs/<kind>.py``, registered under its
framework name in ``scheduling/jobs/__init__.py``; a kind whose jobs Kueue queues but that
makes no Workload itself (a CronJob) subclasses only ``JobKind``. Its methods take and return
the object as a Kubernetes-shaped dict (the stored manifest, or the status a cluster reports), so a kind needs
neither the database nor a cluster: the job reconciler (``scheduling.job_reconciler``)
reads and writes the objects and calls the kind for what is the kind's own.

The simulated cluster also plays each kind's own controller (the Job controller for a Job):
``SimulatedController`` is the small part of a kind the simulator calls, over ``SimulatedPods``
(the pods of one job on the simulated cluster).
"""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from scheduling.core.fields import FieldError
from scheduling.jobframework.podsets import PodSetInfo


@dataclass(frozen=True)
class JobReport:
    """What a job's status tells the workload lifecycle: the pods it wants (``parallelism``:
    the admitted count), how many are active, ready, succeeded and failed, the pods per pod
    set that no longer need quota (``reclaimable_pods``, Kueue's ``JobWithReclaimablePods``;
    empty for a kind that reclaims none), and once it is finished, ``finished`` =
    ("Succeeded" | "Failed", message)."""

    parallelism: int
    completions: int | None
    active: int
    ready: int
    succeeded: int
    failed: int
    finished: tuple[str, str] | None = None
    reclaimable_pods: Mapping[str, int] = field(default_factory=dict)

    @property
    def all_ready(self) -> bool:
        """Kueue's PodsReady: ready + succeeded reach min(parallelism, completions)."""
        needed = self.parallelism if self.completions is None else min(
            self.parallelism, self.completions)
        return self.ready + self.succeeded >= needed


@dataclass(frozen=True)
class ScalablePodSet:
    """A pod set an elastic kind scales: its ``name`` (as in ``pod_sets``), the field path of
    the count that scales it (``spec.parallelism``) and that count now."""

    name: str
    path: str
    count: int


@dataclass(frozen=True)
class ScaleRefusal:
    """Why a job may not change its counts now: ``message`` is the field error (Kueue's
    webhook words), ``reason`` the same for a page's disabled control."""

    message: str
    reason: str


class SimulatedPod(Protocol):
    """A pod of the simulated cluster, as a kind's simulated controller sees it."""

    name: str
    pod_set: str
    phase: str
    ready: bool
    node_name: str
    created_at: datetime
    ready_at: datetime | None

    @property
    def gated(self) -> bool: ...


class SimulatedPods(Protocol):
    """The pods of one job on the simulated cluster, and what a controller may do to them."""

    def all(self) -> list[SimulatedPod]:
        """Every pod of the job, oldest first."""

    def create(self, count: int, *, gates: Sequence[str] = (),
               pod_set: str | None = None) -> list[SimulatedPod]:
        """``count`` new pods of ``pod_set`` (default: the job's first pod set), with the
        admission's placement."""

    def delete(self, pods: Sequence[SimulatedPod], *, reason: str = "") -> None:
        """Delete ``pods``; with a ``reason``, an event per pod (``SuccessfulDelete``)."""

    def ungate(self, pods: Sequence[SimulatedPod]) -> None:
        """Remove the scheduling gates of ``pods``."""


class SimulatedController(ABC):
    """How the simulated cluster plays a kind's own controller for one running job."""

    @abstractmethod
    def reconcile(
        self,
        manifest: Mapping[str, Any],
        status: Mapping[str, Any],
        pods: SimulatedPods,
        *,
        admitted: int,
        allowed: int,
        elastic: bool,
        now: datetime,
    ) -> tuple[dict[str, Any], JobReport]:
        """Create and delete pods as the kind's controller would, and return the object's
        new status and the report for the workload lifecycle.

        ``admitted`` is the admission's pod count; ``allowed`` the pods the current slice
        of an ``elastic`` job lets run (lowered by a scale-down).
        """

    def first_pods(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
                   info: PodSetInfo, pod_set: Mapping[str, Any], *, elastic: bool) -> int:
        """How many pods of a pod set to create when the job starts (in one gang)."""
        return info.count


class JobKind(ABC):
    """A kind of object submitted as a job: its GVK, what its webhook refuses and the pod
    templates a namespace grant checks. A kind Kueue queues is a ``GenericJob``; a kind
    that is only a ``JobKind`` makes no Workload of its own, because what Kueue queues are
    the jobs it creates (a CronJob's Jobs, each carrying the queue label of its template)."""

    framework_name: str
    """Kueue's framework name (``integrations.frameworks``), e.g. ``batch/job``; the
    registry's key."""
    api_version: str
    kind: str
    plural: str
    """The resource name on an API server (``jobs``)."""
    max_name_length: int = 253
    document_settings: tuple[str, ...] = ()
    """Keys of ``KUEUEWEB`` whose value lists YAML files of objects the kind reads, as
    Kueue reads objects an integration depends on from the cluster (a TrainJob's training
    runtimes); given to ``configure``."""

    def configure(self, files: Mapping[str, Sequence[tuple[str, list[Any]]]]) -> list[str]:
        """Take the documents of the files each of ``document_settings`` lists (by setting,
        as (path, documents) pairs), at startup and whenever the settings change; what is
        wrong with them, in which case nothing changes. Default: nothing to read."""
        return []

    implicitly_enables: tuple[str, ...] = ()
    """Frameworks enabled with this one for the objects it creates (Kueue's
    ``ImplicitlyEnabledFrameworkNames``: a Deployment's Pods), which take only such objects
    unless they are enabled themselves (``accepts_implicitly``)."""

    has_webhook: bool = True
    """Kueue serves a mutating and a validating admission webhook for the kind
    (``scheduling.jobframework.webhook``); not for a kind Kueue does not integrate."""
    webhook_defaults_on_update: bool = False
    """The mutating webhook is called on UPDATE too, not only on CREATE (a Deployment's
    template follows its queue label)."""

    keeps_replicas: bool = False
    """Its objects keep a number of Pods, each queued on its own (a Deployment): kueueweb
    plays their ReplicaSet controller (``scheduling.deployments``), asked for at once when
    an object is created or changed, besides its periodic pass."""

    prebuilds_group_workloads: bool = False
    """Its objects' Workloads are built for them up front, before any pod exists (Kueue's
    prebuilt Workloads of a StatefulSet, of a LeaderWorkerSet's groups): pod-group Workloads
    linked to the object (``services.create_prebuilt_workload``), each run by the job
    reconciler through the jobs whose group name is the Workload's name."""

    def accepts_implicitly(self, manifest: Mapping[str, Any]) -> bool:
        """Whether the kind, enabled only implicitly by another framework, takes this object:
        one created for that framework's object. Default: no."""
        return False

    def controller_reference(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The ``ownerReference`` an object of this kind puts on what it creates (a
        CronJob's Jobs, a Deployment's Pods): it is their controller."""
        metadata = manifest.get("metadata") or {}
        return {"apiVersion": self.api_version, "kind": self.kind,
                "name": metadata.get("name"), "uid": metadata.get("uid"),
                "controller": True, "blockOwnerDeletion": True}

    def controller_uid(self, child: Mapping[str, Any]) -> str | None:
        """The uid of the object of this kind that controls ``child``, if one does."""
        metadata = child.get("metadata")
        refs = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
        for ref in refs or ():
            if isinstance(ref, Mapping) and ref.get("kind") == self.kind and ref.get(
                    "controller"):
                return str(ref.get("uid"))
        return None

    @property
    def enabled_with(self) -> str:
        """The framework name that enables the kind: its own; a kind that makes no Workload
        names the framework of the jobs it creates."""
        return self.framework_name

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The object as the kind's mutating webhook defaults it on create, before it is
        validated (Kueue's ``Default``); default: unchanged."""
        return dict(manifest)

    @abstractmethod
    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        """What Kubernetes and Kueue's webhook for the kind refuse (field-path errors); the
        common rules are ``jobframework.validate_common``, which a kind calls."""

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        """The object's pod templates with their field paths (what a grant checks)."""
        return []

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        return bool((manifest.get("spec") or {}).get("suspend", False))

    def cron_schedule(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        """The cron schedule the object creates its jobs on, with its field path (a
        CronJob's ``spec.schedule``); the service checks its grammar with the cron library,
        which a pure kind may not import. Default: none."""
        return None

    def queue_labels(self, manifest: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
        """The labels that name the LocalQueue and the priority class, and the field path
        they sit under (``metadata.labels`` follows it): the object's own; a kind that
        makes no Workload, those of the jobs it creates."""
        return (manifest.get("metadata") or {}).get("labels") or {}, ""

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        """The pod PriorityClass the object's templates name, with its field path: the
        Workload's priority class when no WorkloadPriorityClass label gives one (Kueue's
        ``PriorityClass``). ``None``: none is named, or the kind does not read it."""
        return None


class GenericJob(JobKind):
    """One job kind Kueue queues. Subclasses set the class attributes and implement the
    abstract methods; the others have the defaults of a kind that does not need them."""

    elastic: bool = False
    """Whether the kind can scale through workload slices (Kueue's elastic-job annotation)."""
    stop_deletes: bool = False
    """A running object of the kind cannot be suspended again (a Pod, once ungated): the job
    reconciler stops it by deleting it, and it is not run again (Kueue's ``JobWithCustomStop``
    of the pod integration). ``suspended_status`` says how it ended."""
    constructs_workload: bool = True
    """Whether submitting an object makes its Workload from ``pod_sets``. False for a kind
    Kueue does not reconcile (an external framework): its Workload is created through the
    API by whoever runs the kind, naming the object in ``metadata.ownerReferences``."""
    simulated: SimulatedController | None = None

    # --- the Workload --------------------------------------------------------------------

    @abstractmethod
    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        """The pod sets the object asks for, in Kueue's shape (name, count, minCount,
        template)."""

    # --- run and stop --------------------------------------------------------------------

    def suspend(self, manifest: Mapping[str, Any], suspend: bool = True) -> dict[str, Any]:
        """The object with ``spec.suspend`` set; applied to ``{}``, the merge patch that
        sets it."""
        result = dict(manifest)
        result["spec"] = {**(manifest.get("spec") or {}), "suspend": suspend}
        return result

    @abstractmethod
    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """The object unsuspended with the admission's per-pod-set info merged into its pod
        templates (Kueue's ``RunWithPodSetsInfo``)."""

    @abstractmethod
    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The object with its pod templates as the Workload's pod sets recorded them
        (Kueue's ``RestorePodSetsInfo``)."""

    def scalable_pod_sets(self, manifest: Mapping[str, Any]) -> list[ScalablePodSet]:
        """An elastic kind: the pod sets whose count may change while the job runs, with
        where the count lives and its value now."""
        return []

    def scale(self, manifest: Mapping[str, Any], counts: Mapping[str, int]) -> dict[str, Any]:
        """An elastic kind: the object with the counts of its scalable pod sets (by name)
        set to ``counts``, every other field kept (a Kubernetes cluster gets the spec fields
        that changed, as a merge patch). The default writes each count at the path its
        ``ScalablePodSet`` declares; a kind with no scalable pod set is returned unchanged."""
        result = copy.deepcopy(dict(manifest))
        for pod_set in self.scalable_pod_sets(manifest):
            if pod_set.name in counts:
                _set_path(result, pod_set.path, counts[pod_set.name])
        return result

    def scale_refusal(self, manifest: Mapping[str, Any], *,
                      suspended: bool) -> ScaleRefusal | None:
        """What in the object itself forbids changing its counts now (None: nothing)."""
        return None

    def validate_scale(
        self, manifest: Mapping[str, Any], counts: Mapping[str, int], *,
        partial_admission: bool,
    ) -> list[FieldError]:
        """The kind's own rules on new counts (each already an int32 >= 0), by field path."""
        return []

    # --- status --------------------------------------------------------------------------

    def resumed_status(self, status: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
        """The object's status once the job is unsuspended, as the kind's own controller
        writes it before any pod reports (the Job controller's ``startTime``). Default:
        unchanged, the kind's controller reports the rest."""
        return dict(status)

    def suspended_status(self, status: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
        """The object's status once the job is suspended and its pods are gone. Default:
        unchanged."""
        return dict(status)

    @abstractmethod
    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        """("Succeeded" | "Failed", message) once the object's status is terminal."""

    @abstractmethod
    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        """The counts the workload lifecycle needs, from the status a cluster reports;
        ``ready_pods`` stands in when the status does not count ready pods."""

    # --- other clusters ------------------------------------------------------------------

    def multikueue_copy(
        self, manifest: Mapping[str, Any], *, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        """The object sent to a MultiKueue worker, whose Kueue admits the already admitted
        copy of the Workload (Kueue's adapter ``SyncJob``): metadata fit for creation with
        ``labels`` (origin, prebuilt workload) added, ``spec.managedBy`` cleared so the
        worker's own controller runs it, suspended until admitted there."""
        metadata = {k: v for k, v in (manifest.get("metadata") or {}).items()
                    if k in ("name", "namespace", "labels", "annotations", "generation")}
        metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
        copied = {k: v for k, v in manifest.items() if k != "status"}
        return self.suspend({**self.without_managed_by(copied), "metadata": metadata})

    def multikueue_status(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any],
        remote_status: Mapping[str, Any], *, now: datetime,
    ) -> dict[str, Any]:
        """The status the hub's object (``manifest`` with its ``status``) takes from its copy
        on the MultiKueue worker (Kueue's adapter ``SyncJob``): the remote status whole."""
        return dict(remote_status)

    def remote_object(self, manifest: Mapping[str, Any], spec: Mapping[str, Any], *,
                      namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
        """An object of this kind named as ``manifest``, in ``namespace``, with its labels
        and ``labels``, its annotations, and ``spec``: what ``remote_copy`` creates."""
        metadata = manifest.get("metadata") or {}
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": str(metadata.get("name", "")), "namespace": namespace,
                         "labels": {**(metadata.get("labels") or {}), **labels},
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": dict(spec),
        }

    def without_managed_by(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The object with its managedBy cleared (Kueue's ``JobWithManagedBy``), so the
        cluster's own controller runs it; default: ``spec.managedBy``."""
        spec = {k: v for k, v in (manifest.get("spec") or {}).items() if k != "managedBy"}
        return {**manifest, "spec": spec}

    @abstractmethod
    def remote_copy(
        self,
        manifest: Mapping[str, Any],
        *,
        namespace: str,
        labels: Mapping[str, str],
        pod_labels: Mapping[str, str],
        infos: Sequence[PodSetInfo],
        gang_workload: str | None = None,
    ) -> dict[str, Any]:
        """The object to create on a Kubernetes cluster for an admitted workload: running,
        with ``infos`` merged in, ``labels`` (origin, prebuilt workload) on it and
        ``pod_labels`` on its pod templates, ``spec.managedBy`` cleared (Kueue's MultiKueue
        adapter)."""



@dataclass(frozen=True)
class GroupComposition:
    """What the members of a group make: the Workload's pod sets, or, while they cannot make
    one yet, why (Kueue's ``ErrWorkloadCompose``)."""

    pod_sets: list[dict[str, Any]] | None
    message: str = ""


class JobGroup(ABC):
    """A kind whose objects may form a group admitted as ONE Workload (Kueue's pod groups):
    the members share a group name in a namespace, the Workload is named after the group and
    built once enough members exist, each member runs with the pod set of its role, and the
    group finishes as a whole. The job reconciler runs the group as a unit."""

    group_label: str
    """The label that names a member's group."""
    group_workload_annotation: str
    """The annotation (value ``"true"``) that marks the Workload as a group's."""

    @abstractmethod
    def group_name(self, manifest: Mapping[str, Any]) -> str | None:
        """The group the object belongs to, or None for an object on its own."""

    @abstractmethod
    def member_pod_set(self, manifest: Mapping[str, Any]) -> str:
        """The name of the group Workload's pod set the member runs as (its role)."""

    @abstractmethod
    def compose_group(self, members: Sequence[Mapping[str, Any]]) -> GroupComposition:
        """The pod sets of the group's Workload from its members (objects with their
        ``status``), or why there is none yet."""

    @abstractmethod
    def absent_members(self, members: Sequence[Mapping[str, Any]]) -> int:
        """How many members the group misses (gone or failed, awaiting replacement)."""

    @abstractmethod
    def group_report(self, members: Sequence[Mapping[str, Any]]) -> JobReport:
        """The group's account for the workload lifecycle, from its members (objects with
        their ``status``)."""


_PATH_PART = re.compile(r"([^.\[\]]+)((?:\[\d+\])*)")


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at a field path such as ``spec.workerGroups[0].replicas``, creating the
    maps and list items on the way."""
    parts: list[str | int] = []
    for match in _PATH_PART.finditer(path):
        parts.append(match.group(1))
        parts.extend(int(i) for i in re.findall(r"\d+", match.group(2)))
    node: Any = obj
    for part, following in zip(parts, parts[1:], strict=False):
        if isinstance(part, int):
            node.extend({} for _ in range(part + 1 - len(node)))
        elif node.get(part) is None:
            node[part] = [] if isinstance(following, int) else {}
        node = node[part]
    if isinstance(parts[-1], int):
        node.extend({} for _ in range(parts[-1] + 1 - len(node)))
    node[parts[-1]] = value
