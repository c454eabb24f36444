"""Enumerations of the multicluster app, declared once."""

from django.db import models


class ClusterRole(models.TextChoices):
    MANAGER = "manager"
    WORKER = "worker"


class ConnectionType(models.TextChoices):
    SIMULATED = "simulated"
    KUBERNETES = "kubernetes"


class Dispatcher(models.TextChoices):
    """MultiKueue dispatchers (Kueue config multiKueue.dispatcherName)."""

    ALL_AT_ONCE = "AllAtOnce"
    INCREMENTAL = "Incremental"
    EXTERNAL = "External"


class DispatchState(models.TextChoices):
    """State of a hub workload's copy on one worker."""

    NOMINATED = "Nominated"
    CREATED = "Created"
    ADMITTED = "Admitted"
    WON = "Won"
    REMOVED = "Removed"


MULTIKUEUE_CONTROLLER_NAME = "kueue.x-k8s.io/multikueue"
# Kueue's ProvisioningRequest admission check (cluster-autoscaler's ProvisioningRequest).
PROVISIONING_CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"
# An admission check with this controller is set Ready/Retry/Rejected by hand (API or admin).
MANUAL_CONTROLLER_NAME = "kueueweb.io/manual"


class PodPhase(models.TextChoices):
    """Kubernetes pod phases (core/v1 PodPhase) of a simulated pod."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class PodSetMergePolicy(models.TextChoices):
    """ProvisioningRequestConfig spec.podSetMergePolicy."""

    IDENTICAL_POD_TEMPLATES = "IdenticalPodTemplates"
    IDENTICAL_WORKLOAD_SCHEDULING_REQUIREMENTS = "IdenticalWorkloadSchedulingRequirements"
