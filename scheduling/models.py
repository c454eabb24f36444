"""Kueue's objects as Django models, one scheduling domain per cluster.

Every object belongs to a cluster (``multicluster.Cluster``), which is the scheduling domain:
names are unique per cluster, as they would be in separate Kubernetes clusters. Spec fields
mirror Kueue's (snake_case); status fields are written only by the reconcilers in
``services.py``. Usage of a cluster queue is never stored: it is derived from the admitted
workloads when a snapshot is built, as Kueue's cache does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import MD5, Cast, Concat, Greatest, Left, StrIndex

from scheduling.choices import (
    BorrowWithinCohortPolicy,
    EventType,
    FungibilityPolicy,
    FungibilityPreference,
    JobSource,
    PreemptionPolicy,
    QueueingStrategy,
    QueueState,
    ReclaimWithinCohort,
    StopPolicy,
    WithinClusterQueue,
    WorkloadPhase,
)
from scheduling.jobframework import registry
from scheduling.queue_order import QUEUE_ORDER_EXPRESSIONS
from scheduling.validators import (
    validate_dns1123_label,
    validate_dns1123_subdomain,
    validate_qualified_name,
    validate_quantity,
)


def default_cluster_id() -> int | None:
    """The manager cluster: where objects go unless another domain is named.

    None only while migrations build the tables (before the manager exists).
    """
    from multicluster.models import Cluster

    return Cluster.objects.manager_id()


class DomainObject(models.Model):
    """Fields every Kueue object has: its domain, name, identity and version."""

    cluster = models.ForeignKey(
        "multicluster.Cluster",
        on_delete=models.CASCADE,
        related_name="+",
        default=default_cluster_id,
        help_text="The scheduling domain (Kubernetes cluster) the object lives in.",
    )
    name = models.CharField(max_length=253, validators=[validate_dns1123_subdomain])
    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    # Bumped on every write, like Kubernetes' resourceVersion; conditional updates use it.
    resource_version = models.PositiveBigIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            self.resource_version = (self.resource_version or 0) + 1
            update_fields = kwargs.get("update_fields")
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "resource_version", "updated_at"}
        super().save(*args, **kwargs)


class NamespacedObject(DomainObject):
    namespace = models.CharField(max_length=63, validators=[validate_dns1123_label])

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class ResourceFlavor(DomainObject):
    """A kind of node (Kueue ResourceFlavor): its labels, taints and tolerations."""

    node_labels = models.JSONField(default=dict, blank=True)
    node_taints = models.JSONField(default=list, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    topology_name = models.CharField(max_length=253, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="resourceflavor_unique_name"),
        ]


class Cohort(DomainObject):
    """A group of cluster queues that lend and borrow quota; cohorts nest through ``parent``."""

    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    fair_sharing_weight = models.CharField(
        max_length=64, null=True, blank=True, validators=[validate_quantity]
    )
    conditions = models.JSONField(default=list, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="cohort_unique_name"),
        ]


class ClusterQueue(DomainObject):
    """A pool of quota (Kueue ClusterQueue) with its admission and preemption policies."""

    cohort = models.ForeignKey(
        Cohort, null=True, blank=True, on_delete=models.PROTECT, related_name="cluster_queues"
    )
    queueing_strategy = models.CharField(
        max_length=32, choices=QueueingStrategy.choices, default=QueueingStrategy.BEST_EFFORT_FIFO
    )
    # Kueue v1beta2: null selects no namespace, {} selects every namespace.
    namespace_selector = models.JSONField(null=True, blank=True, default=dict)
    within_cluster_queue = models.CharField(
        max_length=32, choices=WithinClusterQueue.choices, default=WithinClusterQueue.NEVER
    )
    reclaim_within_cohort = models.CharField(
        max_length=32, choices=ReclaimWithinCohort.choices, default=ReclaimWithinCohort.NEVER
    )
    borrow_within_cohort_policy = models.CharField(
        max_length=32,
        choices=BorrowWithinCohortPolicy.choices,
        default=BorrowWithinCohortPolicy.NEVER,
    )
    borrow_within_cohort_max_priority_threshold = models.IntegerField(null=True, blank=True)
    when_can_borrow = models.CharField(
        max_length=32, choices=FungibilityPolicy.choices, default=FungibilityPolicy.MAY_STOP_SEARCH
    )
    when_can_preempt = models.CharField(
        max_length=32, choices=FungibilityPolicy.choices, default=FungibilityPolicy.TRY_NEXT_FLAVOR
    )
    fungibility_preference = models.CharField(
        max_length=32, choices=FungibilityPreference.choices, blank=True
    )
    stop_policy = models.CharField(max_length=16, choices=StopPolicy.choices, default=StopPolicy.NONE)
    fair_sharing_weight = models.CharField(
        max_length=64, null=True, blank=True, validators=[validate_quantity]
    )
    # spec.admissionChecksStrategy.admissionChecks: [{"name": ..., "onFlavors": [...]}]
    admission_checks = models.JSONField(default=list, blank=True)
    conditions = models.JSONField(default=list, blank=True, editable=False)
    # Bumped whenever quota is released in the queue (Kueue's AllocatableResourceGeneration);
    # flavor-scan progress recorded against an older generation starts over.
    allocatable_generation = models.PositiveBigIntegerField(default=1, editable=False)
    # When the parked workloads of this queue go back to its heap: quota came back in its
    # cohort tree, and requeues are batched (KUEUEWEB["REQUEUE_BATCH_PERIOD_SECONDS"]).
    requeue_due_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="clusterqueue_unique_name"),
        ]


class ParkedShape(models.Model):
    """Pending workloads of one shape that a cluster queue skips until its next requeue.

    A head of this priority and these pod sets did not fit (NoFit) or found nothing to
    preempt, so in a BestEffortFIFO queue every other workload of its shape would fail the
    same way. Kueue keeps this per ClusterQueue in memory (``hashToBulkMoveReason``,
    scheduling-equivalence hashing): the heap's workloads of the hash move to the
    inadmissible set, a workload of that hash that arrives later goes straight there, and
    ``QueueInadmissibleWorkloads`` clears it. One row per shape makes the bulk move and the
    requeue one-row writes, however many workloads share the shape; head selection skips the
    shape's workloads, except the queue's sticky preemptor. Written by the admission
    reconciler only."""

    cluster_queue = models.ForeignKey(
        ClusterQueue, on_delete=models.CASCADE, related_name="parked_shapes"
    )
    priority = models.IntegerField()
    pod_sets_hash = models.CharField(max_length=32)
    # The QuotaReserved reason and message of the head that was parked: why the others of its
    # shape wait (Kueue's GetNoFitReason for the visibility API).
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    parked_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster_queue", "priority", "pod_sets_hash"],
                                    name="parkedshape_unique_shape"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_queue_id}: priority {self.priority}, pod sets {self.pod_sets_hash}"


class FlavorQuota(models.Model):
    """One (flavor, resource) quota of a resource group of a cluster queue or a cohort.

    Kueue nests resourceGroups → flavors → resources; here each leaf is a row so a whole
    queue's quota is edited in one table. Groups, flavor order and resource order are
    recovered from ``resource_group`` and ``position``.
    """

    cluster_queue = models.ForeignKey(
        ClusterQueue, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas"
    )
    cohort = models.ForeignKey(
        Cohort, null=True, blank=True, on_delete=models.CASCADE, related_name="quotas"
    )
    resource_group = models.PositiveSmallIntegerField(default=0)
    position = models.PositiveIntegerField(default=0)
    flavor = models.ForeignKey(ResourceFlavor, on_delete=models.PROTECT, related_name="quotas")
    resource = models.CharField(max_length=253, validators=[validate_qualified_name])
    nominal_quota = models.CharField(max_length=64, validators=[validate_quantity])
    borrowing_limit = models.CharField(
        max_length=64, null=True, blank=True, validators=[validate_quantity]
    )
    lending_limit = models.CharField(
        max_length=64, null=True, blank=True, validators=[validate_quantity]
    )

    class Meta:
        ordering = ["resource_group", "position", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cluster_queue__isnull=False, cohort__isnull=True)
                | Q(cluster_queue__isnull=True, cohort__isnull=False),
                name="flavorquota_one_owner",
            ),
            models.UniqueConstraint(
                fields=["cluster_queue", "flavor", "resource"],
                name="flavorquota_unique_in_clusterqueue",
            ),
            models.UniqueConstraint(
                fields=["cohort", "flavor", "resource"], name="flavorquota_unique_in_cohort"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.flavor_id}/{self.resource}: {self.nominal_quota}"


class LocalQueue(NamespacedObject):
    """The namespaced queue users submit to (Kueue LocalQueue)."""

    cluster_queue = models.ForeignKey(
        ClusterQueue, on_delete=models.PROTECT, related_name="local_queues"
    )
    stop_policy = models.CharField(max_length=16, choices=StopPolicy.choices, default=StopPolicy.NONE)
    fair_sharing_weight = models.CharField(
        max_length=64, null=True, blank=True, validators=[validate_quantity]
    )
    conditions = models.JSONField(default=list, blank=True, editable=False)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="localqueue_unique_name"
            ),
        ]


class WorkloadPriorityClass(DomainObject):
    """A named priority for workloads, independent of pod priority (Kueue)."""

    value = models.IntegerField()
    description = models.TextField(blank=True)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "workload priority classes"
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "name"], name="workloadpriorityclass_unique_name"
            ),
        ]


# --- The cluster's own objects -----------------------------------------------------------------
# Kubernetes kinds Kueue reads but does not own: defined by ``apply`` on a simulated cluster,
# mirrored from the API server for a Kubernetes one (``multicluster.kube.cluster_objects``).


class PriorityClass(DomainObject):
    """A pod priority class (``scheduling.k8s.io/v1``): the priority of a Workload whose pod
    templates name it, or of every Workload naming none when it is the global default."""

    value = models.IntegerField()
    global_default = models.BooleanField(default=False)
    description = models.TextField(blank=True)
    preemption_policy = models.CharField(
        max_length=32, choices=PreemptionPolicy.choices,
        default=PreemptionPolicy.PREEMPT_LOWER_PRIORITY)

    class Meta:
        ordering = ["-value", "name"]
        verbose_name_plural = "priority classes"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="priorityclass_unique_name"),
        ]


class LimitRange(NamespacedObject):
    """A namespace's defaults and bounds for container and pod resources (core/v1).

    ``limits`` is ``spec.limits`` as Kubernetes stores it: ``[{"type": "Container",
    "default": {...}, "defaultRequest": {...}, "min": {...}, "max": {...},
    "maxLimitRequestRatio": {...}}]``, quantities as text."""

    limits = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"],
                                    name="limitrange_unique_name"),
        ]


class RuntimeClass(DomainObject):
    """A container runtime configuration (``node.k8s.io/v1``): a pod naming it is charged
    its ``overhead.podFixed`` on top of its containers' requests."""

    handler = models.CharField(max_length=63)
    # overhead.podFixed: {"cpu": "250m", ...}; empty when the class has no overhead.
    overhead = models.JSONField(default=dict, blank=True)
    # scheduling: {"nodeSelector": {...}, "tolerations": [...]}, as given.
    scheduling = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="runtimeclass_unique_name"),
        ]


