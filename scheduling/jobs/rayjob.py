"""RayJob (``ray.io/v1``): Kueue's RayJob integration (``pkg/controller/jobs/rayjob/``) and,
on the simulated cluster, the KubeRay operator's part for a RayJob.

* validation: the rules every kind shares, Kueue's RayJob rules (a managed RayJob brings its
  own cluster: no ``clusterSelector``, a ``rayClusterSpec``, ``shutdownAfterJobFinishes``
  true), the RayCluster rules on ``spec.rayClusterSpec`` and Kueue's labels;
* pod sets: the RayCluster pod sets of ``spec.rayClusterSpec`` (head, then one per worker
  group), then ``submitter`` (1 pod) in ``K8sJobMode``, KubeRay's default submission mode:
  ``submitterPodTemplate``, else one container with the head's first image, 500m/200Mi
  requested, 1/1Gi limits, ``restartPolicy: Never``. In ``SidecarMode`` that container is
  in the head pod set instead; HTTP and interactive modes add nothing;
* suspended by ``spec.suspend``; the submitter's info goes into ``submitterPodTemplate``;
* finished once ``status.jobDeploymentStatus`` is ``Complete`` or ``Failed``, a success when
  ``status.jobStatus`` is ``SUCCEEDED``;
* elastic: a worker group's ``replicas`` scale through workload slices, as a RayCluster's;
* PodsReady: the cluster's ``status.rayClusterStatus.state`` is ``ready``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import ELASTIC_JOB_ANNOTATION
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    ScalablePodSet,
    SimulatedController,
    SimulatedPods,
)
from scheduling.jobframework.podsets import PodSetInfo, merge_into_template, restore_template
from scheduling.jobframework.validation import (
    validate_kueue_labels,
    validate_object,
    validate_pod_template,
)
from scheduling.jobs.raycluster import (
    HEAD,
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

CLUSTER_PATH = "spec.rayClusterSpec"
SUBMITTER = "submitter"
K8S_JOB_MODE = "K8sJobMode"
SIDECAR_MODE = "SidecarMode"
SUBMISSION_MODES = (K8S_JOB_MODE, "HTTPMode", SIDECAR_MODE, "InteractiveMode")
# KubeRay's default submitter container resources, which Kueue counts.
SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"},
                       "requests": {"cpu": "500m", "memory": "200Mi"}}
COMPLETE, FAILED = "Complete", "Failed"
SUCCEEDED = "SUCCEEDED"
_ACTIVE = ("Pending", "Running")


def cluster_spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec: Mapping[str, Any] = (manifest.get("spec") or {}).get("rayClusterSpec") or {}
    return spec


def submission_mode(manifest: Mapping[str, Any]) -> str:
    """``spec.submissionMode``, which the RayJob CRD defaults to K8sJobMode."""
    return str((manifest.get("spec") or {}).get("submissionMode") or K8S_JOB_MODE)


def submitter_container(cluster: Mapping[str, Any]) -> dict[str, Any]:
    containers = (((cluster.get("headGroupSpec") or {}).get("template") or {}).get("spec")
                  or {}).get("containers") or [{}]
    return {"name": "ray-job-submitter", "image": containers[0].get("image", ""),
            "resources": copy.deepcopy(SUBMITTER_RESOURCES)}


def submitter_template(manifest: Mapping[str, Any]) -> dict[str, Any]:
    own = (manifest.get("spec") or {}).get("submitterPodTemplate")
    if own:
        return copy.deepcopy(dict(own))
    return {"spec": {"containers": [submitter_container(cluster_spec(manifest))],
                     "restartPolicy": "Never"}}


def validate_rayjob_manifest(manifest: Any, *, namespace: str,
                             slices_enabled: bool) -> list[FieldError]:
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a RayJob manifest must be an object")]
    errors, labels, annotations = validate_object(
        manifest, api_version=RayJob.api_version, kind=RayJob.kind, namespace=namespace,
        max_name_length=MAX_NAME_LENGTH)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError("spec.suspend", "must be a boolean"))
    if spec.get("clusterSelector"):
        errors.append(FieldError("spec.clusterSelector",
                                 "a kueue managed job should not use an existing cluster"))
    if spec.get("shutdownAfterJobFinishes") is not True:
        errors.append(FieldError("spec.shutdownAfterJobFinishes",
                                 "a kueue managed job should delete the cluster after "
                                 "finishing"))
    mode = spec.get("submissionMode")
    if mode is not None and mode not in SUBMISSION_MODES:
        errors.append(FieldError("spec.submissionMode",
                                 f"must be one of {', '.join(SUBMISSION_MODES)}"))
    if spec.get("submitterPodTemplate") is not None:
        errors.extend(validate_pod_template(spec["submitterPodTemplate"],
                                            "spec.submitterPodTemplate", for_job=True))
    if spec.get("rayClusterSpec") is None:
        errors.append(FieldError(CLUSTER_PATH, "is required for a kueue managed job"))
    else:
        elastic = slices_enabled and annotations.get(ELASTIC_JOB_ANNOTATION) == "true"
        errors.extend(validate_cluster_spec(spec["rayClusterSpec"], CLUSTER_PATH,
                                            elastic=elastic))
    errors.extend(validate_kueue_labels(labels))
    return errors


# =========================================================================================
# The simulated KubeRay operator
# =========================================================================================


class RayJobController(SimulatedController):
    """KubeRay's RayJob part on the simulated cluster: the job's Ray cluster (as a
    RayCluster's) and, in K8sJobMode, the submitter pod, whose end is the Ray job's end
    (without a submitter, the head pod's end stands for it). Finished, the cluster is shut
    down (``shutdownAfterJobFinishes``)."""

    def first_pods(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
                   info: PodSetInfo, pod_set: Mapping[str, Any], *, elastic: bool) -> int:
        """The submitter waits for the cluster to be ready (``reconcile``)."""
        return 0 if pod_set.get("name") == SUBMITTER else info.count

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
        with_submitter = submission_mode(manifest) == K8S_JOB_MODE
        every = pods.all()
        ender = SUBMITTER if with_submitter else HEAD
        ended = [p.phase for p in every if p.pod_set == ender and p.phase not in _ACTIVE]
        new_status = dict(status)
        if ended:
            pods.delete([p for p in every if p.phase in _ACTIVE], reason="SuccessfulDelete")
            success = ended[0] == "Succeeded"
            new_status.update(jobDeploymentStatus=COMPLETE if success else FAILED,
                              jobStatus=SUCCEEDED if success else "FAILED",
                              message="" if success else f"the {ender} pod failed",
                              rayClusterStatus={"state": ""})
            finished = RayJob().finished(new_status)
            return new_status, JobReport(parallelism=admitted, completions=None, active=0,
                                         ready=0, succeeded=0, failed=0, finished=finished)
        cluster_room = None if not elastic else allowed - int(with_submitter)
        cluster_status, report = reconcile_cluster(cluster_spec(manifest), {}, _OwnPods(
            pods, exclude=SUBMITTER), allowed=cluster_room)
        wanted, active, ready = report.parallelism, report.active, report.ready
        if with_submitter and cluster_status.get("state") == STATE_READY:
            submitters = [p for p in every if p.pod_set == SUBMITTER and p.phase in _ACTIVE]
            if not submitters:
                submitters = pods.create(1, pod_set=SUBMITTER)
            active += len(submitters)
            ready += sum(p.ready for p in submitters)
        if with_submitter:
            wanted += 1
        state = cluster_status.get("state")
        new_status.update(jobDeploymentStatus="Running" if state == STATE_READY
                          else "Initializing",
                          jobStatus="RUNNING" if state == STATE_READY else "PENDING",
                          rayClusterStatus={"state": state})
        return new_status, RayJob.pods_ready_report(new_status, wanted, active, ready)


class _OwnPods:
    """The job's pods but those of one pod set: the cluster's pods seen apart from the
    submitter's."""

    def __init__(self, pods: SimulatedPods, *, exclude: str) -> None:
        self._pods = pods
        self._exclude = exclude

    def all(self) -> list[Any]:
        return [p for p in self._pods.all() if p.pod_set != self._exclude]

    def create(self, count: int, *, gates: Sequence[str] = (),
               pod_set: str | None = None) -> list[Any]:
        return self._pods.create(count, gates=gates, pod_set=pod_set)

    def delete(self, pods: Sequence[Any], *, reason: str = "") -> None:
        self._pods.delete(pods, reason=reason)

    def ungate(self, pods: Sequence[Any]) -> None:
        self._pods.ungate(pods)


# =========================================================================================
# The integration
# =========================================================================================


class RayJob(GenericJob):
    framework_name = "ray.io/rayjob"
    api_version = "ray.io/v1"
    kind = "RayJob"
    plural = "rayjobs"
    elastic = True
    max_name_length = MAX_NAME_LENGTH
    simulated = RayJobController()

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_rayjob_manifest(manifest, namespace=namespace,
                                        slices_enabled=slices_enabled)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        pod_sets = cluster_pod_sets(cluster_spec(manifest))
        mode = submission_mode(manifest)
        if mode == K8S_JOB_MODE:
            pod_sets.append({"name": SUBMITTER, "count": 1,
                             "template": submitter_template(manifest)})
        elif mode == SIDECAR_MODE:
            head = pod_sets[0]["template"].setdefault("spec", {})
            head["containers"] = [*head.get("containers", []),
                                  submitter_container(cluster_spec(manifest))]
        return pod_sets

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        templates = cluster_templates(cluster_spec(manifest), CLUSTER_PATH)
        own = (manifest.get("spec") or {}).get("submitterPodTemplate")
        if own is not None:
            templates.append((own, "spec.submitterPodTemplate"))
        return templates

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        return cluster_priority_class(cluster_spec(manifest), CLUSTER_PATH)

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """The cluster's infos as a RayCluster's; the submitter's, the last one, written
        into ``submitterPodTemplate`` (created from the default when absent)."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        spec["suspend"] = False
        groups = 1 + len(worker_groups(cluster_spec(manifest)))
        merge_infos(spec.setdefault("rayClusterSpec", {}), infos[:groups])
        if submission_mode(manifest) == K8S_JOB_MODE and len(infos) > groups:
            spec["submitterPodTemplate"] = merge_into_template(submitter_template(manifest),
                                                               infos[groups])
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        result = copy.deepcopy(dict(manifest))
        groups = 1 + len(worker_groups(cluster_spec(manifest)))
        with_submitter = submission_mode(manifest) == K8S_JOB_MODE
        if len(pod_sets) != groups + int(with_submitter):
            return result  # not this object's pod sets: Kueue skips
        spec = result.setdefault("spec", {})
        restore_infos(spec.setdefault("rayClusterSpec", {}), pod_sets[:groups])
        if with_submitter and spec.get("submitterPodTemplate"):
            spec["submitterPodTemplate"] = restore_template(
                spec["submitterPodTemplate"], pod_sets[groups].get("template") or {})
        return result

    def scalable_pod_sets(self, manifest: Mapping[str, Any]) -> list[ScalablePodSet]:
        return scalable_groups(cluster_spec(manifest), CLUSTER_PATH)

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        status = status or {}
        if status.get("jobDeploymentStatus") not in (COMPLETE, FAILED):
            return None
        outcome = "Succeeded" if status.get("jobStatus") == SUCCEEDED else "Failed"
        return outcome, str(status.get("message") or "")

    @staticmethod
    def pods_ready_report(status: Mapping[str, Any], wanted: int, active: int,
                          ready: int) -> JobReport:
        """PodsReady is the cluster's ``ready`` state, not a pod count."""
        cluster_ready = (status.get("rayClusterStatus") or {}).get("state") == STATE_READY
        return JobReport(parallelism=wanted, completions=None, active=active,
                         ready=wanted if cluster_ready else min(ready, max(wanted - 1, 0)),
                         succeeded=0, failed=0, finished=RayJob().finished(status))

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return self.pods_ready_report(status, wanted, ready_pods, ready_pods)

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
        spec: dict[str, Any] = self.run_with_pod_sets_info(manifest, infos)["spec"]
        spec.pop("managedBy", None)
        templates = cluster_templates_by_pod_set(spec["rayClusterSpec"])
        if spec.get("submitterPodTemplate") is not None:
            templates.append((spec["submitterPodTemplate"], SUBMITTER))
        add_pod_labels(templates, pod_labels, gang_workload)
        return remote_object(self, manifest, namespace=namespace, labels=labels, spec=spec)
