"""The extension point: a job kind defined here, registered with one line, is submitted
through the real service and runs to completion on the simulated cluster through the
generic reconciler, without any other module knowing it."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.urls import reverse
from rest_framework.test import APIClient

from multicluster.models import Cluster, Pod
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.validation import FieldError
from scheduling.workload import conditions as cond
from scheduling.workload import slices as elastic
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import Reconcilers

pytestmark = pytest.mark.django_db

POD_SET = "workers"


# Where a Sleeper's count lives: a worker group's replicas, as a RayCluster has them.
REPLICAS_PATH = "spec.workerGroups[0].replicas"


def replicas(manifest: Mapping[str, Any]) -> Any:
    groups = (manifest.get("spec") or {}).get("workerGroups") or [{}]
    return groups[0].get("replicas")


class SleeperController(jobframework.SimulatedController):
    """Runs every replica once; done when all of them succeeded. An elastic Sleeper runs as
    many replicas as its slice allows now (scale-down: the newest pods go)."""

    def reconcile(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any],
        pods: jobframework.SimulatedPods, *, admitted: int, allowed: int, elastic: bool,
        now: datetime,
    ) -> tuple[dict[str, Any], jobframework.JobReport]:
        target = allowed if elastic else admitted
        every = pods.all()
        succeeded = sum(p.phase == "Succeeded" for p in every)
        running = [p for p in every if p.phase in ("Pending", "Running")]
        ready = sum(p.ready for p in every)
        new_status = dict(status)
        finished = None
        if target > 0 and succeeded >= target:
            new_status["conditions"] = cond.set_condition(
                status.get("conditions", []), "Done", True, "AllReplicasDone", "", now=now)
            finished = ("Succeeded", "every replica is done")
        elif len(running) > target - succeeded:
            pods.delete(running[max(target - succeeded, 0):], reason="SuccessfulDelete")
            running = running[:max(target - succeeded, 0)]
        elif target - succeeded - len(running) > 0:
            running += pods.create(target - succeeded - len(running))
        new_status.update(active=len(running), succeeded=succeeded)
        return new_status, jobframework.JobReport(
            parallelism=target, completions=target, active=len(running), ready=ready,
            succeeded=succeeded, failed=0, finished=finished,
            # A replica that is done gives its slot back (as a RayJob's do).
            reclaimable_pods={POD_SET: succeeded} if succeeded and not finished else {})


class Sleeper(jobframework.GenericJob):
    """``spec.workerGroups[0].replicas`` pods of ``spec.template``, each running once;
    elastic: the replicas may change while it runs."""

    framework_name = "example.kueueweb.io/sleeper"
    api_version = "example.kueueweb.io/v1"
    kind = "Sleeper"
    plural = "sleepers"
    elastic = True
    simulated = SleeperController()

    def validate_on_create(self, manifest: Mapping[str, Any], *, namespace: str,
                           slices_enabled: bool) -> list[FieldError]:
        errors, labels, _ = jobframework.validate_object(
            manifest, api_version=self.api_version, kind=self.kind, namespace=namespace)
        spec = manifest.get("spec") or {}
        jobframework.int_value(replicas(manifest), REPLICAS_PATH, errors, minimum=1)
        errors += jobframework.validate_pod_template(spec.get("template"), "spec.template",
                                                     for_job=True)
        return errors + jobframework.validate_kueue_labels(labels)

    def pod_sets(self, manifest: Mapping[str, Any], *,
                 partial_admission: bool) -> list[dict[str, Any]]:
        return [{"name": POD_SET, "count": replicas(manifest),
                 "template": copy.deepcopy(manifest["spec"]["template"])}]

    def scalable_pod_sets(self, manifest: Mapping[str, Any]
                          ) -> list[jobframework.ScalablePodSet]:
        return [jobframework.ScalablePodSet(POD_SET, REPLICAS_PATH, int(replicas(manifest)))]

    def run_with_pod_sets_info(self, manifest: Mapping[str, Any],
                               infos: Sequence[jobframework.PodSetInfo]) -> dict[str, Any]:
        result = self.suspend(manifest, False)
        result["spec"]["template"] = jobframework.merge_into_template(
            manifest["spec"]["template"], infos[0])
        return result

    def restore_pod_sets_info(self, manifest: Mapping[str, Any],
                              pod_sets: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        result = dict(manifest)
        result["spec"] = {**manifest["spec"], "template": jobframework.restore_template(
            manifest["spec"]["template"], pod_sets[0]["template"])}
        return result

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        if cond.is_true((status or {}).get("conditions", []), "Done"):
            return "Succeeded", "every replica is done"
        return None

    def report(self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
               ready_pods: int) -> jobframework.JobReport:
        return jobframework.JobReport(
            parallelism=wanted, completions=wanted, active=int(status.get("active", 0)),
            ready=ready_pods, succeeded=int(status.get("succeeded", 0)), failed=0,
            finished=self.finished(status))

    def remote_copy(self, manifest: Mapping[str, Any], *, namespace: str,
                    labels: Mapping[str, str], pod_labels: Mapping[str, str],
                    infos: Sequence[jobframework.PodSetInfo],
                    gang_workload: str | None = None) -> dict[str, Any]:
        return self.run_with_pod_sets_info(manifest, infos)


@pytest.fixture
def sleeper(settings: Any) -> Iterator[jobframework.GenericJob]:
    """The Sleeper kind, registered and enabled for one test."""
    kind = registry.register(Sleeper())
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        "batch/job", Sleeper.framework_name]}
    yield kind
    registry.unregister(Sleeper.framework_name)


def sleeper_manifest(name: str, queue: str, *, replicas: int = 2, run_seconds: int = 10,
                     elastic: bool = False) -> dict[str, Any]:
    annotations = {"kueueweb.io/run-seconds": str(run_seconds)}
    if elastic:
        annotations[jobframework.ELASTIC_JOB_ANNOTATION] = "true"
    return {
        "apiVersion": "example.kueueweb.io/v1", "kind": "Sleeper",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue},
                     "annotations": annotations},
        "spec": {"workerGroups": [{"replicas": replicas}], "template": {"spec": {"containers": [
            {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}}},
    }


def test_a_registered_kind_runs_to_completion_on_the_simulated_cluster(
    sleeper: jobframework.GenericJob, make_queue: Callable[..., ClusterQueue],
    reconcilers: Reconcilers, manager: Cluster, t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "4"})

    job = services.submit_job(sleeper_manifest("nap", "lq-cq", replicas=3), namespace="ns")
    wl = Workload.objects.get(job=job)
    assert (job.api_version, job.kind, job.suspend) == ("example.kueueweb.io/v1", "Sleeper", True)
    assert wl.name.startswith("sleeper-nap-")
    assert [(ps["name"], ps["count"]) for ps in wl.pod_sets] == [(POD_SET, 3)]

    reconcilers.step(t0)
    job.refresh_from_db()
    assert not job.suspend
    assert sorted(Pod.objects.filter(job=job).values_list("pod_set", flat=True)) == [POD_SET] * 3

    reconcilers.step(t0 + timedelta(seconds=30))

    job.refresh_from_db()
    wl.refresh_from_db()
    assert sleeper.finished(job.status) == ("Succeeded", "every replica is done")
    assert wl.phase == WorkloadPhase.FINISHED
    assert cond.find(wl.conditions, "Finished")["reason"] == "Succeeded"
    reasons = set(Event.objects.filter(workload=wl, object_kind="Sleeper")
                  .values_list("reason", flat=True))
    assert {"CreatedWorkload", "Started"} <= reasons


def test_a_kind_that_is_not_enabled_is_refused_on_its_kind(
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("cq", {"cpu": "4"})
    registry.register(Sleeper())
    try:
        with pytest.raises(ValidationError) as caught:
            services.submit_job(sleeper_manifest("nap", "lq-cq"), namespace="ns")
    finally:
        registry.unregister(Sleeper.framework_name)

    assert list(caught.value.message_dict) == ["kind"]
    assert "enabled: batch/v1 Job" in caught.value.message_dict["kind"][0]
    assert not Job.objects.filter(name="nap").exists()


def test_an_unknown_framework_name_fails_at_startup(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB,
                         "INTEGRATIONS_FRAMEWORKS": ["batch/job", "batch/cronjob"]}

    with pytest.raises(ImproperlyConfigured, match="unknown job framework 'batch/cronjob'"):
        apps.get_app_config("scheduling").ready()


def test_kinds_are_found_by_kind_and_by_framework_name(sleeper: jobframework.GenericJob) -> None:
    assert registry.by_kind("example.kueueweb.io/v1", "Sleeper") is sleeper
    assert registry.by_framework("example.kueueweb.io/sleeper") is sleeper
    assert registry.by_framework("batch/job") is registry.by_kind("batch/v1", "Job")
    assert registry.by_kind("apps/v1", "ReplicaSet") is None
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Sleeper())


# =========================================================================================
# An elastic kind: scaled through the job framework, not through spec.parallelism
# =========================================================================================


def slices_of(job: Job) -> list[Workload]:
    return elastic.ordered(Workload.objects.filter(job=job))


def running_pods(job: Job) -> int:
    return Pod.objects.filter(job=job, phase__in=("Pending", "Running")).count()


@pytest.fixture
def running_sleeper(sleeper: jobframework.GenericJob, make_queue: Callable[..., ClusterQueue],
                    reconcilers: Reconcilers, t0: datetime) -> Job:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(sleeper_manifest("nap", "lq-cq", replicas=2, run_seconds=1000,
                                               elastic=True), namespace="ns")
    reconcilers.step(t0)
    (wl,) = slices_of(job)
    assert wl.phase == WorkloadPhase.ADMITTED
    assert running_pods(job) == 2
    return Job.objects.get(pk=job.pk)


def test_an_elastic_kind_scales_up_through_a_slice_and_down_in_place_over_rest(
    running_sleeper: Job, admin_client_api: APIClient, reconcilers: Reconcilers, t0: datetime,
) -> None:
    url = "/api/v1/namespaces/ns/jobs/nap/"
    (first,) = slices_of(running_sleeper)

    response = admin_client_api.post(f"{url}scale/", {"podSets": [
        {"name": POD_SET, "count": 3}]}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["spec"]["workerGroups"] == [{"replicas": 3}]
    assert response.json()["kind"] == "Sleeper"
    first, second = slices_of(running_sleeper)
    assert second.annotations[elastic.WORKLOAD_SLICE_REPLACEMENT_FOR] == f"ns/{first.name}"
    assert [(ps["name"], ps["count"]) for ps in second.pod_sets] == [(POD_SET, 3)]
    reconcilers.step(t0 + timedelta(seconds=5))
    first.refresh_from_db()
    second.refresh_from_db()
    assert cond.find(first.conditions, "Finished")["reason"] == elastic.REASON_SLICE_REPLACED
    assert second.phase == WorkloadPhase.ADMITTED
    assert running_pods(running_sleeper) == 3

    # A merge patch of the worker group's replicas (lists are replaced whole) shrinks the
    # admitted slice in place and frees its quota at once.
    response = admin_client_api.patch(url, json.dumps(
        {"spec": {"workerGroups": [{"replicas": 1}]}}), content_type="application/merge-patch+json")

    assert response.status_code == 200, response.json()
    assert [wl.pk for wl in slices_of(running_sleeper)] == [first.pk, second.pk]
    second.refresh_from_db()
    assert second.pod_sets[0]["count"] == 1
    reconcilers.step(t0 + timedelta(seconds=10))
    assert running_pods(running_sleeper) == 1
    reasons = list(Event.objects.filter(workload=second, object_kind="Sleeper")
                   .values_list("reason", "message"))
    assert ("ScaledDown", f"{REPLICAS_PATH} changed from 3 to 1: slice {second.name} shrank "
            "in place from 3 to 1 pod(s); their quota is free") in reasons


@pytest.mark.parametrize(("body", "field"), [
    ({"podSets": [{"name": POD_SET, "count": -1}]}, REPLICAS_PATH),
    ({"podSets": [{"name": "head", "count": 1}]}, "podSets"),
    ({"podSets": [{"count": 1}]}, "podSets[0].name"),
    ({"parallelism": 3}, "parallelism"),  # a Job's shorthand: not this kind's field
    ({}, "podSets"),
])
def test_a_bad_scale_of_an_elastic_kind_names_the_field(
    running_sleeper: Job, admin_client_api: APIClient, body: dict[str, Any], field: str,
) -> None:
    response = admin_client_api.post("/api/v1/namespaces/ns/jobs/nap/scale/", body,
                                     format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert Job.objects.get(pk=running_sleeper.pk).manifest["spec"]["workerGroups"] == [
        {"replicas": 2}]
    assert len(slices_of(running_sleeper)) == 1


def test_a_patch_may_change_only_the_fields_the_kind_scales(
    running_sleeper: Job, admin_client_api: APIClient,
) -> None:
    response = admin_client_api.patch("/api/v1/namespaces/ns/jobs/nap/", json.dumps(
        {"metadata": {"labels": {"team": "x"}}}), content_type="application/merge-patch+json")

    assert response.status_code == 400
    assert response.json() == {"metadata.labels": [
        f"cannot be changed: a patch may change {REPLICAS_PATH} only"]}


def test_the_scale_control_has_a_field_for_the_kinds_pod_set(
    running_sleeper: Job, admin_user: User, reconcilers: Reconcilers, t0: datetime,
) -> None:
    client = ui_client_for(admin_user)
    page = reverse("ui-job", kwargs={"cluster": running_sleeper.cluster.name,
                                     "namespace": "ns", "kind": "Sleeper", "name": "nap"})
    body = client.get(page).content.decode()
    assert "example.kueueweb.io/v1 Sleeper in namespace" in body
    assert (f'<label for="scale-podSets-{POD_SET}" class="inline-label" '
            f'title="{REPLICAS_PATH}">Pod set {POD_SET}</label>') in body
    assert f'id="scale-podSets-{POD_SET}" name="podSets.{POD_SET}"' in body
    assert 'data-confirm-template="Scale job ns/nap from pod set workers 2 to {n}?"' in body

    response = client.post(reverse("ui-job-scale", kwargs={
        "cluster": running_sleeper.cluster.name, "namespace": "ns", "kind": "Sleeper",
        "name": "nap"}),
        {f"podSets.{POD_SET}": "1", "next": page}, follow=True)

    assert "scaled down from 2 to 1" in response.content.decode()
    (wl,) = slices_of(running_sleeper)
    assert wl.pod_sets[0]["count"] == 1


def test_the_kind_reports_reclaimable_pods_and_the_workload_names_its_owner_by_kind(
    sleeper: jobframework.GenericJob, make_queue: Callable[..., ClusterQueue],
    reconcilers: Reconcilers, admin_client_api: APIClient, t0: datetime,
) -> None:
    make_queue("cq", {"cpu": "4"})
    job = services.submit_job(sleeper_manifest("nap", "lq-cq", replicas=3), namespace="ns")
    reconcilers.step(t0)
    (wl,) = slices_of(job)
    # One replica is done before the others: the kind says its slot is free, and the
    # workload lifecycle records it as the kind gave it.
    done = Pod.objects.filter(job=job).order_by("name").first()
    assert done is not None
    Pod.objects.filter(pk=done.pk).update(phase="Succeeded")
    Pod.objects.filter(job=job).exclude(pk=done.pk).update(finish_at=t0 + timedelta(hours=1))

    reconcilers.step(t0 + timedelta(seconds=5))

    wl.refresh_from_db()
    assert wl.reclaimable_pods == [{"name": POD_SET, "count": 1}]
    assert Event.objects.filter(workload=wl, reason="ReclaimablePods",
                                message=f"1 pod(s) of pod set {POD_SET} no longer need "
                                "quota").exists()
    owner = admin_client_api.get(f"/api/v1/namespaces/ns/workloads/{wl.name}/").json()[
        "metadata"]["ownerReferences"]
    assert [(o["apiVersion"], o["kind"], o["name"]) for o in owner] == [
        ("example.kueueweb.io/v1", "Sleeper", "nap")]
