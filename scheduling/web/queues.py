"""Overview, cluster queue and local queue pages of the browser UI.

Usage is computed as the engine computes it: the domain's quota tree
(``snapshots.load_domain_specs``), the workloads holding quota (``snapshots.reserving_rows``)
and ``Snapshot.build``, so a bar shows exactly what the next admission cycle sees. One domain
costs a fixed number of queries whatever the number of queues and workloads: four for the
quota tree, one for the workloads holding quota, one for pending counts and demand, one for
finished counts.

Pending demand is aggregated in the database by grouping pending workloads on (cluster
queue, pod sets): workloads of one job template share their pod sets, so however many pending
workloads there are, they collapse to a handful of groups whose requests are parsed once each. In the worst
case (every workload with different pod sets) this is one values() scan of the pending
pod sets, still a single query.

Every region that changes is a ``data-live-refresh`` element whose partial URL returns the
same element re-rendered from the same template include.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Page, Paginator
from django.db.models import Count, Min, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone

from kueueweb.pagination import page_number
from kueueweb.roles import Role, role_of
from multicluster.models import Cluster
from scheduling.cache import snapshots
from scheduling.choices import StopPolicy, WorkloadPhase
from scheduling.core import snapshot as snap
from scheduling.core import types as core_types
from scheduling.core.quantities import QuantityError, format_amount
from scheduling.core.resources import FlavorResource
from scheduling.core.snapshot import Snapshot
from scheduling.metrics.history import base_units
from scheduling.models import ClusterQueue, LocalQueue, Workload, examples
from scheduling.queue import visibility
from scheduling.workload.conditions import find, timestamp

RESERVING = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)
PAGE_SIZE = 50
DEFAULT_HISTORY_HOURS = 6
MAX_HISTORY_HOURS = 24

View = Callable[..., HttpResponse]


def role_required(view: View) -> View:
    """Signed in (else the login page) and holding a role (else 403); viewers read all."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if role_of(request.user) == Role.NONE:
            raise PermissionDenied("No kueueweb role: ask an administrator for one.")
        return view(request, *args, **kwargs)

    return login_required(wrapped)


# --- Usage of one domain -------------------------------------------------------------------


@dataclass
class ResourceUsage:
    """One (flavor, resource) of a cluster queue: quota and what is held of it."""

    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    used: int = 0
    borrowed: int = 0

    @property
    def within(self) -> int:
        return self.used - self.borrowed

    @property
    def lendable(self) -> int:
        """What the queue lends its cohort: lendingLimit, or all of its nominal quota."""
        return self.nominal if self.lending_limit is None else min(self.lending_limit, self.nominal)

    @property
    def scale(self) -> int:
        return max(self.nominal, self.used, 1)

    def pct(self, amount: int) -> float:
        return round(100 * max(amount, 0) / self.scale, 2)

    @property
    def within_pct(self) -> float:
        return self.pct(self.within)

    @property
    def borrowed_pct(self) -> float:
        return self.pct(self.borrowed)

    @property
    def nominal_pct(self) -> float:
        return self.pct(self.nominal)

    @property
    def lendable_start_pct(self) -> float:
        return self.pct(self.nominal - self.lendable)

    @property
    def lendable_pct(self) -> float:
        return self.pct(self.lendable)

    def _fmt(self, amount: int | None) -> str:
        return "—" if amount is None else format_amount(self.resource, amount)

    @property
    def label(self) -> str:
        text = f"{self._fmt(self.used)} of {self._fmt(self.nominal)} used"
        if self.borrowed:
            text += f", {self._fmt(self.borrowed)} borrowed"
        return text

    def display(self) -> dict[str, str]:
        return {
            "used": self._fmt(self.used), "borrowed": self._fmt(self.borrowed),
            "within": self._fmt(self.within), "nominal": self._fmt(self.nominal),
            "borrowing_limit": self._fmt(self.borrowing_limit),
            "lending_limit": self._fmt(self.lending_limit), "lendable": self._fmt(self.lendable),
        }

    def data(self) -> dict[str, float | int | str]:
        """Numbers in base units (CPU cores, bytes) for data-* attributes."""
        return {
            "used": base_units(self.resource, self.used),
            "borrowed": base_units(self.resource, self.borrowed),
            "nominal": base_units(self.resource, self.nominal),
            "lendable": base_units(self.resource, self.lendable),
            "borrowing_limit": (
                "" if self.borrowing_limit is None
                else base_units(self.resource, self.borrowing_limit)
            ),
        }


