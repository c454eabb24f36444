"""A link to a MultiKueue copy that was cleaned up says where the workload went."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from multicluster import dispatch
from multicluster.choices import ClusterRole
from multicluster.models import Cluster
from scheduling.models import Job, Workload
from scheduling.scheduler import admission

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]


def test_the_losing_copy_s_link_says_where_the_workload_went(
    browser_page: Callable[..., Any], manager: Cluster, viewer: Any
) -> None:
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    Job.objects.exclude(name="dispatched-analysis").delete()
    Workload.objects.exclude(job__name="dispatched-analysis").delete()
    t0 = timezone.now()
    admission.run_admission_cycle(manager.pk, now=t0)
    dispatch.sync_dispatch(manager.pk, now=t0)
    wl = Workload.objects.get(job__name="dispatched-analysis", cluster__role=ClusterRole.MANAGER)
    page = browser_page(viewer)
    page.goto(f"/c/manager/namespaces/{wl.namespace}/workloads/{wl.name}/")
    page.locator("#live-pause").click()  # the page keeps showing both copies
    copy_link = page.locator("tr[data-worker=worker-1] a.wl-remote-link")
    assert copy_link.is_visible()

    # worker-2 admits its copy first and wins; worker-1's copy is removed.
    w2 = Cluster.objects.get(name="worker-2")
    admission.run_admission_cycle(w2.pk, now=t0 + timedelta(seconds=1))
    dispatch.sync_dispatch(manager.pk, now=t0 + timedelta(seconds=2))

    copy_link.click()
    page.wait_for_selector("#wl-copy-removed")
    assert page.locator("h1").inner_text() == "Copy removed"
    assert (
        "removed from worker-1 when worker-2 admitted the workload"
        in page.locator("#wl-copy-removed").inner_text()
    )
    page.click("#wl-copy-hub")
    page.wait_for_selector("#wl-dispatch")
    assert (
        "Any copies on worker-1 were removed when worker-2 admitted the workload."
        in page.locator("#wl-dispatch").inner_text()
    )
