"""The workload pages: the list (filters, sorting, pages), the detail and its controls."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from multicluster.models import Cluster, Pod
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.workload import conditions as cond
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def rows(response: Any) -> list[str]:
    """The ``data-workload`` keys of the list's rows, in order."""
    import re

    return re.findall(r'data-workload="([^"]+)"', response.content.decode())


def detail_url(wl: Workload, suffix: str = "") -> str:
    url = reverse("ui-workload", kwargs={"cluster": wl.cluster.name, "namespace": wl.namespace,
                                         "name": wl.name})
    return url + suffix


def action_url(wl: Workload, action: str) -> str:
    return reverse("ui-workload-action", kwargs={
        "cluster": wl.cluster.name, "namespace": wl.namespace, "name": wl.name, "action": action})


@pytest.fixture
def mixed(make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload],
          reconcilers: Reconcilers, t0: datetime) -> dict[str, Workload]:
    """Three queues in two namespaces; one admitted workload, pending ones, an inactive one."""
    make_queue("cq-a", {"cpu": "2"}, namespace="team-a")
    make_queue("cq-b", {"cpu": "10"}, namespace="team-b")
    made = {"alpha": make_workload("alpha", "lq-cq-a", {"cpu": "2"}, priority=10,
                                   namespace="team-a")}
    reconcilers.step(t0)
    made["beta"] = make_workload("beta", "lq-cq-a", {"cpu": "2"}, priority=50, namespace="team-a")
    made["gamma"] = make_workload("gamma", "lq-cq-b", {"cpu": "20"}, priority=100,
                                  namespace="team-b")
    reconcilers.step(t0 + timedelta(seconds=1))
    services.update_workload(Workload.objects.get(name="gamma"), {"spec": {"active": False}})
    return {k: Workload.objects.get(pk=v.pk) for k, v in made.items()}


# =========================================================================================
# Access
# =========================================================================================


def test_the_list_needs_a_signed_in_user_with_a_role(
    client: Client, make_user: Callable[..., User]
) -> None:
    response = client.get(reverse("ui-workloads"))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert ui_client_for(make_user("nobody")).get(reverse("ui-workloads")).status_code == 403


# =========================================================================================
# The list
# =========================================================================================


def test_the_list_shows_every_workload_with_its_phase(
    viewer_ui: Client, mixed: dict[str, Workload]
) -> None:
    response = viewer_ui.get(reverse("ui-workloads"))
    assert response.status_code == 200
    body = response.content.decode()
    assert set(rows(response)) == {"team-a/alpha", "team-a/beta", "team-b/gamma"}
    assert 'data-workload="team-a/alpha" data-phase="Admitted"' in body
    assert 'data-workload="team-a/beta" data-phase="Pending"' in body
    assert detail_url(mixed["alpha"]) in body
    assert 'id="wl-table"' in body
    assert "data-live-refresh" in body
    assert f'data-live-clusters="{mixed["alpha"].cluster_id}' in body


@pytest.mark.parametrize(("query", "expected"), [
    ("namespace=team-a", {"team-a/alpha", "team-a/beta"}),
    ("queue=lq-cq-b", {"team-b/gamma"}),
    ("cluster_queue=cq-a", {"team-a/alpha", "team-a/beta"}),
    ("state=Admitted", {"team-a/alpha"}),
    ("state=Pending", {"team-a/beta", "team-b/gamma"}),
    ("state=inactive", {"team-b/gamma"}),
    ("state=Finished", set()),
    ("priority_min=50", {"team-a/beta", "team-b/gamma"}),
    ("priority_max=50", {"team-a/alpha", "team-a/beta"}),
    ("priority_min=20&priority_max=60", {"team-a/beta"}),
    ("q=AMM", {"team-b/gamma"}),
    ("namespace=team-a&state=Pending", {"team-a/beta"}),
])
def test_filters_return_the_matching_rows(
    viewer_ui: Client, mixed: dict[str, Workload], query: str, expected: set[str]
) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + "?" + query)
    assert response.status_code == 200
    assert set(rows(response)) == expected


def test_the_evicted_state_filter(
    admin_ui: Client, admin_user: User, mixed: dict[str, Workload]
) -> None:
    services.evict_workload(mixed["alpha"], user=admin_user)
    response = admin_ui.get(reverse("ui-workloads") + "?state=evicted")
    assert rows(response) == ["team-a/alpha"]


