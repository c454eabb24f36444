"""JobSet (``jobset.x-k8s.io/v1alpha2``): Kueue's JobSet integration
(``pkg/controller/jobs/jobset/{jobset_controller,jobset_webhook,jobset_multikueue_adapter}.go``)
and, on the simulated cluster, the JobSet controller.

* validation: the rules every kind shares, the JobSet API's own rules on its replicated jobs
  (unique DNS-label names, replicas, each template a valid Job spec) and Kueue's labels;
* one pod set per replicated job, in order: name = the replicated job's name in lower case,
  count = replicas × min(parallelism, completions), the Job's pod template, no minCount
  (JobSet has no partial admission and is not elastic);
* started by ``spec.suspend`` = false with each pod set's info merged into its replicated
  job's pod template;
* finished by its ``Completed`` or ``Failed`` condition;
* PodsReady counts child Jobs, not pods: ready + succeeded Jobs reach the sum of replicas;
* reclaimable pods per replicated job: its succeeded Jobs × the pods of one Job;
* ``JobSetController``: the simulated JobSet controller (success policy ``All``, failure
  policy ``maxRestarts``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import MAX_POD_SETS
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    SimulatedController,
    SimulatedPod,
    SimulatedPods,
)
from scheduling.jobframework.podsets import (
    PodSetInfo,
    label_pod_templates,
    merge_into_templates,
    restore_templates,
    templates_priority_class,
)
from scheduling.jobframework.validation import (
    int_value,
    unique_label_name,
    validate_kueue_labels,
    validate_object,
)
from scheduling.jobs.job import DEFAULT_BACKOFF_LIMIT, pods_count, validate_job_spec

REPLICATED_JOBS = "spec.replicatedJobs"
# A child Job is named <jobset>-<replicated job>-<index> and its pods get that name as a
# label value and hostname, so the JobSet API keeps it a DNS label.
MAX_CHILD_JOB_NAME_LENGTH = 63
MAX_NAME_LENGTH = 63
_ACTIVE = ("Pending", "Running")

# The JobSet controller's condition reasons and messages (jobset ``pkg/constants``).
ALL_JOBS_COMPLETED = ("AllJobsCompleted", "jobset completed successfully")
FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = ("ReachedMaxRestarts",
                        "jobset failed due to reaching max number of restarts")


# =========================================================================================
# Replicated jobs
# =========================================================================================


def replicated_jobs(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((manifest.get("spec") or {}).get("replicatedJobs") or ())


def replicas(rj: Mapping[str, Any]) -> int:
    """``replicas``, which the JobSet CRD defaults to 1."""
    value = rj.get("replicas")
    return 1 if value is None else int(value)


def job_spec(rj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = (rj.get("template") or {}).get("spec") or {}
    return spec


def pods_per_job(rj: Mapping[str, Any]) -> int:
    """The pods one child Job runs at once: min(parallelism, completions)."""
    return pods_count(job_spec(rj))


def completions_per_job(rj: Mapping[str, Any]) -> int:
    """The pods one child Job needs to succeed (completions, default parallelism)."""
    spec = job_spec(rj)
    completions = spec.get("completions")
    return pods_count(spec) if completions is None else int(completions)


def pod_set_name(rj: Mapping[str, Any]) -> str:
    return str(rj.get("name", "")).lower()


# =========================================================================================
# Validation
# =========================================================================================


def validate_jobset_manifest(manifest: Any, *, namespace: str) -> list[FieldError]:
    """What the JobSet API and Kueue's JobSet webhook refuse on create."""
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a JobSet manifest must be an object")]
    errors, labels, _ = validate_object(
        manifest, api_version=JobSet.api_version, kind=JobSet.kind, namespace=namespace,
        max_name_length=MAX_NAME_LENGTH)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError("spec.suspend", "must be a boolean"))
    failure_policy = spec.get("failurePolicy")
    if failure_policy is not None:
        if not isinstance(failure_policy, Mapping):
            errors.append(FieldError("spec.failurePolicy", "must be an object"))
        elif failure_policy.get("maxRestarts") is not None:
            int_value(failure_policy["maxRestarts"], "spec.failurePolicy.maxRestarts", errors,
                      minimum=0)
    errors.extend(_validate_replicated_jobs(spec.get("replicatedJobs"),
                                            (manifest.get("metadata") or {}).get("name")))
    errors.extend(validate_kueue_labels(labels))
    return errors


