"""The admin console for quotas and queues: every page renders for an admin, none for a
viewer, and the cluster queue page refuses what the API refuses, saving nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.models import (
    ClusterQueue,
    Cohort,
    Event,
    FlavorQuota,
    Job,
    LimitRange,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    RuntimeClass,
    Workload,
    WorkloadPriorityClass,
)

POD_SETS = [{"name": "main", "count": 1, "template": {"spec": {"containers": [
    {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}]


@pytest.fixture
def objects(manager: Cluster) -> dict[str, Any]:
    """One object of each kind in the manager's domain."""
    flavor = ResourceFlavor.objects.create(cluster=manager, name="default-flavor")
    spot = ResourceFlavor.objects.create(cluster=manager, name="spot",
                                         node_labels={"instance-type": "spot"})
    cohort = Cohort.objects.create(cluster=manager, name="pool")
    cq = ClusterQueue.objects.create(cluster=manager, name="team-a-cq", cohort=cohort)
    FlavorQuota.objects.create(cluster_queue=cq, flavor=flavor, resource="cpu", nominal_quota="4")
    lq = LocalQueue.objects.create(cluster=manager, namespace="team-a", name="main",
                                   cluster_queue=cq)
    wpc = WorkloadPriorityClass.objects.create(cluster=manager, name="high", value=1000)
    job = Job.objects.create(cluster=manager, namespace="team-a", name="sample",
                             manifest={"apiVersion": "batch/v1", "kind": "Job"})
    workload = Workload.objects.create(cluster=manager, namespace="team-a", name="job-sample",
                                       queue_name="main", pod_sets=POD_SETS, job=job,
                                       local_queue=lq)
    event = Event.objects.create(cluster=manager, workload=workload, object_kind="Workload",
                                 object_namespace="team-a", object_name="job-sample",
                                 reason="Created", message="created", created_at=timezone.now())
    priority_class = PriorityClass.objects.create(cluster=manager, name="high-pods", value=10)
    limit_range = LimitRange.objects.create(
        cluster=manager, namespace="team-a", name="defaults",
        limits=[{"type": "Container", "defaultRequest": {"cpu": "500m"}}])
    runtime_class = RuntimeClass.objects.create(cluster=manager, name="kata", handler="kata",
                                                overhead={"cpu": "250m"})
    return {"resourceflavor": flavor, "spot": spot, "cohort": cohort, "clusterqueue": cq,
            "localqueue": lq, "workloadpriorityclass": wpc, "job": job, "workload": workload,
            "event": event, "priorityclass": priority_class, "limitrange": limit_range,
            "runtimeclass": runtime_class}


@pytest.fixture
def admin_browser(client: Client, admin_user: User) -> Client:
    client.force_login(admin_user)
    return client


MODELS = ["resourceflavor", "cohort", "clusterqueue", "localqueue", "workloadpriorityclass",
          "workload", "job", "event", "priorityclass", "limitrange", "runtimeclass"]
ADDABLE = ["resourceflavor", "cohort", "clusterqueue", "localqueue", "workloadpriorityclass"]


@pytest.mark.parametrize("model", MODELS)
def test_changelist_and_change_page_render_for_an_admin(
    admin_browser: Client, objects: dict[str, Any], model: str
) -> None:
    # given an object of the model; when an admin opens its list and its page
    listing = admin_browser.get(reverse(f"admin:scheduling_{model}_changelist"))
    page = admin_browser.get(reverse(f"admin:scheduling_{model}_change",
                                     args=[objects[model].pk]))
    # then both render
    assert listing.status_code == 200
    assert page.status_code == 200


@pytest.mark.parametrize("model", ADDABLE)
def test_add_page_renders_for_an_admin(admin_browser: Client, manager: Cluster, model: str) -> None:
    assert admin_browser.get(reverse(f"admin:scheduling_{model}_add")).status_code == 200


