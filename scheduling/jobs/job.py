"""batch/v1 Job: Kueue's Job integration (``pkg/controller/jobs/job/{job_controller,
job_webhook,job_multikueue_adapter}.go``) and, on the simulated cluster, the Job controller.

The worked example of a job kind (``docs/adding-a-job-kind.md``):

* validation: Kubernetes' Job rules that matter here and Kueue's Job webhook (partial
  admission through ``kueue.x-k8s.io/job-min-parallelism``, completions equal to parallelism,
  elastic jobs), after the rules every kind shares;
* one pod set ``main`` of min(parallelism, completions) pods, the template less the Job
  controller's labels;
* started with ``parallelism`` = the admitted count and the flavors' placement merged into the
  template; scaled (elastic) through ``spec.parallelism``;
* finished by its ``Complete`` or ``Failed`` condition;
* the copy created on a Kubernetes cluster (``spec.selector`` dropped, controller labels
  cleaned, ``spec.managedBy`` cleared);
* ``JobController``: the simulated Job controller (parallelism, completions, backoffLimit,
  replacement pods, elastic pods held by a scheduling gate).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import (
    DEFAULT_POD_SET_NAME,
    ELASTIC_JOB_SCHEDULING_GATE,
)
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    ScalablePodSet,
    ScaleRefusal,
    SimulatedController,
    SimulatedPod,
    SimulatedPods,
)
from scheduling.jobframework.podsets import (
    PodSetInfo,
    merge_into_template,
    restore_template,
    templates_priority_class,
)
from scheduling.jobframework.validation import (
    annotation_path,
    int_value,
    validate_kueue_labels,
    validate_object,
    validate_pod_template,
)
from scheduling.jobframework.workload import is_elastic

JOB_MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-completions-equal-parallelism"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME_LABEL = "job-name"
# Labels the Job controller manages on the pod template and pods; Kueue drops them from the
# Workload's template and from the copy sent to another cluster (job_controller.go cleanLabels).
JOB_CONTROLLER_LABELS = frozenset({
    "controller-uid", "batch.kubernetes.io/controller-uid", LEGACY_JOB_NAME_LABEL,
    JOB_NAME_LABEL,
})
# The Workload's template keeps the job-name label Kubernetes' newer spelling puts there.
_WORKLOAD_TEMPLATE_DROPPED_LABELS = ("job-name", "controller-uid",
                                     "batch.kubernetes.io/controller-uid")
MAX_NAME_LENGTH = 63  # the name becomes a pod label value
PARALLELISM_PATH = "spec.parallelism"
PARTIAL_ADMISSION_REFUSAL = ScaleRefusal(
    message="Forbidden: cannot change when partial admission is enabled and the job is not "
    "suspended",
    reason=f"Jobs with partial admission (annotation {JOB_MIN_PARALLELISM_ANNOTATION}) cannot "
    "change parallelism while they run",
)
DEFAULT_BACKOFF_LIMIT = 6  # spec.backoffLimit default
_RESTART_POLICIES = ("OnFailure", "Never")
_COMPLETION_MODES = ("NonIndexed", "Indexed")


def pods_count(spec: Mapping[str, Any]) -> int:
    """min(parallelism, completions), with Kubernetes' default parallelism of 1."""
    parallelism = spec.get("parallelism")
    parallelism = 1 if parallelism is None else parallelism
    completions = spec.get("completions")
    if completions is not None and completions < parallelism:
        return int(completions)
    return int(parallelism)


def parallelism(spec: Mapping[str, Any]) -> int:
    """spec.parallelism, Kubernetes' default 1 (0 is allowed: no pods)."""
    value = spec.get("parallelism")
    return 1 if value is None else max(int(value), 0)


def reclaimable_pods(parallelism: int, completions: int | None, terminal: int) -> int:
    """Pods of the ``main`` pod set that no longer need quota (Kueue's ``ReclaimablePods``
    for a Job): once the pods still to succeed are fewer than the parallelism, the rest of
    the slots are given back (only for ``parallelism > 1``)."""
    target = parallelism if completions is None else completions
    if parallelism <= 1 or terminal <= 0:
        return 0
    remaining = max(target - terminal, 0)
    if remaining >= parallelism:
        return 0
    return parallelism - remaining


