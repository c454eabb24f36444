"""Live updates that do not fight the user: morphing refreshes, the pause toggle, the age of
the data, reconnection after a server restart, deleted objects; in a real browser."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from multicluster.models import Cluster
from scheduling import services
from scheduling.models import ClusterQueue, Workload
from tests.fixtures.browser import DaphneServer, run_elsewhere, server_env, wait_live
from tests.fixtures.processes import ROOT
from tests.fixtures.scheduling import job_manifest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

LIST_PARTIAL = "/workloads/partial/"


def submit(name: str) -> Workload:
    job = services.submit_job(job_manifest(name, "lq-cq", run_seconds=3600), namespace="team-a")
    return Workload.objects.get(job=job)


def submit_elsewhere(settings: Any, name: str) -> None:
    run_elsewhere(
        settings,
        (
            "from scheduling import services\n"
            "from tests.fixtures.scheduling import job_manifest\n"
            f"services.submit_job(job_manifest({name!r}, 'lq-cq', run_seconds=3600), "
            "namespace='team-a')\n"
        ),
    )


@pytest.fixture
def two_workloads(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> list[Workload]:
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    return [submit("alpha"), submit("beta")]


def open_live(browser_page: Callable[..., Any], user: Any, path: str) -> Any:
    """``path`` open for ``user``, its live-update socket subscribed."""
    page = browser_page(user)
    page.goto(path)
    wait_live(page)
    return page


def axe_violations(page: Any, selector: str) -> list[str]:
    """The accessibility rules (axe-core, from node_modules) that what ``selector`` matches
    breaks, with the nodes at fault."""
    page.add_script_tag(path=str(ROOT / "node_modules" / "axe-core" / "axe.min.js"))
    result = page.evaluate(
        "(selector) => axe.run({include: [...document.querySelectorAll(selector)]})"
        ".then((r) => r.violations.map((v) => v.id + ': ' + "
        "v.nodes.map((n) => n.target.join(' ')).join(', ')))",
        selector,
    )
    return list(result)


def requests_to(page: Any, path: str) -> list[str]:
    """The URLs of the requests ``page`` makes from now on whose path starts with ``path``."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(request.url) if path in request.url else None)
    return seen


def test_refresh_keeps_focus_and_selection_and_updates_the_row(
    browser_page: Callable[..., Any],
    two_workloads: list[Workload],
    viewer: Any,
    settings: Any,
) -> None:
    alpha, beta = two_workloads
    page = open_live(browser_page, viewer, "/workloads/")
    page.set_viewport_size({"width": 900, "height": 320})  # the table scrolls into view
    # Focus alpha's link, select beta's name; mark both nodes to know them again.
    page.focus(f"#wl-{alpha.pk} a")
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    scrolled = page.evaluate("window.scrollY")
    assert scrolled > 0
    page.evaluate(
        """(id) => {
      document.activeElement.__marked = true;
      const text = document.querySelector('#wl-' + id + ' a').firstChild;
      text.__marked = true;
      const range = document.createRange();
      range.selectNodeContents(text);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
    }""",
        beta.pk,
    )
    assert page.evaluate("getSelection().toString()") == beta.name

    run_elsewhere(
        settings,
        (
            "from scheduling import services\n"
            "from scheduling.models import Workload\n"
            f"services.update_workload(Workload.objects.get(pk={beta.pk}), "
            "{'spec': {'active': False}})\n"
        ),
    )
    page.wait_for_selector(f"#wl-{beta.pk}[data-active=false]")

    assert page.locator(f"#wl-{beta.pk} .tag-inactive").inner_text() == "inactive"
    assert page.evaluate("document.activeElement.__marked === true")
    assert page.evaluate("document.activeElement.textContent") == alpha.name
    assert page.evaluate("getSelection().toString()") == beta.name
    assert page.evaluate("getSelection().anchorNode.__marked === true")
    assert page.evaluate("window.scrollY") == scrolled


def test_pause_stops_refreshes_and_resume_catches_up_once(
    browser_page: Callable[..., Any],
    two_workloads: list[Workload],
    viewer: Any,
    settings: Any,
) -> None:
    page = open_live(browser_page, viewer, "/workloads/")
    toggle = page.locator("#live-pause")
    assert toggle.is_visible()
    assert toggle.get_attribute("aria-pressed") == "false"
    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "true"
    assert toggle.inner_text() == "Resume live updates"
    seen = requests_to(page, LIST_PARTIAL)

    submit_elsewhere(settings, "gamma")
    page.wait_for_timeout(2500)  # the change was announced: a live page would have refreshed
    assert seen == []
    assert page.locator("[data-workload*='gamma']").count() == 0

    toggle.click()
    assert toggle.get_attribute("aria-pressed") == "false"
    page.wait_for_selector("[data-workload*='gamma']")
    page.wait_for_timeout(1500)
    assert len(seen) == 1


def test_updated_ago_advances_and_resets_after_a_refresh(
    browser_page: Callable[..., Any],
    two_workloads: list[Workload],
    viewer: Any,
    settings: Any,
) -> None:
    page = open_live(browser_page, viewer, "/workloads/")
    updated = page.locator("#live-updated")
    page.wait_for_function("Number(document.getElementById('live-updated').dataset.seconds) >= 3")
    assert updated.inner_text().startswith("Updated ")
    submit_elsewhere(settings, "gamma")
    page.wait_for_selector("[data-workload*='gamma']")
    assert int(updated.get_attribute("data-seconds") or "99") <= 1


