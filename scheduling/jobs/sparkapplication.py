"""SparkApplication (``sparkoperator.k8s.io/v1beta2``): Kueue's SparkApplication integration
(``pkg/controller/jobs/sparkapplication/``) and, on the simulated cluster, the Spark
operator with its driver.

* validation: the rules every kind shares, the SparkApplication CRD's required fields and
  enums, Kueue's webhook rules (``spec.mode`` must be ``cluster``; no
  ``spec.dynamicAllocation`` for a job that is not elastic), quantities Kueue parses, and
  Kueue's labels;
* two pod sets, as Kueue builds them from the Spark fields (as the Spark operator's pod
  defaulter would): ``driver`` (1 pod) and ``executor`` (``spec.executor.instances``,
  default 0), each one Spark container whose cpu request is ``coreRequest``, cpu limit
  ``coreLimit``, memory request ``memory`` and memory limit ``memoryLimit`` (Java sizes:
  ``1g`` is ``1Gi``), GPU limit ``gpu``; plus the role's init containers, sidecars,
  volumes it mounts, node selector, affinity, tolerations, priority class, labels and
  annotations. Kueue does not count ``cores``, ``memoryOverhead`` or
  ``memoryOverheadFactor``: quota is what the pods request;
* suspended by ``spec.suspend``; each role's info merged into its Spark pod fields
  (``labels``, ``annotations``, ``nodeSelector``, ``tolerations``; scheduling gates in its
  ``template``), a global ``spec.nodeSelector`` moved into both roles;
* finished by ``status.applicationState.state``: ``COMPLETED``, or ``FAILED`` /
  ``SUBMISSION_FAILED``;
* PodsReady: state ``RUNNING`` and every requested executor running or completed
  (``status.executorState``);
* ``SparkOperator``: the simulated operator (driver and executors run; the application
  completes when the driver succeeds and fails when it fails).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core.fields import FieldError
from scheduling.core.quantities import QuantityError, parse_quantity
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    SimulatedController,
    SimulatedPods,
)
from scheduling.jobframework.podsets import PodSetInfo
from scheduling.jobframework.validation import (
    int_value,
    string_map,
    validate_kueue_labels,
    validate_object,
)

DRIVER, EXECUTOR = "driver", "executor"
ROLES = (DRIVER, EXECUTOR)
# The Spark operator's container names for the driver and (Spark 3) the executors.
CONTAINER_NAMES = {DRIVER: "spark-kubernetes-driver", EXECUTOR: "spark-kubernetes-executor"}
LOCAL_DIR_VOLUME_PREFIX = "spark-local-dir-"
APP_NAME_LABEL = "sparkoperator.k8s.io/app-name"
ROLE_LABEL = "spark-role"
# The pods carry the application's name as a label value.
MAX_NAME_LENGTH = 63
TYPES = ("Java", "Python", "Scala", "R")
MODES = ("cluster", "client")
CLUSTER_MODE = "cluster"
RESTART_POLICY_TYPES = ("Never", "Always", "OnFailure")
COMPLETED, FAILED, SUBMISSION_FAILED = "COMPLETED", "FAILED", "SUBMISSION_FAILED"
RUNNING, SUBMITTED = "RUNNING", "SUBMITTED"
_ACTIVE = ("Pending", "Running")
# Java size suffixes and the Kubernetes suffixes they mean (the Spark operator's table).
_JAVA_UNITS = (("kb", "Ki"), ("mb", "Mi"), ("gb", "Gi"), ("tb", "Ti"), ("pb", "Pi"),
               ("k", "Ki"), ("m", "Mi"), ("g", "Gi"), ("t", "Ti"), ("p", "Pi"))


def java_memory_to_quantity(memory: str) -> str:
    """A Java memory size (``512m``, ``1g``) as a Kubernetes quantity (``512Mi``, ``1Gi``);
    a value with no Java suffix is kept (``512Mi``)."""
    lower = memory.strip().lower()
    for unit, k8s_unit in _JAVA_UNITS:
        if lower.endswith(unit):
            return lower[: -len(unit)] + k8s_unit
    return memory.strip()


def role_spec(manifest: Mapping[str, Any], role: str) -> Mapping[str, Any]:
    value = (manifest.get("spec") or {}).get(role)
    return value if isinstance(value, Mapping) else {}


def executor_instances(manifest: Mapping[str, Any]) -> int:
    value = role_spec(manifest, EXECUTOR).get("instances")
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


# =========================================================================================
# The pod templates Kueue builds
# =========================================================================================


def build_pod_template(manifest: Mapping[str, Any], role: str) -> dict[str, Any]:
    """The pod template of a role as Kueue derives it from the Spark fields."""
    spark = role_spec(manifest, role)
    spec = manifest.get("spec") or {}
    container: dict[str, Any] = {"name": CONTAINER_NAMES[role]}
    pod: dict[str, Any] = {"containers": [container]}
    # Volumes the role mounts (scratch space excepted), each added once.
    volumes = {v.get("name"): v for v in spec.get("volumes") or () if isinstance(v, Mapping)}
    added: set[str] = set()
    for mount in spark.get("volumeMounts") or ():
        name = mount.get("name") if isinstance(mount, Mapping) else None
        if not isinstance(name, str) or name.startswith(LOCAL_DIR_VOLUME_PREFIX):
            continue
        if name in volumes:
            if name not in added:
                pod.setdefault("volumes", []).append(copy.deepcopy(volumes[name]))
                added.add(name)
            container.setdefault("volumeMounts", []).append(copy.deepcopy(dict(mount)))
    if spark.get("initContainers"):
        pod["initContainers"] = copy.deepcopy(list(spark["initContainers"]))
    for sidecar in spark.get("sidecars") or ():
        pod["containers"].append(copy.deepcopy(sidecar))
    if spark.get("priorityClassName"):
        pod["priorityClassName"] = spark["priorityClassName"]
    if spark.get("nodeSelector"):
        pod["nodeSelector"] = dict(spark["nodeSelector"])
    if spark.get("affinity"):
        pod["affinity"] = copy.deepcopy(spark["affinity"])
    if spark.get("tolerations"):
        pod["tolerations"] = copy.deepcopy(list(spark["tolerations"]))
    requests: dict[str, str] = {}
    limits: dict[str, Any] = {}
    if spark.get("coreRequest") is not None:
        requests["cpu"] = str(spark["coreRequest"])
    if spark.get("coreLimit") is not None:
        limits["cpu"] = str(spark["coreLimit"])
    if spark.get("memory") is not None:
        requests["memory"] = java_memory_to_quantity(str(spark["memory"]))
    if spark.get("memoryLimit") is not None:
        limits["memory"] = java_memory_to_quantity(str(spark["memoryLimit"]))
    gpu = spark.get("gpu")
    if isinstance(gpu, Mapping) and gpu.get("name") and int(gpu.get("quantity") or 0) > 0:
        limits[str(gpu["name"])] = str(int(gpu["quantity"]))
    resources = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    if resources:
        container["resources"] = resources
    template: dict[str, Any] = {}
    base = spark.get("template") if isinstance(spark.get("template"), Mapping) else None
    metadata = copy.deepcopy(dict((base or {}).get("metadata") or {}))
    labels = {**(metadata.get("labels") or {}), **(spark.get("labels") or {})}
    annotations = {**(metadata.get("annotations") or {}), **(spark.get("annotations") or {})}
    metadata = {k: v for k, v in metadata.items() if k not in ("labels", "annotations")}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    if metadata:
        template["metadata"] = metadata
    template["spec"] = pod
    return template


# =========================================================================================
# Validation
# =========================================================================================


def validate_sparkapplication_manifest(manifest: Any, *, namespace: str) -> list[FieldError]:
    """What the SparkApplication CRD and Kueue's SparkApplication webhook refuse on create."""
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a SparkApplication manifest must be an object")]
    errors, labels, _ = validate_object(
        manifest, api_version=SparkApplication.api_version, kind=SparkApplication.kind,
        namespace=namespace, max_name_length=MAX_NAME_LENGTH)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError("spec.suspend", "must be a boolean"))
    _enum(spec.get("type"), "spec.type", TYPES, errors, required=True)
    for key in ("sparkVersion", "mainApplicationFile"):
        if not isinstance(spec.get(key), str):
            errors.append(FieldError(f"spec.{key}", "is required" if spec.get(key) is None
                                     else "must be a string"))
    mode = spec.get("mode")
    if (mode is None or _enum(mode, "spec.mode", MODES, errors, required=False)) and (
            mode != CLUSTER_MODE):
        # Kueue's rule: an absent mode is not cluster mode either.
        errors.append(FieldError("spec.mode", f"{mode or ''!r}: only Cluster mode is "
                                 "supported for a kueue managed job"))
    dynamic = spec.get("dynamicAllocation")
    if isinstance(dynamic, Mapping) and dynamic.get("enabled") is True:
        errors.append(FieldError("spec.dynamicAllocation.enabled", "a kueue managed job can "
                                 "use dynamicAllocation only when the "
                                 "ElasticJobsViaWorkloadSlices feature gate is on and the "
                                 "job is an elastic job"))
    restart = spec.get("restartPolicy")
    if isinstance(restart, Mapping):
        _enum(restart.get("type"), "spec.restartPolicy.type", RESTART_POLICY_TYPES, errors,
              required=False)
    if spec.get("nodeSelector") is not None:
        string_map(spec["nodeSelector"], "spec.nodeSelector", errors)
    for role in ROLES:
        _validate_role(spec.get(role), f"spec.{role}", role, errors)
    errors.extend(validate_kueue_labels(labels))
    return errors


