"""Kueue's leaderworkerset reconciler for a group's Pods on a Kubernetes cluster: the
Pods the LWS controller made there for a managed LeaderWorkerSet (kubectl) are stamped as
members of their replica's pod group, so that the pass adopts each replica as one pod
group (``multicluster.kube.sync``: one Workload per group, its Pods ungated together once
it is admitted).

The LWS controller makes a group's leader and workers from the set's templates, which
Kueue's LWS webhook marked (``scheduling.jobs.leaderworkerset``: the queue label,
``kueue.x-k8s.io/pod-suspending-parent: leaderworkerset.x-k8s.io/leaderworkerset``), and
labels each with the set's name and its group's index. Kueue's reconciler, finding a Pod
of a managed set with a group index and no stamp yet, adds the group
(``LeaderWorkerSet.member_stamp``: the group Workload's name, ``size`` Pods, the role
``leader`` or ``worker``: a worker names its leader, ``main`` without a leader template).
The Pods belong to the set through its StatefulSets (a worker's through its leader): a
Pod is the set's by its name label, as Kueue reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from multicluster.kube.backend import KubeBackend, WatchKind
from multicluster.kube.member_stamps import Stamp, framework_enabled, unstamped_pods
from multicluster.kube.member_stamps import stamp_members as stamp_pods
from scheduling.jobframework.managed import ManagedJobs
from scheduling.jobs.leaderworkerset import (
    GROUP_INDEX_LABEL,
    LEADER_NAME_ANNOTATION,
    SET_NAME_LABEL,
    LeaderWorkerSet,
)
from scheduling.jobs.pod import GROUP_NAME_LABEL

KIND = LeaderWorkerSet()
# The Pods the LWS controller created that are no pod group's member yet.
UNSTAMPED_PODS = unstamped_pods("leaderworkerset-pods")
UNSTAMPED_SELECTOR = f"{SET_NAME_LABEL},{GROUP_INDEX_LABEL},!{GROUP_NAME_LABEL}"


def enabled() -> bool:
    """The leaderworkerset framework is enabled."""
    return framework_enabled(KIND)


def _group_index(pod: Mapping[str, Any]) -> int | None:
    value = str((pod.get("labels") or {}).get(GROUP_INDEX_LABEL, ""))
    return int(value) if value.isdigit() else None


def _owner_name(pod: Mapping[str, Any]) -> str | None:
    # A Pod its controller made (a StatefulSet's, or the set's own), of a group.
    if not pod.get("controller") or _group_index(pod) is None:
        return None
    name = (pod.get("labels") or {}).get(SET_NAME_LABEL)
    return str(name) if name else None


def _stamp(owner: Mapping[str, Any], pod: Mapping[str, Any]) -> Stamp:
    index = _group_index(pod)
    assert index is not None  # _owner_name took only Pods of a group
    leader = LEADER_NAME_ANNOTATION not in (pod.get("annotations") or {})
    return KIND.member_stamp(owner, index, leader=leader)


def stamp_members(backend: KubeBackend, managed: ManagedJobs,
                  namespace_labels: Mapping[str, Mapping[str, str]], *,
                  refresh: Callable[[WatchKind, str], Any]) -> list[str]:
    """Stamp the new Pods of the managed LeaderWorkerSets as members of their group's pod
    group; returns them (``namespace/name``). ``refresh`` lists and watches a kind with a
    label selector and returns its state (the pass's)."""
    state = refresh(UNSTAMPED_PODS, UNSTAMPED_SELECTOR)
    return stamp_pods(backend, managed, namespace_labels, state.objects.values(), kind=KIND,
                      owner_name=_owner_name, stamp=_stamp)