@pytest.mark.parametrize("model", ["priorityclass", "limitrange", "runtimeclass"])
def test_the_clusters_own_objects_are_read_only_here(
    admin_browser: Client, objects: dict[str, Any], model: str
) -> None:
    """Applied (simulated cluster) or mirrored (Kubernetes cluster), never edited here."""
    obj = objects[model]
    assert admin_browser.get(reverse(f"admin:scheduling_{model}_add")).status_code == 403
    assert admin_browser.get(reverse(f"admin:scheduling_{model}_delete",
                                     args=[obj.pk])).status_code == 403
    changed = admin_browser.post(reverse(f"admin:scheduling_{model}_change", args=[obj.pk]),
                                 {"name": "renamed", "value": "99", "handler": "runc"})
    assert changed.status_code == 403
    version = obj.resource_version
    obj.refresh_from_db()
    assert obj.resource_version == version


@pytest.mark.parametrize("model", ["workload", "job", "event"])
def test_status_objects_cannot_be_added_here(admin_browser: Client, manager: Cluster,
                                             model: str) -> None:
    assert admin_browser.get(reverse(f"admin:scheduling_{model}_add")).status_code == 403


@pytest.mark.parametrize("model", MODELS)
def test_viewer_is_sent_to_the_login_page(
    client: Client, viewer: User, objects: dict[str, Any], model: str
) -> None:
    client.force_login(viewer)
    listing = client.get(reverse(f"admin:scheduling_{model}_changelist"))
    page = client.get(reverse(f"admin:scheduling_{model}_change", args=[objects[model].pk]))
    for response in (listing, page):
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_admin_group_member_sees_the_quota_models_on_the_index(admin_browser: Client) -> None:
    response = admin_browser.get(reverse("admin:index"))
    assert response.status_code == 200
    for name in (b"Cluster queues", b"Local queues", b"Resource flavors", b"Cohorts"):
        assert name in response.content


def test_workload_status_is_read_only(admin_browser: Client, objects: dict[str, Any]) -> None:
    workload = objects["workload"]
    response = admin_browser.get(reverse("admin:scheduling_workload_change", args=[workload.pk]))
    form_fields = response.context["adminform"].form.fields
    assert set(form_fields) == {"active"}


def test_deactivating_a_workload_goes_through_the_service(
    admin_browser: Client, objects: dict[str, Any]
) -> None:
    # given an active workload; when an admin unticks "active"
    workload = objects["workload"]
    version = workload.resource_version
    response = admin_browser.post(
        reverse("admin:scheduling_workload_change", args=[workload.pk]), {})
    # then it is inactive, written once, and nothing else changed
    assert response.status_code == 302
    workload.refresh_from_db()
    assert (workload.active, workload.resource_version) == (False, version + 1)
    assert workload.pod_sets == POD_SETS


# --- cluster queue page: quotas validated as Kueue resourceGroups ------------------------


def _cq_post(manager: Cluster, rows: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "cluster": manager.pk, "name": "new-cq", "cohort": "",
        "queueing_strategy": "BestEffortFIFO", "namespace_selector": "{}", "stop_policy": "None",
        "within_cluster_queue": "Never", "reclaim_within_cohort": "Never",
        "borrow_within_cohort_policy": "Never", "borrow_within_cohort_max_priority_threshold": "",
        "when_can_borrow": "MayStopSearch", "when_can_preempt": "TryNextFlavor",
        "fungibility_preference": "", "fair_sharing_weight": "", "admission_checks": "[]",
        "quotas-TOTAL_FORMS": len(rows), "quotas-INITIAL_FORMS": 0,
        "quotas-MIN_NUM_FORMS": 0, "quotas-MAX_NUM_FORMS": 1000,
    }
    for index, row in enumerate(rows):
        values = {"resource_group": 0, "position": 0, "borrowing_limit": "",
                  "lending_limit": "", **row}
        for key, value in values.items():
            data[f"quotas-{index}-{key}"] = value
    data.update(fields)
    return data


