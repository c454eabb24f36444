"""Scaling jobs in the UI: the job page (spec, status, pods, slice history, live regions), the
scale control on the job and workload pages, and the scale action (roles, CSRF, errors)."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from multicluster.models import Pod
from scheduling import jobframework, services
from scheduling.choices import JobSource, WorkloadPhase
from scheduling.models import ClusterQueue, Job, Workload
from scheduling.web import slices
from scheduling.workload import slices as elastic
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db

ELASTIC = {jobframework.ELASTIC_JOB_ANNOTATION: "true"}
NOT_ELASTIC_REASON = ('Only elastic jobs (annotation kueue.x-k8s.io/elastic-job: &quot;true&quot;) '
                      "can be scaled while admitted")


def job_page(job: Job, suffix: str = "") -> str:
    return reverse("ui-job", kwargs={"cluster": job.cluster.name, "namespace": job.namespace,
                                     "kind": job.kind, "name": job.name}) + suffix


def scale_url(job: Job) -> str:
    return reverse("ui-job-scale", kwargs={"cluster": job.cluster.name,
                                           "namespace": job.namespace, "kind": job.kind,
                                           "name": job.name})


def workload_page(wl: Workload) -> str:
    return reverse("ui-workload", kwargs={"cluster": wl.cluster.name, "namespace": wl.namespace,
                                          "name": wl.name})


def workloads(job: Job) -> list[Workload]:
    return elastic.ordered(Workload.objects.filter(job=job))


def submit(name: str, *, parallelism: int = 3, annotations: dict[str, str] | None = None,
           namespace: str = "team-a", queue: str = "lq-cq") -> Job:
    return services.submit_job(
        job_manifest(name, queue, parallelism=parallelism, run_seconds=1000,
                     annotations=annotations),
        namespace=namespace)


def parallelism(job: Job) -> int:
    return int(Job.objects.get(pk=job.pk).manifest["spec"]["parallelism"])


def scale_errors(body: str) -> str:
    match = re.search(r'<ul id="scale-errors"[^>]*>(.*?)</ul>', body, re.S)
    assert match is not None, "no #scale-errors"
    return match.group(1)


@pytest.fixture
def queue(make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    return make_queue("cq", {"cpu": "4"}, namespace="team-a")


@pytest.fixture
def elastic_job(queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime) -> Job:
    """An admitted elastic job of 3 pods (1 CPU each) in a queue of 4 CPUs, pods running."""
    job = submit("elastic", annotations=ELASTIC)
    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=3))
    (wl,) = workloads(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    return Job.objects.get(pk=job.pk)


@pytest.fixture
def plain_job(queue: ClusterQueue, reconcilers: Reconcilers, t0: datetime) -> Job:
    job = submit("plain", parallelism=1)
    reconcilers.step(t0)
    (wl,) = workloads(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    return Job.objects.get(pk=job.pk)


# =========================================================================================
# The job page
# =========================================================================================


def test_the_job_page_shows_spec_status_pods_and_slices(
    viewer_ui: Client, elastic_job: Job
) -> None:
    response = viewer_ui.get(job_page(elastic_job))

    assert response.status_code == 200
    body = response.content.decode()
    (wl,) = workloads(elastic_job)
    assert 'id="job-parallelism" data-parallelism="3"' in body
    assert 'data-elastic="true"' in body
    assert 'id="job-admitted" data-admitted-count="3"' in body
    assert workload_page(wl) in body
    assert 'data-status="active">3<' in body
    assert body.count('data-pod="') == 3
    assert f'data-slice="team-a/{wl.name}" data-phase="Admitted" data-pod-count="3" ' \
           'data-admitted-count="3"' in body
    assert "cpu: default" in body  # the flavor
    assert f'data-live-clusters="{elastic_job.cluster_id}"' in body
    # Every region refreshes live from its partial URL.
    for region in ("summary", "controls", "pods", "slices", "events"):
        assert f'hx-get="{job_page(elastic_job, f"partial/{region}/")}' in body
        partial = viewer_ui.get(job_page(elastic_job, f"partial/{region}/"))
        assert partial.status_code == 200
        assert "data-live-refresh" in partial.content.decode()
    # A viewer may look but not act.
    assert 'id="controls-readonly"' in body
    assert 'id="control-scale"' not in body


def test_the_job_page_counts_gated_pods(viewer_ui: Client, elastic_job: Job) -> None:
    pod = Pod.objects.filter(job=elastic_job).first()
    assert pod is not None
    Pod.objects.filter(pk=pod.pk).update(scheduling_gates=[elastic.ELASTIC_JOB_SCHEDULING_GATE],
                                         reason="SchedulingGated")
    body = viewer_ui.get(job_page(elastic_job)).content.decode()
    assert 'data-status="gated">1' in body
    assert 'data-gated="1"' in body


def test_an_unknown_job_or_region_is_not_found(viewer_ui: Client, elastic_job: Job) -> None:
    assert viewer_ui.get(reverse("ui-job", kwargs={
        "cluster": "manager", "namespace": "team-a", "kind": "Job", "name": "nope"})
    ).status_code == 404
    assert viewer_ui.get(job_page(elastic_job, "partial/secrets/")).status_code == 404


def test_the_job_page_needs_a_role(client: Client, make_user: Callable[..., User],
                                   elastic_job: Job) -> None:
    response = client.get(job_page(elastic_job))
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert ui_client_for(make_user("nobody")).get(job_page(elastic_job)).status_code == 403


def test_the_workload_page_links_the_job_page(viewer_ui: Client, elastic_job: Job) -> None:
    (wl,) = workloads(elastic_job)
    body = viewer_ui.get(workload_page(wl)).content.decode()
    assert f'href="{job_page(elastic_job)}" id="wl-job-link"' in body


# =========================================================================================
# The control
# =========================================================================================


def test_an_elastic_job_has_an_enabled_control_on_both_pages(
    operator_ui: Client, elastic_job: Job
) -> None:
    (wl,) = workloads(elastic_job)
    for page, back in ((job_page(elastic_job), job_page(elastic_job)),
                       (workload_page(wl), workload_page(wl))):
        body = operator_ui.get(page).content.decode()
        form = re.search(r'<form method="post" action="([^"]+)"\s+class="control-scale"'
                         r'(.*?)</form>', body, re.S)
        assert form is not None
        assert form.group(1) == scale_url(elastic_job)
        assert ('data-confirm="Scale job team-a/elastic from parallelism 3 to the value '
                'entered?"') in form.group(2)
        assert ('data-confirm-template="Scale job team-a/elastic from parallelism 3 to {n}?"'
                in form.group(2))
        assert "csrfmiddlewaretoken" in form.group(2)
        assert f'name="next" value="{back}"' in form.group(2)
        assert 'id="scale-parallelism" name="parallelism"' in form.group(2)
        assert 'value="3"' in form.group(2)
        assert '<button type="submit" id="control-scale"' in form.group(2)
        assert "disabled" not in form.group(2)
        assert 'id="confirm-yes"' in body
        assert "js/scale.js" in body


def test_a_job_that_is_not_elastic_is_disabled_while_admitted(
    operator_ui: Client, plain_job: Job
) -> None:
    for page in (job_page(plain_job), workload_page(workloads(plain_job)[0])):
        body = operator_ui.get(page).content.decode()
        assert 'id="control-scale" disabled aria-disabled="true"' in body
        field = re.search(r'<input type="number" id="scale-parallelism"[^>]*>', body)
        assert field is not None
        for attribute in ('name="parallelism"', 'min="0"', 'step="1"', 'value="1"',
                          'data-current="1"', " disabled"):
            assert attribute in field.group(0)
        assert NOT_ELASTIC_REASON in body
        assert "data-confirm-template" not in body


def test_a_queued_job_that_is_not_elastic_can_be_scaled(
    operator_ui: Client, queue: ClusterQueue
) -> None:
    job = submit("queued", parallelism=2)
    body = operator_ui.get(job_page(job)).content.decode()
    assert '<button type="submit" id="control-scale"' in body
    assert slices.HINT_QUEUED in body


def test_a_finished_job_offers_no_scale_control(operator_ui: Client, elastic_job: Job) -> None:
    Job.objects.filter(pk=elastic_job.pk).update(status={"conditions": [
        {"type": "Complete", "status": "True", "reason": "", "message": ""}]})
    body = operator_ui.get(job_page(elastic_job)).content.decode()
    assert 'id="control-scale"' not in body
    assert 'id="scale-form"' not in body
    assert f'id="controls-finished">{elastic.REFUSED_FINISHED.reason}.' in body
    assert 'data-job-condition="Complete"' in body
    assert '<tr data-condition="Complete" data-status="True">' in body


def test_an_operator_of_another_namespace_is_read_only(
    make_user: Callable[..., User], elastic_job: Job
) -> None:
    client = ui_client_for(make_user("bob", "operator", namespaces=("team-b",)))
    body = client.get(job_page(elastic_job)).content.decode()
    assert 'id="controls-readonly"' in body
    assert 'id="control-scale"' not in body
    (wl,) = workloads(elastic_job)
    assert 'id="control-scale"' not in client.get(workload_page(wl)).content.decode()


# =========================================================================================
# The action
# =========================================================================================


def test_scale_up_redirects_back_with_a_message_and_shows_the_pending_slice(
    operator_ui: Client, elastic_job: Job, reconcilers: Reconcilers, t0: datetime,
) -> None:
    (first,) = workloads(elastic_job)

    response = operator_ui.post(scale_url(elastic_job), {"parallelism": "6",
                                                         "next": job_page(elastic_job)})

    assert response.status_code == 302
    assert response["Location"] == job_page(elastic_job)
    assert parallelism(elastic_job) == 6
    first_again, second = workloads(elastic_job)
    assert first_again.pk == first.pk
    assert second.annotations[elastic.WORKLOAD_SLICE_REPLACEMENT_FOR] == f"team-a/{first.name}"

    # 3 more CPUs do not fit in the 1 left: the slice waits, the job keeps running 3 pods.
    reconcilers.step(t0 + timedelta(seconds=5))
    page = operator_ui.get(response["Location"])
    body = page.content.decode()
    assert "scaling up from 3 to 6" in body  # the message
    pending = re.search(r'<p class="scale-pending" id="pending-scale-up" data-from="3" '
                        r'data-to="6">(.*?)</p>', body, re.S)
    assert pending is not None
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", pending.group(1)))
    second.refresh_from_db()
    waiting = next(c for c in second.conditions if c["type"] == "QuotaReserved")
    assert waiting["status"] == "False"
    assert "Pending scale-up: 3 → 6 pods" in text
    assert f"waiting: {waiting['message']}" in text.replace("&#x27;", "'")
    assert 'class="slice-current"' in body
    assert 'class=" slice-pending"' in body
    assert f'data-replaces="team-a/{first.name}"' in body
    assert f'data-replaced-by="{second.name}"' in body
    assert 'data-event-reason="ScaledUp"' in body
    # The workload page of the running slice shows the same history.
    wl_body = operator_ui.get(workload_page(first)).content.decode()
    assert 'id="pending-scale-up" data-from="3" data-to="6"' in wl_body
    assert "(this workload)" in wl_body


def test_scale_up_admitted_replaces_the_slice_in_the_history(
    operator_ui: Client, elastic_job: Job, reconcilers: Reconcilers, t0: datetime,
) -> None:
    (first,) = workloads(elastic_job)
    operator_ui.post(scale_url(elastic_job), {"parallelism": "4"})
    reconcilers.step(t0 + timedelta(seconds=5))
    reconcilers.step(t0 + timedelta(seconds=8))
    first, second = workloads(elastic_job)
    assert (first.phase, second.phase) == (WorkloadPhase.FINISHED, WorkloadPhase.ADMITTED)

    body = operator_ui.get(job_page(elastic_job)).content.decode()
    assert 'id="pending-scale-up"' not in body
    assert f'data-slice="team-a/{first.name}" data-phase="Finished" data-pod-count="3"' in body
    assert f'data-slice="team-a/{second.name}" data-phase="Admitted" data-pod-count="4" ' \
           'data-admitted-count="4" data-current="true"' in body
    assert "WorkloadSliceReplaced" in body
    assert 'id="job-admitted" data-admitted-count="4"' in body
    assert body.index(first.name) < body.index(f'data-slice="team-a/{second.name}"')


def test_scale_down_from_the_workload_page_goes_back_to_it(
    operator_ui: Client, elastic_job: Job
) -> None:
    (wl,) = workloads(elastic_job)
    response = operator_ui.post(scale_url(elastic_job), {"parallelism": "1",
                                                         "next": workload_page(wl)}, follow=True)

    assert response.redirect_chain == [(workload_page(wl), 302)]
    assert "scaled down from 3 to 1" in response.content.decode()
    wl.refresh_from_db()
    assert wl.pod_sets[0]["count"] == 1
    assert slices.admitted_count(wl) == 1


@pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example/x", "relative"])
def test_an_unsafe_next_goes_to_the_job_page(operator_ui: Client, elastic_job: Job,
                                             next_url: str) -> None:
    response = operator_ui.post(scale_url(elastic_job), {"parallelism": "2", "next": next_url})
    assert response.status_code == 302
    assert response["Location"] == job_page(elastic_job)


@pytest.mark.parametrize(("value", "expected"), [
    ("-1", "must be greater than or equal to 0"),
    ("lots", "must be an integer"),
    ("", "Required"),
    # More digits than Python reads as an int: refused like any value out of range.
    ("9" * 5000, "must be less than or equal to 2147483647"),
])
def test_errors_are_shown_next_to_the_control_naming_the_field(
    operator_ui: Client, elastic_job: Job, value: str, expected: str
) -> None:
    response = operator_ui.post(scale_url(elastic_job), {"parallelism": value,
                                                         "next": job_page(elastic_job)},
                                follow=True)

    assert response.redirect_chain == [(job_page(elastic_job), 302)]
    body = response.content.decode()
    errors = scale_errors(body)
    assert '<li data-path="spec.parallelism"><code>spec.parallelism</code>: ' in errors
    assert expected in errors
    assert 'aria-invalid="true"' in body
    assert f'value="{value}" data-current="3" data-edited="true"' in body  # what was typed
    assert parallelism(elastic_job) == 3
    assert len(workloads(elastic_job)) == 1
    # Shown once: a live refresh keeps the shown errors (hx-preserve), a new visit has none.
    assert 'hx-preserve="true"' in body
    assert scale_errors(operator_ui.get(job_page(elastic_job, "partial/controls/"))
                        .content.decode()).strip() == ""
    assert scale_errors(operator_ui.get(job_page(elastic_job)).content.decode()).strip() == ""


def test_a_refused_scale_names_the_field_on_the_workload_page(
    operator_ui: Client, plain_job: Job
) -> None:
    (wl,) = workloads(plain_job)
    response = operator_ui.post(scale_url(plain_job), {"parallelism": "3",
                                                       "next": workload_page(wl)}, follow=True)

    assert response.redirect_chain == [(workload_page(wl), 302)]
    errors = scale_errors(response.content.decode())
    assert "<code>spec.parallelism</code>: Forbidden" in errors
    assert "elastic" in errors
    assert parallelism(plain_job) == 1


def test_a_conflict_is_shown_as_an_error(operator_ui: Client, elastic_job: Job,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def conflict(*args: Any, **kwargs: Any) -> Any:
        raise services.ConflictError('workloads.kueue.x-k8s.io "x" already exists')

    monkeypatch.setattr(elastic, "scale_job", conflict)
    response = operator_ui.post(scale_url(elastic_job), {"parallelism": "5"}, follow=True)
    assert "already exists" in scale_errors(response.content.decode())


def test_viewers_and_other_namespaces_are_refused(
    viewer_ui: Client, make_user: Callable[..., User], elastic_job: Job
) -> None:
    other = ui_client_for(make_user("bob", "operator", namespaces=("team-b",)))
    for client in (viewer_ui, other):
        assert client.post(scale_url(elastic_job), {"parallelism": "5"}).status_code == 403
    assert parallelism(elastic_job) == 3
    anonymous = Client().post(scale_url(elastic_job), {"parallelism": "5"})
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/login/")
    assert parallelism(elastic_job) == 3


def test_an_unknown_job_is_not_found(operator_ui: Client, queue: ClusterQueue) -> None:
    url = reverse("ui-job-scale", kwargs={"cluster": "manager", "namespace": "team-a",
                                          "kind": "Job", "name": "nope"})
    assert operator_ui.post(url, {"parallelism": "2"}).status_code == 404


def test_the_action_needs_post_and_csrf(operator: User, elastic_job: Job) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(scale_url(elastic_job), {"parallelism": "5"}).status_code == 403
    assert parallelism(elastic_job) == 3
    assert client.get(scale_url(elastic_job)).status_code == 405

    # With the token of the page's form the same request goes through.
    page = client.get(job_page(elastic_job)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    response = client.post(scale_url(elastic_job), {"parallelism": "2",
                                                    "csrfmiddlewaretoken": token.group(1)})
    assert response.status_code == 302
    assert parallelism(elastic_job) == 2


def test_a_job_created_on_its_cluster_is_marked_and_offers_no_scaling(
    operator_ui: Client, queue: ClusterQueue,
) -> None:
    job = services.submit_job(job_manifest("kubectl", "lq-cq", parallelism=3),
                              namespace="team-a", source=JobSource.CLUSTER)
    submitted = submit("submitted")

    page = operator_ui.get(job_page(job)).content.decode()
    other = operator_ui.get(job_page(submitted)).content.decode()
    listed = operator_ui.get(reverse("ui-workloads")).content.decode()

    assert 'id="job-created-on-cluster"' in page
    assert 'id="job-created-on-cluster"' not in other
    assert "Created on the cluster (kubectl): change it there" in page
    assert listed.count("data-created-on-cluster") == 1
    [row] = [line for line in listed.splitlines() if "data-created-on-cluster" in line]
    assert workload_page(workloads(job)[0]) in row
