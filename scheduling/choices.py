"""Kueue's enumerations, declared once; models, serializers and templates refer to them."""

from django.db import models


class QueueingStrategy(models.TextChoices):
    BEST_EFFORT_FIFO = "BestEffortFIFO"
    STRICT_FIFO = "StrictFIFO"


class WithinClusterQueue(models.TextChoices):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(models.TextChoices):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(models.TextChoices):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FungibilityPolicy(models.TextChoices):
    """v1beta2 spelling; v1beta1's Borrow/Preempt are accepted on input as MayStopSearch."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(models.TextChoices):
    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class StopPolicy(models.TextChoices):
    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class WorkloadPhase(models.TextChoices):
    """Kueue's derived workload status (pkg/workload/workload.go Status), stored for queries.

    Written only together with the conditions it is derived from.
    """

    PENDING = "Pending"
    QUOTA_RESERVED = "QuotaReserved"
    ADMITTED = "Admitted"
    FINISHED = "Finished"


class QueueState(models.TextChoices):
    """Where a pending workload sits in its cluster queue (Kueue's queue manager).

    ``Active`` workloads are in the heap and may become the head; ``Inadmissible`` ones are
    parked (BestEffortFIFO after a failed attempt, or Requeued=False while backing off) until
    capacity frees in their cohort tree or their back-off ends.
    """

    ACTIVE = "Active"
    INADMISSIBLE = "Inadmissible"


class EventType(models.TextChoices):
    NORMAL = "Normal"
    WARNING = "Warning"


class PreemptionPolicy(models.TextChoices):
    """A PriorityClass's ``preemptionPolicy`` (scheduling.k8s.io/v1)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


class JobSource(models.TextChoices):
    """Where a job was created: submitted through kueueweb (its API or pages), or created on
    a connected Kubernetes cluster (``kubectl``) and adopted there, which kueueweb then runs
    in place rather than as a copy."""

    KUEUEWEB = "kueueweb", "kueueweb"
    CLUSTER = "cluster", "created on the cluster"
