"""batch/v1 CronJob (``scheduling.jobs.cronjob`` and the reconciler ``scheduling.cronjobs``):
the CronJob makes no Workload; each due schedule time creates a Job that queues and is
admitted like any submitted Job, as Kueue's CronJob example shows."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings as django_settings
from rest_framework.test import APIClient

from kueueweb import reconcile
from multicluster.choices import ClusterRole
from multicluster.models import Cluster
from scheduling import cronjobs, jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs.cronjob import (
    SCHEDULED_TIMESTAMP_ANNOTATION,
    ChildJob,
    CronJob,
    job_name,
)
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, Workload
from tests.fixtures.scheduling import Reconcilers
from tests.multicluster.test_dispatch import Everything, hub  # noqa: F401  (the fixture)

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "sample-cronjob.yaml")
KIND = CronJob()
URL = "/api/v1/namespaces/default/jobs/"
QUEUE = jobframework.QUEUE_NAME_LABEL


@pytest.fixture
def user_queue(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> ClusterQueue:
    """The example's LocalQueue, on a cluster queue with room for two of its Jobs."""
    cq = make_queue("cq", {"cpu": "6", "memory": "8G"}, namespace="default")
    LocalQueue.objects.create(cluster=manager, namespace="default", name="user-queue",
                              cluster_queue=cq)
    return cq


