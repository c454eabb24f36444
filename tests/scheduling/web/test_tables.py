"""The workload and job lists as tables (``scheduling.web.tables``): a filter on every column,
group-by with counts over the whole filtered set, the column chooser, saved views, bulk
actions with per-row results, and the export of the current view."""

from __future__ import annotations

import csv
import html
import io
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from multicluster.models import Cluster
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Job, SavedView, Workload
from scheduling.web import tables
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def rows(response: Any, attribute: str = "data-workload") -> list[str]:
    return re.findall(rf'{attribute}="([^"]+)"', response.content.decode())


@pytest.fixture
def mixed(
    make_queue: Callable[..., ClusterQueue],
    make_workload: Callable[..., Workload],
    reconcilers: Reconcilers,
    t0: datetime,
) -> dict[str, Workload]:
    """cq-a (team-a) admits alpha; beta and delta wait behind it, gamma (team-b) waits in
    cq-b, deactivated."""
    make_queue("cq-a", {"cpu": "2"}, namespace="team-a")
    make_queue("cq-b", {"cpu": "10"}, namespace="team-b")
    made = {
        "alpha": make_workload("alpha", "lq-cq-a", {"cpu": "2"}, priority=10, namespace="team-a")
    }
    reconcilers.step(t0)
    made["beta"] = make_workload("beta", "lq-cq-a", {"cpu": "2"}, priority=50, namespace="team-a")
    made["delta"] = make_workload("delta", "lq-cq-a", {"cpu": "2"}, priority=70, namespace="team-a")
    made["gamma"] = make_workload(
        "gamma", "lq-cq-b", {"cpu": "20"}, priority=100, namespace="team-b"
    )
    reconcilers.step(t0 + timedelta(seconds=1))
    services.update_workload(Workload.objects.get(name="gamma"), {"spec": {"active": False}})
    return {k: Workload.objects.get(pk=v.pk) for k, v in made.items()}


# =========================================================================================
# Filters
# =========================================================================================


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "state=Pending&state=Admitted",
            {"team-a/alpha", "team-a/beta", "team-a/delta", "team-b/gamma"},
        ),
        ("state=Admitted&state=inactive", {"team-a/alpha", "team-b/gamma"}),
        ("namespace=TEAM-B", {"team-b/gamma"}),
        ("queue=CQ-A", {"team-a/alpha", "team-a/beta", "team-a/delta"}),
        ("cluster_queue=q-b", {"team-b/gamma"}),
        ("cluster=MANAG", {"team-a/alpha", "team-a/beta", "team-a/delta", "team-b/gamma"}),
        ("cluster=elsewhere", set()),
        ("q=ELT", {"team-a/delta"}),
        ("priority_min=50&priority_max=70", {"team-a/beta", "team-a/delta"}),
    ],
)
def test_each_column_filters(
    viewer_ui: Client, mixed: dict[str, Workload], query: str, expected: set[str]
) -> None:
    response = viewer_ui.get(reverse("ui-workloads") + "?" + query)
    assert response.status_code == 200
    assert set(rows(response)) == expected


def test_the_created_range_filters_by_day(viewer_ui: Client, mixed: dict[str, Workload]) -> None:
    Workload.objects.filter(name="alpha").update(created_at=timezone.now() - timedelta(days=3))
    today = timezone.localdate()
    response = viewer_ui.get(reverse("ui-workloads") + f"?created_from={today.isoformat()}")
    assert set(rows(response)) == {"team-a/beta", "team-a/delta", "team-b/gamma"}
    before = (today - timedelta(days=2)).isoformat()
    response = viewer_ui.get(reverse("ui-workloads") + f"?created_to={before}")
    assert rows(response) == ["team-a/alpha"]


def test_bad_filter_values_are_named(viewer_ui: Client, mixed: dict[str, Workload]) -> None:
    response = viewer_ui.get(
        reverse("ui-workloads") + "?state=Bogus&priority_min=x&created_from=soon&cols=name,colour"
        "&group=mood"
    )
    assert response.status_code == 200
    errors = re.search(
        r'<ul class="error" id="filter-errors">(.*?)</ul>', response.content.decode(), re.S
    )
    assert errors is not None
    for field in (
        "state:",
        "priority_min:",
        "created_from:",
        "cols: no such column: colour",
        "group: cannot group by",
    ):
        assert field in errors.group(1), field