def _enum(value: Any, path: str, allowed: Sequence[str], errors: list[FieldError], *,
          required: bool) -> bool:
    """Whether ``value`` is one of ``allowed``; an error when it is not (when it is absent:
    only if ``required``)."""
    if value is None:
        if required:
            errors.append(FieldError(path, "is required"))
        return False
    if value not in allowed:
        errors.append(FieldError(path, f"unsupported value {value!r}: supported values: "
                                 + ", ".join(f'"{a}"' for a in allowed)))
        return False
    return True


def _validate_role(value: Any, path: str, role: str, errors: list[FieldError]) -> None:
    if not isinstance(value, Mapping):
        errors.append(FieldError(path, "is required" if value is None else "must be an object"))
        return
    if role == EXECUTOR and value.get("instances") is not None:
        int_value(value["instances"], f"{path}.instances", errors, minimum=1)
    if value.get("cores") is not None:
        int_value(value["cores"], f"{path}.cores", errors, minimum=1)
    for key, java in (("coreRequest", False), ("coreLimit", False), ("memory", True),
                      ("memoryLimit", True)):
        quantity = value.get(key)
        if quantity is None:
            continue
        if not isinstance(quantity, str):
            errors.append(FieldError(f"{path}.{key}", "must be a string"))
            continue
        try:
            parse_quantity(java_memory_to_quantity(quantity) if java else quantity)
        except QuantityError as error:
            errors.append(FieldError(f"{path}.{key}", f"{quantity!r} is not a quantity "
                                     f"Kueue can count: {error}"))
    for key in ("labels", "annotations", "nodeSelector"):
        if value.get(key) is not None:
            string_map(value[key], f"{path}.{key}", errors)
    template = value.get("template")
    if template is not None and not isinstance(template, Mapping):
        errors.append(FieldError(f"{path}.template", "must be an object"))