def _validate_replicated_jobs(value: Any, name: Any) -> list[FieldError]:
    if not isinstance(value, list) or not value:
        return [FieldError(REPLICATED_JOBS, "must have at least one item"
                           if value is None or isinstance(value, list) else "must be a list")]
    errors: list[FieldError] = []
    if len(value) > MAX_POD_SETS:
        errors.append(FieldError(REPLICATED_JOBS, f"must have at most {MAX_POD_SETS} items "
                                 "(one pod set each)"))
    seen: set[str] = set()
    for index, rj in enumerate(value):
        path = f"{REPLICATED_JOBS}[{index}]"
        if not isinstance(rj, Mapping):
            errors.append(FieldError(path, "must be an object"))
            continue
        rj_name = rj.get("name")
        unique_label_name(rj_name, f"{path}.name", seen, errors, what="replicated job name")
        count = replicas(rj) if rj.get("replicas") is None else int_value(
            rj["replicas"], f"{path}.replicas", errors, minimum=0)
        if isinstance(name, str) and isinstance(rj_name, str) and count is not None:
            child = f"{name}-{rj_name}-{max(count - 1, 0)}"
            if len(child) > MAX_CHILD_JOB_NAME_LENGTH:
                errors.append(FieldError(f"{path}.name", f"the child Job name {child!r} must "
                                         f"be no more than {MAX_CHILD_JOB_NAME_LENGTH} "
                                         "characters"))
        template = rj.get("template")
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            errors.append(FieldError(f"{path}.template.spec", "is required"))
            continue
        spec_errors, _ = validate_job_spec(_with_default_restart_policy(template["spec"]),
                                           f"{path}.template.spec")
        errors.extend(spec_errors)
    return errors


def _with_default_restart_policy(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    """The JobSet webhook defaults a replicated job's pod ``restartPolicy`` to OnFailure
    (where a bare Job would get Always, which a Job refuses)."""
    template = spec.get("template")
    if not isinstance(template, Mapping):
        return spec
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, Mapping) or "restartPolicy" in pod_spec:
        return spec
    return {**spec, "template": {**template, "spec": {**pod_spec,
                                                      "restartPolicy": "OnFailure"}}}


# =========================================================================================
# Status
# =========================================================================================


def _statuses(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(s.get("name")): s for s in (status or {}).get("replicatedJobsStatus") or ()
            if isinstance(s, Mapping)}


def reclaimable_pods(manifest: Mapping[str, Any], status: Mapping[str, Any] | None
                     ) -> list[dict[str, Any]]:
    """Kueue's ``ReclaimablePods``: per replicated job with 0 < succeeded Jobs <= replicas,
    its succeeded Jobs × the pods of one Job."""
    statuses = _statuses(status)
    result = []
    for rj in replicated_jobs(manifest):
        succeeded = int(statuses.get(str(rj.get("name")), {}).get("succeeded", 0) or 0)
        if 0 < succeeded <= replicas(rj):
            result.append({"name": pod_set_name(rj), "count": succeeded * pods_per_job(rj)})
    return result


