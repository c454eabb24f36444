"""AppWrapper (``workload.codeflare.dev/v1beta2``): Kueue's AppWrapper integration
(``pkg/controller/jobs/appwrapper/``, over the AppWrapper project's ``pkg/utils``) and, on the
simulated cluster, the AppWrapper controller.

An AppWrapper wraps arbitrary Kubernetes objects (``spec.components[].template``); each
component names where its pods are described (``podSets``: a ``path`` to a pod template and
``replicas``), or, for the kinds the AppWrapper project knows, the pod sets are inferred.

* validation: the rules every kind shares, the AppWrapper webhook's invariants (no nested
  AppWrapper, no component in another namespace, each declared path a pod template,
  declared pod sets matching the inferred ones, 1 to 8 pod sets in all) and Kueue's labels;
* pod sets, in component order then path order: name = ``<appwrapper>-<index>`` (lower
  case), count = the pod set's ``replicas`` (default 1), the pod template at its path;
* started by ``spec.suspend`` = false with each pod set's info recorded in its component's
  ``podSetInfos``, which the AppWrapper controller injects into the pod templates when it
  creates the components; stopping clears them all (Kueue's ``ClearPodSetInfos``);
* finished by ``status.phase``: ``Succeeded``, or ``Failed`` once its resources are deleted
  (``ResourcesDeployed`` no longer true);
* PodsReady is the AppWrapper's ``PodsReady`` condition;
* ``AppWrapperController``: the simulated controller (each pod set a gang, success when every
  pod succeeded, a failed pod resets the whole AppWrapper up to its retry limit).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
    merge_into_template,
    templates_priority_class,
)
from scheduling.jobframework.validation import (
    int_value,
    validate_kueue_labels,
    validate_object,
    validate_pod_template,
)

COMPONENTS = "spec.components"
# The AppWrapper webhook holds an AppWrapper to Kueue's historical limit of pod sets.
MAX_APPWRAPPER_POD_SETS = 8
# A pod set is named <appwrapper>-<index>, and a pod set name is a DNS label.
MAX_POD_SET_NAME_LENGTH = 63
APPWRAPPER_LABEL = "workload.codeflare.dev/appwrapper"
RETRY_LIMIT_ANNOTATION = "workload.codeflare.dev.appwrapper/retryLimit"
# The AppWrapper controller's default fault-tolerance retry limit.
DEFAULT_RETRY_LIMIT = 3
SUCCEEDED, FAILED = "Succeeded", "Failed"
RUNNING, RESETTING = "Running", "Resetting"
SUCCEEDED_MESSAGE = "AppWrapper finished successfully"
FAILED_MESSAGE = "AppWrapper failed"
_ACTIVE = ("Pending", "Running")


# =========================================================================================
# Paths inside a component
# =========================================================================================

_PATH_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def resolve(component: Any, path: str) -> Any:
    """The value at ``path`` (``template.spec.template``, ``template.spec.replicatedJobs[0]
    .template``) of a component, or ``None`` when the path does not lead anywhere. As in the
    AppWrapper project, a path starts at the component's ``template``."""
    if not isinstance(path, str) or not path.startswith("template"):
        return None
    rest = path[len("template"):]
    node = (component or {}).get("template") if isinstance(component, Mapping) else None
    position = 0
    while position < len(rest):
        match = _PATH_STEP.match(rest, position)
        if match is None:
            return None
        key, index = match.group(1), match.group(2)
        if key is not None:
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
        else:
            if not isinstance(node, list) or int(index) >= len(node):
                return None
            node = node[int(index)]
        position = match.end()
    return node


def _is_pod_template(value: Any) -> bool:
    """What the AppWrapper project accepts as a pod template: an object with a ``spec``."""
    return isinstance(value, Mapping) and isinstance(value.get("spec"), Mapping)


# =========================================================================================
# Pod sets: declared or inferred
# =========================================================================================


@dataclass(frozen=True)
class ComponentPodSet:
    """One pod set of a component: where its pod template is and how many pods it runs."""

    path: str
    replicas: int


class InferenceError(ValueError):
    """A component of a known kind whose pod sets cannot be inferred."""


