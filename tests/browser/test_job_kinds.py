"""A job of another kind than batch/v1 Job, from the submission form's examples to its
page, in a real browser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multicluster.models import Cluster
from scheduling.models import ClusterQueue, Job

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]


def test_a_jobset_example_is_picked_submitted_and_shown_with_its_pod_sets(
    browser_page: Callable[..., Any], manager: Cluster, operator: Any,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("cq", {"cpu": "8", "memory": "8Gi"}, namespace="team-a")
    page = browser_page(operator)
    page.goto("/jobs/new/")
    assert page.locator("#example-select").input_value() == "Job"
    assert page.locator("#example-load").is_hidden()  # the script loads examples itself
    page.locator("#id_namespace").fill("team-a")

    page.select_option("#example-select", "JobSet")

    editor = page.locator("#manifest")
    text = editor.input_value()
    assert "kind: JobSet" in text
    assert page.url.endswith("?example=JobSet")
    editor.fill(text.replace("queue-name: user-queue", "queue-name: lq-cq"))
    page.click("#job-submit")
    page.wait_for_url("**/workloads/jobset-sample-jobset-*/")
    job = Job.objects.get(namespace="team-a")
    assert job.kind == "JobSet"

    page.click("#wl-job-link")
    page.wait_for_url(f"**/namespaces/team-a/jobs/JobSet/{job.name}/")
    assert "jobset.x-k8s.io/v1alpha2 JobSet" in page.locator("main").inner_text()
    rows = page.locator("#job-pod-sets-table tbody tr")
    assert [rows.nth(i).get_attribute("data-pod-set") for i in range(rows.count())] == [
        "coordinator", "workers"]
    workers = page.locator('#job-pod-sets-table tr[data-pod-set="workers"]')
    assert workers.get_attribute("data-count") == "2"
    assert "cpu: 1" in workers.inner_text()