class Job(NamespacedObject):
    """A submitted job of a registered kind (``scheduling.jobs``): the manifest as given and
    the status reported by its cluster."""

    # The kind it holds, from the manifest: how the reconciler finds its integration.
    api_version = models.CharField(max_length=253, default="batch/v1", editable=False)
    kind = models.CharField(max_length=63, default="Job", editable=False)
    # The API group of ``api_version`` ("batch" of "batch/v1"; "" for the core group): with
    # the kind, the object's type whatever its version, as Kubernetes keys objects. Computed
    # by the database so that every write path (bulk inserts too) keeps it current.
    api_group = models.GeneratedField(
        expression=Left("api_version", Greatest(StrIndex("api_version", models.Value("/")) - 1,
                                                models.Value(0))),
        output_field=models.CharField(max_length=253), db_persist=True,
    )
    manifest = models.JSONField(help_text="The job as submitted, in its kind's shape "
                                "(apiVersion … spec).")
    # spec.suspend as it is now: Kueue's webhook suspends a queued job; the job reconciler
    # unsuspends it when its workload is admitted and suspends it again on eviction.
    # A kind that makes no Workload (a CronJob) never runs, and stays suspended here.
    suspend = models.BooleanField(default=True, editable=False)
    # The kind's status (a batch/v1 JobStatus for a Job) as reported by the cluster the job
    # runs on.
    status = models.JSONField(default=dict, blank=True, editable=False)
    # The group the object belongs to (a Pod's ``kueue.x-k8s.io/pod-group-name``): the
    # members of a group share ONE Workload, named after the group and linked to one member
    # (the next one when it is deleted), through which the job reconciler runs them all. Empty for an object on its own.
    group_name = models.CharField(max_length=253, blank=True, default="", editable=False)
    # Where the object was created: through kueueweb (the cluster runs a copy of it), or on
    # the Kubernetes cluster itself (kubectl), adopted there: its manifest is the object as
    # the cluster had it, its uid the cluster's, and the cluster's object is run in place.
    source = models.CharField(max_length=16, choices=JobSource.choices,
                              default=JobSource.KUEUEWEB, editable=False)

    class Meta:
        ordering = ["namespace", "name"]
        indexes = [
            models.Index(fields=["cluster", "namespace", "group_name"], name="job_group",
                         condition=~models.Q(group_name="")),
        ]
        constraints = [
            # Objects of two kinds may share a name, as in Kubernetes.
            models.UniqueConstraint(fields=["cluster", "namespace", "api_group", "kind", "name"],
                                    name="job_unique_kind_name"),
        ]

    def group_members(self) -> list[Job]:
        """The members of the group the job belongs to (itself among them), by name."""
        members = Job.objects.filter(
            cluster_id=self.cluster_id, namespace=self.namespace,  # type: ignore[misc]
            api_version=self.api_version, kind=self.kind, group_name=self.group_name)
        return sorted(members, key=lambda member: member.name)

    @property
    def created_on_cluster(self) -> bool:
        return self.source == JobSource.CLUSTER

    @property
    def kind_reference(self) -> str:
        """The kind as URLs and the API's ``?kind=`` name it (``JobSet``; ``Kind.group``
        when two registered kinds share the kind)."""
        return registry.kind_reference(self)