@pytest.mark.parametrize(("sort", "expected"), [
    ("name", ["team-a/alpha", "team-a/beta", "team-b/gamma"]),
    ("-name", ["team-b/gamma", "team-a/beta", "team-a/alpha"]),
    ("priority", ["team-a/alpha", "team-a/beta", "team-b/gamma"]),
    ("-priority", ["team-b/gamma", "team-a/beta", "team-a/alpha"]),
    ("created", ["team-a/alpha", "team-a/beta", "team-b/gamma"]),
    ("-created", ["team-b/gamma", "team-a/beta", "team-a/alpha"]),
    ("namespace", ["team-a/alpha", "team-a/beta", "team-b/gamma"]),
    ("queue", ["team-a/alpha", "team-a/beta", "team-b/gamma"]),
])
def test_sorting_orders_the_rows(
    viewer_ui: Client, mixed: dict[str, Workload], sort: str, expected: list[str]
) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + f"?sort={sort}")
    assert rows(response) == expected
    # The header of the sorted column says so, and links to the reverse order.
    body = response.content.decode()
    key = sort.lstrip("-")
    direction = "descending" if sort.startswith("-") else "ascending"
    assert f'aria-sort="{direction}" data-sort-key="{key}"' in body


def test_sorting_by_state(viewer_ui: Client, mixed: dict[str, Workload]) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + "?sort=state")
    assert rows(response)[0] == "team-a/alpha"  # Admitted < Pending


def test_pages_hold_fifty_rows_and_link_onwards(
    viewer_ui: Client, make_queue: Callable[..., ClusterQueue], manager: Cluster
) -> None:
    cq = make_queue("cq", {"cpu": "1"})
    Workload.objects.bulk_create([
        Workload(cluster=manager, namespace="ns", name=f"wl-{i:03d}", queue_name="lq-cq",
                 local_queue=cq.local_queues.get(), pod_sets=[])
        for i in range(55)
    ])
    first = viewer_ui.get(reverse("ui-workloads") + "?sort=name")
    assert len(rows(first)) == 50
    assert rows(first)[0] == "ns/wl-000"
    assert 'id="page-next"' in first.content.decode()
    assert "of 55 workloads" in first.content.decode()
    second = viewer_ui.get(reverse("ui-workloads") + "?sort=name&page=2")
    assert rows(second) == [f"ns/wl-{i:03d}" for i in range(50, 55)]
    assert 'id="page-next"' not in second.content.decode()
    assert 'id="page-prev"' in second.content.decode()


def test_the_list_costs_a_fixed_number_of_queries(
    viewer_ui: Client, make_queue: Callable[..., ClusterQueue], manager: Cluster,
    django_assert_max_num_queries: Any,
) -> None:
    cq = make_queue("cq", {"cpu": "1"})
    Workload.objects.bulk_create([
        Workload(cluster=manager, namespace="ns", name=f"wl-{i:03d}", queue_name="lq-cq",
                 local_queue=cq.local_queues.get(), pod_sets=[])
        for i in range(120)
    ])
    # session + user + groups, rows, count, clusters, three option lists
    with django_assert_max_num_queries(10):
        response = viewer_ui.get(reverse("ui-workloads") + "?state=Pending&sort=-priority")
    assert len(rows(response)) == 50
    with django_assert_max_num_queries(6):
        response = viewer_ui.get(reverse("ui-workloads-partial") + "?page=2")
    assert len(rows(response)) == 50


def test_the_partial_returns_the_table_region_with_the_filters(
    viewer_ui: Client, mixed: dict[str, Workload]
) -> None:
    response = viewer_ui.get(reverse("ui-workloads-partial") + "?namespace=team-b")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="wl-table"')
    assert "<html" not in body
    assert rows(response) == ["team-b/gamma"]
    assert 'hx-get="/workloads/partial/?namespace=team-b"' in body


def test_a_bad_filter_value_does_not_fail(viewer_ui: Client, mixed: dict[str, Workload]) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + "?state=Bogus&priority_min=x&page=zz")
    assert response.status_code == 200


# =========================================================================================
# The detail page
# =========================================================================================


def test_the_detail_shows_pod_sets_admission_conditions_and_events(
    viewer_ui: Client, make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    job = services.submit_job(job_manifest("train", "lq-cq", parallelism=2, cpu="500m"),
                              namespace="team-a")
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=3))
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.ADMITTED

    response = viewer_ui.get(detail_url(wl))
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="wl-status"' in body
    assert 'data-phase="Admitted"' in body
    assert 'data-pod-set="main"' in body
    assert "cpu: 500m" in body  # per pod
    assert "cpu: 1" in body  # total of the pod set
    assert 'id="wl-admission-cq">cq<' in body
    for type_ in ("QuotaReserved", "Admitted", "PodsReady"):
        assert f'data-condition="{type_}"' in body
    for reason in ("CreatedWorkload", "QuotaReserved", "Admitted"):
        assert f'data-event-reason="{reason}"' in body
    # Newest event first.
    assert body.index('data-event-reason="Admitted"') < body.index(
        'data-event-reason="CreatedWorkload"')
    # The job: its manifest as YAML, its pods, its slices.
    assert "kind: Job" in body
    assert body.count("data-pod=") == 2
    assert Pod.objects.filter(job=job).first().node_name in body  # type: ignore[union-attr]
    assert f'data-slice="team-a/{wl.name}" data-phase="Admitted"' in body
    assert f'data-live-clusters="{wl.cluster_id}"' in body


