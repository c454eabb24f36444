"""Job pages of several kinds: addressed by kind and name, showing the kind's pod sets with
their requests and pods, and a name two kinds share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.urls import reverse

from scheduling import services
from scheduling.jobs.examples import example_for
from scheduling.jobs.jobset import JobSet
from scheduling.models import ClusterQueue, Job
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import Reconcilers, job_manifest

pytestmark = pytest.mark.django_db


def jobset_manifest(name: str) -> dict[str, Any]:
    text = example_for(JobSet())
    assert text is not None
    manifest = yaml.safe_load(text)
    manifest["metadata"] = {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "lq-cq"}}
    return manifest


def page(job: Job, suffix: str = "") -> str:
    return reverse("ui-job", kwargs={"cluster": job.cluster.name, "namespace": job.namespace,
                                     "kind": job.kind, "name": job.name}) + suffix


def by_name(name: str) -> str:
    return reverse("ui-job-by-name", kwargs={"cluster": "manager", "namespace": "team-a",
                                             "name": name})


@pytest.fixture
def queue(make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    return make_queue("cq", {"cpu": "8", "memory": "8Gi"}, namespace="team-a")


def test_the_page_shows_the_pod_sets_with_their_requests_and_pods(
    viewer: User, queue: ClusterQueue, reconcilers: Reconcilers, t0: Any,
) -> None:
    job = services.submit_job(jobset_manifest("fanout"), namespace="team-a")
    client = ui_client_for(viewer)

    body = client.get(page(job)).content.decode()
    assert "jobset.x-k8s.io/v1alpha2 JobSet in namespace" in body
    assert ('<tr data-pod-set="coordinator" data-count="1" data-min-count="" data-pods="0" '
            'data-running="0">') in body
    assert ('<tr data-pod-set="workers" data-count="2" data-min-count="" data-pods="0" '
            'data-running="0">') in body
    assert "<code>cpu: 500m</code>, <code>memory: 100Mi</code>" in body
    assert "<code>cpu: 1</code>, <code>memory: 200Mi</code>" in body

    reconcilers.step(t0)
    reconcilers.step(t0 + timedelta(seconds=5))
    pods = client.get(page(job, "partial/pods/")).content.decode()
    assert ('<tr data-pod-set="workers" data-count="2" data-min-count="" data-pods="2" '
            'data-running="2">') in pods
    assert ('<tr data-pod-set="coordinator" data-count="1" data-min-count="" data-pods="1" '
            'data-running="1">') in pods
    assert pods.count('<tr data-pod="fanout-') == 3


def test_the_pod_sets_show_min_count_under_partial_admission(
    viewer: User, queue: ClusterQueue,
) -> None:
    manifest = job_manifest("partial", "lq-cq", parallelism=4)
    manifest["metadata"]["annotations"] = {"kueue.x-k8s.io/job-min-parallelism": "2"}
    job = services.submit_job(manifest, namespace="team-a")

    body = ui_client_for(viewer).get(page(job)).content.decode()
    assert '<tr data-pod-set="main" data-count="4" data-min-count="2"' in body


def test_two_kinds_of_one_name_have_a_page_each(viewer: User, queue: ClusterQueue) -> None:
    job = services.submit_job(job_manifest("twin", "lq-cq"), namespace="team-a")
    jobset = services.submit_job(jobset_manifest("twin"), namespace="team-a")
    client = ui_client_for(viewer)

    assert page(job).endswith("/jobs/Job/twin/")
    job_body = client.get(page(job)).content.decode()
    jobset_body = client.get(page(jobset)).content.decode()
    assert "batch/v1 Job in namespace" in job_body
    assert "jobset.x-k8s.io/v1alpha2 JobSet in namespace" in jobset_body
    # Each page's live regions and scale form address the same job.
    assert page(jobset, "partial/pods/") in jobset_body
    assert page(job, "partial/pods/") in job_body
    assert page(jobset, "partial/pods/") not in job_body
    # The kind is read case-insensitively; an unknown one is not found.
    assert client.get(page(job).replace("/Job/", "/job/")).status_code == 200
    assert client.get(page(job).replace("/Job/", "/RayJob/")).status_code == 404
    assert client.get(page(job).replace("/Job/", "/no-such!/")).status_code == 404

    # By name alone: the jobs of that name to choose from.
    choose = client.get(by_name("twin"))
    assert choose.status_code == 200
    body = choose.content.decode()
    assert f'<a href="{page(job)}">' in body
    assert f'<a href="{page(jobset)}">' in body

    services.delete_job(job)
    assert client.get(page(job)).status_code == 404
    assert client.get(page(jobset)).status_code == 200
    response = client.get(by_name("twin"))
    assert (response.status_code, response["Location"]) == (302, page(jobset))
    assert client.get(by_name("nope")).status_code == 404


def test_the_workload_page_links_to_its_jobs_page(viewer: User, queue: ClusterQueue) -> None:
    jobset = services.submit_job(jobset_manifest("linked"), namespace="team-a")
    wl = jobset.workloads.get()
    body = ui_client_for(viewer).get(reverse("ui-workload", kwargs={
        "cluster": "manager", "namespace": "team-a", "name": wl.name})).content.decode()
    assert f'href="{page(jobset)}"' in body