class Workload(NamespacedObject):
    """Kueue's unit of admission: pod sets with their requests, a priority and a queue."""

    # --- spec ---
    queue_name = models.CharField(max_length=253, blank=True, db_index=True)
    priority_class_name = models.CharField(max_length=253, blank=True)
    # "kueue.x-k8s.io/workloadpriorityclass" or "scheduling.k8s.io/priorityclass" (v1beta1 terms)
    priority_class_source = models.CharField(max_length=64, blank=True)
    priority = models.IntegerField(default=0)
    active = models.BooleanField(default=True)
    maximum_execution_time_seconds = models.PositiveIntegerField(null=True, blank=True)
    # [{"name": "main", "count": 3, "minCount": 2, "template": {...}}] as in Kueue.
    pod_sets = models.JSONField()
    # Equal pod sets, equal hash: what pending workloads are grouped on (their demand per
    # queue) without reading and comparing every row's pod sets. The database computes it,
    # so every write path keeps it current. A grouping key only: equal pod sets written with
    # their keys in another order (SQLite keeps the text) make two groups, never a wrong one.
    pod_sets_hash = models.GeneratedField(
        expression=MD5(Cast("pod_sets", models.TextField())),
        output_field=models.CharField(max_length=32), db_persist=True,
    )
    labels = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True)
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="workloads"
    )

    # --- status (written by reconcilers only) ---
    phase = models.CharField(
        max_length=16, choices=WorkloadPhase.choices, default=WorkloadPhase.PENDING, editable=False
    )
    queue_state = models.CharField(
        max_length=16, choices=QueueState.choices, default=QueueState.ACTIVE, editable=False
    )
    # The LocalQueue ``queue_name`` resolves to, once it exists (a LocalQueue's cluster queue
    # is immutable, so pending workloads can be grouped per cluster queue through it).
    local_queue = models.ForeignKey(
        LocalQueue, null=True, blank=True, on_delete=models.SET_NULL, related_name="workloads",
        editable=False,
    )
    # Set with status.admission while quota is reserved.
    cluster_queue = models.ForeignKey(
        ClusterQueue, null=True, blank=True, on_delete=models.PROTECT,
        related_name="reserving_workloads", editable=False,
    )
    admission = models.JSONField(null=True, blank=True, editable=False)
    conditions = models.JSONField(default=list, blank=True, editable=False)
    # Ordering timestamp in the queue: creation, or the last eviction (requeuingStrategy
    # timestamp Eviction, Kueue's default).
    queued_at = models.DateTimeField(null=True, blank=True, editable=False)
    quota_reserved_at = models.DateTimeField(null=True, blank=True, editable=False)
    requeue_state = models.JSONField(null=True, blank=True, editable=False)
    requeue_at = models.DateTimeField(null=True, blank=True, editable=False)
    reclaimable_pods = models.JSONField(default=list, blank=True, editable=False)
    admission_check_states = models.JSONField(default=list, blank=True, editable=False)
    accumulated_past_execution_time_seconds = models.PositiveIntegerField(default=0, editable=False)
    scheduling_stats = models.JSONField(default=dict, blank=True, editable=False)
    # Engine state carried between cycles (flavor scan progress, last attempt).
    scheduler_state = models.JSONField(default=dict, blank=True, editable=False)
    # The queue's sticky preemptor: it issued preemptions and keeps the head of its queue
    # until it is admitted (Kueue's queue manager), so freed quota goes to it.
    preempting = models.BooleanField(default=False, editable=False)
    nominated_cluster_names = models.JSONField(default=list, blank=True, editable=False)
    cluster_name = models.CharField(max_length=253, blank=True, editable=False)
    # The quota a workload holds depends on its admission, reclaimable pods and pod sets
    # only: equal hash, equal usage. Queue usage is summed per hash (a group per job
    # template and flavor assignment), computed by the database as ``pod_sets_hash`` is.
    usage_hash = models.GeneratedField(
        expression=MD5(Concat(
            Cast("admission", models.TextField()), Cast("reclaimable_pods", models.TextField()),
            Cast("pod_sets", models.TextField()), output_field=models.TextField(),
        )),
        output_field=models.CharField(max_length=32), db_persist=True,
    )

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="workload_unique_name"
            ),
        ]
        indexes = [
            # Heads of each cluster queue: active pending workloads by priority, then time.
            # Kueue's heap order, so a queue's first rows are read without a sort.
            models.Index(
                F("local_queue"), F("phase"), F("queue_state"), *QUEUE_ORDER_EXPRESSIONS,
                name="workload_queue_order",
            ),
            # Heads of a local queue with a long parked shape ahead of its candidates
            # (``admission._shape_keys``): its distinct shapes (priority, pod sets), a
            # seek each, then a shape's first workloads in queue order without a sort.
            models.Index(
                fields=["local_queue", "phase", "queue_state", "active", "preempting",
                        "priority", "pod_sets_hash", "queued_at", "uid"],
                name="workload_queue_shapes",
            ),
            # Per domain and phase; with the queue keys, counts per queue (finished workloads
            # are most of a long-lived table) read the index only.
            models.Index(fields=["cluster", "phase", "cluster_queue", "local_queue"],
                         name="workload_domain_phase_queues"),
            # ``?queueName=`` of the API within a domain, counted from the index alone.
            models.Index(fields=["cluster", "queue_name"], name="workload_domain_queue_name"),
            # Pending workloads that count (active) per local queue, their queue state and
            # pod sets: the pending counts and demand of the queue lists, the overview and
            # /metrics read this small index only, not the rows. The id, last, is the
            # example row of a group (MIN(id)). The phase, constant here, makes the index
            # fix ``local_queue = ? AND phase = ?`` as ``workload_queue_order`` does, so that
            # SQLite, which has no statistics to choose by, takes it.
            models.Index(fields=["local_queue", "phase", "queue_state", "pod_sets_hash", "id"],
                         condition=Q(phase=WorkloadPhase.PENDING, active=True),
                         name="workload_pending"),
            # Workloads holding quota per queue, phase and usage: the queues' usage and
            # counts (lists, overview, /metrics) from this index and one row per hash.
            models.Index(fields=["cluster_queue", "local_queue", "phase", "active", "usage_hash",
                                 "id"],
                         condition=Q(phase__in=[WorkloadPhase.QUOTA_RESERVED,
                                                WorkloadPhase.ADMITTED]),
                         name="workload_holding"),
            # The workload list's default order (newest first) without sorting the table.
            models.Index(fields=["created_at", "id"], name="workload_created"),
            models.Index(fields=["cluster_queue", "phase"], name="workload_cq_phase"),
            models.Index(fields=["requeue_at"], name="workload_requeue_at"),
            # The usage sampler reads the reservations made since its previous sample.
            models.Index(fields=["quota_reserved_at"], name="workload_reserved_at"),
        ]


