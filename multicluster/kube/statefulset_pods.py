"""Kueue's StatefulSet pod reconciler on a Kubernetes cluster: the Pods of a managed
StatefulSet created there (kubectl) are stamped as one pod group, so that the pass adopts
them as any pod group (``multicluster.kube.sync``: one Workload for the set, its members
ungated together once it is admitted).

A StatefulSet's Pods reach the cluster gated, carrying the template's
``kueue.x-k8s.io/pod-suspending-parent: statefulset`` (put there by Kueue's StatefulSet
webhook, ``scheduling.jobs.statefulset``), but without a queue or a group: Kueue's pod
reconciler adds those to each Pod (``StatefulSet.member_stamp``: the set's queue, the
group named after the set's Workload, the total of ``replicas``, fast admission, serving).
Here the Pods the StatefulSet controller made and no one stamped yet are watched (its
pod-name label, no group label) and patched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from multicluster.kube.backend import TOMBSTONE, KubeBackend, WatchKind
from multicluster.kube.errors import KubeApiError
from multicluster.kube.manifests import reduce_adoptable
from scheduling.core.pod_security import SYSTEM_NAMESPACES
from scheduling.jobframework import registry
from scheduling.jobframework.managed import ManagedJobs, namespace_labels_of
from scheduling.jobs.pod import GROUP_NAME_LABEL, SUSPENDING_PARENT_ANNOTATION
from scheduling.jobs.statefulset import FRAMEWORK_NAME, POD_NAME_LABEL, StatefulSet

logger = logging.getLogger(__name__)

KIND = StatefulSet()
POD = ("", "v1", "pods")
# The Pods a StatefulSet controller created that are no pod group's member yet.
UNSTAMPED_PODS = WatchKind("statefulset-pods", reduce_adoptable, resource=POD)
UNSTAMPED_SELECTOR = f"{POD_NAME_LABEL},!{GROUP_NAME_LABEL}"


def enabled() -> bool:
    """The statefulset framework is enabled."""
    config: Mapping[str, Any] = settings.KUEUEWEB
    return FRAMEWORK_NAME in registry.enabled_names(config)


def stamp_members(backend: KubeBackend, managed: ManagedJobs,
                  namespace_labels: Mapping[str, Mapping[str, str]], *,
                  refresh: Callable[[WatchKind, str], Any]) -> list[str]:
    """Stamp the new Pods of the managed StatefulSets as members of their set's group;
    returns them (``namespace/name``). ``refresh`` lists and watches a kind with a label
    selector and returns its state (the pass's)."""
    state = refresh(UNSTAMPED_PODS, UNSTAMPED_SELECTOR)
    stamped = []
    sets: dict[tuple[str, str], dict[str, Any] | None] = {}
    for pod in state.objects.values():
        if pod.get(TOMBSTONE) or (pod.get("annotations") or {}).get(
                SUSPENDING_PARENT_ANNOTATION) != FRAMEWORK_NAME:
            continue
        if pod.get("controller_kind") != f"{KIND.api_version} {KIND.kind}":
            continue
        namespace, name = str(pod.get("namespace")), str(pod.get("name"))
        # A StatefulSet names its Pods ``<set>-<ordinal>``.
        owner_key = (namespace, name.rpartition("-")[0])
        if owner_key not in sets:
            sets[owner_key] = backend.get_job(*owner_key, resource=(
                KIND.group, KIND.version, KIND.plural))
        owner = sets[owner_key]
        metadata = (owner or {}).get("metadata") or {}
        if owner is None or metadata.get("uid") != pod.get("controller"):
            continue
        if namespace in SYSTEM_NAMESPACES or not managed.manages(
                metadata.get("labels") or {}, namespace_labels=namespace_labels_of(
                    namespace, namespace_labels.get(namespace))):
            continue
        labels, annotations = KIND.member_stamp(owner, KIND.workload_name(owner))
        try:
            patched = backend.patch_job(namespace, name, {"metadata": {
                "labels": labels, "annotations": annotations}}, resource=POD)
        except KubeApiError as exc:
            # One Pod refused must not hold up the pass: the watch lists it again next time.
            logger.warning("StatefulSet pod %s/%s not stamped: %s", namespace, name, exc)
            continue
        if patched is not None:
            stamped.append(f"{namespace}/{name}")
    return stamped