def _replicas_at(component: Mapping[str, Any], path: str) -> int:
    """The count at ``path``: 1 when absent, an error when it is not an integer."""
    parent_path, _, key = path.rpartition(".")
    parent = resolve(component, parent_path)
    if not isinstance(parent, Mapping):
        raise InferenceError(f"at path position '{parent_path}' non-map value")
    value = parent.get(key)
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int):
        raise InferenceError(f"at path position '{path}' non-int value {value!r}")
    return int(value)


def _optional_int(component: Mapping[str, Any], path: str) -> int | None:
    value = resolve(component, path)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _job_pods(component: Mapping[str, Any], prefix: str) -> int:
    """A Job's pods at once: parallelism (default 1), at most completions."""
    pods = _optional_int(component, f"{prefix}parallelism")
    pods = 1 if pods is None else pods
    completions = _optional_int(component, f"{prefix}completions")
    return completions if completions is not None and completions < pods else pods


def _ray_pod_sets(component: Mapping[str, Any], prefix: str) -> list[ComponentPodSet]:
    result = [ComponentPodSet(f"{prefix}headGroupSpec.template", 1)]
    workers = resolve(component, f"{prefix}workerGroupSpecs")
    for index, _ in enumerate(workers if isinstance(workers, list) else ()):
        group = f"{prefix}workerGroupSpecs[{index}]."
        if resolve(component, f"{group}template") is not None:
            result.append(ComponentPodSet(f"{group}template",
                                          _replicas_at(component, f"{group}replicas")))
    return result


