"""The workload list's filters on its computed columns: *reason contains* (``?reason=``)
agrees with the reason the column shows, and *position in local queue ≤ N*
(``?position_max=``) with the positions it shows. Both are decided in the database, on
SQLite and on PostgreSQL (run these tests once with ``DATABASE_URL`` set)."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.filters import reason_contains
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload
from scheduling.web.workload_list import pending_reason
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def rows(response: Any) -> list[str]:
    return re.findall(r'data-workload="([^"]+)"', response.content.decode())


def errors(response: Any) -> str:
    found = re.search(
        r'<ul class="error" id="filter-errors">(.*?)</ul>', response.content.decode(), re.S
    )
    return found.group(1) if found else ""


def _condition(type_: str, status: str, reason: str | None, message: str | None) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": type_,
        "status": status,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    if reason is not None:
        condition["reason"] = reason
    if message is not None:
        condition["message"] = message
    return condition


# (phase, conditions) of workloads in each state the reason column tells apart.
STATES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "waiting": (
        WorkloadPhase.PENDING,
        [_condition("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set")],
    ),
    "waiting-no-message": (
        WorkloadPhase.PENDING,
        [_condition("QuotaReserved", "False", "Inadmissible", "")],
    ),
    "waiting-no-reason": (
        WorkloadPhase.PENDING,
        [_condition("QuotaReserved", "False", None, "LocalQueue lq is stopped")],
    ),
    "evicted-pending": (
        WorkloadPhase.PENDING,
        [
            _condition("Evicted", "True", "Preempted", "to admit a 100% _urgent_ workload"),
            _condition("QuotaReserved", "False", "Pending", "waits for quota"),
        ],
    ),
    "evicted-admitted": (
        WorkloadPhase.ADMITTED,
        [
            _condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in cq"),
            _condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout"),
        ],
    ),
    "evicted-before": (
        WorkloadPhase.PENDING,
        [
            _condition("Evicted", "False", "Preempted", "an old eviction"),
            _condition("QuotaReserved", "False", "Pending", "waits for quota again"),
        ],
    ),
    "finished-stale": (
        WorkloadPhase.FINISHED,
        [_condition("QuotaReserved", "False", "Pending", "waits for quota")],
    ),
    "admitted": (
        WorkloadPhase.ADMITTED,
        [_condition("QuotaReserved", "True", "QuotaReserved", "Quota reserved in cq")],
    ),
    "pending-bare": (WorkloadPhase.PENDING, []),
}


@pytest.fixture
def states(
    make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload]
) -> dict[str, Workload]:
    make_queue("cq", {"cpu": "1"})
    made = {}
    for name, (phase, conditions) in STATES.items():
        workload = make_workload(name, "lq-cq", {"cpu": "4"})
        Workload.objects.filter(pk=workload.pk).update(phase=phase, conditions=conditions)
        made[name] = Workload.objects.get(pk=workload.pk)
    return made


@pytest.mark.parametrize(
    "text",
    [
        "evicted",
        "EVICTED (preempted",
        "pending",
        "pending:",
        "): ",
        ": ",
        "100%",
        "_urgent_",
        "quota",
        "inadmissible",
        "inadmissible:",
        "stopped",
        "timeout",
        "assign FLAVORS",
        "old eviction",
        "nothing says this",
    ],
)
def test_reason_contains_agrees_with_the_reason_shown(
    states: dict[str, Workload], text: str
) -> None:
    shown = {
        wl.name: pending_reason({"phase": wl.phase, "conditions": wl.conditions})
        for wl in states.values()
    }
    expected = {name for name, reason in shown.items() if text.lower() in reason.lower()}
    found = set(reason_contains(Workload.objects.all(), text).values_list("name", flat=True))
    assert found == expected, shown


def test_the_reason_filter_is_in_the_url_and_exported(
    viewer_ui: Client, states: dict[str, Workload]
) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + "?reason=EVICTED&cols=name,reason")
    assert response.status_code == 200
    assert set(rows(response)) == {"ns/evicted-pending", "ns/evicted-admitted"}
    assert 'name="reason"' in response.content.decode()
    assert 'value="EVICTED"' in response.content.decode()

    response = viewer_ui.get(
        reverse("ui-workloads-export", args=["csv"]) + "?reason=quota&cols=name,reason&sort=name"
    )
    table = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert table[0] == ["name", "reason"]
    # "finished-stale" holds the same condition, but a finished workload shows no reason.
    assert table[1:] == [["evicted-before", "Pending: waits for quota again"]]


@pytest.fixture
def queued(
    make_queue: Callable[..., ClusterQueue],
    make_workload: Callable[..., Workload],
    reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    """cq-a admits nothing (every workload asks more than its quota): three wait in lq-cq-a,
    two in a second LocalQueue of cq-a; cq-b has one waiting and one deactivated, and one
    admitted workload."""
    cq_a = make_queue("cq-a", {"cpu": "1"}, namespace="team-a")
    make_queue("cq-b", {"cpu": "2"}, namespace="team-b")
    LocalQueue.objects.create(
        cluster=cq_a.cluster, namespace="team-a", name="lq-other", cluster_queue=cq_a
    )
    for name, priority in (("a-low", 10), ("a-mid", 50), ("a-high", 90)):
        make_workload(name, "lq-cq-a", {"cpu": "4"}, priority=priority, namespace="team-a")
    for name, priority in (("o-1", 70), ("o-2", 20)):
        make_workload(name, "lq-other", {"cpu": "4"}, priority=priority, namespace="team-a")
    make_workload("b-run", "lq-cq-b", {"cpu": "1"}, namespace="team-b")
    reconcilers.step(t0)
    make_workload("b-wait", "lq-cq-b", {"cpu": "4"}, namespace="team-b")
    make_workload("b-off", "lq-cq-b", {"cpu": "4"}, priority=99, namespace="team-b")
    reconcilers.step(t0 + timedelta(seconds=1))
    Workload.objects.filter(name="b-off").update(active=False)


def positions(response: Any) -> dict[str, str]:
    cells = re.findall(
        r'data-workload="([^"]+)".*?<td data-position>(.*?)</td>',
        response.content.decode(),
        re.S,
    )
    return {name: re.sub(r"<[^>]+>", "", cell).strip() for name, cell in cells}


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_position_max_keeps_the_first_of_each_local_queue(
    viewer_ui: Client, queued: None, limit: int
) -> None:
    shown = positions(viewer_ui.get(reverse("ui-workloads") + "?cols=name,position"))
    assert shown["team-a/a-high"] == "1 / 1"
    assert shown["team-b/b-run"] == "—"
    in_lq = {name: int(cell.split(" / ")[0]) for name, cell in shown.items() if "/" in cell}
    expected = {name for name, position in in_lq.items() if position <= limit}

    response = viewer_ui.get(reverse("ui-workloads") + f"?cols=name,position&position_max={limit}")
    assert response.status_code == 200
    filtered = positions(response)
    assert set(filtered) == expected
    # The positions shown under the filter are the queue's, not renumbered.
    assert all(filtered[name] == shown[name] for name in filtered)


def test_position_max_numbers_the_whole_queue_before_other_filters(
    viewer_ui: Client, queued: None
) -> None:
    # a-high is first in lq-cq-a; the priority filter hides it, and the others are not
    # promoted to first.
    response = viewer_ui.get(reverse("ui-workloads") + "?position_max=1&priority_max=80")
    assert set(rows(response)) == {"team-a/o-1", "team-b/b-wait"}


def test_group_counts_respect_position_max(viewer_ui: Client, queued: None) -> None:
    body = viewer_ui.get(reverse("ui-workloads") + "?position_max=2&group=queue").content.decode()
    counts = dict(
        re.findall(r'data-group-toggle="([^"]+)">[^<]*<span class="group-count">\((\d+)\)', body)
    )
    assert counts == {"lq-cq-a": "2", "lq-other": "2", "lq-cq-b": "1"}


@pytest.mark.parametrize("value", ["x", "1.5", "0", "-2", "9" * 30])
def test_a_bad_position_is_named(viewer_ui: Client, queued: None, value: str) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + f"?position_max={value}")
    assert response.status_code == 200
    assert "position_max:" in errors(response)


# =========================================================================================
# The job list's workload count
# =========================================================================================


@pytest.fixture
def counted(
    make_queue: Callable[..., ClusterQueue],
    make_workload: Callable[..., Workload],
    reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    """Jobs with none, one and two workloads (a second one attached, as a scaled job's)."""
    make_queue("cq", {"cpu": "2"}, namespace="team-a")
    for name in ("none", "one", "two"):
        services.submit_job(job_manifest(name, "lq-cq", cpu="4"), namespace="team-a")
    reconcilers.step(t0)
    Workload.objects.filter(job__name="none").delete()
    extra = make_workload("two-slice", "lq-cq", {"cpu": "4"}, namespace="team-a")
    Workload.objects.filter(pk=extra.pk).update(job=Job.objects.get(name="two"))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("workloads_min=2", ["team-a/two"]),
        ("workloads_max=0", ["team-a/none"]),
        ("workloads_min=1&workloads_max=1", ["team-a/one"]),
        ("workloads_min=1", ["team-a/one", "team-a/two"]),
    ],
)
def test_the_job_list_filters_on_the_workload_count(
    viewer_ui: Client, counted: None, query: str, expected: list[str]
) -> None:
    response = viewer_ui.get(reverse("ui-jobs") + f"?{query}&sort=name&cols=name,workloads")
    assert response.status_code == 200
    assert re.findall(r'data-job="([^"]+)"', response.content.decode()) == expected
    assert 'name="workloads_min"' in response.content.decode()


def test_the_workload_count_filter_reaches_the_export_and_names_bad_values(
    viewer_ui: Client, counted: None
) -> None:
    response = viewer_ui.get(
        reverse("ui-jobs-export", args=["csv"]) + "?workloads_min=1&cols=name,workloads&sort=name"
    )
    table = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert table == [["name", "workloads"], ["one", "1"], ["two", "2"]]

    response = viewer_ui.get(reverse("ui-jobs") + "?workloads_min=many&workloads_max=" + "9" * 30)
    assert "workloads_min:" in errors(response)
    assert "workloads_max:" in errors(response)