def test_conditions_are_a_timeline_by_transition_time(
    viewer_ui: Client, mixed: dict[str, Workload]
) -> None:
    wl = mixed["beta"]
    Workload.objects.filter(pk=wl.pk).update(conditions=[
        {"type": "B", "status": "True", "reason": "Later", "message": "second",
         "lastTransitionTime": "2030-01-01T00:00:10Z"},
        {"type": "A", "status": "False", "reason": "Earlier", "message": "first",
         "lastTransitionTime": "2030-01-01T00:00:00Z"},
    ])
    body = viewer_ui.get(detail_url(wl)).content.decode()
    assert body.index('data-condition="A"') < body.index('data-condition="B"')
    assert "Earlier" in body
    assert "second" in body


def test_events_are_paginated(viewer_ui: Client, mixed: dict[str, Workload]) -> None:
    from django.utils import timezone

    from scheduling.models import Event

    wl = mixed["beta"]
    now = timezone.now()
    Event.objects.bulk_create([
        Event(cluster_id=wl.cluster_id, workload=wl, object_kind="Workload",
              object_namespace=wl.namespace, object_name=wl.name, reason=f"R{i:02d}",
              message="", created_at=now + timedelta(seconds=i))
        for i in range(30)
    ])
    body = viewer_ui.get(detail_url(wl)).content.decode()
    assert 'data-event-reason="R29"' in body
    assert 'data-event-reason="R00"' not in body
    assert 'id="events-next"' in body
    older = viewer_ui.get(reverse("ui-workload-partial", kwargs={
        "cluster": wl.cluster.name, "namespace": wl.namespace, "name": wl.name,
        "region": "events"}) + "?events_page=2").content.decode()
    assert older.lstrip().startswith('<section id="wl-events"')
    assert 'data-event-reason="R00"' in older


@pytest.mark.parametrize("region", ["status", "controls", "events", "pods", "slices", "job"])
def test_each_region_has_a_partial(
    viewer_ui: Client, mixed: dict[str, Workload], region: str
) -> None:
    wl = mixed["alpha"]
    response = viewer_ui.get(reverse("ui-workload-partial", kwargs={
        "cluster": wl.cluster.name, "namespace": wl.namespace, "name": wl.name,
        "region": region}))
    assert response.status_code == 200
    body = response.content.decode().lstrip()
    assert body.startswith(f'<section id="wl-{region}"')
    assert "data-live-refresh" in body
    assert "<html" not in body


def test_an_unknown_workload_or_region_is_not_found(
    viewer_ui: Client, mixed: dict[str, Workload]
) -> None:
    wl = mixed["alpha"]
    assert viewer_ui.get(reverse("ui-workload", kwargs={
        "cluster": wl.cluster.name, "namespace": "team-a", "name": "nope"})).status_code == 404
    assert viewer_ui.get(reverse("ui-workload-partial", kwargs={
        "cluster": wl.cluster.name, "namespace": wl.namespace, "name": wl.name,
        "region": "secrets"})).status_code == 404


# =========================================================================================
# Controls
# =========================================================================================

CONTROL_IDS = ("control-deactivate", "control-activate", "control-evict", "control-delete-job",
               "control-scale")


@pytest.fixture
def running(make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers,
            t0: datetime) -> Workload:
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    job = services.submit_job(job_manifest("run", "lq-cq", run_seconds=1000), namespace="team-a")
    reconcilers.step(t0)
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.ADMITTED
    return wl


def test_a_viewer_sees_no_controls_and_is_refused(viewer_ui: Client, running: Workload) -> None:
    body = viewer_ui.get(detail_url(running)).content.decode()
    for control in CONTROL_IDS:
        assert f'id="{control}"' not in body
    for action in ("deactivate", "evict", "delete-job", "activate"):
        assert viewer_ui.post(action_url(running, action)).status_code == 403
    after = Workload.objects.get(pk=running.pk)
    assert after.active is True
    assert not cond.is_true(after.conditions, "Evicted")
    assert Job.objects.filter(pk=running.job_id).exists()


def test_an_operator_is_refused_outside_their_namespaces(
    operator_ui: Client, make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload],
) -> None:
    make_queue("cq", {"cpu": "4"}, namespace="team-b")
    wl = make_workload("other", "lq-cq", {"cpu": "1"}, namespace="team-b")
    body = operator_ui.get(detail_url(wl)).content.decode()
    assert 'id="control-deactivate"' not in body
    assert 'id="controls-readonly"' in body
    assert operator_ui.post(action_url(wl, "deactivate")).status_code == 403
    assert Workload.objects.get(pk=wl.pk).active is True