def jobset_report(manifest: Mapping[str, Any], status: Mapping[str, Any] | None,
                  finished: tuple[str, str] | None) -> JobReport:
    """The report in child Jobs, as Kueue's JobSet ``PodsReady`` counts: ready + succeeded
    Jobs against the sum of replicas."""
    statuses = _statuses(status).values()
    jobs = sum(replicas(rj) for rj in replicated_jobs(manifest))

    def total(key: str) -> int:
        return sum(int(s.get(key, 0) or 0) for s in statuses)

    return JobReport(parallelism=jobs, completions=jobs, active=total("active"),
                     ready=total("ready"), succeeded=total("succeeded"), failed=total("failed"),
                     finished=finished,
                     reclaimable_pods={r["name"]: r["count"]
                                       for r in reclaimable_pods(manifest, status)})


# =========================================================================================
# The simulated JobSet controller
# =========================================================================================


class JobSetController(SimulatedController):
    """The JobSet controller of the simulated cluster, with the Job controller of its child
    Jobs folded in.

    Each replicated job keeps replicas × min(parallelism, pods still to succeed) pods; its
    Jobs succeed as their pods do (completions per Job). The JobSet completes when every
    replicated job's Jobs completed (success policy ``All``). A child Job fails once its
    failed pods exceed ``backoffLimit``; the JobSet then restarts (every child Job recreated,
    ``status.restarts`` + 1) while ``failurePolicy.maxRestarts`` (default 0) allows, else it
    fails.
    """

    def reconcile(
        self,
        manifest: Mapping[str, Any],
        status: Mapping[str, Any],
        pods: SimulatedPods,
        *,
        admitted: int,
        allowed: int,
        elastic: bool,
        now: datetime,
    ) -> tuple[dict[str, Any], JobReport]:
        new_status = dict(status)
        every = pods.all()
        by_pod_set: dict[str, list[SimulatedPod]] = {}
        for pod in every:
            by_pod_set.setdefault(pod.pod_set, []).append(pod)
        rj_statuses = []
        failed_job = False
        complete = True
        for rj in replicated_jobs(manifest):
            own = by_pod_set.get(pod_set_name(rj), [])
            rj_status, done, failed = self._replicated_job(rj, own, pods)
            rj_statuses.append(rj_status)
            complete = complete and done
            failed_job = failed_job or failed
        finished: tuple[str, str] | None = None
        conditions = list(status.get("conditions") or [])
        if failed_job:
            restarts = int(status.get("restarts", 0) or 0)
            failure_policy = (manifest.get("spec") or {}).get("failurePolicy")
            max_restarts = int((failure_policy or {}).get("maxRestarts", 0) or 0)
            pods.delete(pods.all())
            if restarts < max_restarts:
                # Every child Job is recreated; the next pass creates their pods.
                new_status["restarts"] = restarts + 1
                rj_statuses = [{**s, "active": 0, "ready": 0, "succeeded": 0, "failed": 0}
                               for s in rj_statuses]
            else:
                reason, message = REACHED_MAX_RESTARTS if failure_policy else FAILED_JOBS
                conditions = cond.set_condition(conditions, "Failed", True, reason, message,
                                                now=now)
                finished = ("Failed", message)
                new_status["terminalState"] = "Failed"
        elif complete:
            reason, message = ALL_JOBS_COMPLETED
            conditions = cond.set_condition(conditions, "Completed", True, reason, message,
                                            now=now)
            finished = ("Succeeded", message)
            new_status["terminalState"] = "Completed"
        if conditions:
            new_status["conditions"] = conditions
        new_status["replicatedJobsStatus"] = rj_statuses
        return new_status, jobset_report(manifest, new_status, finished)

    @staticmethod
    def _replicated_job(rj: Mapping[str, Any], own: list[SimulatedPod], pods: SimulatedPods
                        ) -> tuple[dict[str, Any], bool, bool]:
        """One replicated job's pods brought to what its Jobs want; returns its
        ``replicatedJobsStatus`` entry, whether all its Jobs completed, whether one failed."""
        name = pod_set_name(rj)
        count = replicas(rj)
        per_job = pods_per_job(rj)
        completions = completions_per_job(rj)
        backoff_limit = int(job_spec(rj).get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        active = [p for p in own if p.phase in _ACTIVE]
        succeeded_pods = sum(p.phase == "Succeeded" for p in own)
        failed_pods = sum(p.phase == "Failed" for p in own)
        failed = failed_pods > backoff_limit
        target = count * completions
        succeeded_jobs = min(succeeded_pods // completions, count) if completions else count
        done = succeeded_pods >= target
        if not failed and not done:
            missing = min(count * per_job, target - succeeded_pods) - len(active)
            if missing > 0:
                pods.create(missing, pod_set=name)
        ready_pods = sum(p.ready for p in active)
        ready_jobs = min(ready_pods // per_job if per_job else 0, count - succeeded_jobs)
        failed_jobs = int(failed)
        running_jobs = 0 if done else count - succeeded_jobs - failed_jobs
        return ({"name": str(rj.get("name", "")), "ready": ready_jobs,
                 "succeeded": succeeded_jobs, "failed": failed_jobs, "suspended": 0,
                 "active": max(running_jobs, 0)}, done, failed)


# =========================================================================================
# The integration
# =========================================================================================


class JobSet(GenericJob):
    framework_name = "jobset.x-k8s.io/jobset"
    api_version = "jobset.x-k8s.io/v1alpha2"
    kind = "JobSet"
    plural = "jobsets"
    max_name_length = MAX_NAME_LENGTH
    simulated = JobSetController()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_jobset_manifest(manifest, namespace=namespace)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return [{"name": pod_set_name(rj), "count": replicas(rj) * pods_per_job(rj),
                 "template": copy.deepcopy(job_spec(rj).get("template") or {})}
                for rj in replicated_jobs(manifest)]

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(job_spec(rj).get("template"), f"{REPLICATED_JOBS}[{i}].template.spec.template")
                for i, rj in enumerate(replicated_jobs(manifest))]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        """The first replicated job's template that names a ``priorityClassName``."""
        return templates_priority_class(self.pod_templates(manifest))

    def _templates(self, manifest: Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                 list[dict[str, Any]]]:
        """A deep copy of the object and its replicated jobs' pod templates, in order."""
        result = copy.deepcopy(dict(manifest))
        templates = []
        for rj in result.setdefault("spec", {}).get("replicatedJobs") or ():
            spec = rj.setdefault("template", {}).setdefault("spec", {})
            templates.append(spec.setdefault("template", {}))
        return result, templates

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """Unsuspended, each pod set's info merged into its replicated job's template (by
        index, as Kueue does)."""
        result, templates = self._templates(manifest)
        result["spec"]["suspend"] = False
        merge_into_templates(templates, infos)
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        result, templates = self._templates(manifest)
        return result if restore_templates(templates, pod_sets) else copy.deepcopy(
            dict(manifest))

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        for condition in (status or {}).get("conditions") or ():
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Completed":
                return "Succeeded", str(condition.get("message") or ALL_JOBS_COMPLETED[1])
            if condition.get("type") == "Failed":
                return "Failed", str(condition.get("message") or FAILED_JOBS[1])
        return None

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return jobset_report(manifest, status, self.finished(status))

    def remote_copy(
        self,
        manifest: Mapping[str, Any],
        *,
        namespace: str,
        labels: Mapping[str, str],
        pod_labels: Mapping[str, str],
        infos: Sequence[PodSetInfo],
        gang_workload: str | None = None,
    ) -> dict[str, Any]:
        """The JobSet to create on a cluster for an admitted workload; with a
        ``gang_workload``, each replicated job's pods are in its pod set's pod group."""
        running, templates = self._templates(self.without_managed_by(
            self.run_with_pod_sets_info({"spec": dict(manifest.get("spec") or {})}, infos)))
        label_pod_templates(templates, [pod_set_name(rj) for rj in replicated_jobs(running)],
                            pod_labels=pod_labels, gang_workload=gang_workload)
        return self.remote_object(manifest, running["spec"], namespace=namespace,
                                  labels=labels)
