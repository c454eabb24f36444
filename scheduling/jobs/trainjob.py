"""TrainJob (``trainer.kubeflow.org/v1alpha1``): Kueue's TrainJob integration
(``pkg/controller/jobs/trainjob/``) over Kubeflow Trainer v2 and, on the simulated cluster,
the Trainer's part for a TrainJob: the JobSet it builds, run as JobSet's controller runs one.

A TrainJob names a training runtime (``spec.runtimeRef``: a ClusterTrainingRuntime, the
default, or a TrainingRuntime of the TrainJob's namespace) whose template is a JobSet. The
runtimes are the platform's, installed beside the Trainer as objects of their own; kueueweb
reads them from the files ``KUEUEWEB["TRAINING_RUNTIMES"]`` names (loaded into ``RUNTIMES`` at
startup) and refuses a TrainJob whose runtime is not there, on ``spec.runtimeRef.name``.

* pod sets: those of the JobSet the Trainer builds from the runtime (``child_jobset``), as
  Kueue derives them: one per replicated job; the trainer step's (the replicated job labelled
  ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) has one replica of
  ``spec.trainer.numNodes`` pods (else the runtime's ``mlPolicy.numNodes``, else 1), and its
  ``node`` container takes the TrainJob's ``image``, ``command``, ``args``, ``env`` and
  ``resourcesPerNode``; any other replicated job has ``replicas`` × its ``parallelism``;
* suspended by ``spec.suspend``; the admission's node selectors, tolerations, labels and
  annotations reach the pods through a runtime patch of manager ``kueue.x-k8s.io/manager``
  (one replicated job patch per pod set), removed again when the job stops;
* finished by its ``Complete`` or ``Failed`` condition;
* PodsReady: ready + succeeded child Jobs (``status.jobsStatus``) reach the JobSet's
  replicas; reclaimable pods per replicated job as a JobSet's.

The runtime patches a user writes are handed to the Trainer unchanged; the pod sets are
built from the runtime and the TrainJob's ``trainer`` overrides only. The Kubernetes API
has no place in a runtime patch for a pod's ``workloadRef``, so a TrainJob's pods are not
put in a gang Workload's pod groups.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import MAX_POD_SETS
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    SimulatedController,
    SimulatedPods,
)
from scheduling.jobframework.podsets import PodSetInfo
from scheduling.jobframework.validation import (
    int_value,
    object_map,
    validate_kueue_labels,
    validate_object,
)
from scheduling.jobs.jobset import JobSet, JobSetController, jobset_report

GROUP = "trainer.kubeflow.org"
API_VERSION = f"{GROUP}/v1alpha1"
CLUSTER_TRAINING_RUNTIME = "ClusterTrainingRuntime"
TRAINING_RUNTIME = "TrainingRuntime"
RUNTIME_KINDS = (CLUSTER_TRAINING_RUNTIME, TRAINING_RUNTIME)
ANCESTOR_LABEL = f"{GROUP}/trainjob-ancestor-step"
ANCESTOR_TRAINER = "trainer"
NODE_CONTAINER = "node"
KUEUE_PATCH_MANAGER = "kueue.x-k8s.io/manager"
RUNTIME_REF = "spec.runtimeRef"
COMPLETE, FAILED = "Complete", "Failed"
MAX_NAME_LENGTH = 63
_JOBSET = JobSet()


# =========================================================================================
# Training runtimes
# =========================================================================================


class TrainingRuntimes:
    """The ClusterTrainingRuntimes and TrainingRuntimes TrainJobs may name, by kind,
    namespace ("" for a cluster runtime) and name."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, str, str], Mapping[str, Any]] = {}

    @staticmethod
    def read(documents: Iterable[Any]) -> tuple[dict[tuple[str, str, str], Mapping[str, Any]],
                                                list[str]]:
        """The runtimes among ``documents`` by key, and what is wrong with them (each
        naming the document and its field)."""
        specs: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        problems: list[str] = []
        for index, document in enumerate(documents):
            key, errors = _runtime_key(document)
            problems.extend(f"document {index}: {e.path}: {e.message}" for e in errors)
            if key is None or errors:
                continue
            if key in specs:
                problems.append(f"document {index}: metadata.name: {key[0]} {key[2]!r} "
                                "is given twice")
            specs[key] = copy.deepcopy(dict(document["spec"]))
        return specs, problems

    def replace(self, documents: Iterable[Any]) -> list[str]:
        """Hold exactly the runtimes among ``documents``; what is wrong with them, in which
        case nothing changes."""
        specs, problems = self.read(documents)
        if not problems:
            self._specs = specs
        return problems

    def get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        scope = "" if kind == CLUSTER_TRAINING_RUNTIME else namespace
        return self._specs.get((kind, scope, name))


