"""Job submission from the browser: a YAML manifest, errors shown by field path."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduling.manifests.yamlio import dump_documents
from scheduling.models import ClusterQueue, Job, Workload
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

URL = "/jobs/new/"


@pytest.fixture
def queue(make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    make_queue("cq-b", {"cpu": "4"}, namespace="team-b")
    return make_queue("cq", {"cpu": "4"}, namespace="team-a")


def as_yaml(manifest: dict[str, object]) -> str:
    return dump_documents([manifest])


def test_the_url_name() -> None:
    assert reverse("ui-job-new") == URL


def test_a_viewer_may_not_open_or_post_the_form(viewer: User, queue: ClusterQueue) -> None:
    client = ui_client_for(viewer)
    assert client.get(URL).status_code == 403
    response = client.post(URL, {"namespace": "team-a",
                                 "manifest": as_yaml(job_manifest("x", "lq-cq"))})
    assert response.status_code == 403
    assert not Job.objects.exists()


def test_anonymous_users_are_sent_to_log_in(client: Client) -> None:
    response = client.get(URL)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_the_form_offers_the_granted_namespaces_and_an_example(
    operator: User, queue: ClusterQueue
) -> None:
    body = ui_client_for(operator).get(URL).content.decode()
    assert 'id="manifest"' in body
    assert "kueue.x-k8s.io/queue-name" in body
    assert "kind: Job" in body
    assert '<option value="team-a">' in body
    assert '<option value="team-b">' not in body
    assert 'id="manifest-errors"' in body
    assert "csrfmiddlewaretoken" in body


def test_an_admin_is_offered_every_namespace(admin_user: User, queue: ClusterQueue) -> None:
    body = ui_client_for(admin_user).get(URL).content.decode()
    assert '<option value="team-a">' in body
    assert '<option value="team-b">' in body


def test_submitting_creates_the_job_and_shows_its_workload(
    operator: User, queue: ClusterQueue
) -> None:
    response = ui_client_for(operator).post(URL, {
        "namespace": "team-a", "manifest": as_yaml(job_manifest("train", "lq-cq", parallelism=2)),
    })
    job = Job.objects.get(namespace="team-a", name="train")
    workload = Workload.objects.get(job=job)
    assert response.status_code == 302
    assert response["Location"] == reverse("ui-workload", kwargs={
        "cluster": job.cluster.name, "namespace": "team-a", "name": workload.name})
    assert workload.pod_sets[0]["count"] == 2


def test_the_example_manifest_submits_as_is(admin_user: User, make_queue: Callable[..., ClusterQueue]) -> None:
    from scheduling.web.forms import EXAMPLE_JOB

    cq = make_queue("cq", {"cpu": "4"}, namespace="team-a")
    cq.local_queues.update(name="user-queue")
    response = ui_client_for(admin_user).post(URL, {"namespace": "team-a", "manifest": EXAMPLE_JOB})
    assert response.status_code == 302
    assert Job.objects.get(namespace="team-a").name.startswith("sample-job-")


def test_a_bad_manifest_shows_the_field_path_and_keeps_the_text(
    operator: User, queue: ClusterQueue
) -> None:
    text = as_yaml(job_manifest("bad", "lq-cq", cpu="-1"))
    response = ui_client_for(operator).post(URL, {"namespace": "team-a", "manifest": text})
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="manifest-errors"' in body
    assert "spec.template.spec.containers[0].resources.requests" in body
    assert "cpu: &#x27;-1&#x27;" in body or "cpu: '-1'" in body  # the user's text is kept
    assert "name: bad" in body
    assert not Job.objects.exists()
    assert not Workload.objects.exists()


def test_invalid_yaml_is_an_error_on_the_manifest(operator: User, queue: ClusterQueue) -> None:
    response = ui_client_for(operator).post(URL, {"namespace": "team-a",
                                               "manifest": "kind: Job\n  bad: [indent"})
    body = response.content.decode()
    assert 'data-path="manifest"' in body
    assert not Job.objects.exists()


def test_several_documents_are_refused(operator: User, queue: ClusterQueue) -> None:
    text = as_yaml(job_manifest("a", "lq-cq")) + as_yaml(job_manifest("b", "lq-cq"))
    body = ui_client_for(operator).post(URL, {"namespace": "team-a", "manifest": text}
                                     ).content.decode()
    assert "expected one Job, found 2 documents" in body
    assert not Job.objects.exists()


def test_yaml_aliases_are_refused(operator: User, queue: ClusterQueue) -> None:
    text = "a: &x [1, 2]\nb: *x\n"
    body = ui_client_for(operator).post(URL, {"namespace": "team-a", "manifest": text}
                                     ).content.decode()
    assert 'data-path="manifest"' in body
    assert not Job.objects.exists()


def test_an_oversized_manifest_is_refused(
    operator: User, queue: ClusterQueue, settings: object
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MAX_MANIFEST_BYTES": 200}  # type: ignore[attr-defined]
    text = as_yaml(job_manifest("big", "lq-cq", labels={"pad": "x" * 300}))
    body = ui_client_for(operator).post(URL, {"namespace": "team-a", "manifest": text}
                                     ).content.decode()
    assert "larger than 200 bytes" in body
    assert not Job.objects.exists()


def test_an_operator_may_not_submit_outside_their_namespaces(
    operator: User, queue: ClusterQueue
) -> None:
    response = ui_client_for(operator).post(URL, {
        "namespace": "team-b", "manifest": as_yaml(job_manifest("x", "lq-cq-b"))})
    assert response.status_code == 200
    assert 'id="namespace-errors"' in response.content.decode()
    assert not Job.objects.exists()


def test_a_taken_name_is_an_error_on_the_name(operator: User, queue: ClusterQueue) -> None:
    client = ui_client_for(operator)
    data = {"namespace": "team-a", "manifest": as_yaml(job_manifest("dup", "lq-cq"))}
    assert client.post(URL, data).status_code == 302
    body = client.post(URL, data).content.decode()
    assert 'data-path="metadata.name"' in body
    assert "already exists" in body
    assert Job.objects.count() == 1


def test_a_missing_namespace_is_reported(operator: User, queue: ClusterQueue) -> None:
    response = ui_client_for(operator).post(URL, {
        "namespace": "", "manifest": as_yaml(job_manifest("x", "lq-cq"))})
    assert response.status_code == 200
    assert 'id="namespace-errors"' in response.content.decode()
    assert not Job.objects.exists()
