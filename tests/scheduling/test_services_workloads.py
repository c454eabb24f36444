"""Bare workloads (Kueue's custom-workload integration), spec changes and deletion."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload, WorkloadPriorityClass

pytestmark = pytest.mark.django_db


def template(requests: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "c", "resources": {"requests": requests or {"cpu": "1"}}}]}}


def pod_set(**fields: Any) -> dict[str, Any]:
    return {"template": template(), **fields}


def spec(**fields: Any) -> dict[str, Any]:
    return {"queueName": "user-queue", "podSets": [pod_set(name="main", count=2)], **fields}


@pytest.fixture
def cluster_queue(manager: Cluster) -> ClusterQueue:
    return ClusterQueue.objects.create(cluster=manager, name="cq")


@pytest.fixture
def user_queue(manager: Cluster, cluster_queue: ClusterQueue) -> LocalQueue:
    return LocalQueue.objects.create(
        cluster=manager, namespace="team-a", name="user-queue", cluster_queue=cluster_queue)


def test_creates_a_pending_workload_with_kueue_defaults(
    manager: Cluster, user_queue: LocalQueue
) -> None:
    workload = services.create_workload(
        {"queueName": "user-queue", "podSets": [{"template": template({"cpu": "500m"})}]},
        namespace="team-a", name="wl", labels={"team": "ml"}, annotations={"note": "x"},
    )

    workload.refresh_from_db()
    assert workload.cluster == manager
    assert (workload.namespace, workload.name) == ("team-a", "wl")
    assert workload.pod_sets == [{"name": "main", "count": 1, "template": template({"cpu": "500m"})}]
    assert (workload.queue_name, workload.local_queue) == ("user-queue", user_queue)
    assert (workload.priority, workload.priority_class_name, workload.priority_class_source) == (0, "", "")
    assert workload.active is True
    assert workload.maximum_execution_time_seconds is None
    assert (workload.labels, workload.annotations) == ({"team": "ml"}, {"note": "x"})
    assert workload.job is None
    assert workload.phase == WorkloadPhase.PENDING
    assert workload.queued_at == workload.created_at


def test_workload_priority_class_gives_the_priority(manager: Cluster) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=500)

    by_ref = services.create_workload(
        spec(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                               "name": "high"}, priority=500),
        namespace="team-a", name="by-ref")
    by_v1beta1_name = services.create_workload(
        spec(priorityClassName="high"), namespace="team-a", name="by-name")

    for workload in (by_ref, by_v1beta1_name):
        assert (workload.priority, workload.priority_class_name, workload.priority_class_source) == (
            500, "high", "kueue.x-k8s.io/workloadpriorityclass")


def test_pod_priority_class_keeps_the_given_priority(manager: Cluster) -> None:
    workload = services.create_workload(
        spec(priorityClassRef={"group": "scheduling.k8s.io", "kind": "PriorityClass",
                               "name": "system-cluster-critical"}, priority=2000000000),
        namespace="team-a", name="wl")

    assert (workload.priority, workload.priority_class_name, workload.priority_class_source) == (
        2000000000, "system-cluster-critical", "scheduling.k8s.io/priorityclass")


def test_explicit_priority_without_class(manager: Cluster) -> None:
    workload = services.create_workload(spec(priority=-5, active=False,
                                             maximumExecutionTimeSeconds=60),
                                        namespace="team-a", name="wl")

    assert (workload.priority, workload.active, workload.maximum_execution_time_seconds) == (-5, False, 60)


def test_up_to_eighteen_pod_sets_with_one_min_count(manager: Cluster) -> None:
    pod_sets = [pod_set(name=f"ps-{i}", count=2) for i in range(18)]
    pod_sets[3]["minCount"] = 1

    workload = services.create_workload(spec(podSets=pod_sets), namespace="team-a", name="wl")

    assert len(workload.pod_sets) == 18
    assert workload.pod_sets[3] == {"name": "ps-3", "count": 2, "minCount": 1, "template": template()}


@dataclass(frozen=True)
class Refusal:
    name: str
    spec: Any
    want: dict[str, list[str]]
    annotations: dict[str, str] | None = None


def many_pod_sets(n: int) -> list[dict[str, Any]]:
    return [pod_set(name=f"ps-{i}") for i in range(n)]


REFUSALS = [
    Refusal("no spec", None, {"spec": ["is required"]}),
    Refusal("no pod sets", spec(podSets=[]), {"spec.podSets": ["must have at least one pod set"]}),
    Refusal("nineteen pod sets", spec(podSets=many_pod_sets(19)),
            {"spec.podSets": ["must have at most 18 items"]}),
    Refusal("duplicate names", spec(podSets=[pod_set(name="a"), pod_set(name="a")]),
            {"spec.podSets[1].name": ["duplicate pod set name 'a'"]}),
    Refusal("name not a DNS label", spec(podSets=[pod_set(name="Main")]),
            {"spec.podSets[0].name": [
                "'Main' is not a valid name: a lowercase RFC 1123 label must consist of lower "
                "case alphanumeric characters or '-', start and end with an alphanumeric "
                "character, and be at most 63 characters"]}),
    Refusal("count zero", spec(podSets=[pod_set(count=0)]),
            {"spec.podSets[0].count": ["must be greater than or equal to 1"]}),
    Refusal("count not an integer", spec(podSets=[pod_set(count="2")]),
            {"spec.podSets[0].count": ["must be an integer, not '2'"]}),
    Refusal("minCount zero", spec(podSets=[pod_set(count=2, minCount=0)]),
            {"spec.podSets[0].minCount": ["must be greater than or equal to 1"]}),
    Refusal("minCount above count", spec(podSets=[pod_set(count=2, minCount=3)]),
            {"spec.podSets[0].minCount": ["minCount should be positive and less or equal to count"]}),
    Refusal("two pod sets with minCount",
            spec(podSets=[pod_set(name="a", count=2, minCount=1),
                          pod_set(name="b", count=2, minCount=1)]),
            {"spec.podSets": ["at most one podSet can use minCount"]}),
    Refusal("minCount on an elastic workload", spec(podSets=[pod_set(count=2, minCount=1)]),
            {"spec.podSets": ["partial admission and elastic job cannot be used together"]},
            annotations={jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
    Refusal("negative request", spec(podSets=[{"template": template({"cpu": "-500m"})}]),
            {"spec.podSets[0].template.spec.containers[0].resources.requests.cpu": [
                "'-500m' must not be negative"]}),
    Refusal("pods requested", spec(podSets=[{"template": template({"pods": "1"})}]),
            {"spec.podSets[0].template.spec.containers[0].resources.requests.pods": [
                "the key is reserved for internal kueue use"]}),
    Refusal("no template", spec(podSets=[{"name": "main"}]),
            {"spec.podSets[0].template": ["is required"]}),
    Refusal("template metadata beyond labels and annotations",
            spec(podSets=[{"template": {**template(), "metadata": {"name": "x"}}}]),
            {"spec.podSets[0].template.metadata.name": ["only labels and annotations are allowed"]}),
    Refusal("queue name not DNS", spec(queueName="Queue!"),
            {"spec.queueName": [
                "'Queue!' is not a valid name: a lowercase RFC 1123 subdomain must consist of "
                "lower case alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character"]}),
    Refusal("pod priority class without priority",
            spec(priorityClassRef={"group": "scheduling.k8s.io", "kind": "PriorityClass",
                                   "name": "high"}),
            {"spec.priority": ["priority should not be nil when priorityClassRef is set"]}),
    Refusal("mismatched group and kind",
            spec(priorityClassRef={"group": "kueue.x-k8s.io", "kind": "PriorityClass",
                                   "name": "high"}),
            {"spec.priorityClassRef": ["group/kind must be kueue.x-k8s.io/WorkloadPriorityClass "
                                       "or scheduling.k8s.io/PriorityClass"]}),
    Refusal("active not a boolean", spec(active="yes"), {"spec.active": ["must be a boolean"]}),
    Refusal("maximum execution time zero", spec(maximumExecutionTimeSeconds=0),
            {"spec.maximumExecutionTimeSeconds": ["must be greater than or equal to 1"]}),
]


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.name)
def test_refuses_what_kueue_refuses(manager: Cluster, case: Refusal) -> None:
    with pytest.raises(ValidationError) as raised:
        services.create_workload(case.spec, namespace="team-a", name="wl",
                                 annotations=case.annotations)

    assert raised.value.message_dict == case.want
    assert Workload.objects.count() == 0


def test_missing_workload_priority_class_is_refused(manager: Cluster) -> None:
    with pytest.raises(ValidationError) as raised:
        services.create_workload(spec(priorityClassRef={"name": "missing"}), namespace="team-a",
                                 name="wl")

    assert raised.value.message_dict == {"spec.priorityClassRef.name": [
        "WorkloadPriorityClass 'missing' not found in cluster 'manager'"]}
    assert Workload.objects.count() == 0


def test_priority_must_agree_with_the_workload_priority_class(manager: Cluster) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=500)

    with pytest.raises(ValidationError) as raised:
        services.create_workload(spec(priorityClassName="high", priority=1), namespace="team-a",
                                 name="wl")

    assert raised.value.message_dict == {"spec.priority": [
        "must equal the value of WorkloadPriorityClass 'high' (500), or be omitted"]}


def test_name_and_namespace_are_validated(manager: Cluster) -> None:
    with pytest.raises(ValidationError) as raised:
        services.create_workload(spec(), namespace="Team", name="")

    assert raised.value.message_dict == {
        "metadata.name": ["is required"],
        "metadata.namespace": [
            "'Team' is not a valid namespace: a lowercase RFC 1123 label must consist of lower "
            "case alphanumeric characters or '-', start and end with an alphanumeric character, "
            "and be at most 63 characters"],
    }


def test_workload_name_must_be_free(manager: Cluster) -> None:
    services.create_workload(spec(), namespace="team-a", name="wl")

    with pytest.raises(services.ConflictError, match='workloads.kueue.x-k8s.io "wl" already exists'):
        services.create_workload(spec(), namespace="team-a", name="wl")
    assert Workload.objects.count() == 1


def test_a_batch_with_a_taken_name_names_it_and_creates_none(
        manager: Cluster, user_queue: LocalQueue) -> None:
    services.create_workload(spec(), namespace="team-b", name="taken")
    batch = [services.WorkloadRequest(namespace, name, spec())
             for namespace, name in (("team-a", "first"), ("team-b", "taken"), ("team-a", "last"))]

    with pytest.raises(services.ConflictError,
                       match='workloads.kueue.x-k8s.io "taken" already exists'):
        services.create_workloads(batch, cluster=manager)
    assert list(Workload.objects.values_list("name", flat=True)) == ["taken"]


def test_a_batch_finds_each_local_queue_by_namespace_and_name(
        manager: Cluster, cluster_queue: ClusterQueue, user_queue: LocalQueue) -> None:
    other = LocalQueue.objects.create(cluster=manager, namespace="team-b", name="other-queue",
                                      cluster_queue=cluster_queue)
    created = services.create_workloads([
        services.WorkloadRequest("team-a", "a", spec()),
        services.WorkloadRequest("team-b", "b", spec(queueName="other-queue")),
        # team-b has no "user-queue": the name alone must not find team-a's.
        services.WorkloadRequest("team-b", "c", spec()),
    ], cluster=manager)

    assert [w.local_queue_id for w in created] == [user_queue.pk, other.pk, None]


def test_a_batch_reports_equal_invalid_pod_sets_on_each_item(manager: Cluster) -> None:
    bad = [pod_set(name="main", count=0)]
    batch = [services.WorkloadRequest("team-a", "a", spec(podSets=bad)),
             services.WorkloadRequest("team-a", "b", spec()),
             services.WorkloadRequest("team-b", "c", spec(podSets=[pod_set(name="main", count=0)]))]

    with pytest.raises(ValidationError) as raised:
        services.create_workloads(batch, cluster=manager)

    assert sorted(raised.value.message_dict) == [
        "items[0].spec.podSets[0].count", "items[2].spec.podSets[0].count"]
    assert not Workload.objects.exists()


def test_a_batch_tells_apart_pod_sets_equal_only_in_python(manager: Cluster) -> None:
    # ``True == 1`` in Python, but a count must be an integer: the first is refused alone.
    batch = [services.WorkloadRequest("team-a", "a", spec(podSets=[pod_set(count=True)])),
             services.WorkloadRequest("team-a", "b", spec(podSets=[pod_set(count=1)]))]

    with pytest.raises(ValidationError) as raised:
        services.create_workloads(batch, cluster=manager)

    assert list(raised.value.message_dict) == ["items[0].spec.podSets[0].count"]


def test_a_batch_stores_what_one_at_a_time_stores(
        manager: Cluster, user_queue: LocalQueue, django_assert_num_queries: Any) -> None:
    shared = [pod_set(name="main", count=2)]
    created = services.create_workloads([
        services.WorkloadRequest("team-a", f"wl-{i}", spec(podSets=shared, priority=i % 2),
                                 labels={"n": str(i)}) for i in range(3)], cluster=manager)
    single = services.create_workload(spec(podSets=shared, priority=1), namespace="team-a",
                                      name="single", labels={"n": "1"})
    with django_assert_num_queries(0):
        assert {w.cluster for w in [*created, single]} == {manager}

    columns = [f.attname for f in Workload._meta.concrete_fields
               if f.attname not in ("id", "name", "uid", "created_at", "updated_at", "queued_at")]
    stored = {row["name"]: row for row in Workload.objects.values("name", *columns)}
    assert {name: stored[name] for name in ("wl-1", "single")} == {
        "wl-1": {**stored["single"], "name": "wl-1"}, "single": stored["single"]}
    # Queued at creation, in the order of the batch, from the INSERT itself (first version).
    rows = list(Workload.objects.filter(name__startswith="wl-").order_by("id").values_list(
        "name", "created_at", "updated_at", "queued_at", "resource_version"))
    assert [name for name, *_ in rows] == ["wl-0", "wl-1", "wl-2"]
    assert all(created_at == queued_at == updated_at and version == 1
               for _, created_at, updated_at, queued_at, version in rows)
    assert [created_at for _, created_at, *_ in rows] == sorted(
        created_at for _, created_at, *_ in rows)

    # What the caller gets is what a load gives, each with its own JSON values.
    for workload in created:
        loaded = Workload.objects.get(pk=workload.pk)
        assert {f.attname: getattr(workload, f.attname)
                for f in Workload._meta.concrete_fields} == {
            f.attname: getattr(loaded, f.attname) for f in Workload._meta.concrete_fields}
    created[0].pod_sets[0]["count"] = 5
    created[0].conditions.append({"type": "X"})
    assert (created[1].pod_sets[0]["count"], created[1].conditions) == (2, [])
    assert shared[0]["count"] == 2


# --- Deletion ---------------------------------------------------------------------------------


def submit(namespace: str = "team-a", name: str = "pi") -> Job:
    return services.submit_job({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "user-queue"}},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox",
                                                       "resources": {"requests": {"cpu": "2"}}}],
                                       "restartPolicy": "Never"}}},
    }, namespace=namespace)


def admit(workload: Workload, cluster_queue: ClusterQueue) -> None:
    Workload.objects.filter(pk=workload.pk).update(
        phase=WorkloadPhase.ADMITTED, cluster_queue=cluster_queue,
        admission={"clusterQueue": cluster_queue.name, "podSetAssignments": [
            {"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "2"},
             "count": 1}]},
        conditions=[{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                    {"type": "Admitted", "status": "True", "reason": "Admitted"}],
    )
    workload.refresh_from_db()


def test_delete_job_frees_the_quota_its_workload_held(
    user_queue: LocalQueue, cluster_queue: ClusterQueue
) -> None:
    job = submit()
    other = submit(name="other")
    workload = job.workloads.get()
    admit(workload, cluster_queue)
    admit(other.workloads.get(), cluster_queue)

    services.delete_job(job)

    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Workload.objects.filter(pk=workload.pk).exists()
    assert list(cluster_queue.reserving_workloads.values_list("name", flat=True)) == [
        other.workloads.get().name]
    assert list(Event.objects.values_list("object_name", flat=True)) == ["other"]


def test_delete_workload_removes_only_that_workload(manager: Cluster) -> None:
    kept = services.create_workload(spec(), namespace="team-a", name="kept")
    gone = services.create_workload(spec(), namespace="team-a", name="gone")

    services.delete_workload(gone)

    assert list(Workload.objects.all()) == [kept]


# --- Spec changes -----------------------------------------------------------------------------


def test_active_can_change_at_any_time(
    user_queue: LocalQueue, cluster_queue: ClusterQueue
) -> None:
    workload = submit().workloads.get()
    admit(workload, cluster_queue)
    version = workload.resource_version

    updated = services.update_workload(workload, {"spec": {"active": False}})

    assert updated.active is False
    assert updated.resource_version == version + 1
    assert Workload.objects.get(pk=workload.pk).active is False


def test_queue_name_and_priority_change_while_pending(
    manager: Cluster, user_queue: LocalQueue
) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="low", value=1)
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    workload = services.create_workload(spec(queueName="elsewhere", priorityClassName="low"),
                                        namespace="team-a", name="wl")

    updated = services.update_workload(workload, {"spec": {
        "queueName": "user-queue", "priorityClassRef": {"name": "high"}}})

    assert (updated.queue_name, updated.local_queue) == ("user-queue", user_queue)
    assert (updated.priority, updated.priority_class_name) == (100, "high")


def test_priority_class_can_be_removed_keeping_an_explicit_priority(manager: Cluster) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="low", value=1)
    workload = services.create_workload(spec(priorityClassName="low"), namespace="team-a", name="wl")

    updated = services.update_workload(workload, {"spec": {"priorityClassRef": None, "priority": 7}})

    assert (updated.priority, updated.priority_class_name, updated.priority_class_source) == (7, "", "")


def test_priority_set_by_a_class_cannot_be_overridden(manager: Cluster) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="low", value=1)
    workload = services.create_workload(spec(priorityClassName="low"), namespace="team-a", name="wl")

    with pytest.raises(ValidationError) as raised:
        services.update_workload(workload, {"spec": {"priority": 9}})

    assert raised.value.message_dict == {"spec.priority": [
        "must equal the value of WorkloadPriorityClass 'low' (1), or be omitted"]}
    assert Workload.objects.get(pk=workload.pk).priority == 1


@dataclass(frozen=True)
class FrozenCase:
    name: str
    patch: dict[str, Any]
    want_pending: dict[str, list[str]]
    want_reserved: dict[str, list[str]]


FROZEN = [
    FrozenCase("pod sets", {"spec": {"podSets": [pod_set(name="main", count=5)]}},
               {"spec.podSets": ["podSets cannot be changed"]},
               {"spec.podSets": ["field is immutable"]}),
    FrozenCase("maximum execution time", {"spec": {"maximumExecutionTimeSeconds": 30}},
               {"spec.maximumExecutionTimeSeconds": [
                   "maximumExecutionTimeSeconds cannot be changed: only spec.active, "
                   "spec.queueName and the priority can"]},
               {"spec.maximumExecutionTimeSeconds": [
                   "maximumExecutionTimeSeconds is immutable while workload quota reserved"]}),
    FrozenCase("labels", {"metadata": {"labels": {"team": "ml"}}},
               {"metadata.labels": ["cannot be changed through the API"]},
               {"metadata.labels": ["cannot be changed through the API"]}),
]


@pytest.mark.parametrize("case", FROZEN, ids=lambda c: c.name)
def test_frozen_fields_are_refused_with_kueue_messages_while_reserved(
    user_queue: LocalQueue, cluster_queue: ClusterQueue, case: FrozenCase
) -> None:
    workload = submit().workloads.get()
    before = Workload.objects.values().get(pk=workload.pk)

    with pytest.raises(ValidationError) as pending:
        services.update_workload(workload, case.patch)
    admit(workload, cluster_queue)
    with pytest.raises(ValidationError) as reserved:
        services.update_workload(workload, case.patch)

    assert pending.value.message_dict == case.want_pending
    assert reserved.value.message_dict == case.want_reserved
    after = Workload.objects.values().get(pk=workload.pk)
    assert {k: after[k] for k in ("pod_sets", "maximum_execution_time_seconds", "labels")} == {
        k: before[k] for k in ("pod_sets", "maximum_execution_time_seconds", "labels")}


def test_queue_name_and_priority_are_immutable_while_quota_is_reserved(
    manager: Cluster, user_queue: LocalQueue, cluster_queue: ClusterQueue
) -> None:
    WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=100)
    workload = submit().workloads.get()
    admit(workload, cluster_queue)

    with pytest.raises(ValidationError) as queue_change:
        services.update_workload(workload, {"spec": {"queueName": "other"}})
    with pytest.raises(ValidationError) as class_change:
        services.update_workload(workload, {"spec": {"priorityClassRef": {"name": "high"}}})
    with pytest.raises(ValidationError) as priority_change:
        services.update_workload(workload, {"spec": {"priority": 3}})

    assert queue_change.value.message_dict == {
        "spec.queueName": ["queueName is immutable while workload quota reserved"]}
    assert class_change.value.message_dict == {
        "spec.priorityClassRef": ["priorityClassRef is immutable while workload quota reserved"]}
    assert priority_change.value.message_dict == {
        "spec.priority": ["priority is immutable while workload quota reserved"]}
    workload.refresh_from_db()
    assert (workload.queue_name, workload.priority, workload.priority_class_name) == (
        "user-queue", 0, "")


def test_echoing_the_spec_back_changes_nothing(
    user_queue: LocalQueue, cluster_queue: ClusterQueue
) -> None:
    workload = submit().workloads.get()
    admit(workload, cluster_queue)
    version = workload.resource_version

    services.update_workload(workload, {"metadata": {"labels": dict(workload.labels)},
                                        "spec": jobframework.spec_of(workload)})

    assert Workload.objects.get(pk=workload.pk).resource_version == version


def test_a_change_racing_another_write_is_refused(manager: Cluster) -> None:
    workload = services.create_workload(spec(), namespace="team-a", name="wl")
    Workload.objects.filter(pk=workload.pk).update(resource_version=workload.resource_version + 1)

    with pytest.raises(services.ConflictError, match="the object has been modified"):
        services.update_workload(workload, {"spec": {"active": False}})

    assert Workload.objects.get(pk=workload.pk).active is True