@dataclass
class Demand:
    resource: str
    amount: int
    nominal: int

    @property
    def value(self) -> float | int:
        return base_units(self.resource, self.amount)

    @property
    def text(self) -> str:
        return format_amount(self.resource, self.amount)

    @property
    def pct(self) -> float:
        return round(min(100.0, 100 * self.amount / max(self.nominal, 1)), 2)


@dataclass
class QueueSummary:
    name: str
    cohort: str | None
    inactive_reason: str | None
    resource_groups: list[list[ResourceUsage]]
    pending: int = 0
    admitted: int = 0
    finished: int = 0
    demand: list[Demand] = field(default_factory=list)

    @property
    def rows(self) -> list[ResourceUsage]:
        return [row for group in self.resource_groups for row in group]


@dataclass
class CohortTreeNode:
    name: str
    queues: list[str]
    children: list[CohortTreeNode]


@dataclass
class DomainUsage:
    cluster: Cluster
    queues: list[QueueSummary]
    cohort_roots: list[CohortTreeNode]
    lone_queues: list[str]

    @property
    def pending(self) -> int:
        return sum(q.pending for q in self.queues)

    @property
    def admitted(self) -> int:
        return sum(q.admitted for q in self.queues)

    @property
    def finished(self) -> int:
        return sum(q.finished for q in self.queues)

    def queue(self, name: str) -> QueueSummary | None:
        return next((q for q in self.queues if q.name == name), None)


def _pending_demand(
    cluster_id: int, cluster_queue_id: int | None = None,
) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """Pending workloads per cluster queue name (of one queue if ``cluster_queue_id``), and
    the sum of their requests per resource (engine units), in two queries.

    The workloads are counted per queue and pod-sets hash from the ``workload_pending``
    index alone; then the pod sets of one workload per hash are read (a job template's
    workloads share them, so a backlog of thousands reads a handful of rows).
    """
    counts: dict[str, int] = defaultdict(int)
    demand: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    rows = Workload.objects.filter(local_queue__cluster_id=cluster_id,
                                   phase=WorkloadPhase.PENDING, active=True)
    if cluster_queue_id is not None:
        rows = rows.filter(local_queue__cluster_queue_id=cluster_queue_id)
    groups = list(
        rows.values("local_queue__cluster_queue__name", "pod_sets_hash")
        .annotate(n=Count("*"), example=Min("id"))
        .order_by()
    )
    requests = {key: _requests(row["pod_sets"]) for key, row in examples(
        "pod_sets_hash", (group["example"] for group in groups), "pod_sets").items()}
    for group in groups:
        name = group["local_queue__cluster_queue__name"]
        counts[name] += group["n"]
        for resource, amount in requests.get(group["pod_sets_hash"], {}).items():
            demand[name][resource] += amount * group["n"]
    return counts, demand


def _requests(pod_sets: Any) -> dict[str, int]:
    """What one workload with ``pod_sets`` requests in all, per resource (engine units);
    a pod set whose requests cannot be read counts for nothing."""
    total: dict[str, int] = defaultdict(int)
    for pod_set in pod_sets or ():
        try:
            per_pod = snapshots.per_pod_requests(pod_set)
            pods = int(pod_set.get("count", 1))
        except (QuantityError, ValueError, TypeError, AttributeError):
            continue
        for resource, amount in per_pod.items():
            total[resource] += amount * pods
    return total


