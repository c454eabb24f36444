"""Cohort and ResourceFlavor pages, and every object's YAML as Kueue (or Kubernetes) prints it.

The cohort page reads the domain's quota tree as the scheduler builds it
(``queues.domain_snapshot``): subtree quota, usage and borrowing are the snapshot's own
numbers, and the fair-sharing shares are ``dominant_resource_share`` of its nodes, so what
the page shows is what the next admission cycle compares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.http import content_disposition_header

from multicluster.models import Cluster, Node
from scheduling.api.workload_serializers import job_to_dict, workload_to_dict
from scheduling.core import snapshot as snap
from scheduling.core.fair_sharing import DRS, dominant_resource_share
from scheduling.manifests.codec import (
    CLUSTER_QUEUE,
    COHORT,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
)
from scheduling.manifests.yamlio import dump_documents
from scheduling.models import Cohort, FlavorQuota, ResourceFlavor
from scheduling.web.job_detail import get_job
from scheduling.web.queues import (
    ResourceUsage,
    View,
    domain_snapshot,
    domain_usage,
    get_cluster_queue,
    get_local_queue,
    role_required,
)
from scheduling.web.workloads import get_workload

# --- YAML ------------------------------------------------------------------------------------


def yaml_view(request: HttpRequest, document: Mapping[str, Any], *, back_url: str) -> HttpResponse:
    """``document`` as YAML: a page with copy and download controls that links back to the
    object's page, or with ``?download=1`` the file itself (``<kind>-[<namespace>-]<name>.yaml``)."""
    metadata = document.get("metadata") or {}
    kind = str(document.get("kind", "object"))
    name = str(metadata.get("name", ""))
    namespace = str(metadata.get("namespace") or "")
    text = dump_documents([document])
    if request.GET.get("download"):
        filename = "-".join(p for p in (kind.lower(), namespace, name) if p) + ".yaml"
        response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
        # Object names are DNS names, so the header always has a filename; the helper
        # still quotes (or encodes) it as RFC 6266 asks.
        response["Content-Disposition"] = content_disposition_header(True, filename) or ""
        return response
    context = {
        "kind": kind,
        "name": f"{namespace}/{name}" if namespace else name,
        "api_version": document.get("apiVersion", ""),
        "yaml": text,
        "back_url": back_url,
    }
    return render(request, "yaml_view.html", context)


def object_yaml(
    lookup: Callable[..., Any], printer: Callable[[Any], Mapping[str, Any]], page: str
) -> View:
    """The YAML view of one kind: ``lookup`` finds the object from the URL's arguments (or
    raises 404), ``printer`` prints it, ``page`` is the URL name of its page, which takes the
    same arguments. Readers only, as the page."""

    @role_required
    def view(request: HttpRequest, **kwargs: str) -> HttpResponse:
        document = printer(lookup(**kwargs))
        return yaml_view(request, document, back_url=reverse(page, kwargs=kwargs))

    return view


def _cohort(cluster: str, name: str) -> Cohort:
    return get_object_or_404(
        Cohort.objects.select_related("cluster", "parent"), cluster__name=cluster, name=name
    )


def _resource_flavor(cluster: str, name: str) -> ResourceFlavor:
    return get_object_or_404(
        ResourceFlavor.objects.select_related("cluster"), cluster__name=cluster, name=name
    )


cluster_queue_yaml = object_yaml(get_cluster_queue, CLUSTER_QUEUE.to_manifest, "ui-clusterqueue")
local_queue_yaml = object_yaml(get_local_queue, LOCAL_QUEUE.to_manifest, "ui-localqueue")
cohort_yaml = object_yaml(_cohort, COHORT.to_manifest, "ui-cohort")
resource_flavor_yaml = object_yaml(
    _resource_flavor, RESOURCE_FLAVOR.to_manifest, "ui-resourceflavor"
)
# A Workload as Kueue's API serves it; a job as submitted, with its status, as Kubernetes does.
workload_yaml = object_yaml(get_workload, workload_to_dict, "ui-workload")
job_yaml = object_yaml(get_job, job_to_dict, "ui-job")


# --- Cohort page -----------------------------------------------------------------------------


@dataclass
class ShareRow:
    """A node of the cohort tree with its fair-sharing weight and dominant resource share."""

    kind: str  # "Cohort" or "ClusterQueue"
    name: str
    url: str
    weight: float
    drs: DRS
    inactive_reason: str | None = None

    @property
    def weight_text(self) -> str:
        return f"{self.weight:g}"

    @property
    def share(self) -> int:
        """What Kueue reports as ``status.fairSharing.weightedShare``."""
        return self.drs.rounded_weighted_share()

    @property
    def share_text(self) -> str:
        if self.drs.zero_weight_borrows():
            return "max (weight 0, borrowing)"
        return str(self.share)