# =========================================================================================
# Group-by and columns
# =========================================================================================


def test_group_counts_cover_the_whole_filtered_set_not_the_page(
    viewer_ui: Client,
    make_queue: Callable[..., ClusterQueue],
    manager: Cluster,
    django_assert_max_num_queries: Any,
) -> None:
    cq = make_queue("cq", {"cpu": "1"})
    lq = cq.local_queues.get()
    Workload.objects.bulk_create(
        [
            Workload(
                cluster=manager,
                namespace="ns-a",
                name=f"a-{i:03d}",
                queue_name="lq-cq",
                local_queue=lq,
                pod_sets=[],
            )
            for i in range(70)
        ]
        + [
            Workload(
                cluster=manager,
                namespace="ns-b",
                name=f"b-{i:03d}",
                queue_name="lq-cq",
                local_queue=lq,
                pod_sets=[],
            )
            for i in range(4)
        ]
    )
    url = reverse("ui-workloads-partial") + "?group=namespace&sort=name"
    viewer_ui.get(url)
    with django_assert_max_num_queries(7):
        response = viewer_ui.get(url)
    body = response.content.decode()
    assert len(rows(response)) == 50
    assert re.search(
        r'data-group-toggle="ns-a">Namespace: ns-a <span class="group-count">'
        r"\(70\)</span>",
        body,
    )
    assert 'data-group-toggle="ns-b"' not in body  # on the second page
    second = viewer_ui.get(url + "&page=2").content.decode()
    assert re.search(r'data-group-toggle="ns-a">.*\(70\)', second)
    assert re.search(r'data-group-toggle="ns-b">.*\(4\)', second)
    assert 'data-group="ns-b"' in second


def test_group_by_cluster_queue_and_state(
    viewer_ui: Client, mixed: dict[str, Workload], make_workload: Callable[..., Workload]
) -> None:
    make_workload("orphan", "lq-missing", {"cpu": "1"}, namespace="team-a")  # no cluster queue
    body = viewer_ui.get(reverse("ui-workloads") + "?group=cluster_queue").content.decode()
    assert re.search(
        r'data-group-toggle="—">Cluster queue: — <span class="group-count">'
        r"\(1\)",
        body,
    )
    assert re.search(
        r'data-group-toggle="cq-a">Cluster queue: cq-a <span class="group-count">'
        r"\(3\)",
        body,
    )
    assert re.search(r'data-group-toggle="cq-b">.*\(1\)', body)
    body = viewer_ui.get(reverse("ui-workloads") + "?group=state").content.decode()
    assert re.search(r'data-group-toggle="Pending">.*\(4\)', body)


def test_the_column_chooser_shows_the_columns_named(
    viewer_ui: Client, mixed: dict[str, Workload]
) -> None:
    default = viewer_ui.get(reverse("ui-workloads")).content.decode()
    assert 'data-sort-key="position"' not in default
    assert 'data-sort-key="namespace"' in default

    response = viewer_ui.get(reverse("ui-workloads") + "?cols=name,position,reason")
    keys = re.findall(r'data-sort-key="([^"]+)"', response.content.decode())
    assert keys == ["name", "position", "reason"]


def test_the_chooser_checkboxes_lead_to_one_comma_separated_parameter(
    viewer_ui: Client, mixed: dict[str, Workload]
) -> None:
    response = viewer_ui.get(
        reverse("ui-workloads") + "?q=&cols=name&cols=state&state=Pending&group=&namespace="
    )
    assert response.status_code == 302
    assert response["Location"] == "/workloads/?cols=name,state&state=Pending"
    assert viewer_ui.get(response["Location"]).status_code == 200
    assert viewer_ui.get(reverse("ui-workloads") + "?q=&group=")["Location"] == "/workloads/"


