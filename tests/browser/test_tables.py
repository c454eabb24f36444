"""The workload and job lists as tables, in a real browser: filters in the URL (and the back
button), group-by with counts and folding, the column chooser, saved views, bulk actions
behind the confirmation dialog with their per-row results, and the export links."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from multicluster.models import Cluster
from scheduling import services
from scheduling.models import ClusterQueue, Job, SavedView, Workload
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]


@pytest.fixture
def waiting(
    make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload]
) -> list[Workload]:
    """Workloads too big for their queues: they wait (pending) whatever the reconcilers do."""
    make_queue("cq-a", {"cpu": "1"}, namespace="team-a")
    make_queue("cq-b", {"cpu": "1"}, namespace="team-b")
    return [
        make_workload("train-1", "lq-cq-a", {"cpu": "4"}, priority=10, namespace="team-a"),
        make_workload("train-2", "lq-cq-a", {"cpu": "4"}, priority=20, namespace="team-a"),
        make_workload("train-3", "lq-cq-a", {"cpu": "4"}, priority=30, namespace="team-a"),
        make_workload("infer-1", "lq-cq-b", {"cpu": "4"}, namespace="team-b"),
    ]


def shown(page: Any, attribute: str = "data-workload") -> list[str]:
    return page.eval_on_selector_all(
        f"tbody tr[{attribute}]:not([hidden])",
        f"rows => rows.map(r => r.getAttribute('{attribute}'))",
    )


def test_filter_group_choose_columns_save_a_view_and_go_back(
    browser_page: Callable[..., Any],
    waiting: list[Workload],
    viewer: Any,
) -> None:
    page = browser_page(viewer)
    page.goto("/workloads/")
    assert sorted(shown(page)) == [
        "team-a/train-1",
        "team-a/train-2",
        "team-a/train-3",
        "team-b/infer-1",
    ]
    # Readers get no bulk controls.
    assert page.locator("#bulk-form").count() == 0
    assert page.locator("input.bulk-select").count() == 0

    page.fill("#id_namespace", "TEAM-A")
    page.check("#state-pending")
    page.click("#filter-apply")
    page.wait_for_url(re.compile(r"namespace=TEAM-A"))
    assert "state=Pending" in page.url
    assert sorted(shown(page)) == ["team-a/train-1", "team-a/train-2", "team-a/train-3"]

    # Group-by applies as soon as it is chosen; the header counts the group; it folds.
    page.select_option("#id_group", "namespace")
    page.wait_for_url(re.compile(r"group=namespace"))
    toggle = page.locator('[data-group-toggle="team-a"]')
    assert "(3)" in toggle.inner_text()
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "false"
    assert shown(page) == []
    toggle.click()
    assert len(shown(page)) == 3

    # The column chooser: the position column, by queue order (priority first).
    page.click("#col-chooser summary")
    page.check("#col-position")
    page.wait_for_url(re.compile(r"cols=[a-z_,]*position"))
    assert page.locator('th[data-sort-key="position"]').is_visible()
    position = page.locator('tr[data-workload="team-a/train-3"] td[data-position]')
    assert position.inner_text().strip() == "1 / 1"
    with_position = page.url

    # Back through the history: before the position column, before the grouping.
    page.go_back()
    page.wait_for_url(lambda url: "position" not in url)
    assert page.locator('th[data-sort-key="position"]').count() == 0
    page.go_back()
    page.wait_for_url(lambda url: "group=namespace" not in url)
    assert page.locator("[data-group-toggle]").count() == 0

    page.goto(with_position)

    # Saved: the view is its URL.
    page.click("#saved-views summary")  # closed while there is no saved view
    page.fill("#save-view-name", "team-a waiting")
    page.click("#save-view-submit")
    link = page.locator("#saved-view-list a", has_text="team-a waiting")
    link.wait_for()
    saved = SavedView.objects.get(user=viewer, name="team-a waiting")
    assert "position" in saved.query
    assert "group=namespace" in saved.query

    page.goto("/workloads/")
    page.click("#saved-view-list a")  # open: there is a saved view
    page.wait_for_url(re.compile(r"group=namespace"))
    assert page.url.split("?", 1)[1] == with_position.split("?", 1)[1]


def test_filter_by_reason_and_position_in_the_local_queue(
    browser_page: Callable[..., Any],
    waiting: list[Workload],
    manager: Cluster,
    viewer: Any,
) -> None:
    # The scheduler says why each waits (QuotaReserved=False).
    Reconcilers(manager).step(timezone.now())
    page = browser_page(viewer)
    page.goto("/workloads/?cols=name,position,reason")
    reason = page.locator('tr[data-workload="team-a/train-1"] td[data-reason]').inner_text()
    assert reason.strip() not in ("", "—")

    # The reason as shown, in another case; the first two of each local queue.
    page.fill("#id_reason", reason.strip().upper())
    page.fill("#id_position_max", "2")
    page.click("#filter-apply")
    page.wait_for_url(re.compile(r"position_max=2"))
    assert "reason=" in page.url
    assert sorted(shown(page)) == ["team-a/train-2", "team-a/train-3", "team-b/infer-1"]
    assert page.input_value("#id_position_max") == "2"

    # A position that is not a whole number is named above the table.
    page.goto("/workloads/?position_max=two")
    assert "position_max:" in page.inner_text("#filter-errors")


def test_bulk_deactivate_with_confirmation_and_export(
    browser_page: Callable[..., Any],
    waiting: list[Workload],
    operator: Any,
) -> None:
    page = browser_page(operator)  # granted team-a only
    page.goto("/workloads/?sort=name")
    page.check("#bulk-select-all")
    assert page.inner_text("#bulk-count") == "4"
    page.uncheck('input.bulk-select[aria-label="Select team-a/train-2"]')
    assert page.inner_text("#bulk-count") == "3"
    # A live refresh swaps the table in again (replaced or morphed): the selection stays.
    page.evaluate(
        """() => new Promise(resolve => {
            document.body.addEventListener("htmx:afterSettle", () => resolve(), {once: true});
            htmx.trigger(document.getElementById("wl-table"), "live-refresh");
        })"""
    )
    assert page.inner_text("#bulk-count") == "3"
    assert not page.is_checked('input.bulk-select[aria-label="Select team-a/train-2"]')
    assert page.is_checked('input.bulk-select[aria-label="Select team-a/train-1"]')
    page.select_option("#bulk-action", "deactivate")
    page.click("#bulk-apply")
    assert "Deactivate: 3 selected workloads?" in page.inner_text("#confirm-message")
    page.click("#confirm-yes")
    results = page.locator("#bulk-results")
    results.wait_for()
    text = results.inner_text()
    assert "team-a/train-1: deactivated" in text
    assert "team-a/train-3: deactivated" in text
    assert "team-b/infer-1: refused: metadata.namespace: you may not act in namespace" in text
    assert "train-2" not in text
    assert sorted(Workload.objects.filter(active=False).values_list("name", flat=True)) == [
        "train-1",
        "train-3",
    ]
    assert "sort=name" in page.url  # back on the same view

    # The export link carries the view; its CSV holds the visible columns of every row.
    page.goto("/workloads/?state=inactive&cols=name,state")
    href = page.get_attribute("#export-csv", "href")
    assert href == "/workloads/export.csv?state=inactive&cols=name,state"
    response = page.request.get(href)
    assert response.ok
    assert "attachment;" in response.headers["content-disposition"]
    table = list(csv.reader(io.StringIO(response.text())))
    assert table[0] == ["name", "state"]
    assert sorted(table[1:]) == [["train-1", "Pending"], ["train-3", "Pending"]]


def test_job_list_from_the_nav_filter_group_and_bulk_delete(
    browser_page: Callable[..., Any],
    make_queue: Callable[..., ClusterQueue],
    manager: Cluster,
    admin_user: Any,
) -> None:
    make_queue("cq", {"cpu": "1"}, namespace="team-a")
    for name in ("prep", "train", "eval"):
        services.submit_job(job_manifest(name, "lq-cq", cpu="4"), namespace="team-a")
    Reconcilers(manager).step(timezone.now())
    assert Workload.objects.filter(job__isnull=False).count() == 3

    page = browser_page(admin_user)
    page.goto("/workloads/")
    page.click("nav >> text=Jobs")
    page.wait_for_url("**/jobs/")
    assert sorted(shown(page, "data-job")) == ["team-a/eval", "team-a/prep", "team-a/train"]

    page.fill("#id_q", "RAI")
    page.click("#filter-apply")
    page.wait_for_url(re.compile(r"q=RAI"))
    assert shown(page, "data-job") == ["team-a/train"]

    # The workload count: each job has one.
    page.goto("/jobs/?cols=name,workloads")
    page.fill("#id_workloads_min", "1")
    page.fill("#id_workloads_max", "1")
    page.click("#filter-apply")
    page.wait_for_url(re.compile(r"workloads_max=1"))
    assert len(shown(page, "data-job")) == 3
    page.fill("#id_workloads_min", "2")
    page.fill("#id_workloads_max", "")
    page.click("#filter-apply")
    page.wait_for_url(re.compile(r"workloads_min=2"))
    assert shown(page, "data-job") == []

    page.goto("/jobs/?group=state&sort=name")
    assert "(3)" in page.inner_text('[data-group-toggle="Pending"]')
    page.check('input.bulk-select[aria-label="Select team-a/prep"]')
    page.select_option("#bulk-action", "delete")
    page.click("#bulk-apply")
    page.click("#confirm-yes")
    page.locator("#bulk-results").wait_for()
    assert "team-a/prep: deleted" in page.inner_text("#bulk-results")
    assert not Job.objects.filter(name="prep").exists()
    assert sorted(shown(page, "data-job")) == ["team-a/eval", "team-a/train"]
    assert "(2)" in page.inner_text('[data-group-toggle="Pending"]')