def _row(flavor: ResourceFlavor, resource: str, nominal: str, **extra: Any) -> dict[str, Any]:
    return {"flavor": flavor.pk, "resource": resource, "nominal_quota": nominal, **extra}


def test_valid_cluster_queue_is_saved_with_its_quotas_in_page_order(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    flavor, spot, cohort = objects["resourceflavor"], objects["spot"], objects["cohort"]
    rows = [
        _row(flavor, "cpu", "8", lending_limit="2", borrowing_limit="4"),
        _row(flavor, "memory", "32Gi"),
        _row(spot, "cpu", "4"),
        _row(spot, "memory", "16Gi"),
    ]
    response = admin_browser.post(reverse("admin:scheduling_clusterqueue_add"),
                                  _cq_post(manager, rows, cohort=cohort.pk))
    assert response.status_code == 302, response.context["inline_admin_formsets"][0].formset.non_form_errors()
    cq = ClusterQueue.objects.get(cluster=manager, name="new-cq")
    assert cq.cohort == cohort
    stored = [(q.flavor.name, q.resource, q.nominal_quota, q.borrowing_limit, q.lending_limit,
               q.position) for q in cq.quotas.order_by("position")]
    assert stored == [
        ("default-flavor", "cpu", "8", "4", "2", 0),
        ("default-flavor", "memory", "32Gi", None, None, 1),
        ("spot", "cpu", "4", None, None, 2),
        ("spot", "memory", "16Gi", None, None, 3),
    ]


@pytest.mark.parametrize(
    ("case", "want_message"),
    [
        ("resource-covered-by-two-groups",
         "is already covered by resource group 0"),
        ("lending-limit-above-nominal",
         "lendingLimit must be less than or equal to the nominalQuota "
         "(spec.resourceGroups[0].flavors[0].resources[0].lendingLimit)"),
        ("borrowing-limit-without-cohort",
         "borrowingLimit must be nil when cohort is empty"),
        ("flavor-missing-a-covered-resource",
         "resource group 0, flavor spot: must list exactly the covered resources"),
        ("flavor-in-two-groups",
         "flavor 'default-flavor' appears more than once in resourceGroups"),
        ("invalid-quantity", "'four' is not a valid quantity"),
    ],
)
def test_cluster_queue_quota_that_kueue_refuses_is_refused_and_nothing_is_saved(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any], case: str,
    want_message: str,
) -> None:
    # given
    flavor, spot, cohort = objects["resourceflavor"], objects["spot"], objects["cohort"]
    rows_and_fields: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {
        "resource-covered-by-two-groups": (
            [_row(flavor, "cpu", "4"), _row(spot, "cpu", "4", resource_group=1)], {}),
        "lending-limit-above-nominal": (
            [_row(flavor, "cpu", "4", lending_limit="5")], {"cohort": cohort.pk}),
        "borrowing-limit-without-cohort": (
            [_row(flavor, "cpu", "4", borrowing_limit="2")], {}),
        "flavor-missing-a-covered-resource": (
            [_row(flavor, "cpu", "4"), _row(flavor, "memory", "1Gi"), _row(spot, "cpu", "4")],
            {}),
        "flavor-in-two-groups": (
            [_row(flavor, "cpu", "4"), _row(flavor, "memory", "4", resource_group=1)], {}),
        "invalid-quantity": ([_row(flavor, "cpu", "four")], {}),
    }
    rows, fields = rows_and_fields[case]
    quotas_before = FlavorQuota.objects.count()
    # when
    response = admin_browser.post(reverse("admin:scheduling_clusterqueue_add"),
                                  _cq_post(manager, rows, **fields))
    # then the page is shown again with the message, and nothing was saved
    assert response.status_code == 200
    assert want_message in response.content.decode().replace("&#x27;", "'")
    assert not ClusterQueue.objects.filter(name="new-cq").exists()
    assert FlavorQuota.objects.count() == quotas_before


