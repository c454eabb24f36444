"""What the workload list and the job list share: their columns (which are shown, in the URL
as ``cols=name,namespace``), grouping (``group=namespace``, with each group's count from the
database over the whole filtered set), the export of the current view (CSV or JSON, streamed
and bounded), the bulk actions' per-row results, and the URL of the view itself.

A list declares a ``Table``: its columns, its groupings, and how a row is read. Every piece of
the view's state is a GET parameter, so a view is its URL: shareable, saved (``SavedView``),
and the browser's back button walks through it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import wraps
from typing import Any, cast

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Count, Expression, F, Q, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    QueryDict,
    StreamingHttpResponse,
)
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from kueueweb.pagination import page_number as pager_page_number
from kueueweb.roles import Role, role_of
from multicluster.models import Cluster
from scheduling import services
from scheduling.models import SavedView
from scheduling.validation import FieldError

# The most rows an export writes; past it the export says it was cut.
EXPORT_LIMIT = 10_000
# The most rows one bulk request acts on.
BULK_LIMIT = 500
EXPORT_FORMATS = ("csv", "json")
# The most saved views a user keeps of one page.
MAX_SAVED_VIEWS = 100
_EXPORT_CHUNK = 500
_SESSION_RESULTS = "bulk_results"

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Column:
    """A column: ``key`` as the URL names it, how its plain value (exports) is read from a
    row, the sort key of its header (if it sorts) and whether it shows by default."""

    key: str
    label: str
    value: Callable[[Row], Any]
    sort: str = ""
    default: bool = True


@dataclass(frozen=True)
class Grouping:
    """A group-by: the expression the rows are grouped by, as the database computes it."""

    key: str
    label: str
    expression: Expression | str


@dataclass(frozen=True)
class Table:
    page: str
    noun: str
    # The list's URL name; its partial, export and bulk URLs add ``-partial``, ``-export``
    # and ``-bulk``.
    url_name: str
    # The id of the live table region (``wl-table``).
    table_id: str
    columns: tuple[Column, ...]
    groupings: tuple[Grouping, ...]
    # Columns that are always shown (the row's link).
    fixed: tuple[str, ...] = ("name",)
    by_key: dict[str, Column] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_key", {c.key: c for c in self.columns})

    def grouping(self, key: str) -> Grouping | None:
        return next((g for g in self.groupings if g.key == key), None)


@dataclass
class ViewState:
    """The columns, the grouping and the errors in the view's own parameters (``cols``,
    ``group``), which the filter form does not know."""

    columns: list[Column]
    grouping: Grouping | None
    errors: list[tuple[str, str]]

    @property
    def keys(self) -> set[str]:
        return {c.key for c in self.columns}


def view_state(table: Table, params: QueryDict) -> ViewState:
    errors: list[tuple[str, str]] = []
    asked = [
        key.strip() for value in params.getlist("cols") for key in value.split(",") if key.strip()
    ]
    unknown = [key for key in asked if key not in table.by_key]
    if unknown:
        errors.append(
            ("cols", f"no such column: {', '.join(unknown)} (columns: {', '.join(table.by_key)})")
        )
    known = {key for key in asked if key in table.by_key} | set(table.fixed)
    if not asked or known == set(table.fixed):
        known |= {c.key for c in table.columns if c.default}
    columns = [c for c in table.columns if c.key in known]
    group_key = params.get("group", "")
    grouping = table.grouping(group_key) if group_key else None
    if group_key and grouping is None:
        errors.append(
            (
                "group",
                f"cannot group by {group_key!r} (by: {', '.join(g.key for g in table.groupings)})",
            )
        )
    return ViewState(columns, grouping, errors)


def canonical_redirect(request: HttpRequest) -> HttpResponseRedirect | None:
    """The view's URL as it is shared: the filter form sends every field, most of them
    empty, and the column chooser's checkboxes send ``cols`` once per column; the URL keeps
    only the fields given and names the columns once, comma-separated
    (``?state=Pending&cols=name,namespace``)."""
    columns = request.GET.getlist("cols")
    empty = any(not value for _, values in request.GET.lists() for value in values)
    if len(columns) < 2 and not empty:
        return None
    params = QueryDict(mutable=True)
    for key, values in request.GET.lists():
        kept = [value for value in values if value]
        if key == "cols" and kept:
            kept = [",".join(kept)]
        if kept:
            params.setlist(key, kept)
    query = params.urlencode(safe=",")
    return HttpResponseRedirect(f"{request.path}?{query}" if query else request.path)


def grouped(queryset: QuerySet[Any], grouping: Grouping) -> QuerySet[Any]:
    """The queryset with the group's value annotated as ``group_value``."""
    expression = (
        F(grouping.expression) if isinstance(grouping.expression, str) else grouping.expression
    )
    annotated: QuerySet[Any] = queryset.annotate(group_value=expression)
    return annotated


