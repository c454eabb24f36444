"""Immutable specs the engine works from: flavors, cohorts, cluster queues and workloads.

These mirror the fields of Kueue's v1beta2 API objects that matter for admission
(``apis/kueue/v1beta2/*_types.go``), already parsed: quantities are integers in the units
of ``quantities.quantity_to_int`` (CPU in millis, everything else in base units) and times
are float seconds on any consistent clock chosen by the caller (the engine never reads the
clock itself).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "Admission",
    "ApiEnum",
    "BorrowWithinCohort",
    "BorrowWithinCohortPolicy",
    "ClusterQueueSpec",
    "CohortSpec",
    "FairSharingStrategy",
    "FlavorFungibility",
    "FlavorQuotas",
    "FungibilityPolicy",
    "FungibilityPreference",
    "LabelSelector",
    "LabelSelectorRequirement",
    "PodSet",
    "PodSetAssignment",
    "PreemptionPolicy",
    "QueueingStrategy",
    "ReclaimWithinCohortPolicy",
    "RequeuingTimestamp",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceQuota",
    "SelectorOperator",
    "StopPolicy",
    "WithinClusterQueuePolicy",
    "Workload",
]


class ApiEnum(StrEnum):
    """A string enum whose value is the Kueue API spelling."""


class QueueingStrategy(ApiEnum):
    """ClusterQueue ``queueingStrategy``."""

    STRICT_FIFO = "StrictFIFO"
    BEST_EFFORT_FIFO = "BestEffortFIFO"


class WithinClusterQueuePolicy(ApiEnum):
    """``preemption.withinClusterQueue``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohortPolicy(ApiEnum):
    """``preemption.reclaimWithinCohort``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(ApiEnum):
    """``preemption.borrowWithinCohort.policy``."""

    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class FungibilityPolicy(ApiEnum):
    """``flavorFungibility.whenCanBorrow`` / ``whenCanPreempt``.

    v1beta2 spells the old ``Borrow`` and ``Preempt`` values as ``MayStopSearch``.
    """

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


class FungibilityPreference(ApiEnum):
    """``flavorFungibility.preference``."""

    BORROWING_OVER_PREEMPTION = "BorrowingOverPreemption"
    PREEMPTION_OVER_BORROWING = "PreemptionOverBorrowing"


class StopPolicy(ApiEnum):
    """ClusterQueue ``stopPolicy``: anything but None makes the queue inactive."""

    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class FairSharingStrategy(ApiEnum):
    """Fair-sharing preemption strategies (``fairSharing.preemptionStrategies``)."""

    LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
    LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"


class RequeuingTimestamp(ApiEnum):
    """``waitForPodsReady.requeuingStrategy.timestamp``: which time orders a timed-out workload."""

    EVICTION = "Eviction"
    CREATION = "Creation"


class SelectorOperator(ApiEnum):
    """Operators of a label selector's ``matchExpressions``."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    """One ``matchExpressions`` entry."""

    key: str
    operator: SelectorOperator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Kubernetes semantics: NotIn and DoesNotExist match when the key is absent."""
        if self.operator is SelectorOperator.IN:
            return self.key in labels and labels[self.key] in self.values
        if self.operator is SelectorOperator.NOT_IN:
            return self.key not in labels or labels[self.key] not in self.values
        if self.operator is SelectorOperator.EXISTS:
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector; the empty selector matches every label set.

    Kueue (v1beta2) treats a *missing* namespaceSelector as "no namespace", so a spec
    carries ``None`` for that case and ``LabelSelector()`` for "all namespaces".
    """

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> LabelSelector:
        """A selector as Kubernetes writes it (``matchLabels``, ``matchExpressions``)."""
        return cls(
            match_labels=tuple(sorted((document.get("matchLabels") or {}).items())),
            match_expressions=tuple(
                LabelSelectorRequirement(key=str(expr["key"]),
                                         operator=SelectorOperator(expr["operator"]),
                                         values=tuple(expr.get("values") or ()))
                for expr in document.get("matchExpressions") or ()))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfies every matchLabels pair and every expression."""
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        return all(req.matches(labels) for req in self.match_expressions)


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Quota of one resource in one flavor; ``None`` limits mean unlimited / all lendable."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    """One flavor of a resource group with a quota per covered resource."""

    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """Resources that must be served by the same flavor; flavors in preference order."""

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]

    @property
    def flavor_names(self) -> tuple[str, ...]:
        """Flavor names in the order the assigner tries them."""
        return tuple(f.name for f in self.flavors)


@dataclass(frozen=True, slots=True)
class BorrowWithinCohort:
    """``preemption.borrowWithinCohort``."""

    policy: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class PreemptionPolicy:
    """ClusterQueue ``preemption`` with Kueue's defaults (everything Never)."""

    within_cluster_queue: WithinClusterQueuePolicy = WithinClusterQueuePolicy.NEVER
    reclaim_within_cohort: ReclaimWithinCohortPolicy = ReclaimWithinCohortPolicy.NEVER
    borrow_within_cohort: BorrowWithinCohort = field(default_factory=BorrowWithinCohort)