def _finished_counts(cluster_id: int, queue_ids: Mapping[str, int],
                     cluster_queue_id: int | None = None) -> dict[str, int]:
    """Finished workloads per cluster queue (or of one): the queue that admitted them, else
    their local queue's."""
    # Grouped on the foreign keys (an index-only scan of ``workload_domain_phase_queues``,
    # finished workloads being most of a long-lived table), then named from the small tables.
    # COUNT(*), as every count here: COUNT(id) makes PostgreSQL read the rows (the id is
    # not in the index), every finished workload's, so the count would grow with the history.
    counts: dict[str, int] = defaultdict(int)
    rows = Workload.objects.filter(cluster_id=cluster_id, phase=WorkloadPhase.FINISHED)
    if cluster_queue_id is not None:
        rows = rows.filter(Q(cluster_queue_id=cluster_queue_id) | Q(
            cluster_queue__isnull=True, local_queue__cluster_queue_id=cluster_queue_id))
    groups = list(
        rows.values_list("cluster_queue_id", "local_queue_id")
        .annotate(n=Count("*")).order_by()
    )
    queue_names = {pk: name for name, pk in queue_ids.items()}
    local_owner = dict(LocalQueue.objects.filter(cluster_id=cluster_id)
                       .values_list("id", "cluster_queue_id"))
    for cq_id, lq_id, n in groups:
        owner_id = cq_id if cq_id is not None else local_owner.get(lq_id)
        owner = queue_names.get(owner_id) if owner_id is not None else None
        if owner:
            counts[owner] += n
    return counts


def _cohort_tree(snapshot: Snapshot, queues: Iterable[QueueSummary]) -> tuple[
    list[CohortTreeNode], list[str]
]:
    members: dict[str, list[str]] = defaultdict(list)
    lone = []
    for queue in queues:
        if queue.cohort and queue.cohort in snapshot.cohorts:
            members[queue.cohort].append(queue.name)
        else:
            lone.append(queue.name)

    def node(cohort: snap.CohortNode) -> CohortTreeNode:
        children = sorted(cohort.child_cohorts, key=lambda c: c.name)
        return CohortTreeNode(cohort.name, sorted(members[cohort.name]),
                              [node(child) for child in children])

    roots = [node(c) for name, c in sorted(snapshot.cohorts.items()) if c.parent is None]
    return roots, sorted(lone)


def _held_usage(cluster_id: int, cluster_queue_id: int | None = None,
                ) -> tuple[list[core_types.Workload], dict[str, int]]:
    """What the workloads holding quota use, per cluster queue (or in one), as one synthetic
    workload per queue (its usage is the sum of theirs), and how many hold quota in each.

    The rows are counted in the database per queue and usage hash (what usage depends on:
    admission, reclaimable pods, pod sets), from the ``workload_holding`` index: the
    workloads of one job template collapse to one group, so thousands of admitted workloads
    cost a handful of rows, and one row per hash is read. Usage per group is computed
    exactly as the snapshot computes it (``snapshots.held_usage``) and multiplied by the
    group's size.
    """
    rows = Workload.objects.filter(cluster_queue__cluster_id=cluster_id, phase__in=RESERVING,
                                   active=True)
    if cluster_queue_id is not None:
        rows = rows.filter(cluster_queue_id=cluster_queue_id)
    groups = list(
        rows.values("cluster_queue__name", "usage_hash")
        .annotate(n=Count("*"), example=Min("id")).order_by()
    )
    held_by = examples("usage_hash", (group["example"] for group in groups),
                       "admission", "reclaimable_pods", "pod_sets")
    admitted: dict[str, int] = defaultdict(int)
    usage: dict[str, dict[FlavorResource, int]] = defaultdict(lambda: defaultdict(int))
    for group in groups:
        admitted[group["cluster_queue__name"] or ""] += group["n"]
        example = held_by.get(group["usage_hash"])
        if not example or not example["admission"]:
            continue
        held = usage[example["admission"]["clusterQueue"]]
        for fr, value in snapshots.held_usage(example).items():
            held[fr] += value * group["n"]
    return [_usage_workload(queue, totals) for queue, totals in sorted(usage.items())], admitted


