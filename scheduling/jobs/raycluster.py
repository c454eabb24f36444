"""RayCluster (``ray.io/v1``): Kueue's RayCluster integration
(``pkg/controller/jobs/raycluster/{raycluster_controller,common,raycluster_webhook}.go``)
and, on the simulated cluster, the KubeRay operator's part for a RayCluster.

* validation: the rules every kind shares, Kueue's Ray rules (at most 17 worker groups, none
  named ``head``, in-tree autoscaling only for an elastic cluster), the RayCluster API's
  unique group names and replicas, and Kueue's labels;
* pod sets: ``head`` (1 pod, the head group's template, plus the autoscaler container when
  in-tree autoscaling is on), then one per worker group: its group name in lower case,
  ``replicas`` (default 1) × ``numOfHosts`` pods; ``minReplicas``/``maxReplicas`` do not
  count;
* suspended by ``spec.suspend``; head = info[0], worker group i = info[i + 1];
* never finished: a cluster runs until it is deleted or its Workload deactivated;
* elastic (``kueue.x-k8s.io/elastic-job: "true"``): a worker group's ``replicas`` scale
  through workload slices;
* PodsReady: ``status.state`` is ``ready``.

The functions on a cluster spec (``cluster_pod_sets``, ``validate_cluster_spec``, …) take
the spec wherever it lives, so that the kinds which embed one can use them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import ELASTIC_JOB_ANNOTATION, MAX_POD_SETS
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    ScalablePodSet,
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
    int_value,
    object_map,
    unique_label_name,
    validate_kueue_labels,
    validate_object,
    validate_pod_template,
)

HEAD = "head"
MAX_NAME_LENGTH = 63
# KubeRay's in-tree autoscaler sidecar, which Kueue counts in the head pod set with these
# requests unless ``autoscalerOptions.resources`` says otherwise.
AUTOSCALER_CONTAINER = "autoscaler"
AUTOSCALER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
STATE_READY = "ready"
_ACTIVE = ("Pending", "Running")


# =========================================================================================
# A Ray cluster spec (a RayCluster's spec, a RayJob's rayClusterSpec, …)
# =========================================================================================


def worker_groups(cluster: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [g for g in cluster.get("workerGroupSpecs") or () if isinstance(g, Mapping)]


def group_pod_set_name(group: Mapping[str, Any]) -> str:
    return str(group.get("groupName", "")).lower()


def group_replicas(group: Mapping[str, Any]) -> int:
    """``replicas``, which the RayCluster CRD defaults to 1."""
    value = group.get("replicas")
    return 1 if value is None else int(value)


def hosts(group: Mapping[str, Any]) -> int:
    value = group.get("numOfHosts")
    return int(value) if isinstance(value, int) and value > 1 else 1


def group_pods(group: Mapping[str, Any]) -> int:
    return group_replicas(group) * hosts(group)


def autoscaling(cluster: Mapping[str, Any]) -> bool:
    return cluster.get("enableInTreeAutoscaling") is True


def head_template(cluster: Mapping[str, Any]) -> dict[str, Any]:
    """The head group's template as Kueue counts it: with the autoscaler container when
    in-tree autoscaling is on."""
    template = copy.deepcopy(dict((cluster.get("headGroupSpec") or {}).get("template") or {}))
    if autoscaling(cluster):
        options = cluster.get("autoscalerOptions") or {}
        resources = copy.deepcopy(options.get("resources")) or {
            "requests": dict(AUTOSCALER_REQUESTS)}
        spec = template.setdefault("spec", {})
        spec["containers"] = [*spec.get("containers", []),
                              {"name": AUTOSCALER_CONTAINER, "resources": resources}]
    return template


def cluster_pod_sets(cluster: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{"name": HEAD, "count": 1, "template": head_template(cluster)}] + [
        {"name": group_pod_set_name(g), "count": group_pods(g),
         "template": copy.deepcopy(dict(g.get("template") or {}))}
        for g in worker_groups(cluster)]


def cluster_templates(cluster: Mapping[str, Any], path: str) -> list[tuple[Any, str]]:
    return [((cluster.get("headGroupSpec") or {}).get("template"),
             f"{path}.headGroupSpec.template")] + [
        (g.get("template"), f"{path}.workerGroupSpecs[{i}].template")
        for i, g in enumerate(cluster.get("workerGroupSpecs") or ()) if isinstance(g, Mapping)]


def cluster_priority_class(cluster: Mapping[str, Any], path: str) -> tuple[str, str] | None:
    """The head template's pod PriorityClass, else the first worker group's that names one."""
    return templates_priority_class(cluster_templates(cluster, path))


def validate_cluster_spec(cluster: Any, path: str, *, elastic: bool) -> list[FieldError]:
    """Kueue's Ray webhook rules and the RayCluster API's own on a cluster spec at ``path``."""
    if not isinstance(cluster, Mapping):
        return [FieldError(path, "is required" if cluster is None else "must be an object")]
    errors: list[FieldError] = []
    if cluster.get("suspend") is not None and not isinstance(cluster["suspend"], bool):
        errors.append(FieldError(f"{path}.suspend", "must be a boolean"))
    if cluster.get("enableInTreeAutoscaling") is not None:
        if not isinstance(cluster["enableInTreeAutoscaling"], bool):
            errors.append(FieldError(f"{path}.enableInTreeAutoscaling", "must be a boolean"))
        elif autoscaling(cluster) and not elastic:
            errors.append(FieldError(f"{path}.enableInTreeAutoscaling",
                                     "a kueue managed job can use autoscaling only when it is "
                                     f"elastic ({ELASTIC_JOB_ANNOTATION}: \"true\")"))
    head = object_map(cluster.get("headGroupSpec"), f"{path}.headGroupSpec", errors)
    if cluster.get("headGroupSpec") is None:
        errors.append(FieldError(f"{path}.headGroupSpec", "is required"))
    else:
        errors.extend(validate_pod_template(head.get("template"),
                                            f"{path}.headGroupSpec.template", for_job=True))
    groups = cluster.get("workerGroupSpecs")
    if groups is None:
        return errors
    if not isinstance(groups, list):
        return [*errors, FieldError(f"{path}.workerGroupSpecs", "must be a list")]
    if len(groups) + 1 > MAX_POD_SETS:
        errors.append(FieldError(f"{path}.workerGroupSpecs", f"must have at most "
                                 f"{MAX_POD_SETS - 1} items (one pod set each, and one for "
                                 "the head)"))
    seen: set[str] = set()
    for index, group in enumerate(groups):
        group_path = f"{path}.workerGroupSpecs[{index}]"
        if not isinstance(group, Mapping):
            errors.append(FieldError(group_path, "must be an object"))
            continue
        name = group.get("groupName")
        if isinstance(name, str) and name.lower() == HEAD:
            errors.append(FieldError(f"{group_path}.groupName",
                                     f"a worker group may not be named {HEAD!r}"))
        else:
            unique_label_name(name, f"{group_path}.groupName", seen, errors,
                              what="worker group name")
        for key in ("replicas", "minReplicas", "maxReplicas"):
            if group.get(key) is not None:
                int_value(group[key], f"{group_path}.{key}", errors, minimum=0)
        if group.get("numOfHosts") is not None:
            int_value(group["numOfHosts"], f"{group_path}.numOfHosts", errors, minimum=1)
        errors.extend(validate_pod_template(group.get("template"), f"{group_path}.template",
                                            for_job=True))
    return errors


def cluster_templates_for_update(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    """The head's and each worker group's template of a cluster spec (a copy the caller
    owns), created where absent, in pod-set order."""
    templates = [cluster.setdefault("headGroupSpec", {}).setdefault("template", {})]
    for group in cluster.get("workerGroupSpecs") or ():
        templates.append(group.setdefault("template", {}))
    return templates


def merge_infos(cluster: dict[str, Any], infos: Sequence[PodSetInfo]) -> None:
    """Head = info[0], worker group i = info[i + 1], as Kueue injects them."""
    for template, info in zip(cluster_templates_for_update(cluster), infos, strict=False):
        merged = merge_into_template(template, info)
        template.clear()
        template.update(merged)


def restore_infos(cluster: dict[str, Any], pod_sets: Sequence[Mapping[str, Any]]) -> None:
    templates = cluster_templates_for_update(cluster)
    for template, pod_set in zip(templates, pod_sets, strict=False):
        restored = restore_template(template, pod_set.get("template") or {})
        template.clear()
        template.update(restored)


def add_pod_labels(templates: Sequence[tuple[dict[str, Any], str]],
                   pod_labels: Mapping[str, str], gang_workload: str | None) -> None:
    """``pod_labels`` on each (template, pod set name); with a ``gang_workload``, each
    template's pods in that Workload's pod group of their pod set."""
    for template, name in templates:
        template_meta = template.setdefault("metadata", {})
        template_meta["labels"] = {**(template_meta.get("labels") or {}), **pod_labels}
        if gang_workload:
            template.setdefault("spec", {})["workloadRef"] = {"name": gang_workload,
                                                             "podGroup": name}


def cluster_templates_by_pod_set(cluster: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    return list(zip(cluster_templates_for_update(cluster),
                    [ps["name"] for ps in cluster_pod_sets(cluster)], strict=False))


def remote_object(job: GenericJob, manifest: Mapping[str, Any], *, namespace: str,
                  labels: Mapping[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    """The object to create on a cluster: the name, ``labels`` added to its own, its
    annotations, and ``spec``."""
    metadata = manifest.get("metadata") or {}
    return {
        "apiVersion": job.api_version,
        "kind": job.kind,
        "metadata": {"name": str(metadata.get("name", "")), "namespace": namespace,
                     "labels": {**(metadata.get("labels") or {}), **labels},
                     "annotations": dict(metadata.get("annotations") or {})},
        "spec": spec,
    }


def scalable_groups(cluster: Mapping[str, Any], path: str) -> list[ScalablePodSet]:
    """The worker groups whose ``replicas`` is their pod count (one host per replica)."""
    return [ScalablePodSet(group_pod_set_name(g), f"{path}.workerGroupSpecs[{i}].replicas",
                           group_replicas(g))
            for i, g in enumerate(worker_groups(cluster)) if hosts(g) == 1]


# =========================================================================================
# The simulated KubeRay operator
# =========================================================================================


class RayClusterController(SimulatedController):
    """KubeRay's cluster part on the simulated cluster: one head pod and each worker group's
    ``replicas`` × ``numOfHosts`` pods, kept there (a pod that ends is replaced; a group
    scaled down loses its newest pods). An elastic cluster runs at most the pods its slices
    allow now, the groups filled in order. The cluster is ``ready`` while every pod it wants
    is ready; it never finishes."""

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
        return reconcile_cluster(manifest.get("spec") or {}, status, pods,
                                 allowed=allowed if elastic else None)


def reconcile_cluster(cluster: Mapping[str, Any], status: Mapping[str, Any],
                      pods: SimulatedPods, *, allowed: int | None
                      ) -> tuple[dict[str, Any], JobReport]:
    """One pass of a Ray cluster spec's pods; the new status and the report."""
    by_pod_set: dict[str, list[SimulatedPod]] = {}
    for pod in pods.all():
        if pod.phase in _ACTIVE:
            by_pod_set.setdefault(pod.pod_set, []).append(pod)
    room = allowed
    active: list[SimulatedPod] = []
    wanted = 0
    for pod_set in cluster_pod_sets(cluster):
        want = int(pod_set["count"])
        if room is not None:
            want = max(min(want, room), 0)
            room -= want
        wanted += want
        own = by_pod_set.get(pod_set["name"], [])
        if len(own) > want:
            pods.delete(sorted(own, key=lambda p: p.name)[want:], reason="SuccessfulDelete")
            own = sorted(own, key=lambda p: p.name)[:want]
        elif len(own) < want:
            own = own + pods.create(want - len(own), pod_set=pod_set["name"])
        active += own
    ready = sum(p.ready for p in active)
    new_status = dict(status)
    new_status["state"] = STATE_READY if wanted and ready >= wanted else ""
    new_status["readyWorkerReplicas"] = sum(p.ready for p in active if p.pod_set != HEAD)
    new_status["availableWorkerReplicas"] = new_status["readyWorkerReplicas"]
    new_status["desiredWorkerReplicas"] = wanted - min(wanted, 1)
    return new_status, cluster_report(wanted, len(active), ready, new_status)


