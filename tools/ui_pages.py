"""The pages of the browser UI, in one list: the accessibility tests visit each of them
(tests/browser/test_accessibility.py) and the screenshot tool photographs each of them
(tools/screenshots.py).

A page is reached from a fixed address, or by following links from one: detail pages
(a workload, a cluster queue) have names that depend on the data, so the list says which
link leads to them instead of naming an object. Add a page here and both the tests and
the screenshots cover it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UIPage:
    """``name`` names the page in test ids and screenshot files. ``path`` is opened first;
    then, in turn, the first link in the main content matching each selector of ``follow``.
    ``signed_in`` False opens it with no session (the sign-in page)."""

    name: str
    path: str
    follow: tuple[str, ...] = ()
    signed_in: bool = True
    status: int = 200


PAGES: tuple[UIPage, ...] = (
    UIPage("login", "/login/", signed_in=False),
    UIPage("overview", "/"),
    UIPage("workloads", "/workloads/"),
    UIPage("workload", "/workloads/", follow=("a[href*='/workloads/job-']",)),
    UIPage("job", "/workloads/", follow=("a[href*='/workloads/job-']", "a[href*='/jobs/']")),
    UIPage("jobs", "/jobs/"),
    UIPage("submit-job", "/jobs/new/"),
    UIPage("cluster-queue", "/", follow=("a[href*='/clusterqueues/']",)),
    UIPage("local-queue", "/", follow=("a[href*='/clusterqueues/']", "a[href*='/localqueues/']")),
    UIPage("cohort", "/", follow=("a[href*='/cohorts/']",)),
    UIPage("resource-flavor", "/", follow=("a[href*='/resourceflavors/']",)),
    UIPage("yaml", "/", follow=("a[href*='/clusterqueues/']", "a[href$='/yaml/']")),
    UIPage("clusters", "/clusters/"),
    UIPage("cluster", "/clusters/", follow=("a[href^='/clusters/']",)),
    UIPage("not-found", "/no-such-page/", status=404),
)


def open_ui_page(page: Any, ui_page: UIPage) -> None:
    """Open ``ui_page`` in a Playwright ``page`` (signed in already if it needs to be), and
    wait until it has loaded. Raises AssertionError when a link to follow is missing or the
    page answers with an unexpected status."""
    response = page.goto(ui_page.path)
    for selector in ui_page.follow:
        link = page.locator(f"main {selector}").first
        href = link.get_attribute("href", timeout=5000) if link.count() else None
        if not href:
            raise AssertionError(f"{ui_page.name}: no link {selector!r} on {page.url}")
        response = page.goto(href)
    status = response.status if response is not None else None
    if status != ui_page.status:
        raise AssertionError(
            f"{ui_page.name}: {page.url} answered {status}, expected {ui_page.status}"
        )
    page.wait_for_load_state("networkidle")
