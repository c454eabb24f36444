"""The charts draw stored samples as steps on a real time axis, with a text alternative."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.models import ClusterQueue, QueueUsageSample
from tests.fixtures.processes import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

# What a chart on the page is drawn with: its datasets' line settings and points, and where
# its points land on the x axis.
CHART_STATE = """(id) => {
  const canvas = document.querySelector('#' + id + ' canvas');
  const chart = Chart.getChart(canvas);
  return {
    xType: chart.options.scales.x.type,
    label: canvas.getAttribute('aria-label'),
    datasets: chart.data.datasets.map((ds, i) => ({
      label: ds.label, stepped: ds.stepped, tension: ds.tension, spanGaps: ds.spanGaps,
      ys: ds.data.map((p) => p.y),
      pixels: chart.getDatasetMeta(i).data.map((el) => el.x),
    })),
  };
}"""


def axe_violations(page: Any, selector: str) -> list[str]:
    """axe-core's accessibility violations within ``selector``, as "rule: nodes" lines."""
    page.add_script_tag(path=str(ROOT / "node_modules" / "axe-core" / "axe.min.js"))
    violations = page.evaluate(
        "(s) => axe.run(s).then((r) => r.violations.map("
        "(v) => v.id + ': ' + v.nodes.map((n) => n.target.join(' ')).join(', ')))",
        selector,
    )
    return list(violations)


def store_samples(manager: Cluster) -> None:
    """Samples of cluster queue team-a (cohort org, flavor default): 60 s, then 90 s apart,
    then a gap of 10 minutes (no sampler)."""
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=20)
    offsets = (0, 60, 150, 750)
    for seconds, used, pending in zip(offsets, (3, 6, 5, 2), (1, 4, 2, 0), strict=True):
        QueueUsageSample.objects.create(
            cluster=manager,
            cluster_queue="team-a",
            sampled_at=start + timedelta(seconds=seconds),
            usage={"default/cpu": used},
            nominal={"default/cpu": 4},
            cohort="org",
            pending=pending,
            local_pending={"ns/lq-team-a": pending} if pending else {},
            reservations=2,
            wait_p50_seconds=12,
            wait_p90_seconds=40,
        )


def test_cluster_queue_charts_are_steps_on_a_time_axis(
    browser_page: Callable[..., Any],
    manager: Cluster,
    viewer: Any,
    settings: Any,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("team-a", {"cpu": "4"}, cohort="org")
    store_samples(manager)

    page = browser_page(viewer)
    page.goto("/c/manager/clusterqueues/team-a/?hours=1")
    for chart_id in ("cq-usage-chart", "cq-pending-chart", "cq-wait-chart"):
        page.wait_for_selector(f"#{chart_id}[data-chart-state=drawn] canvas")

    usage = page.evaluate(CHART_STATE, "cq-usage-chart")
    assert usage["xType"] == "linear"
    by_label = {ds["label"]: ds for ds in usage["datasets"]}
    assert set(by_label) == {"within nominal", "borrowed", "nominal quota"}
    for ds in usage["datasets"]:
        assert (ds["stepped"], ds["tension"], ds["spanGaps"]) == ("after", 0, False)
    # The gap is a null point that breaks the line.
    assert by_label["within nominal"]["ys"] == [3, 4, 4, None, 2]
    assert by_label["borrowed"]["ys"] == [0, 2, 1, None, 0]
    # Points sit at their real times: 90 s is one and a half times 60 s on the axis.
    x = by_label["within nominal"]["pixels"]
    assert (x[2] - x[1]) / (x[1] - x[0]) == pytest.approx(1.5, rel=0.02)
    assert "borrowed 0" in usage["label"]
    assert "nominal quota 4" in usage["label"]

    wait = page.evaluate(CHART_STATE, "cq-wait-chart")
    assert {ds["stepped"] for ds in wait["datasets"]} == {"before"}
    pending = page.evaluate(CHART_STATE, "cq-pending-chart")
    assert pending["datasets"][0]["ys"] == [1, 4, 2, None, 0]

    # The text alternative: the latest values in a table.
    table = page.locator("#cq-usage-chart details")
    table.locator("summary").click()
    rows = table.locator("tbody tr")
    assert rows.count() == 3
    assert rows.nth(0).inner_text().split("\t") == ["within nominal", "2"]
    assert axe_violations(page, "#cq-charts") == []
    wait_row = page.locator("#cq-wait-chart tbody tr").nth(0)
    assert [wait_row.locator(cell).text_content() for cell in ("th", "td")] == [
        "median wait",
        "12 s",
    ]

    # A window the server refuses is said, naming the parameter.
    page.goto("/c/manager/clusterqueues/team-a/?hours=99")
    page.wait_for_selector("#cq-usage-chart .chart-status >> text=Chart unavailable: hours:")


def test_cohort_and_flavor_pages_chart_their_queues_usage_as_steps(
    browser_page: Callable[..., Any],
    manager: Cluster,
    viewer: Any,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("team-a", {"cpu": "4"}, cohort="org")
    store_samples(manager)
    page = browser_page(viewer)

    page.goto("/c/manager/cohorts/org/?hours=1")
    for chart_id in ("cohort-usage-chart", "cohort-pending-chart"):
        page.wait_for_selector(f"#{chart_id}[data-chart-state=drawn] canvas")
    usage = {ds["label"]: ds for ds in page.evaluate(CHART_STATE, "cohort-usage-chart")["datasets"]}
    assert usage["within nominal"]["ys"] == [3, 4, 4, None, 2]
    assert {ds["stepped"] for ds in usage.values()} == {"after"}
    pending = page.evaluate(CHART_STATE, "cohort-pending-chart")
    assert pending["datasets"][0]["ys"] == [1, 4, 2, None, 0]
    assert axe_violations(page, "#cohort-charts") == []

    page.goto("/c/manager/resourceflavors/default/?hours=1")
    page.wait_for_selector("#rf-usage-chart[data-chart-state=drawn] canvas")
    usage = {ds["label"]: ds for ds in page.evaluate(CHART_STATE, "rf-usage-chart")["datasets"]}
    assert usage["borrowed"]["ys"] == [0, 2, 1, None, 0]


def test_overview_chart_is_stepped_and_says_when_there_are_no_samples(
    browser_page: Callable[..., Any],
    manager: Cluster,
    viewer: Any,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("team-a", {"cpu": "4"})
    page = browser_page(viewer)
    page.goto("/")
    page.wait_for_selector("#overview-history-chart[data-chart-state=drawn]")
    assert "No samples yet" in page.locator("#overview-history-chart").inner_text()

    now = timezone.now().replace(microsecond=0)
    for seconds, pending in ((-120, 2), (-60, 5)):
        QueueUsageSample.objects.create(
            cluster=manager,
            cluster_queue="team-a",
            sampled_at=now + timedelta(seconds=seconds),
            pending=pending,
            admitted=1,
        )
    page.goto("/?hours=1")
    page.wait_for_selector("#overview-history-chart[data-chart-state=drawn] canvas")
    state = page.evaluate(CHART_STATE, "overview-history-chart")
    assert state["xType"] == "linear"
    pending = next(ds for ds in state["datasets"] if ds["label"] == "manager: pending")
    assert (pending["stepped"], pending["tension"], pending["spanGaps"]) == ("after", 0, False)
    assert pending["ys"] == [2, 5]
    assert axe_violations(page, "#overview-history") == []
