"""The overview updates in place when another process admits a workload."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multicluster.models import Cluster
from scheduling.models import ClusterQueue, Workload
from tests.fixtures.browser import run_elsewhere, wait_live

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]


def test_admission_by_another_process_updates_bar_and_counts_without_reload(
    browser_page: Callable[..., Any], manager: Cluster, viewer: Any, settings: Any,
    make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload],
) -> None:
    make_queue("team-cq", {"cpu": "8"})
    wl = make_workload("train", "lq-team-cq", {"cpu": "3"})

    page = browser_page(viewer)
    page.goto("/")
    wait_live(page)
    bar = page.locator("#bar-manager-team-cq-default-cpu")
    card = page.locator("#cq-manager-team-cq")
    assert bar.get_attribute("data-used") in ("0", "0.0")
    assert card.get_attribute("data-pending") == "1"
    assert card.get_attribute("data-admitted") == "0"
    page.evaluate("window.__notReloaded = true")

    run_elsewhere(settings, (
        "from django.utils import timezone\n"
        "from scheduling.scheduler.admission import run_admission_cycle\n"
        f"run_admission_cycle({manager.pk}, now=timezone.now())\n"
    ))
    wl.refresh_from_db()
    assert wl.phase == "Admitted"

    page.wait_for_function(
        "document.querySelector('#bar-manager-team-cq-default-cpu').dataset.used == '3'"
        " || document.querySelector('#bar-manager-team-cq-default-cpu').dataset.used == '3.0'")
    page.wait_for_function(
        "document.querySelector('#cq-manager-team-cq').dataset.admitted === '1'")
    assert page.locator("#cq-manager-team-cq").get_attribute("data-pending") == "0"
    assert page.evaluate("window.__notReloaded") is True
