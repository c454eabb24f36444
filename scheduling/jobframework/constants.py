"""Kueue's labels, annotations and limits that every job kind shares
(``pkg/controller/constants``, ``pkg/controller/jobframework/constants.go``)."""

from __future__ import annotations

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
PREBUILT_WORKLOAD_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# On what a MultiKueue hub creates in a worker: the hub's origin name, and (on a kind whose
# Workload the worker names after its owner's uid, a StatefulSet) the hub object's uid.
MULTIKUEUE_ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
MULTIKUEUE_ORIGIN_UID_ANNOTATION = "kueue.x-k8s.io/multikueue-origin-uid"
PODSET_LABEL = "kueue.x-k8s.io/podset"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
# The scheduling gate that holds the pods of an elastic job beyond its admitted slice.
ELASTIC_JOB_SCHEDULING_GATE = "kueue.x-k8s.io/elastic-job"
WORKLOAD_SLICE_NAME_ANNOTATION = "kueue.x-k8s.io/workload-slice-name"
WORKLOAD_SLICE_REPLACEMENT_FOR_ANNOTATION = "kueue.x-k8s.io/workload-slice-replacement-for"
# Finished reason of a slice replaced by its scale-up successor.
WORKLOAD_SLICE_REPLACED = "WorkloadSliceReplaced"
PROVREQ_ANNOTATION_PREFIX = "provreq.kueue.x-k8s.io/"
# The Workload condition of a group whose members are gone or failed: Kueue does not admit
# it again until they are replaced.
WAITING_FOR_REPLACEMENT_PODS = "WaitingForReplacementPods"
# The QuotaReserved=False reason of a Workload whose quota its owner released on purpose
# (a StatefulSet scaled to 0): kept, still active, but out of its queue until the hold ends.
WORKLOAD_ON_HOLD = "OnHold"

DEFAULT_LOCAL_QUEUE_NAME = "default"
DEFAULT_PRIORITY_CLASS_NAME = "default"
DEFAULT_POD_SET_NAME = "main"

# Workload.priority_class_source values (v1beta1 spelling; v1beta2's priorityClassRef).
WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_CLASS_SOURCE = "scheduling.k8s.io/priorityclass"
PRIORITY_CLASS_REFS = {
    WORKLOAD_PRIORITY_CLASS_SOURCE: ("kueue.x-k8s.io", "WorkloadPriorityClass"),
    POD_PRIORITY_CLASS_SOURCE: ("scheduling.k8s.io", "PriorityClass"),
}

MAX_POD_SETS = 18
MAX_INT32 = 2**31 - 1
# Kueue charges one of these per pod itself; containers may not ask for it.
RESERVED_RESOURCE = "pods"
RESERVED_RESOURCE_MESSAGE = "the key is reserved for internal kueue use"

# Workload names (jobframework/workload_names.go): 253, or 63 with ShortWorkloadNames (alpha).
WORKLOAD_NAME_MAX_LENGTH = 253
# Kueue's annotations on a Workload it builds for an object ahead of its pods (a
# StatefulSet's, a LeaderWorkerSet group's): the object's GroupVersionKind and name, and
# which of its Workloads it is when it has several.
JOB_OWNER_GVK_ANNOTATION = "kueue.x-k8s.io/job-owner-gvk"
JOB_OWNER_NAME_ANNOTATION = "kueue.x-k8s.io/job-owner-name"
COMPONENT_WORKLOAD_INDEX_ANNOTATION = "kueue.x-k8s.io/component-workload-index"