def cluster_report(wanted: int, active: int, ready: int,
                   status: Mapping[str, Any]) -> JobReport:
    """PodsReady is the cluster's ``ready`` state, not a pod count: all of ``wanted`` are
    reported ready once it is."""
    ready_now = wanted if status.get("state") == STATE_READY else min(ready, wanted - 1)
    return JobReport(parallelism=wanted, completions=None, active=active,
                     ready=max(ready_now, 0), succeeded=0, failed=0)


# =========================================================================================
# The integration
# =========================================================================================


class RayCluster(GenericJob):
    framework_name = "ray.io/raycluster"
    api_version = "ray.io/v1"
    kind = "RayCluster"
    plural = "rayclusters"
    elastic = True
    max_name_length = MAX_NAME_LENGTH
    simulated = RayClusterController()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        if not isinstance(manifest, Mapping):
            return [FieldError("", "a RayCluster manifest must be an object")]
        errors, labels, annotations = validate_object(
            manifest, api_version=self.api_version, kind=self.kind, namespace=namespace,
            max_name_length=MAX_NAME_LENGTH)
        elastic = slices_enabled and annotations.get(ELASTIC_JOB_ANNOTATION) == "true"
        errors.extend(validate_cluster_spec(manifest.get("spec"), "spec", elastic=elastic))
        errors.extend(validate_kueue_labels(labels))
        return errors

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return cluster_pod_sets(manifest.get("spec") or {})

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return cluster_templates(manifest.get("spec") or {}, "spec")

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        return cluster_priority_class(manifest.get("spec") or {}, "spec")

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        spec["suspend"] = False
        merge_infos(spec, infos)
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        result = copy.deepcopy(dict(manifest))
        if len(pod_sets) != 1 + len(worker_groups(result.get("spec") or {})):
            return result  # not this object's pod sets: Kueue skips
        restore_infos(result.setdefault("spec", {}), pod_sets)
        return result

    def scalable_pod_sets(self, manifest: Mapping[str, Any]) -> list[ScalablePodSet]:
        return scalable_groups(manifest.get("spec") or {}, "spec")

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return None

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return cluster_report(wanted, ready_pods, ready_pods, status)

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
        spec = self.run_with_pod_sets_info({"spec": dict(manifest.get("spec") or {})},
                                           infos)["spec"]
        spec.pop("managedBy", None)
        add_pod_labels(cluster_templates_by_pod_set(spec), pod_labels, gang_workload)
        return remote_object(self, manifest, namespace=namespace, labels=labels, spec=spec)
