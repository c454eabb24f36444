"""The extension point: a job kind defined here, registered with one line, is submitted
through the real service and runs to completion on the simulated cluster through the
generic reconciler, without any other module knowing it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured, ValidationError

from multicluster.models import Cluster, Pod
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.jobframework import registry
from scheduling.models import ClusterQueue, Event, Job, Workload
from scheduling.validation import FieldError
from scheduling.workload import conditions as cond
from tests.fixtures.scheduling import Reconcilers

pytestmark = pytest.mark.django_db

POD_SET = "workers"


class SleeperController(jobframework.SimulatedController):
    """Runs every admitted replica once; done when all of them succeeded."""

    def reconcile(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any],
        pods: jobframework.SimulatedPods, *, admitted: int, allowed: int, elastic: bool,
        now: datetime,
    ) -> tuple[dict[str, Any], jobframework.JobReport]:
        every = pods.all()
        succeeded = sum(p.phase == "Succeeded" for p in every)
        active = sum(p.phase in ("Pending", "Running") for p in every)
        ready = sum(p.ready for p in every)
        new_status = dict(status)
        finished = None
        if succeeded >= admitted:
            new_status["conditions"] = cond.set_condition(
                status.get("conditions", []), "Done", True, "AllReplicasDone", "", now=now)
            finished = ("Succeeded", "every replica is done")
        elif admitted - succeeded - active > 0:
            pods.create(admitted - succeeded - active)
            active = admitted - succeeded
        new_status.update(active=active, succeeded=succeeded)
        return new_status, jobframework.JobReport(
            parallelism=admitted, completions=admitted, active=active, ready=ready,
            succeeded=succeeded, failed=0, finished=finished)


class Sleeper(jobframework.GenericJob):
    """``spec.replicas`` pods of ``spec.template``, each running once."""

    framework_name = "example.kueueweb.io/sleeper"
    api_version = "example.kueueweb.io/v1"
    kind = "Sleeper"
    plural = "sleepers"
    simulated = SleeperController()

    def validate_on_create(self, manifest: Mapping[str, Any], *, namespace: str,
                           slices_enabled: bool) -> list[FieldError]:
        errors, labels, _ = jobframework.validate_object(
            manifest, api_version=self.api_version, kind=self.kind, namespace=namespace)
        spec = manifest.get("spec") or {}
        jobframework.int_value(spec.get("replicas"), "spec.replicas", errors, minimum=1)
        errors += jobframework.validate_pod_template(spec.get("template"), "spec.template",
                                                     for_job=True)
        return errors + jobframework.validate_kueue_labels(labels)

    def pod_sets(self, manifest: Mapping[str, Any], *,
                 partial_admission: bool) -> list[dict[str, Any]]:
        spec = manifest["spec"]
        return [{"name": POD_SET, "count": spec["replicas"],
                 "template": copy.deepcopy(spec["template"])}]

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


def sleeper_manifest(name: str, queue: str, *, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "example.kueueweb.io/v1", "kind": "Sleeper",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": queue},
                     "annotations": {"kueueweb.io/run-seconds": "10"}},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
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
    assert registry.by_kind("batch/v1", "CronJob") is None
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Sleeper())
