"""Placing pods on nodes, all-or-nothing per gang: what kube-scheduler does for a pod group
with a gang policy (Kubernetes v1.35 Workload API, ``GangScheduling`` plugin).

A pod fits a node when the node is Ready and schedulable, carries every label of the pod's
node selector, has no NoSchedule/NoExecute taint the pod does not tolerate, and has room
for the pod's requests (and one more pod) next to what is bound there already. A gang
binds only if at least ``min_count`` of its pods fit at once; otherwise none binds.

Pods go to the fullest node that still fits them (kube-scheduler's ``MostAllocated``
scoring, the usual choice for batch clusters), which keeps whole nodes free for large
gangs. Pure: no Django, no clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

PODS = "pods"

# Filter reasons, as kube-scheduler words them in FailedScheduling events.
NOT_READY = "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
TAINT = "node(s) had untolerated taint(s)"
TOO_MANY_PODS = "Too many pods"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # or Exists
    value: str = ""
    effect: str = ""  # empty matches every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return bool(self.key) and self.value == taint.value


@dataclass(frozen=True)
class NodeInfo:
    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False


@dataclass(frozen=True)
class PodInfo:
    name: str
    requests: Mapping[str, int]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


@dataclass
class Placement:
    """Where the pods of one attempt go; ``bound`` is False when the gang did not fit."""

    bindings: dict[str, str]
    bound: bool
    fitted: int
    min_count: int
    reasons: Counter[str]

    def message(self, total_nodes: int) -> str:
        """A FailedScheduling-style summary of why pods did not fit."""
        detail = ", ".join(f"{count} {reason}" for reason, count in sorted(self.reasons.items()))
        text = f"0/{total_nodes} nodes are available"
        return f"{text}: {detail}." if detail else f"{text}."


def untolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> list[Taint]:
    """Taints that keep the pod off the node (PreferNoSchedule never does)."""
    return [
        t for t in taints
        if t.effect in ("NoSchedule", "NoExecute") and not any(x.tolerates(t) for x in tolerations)
    ]


def _filter(pod: PodInfo, node: NodeInfo, free: Mapping[str, int]) -> str | None:
    """None if the pod fits the node now, else the reason it does not."""
    if not node.ready:
        return NOT_READY
    if node.unschedulable:
        return UNSCHEDULABLE
    if any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return SELECTOR
    if untolerated(node.taints, pod.tolerations):
        return TAINT
    if PODS in node.allocatable and free.get(PODS, 0) < 1:
        return TOO_MANY_PODS
    for resource, amount in pod.requests.items():
        if amount > 0 and free.get(resource, 0) < amount:
            return f"Insufficient {resource}"
    return None


def free_resources(
    nodes: Sequence[NodeInfo], used: Mapping[str, Mapping[str, int]]
) -> dict[str, dict[str, int]]:
    """Allocatable minus what bound pods use, per node."""
    return {
        n.name: {r: v - used.get(n.name, {}).get(r, 0) for r, v in n.allocatable.items()}
        for n in nodes
    }


def _score(node: NodeInfo, free: Mapping[str, int]) -> float:
    """Fraction of the node's allocatable already used (higher is fuller)."""
    shares = [1.0 - free.get(r, 0) / total for r, total in node.allocatable.items()
              if total > 0 and r != PODS]
    return sum(shares) / len(shares) if shares else 0.0


def place_group(
    nodes: Sequence[NodeInfo],
    pods: Sequence[PodInfo],
    *,
    min_count: int,
    free: Mapping[str, Mapping[str, int]],
) -> Placement:
    """Try to place ``pods`` together; they bind only if at least ``min_count`` fit.

    ``free`` is the room left on each node (``free_resources``); it is not modified.
    """
    room = {name: dict(values) for name, values in free.items()}
    bindings: dict[str, str] = {}
    reasons: Counter[str] = Counter()
    for pod in pods:
        best: NodeInfo | None = None
        best_score = -1.0
        pod_reasons: Counter[str] = Counter()
        for node in nodes:
            reason = _filter(pod, node, room.get(node.name, {}))
            if reason is not None:
                pod_reasons[reason] += 1
                continue
            score = _score(node, room[node.name])
            if score > best_score:
                best, best_score = node, score
        if best is None:
            reasons = pod_reasons  # the last pod that did not fit explains the wait
            continue
        bindings[pod.name] = best.name
        node_room = room[best.name]
        for resource, amount in pod.requests.items():
            node_room[resource] = node_room.get(resource, 0) - amount
        if PODS in node_room:
            node_room[PODS] -= 1
    bound = len(bindings) >= min_count and bool(bindings)
    return Placement(
        bindings=bindings if bound else {},
        bound=bound,
        fitted=len(bindings),
        min_count=min_count,
        reasons=reasons,
    )
