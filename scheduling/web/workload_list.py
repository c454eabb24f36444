"""The workload list: a filter on every column, group-by with counts, a column chooser,
saved views, bulk actions and the export of the current view (``scheduling.web.tables``).

The table region is one template include rendered both in the page and by its partial URL
(htmx ``live-refresh``); each row keeps the stable id ``wl-<pk>`` so that a refresh morphs
rows in place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection
from django.db.models import F
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from kueueweb.roles import can_operate_in
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.filters import queued_in_order
from scheduling.models import ClusterQueue, LocalQueue, SavedView, Workload
from scheduling.validation import FieldError
from scheduling.web import tables
from scheduling.web.forms import WorkloadListFilter
from scheduling.web.tables import operator_required
from scheduling.web.workloads import reader_required
from scheduling.workload import actions
from scheduling.workload import conditions as cond

_CLUSTER_QUEUE_NAME = Coalesce(F("cluster_queue__name"), F("local_queue__cluster_queue__name"))


def _position(row: tables.Row) -> str:
    return f"{row['position_lq']} / {row['position_cq']}" if row.get("position_lq") else ""


TABLE = tables.Table(
    page=SavedView.Page.WORKLOADS,
    url_name="ui-workloads",
    table_id="wl-table",
    noun="workloads",
    columns=(
        tables.Column("name", "Name", lambda r: r["name"], sort="name"),
        tables.Column("namespace", "Namespace", lambda r: r["namespace"], sort="namespace"),
        tables.Column("queue", "Local queue", lambda r: r["queue_name"], sort="queue"),
        tables.Column("cluster_queue", "Cluster queue", lambda r: r["cq_name"]),
        tables.Column("priority", "Priority", lambda r: r["priority"], sort="priority"),
        tables.Column("state", "State", lambda r: r["phase"], sort="state"),
        tables.Column("position", "Position (local / cluster queue)", _position, default=False),
        tables.Column("reason", "Reason", lambda r: r.get("reason", ""), default=False),
        tables.Column("created", "Created", lambda r: r["created_at"], sort="created"),
        tables.Column("cluster", "Cluster", lambda r: r["cluster_label"]),
    ),
    groupings=(
        tables.Grouping("queue", "Local queue", "queue_name"),
        tables.Grouping("cluster_queue", "Cluster queue", _CLUSTER_QUEUE_NAME),
        tables.Grouping("namespace", "Namespace", "namespace"),
        tables.Grouping("state", "State", "phase"),
        tables.Grouping("cluster", "Cluster", "cluster__name"),
    ),
)

LIST_FIELDS = (
    "id",
    "name",
    "namespace",
    "queue_name",
    "priority",
    "priority_class_name",
    "phase",
    "active",
    "created_at",
    "cluster_name",
    "local_queue_id",
)


def pending_positions(rows: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """Each pending row's 1-based position in its local queue and in its cluster queue
    (``scheduling.filters.queued_in_order``): one query, numbering the pending workloads of
    the rows' cluster queues with window functions, then keeping the rows asked for."""
    pending = [
        r
        for r in rows
        if r["phase"] == WorkloadPhase.PENDING
        and r["active"]
        and r["local_queue_id"] is not None
        and r["cq_id"] is not None
    ]
    if not pending:
        return {}
    numbered = (
        queued_in_order()
        .filter(local_queue__cluster_queue_id__in={r["cq_id"] for r in pending})
        .values_list("id", "in_lq", "in_cq")
    )
    sql, params = numbered.query.sql_with_params()
    ids = [r["id"] for r in pending]
    marks = ", ".join(["%s"] * len(ids))
    # The numbering must cover the whole queues before the page's rows are picked: a
    # filter on the ids inside the query would number only those.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT numbered.id, numbered.in_lq, numbered.in_cq FROM ({sql}) "
            f"AS numbered WHERE numbered.id IN ({marks})",
            [*params, *ids],
        )
        return {pk: (in_lq, in_cq) for pk, in_lq, in_cq in cursor.fetchall()}


def pending_reason(row: tables.Row) -> str:
    """Why the row waits: its eviction's reason, or while pending the scheduler's
    QuotaReserved=False reason and message."""
    conditions = row.get("conditions") or []
    evicted = cond.find(conditions, "Evicted")
    if evicted is not None and evicted.get("status") == "True":
        return f"Evicted ({evicted.get('reason', '')}): {evicted.get('message', '')}".strip()
    if row["phase"] != WorkloadPhase.PENDING:
        return ""
    reserved = cond.find(conditions, "QuotaReserved")
    if reserved is not None and reserved.get("status") == "False":
        return f"{reserved.get('reason', '')}: {reserved.get('message', '')}".strip(": ")
    return ""