def test_positions_and_reasons_of_pending_rows(
    viewer_ui: Client,
    mixed: dict[str, Workload],
    make_queue: Callable[..., ClusterQueue],
) -> None:
    # A second local queue of cq-a: positions in the cluster queue count both queues.
    from scheduling.models import LocalQueue

    cq_a = ClusterQueue.objects.get(name="cq-a")
    LocalQueue.objects.create(
        cluster=cq_a.cluster, namespace="team-a", name="lq-other", cluster_queue=cq_a
    )
    other = services.create_workload(
        {
            "queueName": "lq-other",
            "priority": 60,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": "1"}},
                                }
                            ]
                        }
                    },
                }
            ],
        },
        namespace="team-a",
        name="epsilon",
        cluster=cq_a.cluster,
    )
    assert other.phase == WorkloadPhase.PENDING

    response = viewer_ui.get(reverse("ui-workloads") + "?cols=name,position,reason&sort=name")
    cells = dict(
        re.findall(
            r'data-workload="([^"]+)".*?<td data-position>(.*?)</td>',
            response.content.decode(),
            re.S,
        )
    )
    plain = {k: re.sub(r"<[^>]+>", "", v) for k, v in cells.items()}
    # Queue order: priority first. delta (70), epsilon (60, its own queue), beta (50).
    assert plain["team-a/delta"] == "1 / 1"
    assert plain["team-a/epsilon"] == "1 / 2"
    assert plain["team-a/beta"] == "2 / 3"
    assert plain["team-a/alpha"] == "—"  # admitted
    assert plain["team-b/gamma"] == "—"  # inactive: not queued

    reasons = dict(
        re.findall(
            r'data-workload="([^"]+)".*?<td class="reason-cell" '
            r"data-reason>(.*?)</td>",
            response.content.decode(),
            re.S,
        )
    )
    beta = Workload.objects.get(name="beta")
    reserved = next(c for c in beta.conditions if c["type"] == "QuotaReserved")
    assert reserved["status"] == "False"
    assert html.unescape(reasons["team-a/beta"]) == f"{reserved['reason']}: {reserved['message']}"
    assert reasons["team-a/alpha"] == "—"


# =========================================================================================
# Export
# =========================================================================================


def test_export_writes_every_filtered_row_with_the_visible_columns(
    viewer_ui: Client,
    make_queue: Callable[..., ClusterQueue],
    manager: Cluster,
) -> None:
    cq = make_queue("cq", {"cpu": "1"})
    Workload.objects.bulk_create(
        [
            Workload(
                cluster=manager,
                namespace="ns",
                name=f"wl-{i:03d}",
                queue_name="lq-cq",
                local_queue=cq.local_queues.get(),
                pod_sets=[],
                priority=i,
            )
            for i in range(60)
        ]
    )
    response = viewer_ui.get(
        reverse("ui-workloads-export", args=["csv"])
        + "?cols=name,priority,state&priority_min=5&sort=name"
    )
    assert response.status_code == 200
    assert response.streaming
    assert re.match(
        r'attachment; filename="workloads-\d{8}-\d{6}\.csv"', response["Content-Disposition"]
    )
    table = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert table[0] == ["name", "priority", "state"]
    assert len(table) == 1 + 55  # more than a page
    assert table[1] == ["wl-005", "5", "Pending"]

    response = viewer_ui.get(
        reverse("ui-workloads-export", args=["json"]) + "?cols=name,namespace&q=wl-01"
    )
    data = json.loads(b"".join(response.streaming_content))
    assert data["columns"] == ["name", "namespace"]
    assert {item["name"] for item in data["items"]} == {f"wl-{i:03d}" for i in range(10, 20)}
    assert data["truncated"] is False


def test_export_says_when_it_was_cut(
    viewer_ui: Client, mixed: dict[str, Workload], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "EXPORT_LIMIT", 2)
    response = viewer_ui.get(reverse("ui-workloads-export", args=["csv"]) + "?cols=name")
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert len(lines) == 4
    assert lines[-1].startswith("# cut at 2 rows")
    response = viewer_ui.get(reverse("ui-workloads-export", args=["json"]))
    data = json.loads(b"".join(response.streaming_content))
    assert len(data["items"]) == 2
    assert data["truncated"] is True
    assert viewer_ui.get(reverse("ui-workloads-export", args=["xlsx"])).status_code == 404


