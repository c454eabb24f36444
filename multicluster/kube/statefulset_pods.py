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

from collections.abc import Callable, Mapping
from typing import Any

from multicluster.kube.backend import KubeBackend, WatchKind
from multicluster.kube.member_stamps import Stamp, framework_enabled, unstamped_pods
from multicluster.kube.member_stamps import stamp_members as stamp_pods
from scheduling.jobframework.managed import ManagedJobs
from scheduling.jobs.pod import GROUP_NAME_LABEL
from scheduling.jobs.statefulset import POD_NAME_LABEL, StatefulSet

KIND = StatefulSet()
# The Pods a StatefulSet controller created that are no pod group's member yet.
UNSTAMPED_PODS = unstamped_pods("statefulset-pods")
UNSTAMPED_SELECTOR = f"{POD_NAME_LABEL},!{GROUP_NAME_LABEL}"


def enabled() -> bool:
    """The statefulset framework is enabled."""
    return framework_enabled(KIND)


def _owner_name(pod: Mapping[str, Any]) -> str | None:
    if pod.get("controller_kind") != f"{KIND.api_version} {KIND.kind}":
        return None
    # A StatefulSet names its Pods ``<set>-<ordinal>``.
    return str(pod.get("name")).rpartition("-")[0]


def _owns(pod: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    return bool((owner.get("metadata") or {}).get("uid") == pod.get("controller"))


def _stamp(owner: Mapping[str, Any], pod: Mapping[str, Any]) -> Stamp:
    return KIND.member_stamp(owner, KIND.workload_name(owner))


def stamp_members(backend: KubeBackend, managed: ManagedJobs,
                  namespace_labels: Mapping[str, Mapping[str, str]], *,
                  refresh: Callable[[WatchKind, str], Any]) -> list[str]:
    """Stamp the new Pods of the managed StatefulSets as members of their set's group;
    returns them (``namespace/name``). ``refresh`` lists and watches a kind with a label
    selector and returns its state (the pass's)."""
    state = refresh(UNSTAMPED_PODS, UNSTAMPED_SELECTOR)
    return stamp_pods(backend, managed, namespace_labels, state.objects.values(), kind=KIND,
                      owner_name=_owner_name, owns=_owns, stamp=_stamp)
