"""A job's pods in a real browser: why a simulated pod waits, with its events, and a pod's
log on a Kubernetes cluster (the test's API server) opened from the job page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.models import Job
from scheduling.web import slices
from tests.fixtures.kube_api import start_job
from tests.fixtures.scheduling import Reconcilers

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]


def test_a_simulated_pending_pod_shows_its_failed_scheduling_reason(
    unplaceable_job: Job,
    reconcilers: Reconcilers,
    viewer: User,
    browser_page: Callable[..., Any],
) -> None:
    job = unplaceable_job
    reconcilers.step(timezone.now())
    (pod,) = job.pods.all()

    page = browser_page(viewer)
    page.goto(slices.job_url(job))

    why = page.locator(f'#job-pod-table tr[data-pod="{pod.name}"] td.pod-why')
    assert why.inner_text() == "FailedScheduling 0/3 nodes are available: 3 Insufficient cpu."
    events = page.locator(f'tr[data-events-of="{pod.name}"] details')
    assert not events.locator("li").first.is_visible()
    events.locator("summary").click()
    assert events.locator('li[data-event-reason="FailedScheduling"]').is_visible()
    assert page.locator("#job-pod-logs-note").is_visible()
    assert page.locator("a.pod-logs").count() == 0


def test_logs_of_a_kubernetes_pod_open_from_the_job_page(
    kube_api: Any,
    kube_queue: Cluster,
    viewer: User,
    browser_page: Callable[..., Any],
) -> None:
    job, (pod,) = start_job(kube_api, kube_queue, "train", timezone.now())
    kube_api.write_log(kube_api.namespace, pod, "epoch 1 loss 0.9", "epoch 2 loss 0.5")

    page = browser_page(viewer)
    page.goto(slices.job_url(job))
    page.get_by_role("link", name=f"Logs of {pod}").click()

    log = page.locator("#pod-log-text")
    assert log.inner_text() == "epoch 1 loss 0.9\nepoch 2 loss 0.5\n"
    assert "download=1" in str(page.locator("#pod-log-download").get_attribute("href"))

    # The previous instance: the cluster has none, and says so.
    page.locator("#pod-log-previous").check()
    page.locator("#pod-log-refresh").click()
    page.wait_for_url("**previous=1**")
    error = page.locator("#pod-log-error")
    assert "previous terminated container" in error.inner_text()
    assert page.locator("#pod-log-previous").is_checked()

    # Back to the current one, after the container wrote more.
    kube_api.write_log(kube_api.namespace, pod, "epoch 3 loss 0.2")
    page.locator("#pod-log-previous").uncheck()
    page.locator("#pod-log-refresh").click()
    page.wait_for_url(lambda url: "previous" not in url)
    assert page.locator("#pod-log-text").inner_text().endswith("epoch 3 loss 0.2\n")