# =========================================================================================
# Bulk actions
# =========================================================================================


def _results(client: Client, page: str) -> dict[str, str]:
    body = client.get(reverse(page)).content.decode()
    found = re.findall(r'data-result="([^"]+)"><td>[^<]*</td><td>[^:]*: ([^<]*)</td>', body)
    return {label: html.unescape(text) for label, text in found}


def test_bulk_acts_row_by_row_and_reports_each(operator: User, mixed: dict[str, Workload]) -> None:
    client = ui_client_for(operator)  # granted team-a only
    ids = [mixed["beta"].pk, mixed["delta"].pk, mixed["gamma"].pk]
    Workload.objects.filter(pk=mixed["delta"].pk).update(active=False)
    response = client.post(
        reverse("ui-workloads-bulk"),
        {"action": "deactivate", "ids": ids, "next": "/workloads/?state=Pending"},
    )
    assert response.status_code == 302
    assert response["Location"] == "/workloads/?state=Pending"

    results = _results(client, "ui-workloads")
    assert results["team-a/beta"] == "deactivated"
    assert results["team-a/delta"].startswith("refused: spec.active: the workload is already")
    assert "may not act in namespace 'team-b'" in results["team-b/gamma"]
    assert Workload.objects.get(pk=mixed["beta"].pk).active is False
    assert Workload.objects.get(pk=mixed["gamma"].pk).active is False  # untouched (was so)
    # Shown once.
    assert _results(client, "ui-workloads") == {}


def test_bulk_evict_refuses_what_holds_no_quota(
    admin_ui: Client, mixed: dict[str, Workload]
) -> None:
    admin_ui.post(
        reverse("ui-workloads-bulk"),
        {"action": "evict", "ids": [mixed["alpha"].pk, mixed["beta"].pk]},
    )
    results = _results(admin_ui, "ui-workloads")
    assert results["team-a/alpha"] == "evicted"
    assert results["team-a/beta"].startswith("refused: status.admission")


def test_bulk_refuses_readers_and_oversized_requests(
    viewer_ui: Client, admin_ui: Client, mixed: dict[str, Workload]
) -> None:
    assert (
        viewer_ui.post(
            reverse("ui-workloads-bulk"), {"action": "deactivate", "ids": [mixed["beta"].pk]}
        ).status_code
        == 403
    )
    assert viewer_ui.post(reverse("ui-jobs-bulk"), {"action": "delete"}).status_code == 403
    assert 'id="bulk-form"' not in viewer_ui.get(reverse("ui-workloads")).content.decode()
    assert 'class="bulk-select"' not in viewer_ui.get(reverse("ui-workloads")).content.decode()

    too_many = [mixed["beta"].pk] * (tables.BULK_LIMIT + 1)
    admin_ui.post(reverse("ui-workloads-bulk"), {"action": "deactivate", "ids": too_many})
    results = _results(admin_ui, "ui-workloads")
    assert results == {
        "ids": f"refused: ids: {tables.BULK_LIMIT + 1} rows selected; one request acts on at "
        f"most {tables.BULK_LIMIT}; narrow the selection"
    }
    assert Workload.objects.get(pk=mixed["beta"].pk).active is True


# =========================================================================================
# Saved views
# =========================================================================================


