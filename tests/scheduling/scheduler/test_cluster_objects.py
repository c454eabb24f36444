"""A simulated cluster's own PriorityClasses, LimitRanges and RuntimeClasses, applied as
``kubectl apply`` would, change what the admission cycle admits, as in Kueue."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from multicluster.models import Cluster
from scheduling import services
from scheduling.choices import QueueState, WorkloadPhase
from scheduling.manifests.apply import apply_manifests, delete_object
from scheduling.models import ClusterQueue, LimitRange, LocalQueue, ParkedShape, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def priority_class(name: str, value: int, *, global_default: bool = False) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "globalDefault": global_default}


def limit_range(namespace: str, **item: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "limits", "namespace": namespace},
            "spec": {"limits": [{"type": "Container", **item}]}}


def runtime_class(name: str, overhead: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
            "metadata": {"name": name}, "handler": name, "overhead": {"podFixed": overhead}}


def job(name: str, *, resources: dict[str, Any] | None = None, cpu: str = "1",
        **pod_spec: Any) -> dict[str, Any]:
    """A Job of one pod in ``lq-cq``; ``resources`` replaces its container's requests."""
    manifest = job_manifest(name, "lq-cq", cpu=cpu, run_seconds=1000)
    spec = manifest["spec"]["template"]["spec"]
    if resources is not None:
        spec["containers"][0]["resources"] = resources
    spec.update(pod_spec)
    return manifest


def workload_of(name: str) -> Workload:
    return Workload.objects.get(namespace="ns", job__name=name)


def quota_reserved(workload: Workload) -> tuple[str, str, str]:
    condition = cond.find(workload.conditions, "QuotaReserved")
    assert condition is not None
    return condition["status"], condition["reason"], condition["message"]


