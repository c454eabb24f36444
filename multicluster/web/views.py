"""Cluster pages of the browser UI: the clusters (with the MultiKueue workers and the hub
workloads dispatched to each), and one cluster's nodes, pods, gangs and dispatched workloads.

Node usage is the sum of the requests of the pods bound to each node that have not
finished (Pending or Running), as the simulated scheduler counts it; bound pods are capped
by node capacity, so that scan stays small. Every region that changes is a
``data-live-refresh`` element whose partial URL returns it re-rendered.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from multicluster.choices import ClusterRole, ConnectionType, PodPhase
from multicluster.manifests import cluster_to_resource
from multicluster.models import Cluster, Dispatch, Node, Pod, PodGroup
from scheduling.core.quantities import QuantityError, format_amount, quantity_to_int
from scheduling.metrics.history import base_units
from scheduling.web.objects import object_yaml
from scheduling.web.queues import health, role_required
from scheduling.workload.conditions import find

ACTIVE_PHASES = (PodPhase.PENDING, PodPhase.RUNNING)
PAGE_SIZE = 50
# Hub workloads listed per worker (the newest first); the count says how many in all.
DISPATCHES_PER_WORKER = 100
POD_FILTERS = {
    "active": ACTIVE_PHASES,
    "running": (PodPhase.RUNNING,),
    "pending": (PodPhase.PENDING,),
    "finished": (PodPhase.SUCCEEDED, PodPhase.FAILED),
}


def _pod_counts(cluster_ids: list[int]) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(PodPhase.values, 0))
    for row in (
        Pod.objects.filter(cluster_id__in=cluster_ids).values("cluster_id", "phase")
        .annotate(n=Count("*")).order_by()
    ):
        counts[row["cluster_id"]][row["phase"]] = row["n"]
    return counts


def _clusters_context() -> dict[str, Any]:
    clusters = list(Cluster.objects.annotate(node_count=Count("nodes")))
    counts = _pod_counts([c.pk for c in clusters])
    return {
        "rows": [
            {"cluster": c, "health": health(c), "pods": counts[c.pk],
             "active": find(c.conditions or [], "Active")}
            for c in clusters
        ],
    }


def _node_capacity(cluster_ids: list[int]) -> dict[int, dict[str, str]]:
    """Allocatable resources summed over each cluster's Ready nodes (for a cluster whose
    probe has not reported a capacity: a simulated one)."""
    totals: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for cluster_id, capacity in (Node.objects.filter(cluster_id__in=cluster_ids, ready=True)
                                 .values_list("cluster_id", "capacity")):
        for resource, quantity in (capacity or {}).items():
            totals[cluster_id][resource] += _to_int(resource, quantity)
    return {cid: {r: format_amount(r, v) for r, v in sorted(res.items())}
            for cid, res in totals.items()}


def _dispatch_rows(worker_ids: list[int]) -> dict[int, dict[str, Any]]:
    """The hub workloads with a copy on each worker: at most DISPATCHES_PER_WORKER each."""
    counts = dict(Dispatch.objects.filter(worker_id__in=worker_ids).values("worker_id")
                  .annotate(n=Count("*")).order_by().values_list("worker_id", "n"))
    result: dict[int, dict[str, Any]] = {
        wid: {"total": counts.get(wid, 0), "rows": []} for wid in worker_ids}
    for worker_id in worker_ids:
        if not counts.get(worker_id):
            continue
        for d in (Dispatch.objects.filter(worker_id=worker_id)
                  .select_related("workload__cluster", "remote_workload")
                  .order_by("-nominated_at", "-id")[:DISPATCHES_PER_WORKER]):
            result[worker_id]["rows"].append({
                "workload": d.workload, "hub": d.workload.cluster.name, "state": d.state,
                "round": d.round, "nominated_at": d.nominated_at, "remote": d.remote_workload,
                "remote_phase": d.remote_workload.phase if d.remote_workload else "",
            })
    return result


def _worker_rows(workers: list[Cluster]) -> list[dict[str, Any]]:
    from multicluster.dispatch import is_connected

    ids = [w.pk for w in workers]
    from_nodes = _node_capacity(ids)
    dispatches = _dispatch_rows(ids)
    return [
        {"cluster": w, "active": find(w.conditions or [], "Active"),
         "connected": is_connected(w),
         "capacity": dict(w.capacity) if w.capacity else from_nodes.get(w.pk, {}),
         "capacity_from_nodes": not w.capacity,
         "node_count": getattr(w, "node_count", None), "dispatches": dispatches[w.pk]}
        for w in workers
    ]


def _workers_context() -> dict[str, Any]:
    """The MultiKueue workers: connection, Active condition, capacity, nodes, and the hub
    workloads dispatched to each."""
    workers = list(Cluster.objects.workers().annotate(node_count=Count("nodes")))
    return {"workers": _worker_rows(workers)}


@role_required
def cluster_list(request: HttpRequest) -> HttpResponse:
    context = {**_clusters_context(), **_workers_context()}
    context["live_clusters"] = " ".join(str(row["cluster"].pk) for row in context["rows"])
    return render(request, "multicluster/clusters.html", context)


@role_required
def cluster_workers_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "multicluster/clusters_workers.html", _workers_context())


@role_required
def cluster_list_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "multicluster/clusters_table.html", _clusters_context())


# --- One cluster -----------------------------------------------------------------------------


def _cluster(name: str) -> Cluster:
    return get_object_or_404(Cluster, name=name)


def _simulation(cluster: Cluster) -> dict[str, Any] | None:
    if cluster.connection_type != ConnectionType.SIMULATED:
        return None
    from multicluster.simulated.runner import SimulationSettings

    sim = SimulationSettings.of(cluster)
    return {
        "startDelaySeconds": sim.start_delay_seconds,
        "defaultRunSeconds": sim.default_run_seconds,
        "speed": sim.speed,
        "gangSchedulingTimeoutSeconds": sim.gang_timeout_seconds,
    }


def _summary_context(cluster: Cluster) -> dict[str, Any]:
    return {
        "cluster": cluster,
        "health": health(cluster),
        "active": find(cluster.conditions or [], "Active"),
        "simulation": _simulation(cluster),
        "pods": _pod_counts([cluster.pk])[cluster.pk],
        "node_count": Node.objects.filter(cluster=cluster).count(),
    }


@dataclass
class NodeResource:
    resource: str
    capacity: int
    used: int

    @property
    def pct(self) -> float:
        return round(min(100.0, 100 * self.used / self.capacity), 2) if self.capacity else 0.0

    @property
    def text(self) -> str:
        return f"{format_amount(self.resource, self.used)} / {format_amount(self.resource, self.capacity)}"

    @property
    def used_value(self) -> float | int:
        return base_units(self.resource, self.used)

    @property
    def capacity_value(self) -> float | int:
        return base_units(self.resource, self.capacity)


@dataclass
class NodeRow:
    node: Node
    resources: list[NodeResource] = field(default_factory=list)
    pods: dict[str, int] = field(default_factory=dict)

    @property
    def status(self) -> str:
        if not self.node.ready:
            return "NotReady"
        return "Ready,SchedulingDisabled" if self.node.unschedulable else "Ready"


def _to_int(resource: str, quantity: Any) -> int:
    try:
        return quantity_to_int(resource, quantity)
    except (QuantityError, ValueError, TypeError):
        return 0


def _nodes_context(cluster: Cluster) -> dict[str, Any]:
    """Nodes with capacity and usage (two queries: nodes, bound unfinished pods)."""
    used: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    pods: dict[str, dict[str, int]] = defaultdict(lambda: {"Pending": 0, "Running": 0})
    # Pods with the same requests on a node are grouped in the database: the pods of one job
    # template collapse to one row per node.
    for node_name, phase, requests, n in (
        Pod.objects.filter(cluster=cluster, phase__in=ACTIVE_PHASES).exclude(node_name="")
        .values_list("node_name", "phase", "requests").annotate(n=Count("*")).order_by()
    ):
        for resource, quantity in (requests or {}).items():
            used[node_name][resource] += _to_int(resource, quantity) * n
        used[node_name]["pods"] += n
        pods[node_name][phase] += n
    rows = []
    for node in Node.objects.filter(cluster=cluster).order_by("name"):
        capacity = {r: _to_int(r, q) for r, q in (node.capacity or {}).items()}
        resources = [
            NodeResource(r, capacity.get(r, 0), used[node.name].get(r, 0))
            for r in sorted(set(capacity) | set(used[node.name]))
        ]
        rows.append(NodeRow(node, resources, pods[node.name]))
    return {"cluster": cluster, "nodes": rows}


def _pods_context(request: HttpRequest, cluster: Cluster) -> dict[str, Any]:
    status = request.GET.get("pods", "active")
    if status not in POD_FILTERS:
        status = "active"
    # The page's ids are sorted and cut first, then only its rows are loaded: sorting every
    # pod row whole (with its JSON columns) cost more than the rest of the page.
    ids = (Pod.objects.filter(cluster=cluster, phase__in=POD_FILTERS[status])
           .order_by("-created_at", "namespace", "name").values_list("id", flat=True))
    page = Paginator(ids, PAGE_SIZE).get_page(request.GET.get("pods_page", 1))
    found = Pod.objects.select_related("workload").in_bulk(list(page.object_list))
    page.object_list = cast(Any, [found[pk] for pk in page.object_list if pk in found])
    return {"cluster": cluster, "pods_page": page, "pods_status": status,
            "pod_filters": list(POD_FILTERS)}


def _podgroups_context(cluster: Cluster) -> dict[str, Any]:
    groups = list(
        PodGroup.objects.filter(cluster=cluster, bound_at__isnull=True)
        .select_related("workload").annotate(pod_count=Count("pods")).order_by("created_at", "id")
    )
    return {"cluster": cluster, "podgroups": groups}


def _cluster_dispatches_context(cluster: Cluster) -> dict[str, Any]:
    if cluster.role != ClusterRole.WORKER:
        return {"cluster": cluster, "worker": None}
    cluster.node_count = Node.objects.filter(cluster=cluster).count()  # type: ignore[attr-defined]
    (row,) = _worker_rows([cluster])
    return {"cluster": cluster, "worker": row}


@role_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = _cluster(name)
    live = {cluster.pk}
    if cluster.role == ClusterRole.WORKER:
        # Its dispatched workloads change with the hub's dispatch passes.
        live.update(Cluster.objects.filter(role=ClusterRole.MANAGER).values_list("pk", flat=True))
    context = {
        **_summary_context(cluster),
        **_nodes_context(cluster),
        **_pods_context(request, cluster),
        **_podgroups_context(cluster),
        **_cluster_dispatches_context(cluster),
        "live_clusters": " ".join(str(pk) for pk in sorted(live)),
    }
    return render(request, "multicluster/cluster.html", context)


@role_required
def cluster_summary_partial(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "multicluster/cluster_summary.html", _summary_context(_cluster(name)))


@role_required
def cluster_nodes_partial(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "multicluster/cluster_nodes.html", _nodes_context(_cluster(name)))


@role_required
def cluster_pods_partial(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "multicluster/cluster_pods.html", _pods_context(request, _cluster(name)))


@role_required
def cluster_podgroups_partial(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "multicluster/cluster_podgroups.html",
                  _podgroups_context(_cluster(name)))


@role_required
def cluster_dispatches_partial(request: HttpRequest, name: str) -> HttpResponse:
    return render(request, "multicluster/cluster_dispatches.html",
                  _cluster_dispatches_context(_cluster(name)))


def _cluster_with_nodes(name: str) -> Cluster:
    return get_object_or_404(Cluster.objects.prefetch_related("nodes"), name=name)


# The cluster as the API prints it: never its kubeconfig, only whether it has one.
cluster_yaml = object_yaml(_cluster_with_nodes, cluster_to_resource, "ui-cluster")