def examples(key: str, ids: Iterable[int], *fields: str) -> dict[str, dict[str, Any]]:
    """``fields`` of one workload per ``key`` (``pod_sets_hash`` or ``usage_hash``), read from
    the example rows ``ids`` of grouped counts (``MIN(id)`` per group): what equal hashes
    share is read once, not once per workload."""
    rows = Workload.objects.filter(pk__in=set(ids)).values(key, *fields)
    return {row[key]: row for row in rows}


def name_order(workload: Workload | dict[str, Any]) -> tuple[str, str]:
    """Sort key of Workload's default order, for a model or a ``values()`` row.

    Reconciler queries that read the few workloads in a phase ask for no ``ORDER BY`` and
    sort with this key. An ``ORDER BY namespace, name`` (the default ordering) makes SQLite,
    which keeps no statistics in embedded mode, prefer the unique (cluster, namespace, name)
    index to avoid a sort, and read every workload of the domain, finished ones included.
    """
    if isinstance(workload, dict):
        return workload["namespace"], workload["name"]
    return workload.namespace, workload.name


class Event(models.Model):
    """An append-only history entry about an object, shown on its page (Kubernetes Event)."""

    cluster = models.ForeignKey("multicluster.Cluster", on_delete=models.CASCADE, related_name="+")
    workload = models.ForeignKey(
        Workload, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    object_kind = models.CharField(max_length=64)
    object_namespace = models.CharField(max_length=63, blank=True)
    object_name = models.CharField(max_length=253)
    type = models.CharField(max_length=16, choices=EventType.choices, default=EventType.NORMAL)
    reason = models.CharField(max_length=128)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(db_index=True)
    # An event observed on a Kubernetes cluster (a pod's FailedScheduling, say): its uid
    # there, and how often it happened (Kubernetes counts a repeated event on one object
    # rather than making another), so that a repeat updates this row.
    uid = models.CharField(max_length=64, blank=True)
    count = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uid"], name="event_unique_remote_uid",
                                    condition=~models.Q(uid="")),
        ]
        indexes = [
            # A job's own events (its page); the domain comes first so that this index, not
            # the one on ``cluster`` alone, is chosen for the whole condition.
            models.Index(fields=["cluster", "object_kind", "object_namespace", "object_name",
                                 "-created_at"], name="event_domain_object"),
        ]

    def __str__(self) -> str:
        return f"{self.object_kind} {self.object_name}: {self.reason}"


