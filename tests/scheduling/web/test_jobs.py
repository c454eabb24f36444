"""Job submission from the browser: a YAML manifest, errors shown by field path."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from scheduling.jobframework import GenericJob, JobKind, registry
from scheduling.jobs.examples import example_for
from scheduling.jobs.external import ExternalFramework
from scheduling.manifests.yamlio import dump_documents
from scheduling.models import ClusterQueue, Job, Workload
from scheduling.web.slices import job_url
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

URL = "/jobs/new/"
TRAINING_RUNTIME = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
                    / "trainjobs-2.yaml")


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


def test_the_form_offers_an_example_per_enabled_kind(operator: User, queue: ClusterQueue) -> None:
    enabled = registry.enabled_names(settings.KUEUEWEB)
    kinds = [i.kind for i in registry.all_kinds() if i.enabled_with in enabled]
    body = ui_client_for(operator).get(URL).content.decode()
    offered = re.findall(r'<option value="([A-Za-z]+)"( selected)?>', body)
    # The Job first and chosen; every enabled kind has one.
    assert offered[0] == ("Job", " selected")
    assert sorted(kind for kind, _ in offered) == sorted(kinds)
    # A CronJob comes with the Job it creates; a Deployment and a Pod are off by default.
    assert {"RayCluster", "JobSet", "CronJob"} <= set(kinds)
    assert not {"Deployment", "Pod"} & set(kinds)
    assert 'id="example-texts"' in body


def test_choosing_an_example_puts_it_in_the_editor(operator: User, queue: ClusterQueue) -> None:
    body = ui_client_for(operator).get(URL + "?example=JobSet&namespace=team-a").content.decode()
    assert '<option value="JobSet" selected>' in body
    editor = body[body.index('id="manifest"'):]
    assert "kind: JobSet" in editor[:editor.index("</textarea>")]
    assert 'name="namespace" value="team-a"' in body


def test_an_unknown_example_falls_back_to_the_job(operator: User, queue: ClusterQueue) -> None:
    body = ui_client_for(operator).get(URL + "?example=Nope").content.decode()
    assert '<option value="Job" selected>' in body


def _builtin_kinds() -> list[JobKind]:
    """Every kind kueueweb ships (a MultiKueue external framework, registered from the
    settings, has a spec kueueweb does not know, so no example)."""
    return [i for i in registry.all_kinds() if not isinstance(i, ExternalFramework)]


@pytest.mark.parametrize("kind", sorted(i.kind for i in _builtin_kinds()))
def test_every_example_submits_as_is(
    admin_user: User, make_queue: Callable[..., ClusterQueue], settings: Any, kind: str,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        i.framework_name for i in registry.all_kinds()
        if i.enabled_with == i.framework_name], "TRAINING_RUNTIMES": [
        str(TRAINING_RUNTIME)]}  # the TrainJob example names Trainer's torch-distributed
    cq = make_queue("cq", {"cpu": "20", "memory": "20Gi"}, namespace="team-a")
    cq.local_queues.update(name="user-queue")
    (integration,) = [i for i in _builtin_kinds() if i.kind == kind]
    text = example_for(integration)
    assert text is not None
    body = ui_client_for(admin_user).get(URL + f"?example={kind}").content.decode()
    assert f'<option value="{kind}" selected>' in body

    response = ui_client_for(admin_user).post(URL, {"namespace": "team-a", "manifest": text})

    assert response.status_code == 302, response.content.decode()
    job = Job.objects.get(namespace="team-a", kind=kind)
    assert job.api_version == integration.api_version
    assert job.name.startswith(f"sample-{kind.lower()}-")
    workload = job.workloads.first()
    if isinstance(integration, GenericJob):
        # A kind that makes its Workload: the page of that Workload.
        assert workload is not None
        assert response["Location"] == reverse("ui-workload", kwargs={
            "cluster": job.cluster.name, "namespace": "team-a", "name": workload.name})
    else:
        # A CronJob or a Deployment makes none of its own: the page of the object.
        assert workload is None
        assert response["Location"] == job_url(job)
        assert ui_client_for(admin_user).get(response["Location"]).status_code == 200


def test_every_registered_kind_has_an_example() -> None:
    kinds = [i.kind for i in _builtin_kinds()]
    assert {"CronJob", "Deployment", "Pod", "Job"} <= set(kinds)
    assert [kind for kind, i in zip(kinds, _builtin_kinds(), strict=True)
            if example_for(i) is None] == []