def _report(parallelism: int, completions: int | None, *, active: int, ready: int,
            succeeded: int, failed: int, finished: tuple[str, str] | None) -> JobReport:
    reclaimable = reclaimable_pods(parallelism, completions, succeeded)
    return JobReport(
        parallelism=parallelism, completions=completions, active=active, ready=ready,
        succeeded=succeeded, failed=failed, finished=finished,
        reclaimable_pods={DEFAULT_POD_SET_NAME: reclaimable} if reclaimable else {},
    )


def wanted_pods(spec: Mapping[str, Any], succeeded: int) -> int:
    """The pods the Job controller keeps: min(parallelism, pods still to succeed), where
    the simulator counts ``parallelism`` completions when ``completions`` is unset."""
    wanted = parallelism(spec)
    completions = spec.get("completions")
    target = wanted if completions is None else int(completions)
    return max(min(wanted, target - succeeded), 0)


def validate_job_manifest(
    manifest: Any, *, namespace: str, slices_enabled: bool = True
) -> list[FieldError]:
    """What Kubernetes' Job validation and Kueue's Job webhook refuse on create.

    Needs no database: the queue-name requirement (which depends on a default LocalQueue)
    and the priority class lookup are the service's.
    """
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a Job manifest must be an object")]
    errors, labels, annotations = validate_object(
        manifest, api_version=BatchJob.api_version, kind=BatchJob.kind, namespace=namespace,
        max_name_length=MAX_NAME_LENGTH)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    spec_errors, counts_valid = validate_job_spec(spec)
    errors.extend(spec_errors)
    completion_mode = spec.get("completionMode", "NonIndexed")

    # Kueue's Job webhook (ValidateJobOnCreate, validatePartialAdmissionCreate, ...).
    errors.extend(validate_kueue_labels(labels))
    if counts_valid:
        errors.extend(_validate_kueue_annotations(
            annotations, spec, completion_mode, slices_enabled=slices_enabled))
    return errors


def validate_job_spec(spec: Mapping[str, Any], path: str = "spec"
                      ) -> tuple[list[FieldError], bool]:
    """Kubernetes' rules for a Job spec at ``path`` (a Job's ``spec``, or a JobSet's
    replicated job ``template.spec``), and whether its counts are integers."""
    errors: list[FieldError] = []
    counts_valid = True
    for key in ("parallelism", "completions", "backoffLimit", "activeDeadlineSeconds",
                "ttlSecondsAfterFinished"):
        if spec.get(key) is not None:
            minimum = 1 if key == "activeDeadlineSeconds" else 0
            if int_value(spec[key], f"{path}.{key}", errors, minimum=minimum) is None:
                counts_valid = counts_valid and key not in ("parallelism", "completions")
    completion_mode = spec.get("completionMode", "NonIndexed")
    if completion_mode not in _COMPLETION_MODES:
        errors.append(FieldError(f"{path}.completionMode", f"unsupported value "
                                 f"{completion_mode!r}: supported values: \"NonIndexed\", "
                                 '"Indexed"'))
    elif completion_mode == "Indexed" and spec.get("completions") is None:
        errors.append(FieldError(f"{path}.completions",
                                 "is required when completionMode is Indexed"))
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError(f"{path}.suspend", "must be a boolean"))
    errors.extend(_validate_template(spec.get("template"), f"{path}.template"))
    return errors, counts_valid


def _validate_template(template: Any, path: str) -> list[FieldError]:
    errors = validate_pod_template(template, path, for_job=True)
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if isinstance(spec, Mapping):
        # Kubernetes defaults restartPolicy to Always, which a Job refuses.
        restart_policy = spec.get("restartPolicy", "Always")
        if restart_policy not in _RESTART_POLICIES:
            errors.append(FieldError(f"{path}.spec.restartPolicy",
                                     f"unsupported value {restart_policy!r}: supported values: "
                                     '"OnFailure", "Never"'))
    return errors


