"""The job list: the workload list's capabilities (``scheduling.web.tables``) over jobs.

A job's queue, cluster queue, priority and state are those of its current workload (its
newest: a scaled job's latest slice, a pod group's shared one), read by correlated
subqueries on the workload's indexed ``job`` key, so that filters, sorting and group counts
over them stay in the database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import F, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from kueueweb.roles import can_operate_in
from scheduling import services
from scheduling.filters import job_workload_count
from scheduling.models import Job, SavedView, Workload
from scheduling.validation import FieldError
from scheduling.web import tables
from scheduling.web.forms import JobListFilter
from scheduling.web.tables import operator_required
from scheduling.web.workloads import reader_required
from scheduling.workload import actions


def _current(value: Any) -> Subquery:
    return Subquery(
        Workload.objects.filter(job=OuterRef("pk")).order_by("-id").values(value=value)[:1]
    )


def annotated_jobs() -> QuerySet[Job]:
    """Jobs with their current workload's queue, cluster queue, priority and state."""
    return Job.objects.annotate(
        wl_queue=_current(F("queue_name")),
        wl_cluster_queue=_current(
            Coalesce(F("cluster_queue__name"), F("local_queue__cluster_queue__name"))
        ),
        wl_priority=_current(F("priority")),
        wl_phase=_current(F("phase")),
    )


TABLE = tables.Table(
    page=SavedView.Page.JOBS,
    url_name="ui-jobs",
    table_id="job-table",
    noun="jobs",
    columns=(
        tables.Column("name", "Name", lambda r: r["name"], sort="name"),
        tables.Column("namespace", "Namespace", lambda r: r["namespace"], sort="namespace"),
        tables.Column("kind", "Kind", lambda r: r["kind"], sort="kind"),
        tables.Column("queue", "Local queue", lambda r: r["wl_queue"], sort="queue"),
        tables.Column("cluster_queue", "Cluster queue", lambda r: r["wl_cluster_queue"]),
        tables.Column("priority", "Priority", lambda r: r["wl_priority"], sort="priority"),
        tables.Column("state", "State", lambda r: r["wl_phase"], sort="state"),
        tables.Column("workloads", "Workloads", lambda r: r["workload_count"], default=False),
        tables.Column("created", "Created", lambda r: r["created_at"], sort="created"),
        tables.Column("cluster", "Cluster", lambda r: r["cluster_label"]),
    ),
    groupings=(
        tables.Grouping("queue", "Local queue", "wl_queue"),
        tables.Grouping("cluster_queue", "Cluster queue", "wl_cluster_queue"),
        tables.Grouping("namespace", "Namespace", "namespace"),
        tables.Grouping("state", "State", "wl_phase"),
        tables.Grouping("kind", "Kind", "kind"),
        tables.Grouping("cluster", "Cluster", "cluster__name"),
    ),
)

_FIELDS = (
    "id",
    "name",
    "namespace",
    "kind",
    "api_version",
    "created_at",
    "wl_queue",
    "wl_cluster_queue",
    "wl_priority",
    "wl_phase",
)


def load_rows(ids: list[int], state: tables.ViewState) -> list[dict[str, Any]]:
    queryset = annotated_jobs().filter(id__in=ids)
    fields = list(_FIELDS)
    if state.grouping is not None:
        queryset = tables.grouped(queryset, state.grouping)
        fields.append("group_value")
    if "workloads" in state.keys:
        queryset = queryset.annotate(workload_count=job_workload_count())
        fields.append("workload_count")
    found = {row["id"]: row for row in queryset.values(*fields, cluster_label=F("cluster__name"))}
    return [found[pk] for pk in ids if pk in found]


def _filters(request: HttpRequest) -> JobListFilter:
    return JobListFilter(request.GET or None, queryset=annotated_jobs())


def _list_context(request: HttpRequest) -> dict[str, Any]:
    return tables.list_context(request, TABLE, _filters(request), load_rows)


@require_GET
@reader_required
def job_list(request: HttpRequest) -> HttpResponse:
    redirect = tables.canonical_redirect(request)
    if redirect is not None:
        return redirect
    context = tables.page_context(request, TABLE, _filters(request), load_rows, BULK_ACTIONS)
    context["text_filters"] = ("q", "namespace", "kind", "queue", "cluster_queue", "cluster")
    return render(request, "scheduling/job_list.html", context)


@require_GET
@reader_required
def job_list_partial(request: HttpRequest) -> HttpResponse:
    return render(request, "scheduling/_job_table.html", _list_context(request))


@require_GET
@reader_required
def job_export(request: HttpRequest, fmt: str) -> StreamingHttpResponse:
    return tables.export(request, TABLE, _filters(request), load_rows, fmt)


# =========================================================================================
# Bulk actions
# =========================================================================================

BULK_ACTIONS = (
    ("deactivate", "Deactivate its workloads"),
    ("activate", "Activate its workloads"),
    ("delete", "Delete"),
)


def _act(request: HttpRequest, pk: int, action: str) -> Callable[[], str]:
    def act() -> str:
        job = Job.objects.filter(pk=pk).first()
        if job is None:
            raise services.ConflictError("not found: deleted meanwhile")
        if not can_operate_in(request.user, job.namespace):
            raise tables.namespace_refusal(job.namespace)
        if action == "delete":
            services.delete_job(job)
            return "deleted"
        # Every workload of the job the state allows it for; the others say why not.
        changed, refusals = 0, []
        for wl in Workload.objects.filter(job=job).order_by("id"):
            refused = actions.refusal(wl, action)
            if refused is not None:
                refusals.append(FieldError(f"workload {wl.name}", refused.message))
                continue
            services.update_workload(
                wl, {"spec": {"active": action == actions.ACTIVATE}}, user=request.user
            )
            changed += 1
        if not changed:
            raise services.invalid(refusals or [FieldError("workloads", "the job has none")])
        return f"{action}d {changed} workload{'s' if changed != 1 else ''}"

    return act


def _labels(ids: list[int]) -> dict[int, str]:
    return {
        pk: f"{ns}/{name}"
        for pk, ns, name in Job.objects.filter(pk__in=ids).values_list("pk", "namespace", "name")
    }


@require_POST
@operator_required
def job_bulk(request: HttpRequest) -> HttpResponse:
    return tables.bulk(
        request,
        TABLE,
        BULK_ACTIONS,
        _labels,
        lambda pk, action: _act(request, pk, action),
        reverse("ui-jobs"),
    )
