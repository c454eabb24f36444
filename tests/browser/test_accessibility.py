"""Every page of the UI, in both colour themes, on a desktop and on a phone screen.

- axe-core finds no serious or critical violation (contrast, names, labels, landmarks...);
- on a phone the page never scrolls sideways, and the menu button opens the navigation
  with every link inside the screen;
- on a desktop the overview's cluster queue cards show their labels whole.

The pages are ``tools.ui_pages.PAGES``, the one list the screenshot tool uses too. The
server runs with DEBUG off, as deployed, so the not-found page is the application's own.
The data is the demo's (``manage.py demo``), a few scheduling passes in: admitted and
pending workloads, borrowed quota, pods, workers with dispatched copies.
"""

from __future__ import annotations

import io
import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.utils import timezone

from multicluster import dispatch
from multicluster.models import Cluster
from multicluster.simulated.runner import sync_cluster
from scheduling.models import Workload
from scheduling.scheduler.admission import run_admission_cycle
from scheduling.workload.lifecycle import run_lifecycle
from tests.fixtures.processes import ROOT
from tools.ui_pages import PAGES, UIPage, open_ui_page

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
THEMES = ("light", "dark")
BLOCKING_IMPACTS = ("serious", "critical")


@pytest.fixture
def daphne_env() -> dict[str, str]:
    """The server as deployed: DEBUG off (the application's error pages), its own keys."""
    return {
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "KUEUEWEB_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
    }


@pytest.fixture
def demo(manager: Cluster) -> Cluster:
    call_command("demo", stdout=io.StringIO(), stderr=io.StringIO())
    for _ in range(2):
        now = timezone.now()
        for cluster in Cluster.objects.all():
            run_lifecycle(cluster.pk, now=now)
            sync_cluster(cluster.pk, now=now)
            run_admission_cycle(cluster.pk, now=now)
        dispatch.sync_dispatch(manager.pk, now=now)
    assert Workload.objects.filter(cluster=manager, phase="Admitted").exists()
    assert Workload.objects.filter(cluster=manager, phase="Pending").exists()
    return manager


def pages_for(browser_page: Callable[..., Any], user: Any, **context: Any) -> dict[bool, Any]:
    """A signed-in page and an anonymous one, in browser contexts with ``context``."""
    return {True: browser_page(user, **context), False: browser_page(None, **context)}


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on the page, each as id, impact, help and target nodes.

    Injected through the DevTools protocol, never served by the application."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    return page.evaluate("""async () => {
        const result = await axe.run(document, {resultTypes: ['violations']});
        return result.violations.map(v => ({
            id: v.id, impact: v.impact, help: v.help,
            nodes: v.nodes.map(n => n.target.join(' ')),
        }));
    }""")


def blocking(violations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [v for v in violations if v["impact"] in BLOCKING_IMPACTS]


@pytest.mark.parametrize("theme", THEMES)
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440", "390"])
def test_every_page_has_no_serious_axe_violation(
    browser_page: Callable[..., Any],
    demo: Cluster,
    admin_user: Any,
    theme: str,
    viewport: dict[str, int],
) -> None:
    pages = pages_for(browser_page, admin_user, color_scheme=theme, viewport=viewport)
    found: dict[str, list[dict[str, Any]]] = {}
    for ui_page in PAGES:
        page = pages[ui_page.signed_in]
        open_ui_page(page, ui_page)
        assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") is (
            theme == "dark"
        )
        violations = blocking(axe_violations(page))
        if violations:
            found[f"{ui_page.name} ({page.url})"] = violations
    assert not found, "axe-core violations:\n" + json.dumps(found, indent=2)


def test_axe_check_reports_a_serious_violation(
    browser_page: Callable[..., Any],
    demo: Cluster,
    admin_user: Any,
) -> None:
    """The check above can fail: a button with no name on a real page is reported."""
    page = browser_page(admin_user, viewport=DESKTOP)
    open_ui_page(page, next(p for p in PAGES if p.name == "overview"))
    page.evaluate("document.querySelector('main').append(document.createElement('button'))")
    assert "button-name" in {v["id"] for v in blocking(axe_violations(page))}


def overflow(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => ({
        scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
        wide: [...document.querySelectorAll('main *, header *')].filter(el => {
            const box = el.getBoundingClientRect();
            if (box.width === 0 || box.right <= innerWidth + 1) return false;
            for (let up = el.parentElement; up; up = up.parentElement) {
                if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(up).overflowX)) {
                    return false;
                }
            }
            return true;
        }).slice(0, 5).map(el => el.outerHTML.slice(0, 120)),
    })""")


