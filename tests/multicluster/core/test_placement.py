"""Gang placement of pods on nodes (kube-scheduler's filters, all-or-nothing)."""

from __future__ import annotations

from multicluster.core import placement as pl


def node(name: str, cpu: int, *, labels: dict[str, str] | None = None,
         taints: tuple[pl.Taint, ...] = (), ready: bool = True, pods: int = 110) -> pl.NodeInfo:
    return pl.NodeInfo(name=name, allocatable={"cpu": cpu * 1000, "pods": pods},
                       labels=labels or {}, taints=taints, ready=ready)


def pods(count: int, cpu: int, **kwargs: object) -> list[pl.PodInfo]:
    return [pl.PodInfo(name=f"p{i}", requests={"cpu": cpu * 1000}, **kwargs)  # type: ignore[arg-type]
            for i in range(count)]


def place(nodes: list[pl.NodeInfo], group: list[pl.PodInfo], min_count: int,
          used: dict[str, dict[str, int]] | None = None) -> pl.Placement:
    return pl.place_group(nodes, group, min_count=min_count,
                          free=pl.free_resources(nodes, used or {}))


def test_gang_binds_when_all_fit() -> None:
    result = place([node("a", 4), node("b", 4)], pods(4, 2), min_count=4)
    assert result.bound
    assert sorted(result.bindings.values()) == ["a", "a", "b", "b"]


def test_gang_on_fragmented_nodes_binds_nothing() -> None:
    # 3 CPUs free on each of two nodes: 6 in total, but 2-CPU pods fit only one per node.
    nodes = [node("a", 4), node("b", 4)]
    used = {"a": {"cpu": 1000}, "b": {"cpu": 1000}}
    result = place(nodes, pods(3, 2), min_count=3, used=used)
    assert not result.bound
    assert result.bindings == {}
    assert result.fitted == 2
    assert result.reasons == {"Insufficient cpu": 2}
    assert result.message(2) == "0/2 nodes are available: 2 Insufficient cpu."


def test_min_count_below_size_binds_the_pods_that_fit() -> None:
    result = place([node("a", 4)], pods(3, 2), min_count=2)
    assert result.bound
    assert len(result.bindings) == 2


def test_fullest_node_first_keeps_whole_nodes_free() -> None:
    nodes = [node("empty", 8), node("busy", 8)]
    result = place(nodes, pods(1, 2), min_count=1, used={"busy": {"cpu": 4000}})
    assert result.bindings == {"p0": "busy"}


def test_node_selector_and_readiness() -> None:
    nodes = [node("spot", 8, labels={"instance-type": "spot"}),
             node("od", 8, labels={"instance-type": "on-demand"}, ready=False),
             node("od2", 8, labels={"instance-type": "on-demand"})]
    result = place(nodes, pods(1, 1, node_selector={"instance-type": "on-demand"}), 1)
    assert result.bindings == {"p0": "od2"}


def test_taints_need_tolerations() -> None:
    gpu = pl.Taint("nvidia.com/gpu", "present", "NoSchedule")
    nodes = [node("gpu", 8, taints=(gpu,))]
    assert not place(nodes, pods(1, 1), 1).bound
    assert place(nodes, pods(1, 1), 1).reasons == {pl.TAINT: 1}
    tolerating = pods(1, 1, tolerations=(pl.Toleration("nvidia.com/gpu", "Exists"),))
    assert place(nodes, tolerating, 1).bound
    soft = [node("soft", 8, taints=(pl.Taint("x", "y", "PreferNoSchedule"),))]
    assert place(soft, pods(1, 1), 1).bound


def test_toleration_matching_rules() -> None:
    taint = pl.Taint("k", "v", "NoExecute")
    assert pl.Toleration("k", "Equal", "v").tolerates(taint)
    assert not pl.Toleration("k", "Equal", "w").tolerates(taint)
    assert not pl.Toleration("k", "Equal", "v", "NoSchedule").tolerates(taint)
    assert pl.Toleration("", "Exists").tolerates(taint)  # empty key + Exists: everything
    assert not pl.Toleration("", "Equal", "v").tolerates(taint)


def test_pod_count_capacity() -> None:
    result = place([node("a", 64, pods=2)], pods(3, 1), min_count=3)
    assert not result.bound
    assert result.reasons == {pl.TOO_MANY_PODS: 1}
