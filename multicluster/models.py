"""Clusters (scheduling domains), their nodes, admission checks and MultiKueue dispatch."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.views.decorators.debug import sensitive_variables

from multicluster import secrets
from multicluster.choices import (
    ClusterRole,
    ConnectionType,
    Dispatcher,
    DispatchState,
    PodPhase,
    PodSetMergePolicy,
)
from scheduling.models import DomainObject
from scheduling.validators import validate_dns1123_subdomain


class ClusterQuerySet(models.QuerySet["Cluster"]):
    def manager_id(self) -> int | None:
        return self.filter(role=ClusterRole.MANAGER).values_list("pk", flat=True).first()

    def workers(self) -> ClusterQuerySet:
        return self.filter(role=ClusterRole.WORKER)


class Cluster(models.Model):
    """A Kubernetes cluster kueueweb knows: the MultiKueue manager or a worker.

    Each cluster is a scheduling domain of its own (its queues and workloads carry it) and has
    a connection that runs its admitted jobs: a simulated cluster or a real one reached with
    its kubeconfig, which is stored encrypted and never returned.
    """

    name = models.CharField(max_length=253, unique=True, validators=[validate_dns1123_subdomain])
    role = models.CharField(max_length=16, choices=ClusterRole.choices, default=ClusterRole.WORKER)
    connection_type = models.CharField(
        max_length=16, choices=ConnectionType.choices, default=ConnectionType.SIMULATED
    )
    kubeconfig_encrypted = models.TextField(blank=True, editable=False)
    # Simulated clusters: {"startDelaySeconds": 5, "defaultRunSeconds": 60, "speed": 1}
    # (see multicluster.simulated.runner.SimulationSettings).
    simulation = models.JSONField(default=dict, blank=True)
    # Off by default: on a shared cluster, namespaces are the cluster admins' to create (with
    # their quotas and policies); Kubernetes' system namespaces are never created either way.
    create_namespaces = models.BooleanField(
        default=False, help_text="Create a job's namespace on this Kubernetes cluster when it "
        "is missing (never kube-system, kube-public or kube-node-lease).",
    )
    # --- status (written by the cluster reconciler) ---
    conditions = models.JSONField(default=list, blank=True, editable=False)
    lost_since = models.DateTimeField(null=True, blank=True, editable=False)
    reconnect_attempts = models.PositiveIntegerField(default=0, editable=False)
    next_reconnect_at = models.DateTimeField(null=True, blank=True, editable=False)
    capacity = models.JSONField(default=dict, blank=True, editable=False)
    resource_version = models.PositiveBigIntegerField(default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ClusterQuerySet.as_manager()

    class Meta:
        ordering = ["-role", "name"]  # the manager ("manager" > "worker" reversed) first
        constraints = [
            models.UniqueConstraint(
                fields=["role"], condition=Q(role="manager"), name="cluster_single_manager"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            self.resource_version += 1
        super().save(*args, **kwargs)

    @property
    def has_kubeconfig(self) -> bool:
        return bool(self.kubeconfig_encrypted)

    @sensitive_variables()
    def set_kubeconfig(self, kubeconfig: str) -> None:
        self.kubeconfig_encrypted = secrets.encrypt(kubeconfig) if kubeconfig else ""

    @sensitive_variables()
    def get_kubeconfig(self) -> str:
        return secrets.decrypt(self.kubeconfig_encrypted) if self.kubeconfig_encrypted else ""


class Node(models.Model):
    """A node of a cluster: observed from a real cluster, or defined for a simulated one."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253, validators=[validate_dns1123_subdomain])
    capacity = models.JSONField(default=dict, help_text='Allocatable resources, e.g. {"cpu": "8"}.')
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    unschedulable = models.BooleanField(default=False)
    ready = models.BooleanField(default=True)

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.name}"


class AdmissionCheck(DomainObject):
    """A second admission phase a cluster queue may require (Kueue AdmissionCheck)."""

    controller_name = models.CharField(max_length=253)
    parameters = models.JSONField(null=True, blank=True)
    conditions = models.JSONField(default=list, blank=True, editable=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="admissioncheck_unique_name"),
        ]