def _infer(component: Mapping[str, Any]) -> list[ComponentPodSet]:
    template = component.get("template")
    gvk = (template.get("apiVersion"), template.get("kind")) if isinstance(
        template, Mapping) else (None, None)
    if gvk == ("batch/v1", "Job"):
        return [ComponentPodSet("template.spec.template",
                                _job_pods(component, "template.spec."))]
    if gvk == ("jobset.x-k8s.io/v1alpha2", "JobSet"):
        result = []
        jobs = resolve(component, "template.spec.replicatedJobs")
        for index, _ in enumerate(jobs if isinstance(jobs, list) else ()):
            prefix = f"template.spec.replicatedJobs[{index}]."
            if resolve(component, f"{prefix}template") is None:
                continue
            replicas = _optional_int(component, f"{prefix}replicas")
            result.append(ComponentPodSet(
                f"{prefix}template.spec.template",
                (1 if replicas is None else replicas)
                * _job_pods(component, f"{prefix}template.spec.")))
        return result
    if gvk == ("kubeflow.org/v1", "PyTorchJob"):
        result = []
        for replica_type in ("Master", "Worker"):
            prefix = f"template.spec.pytorchReplicaSpecs.{replica_type}."
            if resolve(component, f"{prefix}template") is not None:
                result.append(ComponentPodSet(f"{prefix}template",
                                              _replicas_at(component, f"{prefix}replicas")))
        return result
    if gvk == ("ray.io/v1", "RayCluster"):
        return _ray_pod_sets(component, "template.spec.")
    if gvk == ("ray.io/v1", "RayJob"):
        return _ray_pod_sets(component, "template.spec.rayClusterSpec.")
    if gvk == ("v1", "Pod"):
        return [ComponentPodSet("template", 1)]
    if gvk in (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")):
        if resolve(component, "template.spec.template") is None:
            return []
        return [ComponentPodSet("template.spec.template",
                                _replicas_at(component, "template.spec.replicas"))]
    return []


def infer_pod_sets(component: Mapping[str, Any]) -> list[ComponentPodSet]:
    """The pod sets the AppWrapper project infers for a component of a kind it knows (Job,
    JobSet, PyTorchJob, RayCluster, RayJob, Pod, Deployment, StatefulSet); none for another
    kind. Raises ``InferenceError`` when a count is not an integer or a path is not a pod
    template."""
    inferred = _infer(component)
    for pod_set in inferred:
        if not _is_pod_template(resolve(component, pod_set.path)):
            raise InferenceError(f"{pod_set.path} does not refer to a v1.PodSpecTemplate")
    return inferred


def declared_replicas(pod_set: Mapping[str, Any]) -> int:
    value = pod_set.get("replicas")
    return 1 if value is None else int(value)


def component_pod_sets(component: Mapping[str, Any]) -> list[ComponentPodSet]:
    """The pod sets of a component: the declared ``podSets``, else the inferred ones."""
    declared = component.get("podSets") or ()
    if declared:
        return [ComponentPodSet(str(ps.get("path", "")), declared_replicas(ps))
                for ps in declared]
    try:
        return infer_pod_sets(component)
    except InferenceError:
        return []


def components(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in (manifest.get("spec") or {}).get("components") or ()
            if isinstance(c, Mapping)]


def pod_set_entries(manifest: Mapping[str, Any]
                    ) -> list[tuple[int, ComponentPodSet, Mapping[str, Any]]]:
    """Every pod set whose path leads to a pod template, in order: (component index, pod
    set, its pod template). A path that does not is skipped, as the AppWrapper project
    does."""
    result = []
    for index, component in enumerate(components(manifest)):
        for pod_set in component_pod_sets(component):
            template = resolve(component, pod_set.path)
            if _is_pod_template(template):
                result.append((index, pod_set, template))
    return result


def pod_set_name(manifest: Mapping[str, Any], index: int) -> str:
    name = str((manifest.get("metadata") or {}).get("name", ""))
    return f"{name}-{index}".lower()


def _template_for_pod_set(template: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template Kueue records: labels, annotations and the pod spec."""
    result: dict[str, Any] = {}
    metadata = template.get("metadata")
    if isinstance(metadata, Mapping):
        kept = {k: copy.deepcopy(metadata[k]) for k in ("labels", "annotations")
                if isinstance(metadata.get(k), Mapping)}
        if kept:
            result["metadata"] = kept
    result["spec"] = copy.deepcopy(dict(template.get("spec") or {}))
    return result


# =========================================================================================
# Validation
# =========================================================================================


def validate_appwrapper_manifest(manifest: Any, *, namespace: str) -> list[FieldError]:
    """What the AppWrapper API, its webhook and Kueue's refuse on create."""
    if not isinstance(manifest, Mapping):
        return [FieldError("", "an AppWrapper manifest must be an object")]
    errors, labels, _ = validate_object(
        manifest, api_version=AppWrapper.api_version, kind=AppWrapper.kind,
        namespace=namespace)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError("spec.suspend", "must be a boolean"))
    value = spec.get("components")
    if not isinstance(value, list):
        errors.append(FieldError(COMPONENTS, "is required" if value is None
                                 else "must be a list"))
        return errors
    count = 0
    for index, component in enumerate(value):
        count += _validate_component(component, f"{COMPONENTS}[{index}]", namespace, errors)
    if count == 0:
        errors.append(FieldError(COMPONENTS, "components contains no podspecs"))
    elif count > MAX_APPWRAPPER_POD_SETS:
        errors.append(FieldError(COMPONENTS, f"components contains {count} podspecs; at most "
                                 f"{MAX_APPWRAPPER_POD_SETS} are allowed"))
    name = (manifest.get("metadata") or {}).get("name")
    if isinstance(name, str) and count:
        last = f"{name}-{count - 1}"
        if len(last) > MAX_POD_SET_NAME_LENGTH:
            errors.append(FieldError("metadata.name", f"the pod set name {last!r} must be no "
                                     f"more than {MAX_POD_SET_NAME_LENGTH} characters"))
    errors.extend(validate_kueue_labels(labels))
    return errors


def _validate_component(component: Any, path: str, namespace: str,
                        errors: list[FieldError]) -> int:
    """One component's errors appended; returns how many pod sets it has."""
    if not isinstance(component, Mapping):
        errors.append(FieldError(path, "must be an object"))
        return 0
    template = component.get("template")
    tpath = f"{path}.template"
    if not isinstance(template, Mapping):
        errors.append(FieldError(tpath, "is required" if template is None
                                 else "must be an object"))
        return 0
    for key in ("apiVersion", "kind"):
        if not isinstance(template.get(key), str) or not template[key]:
            errors.append(FieldError(f"{tpath}.{key}", "is required: the template must be a "
                                     "Kubernetes object"))
    if (template.get("apiVersion"), template.get("kind")) == (AppWrapper.api_version,
                                                              AppWrapper.kind):
        errors.append(FieldError(tpath, "Nested AppWrappers are forbidden"))
    component_namespace = (template.get("metadata") or {}).get("namespace") if isinstance(
        template.get("metadata"), Mapping) else None
    if component_namespace not in (None, "", namespace):
        errors.append(FieldError(f"{tpath}.metadata.namespace",
                                 "AppWrappers cannot create objects in other namespaces"))
    declared = component.get("podSets")
    if declared is not None and not isinstance(declared, list):
        errors.append(FieldError(f"{path}.podSets", "must be a list"))
        declared = []
    declared = declared or []
    declared_ok = _validate_declared(component, declared, path, errors)
    try:
        inferred = infer_pod_sets(component)
    except InferenceError as error:
        errors.append(FieldError(tpath, f"error inferring PodSets: {error}"))
        return len(declared)
    if declared_ok:
        problem = _mismatch(declared, inferred)
        if problem:
            errors.append(FieldError(f"{path}.podSets", problem))
    for pod_set in (component_pod_sets(component) if declared_ok else inferred):
        pod_template = resolve(component, pod_set.path)
        if _is_pod_template(pod_template):
            errors.extend(validate_pod_template(pod_template, f"{path}.{pod_set.path}",
                                                for_job=True))
    return max(len(declared), len(inferred))


def _validate_declared(component: Mapping[str, Any], declared: list[Any], path: str,
                       errors: list[FieldError]) -> bool:
    """The declared pod sets: each an object whose path leads to a pod template and whose
    replicas are an int32 >= 0. Returns whether they all are."""
    ok = True
    for index, pod_set in enumerate(declared):
        ppath = f"{path}.podSets[{index}]"
        if not isinstance(pod_set, Mapping):
            errors.append(FieldError(ppath, "must be an object"))
            ok = False
            continue
        target = pod_set.get("path")
        if not isinstance(target, str) or not target:
            errors.append(FieldError(f"{ppath}.path", "podspec must specify path"))
            ok = False
        elif not _is_pod_template(resolve(component, target)):
            errors.append(FieldError(f"{ppath}.path", f"path {target!r} does not refer to a "
                                     "v1.PodSpecTemplate"))
            ok = False
        if pod_set.get("replicas") is not None and int_value(
                pod_set["replicas"], f"{ppath}.replicas", errors, minimum=0) is None:
            ok = False
    return ok


def _mismatch(declared: Sequence[Mapping[str, Any]],
              inferred: Sequence[ComponentPodSet]) -> str:
    """The AppWrapper project's ``ValidatePodSets``: no two declared pod sets with one path
    and, for a kind it knows, the declared ones being the inferred ones."""
    by_path: dict[str, Mapping[str, Any]] = {}
    for entry in declared:
        path = str(entry.get("path"))
        if path in by_path:
            return f"multiple DeclaredPodSets with path '{path}'"
        by_path[path] = entry
    if not declared or not inferred:
        return ""
    if len(inferred) != len(declared):
        return (f"DeclaredPodSet count {len(declared)} differs from inferred count "
                f"{len(inferred)}")
    for pod_set in inferred:
        match = by_path.get(pod_set.path)
        if match is None:
            return f"PodSet with path '{pod_set.path}' is missing"
        if declared_replicas(match) != pod_set.replicas:
            return (f"replica count {declared_replicas(match)} differs from inferred count "
                    f"{pod_set.replicas} for PodSet at path position '{pod_set.path}'")
    return ""


# =========================================================================================
# Pod set infos: recorded by Kueue, injected by the AppWrapper controller
# =========================================================================================


def _aw_pod_set_info(info: PodSetInfo) -> dict[str, Any]:
    """A ``PodSetInfo`` as an AppWrapper's ``podSetInfos`` entry (empty fields left out)."""
    entry: dict[str, Any] = {}
    for key, value in (("annotations", info.annotations), ("labels", info.labels),
                       ("nodeSelector", info.node_selector),
                       ("tolerations", info.tolerations)):
        if value:
            entry[key] = copy.deepcopy(value)
    return entry


def set_pod_set_infos(manifest: Mapping[str, Any],
                      infos: Sequence[PodSetInfo]) -> dict[str, Any]:
    """A copy with each pod set's info in its component's ``podSetInfos``, in pod-set order
    (Kueue's ``SetPodSetInfos``)."""
    result = copy.deepcopy(dict(manifest))
    remaining = list(infos)
    for component in result.setdefault("spec", {}).get("components") or ():
        count = len(component_pod_sets(component))
        component["podSetInfos"] = [_aw_pod_set_info(info) for info in remaining[:count]]
        remaining = remaining[count:]
    return result


def clear_pod_set_infos(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with every component's ``podSetInfos`` removed (Kueue's ``ClearPodSetInfos``)."""
    result = copy.deepcopy(dict(manifest))
    for component in result.setdefault("spec", {}).get("components") or ():
        component.pop("podSetInfos", None)
    return result


def injected_components(manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The objects the AppWrapper controller creates: each component's template with its
    ``podSetInfos`` (node selector, tolerations, labels, annotations) merged into the pod
    template at each pod set's path, and the AppWrapper's label on each pod template."""
    name = str((manifest.get("metadata") or {}).get("name", ""))
    result = []
    for component in components(manifest):
        working = {"template": copy.deepcopy(component.get("template") or {})}
        infos = component.get("podSetInfos") or ()
        for index, pod_set in enumerate(component_pod_sets(component)):
            template = resolve(working, pod_set.path)
            if not _is_pod_template(template):
                continue
            entry = infos[index] if index < len(infos) else {}
            merged = merge_into_template(template, PodSetInfo(
                name="", count=pod_set.replicas,
                node_selector=dict(entry.get("nodeSelector") or {}),
                tolerations=list(entry.get("tolerations") or ()),
                labels={**(entry.get("labels") or {}), APPWRAPPER_LABEL: name},
                annotations=dict(entry.get("annotations") or {})))
            template.clear()
            template.update(merged)
        result.append(working["template"])
    return result


def _pod_templates_in(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of the object itself (for changes in place), in pod-set order."""
    result = []
    for component in (manifest.get("spec") or {}).get("components") or ():
        for pod_set in component_pod_sets(component):
            template = resolve(component, pod_set.path)
            if _is_pod_template(template):
                result.append(template)
    return result


# =========================================================================================
# Status
# =========================================================================================


def expected_pods(manifest: Mapping[str, Any]) -> int:
    return sum(pod_set.replicas for _, pod_set, _ in pod_set_entries(manifest))


def appwrapper_finished(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """Kueue's ``Finished``: phase Succeeded; phase Failed once the resources are gone
    (while ``ResourcesDeployed`` holds the AppWrapper is still deleting them)."""
    status = status or {}
    phase = status.get("phase")
    if phase == SUCCEEDED:
        return "Succeeded", SUCCEEDED_MESSAGE
    if phase == FAILED and not cond.is_true(list(status.get("conditions") or ()),
                                            "ResourcesDeployed"):
        return "Failed", FAILED_MESSAGE
    return None


# =========================================================================================
# The simulated AppWrapper controller
# =========================================================================================


class AppWrapperController(SimulatedController):
    """The AppWrapper controller of the simulated cluster, with the controllers of its
    components folded in: each pod set runs its ``replicas`` pods (created as one gang when
    the AppWrapper starts). The AppWrapper succeeds when every pod succeeded. A failed pod
    resets it (every pod deleted, then recreated, ``status.resettingCount`` + 1) while the
    retry limit (annotation ``workload.codeflare.dev.appwrapper/retryLimit``, default 3)
    allows, else it fails."""

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
        conditions = list(status.get("conditions") or [])
        conditions = cond.set_condition(conditions, "QuotaReserved", True, "AppWrapperRunning",
                                        "Kueue admitted the AppWrapper", now=now)
        by_pod_set: dict[str, list[SimulatedPod]] = {}
        for pod in pods.all():
            by_pod_set.setdefault(pod.pod_set, []).append(pod)
        entries = [(pod_set_name(manifest, i), ps.replicas)
                   for i, (_, ps, _) in enumerate(pod_set_entries(manifest))]
        failed = any(p.phase == "Failed" for p in pods.all())
        done = all(sum(p.phase == "Succeeded" for p in by_pod_set.get(name, ())) >= replicas
                   for name, replicas in entries)
        resets = int(status.get("resettingCount", 0) or 0)
        if failed:
            pods.delete(pods.all())
            if resets < _retry_limit(manifest):
                new_status.update(phase=RESETTING, resettingCount=resets + 1)
                conditions = cond.set_condition(conditions, "PodsReady", False, "Resetting",
                                                "a pod failed: the AppWrapper is reset",
                                                now=now)
            else:
                new_status["phase"] = FAILED
                conditions = cond.set_condition(conditions, "ResourcesDeployed", False,
                                                "Failed", "resources deleted after failure",
                                                now=now)
                conditions = cond.set_condition(conditions, "PodsReady", False, "Failed",
                                                FAILED_MESSAGE, now=now)
        elif done:
            new_status["phase"] = SUCCEEDED
            conditions = cond.set_condition(conditions, "PodsReady", False, "PodsSucceeded",
                                            "all pods succeeded", now=now)
        else:
            new_status["phase"] = RUNNING
            conditions = cond.set_condition(conditions, "ResourcesDeployed", True,
                                            "AppWrapperRunning", "resources are deployed",
                                            now=now)
            ready = True
            for name, replicas in entries:
                own = by_pod_set.get(name, [])
                active = [p for p in own if p.phase in _ACTIVE]
                missing = replicas - len(active) - sum(p.phase == "Succeeded" for p in own)
                if missing > 0:
                    pods.create(missing, pod_set=name)
                    ready = False
                ready = ready and all(p.ready for p in active)
            if ready:
                conditions = cond.set_condition(conditions, "PodsReady", True, "PodsReady",
                                                "all pods are ready", now=now)
        new_status["conditions"] = conditions
        return new_status, appwrapper_report(manifest, new_status)


def _retry_limit(manifest: Mapping[str, Any]) -> int:
    value = ((manifest.get("metadata") or {}).get("annotations") or {}).get(
        RETRY_LIMIT_ANNOTATION)
    try:
        return int(value) if value is not None else DEFAULT_RETRY_LIMIT
    except ValueError:
        return DEFAULT_RETRY_LIMIT


def appwrapper_report(manifest: Mapping[str, Any], status: Mapping[str, Any] | None
                      ) -> JobReport:
    """PodsReady is the AppWrapper's ``PodsReady`` condition; the AppWrapper does not count
    its pods, so all of them are ready while it holds."""
    pods = expected_pods(manifest)
    conditions = list((status or {}).get("conditions") or ())
    finished = appwrapper_finished(status)
    ready = cond.is_true(conditions, "PodsReady")
    return JobReport(parallelism=pods, completions=None, active=0 if finished else pods,
                     ready=pods if ready else 0,
                     succeeded=pods if finished and finished[0] == "Succeeded" else 0,
                     failed=0, finished=finished)


# =========================================================================================
# The integration
# =========================================================================================


class AppWrapper(GenericJob):
    framework_name = "workload.codeflare.dev/appwrapper"
    api_version = "workload.codeflare.dev/v1beta2"
    kind = "AppWrapper"
    plural = "appwrappers"
    simulated = AppWrapperController()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_appwrapper_manifest(manifest, namespace=namespace)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return [{"name": pod_set_name(manifest, i), "count": pod_set.replicas,
                 "template": _template_for_pod_set(template)}
                for i, (_, pod_set, template) in enumerate(pod_set_entries(manifest))]

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return [(template, f"{COMPONENTS}[{index}].{pod_set.path}")
                for index, pod_set, template in pod_set_entries(manifest)]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        """The first pod template that names a ``priorityClassName``."""
        return templates_priority_class(self.pod_templates(manifest))

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        result = set_pod_set_infos(manifest, infos)
        result["spec"]["suspend"] = False
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        return clear_pod_set_infos(manifest)

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return appwrapper_finished(status)

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return appwrapper_report(manifest, status)

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
        """The AppWrapper to create on a cluster for an admitted workload: running with the
        infos in ``podSetInfos``, ``pod_labels`` (and with a ``gang_workload``, the pod
        group) on each pod template of its components."""
        running = self.without_managed_by(self.run_with_pod_sets_info(
            {"metadata": dict(manifest.get("metadata") or {}),
             "spec": dict(manifest.get("spec") or {})}, infos))
        names = [pod_set_name(manifest, i) for i in range(len(pod_set_entries(manifest)))]
        label_pod_templates(_pod_templates_in(running), names, pod_labels=pod_labels,
                            gang_workload=gang_workload)
        return self.remote_object(manifest, running["spec"], namespace=namespace,
                                  labels=labels)