def load_rows(ids: list[int], state: tables.ViewState) -> list[dict[str, Any]]:
    """The rows of ``ids``, in that order, with the columns shown: the cluster queue from
    the admission or, while pending, through the LocalQueue; the conditions only when the
    reason is shown, the positions (one more query) only when they are."""
    fields = [*LIST_FIELDS, *(["conditions"] if "reason" in state.keys else [])]
    queryset = Workload.objects.filter(id__in=ids)
    if state.grouping is not None:
        queryset = tables.grouped(queryset, state.grouping)
        fields.append("group_value")
    found = {
        row["id"]: row
        for row in queryset.values(
            *fields,
            cluster_label=F("cluster__name"),
            job_source=F("job__source"),
            cq_name=_CLUSTER_QUEUE_NAME,
            cq_id=Coalesce(F("cluster_queue_id"), F("local_queue__cluster_queue_id")),
        )
    }
    rows = [found[pk] for pk in ids if pk in found]
    positions = pending_positions(rows) if "position" in state.keys else {}
    for row in rows:
        row["position_lq"], row["position_cq"] = positions.get(row["id"], (None, None))
        if "reason" in state.keys:
            row["reason"] = pending_reason(row)
    return rows


def _filters(request: HttpRequest) -> WorkloadListFilter:
    return WorkloadListFilter(request.GET or None, queryset=Workload.objects.all())


def _list_context(request: HttpRequest) -> dict[str, Any]:
    return tables.list_context(request, TABLE, _filters(request), load_rows)


@require_GET
@reader_required
def workload_list(request: HttpRequest) -> HttpResponse:
    redirect = tables.canonical_redirect(request)
    if redirect is not None:
        return redirect
    context = tables.page_context(request, TABLE, _filters(request), load_rows, BULK_ACTIONS)
    local_queues = sorted(set(LocalQueue.objects.values_list("namespace", "name")))
    context.update(
        namespace_options=sorted({ns for ns, _ in local_queues}),
        queue_options=sorted({name for _, name in local_queues}),
        cluster_queue_options=sorted(set(ClusterQueue.objects.values_list("name", flat=True))),
    )
    return render(request, "scheduling/workload_list.html", context)


@require_GET
@reader_required
def workload_list_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "scheduling/_workload_table.html", _list_context(request))


@require_GET
@reader_required
def workload_export(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    return tables.export(request, TABLE, _filters(request), load_rows, fmt)


# =========================================================================================
# Bulk actions
# =========================================================================================

BULK_ACTIONS = (
    ("deactivate", "Deactivate"),
    ("activate", "Activate"),
    ("evict", "Evict"),
    ("delete", "Delete the job"),
)


def _act(request: HttpRequest, pk: int, action: str) -> Callable[[], str]:
    def act() -> str:
        wl = Workload.objects.select_related("job").filter(pk=pk).first()
        if wl is None:
            raise services.ConflictError("not found: deleted meanwhile")
        if not can_operate_in(request.user, wl.namespace):
            raise tables.namespace_refusal(wl.namespace)
        if action in (actions.DEACTIVATE, actions.ACTIVATE):
            refused = actions.refusal(wl, action)
            if refused is not None:
                raise services.invalid([refused])
            services.update_workload(
                wl, {"spec": {"active": action == actions.ACTIVATE}}, user=request.user
            )
            return f"{action}d"
        if action == actions.EVICT:
            services.evict_workload(wl, user=request.user, now=timezone.now())
            return "evicted"
        job = wl.job
        refused = actions.refusal(wl, actions.DELETE_JOB)
        if refused is not None or job is None:
            raise services.invalid([refused or FieldError("metadata.ownerReferences", "no job")])
        services.delete_job(job)
        return f"deleted with its {job.kind} {job.name}"

    return act


def _labels(ids: list[int]) -> dict[int, str]:
    return {
        pk: f"{ns}/{name}"
        for pk, ns, name in Workload.objects.filter(pk__in=ids).values_list(
            "pk", "namespace", "name"
        )
    }


@require_POST
@operator_required
def workload_bulk(request: HttpRequest) -> HttpResponse:
    return tables.bulk(
        request,
        TABLE,
        BULK_ACTIONS,
        _labels,
        lambda pk, action: _act(request, pk, actions.DELETE_JOB if action == "delete" else action),
        reverse("ui-workloads"),
    )