def group_counts(
    queryset: QuerySet[Any], grouping: Grouping, values: Iterable[Any]
) -> dict[Any, int]:
    """The count of each group of ``values`` (the groups on the page) over the whole
    filtered set, counted by the database in one query."""
    wanted = set(values)
    present = Q(group_value__in=[v for v in wanted if v is not None])
    if None in wanted:
        present |= Q(group_value__isnull=True)
    counts = (
        grouped(queryset, grouping)
        .filter(present)
        .order_by()
        .values("group_value")
        .annotate(count=Count("id"))
    )
    return {row["group_value"]: row["count"] for row in counts}


def mark_groups(rows: list[dict[str, Any]], counts: Mapping[Any, int]) -> None:
    """Rows arrive ordered by group; the first of each group on the page heads it."""
    previous: object = object()
    for row in rows:
        value = row.get("group_value")
        row["group_first"] = value != previous
        row["group_count"] = counts.get(value)
        row["group_label"] = "—" if value in (None, "") else str(value)
        previous = value


def sort_headers(
    table: Table, columns: Sequence[Column], sort: str, params: QueryDict
) -> list[dict[str, str]]:
    """The visible columns' headers; a sortable one links to its order (reversed when it is
    the current one) and states its ``aria-sort``."""
    base = params.copy()
    for key in ("page", "sort"):
        base.pop(key, None)
    headers = []
    for column in columns:
        header = {"key": column.key, "label": column.label, "href": "", "aria_sort": "none"}
        if column.sort:
            current = sort.lstrip("-") == column.sort
            descending = sort.startswith("-")
            next_sort = (
                (column.sort if descending else f"-{column.sort}") if current else column.sort
            )
            query = base.copy()
            query["sort"] = next_sort
            header["href"] = f"?{query.urlencode(safe=',')}"
            if current:
                header["aria_sort"] = "descending" if descending else "ascending"
        headers.append(header)
    return headers


# =========================================================================================
# Export
# =========================================================================================


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def export_response(
    table: Table,
    columns: Sequence[Column],
    fmt: str,
    chunks: Iterable[list[dict[str, Any]]],
    *,
    filename: str,
) -> StreamingHttpResponse:
    """The rows, chunk by chunk as they are read, in ``fmt``; the chunks hold at most
    ``EXPORT_LIMIT + 1`` rows, and a last one past the limit is not written but said."""

    def records() -> Iterator[tuple[list[Any] | None, bool]]:
        written = 0
        for chunk in chunks:
            for row in chunk:
                if written >= EXPORT_LIMIT:
                    yield None, True
                    return
                written += 1
                yield [_plain(c.value(row)) for c in columns], False

    cut_note = f"cut at {EXPORT_LIMIT} rows: narrow the filters to export the rest"

    def as_csv() -> Iterator[str]:
        line = _Line()
        writer = csv.writer(line)
        writer.writerow([c.key for c in columns])
        yield line.take()
        for values, cut in records():
            if cut:
                yield f"# {cut_note}\r\n"
                return
            writer.writerow(["" if v is None else v for v in values or ()])
            yield line.take()

    def as_json() -> Iterator[str]:
        yield '{"columns": ' + json.dumps([c.key for c in columns]) + ', "items": ['
        first = True
        truncated = False
        for values, cut in records():
            if cut:
                truncated = True
                break
            item = dict(zip((c.key for c in columns), values or (), strict=True))
            yield ("" if first else ", ") + json.dumps(item)
            first = False
        yield '], "truncated": ' + json.dumps(truncated)
        yield (', "note": ' + json.dumps(cut_note) if truncated else "") + "}\n"

    content_type = "text/csv; charset=utf-8" if fmt == "csv" else "application/json"
    response = StreamingHttpResponse(
        as_csv() if fmt == "csv" else as_json(), content_type=content_type
    )
    response["Content-Disposition"] = f'attachment; filename="{filename}.{fmt}"'
    response["X-Export-Limit"] = str(EXPORT_LIMIT)
    return response


class _Line:
    """A file for ``csv.writer`` that hands back each line written."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, value: str) -> int:
        self.text += value
        return len(value)

    def take(self) -> str:
        text, self.text = self.text, ""
        return text


def chunked_ids(queryset: QuerySet[Any], order_by: Sequence[Any]) -> Iterator[list[int]]:
    """The ids of the filtered set in the view's order, one more than the export writes
    (which tells it was cut), chunk by chunk: each chunk's rows are then read whole, one
    query per chunk, not per row."""
    ids = list(queryset.order_by(*order_by).values_list("id", flat=True)[: EXPORT_LIMIT + 1])
    for start in range(0, len(ids), _EXPORT_CHUNK):
        yield ids[start : start + _EXPORT_CHUNK]


# =========================================================================================
# Bulk actions
# =========================================================================================


def is_operator(user: AbstractBaseUser | AnonymousUser) -> bool:
    """Operators and admins see the bulk controls; each row is checked again against the
    user's namespaces when acted on."""
    return role_of(user) >= Role.OPERATOR


