"""The workload page and the job page in a real browser: why a workload waits, which actions
a state offers, the slice a scale-up leads to, and a job's conditions."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from multicluster.models import Cluster
from scheduling import services
from scheduling.models import ClusterQueue, Job, Workload
from scheduling.queue import visibility
from scheduling.workload import conditions as cond
from tests.browser.test_scale import RECONCILE_ELSEWHERE, job_url
from tests.fixtures.browser import run_elsewhere
from tests.fixtures.scheduling import job_manifest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

# The cluster and the lifecycle stepped through two simulated minutes: a job of a few
# seconds runs and completes.
FINISH_ELSEWHERE = (
    "from datetime import timedelta\n"
    "from django.utils import timezone\n"
    "from multicluster.simulated.runner import sync_cluster\n"
    "from scheduling.scheduler.admission import run_admission_cycle\n"
    "from scheduling.workload.lifecycle import run_lifecycle\n"
    "start = timezone.now()\n"
    "for offset in (0, 1, 2, 30, 120, 121):\n"
    "    now = start + timedelta(seconds=offset)\n"
    "    run_lifecycle({id}, now=now)\n"
    "    sync_cluster({id}, now=now)\n"
    "    run_admission_cycle({id}, now=now)\n"
)


def workload_url(wl: Workload) -> str:
    return f"/c/{wl.cluster.name}/namespaces/{wl.namespace}/workloads/{wl.name}/"


def run_one_job(
    manager: Cluster,
    make_queue: Callable[..., ClusterQueue],
    settings: Any,
    *,
    run_seconds: int,
    steps: str,
) -> Workload:
    """A Job of one pod in a queue of 4 CPUs, reconciled in another process by ``steps``;
    its workload."""
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    job = services.submit_job(
        job_manifest("train", "lq-cq", run_seconds=run_seconds), namespace="team-a"
    )
    run_elsewhere(settings, steps.format(id=manager.pk))
    return Workload.objects.select_related("cluster", "job").get(job=job)


AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"


def axe_violations(page: Any, selector: str) -> list[str]:
    """axe-core's WCAG A/AA violations within ``selector`` (evaluated through the driver, so
    the page's CSP, which refuses inline scripts, is unchanged)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    found = page.evaluate(
        """s => axe.run(document.querySelector(s),
        {runOnly: ["wcag2a", "wcag2aa"]}).then(r => ({
            passes: r.passes.length,
            violations: r.violations.map(v => v.id + ": " + v.help)}))""",
        selector,
    )
    assert found["passes"] > 0  # the rules did run on the region
    return [str(v) for v in found["violations"]]


def controls(page: Any) -> set[str]:
    return {
        name
        for name in ("deactivate", "activate", "evict", "delete-job", "scale")
        if page.locator(f"#control-{name}").count()
    }


# =========================================================================================
# Why pending
# =========================================================================================


def test_a_pending_workload_says_where_it_stands_and_why_with_links_to_its_queues(
    browser_page: Callable[..., Any],
    manager: Cluster,
    viewer: Any,
    make_queue: Callable[..., ClusterQueue],
    settings: Any,
) -> None:
    cq = make_queue("cq", {"cpu": "1"}, namespace="team-a")
    services.submit_job(job_manifest("hog", "lq-cq", run_seconds=3600), namespace="team-a")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    waiting = [
        services.submit_job(job_manifest(f"wait-{n}", "lq-cq"), namespace="team-a")
        for n in (1, 2, 3)
    ]
    # The scheduler tries the head against the full queue and writes why it waits; the
    # others wait their turn behind it.
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    head, _, third = (Workload.objects.select_related("cluster").get(job=job) for job in waiting)
    assert third.phase == "Pending"
    reserved = cond.find(head.conditions, "QuotaReserved")
    assert reserved is not None
    assert reserved["status"] == "False"

    page = browser_page(viewer)
    page.goto(workload_url(head))
    reason = page.locator("#wl-pending-reason").inner_text()
    assert reserved["reason"] in reason
    assert reserved["message"] in reason
    assert page.locator("#wl-position-cq").inner_text() == "1st of 3 in cluster queue cq"

    page.goto(workload_url(third))
    why = page.locator("#wl-why-pending")
    assert why.get_attribute("data-position-lq") == "3"
    assert why.get_attribute("data-position-cq") == "3"
    assert page.locator("#wl-position-lq").inner_text() == "3rd of 3 in local queue lq-cq"
    assert page.locator("#wl-position-cq").inner_text() == "3rd of 3 in cluster queue cq"
    # Its shape waits behind the head's (Kueue parks one shape until quota frees up): the
    # page says what the visibility API says.
    listed = next(
        i for i in visibility.pending_in_cluster_queue(cq) if i["metadata"]["name"] == third.name
    )
    assert why.get_attribute("data-reason") == listed["reason"]
    assert page.locator("#wl-pending-reason").inner_text() == (
        f"{listed['reason']} {listed['message']}"
    )
    assert "insufficient unused quota for cpu" in listed["message"]
    waited = page.locator("#wl-waiting time")
    assert waited.get_attribute("datetime")
    assert re.search(r"ago|now", waited.inner_text())  # rendered relative by time.js
    assert axe_violations(page, "#wl-why-pending") == []

    page.click("#wl-link-lq")
    page.wait_for_url("**/namespaces/team-a/localqueues/lq-cq/")
    # The queue page counts from one as well; its data keeps the API's 0-based position.
    row = page.locator(f'tr[data-workload="team-a/{third.name}"]')
    assert row.get_attribute("data-position-lq") == "2"
    assert row.locator("td").nth(1).inner_text() == "3"
    page.go_back()
    page.click("#wl-link-cq")
    page.wait_for_url("**/clusterqueues/cq/")
    row = page.locator(f'tr[data-workload="team-a/{third.name}"]')
    assert row.locator("td").first.inner_text() == "3"


