"""The Kubeflow training-operator jobs (``kubeflow.org/v1``: PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob): Kueue's shared Kubeflow integration
(``pkg/controller/jobs/kubeflow/kubeflowjob``) and, on the simulated cluster, the training
operator. The five kinds differ only in the field holding their replica specs, their replica
types in Kueue's pod-set order, and which replica decides success, so they are one base class
and five small subclasses here; MPIJob (``scheduling.jobs.mpijob``) is one more subclass.

* validation: the rules every kind shares, the training operator's rules on the replica specs
  (known replica types, replicas, restart policy, a container named after the framework) and
  on ``spec.runPolicy``, and Kueue's labels;
* one pod set per replica type present, in Kueue's fixed order: name = the type in lower
  case, count = ``replicas`` (default 1), template = the replica's template; no minCount;
* suspended by ``spec.runPolicy.suspend``; managed by ``spec.runPolicy.managedBy``;
* the Workload's priority class: the label, else ``runPolicy.schedulingPolicy.priorityClass``,
  else the first replica (in pod-set order) whose template names a ``priorityClassName``;
* finished by its ``Succeeded`` or ``Failed`` condition; PodsReady is the ``Running``
  condition (the operator's, not a pod count); no reclaimable pods;
* ``TrainingOperator``: the simulated operator. The master (a TFJob's chief or master, an
  MPIJob's launcher) decides success when the job has one; without one the workers do: all
  of them, or as the kind allows fewer (a TFJob's worker 0 unless its ``successPolicy`` is
  ``AllWorkers``, any worker of a PyTorchJob with an ``elasticPolicy``); an XGBoostJob only
  by its master. A failed pod of a replica that restarts ``Never`` or on ``ExitCode`` fails
  the job, others are replaced until ``runPolicy.backoffLimit`` failures. Once the job is
  finished, ``runPolicy.cleanPodPolicy`` says which pods go: ``None`` (the operator's
  default) none, ``Running`` the pending and running ones, ``All`` every pod.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
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
    validate_kueue_labels,
    validate_object,
    validate_pod_template,
)

# The operator names pods and services <job>-<replica type>-<index>: a DNS label.
MAX_NAME_LENGTH = 63
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
# A failed pod of such a replica is not restarted: the job fails.
PERMANENT_FAILURE = ("Never", "ExitCode")
MANAGED_BY = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")
CLEAN_POD_POLICIES = ("None", "Running", "All")
TF_ALL_WORKERS = "AllWorkers"
TF_SUCCESS_POLICIES = ("", TF_ALL_WORKERS)
# The operator's default: a finished job's pods are left as they are.
DEFAULT_CLEAN_POD_POLICY = "None"
_ACTIVE = ("Pending", "Running")


def replica_count(spec: Mapping[str, Any]) -> int:
    """``replicas``, which the operator defaults to 1."""
    value = spec.get("replicas")
    return 1 if value is None else int(value)


class TrainingOperator(SimulatedController):
    """The training operator of the simulated cluster for one kind."""

    def __init__(self, kind: KubeflowJob) -> None:
        self.job_kind = kind

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
        kind = self.job_kind
        by_type: dict[str, list[SimulatedPod]] = {}
        for pod in pods.all():
            by_type.setdefault(pod.pod_set, []).append(pod)
        run_policy = (manifest.get("spec") or {}).get("runPolicy") or {}
        backoff_limit = run_policy.get("backoffLimit")
        replica_statuses: dict[str, dict[str, int]] = {}
        failed_type = ""
        restartable_failures = 0
        for rtype, spec in kind.replica_specs(manifest):
            own = by_type.get(rtype.lower(), [])
            failed = sum(p.phase == "Failed" for p in own)
            replica_statuses[rtype] = {
                "active": sum(p.phase in _ACTIVE for p in own),
                "succeeded": sum(p.phase == "Succeeded" for p in own),
                "failed": failed}
            if failed and kind.restart_policy(rtype, spec) in PERMANENT_FAILURE:
                failed_type = failed_type or rtype
            else:
                restartable_failures += failed
        if not failed_type and backoff_limit is not None and restartable_failures > int(
                backoff_limit):
            failed_type = next(t for t, s in replica_statuses.items() if s["failed"])
        name = str((manifest.get("metadata") or {}).get("name", ""))
        conditions = list(status.get("conditions") or [])
        finished: tuple[str, str] | None = None
        if failed_type:
            count = replica_statuses[failed_type]["failed"]
            message = (f"{kind.kind} {name} is failed because {count} {failed_type} "
                       "replica(s) failed.")
            finished = ("Failed", message)
            conditions = cond.set_condition(conditions, "Failed", True,
                                            f"{kind.kind}Failed", message, now=now)
        elif kind.succeeded(manifest, replica_statuses,
                            worker0_succeeded=_first_alive_succeeded(by_type.get("worker", []))):
            message = f"{kind.kind} {name} is successfully completed."
            finished = ("Succeeded", message)
            conditions = cond.set_condition(conditions, "Succeeded", True,
                                            f"{kind.kind}Succeeded", message, now=now)
        if finished is not None:
            policy = run_policy.get("cleanPodPolicy") or DEFAULT_CLEAN_POD_POLICY
            if policy == "All":
                pods.delete(pods.all())
            elif policy == "Running":
                pods.delete([p for p in pods.all() if p.phase in _ACTIVE])
            left = {rtype: sum(p.phase in _ACTIVE for p in pods.all()
                               if p.pod_set == rtype.lower()) for rtype in replica_statuses}
            for rtype, replica in replica_statuses.items():
                if finished[0] == "Succeeded":
                    # A succeeded job's replicas still active count as succeeded.
                    replica["succeeded"] += replica["active"]
                    replica["active"] = 0
                else:
                    replica["active"] = left[rtype]
            if cond.find(conditions, "Running") is not None:
                conditions = cond.set_condition(conditions, "Running", False,
                                                f"{kind.kind}{finished[0]}", finished[1],
                                                now=now)
        else:
            all_ready = True
            for rtype, spec in kind.replica_specs(manifest):
                own = by_type.get(rtype.lower(), [])
                active = [p for p in own if p.phase in _ACTIVE]
                succeeded = replica_statuses[rtype]["succeeded"]
                missing = replica_count(spec) - len(active) - succeeded
                if missing > 0:
                    pods.create(missing, pod_set=rtype.lower())
                    replica_statuses[rtype]["active"] += missing
                    all_ready = False
                all_ready = all_ready and all(p.ready for p in active)
            if all_ready and cond.find(conditions, "Running") is None:
                conditions = cond.set_condition(conditions, "Running", True,
                                                f"{kind.kind}Running",
                                                f"{kind.kind} {name} is running.", now=now)
        new_status = {**status, "conditions": conditions, "replicaStatuses": replica_statuses}
        return new_status, kind.report(manifest, new_status, wanted=admitted, ready_pods=0)


def _first_alive_succeeded(workers: Sequence[SimulatedPod]) -> bool:
    """Worker 0 succeeded: the oldest worker pod that did not fail stands for index 0 (a
    failed pod is replaced under its index)."""
    alive = [p for p in workers if p.phase != "Failed"]
    return bool(alive) and alive[0].phase == "Succeeded"


class KubeflowJob(GenericJob):
    """A training-operator job: its replica specs under ``spec.<replica_specs_field>``, a map
    from replica type to ``{replicas, restartPolicy, template}``."""

    api_version = "kubeflow.org/v1"
    max_name_length = MAX_NAME_LENGTH
    replica_specs_field: ClassVar[str]
    # The replica types, as the API spells them, in Kueue's pod-set order.
    replica_types: ClassVar[tuple[str, ...]]
    # The replica types that decide success when present (else the workers do).
    deciding_types: ClassVar[tuple[str, ...]] = ("Master",)
    # Without a deciding replica, the workers decide success (XGBoost: never).
    workers_decide: ClassVar[bool] = True
    # The replica types of which there is at most one.
    single_types: ClassVar[tuple[str, ...]] = ("Master", "Chief")
    # The container the operator runs the framework in (its default container name), which
    # every replica must have; None: any.
    container_name: ClassVar[str | None] = None
    default_restart_policy: ClassVar[str] = "Never"
    # The replica types every job must have.
    required_types: ClassVar[tuple[str, ...]] = ()
    managed_by_values: ClassVar[tuple[str, ...]] = MANAGED_BY

    def __init__(self) -> None:
        self.simulated = TrainingOperator(self)

    @property
    def replica_specs_path(self) -> str:
        return f"spec.{self.replica_specs_field}"

    def replica_specs(self, manifest: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
        """The (replica type, spec) pairs present, in pod-set order."""
        specs = (manifest.get("spec") or {}).get(self.replica_specs_field) or {}
        return [(rtype, specs[rtype]) for rtype in self.replica_types
                if isinstance(specs.get(rtype), Mapping)]

    def restart_policy(self, rtype: str, spec: Mapping[str, Any]) -> str:
        """The replica's ``restartPolicy``, else the operator's default for it."""
        return str(spec.get("restartPolicy") or self.default_restart_policy)

    def succeeded(self, manifest: Mapping[str, Any],
                  replica_statuses: Mapping[str, Mapping[str, int]], *,
                  worker0_succeeded: bool = False) -> bool:
        """The operator's success rule: the deciding replica's pods all succeeded; with
        none, every worker's, or what ``workers_done`` accepts of them."""
        specs = dict(self.replica_specs(manifest))
        deciders = [t for t in self.deciding_types if t in specs]
        if deciders:
            return all(replica_statuses[t]["succeeded"] >= replica_count(specs[t])
                       for t in deciders)
        if not self.workers_decide or "Worker" not in specs:
            return False
        succeeded = replica_statuses["Worker"]["succeeded"]
        return succeeded >= replica_count(specs["Worker"]) or self.workers_done(
            manifest, succeeded=succeeded, worker0_succeeded=worker0_succeeded)

    def workers_done(self, manifest: Mapping[str, Any], *, succeeded: int,
                     worker0_succeeded: bool) -> bool:
        """Success with fewer than all workers succeeded (a kind's own rule); default: no."""
        return False

    # --- validation ----------------------------------------------------------------------

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        if not isinstance(manifest, Mapping):
            return [FieldError("", f"a {self.kind} manifest must be an object")]
        errors, labels, _ = validate_object(
            manifest, api_version=self.api_version, kind=self.kind, namespace=namespace,
            max_name_length=self.max_name_length)
        spec = manifest.get("spec")
        if not isinstance(spec, Mapping):
            errors.append(FieldError("spec", "is required" if spec is None else
                                     "must be an object"))
            return errors
        errors.extend(self._validate_run_policy(spec.get("runPolicy")))
        errors.extend(self.validate_kind_spec(spec))
        errors.extend(self._validate_replica_specs(spec.get(self.replica_specs_field)))
        errors.extend(validate_kueue_labels(labels))
        return errors

    def validate_kind_spec(self, spec: Mapping[str, Any]) -> list[FieldError]:
        """The kind's own spec fields beside its replicas and run policy; default: none."""
        return []

    def _validate_run_policy(self, value: Any) -> list[FieldError]:
        path = "spec.runPolicy"
        if value is None:
            return []
        if not isinstance(value, Mapping):
            return [FieldError(path, "must be an object")]
        errors: list[FieldError] = []
        if value.get("suspend") is not None and not isinstance(value["suspend"], bool):
            errors.append(FieldError(f"{path}.suspend", "must be a boolean"))
        managed_by = value.get("managedBy")
        if managed_by is not None and managed_by not in self.managed_by_values:
            errors.append(FieldError(f"{path}.managedBy", "must be one of " + ", ".join(
                repr(v) for v in self.managed_by_values)))
        clean = value.get("cleanPodPolicy")
        if clean is not None and clean not in CLEAN_POD_POLICIES:
            errors.append(FieldError(f"{path}.cleanPodPolicy", "must be one of "
                                     + ", ".join(CLEAN_POD_POLICIES)))
        for key in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
            if value.get(key) is not None:
                int_value(value[key], f"{path}.{key}", errors, minimum=0)
        policy = value.get("schedulingPolicy")
        if policy is not None:
            if not isinstance(policy, Mapping):
                errors.append(FieldError(f"{path}.schedulingPolicy", "must be an object"))
            elif policy.get("priorityClass") is not None and not isinstance(
                    policy["priorityClass"], str):
                errors.append(FieldError(f"{path}.schedulingPolicy.priorityClass",
                                         "must be a string"))
        return errors

    def _validate_replica_specs(self, value: Any) -> list[FieldError]:
        path = self.replica_specs_path
        if not isinstance(value, Mapping) or not value:
            return [FieldError(path, "must have at least one replica type"
                               if value is None or isinstance(value, Mapping)
                               else "must be an object")]
        errors: list[FieldError] = []
        for rtype, spec in value.items():
            rpath = f"{path}.{rtype}"
            if rtype not in self.replica_types:
                errors.append(FieldError(rpath, f"{rtype!r} is not a replica type of a "
                                         f"{self.kind}: must be one of "
                                         + ", ".join(self.replica_types)))
                continue
            if not isinstance(spec, Mapping):
                errors.append(FieldError(rpath, "must be an object"))
                continue
            if spec.get("replicas") is not None:
                count = int_value(spec["replicas"], f"{rpath}.replicas", errors, minimum=0)
                if count is not None and count != 1 and rtype in self.single_types:
                    errors.append(FieldError(f"{rpath}.replicas",
                                             f"must be 1 for the {rtype} replica"))
            policy = spec.get("restartPolicy")
            if policy is not None and policy not in RESTART_POLICIES:
                errors.append(FieldError(f"{rpath}.restartPolicy", "must be one of "
                                         + ", ".join(RESTART_POLICIES)))
            template = spec.get("template")
            tpath = f"{rpath}.template"
            if not isinstance(template, Mapping):
                errors.append(FieldError(tpath, "is required"))
                continue
            errors.extend(validate_pod_template(template, tpath, for_job=True))
            containers = (template.get("spec") or {}).get("containers")
            if self.container_name and isinstance(containers, list) and containers and not any(
                    isinstance(c, Mapping) and c.get("name") == self.container_name
                    for c in containers):
                errors.append(FieldError(f"{tpath}.spec.containers", "must have a container "
                                         f"named {self.container_name!r}"))
        for rtype in self.required_types:
            if rtype not in value:
                errors.append(FieldError(f"{path}.{rtype}", "is required"))
        for single in self.single_types[1:]:
            if single in value and self.single_types[0] in value:
                errors.append(FieldError(f"{path}.{single}", "a job may have only one of "
                                         + " and ".join(self.single_types)))
        return errors

    # --- pod sets ------------------------------------------------------------------------

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return [{"name": rtype.lower(), "count": replica_count(spec),
                 "template": copy.deepcopy(spec.get("template") or {})}
                for rtype, spec in self.replica_specs(manifest)]

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(spec.get("template"), f"{self.replica_specs_path}.{rtype}.template")
                for rtype, spec in self.replica_specs(manifest)]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        """``runPolicy.schedulingPolicy.priorityClass``, else the first replica's template
        (in pod-set order) that names a ``priorityClassName``."""
        run_policy = (manifest.get("spec") or {}).get("runPolicy") or {}
        name = (run_policy.get("schedulingPolicy") or {}).get("priorityClass")
        if isinstance(name, str) and name:
            return name, "spec.runPolicy.schedulingPolicy.priorityClass"
        return templates_priority_class(self.pod_templates(manifest))

    # --- run and stop --------------------------------------------------------------------

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        run_policy = (manifest.get("spec") or {}).get("runPolicy") or {}
        return bool(run_policy.get("suspend", False))

    def suspend(self, manifest: Mapping[str, Any], suspend: bool = True) -> dict[str, Any]:
        """The object with ``spec.runPolicy.suspend`` set."""
        spec = manifest.get("spec") or {}
        run_policy = {**(spec.get("runPolicy") or {}), "suspend": suspend}
        return {**manifest, "spec": {**spec, "runPolicy": run_policy}}

    def without_managed_by(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        spec = dict(manifest.get("spec") or {})
        if "runPolicy" in spec:
            spec["runPolicy"] = {k: v for k, v in spec["runPolicy"].items()
                                 if k != "managedBy"}
        return {**manifest, "spec": spec}

    def _templates(self, manifest: Mapping[str, Any]
                   ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A deep copy of the object and its replicas' pod templates, in pod-set order."""
        result = copy.deepcopy(dict(manifest))
        specs = result.setdefault("spec", {}).get(self.replica_specs_field) or {}
        templates = [specs[rtype].setdefault("template", {}) for rtype in self.replica_types
                     if isinstance(specs.get(rtype), dict)]
        return result, templates

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """Unsuspended, each pod set's info merged into its replica's template (in order)."""
        result, templates = self._templates(self.suspend(manifest, False))
        merge_into_templates(templates, infos)
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        result, templates = self._templates(manifest)
        return result if restore_templates(templates, pod_sets) else copy.deepcopy(
            dict(manifest))

    # --- status --------------------------------------------------------------------------

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        for condition in (status or {}).get("conditions") or ():
            if condition.get("status") != "True":
                continue
            if condition.get("type") in ("Succeeded", "Failed"):
                outcome = str(condition["type"])
                return outcome, str(condition.get("message") or f"{self.kind} {outcome}")
        return None

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        """PodsReady is the operator's ``Running`` condition: all the job's pods count as
        ready while it holds."""
        statuses = [s for s in ((status or {}).get("replicaStatuses") or {}).values()
                    if isinstance(s, Mapping)]
        pods = sum(replica_count(spec) for _, spec in self.replica_specs(manifest))

        def total(key: str) -> int:
            return sum(int(s.get(key, 0) or 0) for s in statuses)

        running = cond.is_true(list((status or {}).get("conditions") or ()), "Running")
        return JobReport(parallelism=pods, completions=None, active=total("active"),
                         ready=pods if running else 0, succeeded=total("succeeded"),
                         failed=total("failed"), finished=self.finished(status))

    # --- other clusters ------------------------------------------------------------------

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
        """The job to create on a cluster for an admitted workload; with a
        ``gang_workload``, each replica's pods are in its pod set's pod group."""
        running, templates = self._templates(self.without_managed_by(
            self.run_with_pod_sets_info({"spec": dict(manifest.get("spec") or {})}, infos)))
        label_pod_templates(templates, [rtype.lower() for rtype, _ in self.replica_specs(running)],
                            pod_labels=pod_labels, gang_workload=gang_workload)
        return self.remote_object(manifest, running["spec"], namespace=namespace,
                                  labels=labels)


class PyTorchJob(KubeflowJob):
    framework_name = "kubeflow.org/pytorchjob"
    kind = "PyTorchJob"
    plural = "pytorchjobs"
    replica_specs_field = "pytorchReplicaSpecs"
    replica_types = ("Master", "Worker")
    container_name = "pytorch"
    default_restart_policy = "OnFailure"

    def workers_done(self, manifest: Mapping[str, Any], *, succeeded: int,
                     worker0_succeeded: bool) -> bool:
        """An elastic PyTorchJob (``elasticPolicy``) is done once any worker succeeded."""
        return (manifest.get("spec") or {}).get("elasticPolicy") is not None and succeeded > 0


class TFJob(KubeflowJob):
    framework_name = "kubeflow.org/tfjob"
    kind = "TFJob"
    plural = "tfjobs"
    replica_specs_field = "tfReplicaSpecs"
    replica_types = ("Chief", "Master", "PS", "Worker", "Evaluator")
    deciding_types = ("Chief", "Master")
    single_types = ("Chief", "Master")
    container_name = "tensorflow"

    def validate_kind_spec(self, spec: Mapping[str, Any]) -> list[FieldError]:
        policy = spec.get("successPolicy")
        if policy is not None and policy not in TF_SUCCESS_POLICIES:
            return [FieldError("spec.successPolicy", "must be one of "
                               + ", ".join(repr(p) for p in TF_SUCCESS_POLICIES))]
        return []

    def workers_done(self, manifest: Mapping[str, Any], *, succeeded: int,
                     worker0_succeeded: bool) -> bool:
        """By default worker 0 decides; ``successPolicy: AllWorkers`` waits for all."""
        policy = (manifest.get("spec") or {}).get("successPolicy") or ""
        return policy != TF_ALL_WORKERS and worker0_succeeded


class XGBoostJob(KubeflowJob):
    framework_name = "kubeflow.org/xgboostjob"
    kind = "XGBoostJob"
    plural = "xgboostjobs"
    replica_specs_field = "xgbReplicaSpecs"
    replica_types = ("Master", "Worker")
    container_name = "xgboost"
    # The operator's webhook requires the master, and only it decides success.
    required_types = ("Master",)
    workers_decide = False


class PaddleJob(KubeflowJob):
    framework_name = "kubeflow.org/paddlejob"
    kind = "PaddleJob"
    plural = "paddlejobs"
    replica_specs_field = "paddleReplicaSpecs"
    replica_types = ("Master", "Worker")
    container_name = "paddle"


class JAXJob(KubeflowJob):
    framework_name = "kubeflow.org/jaxjob"
    kind = "JAXJob"
    plural = "jaxjobs"
    replica_specs_field = "jaxReplicaSpecs"
    replica_types = ("Worker",)
    container_name = "jax"