class AdmissionLease(models.Model):
    """Who runs the admission cycle of a domain, until when (one writer per domain)."""

    cluster = models.OneToOneField(
        "multicluster.Cluster", on_delete=models.CASCADE, related_name="admission_lease"
    )
    holder = models.CharField(max_length=128, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # Kueue's schedulingCycle counter, and a fingerprint of the quota specs seen by the last
    # cycle: when quotas change, parked workloads get another chance.
    cycle = models.PositiveBigIntegerField(default=0)
    spec_fingerprint = models.CharField(max_length=64, blank=True)
    # A cycle was asked for while the lease was held: the holder runs another when it ends,
    # so a trigger that found the lease busy is never lost.
    wanted = models.BooleanField(default=False)

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.holder or '-'}"


class QueueUsageSample(models.Model):
    """One cluster queue's usage and workload counts at one moment, for the charts.

    Written by ``scheduling.metrics.history.sample_usage`` (a periodic task); kept for 24 hours.
    ``usage`` and ``nominal`` map "flavor/resource" to the amount held and to the queue's
    nominal quota then, in base units (CPU cores, bytes): quotas change, and what was
    borrowed at a moment is usage above the nominal quota of that moment. ``cohort`` is the
    queue's cohort then (Kueue reports nothing borrowed by a queue outside a cohort).
    ``local_pending`` maps "namespace/name" of each local queue to its pending workloads.
    ``reservations`` counts the quota reservations since the previous sample and
    ``wait_p50_seconds``/``wait_p90_seconds`` are the median and 90th percentile of their
    waits (null when there were none).
    """

    cluster = models.ForeignKey("multicluster.Cluster", on_delete=models.CASCADE, related_name="+")
    cluster_queue = models.CharField(max_length=253)
    sampled_at = models.DateTimeField()
    pending = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    usage = models.JSONField(default=dict, blank=True)
    cohort = models.CharField(max_length=253, blank=True, default="")
    nominal = models.JSONField(default=dict, blank=True)
    local_pending = models.JSONField(default=dict, blank=True)
    reservations = models.PositiveIntegerField(default=0)
    wait_p50_seconds = models.FloatField(null=True, blank=True)
    wait_p90_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["sampled_at", "cluster_queue"]
        indexes = [
            models.Index(fields=["cluster", "sampled_at"], name="usagesample_domain_time"),
            # One queue's charts read its samples only, not every queue's of the window.
            models.Index(
                fields=["cluster", "cluster_queue", "sampled_at"], name="usagesample_queue_time"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_queue} @ {self.sampled_at:%Y-%m-%d %H:%M:%S}"


class SavedView(models.Model):
    """A user's named view of a list page: the query string of its filters, grouping,
    columns and sort order. Each user sees only their own."""

    class Page(models.TextChoices):
        WORKLOADS = "workloads", "Workloads"
        JOBS = "jobs", "Jobs"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="saved_views")
    page = models.CharField(max_length=16, choices=Page.choices)
    name = models.CharField(max_length=100)
    query = models.TextField(blank=True, max_length=4000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["page", "name"]
        constraints = [
            models.UniqueConstraint(fields=["user", "page", "name"], name="savedview_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.page}: {self.name}"