@dataclass(frozen=True, slots=True)
class FlavorFungibility:
    """ClusterQueue ``flavorFungibility`` with Kueue's defaults."""

    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    when_can_preempt: FungibilityPolicy = FungibilityPolicy.TRY_NEXT_FLAVOR
    preference: FungibilityPreference | None = None


@dataclass(frozen=True, slots=True)
class ResourceFlavorSpec:
    """A ResourceFlavor; only its existence and labels matter to quota admission."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CohortSpec:
    """A Cohort: optional parent, optional own quota (extra capacity for its subtree)."""

    name: str
    parent: str | None = None
    resource_groups: tuple[ResourceGroup, ...] = ()
    fair_weight: float = 1.0


@dataclass(frozen=True, slots=True)
class ClusterQueueSpec:
    """A ClusterQueue.

    ``namespace_selector=None`` matches no namespace (Kueue v1beta2 semantics); pass
    ``LabelSelector()`` to accept every namespace.
    """

    name: str
    resource_groups: tuple[ResourceGroup, ...]
    cohort: str | None = None
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    namespace_selector: LabelSelector | None = field(default_factory=LabelSelector)
    preemption: PreemptionPolicy = field(default_factory=PreemptionPolicy)
    flavor_fungibility: FlavorFungibility = field(default_factory=FlavorFungibility)
    fair_weight: float = 1.0
    stop_policy: StopPolicy = StopPolicy.NONE

    def flavor_names(self) -> tuple[str, ...]:
        """Every flavor referenced by the queue, in group then preference order."""
        return tuple(f.name for rg in self.resource_groups for f in rg.flavors)


@dataclass(frozen=True, slots=True)
class PodSet:
    """A group of identical pods; ``requests`` are per pod, ``min_count`` enables partial admission."""

    name: str
    count: int
    requests: Mapping[str, int]
    min_count: int | None = None


@dataclass(frozen=True, slots=True)
class PodSetAssignment:
    """Admission of one pod set (Kueue's ``status.admission.podSetAssignments[]``).

    ``resource_usage`` holds totals for all ``count`` pods, per resource.
    """

    name: str
    flavors: Mapping[str, str]
    count: int
    resource_usage: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Admission:
    """``status.admission``: the cluster queue and one assignment per pod set."""

    cluster_queue: str
    pod_sets: tuple[PodSetAssignment, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    """A Workload as the engine sees it.

    ``priority`` is the effective priority. ``evicted_reason``/``evicted_time`` reflect a
    True ``Evicted`` condition (an admitted workload being preempted, or a pending one
    evicted earlier); ``requeued=False`` and ``requeue_at`` model the requeue back-off.
    ``admission`` and ``quota_reserved_time`` are set for workloads holding quota.
    """

    namespace: str
    name: str
    pod_sets: tuple[PodSet, ...]
    queue_name: str | None = None
    priority: int = 0
    creation_time: float = 0.0
    uid: str = ""
    job_uid: str = ""
    admission: Admission | None = None
    quota_reserved_time: float | None = None
    evicted_reason: str | None = None
    evicted_time: float | None = None
    requeued: bool | None = None
    requeue_at: float | None = None
    active: bool = True
    # Why its requests cannot be admitted, as adjusted for the cluster's LimitRanges and
    # RuntimeClasses (Kueue's ``ValidateAdmissibility`` resource checks; made by the caller).
    inadmissible: str | None = None
    # ``namespace/name``, the identity used everywhere in results (derived, cached).
    key: str = field(init=False, repr=False, compare=False, default="")
    # Scheduling-equivalence hash, filled in on first use by ``workloads.scheduling_hash``.
    shape_hash: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    @property
    def is_evicted(self) -> bool:
        """Whether the workload carries a True Evicted condition."""
        return self.evicted_reason is not None

    def can_be_partially_admitted(self) -> bool:
        """Some pod set has ``min_count < count`` (Kueue ``CanBePartiallyAdmitted``)."""
        return any(ps.min_count is not None and ps.count > ps.min_count for ps in self.pod_sets)