def _usage_workload(queue: str, totals: Mapping[FlavorResource, int]) -> core_types.Workload:
    """One workload holding ``totals`` in ``queue``: a pod set per flavor."""
    by_flavor: dict[str, dict[str, int]] = defaultdict(dict)
    for fr, value in totals.items():
        by_flavor[fr.flavor][fr.resource] = value
    assignments = tuple(
        core_types.PodSetAssignment(name=flavor, flavors=dict.fromkeys(amounts, flavor),
                                    count=1, resource_usage=amounts)
        for flavor, amounts in sorted(by_flavor.items())
    )
    return core_types.Workload(
        namespace="", name=queue,
        pod_sets=tuple(core_types.PodSet(a.name, 1, a.resource_usage) for a in assignments),
        admission=core_types.Admission(queue, assignments),
    )


def domain_snapshot(cluster: Cluster, cluster_queue_id: int | None = None) -> tuple[
    snapshots.DomainSpecs, Snapshot, dict[str, int]
]:
    """The domain's quota tree with the usage of the workloads holding quota (of every queue,
    or only of one), as the next admission cycle builds it, and how many hold quota per queue.
    """
    specs = snapshots.load_domain_specs(cluster.pk)
    held, admitted = _held_usage(cluster.pk, cluster_queue_id)
    snapshot = Snapshot.build(
        flavors=specs.flavors, cohorts=specs.cohorts, cluster_queues=specs.cluster_queues,
        admitted=held, inactive=specs.inactive,
    )
    return specs, snapshot, admitted


def domain_usage(cluster: Cluster, *, only: ClusterQueue | None = None) -> DomainUsage:
    """Quota, usage, borrowing, counts and pending demand of every cluster queue of a domain
    (seven queries), or only of the queue ``only``: what a queue shows (its usage and
    borrowing) does not depend on the others' rows, so a queue's page reads only its own."""
    only_id = only.pk if only is not None else None
    specs, snapshot, admitted = domain_snapshot(cluster, only_id)
    pending, demand = _pending_demand(cluster.pk, only_id)
    finished = _finished_counts(cluster.pk, specs.cluster_queue_ids, only_id)
    queues = []
    for spec in sorted(specs.cluster_queues, key=lambda s: s.name):
        if only is not None and spec.name != only.name:
            continue
        node = snapshot.any_cluster_queue(spec.name)
        groups: list[list[ResourceUsage]] = []
        nominal_by_resource: dict[str, int] = defaultdict(int)
        for rg in spec.resource_groups:
            usages: list[ResourceUsage] = []
            for flavor in rg.flavors:
                for resource, quota in flavor.resources.items():
                    fr = FlavorResource(flavor.name, resource)
                    usage = ResourceUsage(flavor.name, resource, quota.nominal,
                                        quota.borrowing_limit, quota.lending_limit)
                    if node is not None:
                        usage.used = node.usage.get(fr, 0)
                        usage.borrowed = snap.borrowed(node, fr)
                    nominal_by_resource[resource] += quota.nominal
                    usages.append(usage)
            groups.append(usages)
        wanted = demand.get(spec.name, {})
        queues.append(QueueSummary(
            name=spec.name,
            cohort=spec.cohort,
            inactive_reason=snapshot.inactive.get(spec.name),
            resource_groups=groups,
            pending=pending.get(spec.name, 0),
            admitted=admitted.get(spec.name, 0),
            finished=finished.get(spec.name, 0),
            demand=[Demand(r, wanted[r], nominal_by_resource.get(r, 0)) for r in sorted(wanted)],
        ))
    roots, lone = _cohort_tree(snapshot, queues)
    return DomainUsage(cluster, queues, roots, lone)


# --- History ---------------------------------------------------------------------------------


