"""RayService (``ray.io/v1``): Kueue's RayService integration
(``pkg/controller/jobs/rayservice/``) and, on the simulated cluster, the KubeRay operator's
part for a RayService.

* validation: the rules every kind shares, then the RayCluster rules (Kueue's Ray rules and
  the RayCluster API's own) on ``spec.rayClusterConfig``, and Kueue's labels;
* pod sets: the RayCluster pod sets of ``spec.rayClusterConfig``: ``head``, then one per
  worker group (``raycluster.cluster_pod_sets``);
* suspended by ``spec.rayClusterConfig.suspend``; head = info[0], worker group i =
  info[i + 1];
* never finished: a service serves until it is deleted or its Workload deactivated;
* elastic, as a RayCluster: a worker group's ``replicas`` scale through workload slices;
* PodsReady: the ``Ready`` condition is true (KubeRay's ``RayServiceReady``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import ELASTIC_JOB_ANNOTATION
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    ScalablePodSet,
    SimulatedController,
    SimulatedPods,
)
from scheduling.jobframework.podsets import PodSetInfo
from scheduling.jobframework.validation import validate_kueue_labels, validate_object
from scheduling.jobs.raycluster import (
    MAX_NAME_LENGTH,
    STATE_READY,
    add_pod_labels,
    cluster_pod_sets,
    cluster_priority_class,
    cluster_templates,
    cluster_templates_by_pod_set,
    merge_infos,
    reconcile_cluster,
    remote_object,
    restore_infos,
    scalable_groups,
    validate_cluster_spec,
    worker_groups,
)

CLUSTER_FIELD = "rayClusterConfig"
CLUSTER_PATH = f"spec.{CLUSTER_FIELD}"
READY = "Ready"
# KubeRay's reasons on the Ready condition: serving once the cluster's Serve endpoints are up.
SERVING = ("NonZeroServeEndpoints", "the Ray Serve applications are serving")
INITIALIZING = ("Initializing", "the Ray cluster is starting")


def cluster_spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = (manifest.get("spec") or {}).get(CLUSTER_FIELD) or {}
    return spec


def serving(status: Mapping[str, Any] | None) -> bool:
    return cond.is_true(list((status or {}).get("conditions") or []), READY)


def validate_rayservice_manifest(manifest: Any, *, namespace: str,
                                 slices_enabled: bool) -> list[FieldError]:
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a RayService manifest must be an object")]
    errors, labels, annotations = validate_object(
        manifest, api_version=RayService.api_version, kind=RayService.kind,
        namespace=namespace, max_name_length=MAX_NAME_LENGTH)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    if spec.get("serveConfigV2") is not None and not isinstance(spec["serveConfigV2"], str):
        errors.append(FieldError("spec.serveConfigV2", "must be a string"))
    elastic = slices_enabled and annotations.get(ELASTIC_JOB_ANNOTATION) == "true"
    errors.extend(validate_cluster_spec(spec.get(CLUSTER_FIELD), CLUSTER_PATH, elastic=elastic))
    errors.extend(validate_kueue_labels(labels))
    return errors


def service_report(wanted: int, active: int, ready: int,
                   status: Mapping[str, Any]) -> JobReport:
    """PodsReady is the service's ``Ready`` condition, not a pod count: all of ``wanted``
    are reported ready once it holds."""
    ready_now = wanted if serving(status) else min(ready, wanted - 1)
    return JobReport(parallelism=wanted, completions=None, active=active,
                     ready=max(ready_now, 0), succeeded=0, failed=0)


# =========================================================================================
# The simulated KubeRay operator
# =========================================================================================


class RayServiceController(SimulatedController):
    """KubeRay's RayService part on the simulated cluster: the service's Ray cluster, kept
    as a RayCluster's is (``raycluster.reconcile_cluster``); the service is ``Ready`` while
    every pod of its cluster is. It never finishes."""

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
        active = dict(status.get("activeServiceStatus") or {})
        cluster_status, report = reconcile_cluster(
            cluster_spec(manifest), active.get("rayClusterStatus") or {}, pods,
            allowed=allowed if elastic else None)
        ready = cluster_status.get("state") == STATE_READY
        reason, message = SERVING if ready else INITIALIZING
        new_status = dict(status)
        new_status["conditions"] = cond.set_condition(
            list(status.get("conditions") or []), READY, ready, reason, message, now=now)
        name = str((manifest.get("metadata") or {}).get("name", ""))
        active.update(rayClusterName=active.get("rayClusterName") or f"{name}-raycluster",
                      rayClusterStatus=cluster_status)
        new_status["activeServiceStatus"] = active
        return new_status, service_report(report.parallelism, report.active, report.ready,
                                          new_status)


# =========================================================================================
# The integration
# =========================================================================================


class RayService(GenericJob):
    framework_name = "ray.io/rayservice"
    api_version = "ray.io/v1"
    kind = "RayService"
    plural = "rayservices"
    elastic = True
    max_name_length = MAX_NAME_LENGTH
    simulated = RayServiceController()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_rayservice_manifest(manifest, namespace=namespace,
                                            slices_enabled=slices_enabled)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return cluster_pod_sets(cluster_spec(manifest))

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        return cluster_templates(cluster_spec(manifest), CLUSTER_PATH)

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        return cluster_priority_class(cluster_spec(manifest), CLUSTER_PATH)

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        return cluster_spec(manifest).get("suspend") is True

    def suspend(self, manifest: Mapping[str, Any], suspend: bool = True) -> dict[str, Any]:
        """``spec.rayClusterConfig.suspend`` set; applied to ``{}``, the merge patch."""
        spec = dict(manifest.get("spec") or {})
        spec[CLUSTER_FIELD] = {**cluster_spec(manifest), "suspend": suspend}
        return {**manifest, "spec": spec}

    def _with_cluster(self, manifest: Mapping[str, Any]) -> tuple[dict[str, Any],
                                                                   dict[str, Any]]:
        """A deep copy of the object and its cluster spec inside it."""
        result = copy.deepcopy(dict(manifest))
        return result, result.setdefault("spec", {}).setdefault(CLUSTER_FIELD, {})

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        result, cluster = self._with_cluster(manifest)
        cluster["suspend"] = False
        merge_infos(cluster, infos)
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        result, cluster = self._with_cluster(manifest)
        if len(pod_sets) != 1 + len(worker_groups(cluster)):
            return copy.deepcopy(dict(manifest))  # not this object's pod sets: Kueue skips
        restore_infos(cluster, pod_sets)
        return result

    def scalable_pod_sets(self, manifest: Mapping[str, Any]) -> list[ScalablePodSet]:
        return scalable_groups(cluster_spec(manifest), CLUSTER_PATH)

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return None

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return service_report(wanted, ready_pods, ready_pods, status)

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
        spec: dict[str, Any] = self.run_with_pod_sets_info(
            {"spec": dict(manifest.get("spec") or {})}, infos)["spec"]
        spec.pop("managedBy", None)
        add_pod_labels(cluster_templates_by_pod_set(spec[CLUSTER_FIELD]), pod_labels,
                       gang_workload)
        return remote_object(self, manifest, namespace=namespace, labels=labels, spec=spec)