def test_a_priority_class_orders_the_queue(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    """Kueue ``ExtractPriority``: with no WorkloadPriorityClass label, the pod templates'
    ``priorityClassName`` gives the Workload that PriorityClass's value (source
    ``scheduling.k8s.io/priorityclass``), and the queue admits the higher priority first."""
    make_queue("cq", {"cpu": "1"})
    apply_manifests([priority_class("high", 1000)])
    services.submit_job(job("first"), namespace="ns")
    services.submit_job(job("urgent", priorityClassName="high"), namespace="ns")

    urgent = workload_of("urgent")
    assert (urgent.priority_class_name, urgent.priority_class_source, urgent.priority) == (
        "high", "scheduling.k8s.io/priorityclass", 1000)
    admission.run_admission_cycle(manager.pk, now=t0)
    assert workload_of("urgent").phase == WorkloadPhase.ADMITTED
    assert workload_of("first").phase == WorkloadPhase.PENDING


def test_a_priority_class_preempts_a_lower_one(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, manager: Cluster,
    t0: datetime,
) -> None:
    """Kueue ``ExtractPriority`` feeds preemption (withinClusterQueue LowerPriority): the
    PriorityClass's value, not 0, lets the newcomer evict the running job."""
    make_queue("cq", {"cpu": "1"}, within_cluster_queue="LowerPriority")
    apply_manifests([priority_class("high", 1000)])
    services.submit_job(job("running"), namespace="ns")
    reconcilers.step(t0)
    services.submit_job(job("urgent", priorityClassName="high"), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0 + timedelta(seconds=5))

    assert cond.is_true(workload_of("running").conditions, "Evicted")
    reconcilers.step(t0 + timedelta(seconds=6))
    assert workload_of("urgent").phase == WorkloadPhase.ADMITTED
    assert workload_of("running").phase == WorkloadPhase.PENDING


def test_the_global_default_applies_to_a_job_naming_no_class(
    make_queue: Callable[..., ClusterQueue], manager: Cluster,
) -> None:
    """Kueue ``GetPriorityFromPriorityClass`` with no name: the global default
    PriorityClass, the lowest value when several are marked; a WorkloadPriorityClass label
    still wins."""
    make_queue("cq", {"cpu": "1"})
    apply_manifests([priority_class("usual", 50, global_default=True)])
    services.submit_job(job("plain"), namespace="ns")
    plain = workload_of("plain")
    assert (plain.priority_class_name, plain.priority_class_source, plain.priority) == (
        "usual", "scheduling.k8s.io/priorityclass", 50)

    apply_manifests([{**priority_class("usual", 50, global_default=True),
                      "globalDefault": False}])
    services.submit_job(job("none"), namespace="ns")
    none = workload_of("none")
    assert (none.priority_class_name, none.priority_class_source, none.priority) == ("", "", 0)


def test_a_missing_priority_class_refuses_the_job(
    make_queue: Callable[..., ClusterQueue], manager: Cluster,
) -> None:
    """Kueue ``GetPriorityFromPriorityClass``: a PriorityClass that does not exist is an
    error, not priority 0."""
    make_queue("cq", {"cpu": "1"})
    with pytest.raises(ValidationError) as raised:
        services.submit_job(job("lost", priorityClassName="nowhere"), namespace="ns")
    assert raised.value.message_dict == {"spec.template.spec.priorityClassName": [
        "priorityclasses.scheduling.k8s.io \"nowhere\" not found in cluster 'manager'"]}
    assert not Workload.objects.exists()


def test_a_limit_range_default_request_makes_a_job_not_fit(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    """Kueue ``handlePodLimitRange``: a container without a cpu request is charged the
    namespace's ``defaultRequest``, so a job that fits without the LimitRange does not."""
    make_queue("cq", {"cpu": "1", "memory": "1Gi"})
    apply_manifests([limit_range("ns", defaultRequest={"cpu": "2"})])
    services.submit_job(job("defaulted", resources={"requests": {"memory": "100Mi"}}),
                        namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    defaulted = workload_of("defaulted")
    assert defaulted.phase == WorkloadPhase.PENDING
    status, reason, message = quota_reserved(defaulted)
    assert (status, reason) == ("False", "ExceedsMaxQuota")
    assert "insufficient quota for cpu in flavor default, previously considered podsets " \
           "requests (0) + current podset request (2) > maximum capacity (1)" in message
    # The stored pod sets are as submitted: the adjustment is the cycle's view.
    assert "cpu" not in defaulted.pod_sets[0]["template"]["spec"]["containers"][0][
        "resources"]["requests"]

    # Without the LimitRange the same job fits: the parked workload is requeued at once.
    delete_object("LimitRange", LimitRange.objects.get(namespace="ns"))
    assert workload_of("defaulted").queue_state == QueueState.ACTIVE
    admission.run_admission_cycle(manager.pk, now=t0 + timedelta(seconds=1))
    admitted = workload_of("defaulted")
    assert admitted.phase == WorkloadPhase.ADMITTED
    assert admitted.admission["podSetAssignments"][0]["resourceUsage"] == {"memory": "100Mi"}


def test_a_head_adjusted_by_a_limit_range_does_not_park_its_shape_elsewhere(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    """Kueue hashes the adjusted requests for its scheduling-equivalence parking: the same
    stored pod sets in a namespace without the LimitRange are another shape and fit."""
    cq = make_queue("cq", {"cpu": "1", "memory": "1Gi"})
    LocalQueue.objects.create(cluster=manager, namespace="other", name="lq-cq", cluster_queue=cq)
    apply_manifests([limit_range("ns", defaultRequest={"cpu": "2"})])
    same = job("same", resources={"requests": {"memory": "100Mi"}})
    services.submit_job(same, namespace="ns")
    services.submit_job(same, namespace="other")
    first, second = Workload.objects.order_by("created_at", "id")
    assert first.pod_sets_hash == second.pod_sets_hash

    admission.run_admission_cycle(manager.pk, now=t0)
    assert Workload.objects.get(namespace="ns").phase == WorkloadPhase.PENDING
    assert Workload.objects.get(namespace="other").phase == WorkloadPhase.ADMITTED
    assert not ParkedShape.objects.exists()


def test_a_limit_range_default_limit_stands_in_for_the_request(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    """Kueue ``AdjustResources``: the LimitRange ``default`` fills the missing limit, and a
    limit is the request a container leaves out."""
    make_queue("cq", {"cpu": "4"})
    apply_manifests([limit_range("ns", default={"cpu": "3"})])
    services.submit_job(job("limited", resources={}), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    admitted = workload_of("limited")
    assert admitted.phase == WorkloadPhase.ADMITTED
    assert admitted.admission["podSetAssignments"][0]["resourceUsage"] == {"cpu": "3"}


def test_a_runtime_class_overhead_changes_what_fits(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    """Kueue ``handlePodOverhead``: a pod naming a RuntimeClass is charged its
    ``overhead.podFixed``; a changed RuntimeClass requeues the workloads it parked."""
    make_queue("cq", {"cpu": "1"})
    apply_manifests([runtime_class("kata", {"cpu": "250m"})])
    services.submit_job(job("sandboxed", runtimeClassName="kata"), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    parked = workload_of("sandboxed")
    assert parked.phase == WorkloadPhase.PENDING
    assert "current podset request (1250m) > maximum capacity (1)" in quota_reserved(parked)[2]
    # Its shape is parked: the queue's next cycles skip it until a requeue.
    assert ParkedShape.objects.filter(cluster_queue__name="cq").count() == 1

    apply_manifests([runtime_class("kata", {})])
    assert not ParkedShape.objects.filter(cluster_queue__name="cq").exists()
    admission.run_admission_cycle(manager.pk, now=t0 + timedelta(seconds=1))
    admitted = workload_of("sandboxed")
    assert admitted.phase == WorkloadPhase.ADMITTED
    assert admitted.admission["podSetAssignments"][0]["resourceUsage"] == {"cpu": "1"}


def test_a_limit_range_max_makes_the_workload_inadmissible(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    """Kueue's scheduler ``ValidateAdmissibility`` → ``ValidateLimitRange``: requests above
    the LimitRange max leave the workload pending with QuotaReserved False, reason
    Misconfigured and Kueue's message; raising the max lets it in."""
    make_queue("cq", {"cpu": "8"})
    apply_manifests([limit_range("ns", max={"cpu": "1"})])
    services.submit_job(job("big", cpu="2"), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)

    big = workload_of("big")
    assert big.phase == WorkloadPhase.PENDING
    assert big.queue_state == QueueState.INADMISSIBLE
    assert quota_reserved(big) == (
        "False", "Misconfigured",
        "resources didn't satisfy LimitRange constraints: spec.podSets[0].template.spec."
        'containers[0]: Invalid value: ["cpu"]: requests must not be above the limitRange max')

    apply_manifests([limit_range("ns", max={"cpu": "2"})])
    admission.run_admission_cycle(manager.pk, now=t0 + timedelta(seconds=1))
    assert workload_of("big").phase == WorkloadPhase.ADMITTED


def test_a_limit_range_of_another_namespace_changes_nothing(
    make_queue: Callable[..., ClusterQueue], manager: Cluster, t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "8"})
    apply_manifests([limit_range("elsewhere", max={"cpu": "1"})])
    services.submit_job(job("big", cpu="2"), namespace="ns")
    admission.run_admission_cycle(manager.pk, now=t0)
    assert workload_of("big").phase == WorkloadPhase.ADMITTED
