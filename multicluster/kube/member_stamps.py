"""Kueue's pod reconcilers of the kinds that hand their Pods to the pod integration as pod
groups (a StatefulSet, a LeaderWorkerSet), on a Kubernetes cluster: the Pods their
controllers made there, marked by the kind's webhook and not yet any group's member, are
patched with the group's stamp, so that the pass adopts each group as any pod group
(``multicluster.kube.sync``: one Workload, its members ungated together once admitted).
The kinds' rules (which object a Pod is of, its stamp) are theirs: ``statefulset_pods``,
``leaderworkerset_pods``."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.conf import settings

from multicluster.kube.backend import TOMBSTONE, KubeBackend, WatchKind
from multicluster.kube.errors import KubeApiError
from multicluster.kube.manifests import reduce_adoptable
from scheduling.core.pod_security import SYSTEM_NAMESPACES
from scheduling.jobframework import registry
from scheduling.jobframework.interface import JobKind
from scheduling.jobframework.managed import ManagedJobs, namespace_labels_of
from scheduling.jobs.pod import SUSPENDING_PARENT_ANNOTATION

logger = logging.getLogger(__name__)

POD = ("", "v1", "pods")
Stamp = tuple[dict[str, str], dict[str, str]]


def unstamped_pods(name: str) -> WatchKind:
    """The watch of a kind's Pods that are no pod group's member yet (its selector is the
    kind's)."""
    return WatchKind(name, reduce_adoptable, resource=POD)


def framework_enabled(kind: JobKind) -> bool:
    """``kind``'s framework is enabled."""
    config: Mapping[str, Any] = settings.KUEUEWEB
    return kind.framework_name in registry.enabled_names(config)


def stamp_members(backend: KubeBackend, managed: ManagedJobs,
                  namespace_labels: Mapping[str, Mapping[str, str]],
                  pods: Iterable[Mapping[str, Any]], *, kind: JobKind,
                  owner_name: Callable[[Mapping[str, Any]], str | None],
                  stamp: Callable[[Mapping[str, Any], Mapping[str, Any]], Stamp],
                  owns: Callable[[Mapping[str, Any], Mapping[str, Any]], bool] | None = None,
                  ) -> list[str]:
    """Stamp ``pods`` (reduced by ``reduce_adoptable``) that ``kind``'s webhook handed to
    the pod integration (``pod-suspending-parent``) and that are of a managed object of
    ``kind``: ``owner_name`` names that object from the Pod (None: none), ``owns`` (if
    given) checks the object read is the Pod's, ``stamp`` gives the Pod's labels and annotations.
    Returns the Pods stamped (``namespace/name``)."""
    stamped = []
    owners: dict[tuple[str, str], dict[str, Any] | None] = {}
    for pod in pods:
        if pod.get(TOMBSTONE) or (pod.get("annotations") or {}).get(
                SUSPENDING_PARENT_ANNOTATION) != kind.framework_name:
            continue
        namespace, name = str(pod.get("namespace")), str(pod.get("name"))
        parent = owner_name(pod)
        if parent is None or namespace in SYSTEM_NAMESPACES:
            continue
        key = (namespace, parent)
        if key not in owners:
            owners[key] = backend.get_job(namespace, parent, resource=(
                kind.group, kind.version, kind.plural))
        owner = owners[key]
        if owner is None or (owns is not None and not owns(pod, owner)):
            continue
        metadata = owner.get("metadata") or {}
        if not managed.manages(metadata.get("labels") or {}, namespace_labels=namespace_labels_of(
                namespace, namespace_labels.get(namespace))):
            continue
        labels, annotations = stamp(owner, pod)
        try:
            patched = backend.patch_job(namespace, name, {"metadata": {
                "labels": labels, "annotations": annotations}}, resource=POD)
        except KubeApiError as exc:
            # One Pod refused must not hold up the pass: the watch lists it again next time.
            logger.warning("%s pod %s/%s not stamped: %s", kind.kind, namespace, name, exc)
            continue
        if patched is not None:
            stamped.append(f"{namespace}/{name}")
    return stamped