def test_duplicate_flavor_and_resource_rows_are_refused(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    flavor = objects["resourceflavor"]
    rows = [_row(flavor, "cpu", "4"), _row(flavor, "cpu", "2")]
    response = admin_browser.post(reverse("admin:scheduling_clusterqueue_add"),
                                  _cq_post(manager, rows))
    assert response.status_code == 200
    assert b"Please correct the duplicate data" in response.content
    assert not ClusterQueue.objects.filter(name="new-cq").exists()


@pytest.mark.parametrize(
    ("fields", "want_message"),
    [
        ({"fungibility_preference": "BorrowingOverPreemption"},
         "spec.flavorFungibility.preference: may only be set when whenCanBorrow and "
         "whenCanPreempt are TryNextFlavor"),
        ({"borrow_within_cohort_policy": "LowerPriority"},
         "spec.preemption.borrowWithinCohort.policy: reclaimWithinCohort=Never and "
         "borrowWithinCohort.Policy!=Never"),
        ({"fair_sharing_weight": "1n"}, "spec.fairSharing.weight: must be 0 or greater than 1e-9"),
    ],
    ids=["fungibility-preference", "borrow-without-reclaim", "tiny-fair-sharing-weight"],
)
def test_cluster_queue_policies_that_kueue_refuses_are_refused(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any], fields: dict[str, Any],
    want_message: str,
) -> None:
    response = admin_browser.post(
        reverse("admin:scheduling_clusterqueue_add"),
        _cq_post(manager, [_row(objects["resourceflavor"], "cpu", "4")], **fields),
    )
    assert response.status_code == 200
    assert want_message in response.content.decode()
    assert not ClusterQueue.objects.filter(name="new-cq").exists()