def history_hours(request: HttpRequest) -> int:
    try:
        hours = int(request.GET.get("hours", DEFAULT_HISTORY_HOURS))
    except ValueError:
        hours = DEFAULT_HISTORY_HOURS
    return min(max(hours, 1), MAX_HISTORY_HOURS)


# --- Overview ----------------------------------------------------------------------------------


def _clusters() -> list[Cluster]:
    return list(Cluster.objects.annotate(node_count=Count("nodes", distinct=True)))


def _live(clusters: Iterable[Cluster]) -> str:
    return " ".join(str(c.pk) for c in clusters)


def health(cluster: Cluster) -> dict[str, Any]:
    """A cluster's connection health for display: "simulated", or its Active condition."""
    condition = find(cluster.conditions or [], "Active")
    if cluster.connection_type == "simulated":
        return {"state": "simulated", "text": "simulated", "condition": condition}
    if condition is None:
        return {"state": "unknown", "text": "Unknown", "condition": None}
    active = condition.get("status") == "True"
    return {
        "state": "active" if active else "inactive",
        "text": "Active" if active else f"Inactive: {condition.get('reason', '')}",
        "condition": condition,
    }


def _workers_context() -> dict[str, Any]:
    workers = list(
        Cluster.objects.workers().annotate(node_count=Count("nodes", distinct=True))
    )
    return {"workers": [(c, health(c)) for c in workers]}


@role_required
def overview(request: HttpRequest) -> HttpResponse:
    clusters = _clusters()
    hours = history_hours(request)
    context = {
        "domains": [domain_usage(c) for c in clusters],
        "history_hours": hours,
        "history_choices": (1, 3, 6, 12, 24),
        "live_clusters": _live(clusters),
        "sample_interval": settings.USAGE_SAMPLE_INTERVAL_SECONDS,
        **_workers_context(),
    }
    return render(request, "scheduling/overview.html", context)


@role_required
def overview_domain_partial(request: HttpRequest, cluster: str) -> HttpResponse:
    domain = get_object_or_404(Cluster, name=cluster)
    return render(request, "scheduling/overview_domain.html", {"domain": domain_usage(domain)})


@role_required
def overview_workers_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "scheduling/overview_workers.html", _workers_context())


# --- Cluster queue and local queue pages ----------------------------------------------------


def _page_number(request: HttpRequest, key: str = "page") -> int:
    return page_number(request.GET.get(key, 1), PAGE_SIZE)


@dataclass
class PendingPage:
    """One page of a queue's pending workloads in queue order (visibility items)."""

    items: list[dict[str, Any]]
    number: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // PAGE_SIZE))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def previous(self) -> int:
        return self.number - 1

    @property
    def next(self) -> int:
        return self.number + 1


def _pending_cq_page(cq: ClusterQueue, number: int) -> PendingPage:
    total = Workload.objects.filter(
        local_queue__cluster_queue=cq, local_queue__stop_policy=StopPolicy.NONE,
        phase=WorkloadPhase.PENDING, active=True,
    ).count()
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(number, pages)
    items = visibility.pending_in_cluster_queue(
        cq, offset=(number - 1) * PAGE_SIZE, limit=PAGE_SIZE)
    return PendingPage(items, number, total)


