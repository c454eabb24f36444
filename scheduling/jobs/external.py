"""Kinds an admin lists as MultiKueue external frameworks (Kueue's
``multiKueue.externalFrameworks[].name`` and ``integrations.externalFrameworks``, read through
``pkg/controller/admissionchecks/multikueue/externalframeworks``): custom resources whose
controller lives outside Kueue.

Each listed ``Kind.version.group`` becomes one ``ExternalFramework``, registered under that
name when the setting ``KUEUEWEB["MULTIKUEUE_EXTERNAL_FRAMEWORKS"]`` is read
(``configure_external_frameworks``). kueueweb knows nothing of such a kind's spec, so:

* submitting one stores the object and makes no Workload: as with Kueue, where the outside
  controller creates the Workload, the Workload is created through the API and names the
  object in its ``metadata.ownerReferences``;
* the object must be managed by MultiKueue (``spec.managedBy: kueue.x-k8s.io/multikueue``,
  defaulted when absent), so only the copy on the worker runs;
* the MultiKueue copy is Kueue's generic adapter: metadata fit for creation, the spec as it is
  without ``managedBy``, the origin and prebuilt-workload labels; the worker's ``status`` is
  copied back whole;
* what the worker's copy reports is read by convention, as most kinds write it: a
  ``Failed`` condition True fails it, a ``Complete``, ``Completed`` or ``Succeeded``
  condition True completes it; ``active``, ``ready``, ``succeeded`` and ``failed``, when the
  status counts pods, are its pod counts;
* on the simulated cluster its controller runs the admitted pods of the Workload's pod sets
  and writes that status; on a Kubernetes cluster the kind's own controller does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.core.names import dns1123_label_error, dns1123_subdomain_error
from scheduling.jobframework import registry
from scheduling.jobframework.interface import (
    GenericJob,
    JobReport,
    SimulatedController,
    SimulatedPods,
)
from scheduling.jobframework.podsets import PodSetInfo
from scheduling.jobframework.validation import validate_kueue_labels, validate_object

MULTIKUEUE_MANAGED_BY = "kueue.x-k8s.io/multikueue"
SUCCEEDED_CONDITIONS = ("Complete", "Completed", "Succeeded")
FAILED_CONDITION = "Failed"
_KIND = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")
_COUNTS = ("active", "ready", "succeeded", "failed")


@dataclass(frozen=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    @property
    def name(self) -> str:
        """As the setting names it: ``Kind.version.group``."""
        return f"{self.kind}.{self.version}.{self.group}"


def parse_external_framework(name: Any) -> tuple[GroupVersionKind | None, str | None]:
    """``Kind.version.group`` (Kueue's ``schema.ParseKindArg``: the kind, the version, then
    the group, which may hold dots) or why it is not one."""
    if not isinstance(name, str) or not name:
        return None, f"{name!r} is not Kind.version.group (a name is required)"
    parts = name.split(".", 2)
    if len(parts) < 3:
        return None, f"{name!r} is not Kind.version.group (e.g. Widget.v1.example.com)"
    kind, version, group = parts
    problems = []
    if not _KIND.match(kind):
        problems.append(f"kind {kind!r} must start with a letter and hold only letters "
                        "and digits")
    if dns1123_label_error(version) is not None:
        problems.append(f"version {version!r} must be a DNS label (v1, v1beta1)")
    message = dns1123_subdomain_error(group)
    if message is not None:
        problems.append(f"group {group!r}: {message}")
    if problems:
        return None, f"{name!r} is not Kind.version.group: " + "; ".join(problems)
    return GroupVersionKind(group, version, kind), None


def guess_plural(kind: str) -> str:
    """The resource of a kind as Kubernetes guesses it (``meta.UnsafeGuessKindToResource``),
    which is what a CRD's ``plural`` is unless its author chose another."""
    lower = kind.lower()
    if lower.endswith("s"):
        return lower + "es"
    if lower.endswith("y"):
        return lower[:-1] + "ies"
    return lower + "s"


def condition_true(status: Mapping[str, Any] | None, *types: str) -> Mapping[str, Any] | None:
    for condition in (status or {}).get("conditions") or ():
        if (isinstance(condition, Mapping) and condition.get("type") in types
                and condition.get("status") == "True"):
            return condition
    return None


class ExternalController(SimulatedController):
    """The outside controller of an external kind on the simulated cluster: it runs the
    admitted pods of the Workload's pod sets (created as one gang when the object starts),
    counts them in the status, fails the object when a pod fails and completes it when
    every pod succeeded."""

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
        active = [p for p in every if p.phase in ("Pending", "Running")]
        counts = {"active": len(active), "ready": sum(1 for p in active if p.ready),
                  "succeeded": sum(1 for p in every if p.phase == "Succeeded"),
                  "failed": sum(1 for p in every if p.phase == "Failed")}
        conditions = list(status.get("conditions") or [])
        if counts["failed"]:
            pods.delete(active, reason="a pod of the object failed")
            counts["active"] = counts["ready"] = 0
            conditions = cond.set_condition(conditions, FAILED_CONDITION, True, "PodFailed",
                                            f"{counts['failed']} pod(s) failed", now=now)
        elif counts["succeeded"] >= admitted:
            conditions = cond.set_condition(conditions, "Complete", True, "PodsSucceeded",
                                            "every pod succeeded", now=now)
        new_status = {**status, **counts, "conditions": conditions}
        return new_status, report_of(new_status, wanted=admitted, ready_pods=counts["ready"])