@pytest.mark.parametrize("theme", THEMES)
def test_phone_pages_never_scroll_sideways_and_the_menu_opens_the_navigation(
    browser_page: Callable[..., Any],
    demo: Cluster,
    admin_user: Any,
    theme: str,
) -> None:
    pages = pages_for(browser_page, admin_user, color_scheme=theme, viewport=PHONE)
    for ui_page in PAGES:
        page = pages[ui_page.signed_in]
        open_ui_page(page, ui_page)
        width = overflow(page)
        assert width["scrollWidth"] <= width["innerWidth"], (ui_page.name, width)
        if ui_page.signed_in:
            check_menu(page, ui_page)


def check_menu(page: Any, ui_page: UIPage) -> None:
    """The navigation is folded behind the menu button, which opens and closes it by
    keyboard, with every link of the navigation inside the screen."""
    menu = page.locator(".topbar .nav-toggle")
    nav = page.locator("#main-nav")
    assert menu.is_visible(), ui_page.name
    assert menu.get_attribute("aria-expanded") == "false"
    assert nav.is_hidden(), ui_page.name

    menu.focus()
    page.keyboard.press("Enter")
    assert menu.get_attribute("aria-expanded") == "true"
    assert nav.is_visible()
    items = nav.locator("a, button")
    assert items.count() >= 5
    for index in range(items.count()):
        box = items.nth(index).bounding_box()
        assert box is not None, (ui_page.name, index)
        assert box["width"] > 0, (ui_page.name, box)
        assert box["x"] >= 0, (ui_page.name, box)
        assert box["x"] + box["width"] <= PHONE["width"], (ui_page.name, box)
        assert box["y"] >= 0, (ui_page.name, box)
        assert box["y"] + box["height"] <= PHONE["height"], (ui_page.name, box)
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")

    page.keyboard.press("Escape")
    assert menu.get_attribute("aria-expanded") == "false"
    assert nav.is_hidden()
    assert page.evaluate("document.activeElement.classList.contains('nav-toggle')")


def test_desktop_shows_the_navigation_without_a_menu_button(
    browser_page: Callable[..., Any],
    demo: Cluster,
    admin_user: Any,
) -> None:
    page = browser_page(admin_user, viewport=DESKTOP)
    page.goto("/")
    assert page.locator(".topbar .nav-toggle").is_hidden()
    links = page.locator("#main-nav a")
    assert links.count() >= 5
    for index in range(links.count()):
        assert links.nth(index).is_visible()


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440", "390"])
def test_overview_cards_show_their_labels_whole(
    browser_page: Callable[..., Any],
    demo: Cluster,
    admin_user: Any,
    viewport: dict[str, int],
) -> None:
    """Nothing in a cluster queue card is cut or hidden behind a scroll bar; on a desktop
    no flavor or resource name is broken over two lines either (phones may break them at
    their hyphens)."""
    page = browser_page(admin_user, viewport=viewport)
    page.goto("/")
    cards = page.locator("article.q-cq")
    assert cards.count() >= 5
    cut = page.evaluate("""() => [...document.querySelectorAll(
            'article.q-cq, article.q-cq :is(h3, th, td, .q-badge, .q-bar-label, .q-cq-counts)')]
        .filter(el => el.scrollWidth > el.clientWidth)
        .map(el => `${el.tagName}.${el.className}: ${el.textContent.trim().slice(0, 60)}`
                   + ` (${el.scrollWidth} > ${el.clientWidth})`)""")
    assert cut == []
    if viewport is PHONE:
        return
    broken = page.evaluate("""() => [...document.querySelectorAll(
            'article.q-cq .q-usage td:nth-child(-n+2)')]
        .filter(el => {
            const text = document.createRange();
            text.selectNodeContents(el);
            return new Set([...text.getClientRects()].map(r => Math.round(r.top))).size > 1;
        })
        .map(el => el.textContent.trim())""")
    assert broken == []