def _pending_lq_page(lq: LocalQueue, number: int) -> PendingPage:
    total = 0
    if lq.stop_policy == StopPolicy.NONE:
        total = Workload.objects.filter(local_queue=lq, phase=WorkloadPhase.PENDING,
                                        active=True).count()
    pages = max(1, -(-total // PAGE_SIZE))
    number = min(number, pages)
    items = visibility.pending_in_local_queue(
        lq, offset=(number - 1) * PAGE_SIZE, limit=PAGE_SIZE) if total else []
    return PendingPage(items, number, total)


# What a row of the admitted table shows (``_admitted_queue_table.html``).
_ADMITTED_FIELDS = ("name", "namespace", "phase", "active", "priority", "admission",
                    "reclaimable_pods", "pod_sets", "quota_reserved_at", "queue_name",
                    "local_queue__name")


def _admitted_page(workloads: Any, number: int) -> Page[Workload]:
    query = (workloads.filter(phase__in=RESERVING).select_related("local_queue")
             .only(*_ADMITTED_FIELDS).order_by("quota_reserved_at", "id"))
    return Paginator(query, PAGE_SIZE).get_page(number)


# The rows of the two queue tables are prepared here, strings ready, rather than in the
# templates: a page shows 100 of them, and each template lookup, filter or {% url %} costs
# more than the same work in Python (the tables were a quarter of a queue page's time).


def _workload_link(domain: str, namespace: str, name: str) -> dict[str, str]:
    return {"label": f"{namespace}/{name}",
            "url": reverse("ui-workload", kwargs={"cluster": domain, "namespace": namespace,
                                                  "name": name})}


def _pending_rows(domain: str, page: PendingPage) -> list[dict[str, Any]]:
    # The table shows positions 1-based, for people; its data attributes keep the API's
    # 0-based ones.
    return [{**item, **_workload_link(domain, item["metadata"]["namespace"],
                                      item["metadata"]["name"]),
             "shown_position": item["positionInClusterQueue"] + 1,
             "shown_position_lq": item["positionInLocalQueue"] + 1} for item in page.items]


def _admitted_rows(domain: str, page: Page[Workload]) -> list[dict[str, Any]]:
    rows = []
    for wl in page:
        flavors: dict[str, str] = {}
        for assignment in (wl.admission or {}).get("podSetAssignments") or ():
            flavors.update(assignment.get("flavors") or {})
        reserved = wl.quota_reserved_at
        rows.append({
            **_workload_link(domain, wl.namespace, wl.name),
            "local_queue": wl.local_queue.name if wl.local_queue else wl.queue_name,
            "status": wl.phase if wl.active else f"{wl.phase} (deactivated)",
            "phase": wl.phase,
            "priority": wl.priority,
            "flavors": ", ".join(f"{r}: {f}" for r, f in sorted(flavors.items())),
            "usage": _held_text(wl),
            "reserved_at": timestamp(reserved) if reserved else "",
            "reserved_text": (timezone.localtime(reserved).strftime("%Y-%m-%d %H:%M:%S")
                              if reserved else ""),
        })
    return rows


def _held_text(wl: Workload) -> str:
    """The quota the workload holds per resource (``snapshots.held_usage``: less its
    reclaimable pods and the pods a scale-down removed), summed over flavors."""
    if not wl.admission:
        return ""
    totals: dict[str, int] = defaultdict(int)
    for fr, value in snapshots.held_usage({"admission": wl.admission, "pod_sets": wl.pod_sets,
                                           "reclaimable_pods": wl.reclaimable_pods}).items():
        totals[fr.resource] += value
    return ", ".join(f"{r}: {format_amount(r, v)}" for r, v in sorted(totals.items()))


def get_cluster_queue(cluster: str, name: str) -> ClusterQueue:
    return get_object_or_404(
        ClusterQueue.objects.select_related("cluster", "cohort"), cluster__name=cluster, name=name)


def _cq_summary_context(cq: ClusterQueue) -> dict[str, Any]:
    usage = domain_usage(cq.cluster, only=cq)
    local_queues = list(cq.local_queues.order_by("namespace", "name"))
    return {"cq": cq, "summary": usage.queue(cq.name), "local_queues": local_queues}


def _cq_pending_context(request: HttpRequest, cq: ClusterQueue) -> dict[str, Any]:
    page = _pending_cq_page(cq, _page_number(request, "pending_page"))
    return {"cq": cq, "pending": page, "pending_rows": _pending_rows(cq.cluster.name, page)}


def _cq_admitted_context(request: HttpRequest, cq: ClusterQueue) -> dict[str, Any]:
    page = _admitted_page(Workload.objects.filter(cluster_queue=cq),
                          _page_number(request, "admitted_page"))
    return {"cq": cq, "admitted_page": page,
            "admitted": _admitted_rows(cq.cluster.name, page)}


@role_required
def cluster_queue_page(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    cq = get_cluster_queue(cluster, name)
    context = {
        **_cq_summary_context(cq),
        **_cq_pending_context(request, cq),
        **_cq_admitted_context(request, cq),
        "live_clusters": str(cq.cluster_id),
    }
    return render(request, "scheduling/clusterqueue.html", context)


@role_required
def cluster_queue_summary_partial(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    cq = get_cluster_queue(cluster, name)
    return render(request, "scheduling/clusterqueue_summary.html", _cq_summary_context(cq))


@role_required
def cluster_queue_pending_partial(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    cq = get_cluster_queue(cluster, name)
    return render(request, "scheduling/clusterqueue_pending.html", _cq_pending_context(request, cq))


@role_required
def cluster_queue_admitted_partial(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    cq = get_cluster_queue(cluster, name)
    return render(request, "scheduling/clusterqueue_admitted.html",
                  _cq_admitted_context(request, cq))


def get_local_queue(cluster: str, namespace: str, name: str) -> LocalQueue:
    return get_object_or_404(
        LocalQueue.objects.select_related("cluster", "cluster_queue"),
        cluster__name=cluster, namespace=namespace, name=name)


def _lq_summary_context(lq: LocalQueue) -> dict[str, Any]:
    # Three counts, each answered from an index alone (workload_pending, workload_holding,
    # workload_domain_phase_queues); one aggregate over the queue's rows would read all of
    # them, finished ones included, for ``active``, and grow with the queue's history.
    rows = Workload.objects.filter(local_queue=lq)
    counts = {
        "pending": rows.filter(phase=WorkloadPhase.PENDING, active=True).count(),
        "admitted": rows.filter(phase__in=RESERVING, active=True).count(),
        "finished": rows.filter(cluster=lq.cluster, phase=WorkloadPhase.FINISHED).count(),
    }
    return {"lq": lq, "counts": counts}


def _lq_pending_context(request: HttpRequest, lq: LocalQueue) -> dict[str, Any]:
    page = _pending_lq_page(lq, _page_number(request, "pending_page"))
    return {"lq": lq, "pending": page, "pending_rows": _pending_rows(lq.cluster.name, page)}


def _lq_admitted_context(request: HttpRequest, lq: LocalQueue) -> dict[str, Any]:
    page = _admitted_page(Workload.objects.filter(local_queue=lq),
                          _page_number(request, "admitted_page"))
    return {"lq": lq, "admitted_page": page,
            "admitted": _admitted_rows(lq.cluster.name, page)}


@role_required
def local_queue_page(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    lq = get_local_queue(cluster, namespace, name)
    context = {
        **_lq_summary_context(lq),
        **_lq_pending_context(request, lq),
        **_lq_admitted_context(request, lq),
        "live_clusters": str(lq.cluster_id),
    }
    return render(request, "scheduling/localqueue.html", context)


@role_required
def local_queue_summary_partial(
    request: HttpRequest, cluster: str, namespace: str, name: str
) -> HttpResponse:
    lq = get_local_queue(cluster, namespace, name)
    return render(request, "scheduling/localqueue_summary.html", _lq_summary_context(lq))


@role_required
def local_queue_pending_partial(
    request: HttpRequest, cluster: str, namespace: str, name: str
) -> HttpResponse:
    lq = get_local_queue(cluster, namespace, name)
    return render(request, "scheduling/localqueue_pending.html", _lq_pending_context(request, lq))


@role_required
def local_queue_admitted_partial(
    request: HttpRequest, cluster: str, namespace: str, name: str
) -> HttpResponse:
    lq = get_local_queue(cluster, namespace, name)
    return render(request, "scheduling/localqueue_admitted.html",
                  _lq_admitted_context(request, lq))
