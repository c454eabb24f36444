"""kueueweb's admission engine: pure Python, standard library only.

It re-implements the decisions of Kueue's scheduler (kubernetes-sigs/kueue,
``pkg/scheduler`` and ``pkg/cache``) over immutable specs:

* ``types`` — specs of flavors, cohorts, cluster queues and workloads;
* ``Snapshot`` — the quota tree with Kueue's formulas (``snapshot``);
* ``QueueManager`` — per-queue ordering, heads, parking of inadmissible workloads;
* ``run_cycle`` — one admission cycle: flavor assignment, partial admission,
  preemption (classical and fair sharing) and the ordered processing of heads.

Typical use (the Django service layer does the same with database rows)::

    snapshot = Snapshot.build(flavors=..., cohorts=..., cluster_queues=..., admitted=...)
    heads = queues.heads()
    result = run_cycle(snapshot, heads, now=now, policy=CyclePolicy(), cycle=n)
    queues.apply(result, now=now)   # requeue / park the heads that stay pending
"""

from scheduling.core.cycle import (
    CyclePolicy,
    CycleResult,
    Decision,
    Head,
    HeadResult,
    PreemptionTarget,
    RequeueReason,
    requeue_immediately,
    run_cycle,
)
from scheduling.core.fair_sharing import DRS, compare_drs, dominant_resource_share
from scheduling.core.flavors import Assignment, AssignmentMode, FlavorAssigner
from scheduling.core.ordering import (
    candidate_sort_key,
    entry_sort_key,
    queue_order_key,
    queue_order_timestamp,
)
from scheduling.core.preemption import (
    IN_CLUSTER_QUEUE,
    IN_COHORT_FAIR_SHARING,
    IN_COHORT_RECLAIM_WHILE_BORROWING,
    IN_COHORT_RECLAMATION,
    preemption_message,
    satisfies_preemption_policy,
)
from scheduling.core.quantities import QuantityError, format_amount, parse_quantity, quantity_to_int
from scheduling.core.queue import PendingWorkload, QueueManager, backoff_expired
from scheduling.core.resources import PODS, FlavorResource
from scheduling.core.snapshot import ClusterQueueNode, CohortNode, Snapshot
from scheduling.core.types import (
    Admission,
    BorrowWithinCohort,
    BorrowWithinCohortPolicy,
    ClusterQueueSpec,
    CohortSpec,
    FairSharingStrategy,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    LabelSelector,
    LabelSelectorRequirement,
    PodSet,
    PodSetAssignment,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohortPolicy,
    RequeuingTimestamp,
    ResourceFlavorSpec,
    ResourceGroup,
    ResourceQuota,
    SelectorOperator,
    StopPolicy,
    WithinClusterQueuePolicy,
    Workload,
)
from scheduling.core.workloads import (
    AssignmentState,
    WorkloadInfo,
    held_admission,
    held_usage,
    scheduling_hash,
)

__all__ = [
    "DRS",
    "IN_CLUSTER_QUEUE",
    "IN_COHORT_FAIR_SHARING",
    "IN_COHORT_RECLAIM_WHILE_BORROWING",
    "IN_COHORT_RECLAMATION",
    "PODS",
    "Admission",
    "Assignment",
    "AssignmentMode",
    "AssignmentState",
    "BorrowWithinCohort",
    "BorrowWithinCohortPolicy",
    "ClusterQueueNode",
    "ClusterQueueSpec",
    "CohortNode",
    "CohortSpec",
    "CyclePolicy",
    "CycleResult",
    "Decision",
    "FairSharingStrategy",
    "FlavorAssigner",
    "FlavorFungibility",
    "FlavorQuotas",
    "FlavorResource",
    "FungibilityPolicy",
    "FungibilityPreference",
    "Head",
    "HeadResult",
    "LabelSelector",
    "LabelSelectorRequirement",
    "PendingWorkload",
    "PodSet",
    "PodSetAssignment",
    "PreemptionPolicy",
    "PreemptionTarget",
    "QuantityError",
    "QueueManager",
    "QueueingStrategy",
    "ReclaimWithinCohortPolicy",
    "RequeueReason",
    "RequeuingTimestamp",
    "ResourceFlavorSpec",
    "ResourceGroup",
    "ResourceQuota",
    "SelectorOperator",
    "Snapshot",
    "StopPolicy",
    "WithinClusterQueuePolicy",
    "Workload",
    "WorkloadInfo",
    "backoff_expired",
    "candidate_sort_key",
    "compare_drs",
    "dominant_resource_share",
    "entry_sort_key",
    "format_amount",
    "held_admission",
    "held_usage",
    "parse_quantity",
    "preemption_message",
    "quantity_to_int",
    "queue_order_key",
    "queue_order_timestamp",
    "requeue_immediately",
    "run_cycle",
    "satisfies_preemption_policy",
    "scheduling_hash",
]
