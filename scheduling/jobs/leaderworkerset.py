"""leaderworkerset.x-k8s.io/v1 LeaderWorkerSet: Kueue's leaderworkerset integration
(``pkg/controller/jobs/leaderworkerset``) and the part of the LWS controller that keeps its
groups of Pods.

A LeaderWorkerSet keeps ``spec.replicas`` groups of ``size`` Pods: a leader and ``size - 1``
workers. Kueue queues each group as ONE Workload, through the pod integration, which the
framework enables implicitly for those pods only. So the kind is a ``JobKind`` (stored,
validated, its queue checked at submission), and:

* its webhook (``default``, on create and update) marks each template (the leader's, if
  any, and the workers'): the queue and priority-class labels, the annotations
  ``kueue.x-k8s.io/pod-suspending-parent`` and ``kueue.x-k8s.io/pod-group-serving: "true"``;
* its validation is Kueue's: a valid queue name, no elastic annotation, ``replicas`` in
  [0, 1,000,000]; on update a queue label frozen while a group is ready, the
  priority-class rules, and, the set being managed, the templates' shapes (what makes a
  pod's role) and ``size`` unchanged, since a group Workload's pod sets never change;
* the Workload of group ``i`` (``group_workload_name``: ``leaderworkerset-<name>-<i>-<h5>``,
  the hash over ``<name>-<i>``) is prebuilt before its Pods (``pod_sets``: ``leader`` 1 +
  ``worker`` size - 1, or ``main`` size), so admission does not wait for them; like a
  StatefulSet's, it belongs to the set (``prebuilds_group_workloads``);
* each Pod is stamped as a member of its group's pod group (``pod_for``): group name = the
  Workload's name, total count = ``size``, role hash ``leader``, ``worker`` or ``main``;
  the job reconciler runs the set through those members, ungating a group's Pods together
  once its Workload is admitted;
* the controller's decisions are pure here (``plan``) and applied by
  ``scheduling.leaderworkersets``: one Workload and ``size`` Pods per group below
  ``replicas``; the groups above it go with their Workloads; Pods that Kueue stopped are
  replaced. A serving group never finishes;
* a change of the templates (only what is no part of a group's shape, such as an image)
  rolls out as the LWS controller's rolling update does (``rollout``): groups of the old
  revision are recreated whole, from the highest index, never leaving more than
  ``maxUnavailable`` groups short of ``replicas`` ready, with up to ``maxSurge`` extra
  groups while it lasts. Kueue keeps a group Workload's pod sets as they were built, so
  when a group is recreated its Workload goes with its Pods and is built again from the
  new templates: the group waits for quota again and its new Pods are ungated once that
  Workload is admitted. (Kueue also ungates, outright, Pods of the old revision a group's
  worker StatefulSet makes mid-update; a group here is never of two revisions, so there
  are none.)

The LWS controller makes a StatefulSet of leaders and one of workers per group; kueueweb
makes their Pods directly, named as those StatefulSets name them (``<name>-<i>`` and
``<name>-<i>-<j>``), with the LeaderWorkerSet as their controller.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduling.core import conditions as cond
from scheduling.core.fields import FieldError
from scheduling.jobframework.constants import (
    COMPONENT_WORKLOAD_INDEX_ANNOTATION,
    DEFAULT_POD_SET_NAME,
    PRIORITY_CLASS_LABEL,
    QUEUE_NAME_LABEL,
)
from scheduling.jobframework.interface import JobKind
from scheduling.jobframework.validation import (
    int_value,
    object_map,
)
from scheduling.jobframework.workload import (
    prebuilt_workload_annotations,
    workload_name_for_owner,
)
from scheduling.jobs.deployment import (
    int_or_percent,
    queue_update_errors,
    scaled_value,
    template_hash,
    template_pod_errors,
    validate_parent,
)
from scheduling.jobs.pod import (
    GROUP_NAME_LABEL,
    GROUP_TOTAL_COUNT_ANNOTATION,
    IS_GROUP_WORKLOAD_ANNOTATION,
    MANAGED_LABEL,
    MANAGED_LABEL_VALUE,
    ROLE_HASH_ANNOTATION,
    SERVING_ANNOTATION,
    SUSPENDING_PARENT_ANNOTATION,
    Pod,
    shape_changes,
)

FRAMEWORK_NAME = "leaderworkerset.x-k8s.io/leaderworkerset"
LEADER_POD_SET = "leader"
WORKER_POD_SET = "worker"
DEFAULT_REPLICAS = 1
DEFAULT_SIZE = 1
MAX_REPLICAS = 1_000_000
# The LWS controller's labels and annotations on its Pods.
LWS_PREFIX = "leaderworkerset.sigs.k8s.io"
SET_NAME_LABEL = f"{LWS_PREFIX}/name"
GROUP_INDEX_LABEL = f"{LWS_PREFIX}/group-index"
WORKER_INDEX_LABEL = f"{LWS_PREFIX}/worker-index"
SIZE_ANNOTATION = f"{LWS_PREFIX}/size"
LEADER_NAME_ANNOTATION = f"{LWS_PREFIX}/leader-name"
# The revision of the templates a group's Pods were made of.
REVISION_LABEL = f"{LWS_PREFIX}/template-revision-hash"
# The API's defaults of spec.rolloutStrategy.rollingUpdateConfiguration.
DEFAULT_MAX_UNAVAILABLE = 1
DEFAULT_MAX_SURGE = 0
ROLLING_PATH = "spec.rolloutStrategy.rollingUpdateConfiguration"
# MultiKueue's marks on the worker's copy of a set: the hub that made it, and the uid of the
# hub's set, which names the copy's group Workloads as the hub's are named.
MULTIKUEUE_ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
MULTIKUEUE_ORIGIN_UID_ANNOTATION = "kueue.x-k8s.io/multikueue-origin-uid"
SPEC_PATH = "spec.leaderWorkerTemplate"
LEADER_PATH = f"{SPEC_PATH}.leaderTemplate"
WORKER_PATH = f"{SPEC_PATH}.workerTemplate"
# A group's name is its pods' ``pod-group-name`` label, so its Workload's name must be a
# label value: Kueue's short names (ShortWorkloadNames).
_GROUP_NAME_MAX_LENGTH = 63
_POD = Pod()


@dataclass(frozen=True)
class GroupPod:
    """A Pod of the set, as the decisions need it: its group, and whether it is ready or
    ended (deleted by Kueue when its group's Workload stopped)."""

    name: str
    group: int
    ready: bool = False
    terminated: bool = False
    revision: str = ""


@dataclass(frozen=True)
class GroupPlan:
    """What one pass does: the groups whose Workload to create, the Workloads to delete
    (by index: groups above those kept, and groups recreated by a rolling update, whose
    Workload is built again), the Pods to delete (by name, with the reason:
    ``Terminated``, ``ScaleDown`` or ``GroupUpdate``), the Pods to create (their
    manifests, a group's leader first), and the set's new status, counting the Pods to
    create."""

    create_workloads: list[int]
    delete_workloads: list[int]
    delete_pods: list[tuple[str, str]]
    create_pods: list[dict[str, Any]]
    status: dict[str, Any]


def _spec(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = manifest.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _group_template(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    value = _spec(manifest).get("leaderWorkerTemplate")
    return value if isinstance(value, Mapping) else {}


def _leader_template(manifest: Mapping[str, Any]) -> Mapping[str, Any] | None:
    value = _group_template(manifest).get("leaderTemplate")
    return value if isinstance(value, Mapping) else None


def _worker_template(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    value = _group_template(manifest).get("workerTemplate")
    return value if isinstance(value, Mapping) else {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return labels if isinstance(labels, Mapping) else {}


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def replicas(manifest: Mapping[str, Any]) -> int:
    """``spec.replicas``, the API's default 1 when unset."""
    return _int(_spec(manifest).get("replicas"), DEFAULT_REPLICAS)


def size(manifest: Mapping[str, Any]) -> int:
    """``spec.leaderWorkerTemplate.size``: the Pods of a group, the API's default 1."""
    return _int(_group_template(manifest).get("size"), DEFAULT_SIZE)


def revision(manifest: Mapping[str, Any]) -> str:
    """The revision of the set's templates (the leader's and the workers'), which its
    Pods carry as ``REVISION_LABEL``; the size is no part of it, as it cannot change."""
    group = _group_template(manifest)
    return template_hash({"leaderTemplate": group.get("leaderTemplate"),
                          "workerTemplate": group.get("workerTemplate")})


def _rolling(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    strategy = _spec(manifest).get("rolloutStrategy")
    rolling = strategy.get("rollingUpdateConfiguration") if isinstance(strategy, Mapping) else None
    return rolling if isinstance(rolling, Mapping) else {}


def rollout(manifest: Mapping[str, Any]) -> tuple[int, int]:
    """``(maxSurge, maxUnavailable)`` in groups, against ``replicas``: a percentage of
    surge rounded up and of unavailability down, as the LWS controller resolves them;
    the API's defaults are no surge and one group unavailable."""
    desired = replicas(manifest)
    rolling = _rolling(manifest)
    surge = scaled_value(rolling.get("maxSurge", DEFAULT_MAX_SURGE), desired, round_up=True)
    unavailable = scaled_value(rolling.get("maxUnavailable", DEFAULT_MAX_UNAVAILABLE),
                               desired, round_up=False)
    return surge, unavailable


def is_multikueue_remote(manifest: Mapping[str, Any]) -> bool:
    """The set is a MultiKueue hub's copy on its worker: the hub creates its group
    Workloads there, the set creates none of its own."""
    return MULTIKUEUE_ORIGIN_LABEL in _labels(manifest)


def owner_uid(manifest: Mapping[str, Any]) -> str:
    """The uid its group Workloads are named with (Kueue's ``GetOwnerUID``): the hub set's
    on a MultiKueue copy, so that the names match the hub's, else its own."""
    metadata = manifest.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return str(annotations.get(MULTIKUEUE_ORIGIN_UID_ANNOTATION) or metadata.get("uid", ""))


def group_workload_name(manifest: Mapping[str, Any], index: int) -> str:
    """The Workload of group ``index`` (Kueue's ``GetWorkloadName``): named for the owner
    ``<name>-<index>`` of this kind, hashed with the set's uid (``owner_uid``)."""
    metadata = manifest.get("metadata") or {}
    return workload_name_for_owner(
        f"{metadata.get('name', '')}-{index}", owner_uid(manifest),
        kind=LeaderWorkerSet.kind, group=LeaderWorkerSet.api_version.rpartition("/")[0],
        max_length=_GROUP_NAME_MAX_LENGTH)


def _without_lws_keys(values: Any) -> dict[str, Any]:
    """Labels or annotations without the LWS controller's own keys (but its name label),
    which differ from pod to pod and are no part of a pod set."""
    return {key: value for key, value in (values or {}).items()
            if not key.startswith(LWS_PREFIX) or key == SET_NAME_LABEL}


def _rollout_errors(strategy: Any) -> list[FieldError]:
    """``spec.rolloutStrategy``: a RollingUpdate whose surge and unavailability are
    non-negative ints or percentages, the surge no more than 100%."""
    errors: list[FieldError] = []
    if strategy is None:
        return errors
    if not isinstance(strategy, Mapping):
        return [FieldError("spec.rolloutStrategy", "must be an object")]
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        errors.append(FieldError("spec.rolloutStrategy.type", (
            f"Unsupported value: {strategy.get('type')!r}: supported values: "
            '"RollingUpdate"')))
    rolling = strategy.get("rollingUpdateConfiguration")
    if rolling is None:
        return errors
    if not isinstance(rolling, Mapping):
        return [*errors, FieldError(ROLLING_PATH, "must be an object")]
    for key in ("maxUnavailable", "maxSurge"):
        if key in rolling:
            value = int_or_percent(rolling[key], f"{ROLLING_PATH}.{key}", errors)
            if key == "maxSurge" and isinstance(rolling[key], str) and (value or 0) > 100:
                errors.append(FieldError(f"{ROLLING_PATH}.{key}",
                                         "must not be greater than 100%"))
    return errors


def _pod_set(name: str, count: int, template: Mapping[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(dict(template))
    metadata = dict(result.get("metadata") or {})
    for key in ("labels", "annotations"):
        if key in metadata:
            metadata[key] = _without_lws_keys(metadata[key])
    result["metadata"] = metadata
    return {"name": name, "count": count, "template": result}


class LeaderWorkerSet(JobKind):
    framework_name = FRAMEWORK_NAME
    api_version = "leaderworkerset.x-k8s.io/v1"
    kind = "LeaderWorkerSet"
    plural = "leaderworkersets"
    implicitly_enables = (_POD.framework_name,)
    keeps_replicas = True
    webhook_defaults_on_update = True
    prebuilds_group_workloads = True

    # --- admission webhook ---------------------------------------------------------------

    def validate_on_create(
        self, manifest: Mapping[str, Any], *, namespace: str, slices_enabled: bool
    ) -> list[FieldError]:
        errors, spec = validate_parent(self, manifest, namespace=namespace,
                                       slices_enabled=slices_enabled)
        if spec is None:
            return errors
        count = spec.get("replicas")
        if count is not None and int_value(count, "spec.replicas", errors) is not None and not (
                0 <= count <= MAX_REPLICAS):
            bound = f"must be >= 0, got {count}" if count < 0 else (
                f"must be <= {MAX_REPLICAS}, got {count}")
            errors.append(FieldError("spec.replicas", (
                f"Invalid value: {count}: invalid LeaderWorkerSet replicas: {bound}")))
        errors.extend(_rollout_errors(spec.get("rolloutStrategy")))
        group = spec.get("leaderWorkerTemplate")
        if not isinstance(group, Mapping):
            errors.append(FieldError(SPEC_PATH, "is required" if group is None
                                     else "must be an object"))
            return errors
        if group.get("size") is not None:
            int_value(group["size"], f"{SPEC_PATH}.size", errors, minimum=1)
        for template, path, required in ((group.get("leaderTemplate"), LEADER_PATH, False),
                                         (group.get("workerTemplate"), WORKER_PATH, True)):
            if template is None and not required:
                continue
            if not isinstance(template, Mapping):
                errors.append(FieldError(path, "is required" if template is None
                                         else "must be an object"))
                continue
            # Each template is what Pods are made of: checked now as they will be.
            errors.extend(template_pod_errors(template, path, namespace=namespace,
                                              slices_enabled=slices_enabled))
        return errors

    def validate_on_update(
        self, old: Mapping[str, Any], new: Mapping[str, Any], *, ready_replicas: int,
        namespace: str, slices_enabled: bool,
    ) -> list[FieldError]:
        """``validate_on_create`` of the new object and Kueue's update rules: while a group
        is ready the queue label may not change, and it may never be removed; a priority
        class may not be added while a group is ready, nor removed; the set is managed, so
        the templates' shapes (a leader template may not come or go) and ``size`` stay."""
        errors = self.validate_on_create(new, namespace=namespace,
                                         slices_enabled=slices_enabled)
        errors.extend(queue_update_errors(old, new, ready_replicas=ready_replicas))
        old_leader, new_leader = _leader_template(old), _leader_template(new)
        if (old_leader is None) != (new_leader is None):
            errors.append(FieldError(LEADER_PATH, "field is immutable"))
        elif old_leader is not None and new_leader is not None:
            errors.extend(shape_changes(new_leader.get("spec") or {},
                                        old_leader.get("spec") or {}, f"{LEADER_PATH}.spec"))
        errors.extend(shape_changes(_worker_template(new).get("spec") or {},
                                    _worker_template(old).get("spec") or {},
                                    f"{WORKER_PATH}.spec"))
        if size(new) != size(old):
            errors.append(FieldError(f"{SPEC_PATH}.size", "field is immutable"))
        return errors

    def default(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Kueue's webhook for a queued LeaderWorkerSet: each template gets the set's queue
        and priority-class labels, the parent annotation and the serving annotation; with
        the API's defaults kueueweb reads (one replica of size one)."""
        result = copy.deepcopy(dict(manifest))
        spec = result.setdefault("spec", {})
        if not isinstance(spec, dict):
            return result
        spec.setdefault("replicas", DEFAULT_REPLICAS)
        group = spec.setdefault("leaderWorkerTemplate", {})
        if not isinstance(group, dict):
            return result
        group.setdefault("size", DEFAULT_SIZE)
        own = _labels(result)
        for key in ("leaderTemplate", "workerTemplate"):
            template = group.get(key) if key == "leaderTemplate" else group.setdefault(key, {})
            if not isinstance(template, dict):
                continue
            metadata = template.setdefault("metadata", {})
            labels = dict(metadata.get("labels") or {})
            for label in (QUEUE_NAME_LABEL, PRIORITY_CLASS_LABEL):
                if own.get(label):
                    labels[label] = own[label]
            if labels:
                metadata["labels"] = labels
            metadata["annotations"] = {**(metadata.get("annotations") or {}),
                                       SUSPENDING_PARENT_ANNOTATION: FRAMEWORK_NAME,
                                       SERVING_ANNOTATION: "true"}
            pod_spec = template.setdefault("spec", {})
            if isinstance(pod_spec, dict):
                # A Pod's default, which its group's pod sets record: a serving pod's
                # containers restart whenever they exit.
                pod_spec.setdefault("restartPolicy", "Always")
        return result

    def is_suspended(self, manifest: Mapping[str, Any]) -> bool:
        """A LeaderWorkerSet has no suspend: Kueue holds its Pods, gated by group."""
        return False

    def pod_templates(self, manifest: Mapping[str, Any]) -> list[tuple[Any, str]]:
        leader = _leader_template(manifest)
        worker = (_worker_template(manifest), WORKER_PATH)
        return [(leader, LEADER_PATH), worker] if leader is not None else [worker]

    def pod_priority_class(self, manifest: Mapping[str, Any]) -> tuple[str, str] | None:
        for template, path in self.pod_templates(manifest):
            name = object_map(template.get("spec"), "", []).get("priorityClassName")
            if name:
                return str(name), f"{path}.spec.priorityClassName"
        return None

    # --- the Workload of a group ---------------------------------------------------------

    def pod_sets(self, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Kueue's pod sets of every group: ``leader`` (1) and ``worker`` (size - 1) with a
        leader template, else ``main`` (size); the templates keep their metadata, but the
        LWS controller's keys."""
        leader = _leader_template(manifest)
        if leader is None:
            return [_pod_set(DEFAULT_POD_SET_NAME, size(manifest), _worker_template(manifest))]
        return [_pod_set(LEADER_POD_SET, 1, leader),
                _pod_set(WORKER_POD_SET, size(manifest) - 1, _worker_template(manifest))]

    def workload_annotations(self, manifest: Mapping[str, Any], index: int) -> dict[str, str]:
        """The annotations of group ``index``'s Workload: its owner, its index, and that it
        is a pod group's."""
        return {**prebuilt_workload_annotations(self, manifest),
                COMPONENT_WORKLOAD_INDEX_ANNOTATION: str(index),
                IS_GROUP_WORKLOAD_ANNOTATION: "true"}

    # --- MultiKueue (Kueue's multi-Workload adapter) -------------------------------------

    def expected_workload_count(self, manifest: Mapping[str, Any]) -> int:
        """The group Workloads the set has once all exist: one per replica. MultiKueue
        dispatches none of them before."""
        return replicas(manifest)

    def workload_index(self, annotations: Mapping[str, Any]) -> int:
        """A group Workload's index, -1 when it has none; the lowest is the primary, which
        chooses the worker for all."""
        index = str(annotations.get(COMPONENT_WORKLOAD_INDEX_ANNOTATION, ""))
        return int(index) if index.isdigit() else -1

    def multikueue_object(self, manifest: Mapping[str, Any], *, origin: str) -> dict[str, Any]:
        """The set as created on the worker: metadata fit for creation (name, labels,
        annotations), the spec as it is, the hub's name as its origin label and the hub
        set's uid as its origin-UID annotation."""
        metadata = manifest.get("metadata") or {}
        uid = str(metadata.get("uid", ""))
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {
                "name": metadata.get("name"),
                "namespace": metadata.get("namespace"),
                "labels": {**(metadata.get("labels") or {}), MULTIKUEUE_ORIGIN_LABEL: origin},
                "annotations": {**(metadata.get("annotations") or {}),
                                MULTIKUEUE_ORIGIN_UID_ANNOTATION: uid},
            },
            "spec": copy.deepcopy(dict(_spec(manifest))),
        }

    # --- the LWS controller --------------------------------------------------------------

    def member_stamp(self, manifest: Mapping[str, Any], index: int, *,
                     leader: bool) -> tuple[dict[str, str], dict[str, str]]:
        """The labels and annotations Kueue's reconciler puts on a Pod of group ``index``
        (the group's leader or a worker): managed, the set's queue, a member of the group
        named after the group's Workload, of ``size`` Pods, and its role: ``leader`` or
        ``worker`` with a leader template, else ``main``."""
        labels = {MANAGED_LABEL: MANAGED_LABEL_VALUE,
                  GROUP_NAME_LABEL: group_workload_name(manifest, index)}
        queue = _labels(manifest).get(QUEUE_NAME_LABEL)
        if queue:
            labels[QUEUE_NAME_LABEL] = str(queue)
        if _leader_template(manifest) is None:
            role = DEFAULT_POD_SET_NAME
        else:
            role = LEADER_POD_SET if leader else WORKER_POD_SET
        return labels, {GROUP_TOTAL_COUNT_ANNOTATION: str(size(manifest)),
                        ROLE_HASH_ANNOTATION: role}

    def pod_for(self, manifest: Mapping[str, Any], index: int, worker: int) -> dict[str, Any]:
        """Pod ``worker`` of group ``index`` (0: the leader), as the LWS controller names
        and labels it, stamped by Kueue as a member of its group's pod group, owned by the
        set. A group without a leader template makes its leader of the workers'."""
        metadata = manifest.get("metadata") or {}
        name = str(metadata.get("name", ""))
        leader_template = _leader_template(manifest)
        template = (leader_template if worker == 0 and leader_template is not None
                    else _worker_template(manifest))
        template_metadata = template.get("metadata") or {}
        leader_name = f"{name}-{index}"
        stamp_labels, stamp_annotations = self.member_stamp(manifest, index, leader=not worker)
        annotations = {**(template_metadata.get("annotations") or {}),
                       SIZE_ANNOTATION: str(size(manifest)), **stamp_annotations}
        if worker:
            annotations[LEADER_NAME_ANNOTATION] = leader_name
        spec = copy.deepcopy(dict(template.get("spec") or {}))
        return {
            "apiVersion": _POD.api_version,
            "kind": _POD.kind,
            "metadata": {
                "name": f"{leader_name}-{worker}" if worker else leader_name,
                "namespace": metadata.get("namespace"),
                "labels": {**(template_metadata.get("labels") or {}),
                           SET_NAME_LABEL: name, GROUP_INDEX_LABEL: str(index),
                           WORKER_INDEX_LABEL: str(worker),
                           REVISION_LABEL: revision(manifest), **stamp_labels},
                "annotations": annotations,
                "ownerReferences": [self.controller_reference(manifest)],
            },
                "spec": spec,
        }

    def plan(self, manifest: Mapping[str, Any], status: Mapping[str, Any],
             pods: Sequence[GroupPod], workloads: Sequence[int], *,
             now: datetime) -> GroupPlan:
        """One pass over the set's ``pods`` and the groups that have a Workload
        (``workloads``, by index): every group kept gets its Workload and its ``size``
        Pods, Pods that ended are replaced, the groups above go, and groups of an old
        revision are recreated as the rolling update allows (``_rolled_groups``). Then
        Kueue's side: a Workload per group below ``replicas``, or below ``status.replicas``
        while a surge rollout has extra groups; a recreated group's Workload is built
        again."""
        desired, group_size = replicas(manifest), size(manifest)
        current = revision(manifest)
        surge, _unavailable = rollout(manifest)
        having = set(workloads)
        members: dict[int, list[GroupPod]] = {}
        for pod in pods:
            if not pod.terminated:
                members.setdefault(pod.group, []).append(pod)

        def outdated(index: int) -> bool:
            # A Pod without a revision was made before revisions were recorded: it is
            # taken as current rather than rolled for nothing.
            return any(p.revision not in ("", current) for p in members.get(index, ()))

        def ready(index: int) -> bool:
            return sum(1 for p in members.get(index, ()) if p.ready) == group_size

        updated = sum(1 for index in range(desired) if not outdated(index) and ready(index))
        # A rollout lasts while a group below replicas is of an old revision, and, once
        # surge groups exist, until every group below replicas is updated and ready.
        rolling = any(outdated(index) for index in range(desired)) or (
            updated < desired and any(index >= desired for index in members))
        total = desired + surge if rolling else desired
        rolled = self._rolled_groups(manifest, members, total, outdated, ready) if rolling else []
        delete: list[tuple[str, str]] = []
        kept: dict[str, GroupPod] = {}
        for pod in pods:
            if pod.group >= total:
                delete.append((pod.name, "ScaleDown"))
            elif pod.terminated:
                delete.append((pod.name, "Terminated"))
            elif pod.group in rolled:
                delete.append((pod.name, "GroupUpdate"))
            else:
                kept[pod.name] = pod
        # A MultiKueue copy's groups come with the Workloads its hub dispatched, which it
        # does not create: a group gets its Pods once its Workload is there.
        remote = is_multikueue_remote(manifest)
        create = [self.pod_for(manifest, index, worker)
                  for index in range(total) for worker in range(group_size)
                  if not remote or index in having]
        create = [pod for pod in create if pod["metadata"]["name"] not in kept]
        new_status = self._status(manifest, status, total=total, updated=updated,
                                  ready=sum(1 for index in range(desired) if ready(index)
                                            and index not in rolled), now=now)
        if remote:
            return GroupPlan(create_workloads=[],
                             delete_workloads=sorted(i for i in having if i >= desired),
                             delete_pods=delete, create_pods=create, status=new_status)
        # Kueue's reconciler reads the status the LWS controller wrote: surge groups get
        # Workloads while the rollout has not updated every group below replicas.
        count = desired
        if new_status["replicas"] > desired and surge > 0 and new_status[
                "updatedReplicas"] < desired:
            count = new_status["replicas"]
        replaced = [index for index in rolled if index in having]
        return GroupPlan(
            create_workloads=[index for index in range(count)
                              if index not in having or index in rolled],
            delete_workloads=sorted({*replaced, *(i for i in having if i >= count)}),
            delete_pods=delete, create_pods=create, status=new_status)

    def _rolled_groups(self, manifest: Mapping[str, Any], members: Mapping[int, Sequence[GroupPod]],
                       total: int, outdated: Callable[[int], bool],
                       ready: Callable[[int], bool]) -> list[int]:
        """The groups of an old revision to recreate now, from the highest index: one not
        ready costs nothing; a ready one only while at least ``replicas -
        maxUnavailable`` groups stay ready (surge groups count, so a ready surge group
        lets one more go)."""
        desired = replicas(manifest)
        _surge, unavailable = rollout(manifest)
        available = sum(1 for index in range(total) if ready(index))
        rolled: list[int] = []
        for index in reversed(range(desired)):
            if not outdated(index):
                continue
            if not ready(index):
                rolled.append(index)
            elif available - 1 >= desired - unavailable:
                rolled.append(index)
                available -= 1
        return rolled

    def _status(self, manifest: Mapping[str, Any], status: Mapping[str, Any], *, total: int,
                updated: int, ready: int, now: datetime) -> dict[str, Any]:
        """The set's status over its groups: ``replicas`` the groups it keeps (surge ones
        included), ``updatedReplicas`` those below ``replicas`` of the current revision
        and ready, ``readyReplicas`` the groups whose Pods are all ready; ``Available``
        holds once every group is."""
        desired = replicas(manifest)
        available = ready >= desired
        result: dict[str, Any] = {
            "observedGeneration": (manifest.get("metadata") or {}).get("generation", 1),
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": ready,
        }
        result["conditions"] = cond.set_condition(
            list(status.get("conditions") or []), "Available", available,
            "AllGroupsReady" if available else "GroupsNotReady",
            "All replicas are ready" if available else "Not all replicas are ready", now=now)
        return result