def _runtime_key(document: Any) -> tuple[tuple[str, str, str] | None, list[FieldError]]:
    if not isinstance(document, Mapping):
        return None, [FieldError("", "a training runtime must be an object")]
    errors: list[FieldError] = []
    kind = document.get("kind")
    if document.get("apiVersion") != API_VERSION:
        errors.append(FieldError("apiVersion", f"must be {API_VERSION}"))
    if kind not in RUNTIME_KINDS:
        errors.append(FieldError("kind", f"must be one of {', '.join(RUNTIME_KINDS)}"))
    metadata = object_map(document.get("metadata"), "metadata", errors)
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not isinstance(name, str) or not name:
        errors.append(FieldError("metadata.name", "is required"))
    if kind == TRAINING_RUNTIME and (not isinstance(namespace, str) or not namespace):
        errors.append(FieldError("metadata.namespace", "is required for a TrainingRuntime"))
    spec = object_map(document.get("spec"), "spec", errors)
    jobs = ((spec.get("template") or {}).get("spec") or {}).get("replicatedJobs")
    if not isinstance(jobs, list) or not jobs:
        errors.append(FieldError("spec.template.spec.replicatedJobs",
                                 "must have at least one item"))
    if errors:
        return None, errors
    scope = "" if kind == CLUSTER_TRAINING_RUNTIME else str(namespace)
    return (str(kind), scope, str(name)), []


RUNTIMES_SETTING = "TRAINING_RUNTIMES"
RUNTIMES = TrainingRuntimes()
"""The runtimes of this process, loaded from ``KUEUEWEB["TRAINING_RUNTIMES"]`` at startup."""