def test_the_operator_of_the_namespace_sees_the_controls(
    operator_ui: Client, running: Workload
) -> None:
    body = operator_ui.get(detail_url(running)).content.decode()
    for control in ("control-deactivate", "control-evict", "control-delete-job", "control-scale"):
        assert f'id="{control}"' in body
    assert 'id="control-activate"' not in body
    # Every control asks first; scaling is shown but disabled, saying why.
    assert body.count("data-confirm=") == 3
    assert 'id="confirm-yes"' in body
    assert 'id="control-scale" disabled' in body
    assert 'aria-describedby="scale-reason"' in body
    assert ('Only elastic jobs (annotation kueue.x-k8s.io/elastic-job: &quot;true&quot;) can be '
            "scaled while admitted") in body


def test_deactivate_then_activate(operator_ui: Client, running: Workload) -> None:
    response = operator_ui.post(action_url(running, "deactivate"), follow=True)
    assert response.redirect_chain[-1][0] == detail_url(running)
    assert Workload.objects.get(pk=running.pk).active is False
    body = response.content.decode()
    assert "deactivated" in body
    assert 'id="control-activate"' in body

    operator_ui.post(action_url(running, "activate"))
    assert Workload.objects.get(pk=running.pk).active is True


def test_evict_evicts_and_a_second_evict_is_a_message(
    operator_ui: Client, running: Workload
) -> None:
    response = operator_ui.post(action_url(running, "evict"), follow=True)
    assert response.status_code == 200
    wl = Workload.objects.get(pk=running.pk)
    evicted = cond.find(wl.conditions, "Evicted")
    assert evicted is not None
    assert (evicted["status"], evicted["reason"], evicted["message"]) == (
        "True", "EvictedByUser", "Evicted by otto")
    assert 'id="control-evict"' not in response.content.decode()

    again = operator_ui.post(action_url(running, "evict"), follow=True)
    assert again.status_code == 200
    assert "Could not evict" in again.content.decode()


def test_evicting_a_pending_workload_is_refused_with_a_message(
    admin_ui: Client, mixed: dict[str, Workload]
) -> None:
    response = admin_ui.post(action_url(mixed["beta"], "evict"), follow=True)
    assert response.status_code == 200
    assert "Could not evict" in response.content.decode()
    assert not cond.is_true(Workload.objects.get(pk=mixed["beta"].pk).conditions, "Evicted")


def test_a_finished_workload_offers_only_deleting_its_job(
    operator_ui: Client, running: Workload, reconcilers: Reconcilers, t0: datetime,
) -> None:
    reconcilers.step(t0 + timedelta(seconds=1100))
    wl = Workload.objects.get(pk=running.pk)
    assert wl.phase == WorkloadPhase.FINISHED
    body = operator_ui.get(detail_url(wl)).content.decode()
    for control in ("control-deactivate", "control-activate", "control-evict"):
        assert f'id="{control}"' not in body
    assert 'id="control-delete-job"' in body
    assert "The workload has finished (Succeeded)" in body

    events = Event.objects.filter(workload=wl).count()
    for action, verb in (("evict", "evict"), ("deactivate", "deactivate")):
        response = operator_ui.post(action_url(wl, action), follow=True)
        assert f"Could not {verb} team-a/{wl.name}" in response.content.decode()
    after = Workload.objects.get(pk=wl.pk)
    assert (after.active, after.conditions) == (True, wl.conditions)
    assert Event.objects.filter(workload=wl).count() == events


def test_delete_job_removes_it_and_goes_to_the_list(
    operator_ui: Client, running: Workload
) -> None:
    response = operator_ui.post(action_url(running, "delete-job"))
    assert response.status_code == 302
    assert response["Location"] == reverse("ui-workloads")
    assert not Job.objects.filter(pk=running.job_id).exists()
    assert not Workload.objects.filter(pk=running.pk).exists()


def test_delete_job_on_a_bare_workload_is_a_message(
    admin_ui: Client, mixed: dict[str, Workload]
) -> None:
    response = admin_ui.post(action_url(mixed["beta"], "delete-job"), follow=True)
    assert response.status_code == 200
    assert "has no job" in response.content.decode()
    assert Workload.objects.filter(pk=mixed["beta"].pk).exists()


def test_a_control_needs_post_and_csrf(admin_user: User, running: Workload) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    assert client.post(action_url(running, "deactivate")).status_code == 403
    assert Workload.objects.get(pk=running.pk).active is True
    assert client.get(action_url(running, "deactivate")).status_code == 405