def operator_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Signed in as an operator or an admin; 403 for readers."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_operator(request.user):
            raise PermissionDenied("Bulk actions need the operator role.")
        return view(request, *args, **kwargs)

    return wrapped


@dataclass(frozen=True)
class BulkResult:
    label: str
    ok: bool
    text: str


def selected_ids(request: HttpRequest) -> tuple[list[int], str]:
    """The selected rows' ids from the POST, or the error that refuses the request."""
    raw = [v for value in request.POST.getlist("ids") for v in value.split(",") if v.strip()]
    if not raw:
        return [], "ids: select at least one row"
    if len(raw) > BULK_LIMIT:
        return [], (
            f"ids: {len(raw)} rows selected; one request acts on at most {BULK_LIMIT}; "
            "narrow the selection"
        )
    try:
        ids = list(dict.fromkeys(int(v) for v in raw))
    except ValueError:
        return [], "ids: every selected row must be a row id (an integer)"
    return ids, ""


def refusal_text(exc: Exception) -> str:
    if isinstance(exc, (ValidationError, services.ConflictError)):
        return services.refusal_text(exc)
    return str(exc) or exc.__class__.__name__


def namespace_refusal(namespace: str) -> ValidationError:
    """A row in a namespace the operator is not granted: refused like the service would."""
    return services.invalid(
        [FieldError("metadata.namespace", f"you may not act in namespace {namespace!r}")]
    )


def run_each(items: Iterable[tuple[str, Callable[[], str]]]) -> list[BulkResult]:
    """Each row's action in its own transaction: one row refused or failing leaves the
    others done and says why."""
    results = []
    for label, act in items:
        try:
            with transaction.atomic():
                text = act()
        except (ValidationError, services.ConflictError, PermissionDenied) as exc:
            results.append(BulkResult(label, False, f"refused: {refusal_text(exc)}"))
        else:
            results.append(BulkResult(label, True, text))
    return results


def keep_results(
    request: HttpRequest, table: Table, action: str, results: Sequence[BulkResult]
) -> None:
    """The results, for the list page the POST redirects to (shown once)."""
    request.session[f"{_SESSION_RESULTS}:{table.page}"] = {
        "action": action,
        "rows": [{"label": r.label, "ok": r.ok, "text": r.text} for r in results],
    }


def pop_results(request: HttpRequest, table: Table) -> dict[str, Any] | None:
    found: dict[str, Any] | None = request.session.pop(f"{_SESSION_RESULTS}:{table.page}", None)
    return found


def back_to(request: HttpRequest, fallback: str) -> str:
    """The list URL the form came from (``next``), when it is one of ours."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


# =========================================================================================
# The page of a list
# =========================================================================================

PAGE_SIZE = 50
# The list shows an exact total up to this many matches, then "more than …": an exact
# COUNT over tens of thousands of rows on every refresh is the slowest part of the page.
COUNT_LIMIT = 10_000

RowLoader = Callable[[list[int], ViewState], list[dict[str, Any]]]


def ordered(filters: Any, state: ViewState) -> tuple[str, QuerySet[Any], list[Any]]:
    """(the sort key, the filtered queryset, its ORDER BY): grouped views order by the
    group first, so that each group's rows are together."""
    sort, order_by = filters.ordering()
    queryset: QuerySet[Any] = filters.qs
    if state.grouping is not None:
        queryset = grouped(queryset, state.grouping)
        order_by = [F("group_value").asc(nulls_first=True), *order_by]
    return sort, queryset, order_by