def runtime_ref(manifest: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of ``spec.runtimeRef``; the kind defaults to ClusterTrainingRuntime."""
    ref = (manifest.get("spec") or {}).get("runtimeRef") or {}
    return str(ref.get("kind") or CLUSTER_TRAINING_RUNTIME), str(ref.get("name") or "")


# =========================================================================================
# The JobSet the Trainer builds
# =========================================================================================


def _ancestor(rj: Mapping[str, Any]) -> str:
    labels = ((rj.get("template") or {}).get("metadata") or {}).get("labels") or {}
    return str(labels.get(ANCESTOR_LABEL, ""))


def _merged_resources(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainJob's ``resourcesPerNode`` over the runtime's: each given resource replaces
    the runtime's, the others stay."""
    result = copy.deepcopy(dict(base))
    for key in ("requests", "limits"):
        if override.get(key):
            result[key] = {**(result.get(key) or {}), **override[key]}
    return result


def _override_node(container: dict[str, Any], trainer: Mapping[str, Any]) -> None:
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            container[key] = copy.deepcopy(trainer[key])
    if trainer.get("env"):
        env = [e for e in container.get("env") or []
               if e.get("name") not in {t.get("name") for t in trainer["env"]}]
        container["env"] = env + copy.deepcopy(list(trainer["env"]))
    if trainer.get("resourcesPerNode"):
        container["resources"] = _merged_resources(container.get("resources") or {},
                                                   trainer["resourcesPerNode"])


def child_jobset(manifest: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The JobSet the Trainer makes of ``runtime`` for the TrainJob, with each replicated
    job's ``parallelism`` and ``completions`` set to its pod count, as Kueue derives it."""
    spec = manifest.get("spec") or {}
    trainer = spec.get("trainer") or {}
    ml_policy = runtime.get("mlPolicy")
    template = copy.deepcopy(dict(runtime.get("template") or {}))
    jobset_spec: dict[str, Any] = template.get("spec") or {}
    for rj in jobset_spec.get("replicatedJobs") or []:
        job_spec = rj.setdefault("template", {}).setdefault("spec", {})
        count = int(job_spec.get("parallelism", 1))
        if _ancestor(rj) == ANCESTOR_TRAINER:
            rj["replicas"] = 1
            if isinstance(ml_policy, Mapping):
                count = int(ml_policy.get("numNodes", 1))
            if trainer.get("numNodes") is not None:
                count = int(trainer["numNodes"])
            pod_spec = job_spec.setdefault("template", {}).setdefault("spec", {})
            for container in pod_spec.get("containers") or []:
                if container.get("name") == NODE_CONTAINER:
                    _override_node(container, trainer)
        count = max(count, 1)
        job_spec["parallelism"] = job_spec["completions"] = count
    metadata = manifest.get("metadata") or {}
    return {"apiVersion": _JOBSET.api_version, "kind": _JOBSET.kind,
            "metadata": {"name": metadata.get("name", ""),
                         "namespace": metadata.get("namespace", "")},
            "spec": jobset_spec}


# =========================================================================================
# Validation
# =========================================================================================


def _validate_runtime_ref(spec: Mapping[str, Any], namespace: str,
                          runtimes: TrainingRuntimes) -> list[FieldError]:
    ref = spec.get("runtimeRef")
    if not isinstance(ref, Mapping):
        return [FieldError(RUNTIME_REF, "is required" if ref is None else "must be an object")]
    errors = []
    if ref.get("apiGroup") not in (None, GROUP):
        errors.append(FieldError(f"{RUNTIME_REF}.apiGroup", f"must be {GROUP}"))
    kind = ref.get("kind", CLUSTER_TRAINING_RUNTIME)
    if kind not in RUNTIME_KINDS:
        errors.append(FieldError(f"{RUNTIME_REF}.kind", f"must be one of "
                                 f"{', '.join(RUNTIME_KINDS)}"))
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        errors.append(FieldError(f"{RUNTIME_REF}.name", "is required"))
    elif kind in RUNTIME_KINDS and runtimes.get(kind, namespace, name) is None:
        where = "" if kind == CLUSTER_TRAINING_RUNTIME else f" in namespace {namespace!r}"
        errors.append(FieldError(f"{RUNTIME_REF}.name", f"{kind} {name!r} not found{where}"))
    return errors


def _validate_trainer(trainer: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    trainer = object_map(trainer, "spec.trainer", errors)
    if trainer.get("numNodes") is not None:
        int_value(trainer["numNodes"], "spec.trainer.numNodes", errors, minimum=1)
    for key in ("command", "args"):
        value = trainer.get(key)
        if value is not None and (not isinstance(value, list)
                                  or not all(isinstance(v, str) for v in value)):
            errors.append(FieldError(f"spec.trainer.{key}", "must be a list of strings"))
    if trainer.get("image") is not None and not isinstance(trainer["image"], str):
        errors.append(FieldError("spec.trainer.image", "must be a string"))
    resources = object_map(trainer.get("resourcesPerNode"), "spec.trainer.resourcesPerNode",
                           errors)
    for key in ("requests", "limits"):
        object_map(resources.get(key), f"spec.trainer.resourcesPerNode.{key}", errors)
    return errors


def validate_trainjob_manifest(manifest: Any, *, namespace: str,
                               runtimes: TrainingRuntimes) -> list[FieldError]:
    if not isinstance(manifest, Mapping):
        return [FieldError("", "a TrainJob manifest must be an object")]
    errors, labels, _ = validate_object(manifest, api_version=API_VERSION, kind=TrainJob.kind,
                                        namespace=namespace, max_name_length=MAX_NAME_LENGTH)
    spec = manifest.get("spec")
    if not isinstance(spec, Mapping):
        errors.append(FieldError("spec", "is required" if spec is None else "must be an object"))
        return errors
    if spec.get("suspend") is not None and not isinstance(spec["suspend"], bool):
        errors.append(FieldError("spec.suspend", "must be a boolean"))
    if spec.get("runtimePatches") is not None and not isinstance(spec["runtimePatches"], list):
        errors.append(FieldError("spec.runtimePatches", "must be a list"))
    errors.extend(_validate_runtime_ref(spec, namespace, runtimes))
    trainer_errors = _validate_trainer(spec.get("trainer"))
    errors.extend(trainer_errors)
    if not errors:
        kind, name = runtime_ref(manifest)
        runtime = runtimes.get(kind, namespace, name)
        jobs = child_jobset(manifest, runtime or {})["spec"].get("replicatedJobs") or []
        if len(jobs) > MAX_POD_SETS:
            errors.append(FieldError(f"{RUNTIME_REF}.name", f"the runtime's JobSet has "
                                     f"{len(jobs)} replicated jobs; at most {MAX_POD_SETS} "
                                     "pod sets are allowed"))
    errors.extend(validate_kueue_labels(labels))
    return errors


# =========================================================================================
# Status
# =========================================================================================


def _as_jobset_status(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """A TrainJob's status in a JobSet's terms: ``jobsStatus`` is ``replicatedJobsStatus``."""
    status = status or {}
    result = {k: v for k, v in status.items() if k != "jobsStatus"}
    result["replicatedJobsStatus"] = list(status.get("jobsStatus") or [])
    return result


def _finished(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
    for condition in (status or {}).get("conditions") or ():
        if condition.get("status") != "True":
            continue
        if condition.get("type") == COMPLETE:
            return "Succeeded", str(condition.get("message") or "")
        if condition.get("type") == FAILED:
            return "Failed", str(condition.get("message") or "")
    return None


# =========================================================================================
# The simulated Trainer
# =========================================================================================


class TrainJobController(SimulatedController):
    """The Trainer on the simulated cluster: the TrainJob's JobSet (``child_jobset``) run by
    JobSet's simulated controller, its pods one gang; its replicated jobs' statuses become
    ``jobsStatus`` and its end the TrainJob's ``Complete`` or ``Failed`` condition. The
    JobSet is built without the runtime's failure policy: a TrainJob's status keeps no
    restart count to bound it."""

    def __init__(self, runtimes: TrainingRuntimes) -> None:
        self._runtimes = runtimes

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
        kind, name = runtime_ref(manifest)
        namespace = str((manifest.get("metadata") or {}).get("namespace", ""))
        jobset = child_jobset(manifest, self._runtimes.get(kind, namespace, name) or {})
        jobset["spec"].pop("failurePolicy", None)
        jobset_status, report = JobSetController().reconcile(
            jobset, _as_jobset_status(status), pods, admitted=admitted, allowed=allowed,
            elastic=elastic, now=now)
        new_status = dict(status)
        new_status["jobsStatus"] = jobset_status.get("replicatedJobsStatus") or []
        conditions = []
        for condition in jobset_status.get("conditions") or ():
            if condition.get("type") == "Completed":
                condition = {**condition, "type": COMPLETE}
            conditions.append(condition)
        if conditions:
            new_status["conditions"] = conditions
        return new_status, report


# =========================================================================================
# The integration
# =========================================================================================


class TrainJob(GenericJob):
    framework_name = "trainer.kubeflow.org/trainjob"
    api_version = API_VERSION
    kind = "TrainJob"
    plural = "trainjobs"
    max_name_length = MAX_NAME_LENGTH
    document_settings = (RUNTIMES_SETTING,)

    def __init__(self, runtimes: TrainingRuntimes = RUNTIMES) -> None:
        self.runtimes = runtimes
        self.simulated = TrainJobController(runtimes)

    def configure(self, files: Mapping[str, Sequence[tuple[str, list[Any]]]]) -> list[str]:
        """The training runtimes, from the files ``KUEUEWEB["TRAINING_RUNTIMES"]`` lists."""
        listed = files.get(RUNTIMES_SETTING, ())
        problems = [f"{path}: {p}" for path, documents in listed
                    for p in self.runtimes.read(documents)[1]]
        return problems or self.runtimes.replace(
            [d for _, documents in listed for d in documents])

    def jobset(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """The TrainJob's JobSet, from its runtime (none: a JobSet of no replicated job)."""
        kind, name = runtime_ref(manifest)
        namespace = str((manifest.get("metadata") or {}).get("namespace", ""))
        return child_jobset(manifest, self.runtimes.get(kind, namespace, name) or {})

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        return validate_trainjob_manifest(manifest, namespace=namespace, runtimes=self.runtimes)

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        return _JOBSET.pod_sets(self.jobset(manifest), partial_admission=partial_admission)

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        """The runtime's templates with the TrainJob's overrides, each at the field that
        shapes it: the runtime the TrainJob names."""
        return [(template, f"{RUNTIME_REF}.name")
                for template, _ in _JOBSET.pod_templates(self.jobset(manifest))]

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """Unsuspended, with Kueue's runtime patch holding one replicated job patch per pod
        set: the admission's labels, annotations, node selector and tolerations."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        spec["suspend"] = False
        spec["runtimePatches"] = [*_other_patches(spec), {
            "manager": KUEUE_PATCH_MANAGER,
            "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [_replicated_job_patch(info) for info in infos]}}}}]
        return result

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Kueue's runtime patch emptied: the templates are the runtime's again."""
        result = copy.deepcopy(dict(manifest))
        spec = result.get("spec") or {}
        if any(p.get("manager") == KUEUE_PATCH_MANAGER for p in spec.get("runtimePatches")
               or ()):
            spec["runtimePatches"] = [*_other_patches(spec), {
                "manager": KUEUE_PATCH_MANAGER,
                "trainingRuntimeSpec": {"template": {"spec": {}}}}]
        return result

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return _finished(status)

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return jobset_report(self.jobset(manifest), _as_jobset_status(status),
                             _finished(status))

    def multikueue_copy(
        self, manifest: Mapping[str, Any], *, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        """As any kind's, without Kueue's runtime patch: the worker's Kueue adds its own."""
        copied = super().multikueue_copy(manifest, labels=labels)
        spec = copied["spec"]
        if "runtimePatches" in spec:
            spec["runtimePatches"] = _other_patches(spec)
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
        """The TrainJob to create on a cluster: running, Kueue's runtime patch carrying the
        admission and ``pod_labels`` to every replicated job's pods."""
        labelled = [PodSetInfo(name=i.name, count=i.count, node_selector=i.node_selector,
                               tolerations=i.tolerations, labels={**i.labels, **pod_labels},
                               annotations=i.annotations) for i in infos]
        running = self.without_managed_by(self.run_with_pod_sets_info(
            {"spec": dict(manifest.get("spec") or {})}, labelled))
        return self.remote_object(manifest, running["spec"], namespace=namespace,
                                  labels=labels)


def _other_patches(spec: Mapping[str, Any]) -> list[Any]:
    return [p for p in spec.get("runtimePatches") or ()
            if not (isinstance(p, Mapping) and p.get("manager") == KUEUE_PATCH_MANAGER)]


def _replicated_job_patch(info: PodSetInfo) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    if info.labels:
        metadata["labels"] = dict(info.labels)
    if info.annotations:
        metadata["annotations"] = dict(info.annotations)
    pod_spec: dict[str, Any] = {}
    if info.node_selector:
        pod_spec["nodeSelector"] = dict(info.node_selector)
    if info.tolerations:
        pod_spec["tolerations"] = copy.deepcopy(info.tolerations)
    return {"name": info.name,
            "template": {"spec": {"template": {"metadata": metadata, "spec": pod_spec}}}}
