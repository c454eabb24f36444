"""Scaling an elastic job from its page, in a real browser: the new size appears live."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.models import ClusterQueue, Job, Workload
from tests.fixtures.browser import run_elsewhere, wait_live
from tests.fixtures.scheduling import job_manifest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

RECONCILE_ELSEWHERE = (
    "from django.utils import timezone\n"
    "from multicluster.simulated.runner import sync_cluster\n"
    "from scheduling.scheduler.admission import run_admission_cycle\n"
    "from scheduling.workload.lifecycle import run_lifecycle\n"
    "for _ in range(3):\n"
    "    run_lifecycle({id}, now=timezone.now())\n"
    "    sync_cluster({id}, now=timezone.now())\n"
    "    run_admission_cycle({id}, now=timezone.now())\n"
    "sync_cluster({id}, now=timezone.now())\n"
)


def job_url(job: Job) -> str:
    return f"/c/manager/namespaces/{job.namespace}/jobs/{job.kind}/{job.name}/"


def workload_url(wl: Workload) -> str:
    return f"/c/manager/namespaces/{wl.namespace}/workloads/{wl.name}/"


def admitted(page: Any) -> str:
    return str(page.locator("#job-admitted").get_attribute("data-admitted-count"))


def wait_for_size(page: Any, pods: int) -> None:
    """The job page shows ``pods`` admitted and ``pods`` running pods."""
    page.wait_for_function(
        "n => document.querySelector('#job-admitted').dataset.admittedCount === n"
        " && document.querySelector('#job-pod-counts').dataset.running === n", arg=str(pods))


@pytest.fixture
def elastic_job(manager: Cluster, make_queue: Callable[..., ClusterQueue],
                settings: Any) -> Job:
    """An elastic job of 3 running pods (500m each) in a queue of 4 CPUs."""
    manager.simulation = {"startDelaySeconds": 0}
    manager.save()
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    job = services.submit_job(
        job_manifest("grow", "lq-cq", cpu="500m", parallelism=3, run_seconds=3600,
                     annotations={jobframework.ELASTIC_JOB_ANNOTATION: "true"}),
        namespace="team-a")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    assert Workload.objects.get(job=job).phase == "Admitted"
    return job


def scale(page: Any, pods: int, field_id: str = "scale-parallelism") -> None:
    # A live refresh that swaps the control between fill's select-all and its typing puts
    # the caret in the new input's value ("5" became "25" once): fill until it holds. A
    # refresh after that keeps the edited value (static/js/scale.js).
    field = page.locator(f"#{field_id}")
    for _ in range(5):
        field.fill(str(pods))
        if field.input_value() == str(pods):
            break
    assert field.input_value() == str(pods)
    page.click("#control-scale")
    page.wait_for_selector("#confirm-dialog[open]")
    assert f"to {pods}?" in page.locator("#confirm-message").inner_text()
    page.click("#confirm-yes")


def refresh_controls(page: Any, settings: Any, manager: Cluster) -> None:
    """A change committed by another process; returns once the page's live refresh has
    re-rendered the controls region."""
    page.evaluate("document.getElementById('job-controls').dataset.old = 'yes'")
    run_elsewhere(settings, f"from kueueweb import live\nlive.notify({manager.pk})\n")
    page.wait_for_function("!document.getElementById('job-controls').dataset.old")


def test_operator_scales_an_elastic_job_up_and_down_and_sees_it_live(
    browser_page: Callable[..., Any], elastic_job: Job, operator: Any, manager: Cluster,
    settings: Any,
) -> None:
    page = browser_page(operator)
    page.goto(job_url(elastic_job))
    wait_live(page)
    wait_for_size(page, 3)
    assert page.locator("#job-elastic").inner_text() == "yes"

    # --- up to 5: a new slice waits for the next admission cycle; the job keeps 3 pods ---
    scale(page, 5)
    page.wait_for_selector("text=scaling up from 3 to 5")  # back on the page after the POST
    assert page.locator("#pending-scale-up").get_attribute("data-to") == "5"
    assert admitted(page) == "3"
    wait_live(page)
    page.evaluate("window.__notReloaded = true")

    # The admission cycle and the cluster run in another process: the slice is admitted,
    # replaces the old one and the two extra pods start; the page follows without a reload.
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    wait_for_size(page, 5)
    page.wait_for_selector("#pending-scale-up", state="detached")
    history = page.locator("#slice-history").inner_text()
    assert "WorkloadSliceReplaced" in history
    assert page.locator("#slice-history tr[data-current]").get_attribute("data-pod-count") == "5"
    assert page.evaluate("window.__notReloaded") is True

    # --- down to 2: the running slice shrinks in place; the cluster stops three pods ---
    scale(page, 2)
    page.wait_for_selector("text=scaled down from 5 to 2")
    assert admitted(page) == "2"
    wait_live(page)
    page.evaluate("window.__notReloaded = true")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    wait_for_size(page, 2)
    assert page.evaluate("window.__notReloaded") is True
    job = Job.objects.get(pk=elastic_job.pk)
    assert job.manifest["spec"]["parallelism"] == 2


def test_a_refused_value_is_shown_next_to_the_control_and_stays_through_live_updates(
    browser_page: Callable[..., Any], elastic_job: Job, operator: Any, manager: Cluster,
    settings: Any,
) -> None:
    page = browser_page(operator)
    page.goto(job_url(elastic_job))
    wait_live(page)

    # The page refuses -1 itself (see the test below); without its constraints, as from an
    # older page, the server refuses it and says why beside the control.
    page.evaluate("document.getElementById('scale-parallelism').removeAttribute('min')")
    scale(page, -1)
    errors = page.locator("#scale-errors")
    errors.wait_for()
    assert "spec.parallelism" in errors.inner_text()
    assert "greater than or equal to 0" in errors.inner_text()
    assert page.locator("#scale-parallelism").input_value() == "-1"

    # A live refresh of the controls keeps the errors on screen.
    wait_live(page)
    refresh_controls(page, settings, manager)
    assert "spec.parallelism" in page.locator("#scale-errors").inner_text()
    # ... and the value being corrected: what the user typed is not replaced by the refresh.
    assert page.locator("#scale-parallelism").input_value() == "-1"
    page.fill("#scale-parallelism", "4")
    refresh_controls(page, settings, manager)
    assert page.locator("#scale-parallelism").input_value() == "4"
    assert Job.objects.get(pk=elastic_job.pk).manifest["spec"]["parallelism"] == 3


def test_a_live_refresh_while_typing_keeps_the_caret_and_the_focus(
    browser_page: Callable[..., Any], elastic_job: Job, operator: Any, manager: Cluster,
    settings: Any,
) -> None:
    page = browser_page(operator)
    page.goto(job_url(elastic_job))
    wait_live(page)
    field = page.locator("#scale-parallelism")
    field.click()
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.type("12")
    page.keyboard.press("ArrowLeft")  # the caret now sits between "1" and "2"
    assert field.input_value() == "12"

    # A change elsewhere re-renders the whole controls region while the user types.
    refresh_controls(page, settings, manager)

    # Typing goes on where it was: in the field, at the caret.
    assert page.evaluate("document.activeElement.id") == "scale-parallelism"
    page.keyboard.type("5")
    assert field.input_value() == "152"
    page.click("#control-scale")
    page.wait_for_selector("#confirm-dialog[open]")
    assert "to 152?" in page.locator("#confirm-message").inner_text()


# =========================================================================================
# The slice a scale-up leads to
# =========================================================================================


def test_a_scale_up_from_a_workload_page_leads_to_the_new_slice_and_the_old_one_says_so(
    browser_page: Callable[..., Any], elastic_job: Job, operator: Any, manager: Cluster,
    settings: Any,
) -> None:
    first = Workload.objects.select_related("cluster").get(job=elastic_job)
    page = browser_page(operator)
    page.goto(workload_url(first))
    wait_live(page)

    scale(page, 5)
    page.wait_for_selector("text=scaling up from 3 to 5")
    second = Workload.objects.select_related("cluster").exclude(pk=first.pk).get(
        job=elastic_job)
    # Back on the page of the slice the job goes on with, not the one it replaces.
    assert page.url.endswith(workload_url(second))
    assert page.locator("#wl-status [data-phase]").first.get_attribute("data-phase") == \
        "Pending"

    # The old slice's page, left open, learns live that the new one replaced it.
    old = browser_page(operator)
    old.goto(workload_url(first))
    assert old.locator("#wl-scale-up-waiting").get_attribute("data-waiting") == second.name
    wait_live(old)
    old.evaluate("window.__notReloaded = true")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    old.wait_for_selector("#wl-replaced")
    assert old.evaluate("window.__notReloaded") is True
    assert old.locator("#wl-replaced").get_attribute("data-replaced-by") == second.name
    old.click("#wl-replaced-link")
    old.wait_for_url(f"**{workload_url(second)}")
    assert old.locator("#wl-status [data-phase]").first.get_attribute("data-phase") == \
        "Admitted"

    # Opened later, the replaced slice still points on; a scale from it goes to the
    # current slice too (a scale-down shrinks that one in place).
    old.goto(workload_url(first))
    assert old.locator("#wl-replaced-link").inner_text() == second.name
    scale(old, 4)
    old.wait_for_selector("text=scaled down from 5 to 4")
    assert old.url.endswith(workload_url(second))


# =========================================================================================
# Validation before the confirmation
# =========================================================================================


def test_a_value_the_server_would_refuse_is_refused_beside_the_field_before_any_dialog(
    browser_page: Callable[..., Any], elastic_job: Job, operator: Any,
) -> None:
    page = browser_page(operator)
    page.goto(job_url(elastic_job))
    wait_live(page)
    posts: list[str] = []
    page.on("request", lambda r: posts.append(r.url) if r.method == "POST" else None)
    field = page.locator("#scale-parallelism")
    error = page.locator("#scale-parallelism-error")
    assert error.is_hidden()

    for typed, expected in (("-1", "greater than or equal to 0"),
                            ("1.5", "whole number"),
                            ("", "required"),
                            ("3000000000", "less than or equal to 2147483647")):
        field.fill(typed)
        page.click("#control-scale")
        assert expected in error.inner_text()
        assert "spec.parallelism" in error.inner_text()
        assert error.is_visible()
        assert field.get_attribute("aria-invalid") == "true"
        assert "scale-parallelism-error" in (field.get_attribute("aria-describedby") or "")
        assert page.locator("#confirm-dialog[open]").count() == 0
        assert page.evaluate("document.activeElement.id") == "scale-parallelism"
    assert posts == []

    # Corrected, the error goes and the confirmation opens.
    field.fill("4")
    assert error.is_hidden()
    assert field.get_attribute("aria-invalid") is None
    page.click("#control-scale")
    page.wait_for_selector("#confirm-dialog[open]")
    assert "to 4?" in page.locator("#confirm-message").inner_text()
    page.click("#confirm-no")
    assert posts == []


# A Ray pod of 500m; the cluster's head and one group "workers" of one such pod.
RAY_TEMPLATE = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9.0",
                                         "resources": {"requests": {"cpu": "500m"}}}]}}
RAY_CLUSTER_SPEC = {"headGroupSpec": {"template": RAY_TEMPLATE},
                    "workerGroupSpecs": [{"groupName": "workers", "replicas": 1,
                                          "template": RAY_TEMPLATE}]}


def submit_elastic_ray(manager: Cluster, make_queue: Callable[..., ClusterQueue],
                       settings: Any, kind: str, name: str, spec: dict[str, Any]) -> Job:
    """An elastic Ray object running for an hour in a queue of 4 CPUs, admitted and started
    in another process."""
    manager.simulation = {"startDelaySeconds": 0}
    manager.save()
    make_queue("cq", {"cpu": "4", "memory": "4Gi"}, namespace="team-a")
    job = services.submit_job({
        "apiVersion": "ray.io/v1", "kind": kind,
        "metadata": {"name": name, "labels": {jobframework.QUEUE_NAME_LABEL: "lq-cq"},
                     "annotations": {jobframework.ELASTIC_JOB_ANNOTATION: "true",
                                     "kueueweb.io/run-seconds": "3600"}},
        "spec": spec,
    }, namespace="team-a")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    assert Workload.objects.get(job=job).phase == "Admitted"
    return job


def scale_workers_live(page: Any, settings: Any, manager: Cluster, *, to: int, shown: str,
                       pods: int) -> None:
    """Scale the worker group to ``to`` from the page (``shown``: what the page says after
    the POST), reconcile in another process, and see ``pods`` pods admitted and running
    without a reload."""
    scale(page, to, "scale-podSets-workers")
    page.wait_for_selector(f"text={shown}")
    wait_live(page)
    page.evaluate("window.__notReloaded = true")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    wait_for_size(page, pods)
    assert page.evaluate("window.__notReloaded") is True


@pytest.fixture
def elastic_raycluster(manager: Cluster, make_queue: Callable[..., ClusterQueue],
                       settings: Any) -> Job:
    """An elastic RayCluster running its head and one worker."""
    return submit_elastic_ray(manager, make_queue, settings, "RayCluster", "ray",
                              RAY_CLUSTER_SPEC)


def test_operator_scales_an_elastic_rayclusters_worker_group_up_and_down(
    browser_page: Callable[..., Any], elastic_raycluster: Job, operator: Any,
    manager: Cluster, settings: Any,
) -> None:
    page = browser_page(operator)
    page.goto(job_url(elastic_raycluster))
    wait_live(page)
    wait_for_size(page, 2)  # the head and one worker

    # Up: the worker group to 3 through a new slice, admitted in another process.
    scale_workers_live(page, settings, manager, to=3, shown="scaling up from 1 to 3", pods=4)
    assert "WorkloadSliceReplaced" in page.locator("#slice-history").inner_text()

    # Down: the running slice shrinks in place; the cluster stops two workers.
    scale_workers_live(page, settings, manager, to=1, shown="scaled down from 3 to 1", pods=2)
    job = Job.objects.get(pk=elastic_raycluster.pk)
    assert job.manifest["spec"]["workerGroupSpecs"][0]["replicas"] == 1


@pytest.fixture
def elastic_rayjob(manager: Cluster, make_queue: Callable[..., ClusterQueue],
                   settings: Any) -> Job:
    """An elastic RayJob running its head, one worker and its submitter (KubeRay's default
    submitter requests 500m too)."""
    return submit_elastic_ray(manager, make_queue, settings, "RayJob", "ray-train", {
        "entrypoint": "python train.py", "shutdownAfterJobFinishes": True,
        "rayClusterSpec": RAY_CLUSTER_SPEC})


def test_operator_scales_an_elastic_rayjobs_worker_group_up_and_down(
    browser_page: Callable[..., Any], elastic_rayjob: Job, operator: Any,
    manager: Cluster, settings: Any,
) -> None:
    page = browser_page(operator)
    page.goto(job_url(elastic_rayjob))
    wait_live(page)
    wait_for_size(page, 3)  # the head, one worker and the submitter
    assert page.locator("#job-elastic").inner_text() == "yes"

    # Up: the worker group to 3 through a new slice; until it is admitted the job keeps its
    # three pods.
    scale(page, 3, "scale-podSets-workers")
    page.wait_for_selector("text=scaling up from 1 to 3")
    assert admitted(page) == "3"
    # The pending slice counts every pod of the job: head, three workers, submitter.
    assert page.locator("#pending-scale-up").get_attribute("data-to") == "5"
    wait_live(page)
    page.evaluate("window.__notReloaded = true")
    run_elsewhere(settings, RECONCILE_ELSEWHERE.format(id=manager.pk))
    wait_for_size(page, 5)
    page.wait_for_selector("#pending-scale-up", state="detached")
    assert "WorkloadSliceReplaced" in page.locator("#slice-history").inner_text()
    assert page.evaluate("window.__notReloaded") is True

    # Down: the running slice shrinks in place; the cluster stops two workers, the job runs.
    scale_workers_live(page, settings, manager, to=1, shown="scaled down from 3 to 1", pods=3)
    job = Job.objects.get(pk=elastic_rayjob.pk)
    assert job.manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert Workload.objects.filter(job=job, phase="Admitted").count() == 1