class MultiKueueConfig(DomainObject):
    """Which worker clusters a MultiKueue admission check dispatches to, in preference order."""

    clusters = models.JSONField(default=list, help_text="Worker cluster names, in order.")
    dispatcher = models.CharField(
        max_length=16, choices=Dispatcher.choices, default=Dispatcher.ALL_AT_ONCE
    )

    class Meta:
        ordering = ["name"]
        verbose_name = "MultiKueue config"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="multikueueconfig_unique_name"),
        ]


class ProvisioningRequestConfig(DomainObject):
    """How a ProvisioningRequest admission check asks for capacity (Kueue
    ProvisioningRequestConfig, ``kueue.x-k8s.io/v1beta2``)."""

    provisioning_class_name = models.CharField(max_length=253)
    # spec.parameters: {name: value}, each value at most 255 characters.
    parameters = models.JSONField(default=dict, blank=True)
    # spec.managedResources: only pod sets requesting one of these are provisioned.
    managed_resources = models.JSONField(default=list, blank=True)
    # spec.retryStrategy, defaults applied.
    backoff_limit_count = models.IntegerField(default=3)
    backoff_base_seconds = models.IntegerField(default=60)
    backoff_max_seconds = models.IntegerField(default=1800)
    # spec.podSetUpdates.nodeSelector: [{"key": ..., "valueFromProvisioningClassDetail": ...}]
    pod_set_updates_node_selector = models.JSONField(default=list, blank=True)
    pod_set_merge_policy = models.CharField(
        max_length=48, blank=True, choices=PodSetMergePolicy.choices)

    class Meta:
        ordering = ["name"]
        verbose_name = "ProvisioningRequest config"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"],
                                    name="provisioningrequestconfig_unique_name"),
        ]


class ProvisioningRequest(models.Model):
    """A request for capacity on a simulated cluster (cluster-autoscaler's
    ``autoscaling.x-k8s.io/v1`` ProvisioningRequest), owned by the workload it is for.

    ``spec`` and ``status`` have the Kubernetes object's shape; the pod templates its pod
    sets name live in ``pod_templates`` (a simulated cluster has no PodTemplate objects).
    A Kubernetes cluster's requests live in that cluster.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE,
                                related_name="provisioning_requests")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    workload = models.ForeignKey("scheduling.Workload", on_delete=models.CASCADE,
                                 related_name="provisioning_requests")
    labels = models.JSONField(default=dict, blank=True)
    spec = models.JSONField(default=dict)
    pod_templates = models.JSONField(default=dict, blank=True)
    status = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"],
                                    name="provisioningrequest_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Dispatch(models.Model):
    """A hub workload's copy on one worker cluster (MultiKueue)."""

    workload = models.ForeignKey(
        "scheduling.Workload", on_delete=models.CASCADE, related_name="dispatches"
    )
    worker = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="dispatches")
    remote_workload = models.ForeignKey(
        "scheduling.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(
        max_length=16, choices=DispatchState.choices, default=DispatchState.NOMINATED
    )
    round = models.PositiveIntegerField(default=1)
    nominated_at = models.DateTimeField()
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["workload", "round", "worker"]
        verbose_name_plural = "dispatches"
        constraints = [
            models.UniqueConstraint(fields=["workload", "worker"], name="dispatch_unique_worker"),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id} → {self.worker_id} ({self.state})"