# =========================================================================================
# Only the actions the state allows
# =========================================================================================


def test_a_finished_workload_and_its_job_offer_no_action_but_deleting_the_job(
    browser_page: Callable[..., Any],
    manager: Cluster,
    operator: Any,
    make_queue: Callable[..., ClusterQueue],
    settings: Any,
) -> None:
    manager.simulation = {"startDelaySeconds": 0}
    manager.save()
    wl = run_one_job(manager, make_queue, settings, run_seconds=5, steps=FINISH_ELSEWHERE)
    job = wl.job
    assert wl.phase == "Finished"

    page = browser_page(operator)
    page.goto(workload_url(wl))
    page.wait_for_selector("#wl-controls")
    assert controls(page) == {"delete-job"}
    assert "has finished" in page.locator("#controls-finished").inner_text()

    # The job page: no scale control for a finished job, and the Job's conditions as a table
    # of type, status, reason, message and last transition.
    page.goto(job_url(job))
    assert controls(page) == set()
    assert "finished" in page.locator("#job-controls").inner_text()
    complete = page.locator('#job-conditions tr[data-condition="Complete"]')
    cells = complete.locator("td")
    assert [cells.nth(i).inner_text() for i in range(2)] == ["Complete", "True"]
    condition = next(
        c for c in Job.objects.get(pk=job.pk).status["conditions"] if c["type"] == "Complete"
    )
    assert cells.nth(2).inner_text() == (condition.get("reason") or "—")
    assert cells.nth(3).inner_text() == (condition.get("message") or "—")
    assert cells.nth(4).locator("time[data-relative]").get_attribute("datetime")
    headers = page.locator("#job-conditions th").all_inner_texts()
    assert headers == ["Type", "Status", "Reason", "Message", "Last transition"]
    assert axe_violations(page, "#job-summary") == []
    # No Python text of the conditions anywhere on the page.
    assert "{'type'" not in page.content()


def test_a_deactivated_workload_offers_activate_and_a_reader_no_action(
    browser_page: Callable[..., Any],
    manager: Cluster,
    operator: Any,
    viewer: Any,
    make_queue: Callable[..., ClusterQueue],
    settings: Any,
) -> None:
    wl = run_one_job(manager, make_queue, settings, run_seconds=3600, steps=RECONCILE_ELSEWHERE)
    job = wl.job
    assert wl.phase == "Admitted"

    page = browser_page(operator)
    page.goto(workload_url(wl))
    assert controls(page) == {"deactivate", "evict", "delete-job", "scale"}
    page.click("#control-deactivate")
    page.click("#confirm-yes")
    page.wait_for_selector("#control-activate")
    assert controls(page) == {"activate", "delete-job", "scale"}

    reader = browser_page(viewer)
    reader.goto(workload_url(wl))
    reader.wait_for_selector("#controls-readonly")
    assert controls(reader) == set()
    reader.goto(job_url(job))
    reader.wait_for_selector("#controls-readonly")
    assert controls(reader) == set()