# =========================================================================================
# Status
# =========================================================================================


def state_of(status: Mapping[str, Any] | None) -> str:
    return str(((status or {}).get("applicationState") or {}).get("state") or "")


def spark_finished(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """Kueue's ``Finished``: COMPLETED succeeds; FAILED and SUBMISSION_FAILED fail. The
    message is the application's ``errorMessage`` (else the state)."""
    state = state_of(status)
    if state not in (COMPLETED, FAILED, SUBMISSION_FAILED):
        return None
    message = str(((status or {}).get("applicationState") or {}).get("errorMessage") or "")
    outcome = "Succeeded" if state == COMPLETED else "Failed"
    return outcome, message or f"SparkApplication {state.lower().replace('_', ' ')}"


def spark_pods_ready(manifest: Mapping[str, Any], status: Mapping[str, Any] | None) -> bool:
    """Kueue's ``PodsReady``: the driver runs (state RUNNING) and every requested executor
    reported RUNNING or COMPLETED."""
    if state_of(status) != RUNNING:
        return False
    ready = sum(state in (RUNNING, COMPLETED)
                for state in ((status or {}).get("executorState") or {}).values())
    return ready >= executor_instances(manifest)


# =========================================================================================
# The simulated Spark operator
# =========================================================================================


class SparkOperator(SimulatedController):
    """The Spark operator of the simulated cluster: the driver pod and
    ``executor.instances`` executor pods run (an executor that fails or ends is replaced
    while the driver runs). The application is SUBMITTED until the driver runs, then
    RUNNING; it is COMPLETED when the driver succeeds (the executors left are deleted) and
    FAILED when the driver fails."""

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
        every = pods.all()
        drivers = [p for p in every if p.pod_set == DRIVER]
        executors = [p for p in every if p.pod_set == EXECUTOR]
        new_status = dict(status)
        driver = drivers[-1] if drivers else None
        if driver is not None and driver.phase in ("Succeeded", "Failed"):
            pods.delete([p for p in executors if p.phase in _ACTIVE])
            if driver.phase == "Succeeded":
                state = {"state": COMPLETED}
            else:
                state = {"state": FAILED,
                         "errorMessage": "driver container failed with ExitCode: 1, "
                                         "Reason: Error"}
            executor_state = {p.name: "COMPLETED" if p.phase == "Succeeded" else "FAILED"
                              for p in executors}
        else:
            if driver is None:
                driver = pods.create(1, pod_set=DRIVER)[0]
            active = [p for p in executors if p.phase in _ACTIVE]
            missing = executor_instances(manifest) - len(active)
            if missing > 0:
                active += pods.create(missing, pod_set=EXECUTOR)
            state = {"state": RUNNING if driver.phase == "Running" else SUBMITTED}
            executor_state = {p.name: "RUNNING" if p.phase == "Running" else "PENDING"
                              for p in active}
        new_status.update(applicationState=state, executorState=executor_state,
                          driverInfo={"podName": driver.name})
        return new_status, spark_report(manifest, new_status)


def spark_report(manifest: Mapping[str, Any], status: Mapping[str, Any] | None) -> JobReport:
    """The driver and the executors; all ready while Kueue's PodsReady holds."""
    pods = 1 + executor_instances(manifest)
    finished = spark_finished(status)
    states = list(((status or {}).get("executorState") or {}).values())
    return JobReport(parallelism=pods, completions=None,
                     active=0 if finished else pods,
                     ready=pods if spark_pods_ready(manifest, status) else 0,
                     succeeded=int(finished is not None and finished[0] == "Succeeded"),
                     failed=sum(s == "FAILED" for s in states), finished=finished)


# =========================================================================================
# The integration
# =========================================================================================


class SparkApplication(GenericJob):
    framework_name = "sparkoperator.k8s.io/sparkapplication"
    api_version = "sparkoperator.k8s.io/v1beta2"
    kind = "SparkApplication"
    plural = "sparkapplications"
    max_name_length = MAX_NAME_LENGTH
    simulated = SparkOperator()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_sparkapplication_manifest(manifest, namespace=namespace)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return [{"name": DRIVER, "count": 1, "template": build_pod_template(manifest, DRIVER)},
                {"name": EXECUTOR, "count": executor_instances(manifest),
                 "template": build_pod_template(manifest, EXECUTOR)}]

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(build_pod_template(manifest, role), f"spec.{role}") for role in ROLES]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        """The driver's ``priorityClassName``, else the executors'."""
        for role in ROLES:
            name = role_spec(manifest, role).get("priorityClassName")
            if isinstance(name, str) and name:
                return name, f"spec.{role}.priorityClassName"
        return None

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """Unsuspended, the driver's info (first) and the executors' (second) merged into
        their Spark pod fields; a global ``spec.nodeSelector`` moves into both roles."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        spec["suspend"] = False
        global_selector = spec.get("nodeSelector")
        for role, info in zip(ROLES, infos, strict=False):
            spark = spec.setdefault(role, {})
            # As Kueue does: the role gets a pod template, where scheduling gates go.
            spark.setdefault("template", {"spec": {"containers": [
                {"name": CONTAINER_NAMES[role]}]}})
            selector = dict(global_selector) if global_selector is not None else dict(
                spark.get("nodeSelector") or {})
            _set_or_drop(spark, "labels", {**(spark.get("labels") or {}), **info.labels})
            _set_or_drop(spark, "annotations",
                         {**(spark.get("annotations") or {}), **info.annotations})
            _set_or_drop(spark, "nodeSelector", {**selector, **info.node_selector})
            tolerations = list(spark.get("tolerations") or [])
            tolerations.extend(t for t in info.tolerations if t not in tolerations)
            _set_or_drop(spark, "tolerations", tolerations)
        if global_selector is not None:
            del spec["nodeSelector"]
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Each role's Spark pod fields as the Workload's pod set recorded them (labels,
        annotations, node selector, tolerations, scheduling gates) and the executors'
        ``instances`` its count; unchanged when the pod sets are not the two roles."""
        if len(pod_sets) != len(ROLES):
            return copy.deepcopy(dict(manifest))
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        for role, pod_set in zip(ROLES, pod_sets, strict=True):
            spark = spec.setdefault(role, {})
            template = pod_set.get("template") or {}
            metadata = template.get("metadata") or {}
            pod_spec = template.get("spec") or {}
            _set_or_drop(spark, "labels", copy.deepcopy(dict(metadata.get("labels") or {})))
            _set_or_drop(spark, "annotations",
                         copy.deepcopy(dict(metadata.get("annotations") or {})))
            _set_or_drop(spark, "nodeSelector", dict(pod_spec.get("nodeSelector") or {}))
            _set_or_drop(spark, "tolerations", copy.deepcopy(list(pod_spec.get("tolerations")
                                                                   or [])))
            if isinstance(spark.get("template"), Mapping):
                _set_or_drop(spark["template"].setdefault("spec", {}), "schedulingGates",
                             copy.deepcopy(list(pod_spec.get("schedulingGates") or [])))
            if role == EXECUTOR:
                spark["instances"] = int(pod_set.get("count", 0))
        return result

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return spark_finished(status)

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return spark_report(manifest, status)

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
        """The SparkApplication to create on a cluster for an admitted workload: running
        with the infos merged, ``pod_labels`` in each role's ``labels`` (the operator puts
        them on the role's pods) and, with a ``gang_workload``, each role's pods in its pod
        set's pod group."""
        running = self.without_managed_by(self.run_with_pod_sets_info(
            {"spec": dict(manifest.get("spec") or {})}, infos))
        for role in ROLES:
            spark = running["spec"][role]
            spark["labels"] = {**(spark.get("labels") or {}), **pod_labels}
            if gang_workload:
                spark["template"].setdefault("spec", {})["workloadRef"] = {
                    "name": gang_workload, "podGroup": role}
        return self.remote_object(manifest, running["spec"], namespace=namespace,
                                  labels=labels)


def _set_or_drop(obj: dict[str, Any], key: str, value: Any) -> None:
    """``obj[key] = value``, or no ``key`` at all when ``value`` is empty."""
    if value:
        obj[key] = value
    else:
        obj.pop(key, None)