def report_of(status: Mapping[str, Any], *, wanted: int, ready_pods: int) -> JobReport:
    """What an external object's status says, by the convention of the module's docstring."""
    counts = {k: v for k, v in status.items() if k in _COUNTS and isinstance(v, int)}
    finished = finished_of(status)
    succeeded = counts.get("succeeded", wanted if finished and finished[0] == "Succeeded" else 0)
    return JobReport(
        parallelism=wanted, completions=None, active=counts.get("active", 0),
        ready=counts.get("ready", ready_pods), succeeded=succeeded,
        failed=counts.get("failed", 0), finished=finished,
    )


def finished_of(status: Mapping[str, Any] | None) -> tuple[str, str] | None:
    failed = condition_true(status, FAILED_CONDITION)
    if failed is not None:
        return "Failed", str(failed.get("message") or "the object failed")
    done = condition_true(status, *SUCCEEDED_CONDITIONS)
    if done is not None:
        return "Succeeded", str(done.get("message") or "the object completed")
    return None


class ExternalFramework(GenericJob):
    """One kind listed as an external framework, known only by its group, version and
    kind."""

    constructs_workload = False
    # Kueue serves no webhook for a kind it does not integrate.
    has_webhook = False
    simulated = ExternalController()

    def __init__(self, gvk: GroupVersionKind) -> None:
        self.gvk = gvk
        self.framework_name = gvk.name
        self.api_version = f"{gvk.group}/{gvk.version}"
        self.kind = gvk.kind
        self.plural = guess_plural(gvk.kind)

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Managed by MultiKueue unless the object says otherwise (then refused)."""
        spec = manifest.get("spec")
        if spec is None:
            spec = {}
        if isinstance(spec, Mapping) and "managedBy" not in spec:
            return {**manifest, "spec": {**spec, "managedBy": MULTIKUEUE_MANAGED_BY}}
        return dict(manifest)

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        errors, labels, _ = validate_object(manifest, api_version=self.api_version,
                                            kind=self.kind, namespace=namespace)
        spec = manifest.get("spec")
        if not isinstance(spec, Mapping):
            errors.append(FieldError("spec", "must be an object"))
        elif spec.get("managedBy") != MULTIKUEUE_MANAGED_BY:
            # Kueue's generic adapter: only an object MultiKueue manages is dispatched.
            errors.append(FieldError("spec.managedBy", f"must be \"{MULTIKUEUE_MANAGED_BY}\" "
                                     f"for the external framework {self.framework_name}, not "
                                     f"{spec.get('managedBy')!r}"))
        errors.extend(validate_kueue_labels(labels))
        return errors

    def pod_sets(
        self, manifest: Mapping[str, Any], *, partial_admission: bool
    ) -> list[dict[str, Any]]:
        """None can be derived from an unknown spec: the Workload created for the object
        carries them."""
        return []

    def run_with_pod_sets_info(
        self, manifest: Mapping[str, Any], infos: Sequence[PodSetInfo]
    ) -> dict[str, Any]:
        """Unsuspended only: where the pod templates are is the kind's own business."""
        return self.suspend(manifest, False)

    def restore_pod_sets_info(
        self, manifest: Mapping[str, Any], pod_sets: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        return dict(manifest)

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        return bool((manifest.get("spec") or {}).get("suspend", False))

    def finished(self, status: Mapping[str, Any] | None) -> tuple[str, str] | None:
        return finished_of(status)

    def report(
        self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, wanted: int,
        ready_pods: int,
    ) -> JobReport:
        return report_of(status, wanted=wanted, ready_pods=ready_pods)

    def multikueue_copy(
        self, manifest: Mapping[str, Any], *, labels: Mapping[str, str]
    ) -> dict[str, Any]:
        """Kueue's generic adapter: the metadata fit for creation with ``labels``, the spec
        without ``managedBy``, nothing else (no suspension: the kind may have none)."""
        metadata = {k: v for k, v in (manifest.get("metadata") or {}).items()
                    if k in ("name", "namespace", "labels", "annotations")}
        metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
        copied = self.without_managed_by({"apiVersion": self.api_version, "kind": self.kind,
                                          "spec": manifest.get("spec") or {}})
        return {**copied, "metadata": metadata}

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
        """The object as the generic adapter sends it, running if the kind suspends through
        ``spec.suspend``. Its pod templates are unknown, so neither ``pod_labels`` nor
        ``infos`` can be placed: the kind's controller places its pods."""
        spec = dict(self.without_managed_by(manifest)["spec"])
        if "suspend" in spec:
            spec["suspend"] = False
        return self.remote_object(manifest, spec, namespace=namespace, labels=labels)


def configure_external_frameworks(names: Iterable[Any]) -> list[str]:
    """Register one ``ExternalFramework`` per name (and drop those no longer listed); what
    is wrong with the names, each named, instead when anything is (then nothing changes)."""
    problems: list[str] = []
    wanted: dict[str, ExternalFramework] = {}
    for name in names:
        gvk, problem = parse_external_framework(name)
        if gvk is None:
            problems.append(problem or repr(name))
            continue
        if gvk.name in wanted:
            problems.append(f"{name!r} is listed twice")
            continue
        api_version = f"{gvk.group}/{gvk.version}"
        known = registry.by_kind(api_version, gvk.kind)
        if known is not None and not isinstance(known, ExternalFramework):
            problems.append(f"{name!r} is the built-in kind {known.framework_name}: "
                            "enable it in INTEGRATIONS_FRAMEWORKS instead")
            continue
        wanted[gvk.name] = ExternalFramework(gvk)
    if problems:
        return problems
    for integration in registry.registered():
        if isinstance(integration, ExternalFramework) and integration.framework_name not in wanted:
            registry.unregister(integration.framework_name)
    for name, integration in wanted.items():
        current = registry.by_framework(name)
        if current is None:
            registry.register(integration)
    return []