def _validate_kueue_annotations(
    annotations: Mapping[str, str],
    spec: Mapping[str, Any],
    completion_mode: str,
    *,
    slices_enabled: bool,
) -> list[FieldError]:
    errors: list[FieldError] = []
    min_parallelism = annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    if min_parallelism is not None:
        path = annotation_path(JOB_MIN_PARALLELISM_ANNOTATION)
        count = pods_count(spec)
        try:
            value = int(min_parallelism)
        except ValueError:
            errors.append(FieldError(path, f"{min_parallelism!r} is not an integer"))
        else:
            # Kueue accepts 0 < min < pods count: equal to the count is no partial admission.
            if value <= 0 or value >= count:
                errors.append(FieldError(path, f"should be between 0 and {count - 1}"))
        if is_elastic(annotations, slices_enabled=slices_enabled):
            errors.append(FieldError(path, "partial admission and elastic job cannot be used "
                                     "together"))
    sync = annotations.get(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
    if sync is not None:
        path = annotation_path(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
        if sync.lower() not in ("true", "false", "1", "0", "t", "f"):
            errors.append(FieldError(path, f"{sync!r} is not a boolean"))
        elif sync.lower() in ("true", "1", "t"):
            if completion_mode != "Indexed":
                errors.append(FieldError(path, "should not be enabled for NonIndexed jobs"))
            if spec.get("parallelism", 1) != spec.get("completions", 1):
                errors.append(FieldError("spec.completions", "should be equal to parallelism "
                                         f"when {JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION} "
                                         "annotation is true"))
    return errors


def _without_controller_labels(labels: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (labels or {}).items() if k not in JOB_CONTROLLER_LABELS}


def _annotations(manifest: Mapping[str, Any]) -> Mapping[str, str]:
    annotations: Mapping[str, str] = (manifest.get("metadata") or {}).get("annotations") or {}
    return annotations


def _completions_follow_parallelism(manifest: Mapping[str, Any]) -> bool:
    return _annotations(manifest).get(JOB_COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION) == "true"


# =========================================================================================
# The simulated Job controller
# =========================================================================================


def _failed(status: Mapping[str, Any], *, now: datetime
            ) -> tuple[list[dict[str, Any]], tuple[str, str]]:
    message = "Job has reached the specified backoff limit"
    conditions = cond.set_condition(status.get("conditions", []), "Failed", True,
                                    "BackoffLimitExceeded", message, now=now)
    return conditions, ("Failed", message)


def _complete(status: Mapping[str, Any], *, now: datetime
              ) -> tuple[list[dict[str, Any]], tuple[str, str]]:
    conditions = cond.set_condition(status.get("conditions", []), "Complete", True, "", "",
                                    now=now)
    return conditions, ("Succeeded", "Job finished successfully")


def _removal_order(pods: Sequence[SimulatedPod]) -> list[SimulatedPod]:
    """The order in which the Job controller deletes active pods when it has too many
    (``controller.ActivePods``): unbound before bound, pending before running, not ready
    before ready, ready for less time first, then the newest first."""
    def key(pod: SimulatedPod) -> tuple[int, int, int, float, float]:
        ready_since = pod.ready_at.timestamp() if pod.ready and pod.ready_at else 0.0
        return (int(bool(pod.node_name)), int(pod.phase == "Running"), int(pod.ready),
                -ready_since, -pod.created_at.timestamp())
    return sorted(pods, key=key)


_ACTIVE = ("Pending", "Running")


class JobController(SimulatedController):
    """The Job controller of the simulated cluster.

    A job of fixed size replaces terminated pods up to the admitted count and finishes once
    ``completions`` (else the admitted count) pods succeeded, or when more than
    ``backoffLimit`` failed. An elastic job follows ``spec.parallelism``: it keeps
    min(parallelism, pods still to succeed) pods, of which at most the slice's ``allowed``
    count run; the others wait with the scheduling gate ``kueue.x-k8s.io/elastic-job``.
    """

    def first_pods(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
                   info: PodSetInfo, pod_set: Mapping[str, Any], *, elastic: bool) -> int:
        succeeded = int(status.get("succeeded", 0))
        spec = manifest.get("spec") or {}
        if elastic:
            # The rest of the job's parallelism waits gated (``reconcile``).
            return min(info.count, wanted_pods(spec, succeeded))
        completions = spec.get("completions")
        if completions is None:
            return info.count
        return max(min(info.count, int(completions) - succeeded), 0)

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
        if elastic:
            return self._elastic(manifest, status, pods, allowed=allowed, now=now)
        return self._fixed(manifest, status, pods, admitted=admitted, now=now)

    def _fixed(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
               pods: SimulatedPods, *, admitted: int, now: datetime
               ) -> tuple[dict[str, Any], JobReport]:
        spec = manifest.get("spec", {})
        every = pods.all()
        completions = spec.get("completions")
        target = admitted if completions is None else int(completions)
        backoff_limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
        active = [p for p in every if p.phase in _ACTIVE]
        succeeded = sum(p.phase == "Succeeded" for p in every)
        failed = sum(p.phase == "Failed" for p in every)
        ready = sum(p.ready for p in every)
        new_status = dict(status)
        finished: tuple[str, str] | None = None
        count = len(active)
        if failed > int(backoff_limit):
            pods.delete(active)
            count = 0
            new_status["conditions"], finished = _failed(new_status, now=now)
        elif succeeded >= target:
            new_status["completionTime"] = cond.timestamp(now)
            new_status["conditions"], finished = _complete(new_status, now=now)
        else:
            missing = min(admitted, target - succeeded) - count
            if missing > 0:
                pods.create(missing)
                count += missing
        new_status.update(active=count, ready=ready if not finished else 0,
                          succeeded=succeeded, failed=failed)
        report = _report(
            admitted, None if completions is None else int(completions),
            active=count, ready=ready, succeeded=succeeded, failed=failed, finished=finished,
        )
        return new_status, report

    def _elastic(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
                 pods: SimulatedPods, *, allowed: int, now: datetime
                 ) -> tuple[dict[str, Any], JobReport]:
        """Job status ``active`` counts the gated pods too (Kubernetes does); the report to
        the workload lifecycle counts the pods the slice lets run."""
        spec = manifest.get("spec", {})
        every = pods.all()
        succeeded = sum(p.phase == "Succeeded" for p in every)
        failed = sum(p.phase == "Failed" for p in every)
        active = [p for p in every if p.phase in _ACTIVE]
        completions = spec.get("completions")
        target = parallelism(spec) if completions is None else int(completions)
        backoff_limit = int(spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT))
        new_status = dict(status)
        finished: tuple[str, str] | None = None
        if failed > backoff_limit:
            pods.delete(active)
            active = []
            new_status["conditions"], finished = _failed(new_status, now=now)
        elif target > 0 and succeeded >= target:
            # Parallelism 0 (without completions) keeps the job running with no pods.
            pods.delete(active)
            active = []
            new_status["completionTime"] = cond.timestamp(now)
            new_status["conditions"], finished = _complete(new_status, now=now)
        else:
            active = self._scale(pods, active, wanted=wanted_pods(spec, succeeded),
                                 allowed=allowed)
        running = [p for p in active if not p.gated]
        ready = sum(p.ready for p in running)
        new_status.update(active=len(active), ready=ready if not finished else 0,
                          succeeded=succeeded, failed=failed)
        report = _report(
            allowed, None if completions is None else int(completions),
            active=len(running), ready=ready, succeeded=succeeded, failed=failed,
            finished=finished,
        )
        return new_status, report

    @staticmethod
    def _scale(pods: SimulatedPods, active: list[SimulatedPod], *, wanted: int,
               allowed: int) -> list[SimulatedPod]:
        """Bring the active pods to ``wanted``, at most ``allowed`` of them ungated;
        returns the active pods afterwards."""
        doomed = _removal_order(active)[:max(len(active) - wanted, 0)]
        rest = [p for p in active if p not in doomed]
        ungated = [p for p in rest if not p.gated]
        extra = _removal_order(ungated)[:max(len(ungated) - allowed, 0)]
        doomed += extra
        if doomed:
            pods.delete(doomed, reason="SuccessfulDelete")
            rest = [p for p in rest if p not in extra]
            ungated = [p for p in ungated if p not in extra]
        # Kueue's elastic job ungater: at most allowed - ungated pods, lowest names first.
        room = allowed - len(ungated)
        opened = sorted((p for p in rest if p.gated), key=lambda p: p.name)[:max(room, 0)]
        if opened:
            pods.ungate(opened)
            room -= len(opened)
        missing = wanted - len(rest)
        if missing > 0:
            free = min(max(room, 0), missing)
            for count, gates in ((free, ()), (missing - free, (ELASTIC_JOB_SCHEDULING_GATE,))):
                if count > 0:
                    rest += pods.create(count, gates=gates)
        return rest


# =========================================================================================
# The integration
# =========================================================================================


class BatchJob(GenericJob):
    framework_name = "batch/job"
    api_version = "batch/v1"
    kind = "Job"
    plural = "jobs"
    elastic = True
    max_name_length = MAX_NAME_LENGTH
    simulated = JobController()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_job_manifest(manifest, namespace=namespace, slices_enabled=slices_enabled)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        """One pod set ``main`` with count min(parallelism, completions) and the job's
        template (less the Job controller's labels); minCount from the min-parallelism
        annotation."""
        spec = manifest["spec"]
        template = copy.deepcopy(spec["template"])
        template_labels = (template.get("metadata") or {}).get("labels")
        if template_labels:
            for key in _WORKLOAD_TEMPLATE_DROPPED_LABELS:
                template_labels.pop(key, None)
        pod_set: dict[str, Any] = {
            "name": DEFAULT_POD_SET_NAME,
            "count": pods_count(spec),
            "template": template,
        }
        annotations = _annotations(manifest)
        if partial_admission and JOB_MIN_PARALLELISM_ANNOTATION in annotations:
            pod_set["minCount"] = int(annotations[JOB_MIN_PARALLELISM_ANNOTATION])
        return [pod_set]

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(manifest["spec"]["template"], "spec.template")]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        return templates_priority_class(self.pod_templates(manifest))

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """Unsuspended, ``parallelism`` = the admitted count (and ``completions`` when it
        follows parallelism), the one pod set's info merged into the template."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        spec["suspend"] = False
        if infos:
            info = infos[0]
            spec["parallelism"] = int(info.count)
            if _completions_follow_parallelism(manifest):
                spec["completions"] = int(info.count)
            spec["template"] = merge_into_template(spec.get("template") or {}, info)
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        result = copy.deepcopy(dict(manifest))
        if len(pod_sets) != 1:
            return result  # not this job's pod sets: Kueue skips the restore
        spec = result.setdefault("spec", {})
        spec["template"] = restore_template(spec.get("template") or {},
                                            pod_sets[0].get("template") or {})
        return result

    def scalable_pod_sets(self, manifest: Mapping[str, Any]) -> list[ScalablePodSet]:
        """Pod set ``main``, scaled by ``spec.parallelism`` (its pods: min(parallelism,
        completions))."""
        value = (manifest.get("spec") or {}).get("parallelism")
        return [ScalablePodSet(DEFAULT_POD_SET_NAME, PARALLELISM_PATH,
                               1 if value is None else int(value))]

    def scale_refusal(self, manifest: Mapping[str, Any], *,
                      suspended: bool) -> ScaleRefusal | None:
        """Kueue's Job webhook freezes the parallelism of a running job with partial
        admission (``validatePartialAdmissionUpdate``)."""
        if JOB_MIN_PARALLELISM_ANNOTATION in _annotations(manifest) and not suspended:
            return PARTIAL_ADMISSION_REFUSAL
        return None

    def validate_scale(
        self, manifest: Mapping[str, Any], counts: Mapping[str, int], *,
        partial_admission: bool,
    ) -> list[FieldError]:
        """With partial admission, more pods than ``job-min-parallelism`` must remain."""
        min_parallelism = _annotations(manifest).get(JOB_MIN_PARALLELISM_ANNOTATION)
        if min_parallelism is None or not partial_admission:
            return []
        spec = {**(manifest.get("spec") or {}), "parallelism": counts[DEFAULT_POD_SET_NAME]}
        if int(min_parallelism) < pods_count(spec):
            return []
        return [FieldError(PARALLELISM_PATH, (
            f"must leave more than {min_parallelism} pods (annotation "
            f"{JOB_MIN_PARALLELISM_ANNOTATION}) to run"))]

    def resumed_status(self, status: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
        """The Job controller on resume: a new ``startTime``, ``Suspended`` False."""
        result = {k: v for k, v in status.items() if k != "completionTime"}
        result["startTime"] = cond.timestamp(now)
        result["conditions"] = cond.set_condition(
            result.get("conditions", []), "Suspended", False, "JobResumed", "Job resumed",
            now=now)
        return result

    def suspended_status(self, status: Mapping[str, Any], *, now: datetime) -> dict[str, Any]:
        """The Job controller on suspend: no ``startTime``, no pods active or ready,
        ``Suspended`` True."""
        result = {k: v for k, v in status.items() if k != "startTime"}
        result.update(active=0, ready=0)
        result["conditions"] = cond.set_condition(
            result.get("conditions", []), "Suspended", True, "JobSuspended", "Job suspended",
            now=now)
        return result

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        for condition in (status or {}).get("conditions") or ():
            if condition.get("status") != "True":
                continue
            if condition.get("type") == "Complete":
                return "Succeeded", "Job finished successfully"
            if condition.get("type") == "Failed":
                message = condition.get("message") or condition.get("reason") or "Job failed"
                return "Failed", str(message)
        return None

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        completions = (manifest.get("spec") or {}).get("completions")
        if _completions_follow_parallelism(manifest):
            completions = wanted
        ready = int(status["ready"]) if "ready" in status else ready_pods
        return _report(
            wanted, None if completions is None else int(completions),
            active=int(status.get("active", 0)), ready=ready,
            succeeded=int(status.get("succeeded", 0)), failed=int(status.get("failed", 0)),
            finished=self.finished(status),
        )

    def multikueue_copy(
        self, manifest: Mapping[str, Any], *, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        copied = super().multikueue_copy(manifest, labels=labels)
        # The worker's server generates the selector for the new job's uid.
        copied["spec"].pop("selector", None)
        return copied

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
        """The batch/v1 Job to create on a cluster for an admitted workload."""
        metadata = manifest.get("metadata") or {}
        running = self.run_with_pod_sets_info(
            {"spec": copy.deepcopy(dict(manifest.get("spec") or {})),
             "metadata": {"annotations": dict(metadata.get("annotations") or {})}}, infos)
        spec: dict[str, Any] = running["spec"]
        object_labels = _without_controller_labels(metadata.get("labels"))
        object_labels.update(labels)
        # The server generates the selector; a copied one would not match the new job's uid.
        for key in ("selector", "manualSelector", "managedBy"):
            spec.pop(key, None)
        template = spec.setdefault("template", {})
        template_meta = template.setdefault("metadata", {})
        template_labels = _without_controller_labels(template_meta.get("labels"))
        template_labels.update(pod_labels)
        template_meta["labels"] = template_labels
        pod_spec = template.setdefault("spec", {})
        # kueueweb sets the parallelism of an elastic job itself: no pod waits for an ungater.
        gates = [g for g in pod_spec.get("schedulingGates") or ()
                 if not (isinstance(g, Mapping) and g.get("name") == ELASTIC_JOB_SCHEDULING_GATE)]
        if gates:
            pod_spec["schedulingGates"] = gates
        else:
            pod_spec.pop("schedulingGates", None)
        if gang_workload:
            pod_spec["workloadRef"] = {"name": gang_workload,
                                       "podGroup": infos[0].name if infos
                                       else DEFAULT_POD_SET_NAME}
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": str(metadata.get("name", "")), "namespace": namespace,
                         "labels": object_labels,
                         "annotations": dict(metadata.get("annotations") or {})},
            "spec": spec,
        }