def sample(**spec: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    manifest["spec"].update(spec)
    return manifest


def submit(client: APIClient, manifest: dict[str, Any] | None = None) -> Job:
    if manifest is None:
        response = client.generic("POST", URL, SAMPLE.read_bytes(),
                                  content_type="application/yaml")
    else:
        response = client.post(URL, manifest, format="json")
    assert response.status_code == 201, response.json()
    return Job.objects.get(kind="CronJob")


def first_due(cronjob: Job) -> datetime:
    """A whole minute at least 2 s after the CronJob's creation (on the real clock), so that
    the Jobs the test's passes create are older than the steps that follow them."""
    moment = cronjob.created_at + timedelta(seconds=2)
    return moment.replace(second=0, microsecond=0) + timedelta(minutes=1)


def succeeded(job: Job) -> bool:
    job.refresh_from_db()
    return registry.integration_for(job).finished(job.status) == (
        "Succeeded", "Job finished successfully")


def children(cronjob: Job) -> list[Job]:
    return sorted(Job.objects.filter(kind="Job", name__startswith=f"{cronjob.name}-"),
                  key=lambda job: job.name)


# --- Submission and validation --------------------------------------------------------------


@pytest.mark.django_db
def test_kueue_sample_cronjob_is_accepted_unchanged_and_makes_no_workload(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    response = admin_client_api.generic("POST", URL, SAMPLE.read_bytes(),
                                        content_type="application/yaml")

    assert response.status_code == 201, response.json()
    assert response.json()["spec"] == sample()["spec"]
    cronjob = Job.objects.get(name="sample-cronjob")
    assert (cronjob.api_version, cronjob.kind) == ("batch/v1", "CronJob")
    # It runs no pods itself, so no cluster backend takes it for a running job.
    assert cronjob.suspend
    assert not KIND.is_suspended(cronjob.manifest)
    # The queue label stays on the template; the CronJob itself is not queued.
    assert QUEUE not in (cronjob.manifest["metadata"].get("labels") or {})
    assert not Workload.objects.exists()


def _refused(client: APIClient, manifest: dict[str, Any]) -> dict[str, Any]:
    response = client.post(URL, manifest, format="json")
    assert response.status_code == 400, response.json()
    assert not Job.objects.exists()
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.django_db
@pytest.mark.parametrize(("change", "path", "words"), [
    ({"schedule": "* * * *"}, "spec.schedule", "exactly 5 fields"),
    ({"schedule": "61 * * * *"}, "spec.schedule", "not a valid cron schedule"),
    ({"schedule": "*/5 * * * * *"}, "spec.schedule", "found 6"),
    ({"schedule": "@every 1h"}, "spec.schedule", "unrecognized descriptor"),
    ({"schedule": "CRON_TZ=UTC * * * * *"}, "spec.schedule", "use the timeZone field"),
    ({"schedule": ""}, "spec.schedule", "is required"),
    ({"timeZone": "Mars/Olympus_Mons"}, "spec.timeZone", "unknown time zone"),
    ({"concurrencyPolicy": "Sometimes"}, "spec.concurrencyPolicy", '"Forbid"'),
    ({"suspend": "yes"}, "spec.suspend", "boolean"),
    ({"startingDeadlineSeconds": -1}, "spec.startingDeadlineSeconds", "greater than or equal"),
    ({"successfulJobsHistoryLimit": -1}, "spec.successfulJobsHistoryLimit", "greater than"),
    ({"failedJobsHistoryLimit": "1"}, "spec.failedJobsHistoryLimit", "integer"),
    ({"jobTemplate": None}, "spec.jobTemplate", "is required"),
])
def test_an_invalid_cronjob_is_refused_naming_the_field(
    admin_client_api: APIClient, user_queue: ClusterQueue, change: dict[str, Any], path: str,
    words: str,
) -> None:
    body = _refused(admin_client_api, sample(**change))

    assert path in body, body
    assert words in " ".join(body[path])


@pytest.mark.django_db
def test_the_job_template_is_validated_as_the_jobs_it_creates(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    manifest = sample()
    manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    manifest["spec"]["jobTemplate"]["metadata"]["labels"][QUEUE] = "Not_A_Queue"

    body = _refused(admin_client_api, manifest)

    assert "spec.jobTemplate.spec.template.spec.restartPolicy" in body
    assert f"spec.jobTemplate.metadata.labels[{QUEUE}]" in body


@pytest.mark.django_db
def test_a_cronjob_name_leaves_room_for_the_schedule_time(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    manifest = sample()
    manifest["metadata"]["name"] = "c" * 53

    assert "52 characters" in " ".join(_refused(admin_client_api, manifest)["metadata.name"])


@pytest.mark.django_db
def test_the_template_must_name_a_queue_when_there_is_no_default_one(
    admin_client_api: APIClient, user_queue: ClusterQueue,
) -> None:
    manifest = sample()
    del manifest["spec"]["jobTemplate"]["metadata"]["labels"][QUEUE]

    body = _refused(admin_client_api, manifest)

    assert "LocalQueue" in " ".join(body[f"spec.jobTemplate.metadata.labels[{QUEUE}]"])


def test_cronjob_is_enabled_with_the_jobs_it_creates_and_is_no_framework_of_its_own() -> None:
    manifest = sample()

    assert registry.enabled_for(manifest, {"INTEGRATIONS_FRAMEWORKS": ["batch/job"]})[0] is (
        registry.by_kind("batch/v1", "CronJob"))
    integration, errors = registry.enabled_for(
        manifest, {"INTEGRATIONS_FRAMEWORKS": ["jobset.x-k8s.io/jobset"]})
    assert integration is None
    assert errors[0].path == "kind"
    assert registry.check_frameworks(["batch/cronjob"])
    assert all(i.kind != "CronJob" for i in registry.registered())
    with pytest.raises(LookupError, match="CronJob"):
        registry.integration_for(KIND)


def test_the_cronjob_reconciler_runs_with_the_periodic_tasks() -> None:
    entry = django_settings.CELERY_BEAT_SCHEDULE["cronjobs"]

    assert entry["task"] == reconcile.CRONJOB_ALL_TASK
    assert 0 < entry["schedule"] <= 60


# --- The controller's decisions, pure ------------------------------------------------------

T = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
STORED = {**sample(), "metadata": {"name": "cj", "namespace": "default", "uid": "u-1"}}


def child(name: str, minutes: int, finished: str | None = None) -> ChildJob:
    return ChildJob(name=name, uid=f"uid-{name}", started_at=T + timedelta(minutes=minutes),
                    finished=finished,
                    completed_at=T + timedelta(minutes=minutes, seconds=30) if finished else None)


def with_spec(**spec: Any) -> dict[str, Any]:
    manifest = copy.deepcopy(STORED)
    manifest["spec"].update(spec)
    return manifest


def test_the_job_for_a_schedule_time_is_named_labelled_and_owned_as_kubernetes_makes_it() -> None:
    job = KIND.job_for(STORED, T)

    assert job["metadata"]["name"] == f"cj-{int(T.timestamp()) // 60}" == job_name("cj", T)
    assert job["metadata"]["labels"] == {QUEUE: "user-queue"}
    assert job["metadata"]["annotations"] == {SCHEDULED_TIMESTAMP_ANNOTATION:
                                              "2025-03-01T12:00:00Z"}
    assert job["metadata"]["ownerReferences"] == [{
        "apiVersion": "batch/v1", "kind": "CronJob", "name": "cj", "uid": "u-1",
        "controller": True, "blockOwnerDeletion": True}]
    assert job["spec"] == STORED["spec"]["jobTemplate"]["spec"]


def test_forbid_skips_a_time_while_a_job_runs_and_replace_deletes_it() -> None:
    running = [child("cj-1", 0)]

    forbid = KIND.plan(with_spec(concurrencyPolicy="Forbid"), {}, running, due=T)
    assert forbid.create is None
    assert forbid.delete == []
    assert "lastScheduleTime" not in forbid.status
    assert [e[1] for e in forbid.events] == ["JobAlreadyActive"]

    replace = KIND.plan(with_spec(concurrencyPolicy="Replace"), {}, running, due=T)
    assert replace.create is not None
    assert replace.delete == [("cj-1", "Replace")]
    assert replace.status["active"] == []
    assert replace.status["lastScheduleTime"] == "2025-03-01T12:00:00Z"

    allow = KIND.plan(STORED, {}, running, due=T)
    assert allow.create is not None
    assert allow.delete == []
    assert [ref["name"] for ref in allow.status["active"]] == ["cj-1"]


def test_history_limits_delete_the_oldest_finished_jobs_beyond_them() -> None:
    jobs = [child("cj-1", 1, "Succeeded"), child("cj-2", 2, "Failed"),
            child("cj-3", 3, "Succeeded"), child("cj-4", 4, "Failed"),
            child("cj-5", 5, "Succeeded"), child("cj-6", 6)]

    defaults = KIND.plan(STORED, {}, jobs, due=None)
    # Kubernetes' defaults: three successful Jobs, one failed.
    assert defaults.delete == [("cj-2", "History")]

    plan = KIND.plan(with_spec(successfulJobsHistoryLimit=1, failedJobsHistoryLimit=0),
                     {"active": [{"name": "cj-5"}]}, jobs, due=None)
    assert sorted(plan.delete) == [("cj-1", "History"), ("cj-2", "History"),
                                   ("cj-3", "History"), ("cj-4", "History")]
    assert [ref["name"] for ref in plan.status["active"]] == ["cj-6"]
    assert plan.status["lastSuccessfulTime"] == "2025-03-01T12:05:30Z"
    assert [e[1:] for e in plan.events] == [
        ("SawCompletedJob", "Saw completed job: cj-5, condition: Complete")]


def test_a_suspended_cronjob_creates_nothing_and_a_created_time_is_not_created_again() -> None:
    assert KIND.plan(with_spec(suspend=True), {}, [], due=T).create is None

    existing = [child(job_name("cj", T), 0)]
    plan = KIND.plan(STORED, {}, existing, due=T)
    assert plan.create is None
    assert plan.status["lastScheduleTime"] == "2025-03-01T12:00:00Z"


def test_starting_deadline_moves_the_earliest_time_still_run() -> None:
    created = T - timedelta(hours=1)
    status = {"lastScheduleTime": "2025-03-01T11:30:00Z"}

    assert KIND.earliest_time(STORED, {}, created_at=created, now=T) == created
    assert KIND.earliest_time(STORED, status, created_at=created, now=T) == (
        T - timedelta(minutes=30))
    assert KIND.earliest_time(with_spec(startingDeadlineSeconds=60), status,
                              created_at=created, now=T) == T - timedelta(minutes=1)


# --- The reconciler, with the Jobs it creates admitted and run ------------------------------


@pytest.mark.django_db
def test_each_due_minute_creates_a_job_that_queues_and_is_admitted(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    cronjob = submit(admin_client_api)
    first = first_due(cronjob)

    cronjobs.sync_all(now=first + timedelta(seconds=1))
    cronjobs.sync_all(now=first + timedelta(seconds=2))  # the same time is run once
    jobs = [j for j in children(cronjob) if j.name == job_name(cronjob.name, first)]
    assert len(jobs) == 1
    assert len(children(cronjob)) == 1
    job = jobs[0]
    assert job.manifest["metadata"]["labels"][QUEUE] == "user-queue"
    assert job.manifest["metadata"]["ownerReferences"][0]["uid"] == str(cronjob.uid)
    workload = Workload.objects.get(job=job)
    assert workload.queue_name == "user-queue"
    assert [(ps["name"], ps["count"]) for ps in workload.pod_sets] == [("main", 3)]

    reconcilers.step(first + timedelta(seconds=2))
    workload.refresh_from_db()
    job.refresh_from_db()
    assert workload.phase == WorkloadPhase.ADMITTED
    assert not job.suspend

    cronjob.refresh_from_db()
    assert cronjob.status["lastScheduleTime"] == first.isoformat().replace("+00:00", "Z")
    assert cronjob.status["active"] == [{"apiVersion": "batch/v1", "kind": "Job",
                                         "name": job.name, "namespace": "default",
                                         "uid": str(job.uid)}]
    assert Event.objects.filter(object_kind="CronJob", object_name=cronjob.name,
                                reason="SuccessfulCreate",
                                message=f"Created job {job.name}").exists()

    # The next minute: a second Job beside the running one (concurrencyPolicy Allow).
    cronjobs.sync_all(now=first + timedelta(minutes=1, seconds=1))
    reconcilers.step(first + timedelta(minutes=1, seconds=2))
    assert len(children(cronjob)) == 2
    assert all(w.phase == WorkloadPhase.ADMITTED for w in Workload.objects.all())


def run_first_job(client: APIClient, reconcilers: Reconcilers,
                  policy: str) -> tuple[Job, datetime]:
    """The example with ``concurrencyPolicy``, its first Job created and admitted."""
    cronjob = submit(client, sample(concurrencyPolicy=policy))
    first = first_due(cronjob)
    cronjobs.sync_all(now=first)
    reconcilers.step(first + timedelta(seconds=1))
    return cronjob, first


@pytest.mark.django_db
def test_forbid_waits_for_the_running_job_then_runs_the_missed_time(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    cronjob, first = run_first_job(admin_client_api, reconcilers, "Forbid")
    second = first + timedelta(minutes=1)

    cronjobs.sync_all(now=second)  # the first Job's pods run 60 s: still running
    assert [j.name for j in children(cronjob)] == [job_name(cronjob.name, first)]
    assert Event.objects.filter(object_name=cronjob.name, reason="JobAlreadyActive").exists()

    for seconds in (10, 20, 30):
        reconcilers.step(second + timedelta(seconds=seconds))
    assert succeeded(children(cronjob)[0])
    cronjobs.sync_all(now=second + timedelta(seconds=30))
    assert [j.name for j in children(cronjob)] == [job_name(cronjob.name, first),
                                                   job_name(cronjob.name, second)]
    cronjob.refresh_from_db()
    assert [ref["name"] for ref in cronjob.status["active"]] == [job_name(cronjob.name, second)]
    assert Event.objects.filter(object_name=cronjob.name, reason="SawCompletedJob").exists()


@pytest.mark.django_db
def test_replace_deletes_the_running_job_and_its_workload(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    cronjob, first = run_first_job(admin_client_api, reconcilers, "Replace")
    replaced = children(cronjob)[0]

    cronjobs.sync_all(now=first + timedelta(minutes=1))

    assert [j.name for j in children(cronjob)] == [
        job_name(cronjob.name, first + timedelta(minutes=1))]
    assert not Workload.objects.filter(job_id=replaced.pk).exists()
    assert Event.objects.filter(object_name=cronjob.name, reason="SuccessfulDelete",
                                message=f"Deleted job {replaced.name}").exists()


@pytest.mark.django_db
def test_history_limit_prunes_the_oldest_successful_jobs(
    admin_client_api: APIClient, user_queue: ClusterQueue, reconcilers: Reconcilers,
    t0: datetime,
) -> None:
    manifest = sample(successfulJobsHistoryLimit=1)
    container = manifest["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    container["command"] = ["sleep", "10"]
    cronjob = submit(admin_client_api, manifest)
    first = first_due(cronjob)

    for minute in range(3):
        at = first + timedelta(minutes=minute)
        cronjobs.sync_all(now=at)
        for seconds in (1, 10, 20, 30):
            reconcilers.step(at + timedelta(seconds=seconds))
    cronjobs.sync_all(now=first + timedelta(minutes=2, seconds=40))

    assert [j.name for j in children(cronjob)] == [
        job_name(cronjob.name, first + timedelta(minutes=2))]
    assert Event.objects.filter(object_name=cronjob.name, reason="SuccessfulDelete").count() == 2
    cronjob.refresh_from_db()
    assert cronjob.status["active"] == []
    assert "lastSuccessfulTime" in cronjob.status


@pytest.mark.django_db
def test_a_suspended_cronjob_creates_no_job(
    admin_client_api: APIClient, user_queue: ClusterQueue, t0: datetime,
) -> None:
    cronjob = submit(admin_client_api, sample(suspend=True))
    first = first_due(cronjob)

    assert KIND.is_suspended(cronjob.manifest)
    for minute in range(3):
        assert cronjobs.sync_cronjob(cronjob.pk, now=first + timedelta(minutes=minute)) is None
    assert children(cronjob) == []


@pytest.mark.django_db
def test_a_time_missed_beyond_the_starting_deadline_is_not_run(
    admin_client_api: APIClient, user_queue: ClusterQueue, t0: datetime,
) -> None:
    cronjob = submit(admin_client_api, sample(startingDeadlineSeconds=10))
    first = first_due(cronjob)

    following = cronjobs.sync_cronjob(cronjob.pk, now=first + timedelta(seconds=30))

    assert children(cronjob) == []
    assert following == first + timedelta(minutes=1)
    cronjobs.sync_cronjob(cronjob.pk, now=first + timedelta(minutes=1, seconds=5))
    assert [j.name for j in children(cronjob)] == [
        job_name(cronjob.name, first + timedelta(minutes=1))]


@pytest.mark.django_db
def test_a_job_refused_at_creation_is_a_failed_create_warning(
    admin_client_api: APIClient, user_queue: ClusterQueue, t0: datetime,
) -> None:
    cronjob = submit(admin_client_api)
    first = first_due(cronjob)
    Job.objects.filter(pk=cronjob.pk).update(manifest={
        **cronjob.manifest, "spec": {**cronjob.manifest["spec"], "jobTemplate": {
            **cronjob.manifest["spec"]["jobTemplate"], "metadata": {"labels": {}}}}})

    cronjobs.sync_all(now=first)

    assert children(cronjob) == []
    warning = Event.objects.get(object_name=cronjob.name, reason="FailedCreate")
    assert QUEUE in warning.message


@pytest.mark.django_db
def test_deleting_the_cronjob_deletes_the_jobs_it_owns(
    admin_client_api: APIClient, user_queue: ClusterQueue, t0: datetime,
) -> None:
    cronjob = submit(admin_client_api)
    first = first_due(cronjob)
    cronjobs.sync_all(now=first)
    assert len(children(cronjob)) == 1

    response = admin_client_api.delete(f"{URL}{cronjob.name}/")
    assert response.status_code == 204
    cronjobs.sync_all(now=first + timedelta(seconds=5))

    assert not Job.objects.exists()
    assert not Workload.objects.exists()


@pytest.mark.django_db
def test_a_cronjob_is_shown_and_listed_but_has_nothing_to_scale(
    admin_client_api: APIClient, admin_ui: Any, user_queue: ClusterQueue,
) -> None:
    cronjob = submit(admin_client_api)

    detail = admin_client_api.get(f"{URL}{cronjob.name}/")
    assert detail.status_code == 200
    assert detail.json()["kind"] == "CronJob"
    assert admin_client_api.get(f"{URL}?kind=CronJob").status_code == 200
    page = admin_ui.get(f"/c/{cronjob.cluster.name}/namespaces/default/jobs/CronJob/{cronjob.name}/")
    assert page.status_code == 200
    assert b"sample-cronjob" in page.content

    scaled = admin_client_api.post(f"{URL}{cronjob.name}/scale/", {"parallelism": 1},
                                   format="json")
    assert scaled.status_code == 400, scaled.json()
    assert "makes no Workload" in str(scaled.json())


@pytest.mark.django_db
@pytest.mark.usefixtures("hub")
def test_a_cronjobs_job_in_a_multikueue_queue_runs_on_a_worker_and_finishes_on_the_hub(
) -> None:
    """The CronJob stays on the hub; each Job it creates is dispatched like a submitted Job."""
    from scheduling import services

    Job.objects.all().delete()
    manifest = sample()
    manifest["metadata"].pop("namespace")
    manifest["spec"]["jobTemplate"]["metadata"]["labels"][QUEUE] = "multikueue-queue"
    manager = Cluster.objects.get(role=ClusterRole.MANAGER)
    cronjob = services.submit_job(manifest, namespace="research", cluster=manager)
    due = first_due(cronjob)
    everything = Everything()

    cronjobs.sync_all(now=due)
    everything.step(due)

    (child,) = [job for job in children(cronjob) if job.cluster_id == manager.pk]
    (wl,) = Workload.objects.filter(job=child)
    assert wl.cluster_name  # the winning worker
    copy_ = Job.objects.get(cluster__name=wl.cluster_name, name=child.name)
    assert copy_.kind == "Job"
    assert not Job.objects.filter(cluster__name=wl.cluster_name, kind="CronJob").exists()

    everything.step(due + timedelta(seconds=40))
    everything.step(due + timedelta(seconds=45))
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    assert succeeded(child)
