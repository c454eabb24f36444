"""Pending workloads in queue order with positions and reasons (Kueue visibility API)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduling.scheduler import admission

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
pytestmark = pytest.mark.django_db


@pytest.fixture
def queued(manager, make_queue, make_workload):
    cq = make_queue("cq", {"cpu": "1"})
    from scheduling.models import LocalQueue

    LocalQueue.objects.create(cluster=manager, namespace="other", name="lq-cq", cluster_queue=cq)
    make_workload("running", "lq-cq", {"cpu": "1"})
    admission.run_admission_cycle(manager.pk, now=NOW)  # "running" takes all the quota
    make_workload("low", "lq-cq", {"cpu": "1"}, priority=0)
    make_workload("high", "lq-cq", {"cpu": "1"}, priority=5)
    make_workload("other-ns", "lq-cq", {"cpu": "1"}, priority=1, namespace="other")
    make_workload("low-2", "lq-cq", {"cpu": "1"}, priority=0)
    return cq


def test_cluster_queue_lists_pending_in_queue_order_with_positions(queued, viewer_client) -> None:
    response = viewer_client.get("/api/v1/clusterqueues/cq/pendingworkloads")

    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "PendingWorkloadsSummary"
    got = [(i["metadata"]["namespace"], i["metadata"]["name"], i["positionInClusterQueue"],
            i["positionInLocalQueue"]) for i in body["items"]]
    assert got == [
        ("ns", "high", 0, 0),
        ("other", "other-ns", 1, 0),
        ("ns", "low", 2, 1),
        ("ns", "low-2", 3, 2),
    ]
    assert body["items"][3]["message"] == "Waiting for its turn: 3 workloads ahead of it in ClusterQueue cq"


def test_local_queue_view_keeps_cluster_queue_positions_and_pages(queued, viewer_client) -> None:
    response = viewer_client.get(
        "/api/v1/namespaces/ns/localqueues/lq-cq/pendingworkloads?offset=1&limit=1"
    )

    assert response.status_code == 200
    items = response.json()["items"]
    assert [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"])
            for i in items] == [("low", 2, 1)]


def test_reason_comes_from_the_scheduler_once_tried(queued, manager, viewer_client) -> None:
    admission.run_admission_cycle(manager.pk, now=NOW)

    items = viewer_client.get("/api/v1/clusterqueues/cq/pendingworkloads").json()["items"]

    head = items[0]
    assert head["metadata"]["name"] == "high"
    assert "insufficient unused quota for cpu in flavor default" in head["message"]
    assert head["message"].endswith("it will be retried when quota frees up in its cohort")


def test_a_workload_of_a_parked_shape_says_why_its_shape_waits(
    queued, manager, viewer_client
) -> None:
    # "low" is tried and parked; "low-2", of the same shape, is never tried: it waits
    # behind the parked shape and says so with the head's reason (Kueue's GetNoFitReason).
    admission.run_admission_cycle(manager.pk, now=NOW)

    items = {i["metadata"]["name"]: i for i in viewer_client.get(
        "/api/v1/clusterqueues/cq/pendingworkloads").json()["items"]}

    from scheduling.models import Workload
    from scheduling.workload.conditions import find

    assert find(Workload.objects.get(name="low-2").conditions, "QuotaReserved") is None
    assert items["low-2"]["reason"] == items["low"]["reason"] != "Pending"
    assert items["low-2"]["message"] == items["low"]["message"]
    assert items["low-2"]["message"].endswith("retried when quota frees up in its cohort")


def test_unknown_queue_is_404_and_bad_paging_names_the_field(queued, viewer_client) -> None:
    assert viewer_client.get("/api/v1/clusterqueues/nope/pendingworkloads").status_code == 404
    response = viewer_client.get("/api/v1/clusterqueues/cq/pendingworkloads?limit=ten")
    assert response.status_code == 400
    assert "limit" in response.json()


def test_anonymous_is_refused(queued, anon_client) -> None:
    assert anon_client.get("/api/v1/clusterqueues/cq/pendingworkloads").status_code in (401, 403)


def test_one_workloads_place_is_counted_as_the_queue_walk_places_it(queued) -> None:
    from scheduling.models import Workload
    from scheduling.queue import visibility

    # Two of one priority queued at the same instant: the UID decides, as in the walk.
    low = Workload.objects.get(name="low")
    Workload.objects.filter(name="low-2").update(queued_at=low.queued_at)
    walked = {i["metadata"]["name"]: (i["positionInClusterQueue"], i["positionInLocalQueue"])
              for i in visibility.pending_in_cluster_queue(queued)}
    counted = {}
    for wl in Workload.objects.filter(phase="Pending").select_related("local_queue"):
        counted[wl.name] = visibility.workload_positions(wl)
    assert counted == walked
    place = visibility.workload_place(Workload.objects.get(name="low-2"))
    assert place is not None
    assert (place.cluster_queue_length, place.local_queue_length) == (4, 3)


def test_a_workload_out_of_its_queue_has_no_place(queued) -> None:
    from scheduling.models import Workload
    from scheduling.queue import visibility

    Workload.objects.filter(name="high").update(active=False)
    assert visibility.workload_positions(Workload.objects.get(name="high")) is None
    assert visibility.workload_positions(Workload.objects.get(name="running")) is None
    assert visibility.workload_positions(Workload.objects.get(name="other-ns")) == (0, 0)