def test_flavor_of_another_cluster_is_refused(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    worker = Cluster.objects.create(name="worker-1", role="worker")
    foreign = ResourceFlavor.objects.create(cluster=worker, name="default-flavor")
    response = admin_browser.post(reverse("admin:scheduling_clusterqueue_add"),
                                  _cq_post(manager, [_row(foreign, "cpu", "4")]))
    assert response.status_code == 200
    assert "belongs to cluster &#x27;worker-1&#x27;" in response.content.decode()
    assert not ClusterQueue.objects.filter(name="new-cq").exists()


def test_cluster_queue_list_counts_workloads_without_a_query_per_row(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    # given one pending and two admitted workloads in team-a-cq, and a second, empty queue
    cq, lq = objects["clusterqueue"], objects["localqueue"]
    for index in range(2):
        Workload.objects.create(cluster=manager, namespace="team-a", name=f"admitted-{index}",
                                queue_name="main", pod_sets=POD_SETS, local_queue=lq,
                                cluster_queue=cq, phase="Admitted")
    url = reverse("admin:scheduling_clusterqueue_changelist")
    with CaptureQueriesContext(connection) as one_queue:
        response = admin_browser.get(url)
    rows = {row.name: row for row in response.context["cl"].result_list}
    assert (rows["team-a-cq"].pending_count, rows["team-a-cq"].admitted_count) == (1, 2)
    # when more queues are listed, then the number of queries does not grow
    for index in range(3):
        ClusterQueue.objects.create(cluster=manager, name=f"extra-{index}")
    with CaptureQueriesContext(connection) as four_queues:
        admin_browser.get(url)
    assert len(four_queues) == len(one_queue)


def test_local_queue_list_counts_pending_and_admitted(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    lq = objects["localqueue"]
    Workload.objects.create(cluster=manager, namespace="team-a", name="done", queue_name="main",
                            pod_sets=POD_SETS, local_queue=lq, phase="Admitted")
    response = admin_browser.get(reverse("admin:scheduling_localqueue_changelist"))
    row = response.context["cl"].result_list[0]
    assert (row.pending_count, row.admitted_count) == (1, 1)


# --- cohorts and local queues -----------------------------------------------------------


def test_cohort_parent_that_closes_a_cycle_is_refused(
    admin_browser: Client, manager: Cluster, make_user: Callable[..., User]
) -> None:
    # given a ← b (b's parent is a)
    a = Cohort.objects.create(cluster=manager, name="a")
    Cohort.objects.create(cluster=manager, name="b", parent=a)
    # when a's parent is set to b
    response = admin_browser.post(
        reverse("admin:scheduling_cohort_change", args=[a.pk]),
        {"parent": Cohort.objects.get(name="b").pk, "fair_sharing_weight": "",
         "quotas-TOTAL_FORMS": 0, "quotas-INITIAL_FORMS": 0, "quotas-MIN_NUM_FORMS": 0,
         "quotas-MAX_NUM_FORMS": 1000},
    )
    # then
    assert response.status_code == 200
    assert "would make a cohort cycle: a → b → a" in response.content.decode()
    a.refresh_from_db()
    assert a.parent is None


def test_cohort_quota_limits_need_a_parent(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    flavor = objects["resourceflavor"]
    response = admin_browser.post(
        reverse("admin:scheduling_cohort_add"),
        {"cluster": manager.pk, "name": "root", "parent": "", "fair_sharing_weight": "",
         "quotas-TOTAL_FORMS": 1, "quotas-INITIAL_FORMS": 0, "quotas-MIN_NUM_FORMS": 0,
         "quotas-MAX_NUM_FORMS": 1000, "quotas-0-resource_group": 0, "quotas-0-position": 0,
         "quotas-0-flavor": flavor.pk, "quotas-0-resource": "cpu",
         "quotas-0-nominal_quota": "4", "quotas-0-borrowing_limit": "",
         "quotas-0-lending_limit": "1"},
    )
    assert response.status_code == 200
    assert "lendingLimit must be nil when parentName is empty" in response.content.decode()
    assert not Cohort.objects.filter(name="root").exists()


def test_local_queue_must_use_a_cluster_queue_of_its_own_cluster(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    worker = Cluster.objects.create(name="worker-1", role="worker")
    foreign_cq = ClusterQueue.objects.create(cluster=worker, name="worker-cq")
    response = admin_browser.post(
        reverse("admin:scheduling_localqueue_add"),
        {"cluster": manager.pk, "namespace": "team-b", "name": "main",
         "cluster_queue": foreign_cq.pk, "stop_policy": "None", "fair_sharing_weight": ""},
    )
    assert response.status_code == 200
    assert "is in cluster &#x27;worker-1&#x27;" in response.content.decode()
    assert not LocalQueue.objects.filter(namespace="team-b").exists()


def test_local_queue_of_the_same_cluster_is_created(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    response = admin_browser.post(
        reverse("admin:scheduling_localqueue_add"),
        {"cluster": manager.pk, "namespace": "team-b", "name": "main",
         "cluster_queue": objects["clusterqueue"].pk, "stop_policy": "None",
         "fair_sharing_weight": ""},
    )
    assert response.status_code == 302
    assert LocalQueue.objects.get(namespace="team-b", name="main").cluster_queue.name == "team-a-cq"


def test_editing_a_cluster_queue_keeps_page_order_and_renumbers_positions(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    # given team-a-cq with one cpu row on default-flavor
    cq, spot = objects["clusterqueue"], objects["spot"]
    existing = cq.quotas.get()
    data = _cq_post(manager, [], cohort=cq.cohort_id)
    for key in ("cluster", "name"):
        data.pop(key)
    data.update({
        "quotas-TOTAL_FORMS": 2, "quotas-INITIAL_FORMS": 1,
        "quotas-0-id": existing.pk, "quotas-0-cluster_queue": cq.pk,
        "quotas-0-resource_group": 0, "quotas-0-position": 0,
        "quotas-0-flavor": existing.flavor_id, "quotas-0-resource": "cpu",
        "quotas-0-nominal_quota": "6", "quotas-0-borrowing_limit": "",
        "quotas-0-lending_limit": "",
        "quotas-1-cluster_queue": cq.pk, "quotas-1-resource_group": 0, "quotas-1-position": 0,
        "quotas-1-flavor": spot.pk, "quotas-1-resource": "cpu", "quotas-1-nominal_quota": "2",
        "quotas-1-borrowing_limit": "", "quotas-1-lending_limit": "",
    })
    # when a spot row is added below it, with the same position number
    response = admin_browser.post(reverse("admin:scheduling_clusterqueue_change", args=[cq.pk]),
                                  data)
    # then the page order is the stored (preference) order
    assert response.status_code == 302
    stored = [(q.flavor.name, q.nominal_quota, q.position) for q in cq.quotas.order_by("position")]
    assert stored == [("default-flavor", "6", 0), ("spot", "2", 1)]


def test_saving_a_cluster_queue_asks_for_an_admission_cycle_of_its_cluster(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requested: list[int] = []
    monkeypatch.setattr("scheduling.scheduler.admission.request_admission", requested.append)
    response = admin_browser.post(reverse("admin:scheduling_clusterqueue_add"),
                                  _cq_post(manager, [_row(objects["resourceflavor"], "cpu", "4")]))
    assert response.status_code == 302
    assert requested == [manager.pk]


def test_refused_cluster_queue_asks_for_no_cycle(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requested: list[int] = []
    monkeypatch.setattr("scheduling.scheduler.admission.request_admission", requested.append)
    admin_browser.post(reverse("admin:scheduling_clusterqueue_add"), _cq_post(
        manager, [_row(objects["resourceflavor"], "cpu", "4", borrowing_limit="1")]))
    assert requested == []


def test_deleting_a_job_removes_its_workloads_through_the_service(
    admin_browser: Client, objects: dict[str, Any]
) -> None:
    job = objects["job"]
    response = admin_browser.post(reverse("admin:scheduling_job_delete", args=[job.pk]),
                                  {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()
    assert not Workload.objects.filter(job_id=job.pk).exists()
    assert not Event.objects.filter(workload_id=objects["workload"].pk).exists()


def test_cohort_lending_limit_may_exceed_its_own_nominal_quota(
    admin_browser: Client, manager: Cluster, objects: dict[str, Any]
) -> None:
    # Kueue's Cohort webhook, unlike the ClusterQueue one, does not bound lendingLimit by
    # the cohort's nominalQuota: the subtree's capacity can be lent.
    parent, flavor = objects["cohort"], objects["resourceflavor"]
    response = admin_browser.post(
        reverse("admin:scheduling_cohort_add"),
        {"cluster": manager.pk, "name": "child", "parent": parent.pk, "fair_sharing_weight": "",
         "quotas-TOTAL_FORMS": 1, "quotas-INITIAL_FORMS": 0, "quotas-MIN_NUM_FORMS": 0,
         "quotas-MAX_NUM_FORMS": 1000, "quotas-0-resource_group": 0, "quotas-0-position": 0,
         "quotas-0-flavor": flavor.pk, "quotas-0-resource": "cpu",
         "quotas-0-nominal_quota": "2", "quotas-0-borrowing_limit": "",
         "quotas-0-lending_limit": "6"},
    )
    assert response.status_code == 302
    quota = Cohort.objects.get(name="child").quotas.get()
    assert (quota.nominal_quota, quota.lending_limit) == ("2", "6")


def test_cluster_queue_page_shows_its_parked_shapes(admin_browser: Client,
                                                    objects: dict[str, Any]) -> None:
    from django.utils import timezone

    from scheduling.models import ParkedShape

    cq = objects["clusterqueue"]
    ParkedShape.objects.create(cluster_queue=cq, priority=7, pod_sets_hash="a" * 32,
                               reason="Pending", message="insufficient unused quota for cpu",
                               parked_at=timezone.now())

    page = admin_browser.get(reverse("admin:scheduling_clusterqueue_change", args=[cq.pk]))

    assert page.status_code == 200
    html = page.content.decode()
    assert "parked shapes" in html.lower()
    assert "insufficient unused quota for cpu" in html
    assert "a" * 32 in html