def test_page_reconnects_quickly_after_a_server_restart(
    browser_page: Callable[..., Any],
    daphne_server: DaphneServer,
    two_workloads: list[Workload],
    viewer: Any,
    settings: Any,
) -> None:
    page = open_live(browser_page, viewer, "/workloads/")
    daphne_server.stop()
    page.wait_for_function("document.body.dataset.liveState === 'reconnecting'")
    assert "reconnecting" in page.locator("#live-status").inner_text()
    page.wait_for_timeout(4000)  # down long enough for the back-off to reach its cap
    submit("gamma")  # changed while the page was away
    seen = requests_to(page, LIST_PARTIAL)

    daphne_server.start()
    back = time.monotonic()
    page.wait_for_function("document.body.dataset.liveState === 'live'", timeout=6000)
    assert time.monotonic() - back < 5
    status = page.locator("#live-status")
    assert status.get_attribute("role") == "status"
    assert "Reconnected" in status.inner_text()
    assert axe_violations(page, "#live-controls, #live-status") == []
    page.wait_for_selector("[data-workload*='gamma']")  # the catch-up refresh
    assert seen
    status.wait_for(state="hidden")  # the notice is brief


@pytest.mark.parametrize("kind", ["workload", "job"])
def test_deleted_object_says_so_and_stops_refreshing(
    browser_page: Callable[..., Any],
    two_workloads: list[Workload],
    viewer: Any,
    settings: Any,
    kind: str,
) -> None:
    alpha, _ = two_workloads
    assert alpha.job is not None
    page = open_live(browser_page, viewer, f"/c/manager/namespaces/team-a/workloads/{alpha.name}/")
    if kind == "job":
        page.click("#wl-job-link")
        page.wait_for_selector("#job-summary")
        wait_live(page)
    seen = requests_to(page, "/partial/")

    run_elsewhere(
        settings,
        (
            "from scheduling import services\n"
            "from scheduling.models import Job\n"
            f"services.delete_job(Job.objects.get(pk={alpha.job.pk}))\n"
        ),
    )
    notice = page.locator("#live-gone")
    notice.wait_for()
    assert notice.get_attribute("role") == "alert"
    assert notice.inner_text().startswith(f"This {kind} was deleted.")
    assert page.evaluate("document.body.classList.contains('live-gone')")
    assert page.evaluate("getComputedStyle(document.querySelector('main')).opacity") != "1"
    assert page.locator("#live-pause").is_hidden()
    assert axe_violations(page, "#live-gone") == []
    asked = len(seen)
    assert asked >= 1

    # More changes in the domain: the page asks for nothing more.
    submit_elsewhere(settings, "gamma")
    page.wait_for_timeout(2500)
    assert len(seen) == asked


def test_created_ago_counts_seconds(
    browser_page: Callable[..., Any],
    two_workloads: list[Workload],
    viewer: Any,
) -> None:
    alpha, _ = two_workloads
    page = browser_page(viewer)
    page.goto(f"/c/manager/namespaces/team-a/workloads/{alpha.name}/")
    created = page.locator("#wl-created[data-relative]")
    first = created.inner_text()
    assert "second" in first or first == "now"
    page.wait_for_function(
        "(before) => document.querySelector('#wl-created').textContent !== before",
        arg=first,
        timeout=4000,
    )
    assert "second" in created.inner_text()


def test_favicon(browser_page: Callable[..., Any], manager: Cluster, viewer: Any) -> None:
    page = browser_page(viewer)
    page.goto("/workloads/")
    icon = page.locator("link[rel=icon]").get_attribute("href")
    assert icon is not None
    assert icon.endswith(".svg")
    answer = page.request.get("/favicon.ico")
    assert answer.ok
    assert answer.headers["content-type"].startswith("image/svg+xml")
    assert answer.body().startswith(b"<svg")


@pytest.fixture
def changes_elsewhere(settings: Any, two_workloads: list[Workload]) -> Iterator[None]:
    """Another process toggling a workload's spec.active for as long as the test runs: a
    stream of live notifications and refreshes."""
    alpha, _ = two_workloads
    script = (
        "import django, itertools, time; django.setup()\n"
        "from scheduling import services\n"
        "from scheduling.models import Workload\n"
        "for i in itertools.count():\n"
        f"    services.update_workload(Workload.objects.get(pk={alpha.pk}), "
        "{'spec': {'active': i % 2 == 1}})\n"
        "    time.sleep(0.05)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=server_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        proc.kill()
        proc.wait()


def test_closing_pages_mid_update_logs_no_traceback(
    browser_page: Callable[..., Any],
    daphne_server: DaphneServer,
    changes_elsewhere: None,
    two_workloads: list[Workload],
    viewer: Any,
) -> None:
    detail = f"/c/manager/namespaces/team-a/workloads/{two_workloads[0].name}/"
    for mid in ("list", "detail", "message") * 3:
        page = open_live(browser_page, viewer, detail if mid == "detail" else "/workloads/")
        if mid != "message":  # a refresh was asked for: the server is answering it
            page.wait_for_event("request", lambda r: "partial/" in r.url)
        else:  # a notification just came: more may be on their way, coalesced
            page.evaluate("""() => new Promise((resolve) => {
              const socket = new WebSocket("ws://" + location.host + "/ws/live/");
              socket.onopen = () => socket.send(JSON.stringify(
                {subscribe: document.body.dataset.liveClusters.split(" ").map(Number)}));
              socket.onmessage = (e) => {
                if (JSON.parse(e.data).type === "changed") resolve();
              };
            })""")
        page.context.close()  # sockets and requests in flight are cut
    time.sleep(2)  # what was under way on the server finishes (or fails) meanwhile
    log = daphne_server.log_text()
    assert f'"GET {LIST_PARTIAL}' in log
    assert "Traceback" not in log, log[-4000:]