def list_context(
    request: HttpRequest, table: Table, filters: Any, load_rows: RowLoader
) -> dict[str, Any]:
    """The context of a list's table region: one page of rows, read by id first (one more
    than a page tells whether a next page exists: walking to a late page then reads an
    index, not every skipped row with its joins), the bounded total, the group counts."""
    state = view_state(table, request.GET)
    sort, queryset, order_by = ordered(filters, state)
    page_number = pager_page_number(request.GET.get("page", "1"), PAGE_SIZE)
    start = (page_number - 1) * PAGE_SIZE
    ids = list(
        queryset.order_by(*order_by).values_list("id", flat=True)[start : start + PAGE_SIZE + 1]
    )
    rows = load_rows(ids[:PAGE_SIZE], state)
    if state.grouping is not None:
        values = [row["group_value"] for row in rows]
        mark_groups(rows, group_counts(filters.qs, state.grouping, values))
    total = filters.qs.order_by()[: COUNT_LIMIT + 1].count()
    params = request.GET.copy()
    params.pop("page", None)
    form_errors = (
        [(name, str(e)) for name, errs in filters.form.errors.items() for e in errs]
        if filters.is_bound
        else []
    )
    may_act = is_operator(request.user)
    return {
        "table": table,
        "table_id": table.table_id,
        "urls": {
            "list": reverse(table.url_name),
            "partial": reverse(f"{table.url_name}-partial"),
            "bulk": reverse(f"{table.url_name}-bulk"),
            **{fmt: reverse(f"{table.url_name}-export", args=[fmt]) for fmt in EXPORT_FORMATS},
        },
        "may_act": may_act,
        "colspan": len(state.columns) + (1 if may_act else 0),
        "filters": filters,
        "view": state,
        "view_errors": form_errors + state.errors,
        "rows": rows,
        "page": page_number,
        "has_next": len(ids) > PAGE_SIZE,
        "has_previous": page_number > 1,
        "first_index": start + 1 if rows else 0,
        "last_index": start + len(rows),
        "total": min(total, COUNT_LIMIT),
        "total_capped": total > COUNT_LIMIT,
        "export_capped": total > EXPORT_LIMIT,
        "export_limit": EXPORT_LIMIT,
        "sort": sort,
        "query": params.urlencode(safe=","),
        "full_query": request.GET.urlencode(safe=","),
        "columns": sort_headers(table, state.columns, sort, request.GET),
        "visible": state.keys,
        "group_options": table.groupings,
        "column_options": table.columns,
    }


def page_context(
    request: HttpRequest,
    table: Table,
    filters: Any,
    load_rows: RowLoader,
    bulk_actions: Sequence[tuple[str, str]],
) -> dict[str, Any]:
    """The whole page's context: the table region's, the domains it follows live, the last
    bulk request's results, the user's saved views of the page."""
    context = list_context(request, table, filters, load_rows)
    views = SavedView.objects.filter(user=cast(User, request.user), page=table.page)
    context.update(
        live_clusters=" ".join(str(pk) for pk in Cluster.objects.values_list("pk", flat=True)),
        bulk_results=pop_results(request, table),
        bulk_actions=bulk_actions,
        saved_views=[
            {"pk": v.pk, "name": v.name, "url": f"{context['urls']['list']}?{v.query}"}
            for v in views.order_by("name")[:MAX_SAVED_VIEWS]
        ],
        saved_view_page=table.page,
    )
    return context


def export(
    request: HttpRequest, table: Table, filters: Any, load_rows: RowLoader, fmt: str
) -> StreamingHttpResponse:
    if fmt not in EXPORT_FORMATS:
        raise Http404("Export as csv or json.")
    state = view_state(table, request.GET)
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    rows = export_rows(filters, state, load_rows)
    return export_response(table, state.columns, fmt, rows, filename=f"{table.noun}-{stamp}")


def export_rows(
    filters: Any, state: ViewState, load_rows: RowLoader
) -> Iterator[list[dict[str, Any]]]:
    """The export's rows, in the view's order, a chunk per query."""
    _, queryset, order_by = ordered(filters, state)
    for ids in chunked_ids(queryset, order_by):
        yield load_rows(ids, state)


def bulk(
    request: HttpRequest,
    table: Table,
    allowed: Sequence[tuple[str, str]],
    labels: Callable[[list[int]], dict[int, str]],
    act: Callable[[int, str], Callable[[], str]],
    fallback: str,
) -> HttpResponse:
    """A bulk POST: the action and the selected ids checked whole first (nothing is done
    when either is wrong), then each row through ``act`` in its own transaction; the
    per-row results are shown once by the list the request came from."""
    back = back_to(request, fallback)
    action = request.POST.get("action", "")
    if action not in dict(allowed):
        keep_results(
            request,
            table,
            action,
            [
                BulkResult(
                    "action",
                    False,
                    f"refused: no such action {action!r} (actions: {', '.join(dict(allowed))})",
                )
            ],
        )
        return HttpResponseRedirect(back)
    ids, error = selected_ids(request)
    if error:
        keep_results(request, table, action, [BulkResult("ids", False, f"refused: {error}")])
        return HttpResponseRedirect(back)
    names = labels(ids)
    keep_results(
        request, table, action, run_each((names.get(pk, f"#{pk}"), act(pk, action)) for pk in ids)
    )
    return HttpResponseRedirect(back)