class GangWorkload(models.Model):
    """A Kubernetes v1.35 ``scheduling.k8s.io/v1alpha1`` Workload on a simulated cluster,
    applied as a manifest: pods pointing at it (``spec.workloadRef``) are scheduled by its
    pod groups, a gang (``policy.gang.minCount``) all or nothing, a ``basic`` group one by
    one. Not Kueue's Workload (``scheduling.Workload``), which admits jobs by quota."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="gang_workloads")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    uid = models.UUIDField(default=uuid.uuid4, editable=False)
    # {"apiGroup", "kind", "name"}, or {} when the Workload names no controller.
    controller_ref = models.JSONField(default=dict, blank=True)
    # [{"name": ..., "policy": {"gang": {"minCount": n}} | {"basic": {}}}], as applied.
    pod_groups = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    resource_version = models.PositiveBigIntegerField(default=1)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"],
                                    name="gangworkload_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def pod_group(self, name: str) -> dict[str, Any] | None:
        return next((dict(g) for g in self.pod_groups or () if g.get("name") == name), None)


class PodGroup(models.Model):
    """The pods of one pod set of a running workload, scheduled as a gang.

    Kubernetes v1.35 Workload API: a ``podGroups[]`` entry with ``policy.gang.minCount``. The
    group binds only when ``min_count`` of its pods fit at once; otherwise it waits, and
    after the gang scheduling timeout its attempt is rejected and retried. A group of an
    applied ``GangWorkload`` (``gang``) gathers the pods naming its pod group and replica
    key, whatever their jobs; ``workload`` is then the Kueue Workload of its first pod.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pod_groups")
    workload = models.ForeignKey(
        "scheduling.Workload", on_delete=models.CASCADE, related_name="pod_groups"
    )
    job = models.ForeignKey(
        "scheduling.Job", null=True, blank=True, on_delete=models.CASCADE,
        related_name="pod_groups",
    )
    pod_set = models.CharField(max_length=63)
    min_count = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    # The current scheduling attempt began (None once bound).
    waiting_since = models.DateTimeField(null=True, blank=True)
    bound_at = models.DateTimeField(null=True, blank=True)
    timeouts = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    gang = models.ForeignKey(GangWorkload, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="groups")
    # spec.workloadRef.podGroupReplicaKey: pods with the same key form one gang of the group.
    replica_key = models.CharField(max_length=63, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["workload", "pod_set"], name="podgroup_unique_podset",
                                    condition=models.Q(gang__isnull=True)),
            models.UniqueConstraint(fields=["gang", "pod_set", "replica_key"],
                                    name="podgroup_unique_gang_replica",
                                    condition=models.Q(gang__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}/{self.pod_set}"


class Pod(models.Model):
    """A pod of a job running on a simulated cluster (Kubernetes core/v1 Pod, reduced)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="pods")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    job = models.ForeignKey(
        "scheduling.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="pods"
    )
    workload = models.ForeignKey(
        "scheduling.Workload", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="pods",
    )
    group = models.ForeignKey(
        PodGroup, null=True, blank=True, on_delete=models.SET_NULL, related_name="pods"
    )
    pod_set = models.CharField(max_length=63, default="main")
    requests = models.JSONField(default=dict, help_text='Per-pod requests, e.g. {"cpu": "1"}.')
    node_selector = models.JSONField(default=dict, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    # spec.schedulingGates (names): the scheduler leaves a gated pod alone until every gate
    # is removed (Kueue gates the pods of elastic jobs beyond the admitted count).
    scheduling_gates = models.JSONField(default=list, blank=True)
    # spec.workloadRef ({"name", "podGroup", "podGroupReplicaKey"}), {} when none: the pod is
    # scheduled by that Workload's pod group (``GangWorkload``).
    workload_ref = models.JSONField(default=dict, blank=True)
    node_name = models.CharField(max_length=253, blank=True, db_index=True)
    phase = models.CharField(max_length=16, choices=PodPhase.choices, default=PodPhase.PENDING)
    ready = models.BooleanField(default=False)
    reason = models.CharField(max_length=128, blank=True)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField()
    scheduled_at = models.DateTimeField(null=True, blank=True)
    # Planned times, set when the pod is bound: it becomes ready, then it finishes.
    ready_at = models.DateTimeField(null=True, blank=True)
    finish_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Fault injection: the pod fails instead of succeeding when it finishes.
    fail = models.BooleanField(default=False)

    class Meta:
        ordering = ["namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="pod_unique_name"),
        ]
        indexes = [models.Index(fields=["cluster", "phase"], name="pod_cluster_phase")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in (PodPhase.SUCCEEDED, PodPhase.FAILED)

    @property
    def gated(self) -> bool:
        """The pod still has scheduling gates (``kubectl get pod`` shows SchedulingGated)."""
        return bool(self.scheduling_gates)