def test_saved_views_belong_to_their_user(
    viewer: User, make_user: Callable[..., User], mixed: dict[str, Workload]
) -> None:
    mine = ui_client_for(viewer)
    other = ui_client_for(make_user("olga", "viewer"))
    response = mine.post(
        reverse("ui-saved-view-save"),
        {
            "page": "workloads",
            "name": "Pending by ns",
            "query": "state=Pending&group=namespace&page=3",
        },
    )
    assert response.status_code == 302
    view = SavedView.objects.get(user=viewer)
    assert view.query == "state=Pending&group=namespace"  # the page is not part of a view
    assert (
        'href="/workloads/?state=Pending&amp;group=namespace">Pending by ns</a>'
        in mine.get(reverse("ui-workloads")).content.decode()
    )
    assert "Pending by ns" not in other.get(reverse("ui-workloads")).content.decode()
    assert "Pending by ns" not in mine.get(reverse("ui-jobs")).content.decode()

    assert other.post(reverse("ui-saved-view-delete", args=[view.pk])).status_code == 404
    mine.post(
        reverse("ui-saved-view-save"),
        {"page": "workloads", "name": "Pending by ns", "query": "state=Admitted"},
    )
    assert SavedView.objects.get(user=viewer).query == "state=Admitted"  # replaced

    mine.post(reverse("ui-saved-view-save"), {"page": "workloads", "name": " ", "query": ""})
    assert SavedView.objects.filter(user=viewer).count() == 1
    assert mine.post(reverse("ui-saved-view-delete", args=[view.pk])).status_code == 302
    assert not SavedView.objects.filter(user=viewer).exists()


# =========================================================================================
# The job list
# =========================================================================================


@pytest.fixture
def jobs(
    make_queue: Callable[..., ClusterQueue], reconcilers: Reconcilers, t0: datetime
) -> dict[str, Job]:
    make_queue("cq", {"cpu": "2"}, namespace="team-a")
    make_queue("cq-b", {"cpu": "2"}, namespace="team-b")
    made = {
        "train": services.submit_job(job_manifest("train", "lq-cq", cpu="2"), namespace="team-a"),
        "eval": services.submit_job(job_manifest("eval", "lq-cq", cpu="2"), namespace="team-a"),
        "other": services.submit_job(job_manifest("other", "lq-cq-b"), namespace="team-b"),
    }
    reconcilers.step(t0)
    return made


def test_the_job_list_filters_groups_and_exports(viewer_ui: Client, jobs: dict[str, Job]) -> None:
    response = viewer_ui.get(reverse("ui-jobs") + "?sort=name")
    assert response.status_code == 200
    assert rows(response, "data-job") == ["team-a/eval", "team-b/other", "team-a/train"]
    phases = dict(zip(rows(response, "data-job"), rows(response, "data-phase"), strict=True))
    assert phases["team-b/other"] == "Admitted"
    pending = next(j for j, p in phases.items() if p == "Pending")

    response = viewer_ui.get(reverse("ui-jobs") + "?state=Pending")
    assert rows(response, "data-job") == [pending]
    response = viewer_ui.get(reverse("ui-jobs") + "?cluster_queue=CQ-B&kind=job")
    assert rows(response, "data-job") == ["team-b/other"]

    body = viewer_ui.get(reverse("ui-jobs") + "?group=state").content.decode()
    assert re.search(
        r'data-group-toggle="Admitted">State: Admitted <span class="group-count">'
        r"\(2\)",
        body,
    )

    response = viewer_ui.get(
        reverse("ui-jobs-export", args=["csv"]) + "?cols=name,kind,state,workloads&sort=name"
    )
    table = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert table[0] == ["name", "kind", "state", "workloads"]
    assert table[1][:2] == ["eval", "Job"]
    assert table[1][3] == "1"


def test_job_bulk_actions(operator: User, jobs: dict[str, Job]) -> None:
    client = ui_client_for(operator)  # granted team-a only
    client.post(
        reverse("ui-jobs-bulk"),
        {"action": "deactivate", "ids": [jobs["train"].pk, jobs["other"].pk]},
    )
    results = _results(client, "ui-jobs")
    assert results["team-a/train"] == "deactivated 1 workload"
    assert "may not act in namespace 'team-b'" in results["team-b/other"]
    assert not Workload.objects.get(job=jobs["train"]).active

    client.post(reverse("ui-jobs-bulk"), {"action": "delete", "ids": [jobs["eval"].pk]})
    assert _results(client, "ui-jobs") == {"team-a/eval": "deleted"}
    assert not Job.objects.filter(pk=jobs["eval"].pk).exists()


def test_the_nav_links_the_job_list(viewer_ui: Client, manager: Cluster) -> None:
    assert 'href="/jobs/"' in viewer_ui.get(reverse("ui-workloads")).content.decode()