def _share_row(
    kind: str, node: snap.QuotaNode, url: str, inactive_reason: str | None = None
) -> ShareRow:
    return ShareRow(
        kind, node.name, url, node.fair_weight, dominant_resource_share(node), inactive_reason
    )


def _cohort_resources(node: snap.CohortNode) -> list[ResourceUsage]:
    """Per flavor and resource of the subtree: its quota (``subtree_quota``: own quota plus
    what the children lend it), the usage that reaches the cohort, what of it is borrowed from
    outside the subtree, and what the cohort lends its parent."""
    rows = []
    for fr in sorted(set(node.subtree_quota) | set(node.usage)):
        own = node.quotas.get(fr)
        row = ResourceUsage(
            fr.flavor,
            fr.resource,
            node.subtree_quota.get(fr, 0),
            own.borrowing_limit if own else None,
            own.lending_limit if own else None,
        )
        row.used = node.usage.get(fr, 0)
        row.borrowed = snap.borrowed(node, fr)
        rows.append(row)
    return rows


def _cohort_context(cohort: Cohort) -> dict[str, Any]:
    domain = cohort.cluster.name
    specs, snapshot, _ = domain_snapshot(cohort.cluster)
    node = snapshot.cohorts.get(cohort.name)
    context: dict[str, Any] = {
        "cohort": cohort,
        "node": node,
        "fair_sharing": bool(settings.KUEUEWEB["FAIR_SHARING"]),
    }
    if node is None:  # its parent chain loops: out of the tree until that is fixed
        return context
    members = []
    for spec in sorted(specs.cluster_queues, key=lambda s: s.name):
        cq = snapshot.any_cluster_queue(spec.name)
        if spec.cohort == cohort.name and cq is not None:
            members.append(
                _share_row(
                    "ClusterQueue",
                    cq,
                    reverse("ui-clusterqueue", args=(domain, cq.name)),
                    snapshot.inactive.get(cq.name),
                )
            )
    children = [
        _share_row("Cohort", child, reverse("ui-cohort", args=(domain, child.name)))
        for child in sorted(node.child_cohorts, key=lambda c: c.name)
    ]
    share = _share_row("Cohort", node, reverse("ui-cohort", args=(domain, node.name)))
    context.update(
        ancestors=[a.name for a in reversed(list(node.ancestors()))],
        children=children,
        members=members,
        share_rows=[share, *children, *members],
        resources=_cohort_resources(node),
    )
    return context


@role_required
def cohort_page(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    cohort = _cohort(cluster, name)
    context = {**_cohort_context(cohort), "live_clusters": str(cohort.cluster_id)}
    return render(request, "scheduling/cohort.html", context)


@role_required
def cohort_summary_partial(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    return render(
        request, "scheduling/cohort_summary.html", _cohort_context(_cohort(cluster, name))
    )


# --- ResourceFlavor page ---------------------------------------------------------------------


@dataclass
class FlavorUser:
    """A cluster queue with quota in the flavor: its rows of the flavor, with usage."""

    name: str
    url: str
    cohort: str | None
    rows: list[ResourceUsage]


def _matching_nodes(cluster: Cluster, labels: Mapping[str, str]) -> tuple[list[str], int]:
    """The nodes of ``cluster`` carrying every label of ``labels`` (Kueue injects them as a
    node selector), and how many nodes the cluster has."""
    nodes = list(Node.objects.filter(cluster=cluster).values_list("name", "labels"))
    matching = [
        name
        for name, node_labels in nodes
        if all((node_labels or {}).get(k) == v for k, v in labels.items())
    ]
    return matching, len(nodes)


def _flavor_usage_context(flavor: ResourceFlavor) -> dict[str, Any]:
    usage = domain_usage(flavor.cluster)
    domain = flavor.cluster.name
    users = []
    for queue in usage.queues:
        rows = [row for row in queue.rows if row.flavor == flavor.name]
        if rows:
            users.append(
                FlavorUser(
                    queue.name,
                    reverse("ui-clusterqueue", args=(domain, queue.name)),
                    queue.cohort,
                    rows,
                )
            )
    cohort_quotas = (
        FlavorQuota.objects.filter(flavor=flavor, cohort__isnull=False)
        .select_related("cohort")
        .order_by("cohort__name", "position")
    )
    return {"flavor": flavor, "users": users, "cohort_quotas": list(cohort_quotas)}


@role_required
def resource_flavor_page(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    flavor = _resource_flavor(cluster, name)
    matching, total = _matching_nodes(flavor.cluster, flavor.node_labels or {})
    context = {
        **_flavor_usage_context(flavor),
        "matching_nodes": matching,
        "node_total": total,
        "live_clusters": str(flavor.cluster_id),
    }
    return render(request, "scheduling/resourceflavor.html", context)


@role_required
def resource_flavor_usage_partial(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    return render(
        request,
        "scheduling/resourceflavor_usage.html",
        _flavor_usage_context(_resource_flavor(cluster, name)),
    )
