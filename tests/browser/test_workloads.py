"""Workload controls and job submission, in a real browser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multicluster.models import Cluster, Pod
from scheduling import services
from scheduling.models import ClusterQueue, Job, Workload
from tests.fixtures.browser import run_elsewhere, wait_live
from tests.fixtures.scheduling import job_manifest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

RECONCILE_ELSEWHERE = (
    "from django.utils import timezone\n"
    "from multicluster.simulated.runner import sync_cluster\n"
    "from scheduling.scheduler.admission import run_admission_cycle\n"
    "from scheduling.workload.lifecycle import run_lifecycle\n"
    "for _ in range(2):\n"
    "    run_lifecycle({id}, now=timezone.now())\n"
    "    sync_cluster({id}, now=timezone.now())\n"
    "    run_admission_cycle({id}, now=timezone.now())\n"
)


def workload_url(wl: Workload) -> str:
    return f"/c/manager/namespaces/{wl.namespace}/workloads/{wl.name}/"


@pytest.fixture
def running_job(manager: Cluster, make_queue: Callable[..., ClusterQueue],
                settings: Any) -> Workload:
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    job = services.submit_job(job_manifest("train", "lq-cq", run_seconds=3600),
                              namespace="team-a")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    wl = Workload.objects.get(job=job)
    assert wl.phase == "Admitted"
    assert Pod.objects.filter(job=job).exists()
    return wl


def test_operator_deactivates_a_workload_and_sees_it_evicted(
    browser_page: Callable[..., Any], running_job: Workload, operator: Any, manager: Cluster,
    settings: Any,
) -> None:
    page = browser_page(operator)
    page.goto(workload_url(running_job))
    wait_live(page)
    assert page.locator("#wl-status [data-phase]").first.get_attribute("data-phase") == "Admitted"

    page.click("#control-deactivate")
    page.click("#confirm-yes")
    page.wait_for_selector("#control-activate")  # back on the page after the POST
    running_job.refresh_from_db()
    assert running_job.active is False
    wait_live(page)
    page.evaluate("window.__notReloaded = true")

    # The lifecycle and the cluster run in another process: the job stops, the quota goes.
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    page.wait_for_function(
        "document.querySelector('#wl-status [data-phase]').dataset.phase === 'Pending'")
    status = page.locator("#wl-status").inner_text()
    assert "Deactivated" in status
    assert page.evaluate("window.__notReloaded") is True
    running_job.refresh_from_db()
    assert running_job.phase == "Pending"
    assert not Pod.objects.filter(job=running_job.job).exists()


def test_viewer_sees_no_controls(
    browser_page: Callable[..., Any], running_job: Workload, viewer: Any,
) -> None:
    page = browser_page(viewer)
    page.goto(workload_url(running_job))
    page.wait_for_selector("#wl-status")
    for control in ("deactivate", "activate", "evict", "delete-job", "scale"):
        assert page.locator(f"#control-{control}").count() == 0, control


def test_submit_job_through_the_form_with_a_rejected_manifest_first(
    browser_page: Callable[..., Any], manager: Cluster, operator: Any,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    page = browser_page(operator)
    page.goto("/jobs/new/")
    namespace = page.locator("#id_namespace")
    namespace.fill("team-a")
    bad = (
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: broken\n"
        "  labels:\n    kueue.x-k8s.io/queue-name: lq-cq\n"
        "spec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n"
        "      - name: main\n        image: busybox\n"
        "        resources:\n          requests:\n            cpu: lots\n"
    )
    page.fill("#manifest", bad)
    page.locator("#manifest").evaluate("el => el.form.requestSubmit()")
    errors = page.locator("#manifest-errors")
    errors.wait_for()
    assert "spec.template.spec.containers[0].resources.requests.cpu" in errors.inner_text()
    assert page.locator("#manifest").input_value() == bad  # the text is kept
    assert not Job.objects.filter(name="broken").exists()

    page.fill("#manifest", bad.replace("cpu: lots", "cpu: 1").replace("broken", "fixed"))
    page.locator("#manifest").evaluate("el => el.form.requestSubmit()")
    page.wait_for_url("**/workloads/job-fixed-*/")
    job = Job.objects.get(namespace="team-a", name="fixed")
    assert Workload.objects.filter(job=job).count() == 1
