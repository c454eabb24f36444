"""The query logic of the workload lists, shared by the REST API and the UI.

``WorkloadFilterSet`` holds what a filter does (the cluster queue a workload holds quota in
or waits for, its state, a text search); the API's ``WorkloadFilter`` and the UI's
``WorkloadListFilter`` subclass it and only name their parameters: Kueue's field names in
the API (``?clusterQueue=``, ``?phase=``), the form's names in the UI (``?cluster_queue=``,
``?state=``).

The filters use indexed columns (cluster, namespace, queue name, phase, the queue foreign
keys). "evicted" (the Evicted condition, in the conditions JSON) reads the partial index
``workload_evicted`` that migration 0011 creates; "inactive" (``spec.active=false``) is rare
and scans. The UI's filters on its computed columns (the reason shown, the position in the
local queue, a job's workload count) are decided in the database too: ``reason_contains``,
``first_in_local_queue``, ``job_workload_count``.
"""

from __future__ import annotations

import operator
from functools import reduce
from typing import Any

import django_filters
from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Window,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce, RowNumber

from scheduling.choices import StopPolicy, WorkloadPhase
from scheduling.models import ClusterQueue, LocalQueue, Workload
from scheduling.queue_order import QUEUE_ORDER_EXPRESSIONS

EVICTED = "evicted"
INACTIVE = "inactive"
STATE_CHOICES = [*WorkloadPhase.choices, (EVICTED, "Evicted"), (INACTIVE, "Inactive")]


def evicted_condition() -> Q:
    """Workloads whose Evicted condition is True (the conditions are a JSON list).

    Each database's predicate repeats the one of its ``workload_evicted`` partial index
    (migration 0011) word for word, or the index is not used."""
    if connection.vendor == "postgresql":
        return Q(conditions__contains=[{"type": "Evicted", "status": "True"}])
    table = Workload._meta.db_table
    # The LIKE on the stored text is a cheap first sieve: json_each then looks only at the
    # few rows that mention an Evicted condition at all.
    sql = (f'"{table}"."conditions" LIKE \'%%"Evicted"%%\' '
           f'AND EXISTS (SELECT 1 FROM json_each("{table}"."conditions") AS c '
           "WHERE json_extract(c.value, '$.type') = 'Evicted' "
           "AND json_extract(c.value, '$.status') = 'True')")
    return Q(RawSQL(sql, (), output_field=BooleanField()))


class _AnyOfArray(Func):
    """``column = ANY(ARRAY(subquery))`` (PostgreSQL): the subquery runs once, before the
    scan, and its ids are matched through the column's index."""

    template = "%(expressions)s)"
    arg_joiner = " = ANY (ARRAY"
    output_field = BooleanField()


def _id_in(column: str, ids: QuerySet[Any, Any]) -> Q:
    if connection.vendor == "postgresql":
        return Q(_AnyOfArray(column, ids))
    return Q(**{f"{column}__in": ids})


def in_cluster_queue(
    queryset: QuerySet[Workload], name: str, *, lookup: str = "exact"
) -> QuerySet[Workload]:
    """Workloads holding quota in cluster queue ``name``, or waiting for it through their
    LocalQueue.

    The queues' ids are found before the workloads are read, so the workloads are filtered
    on their indexed foreign keys: joining both queue tables to every workload row cost a
    scan of the whole table on every page. PostgreSQL does not turn ``IN (subquery)`` under
    an OR into an index lookup, but it does for ``= ANY(ARRAY(subquery))``; SQLite does for
    both. So this stays one query.

    ``lookup`` compares the name otherwise (the UI's list matches ``icontains``)."""
    queues = ClusterQueue.objects.filter(**{f"name__{lookup}": name}).values("id")
    local_queues = LocalQueue.objects.filter(
        **{f"cluster_queue__name__{lookup}": name}).values("id")
    return queryset.filter(
        _id_in("cluster_queue_id", queues)
        | (Q(cluster_queue__isnull=True) & _id_in("local_queue_id", local_queues))
    )


class WorkloadFilterSet(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    """What the workload lists' filters do; subclasses declare the parameters that call
    these methods."""

    class Meta:
        model = Workload
        fields: list[str] = []

    def filter_cluster_queue(
        self, queryset: QuerySet[Workload], name: str, value: str
    ) -> QuerySet[Workload]:
        return in_cluster_queue(queryset, value)

    def filter_state(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        """A phase (Kueue's derived status), or "evicted" or "inactive"."""
        if value == EVICTED:
            return queryset.filter(evicted_condition())
        if value == INACTIVE:
            return queryset.filter(active=False)
        return queryset.filter(phase=value)

    def filter_states(
        self, queryset: QuerySet[Workload], name: str, value: list[str]
    ) -> QuerySet[Workload]:
        """Any of several states (the UI's multi-select): the union of ``filter_state``'s."""
        if not value:
            return queryset
        phases = [v for v in value if v not in (EVICTED, INACTIVE)]
        matches = [Q(phase__in=phases)] if phases else []
        if EVICTED in value:
            matches.append(evicted_condition())
        if INACTIVE in value:
            matches.append(Q(active=False))
        return queryset.filter(reduce(operator.or_, matches))

    def filter_search(
        self, queryset: QuerySet[Workload], name: str, value: str
    ) -> QuerySet[Workload]:
        return queryset.filter(
            Q(name__icontains=value)
            | Q(namespace__icontains=value)
            | Q(queue_name__icontains=value)
            | Q(job__name__icontains=value)
        )


# =========================================================================================
# The workload list's computed columns
# =========================================================================================

# The ASCII whitespace Python's ``str.strip()`` removes (it removes some rarer Unicode
# spaces too, which no condition Kueue writes ends with).
_WHITESPACE = " \t\n\r\x0b\x0c"


class _ConditionTextLike(Func):
    """True when the JSON list ``conditions`` holds a condition ``type``=``status`` whose
    text, ``prefix + reason + middle + message`` stripped of ``strip`` at both ends, matches
    the LIKE pattern in any case: the reason column's text (``pending_reason``), composed
    by the database so that the match is decided without reading the rows."""

    output_field = BooleanField()

    def __init__(
        self, type_: str, status: str, prefix: str, middle: str, strip: str, pattern: str
    ) -> None:
        super().__init__(F("conditions"))
        self.params = [type_, status, prefix, middle, strip, pattern]

    def as_sql(
        self,
        compiler: Any,
        connection: Any,
        function: str | None = None,
        template: str | None = None,
        arg_joiner: str | None = None,
        **extra_context: Any,
    ) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.source_expressions[0])
        if connection.vendor == "postgresql":
            elements, field, trim, like = (
                "jsonb_array_elements({}) AS c(value)",
                "(c.value ->> '{}')",
                "btrim",
                "ILIKE",
            )
        else:
            elements, field, trim, like = (
                "json_each({}) AS c",
                "json_extract(c.value, '$.{}')",
                "trim",
                "LIKE",
            )
        text = (
            f"%s || COALESCE({field.format('reason')}, '') || %s "
            f"|| COALESCE({field.format('message')}, '')"
        )
        sql = (
            f"EXISTS (SELECT 1 FROM {elements.format(column)} "
            f"WHERE {field.format('type')} = %s AND {field.format('status')} = %s "
            f"AND {trim}(CAST({text} AS TEXT), %s) {like} %s ESCAPE '\\')"
        )
        return sql, [*params, *self.params]


def reason_contains(queryset: QuerySet[Workload], text: str) -> QuerySet[Workload]:
    """Workloads whose reason, as the list shows it (``workload_list.pending_reason``),
    contains ``text`` in any case (on SQLite, as its LIKE does, in any ASCII case): an
    evicted workload's Evicted condition, else a pending one's QuotaReserved=False
    condition. The candidates are first narrowed by indexed
    predicates (evicted: the partial index; pending: the phase)."""
    pattern = f"%{connection.ops.prep_for_like_query(text)}%"
    evicted = evicted_condition()
    return queryset.filter(
        (
            evicted
            & Q(_ConditionTextLike("Evicted", "True", "Evicted (", "): ", _WHITESPACE, pattern))
        )
        | (
            Q(phase=WorkloadPhase.PENDING)
            & ~evicted
            & Q(_ConditionTextLike("QuotaReserved", "False", "", ": ", ": ", pattern))
        )
    )


def queued_in_order() -> QuerySet[Any]:
    """The workloads a local queue holds (pending, active, in a running LocalQueue of a
    cluster queue), each annotated with its 1-based position in Kueue's queue order
    (``scheduling.queue_order``) in its local queue (``in_lq``) and in its cluster queue
    (``in_cq``), as the visibility API counts them."""
    order = list(QUEUE_ORDER_EXPRESSIONS)
    return Workload.objects.filter(
        local_queue__cluster_queue__isnull=False,
        local_queue__stop_policy=StopPolicy.NONE,
        phase=WorkloadPhase.PENDING,
        active=True,
    ).annotate(
        in_lq=Window(RowNumber(), partition_by=[F("local_queue_id")], order_by=order),
        in_cq=Window(
            RowNumber(), partition_by=[F("local_queue__cluster_queue_id")], order_by=order
        ),
    )


def first_in_local_queue(queryset: QuerySet[Workload], count: int) -> QuerySet[Workload]:
    """The first ``count`` workloads of each local queue, in queue order: those whose
    position in their local queue is at most ``count``. The numbering covers the whole
    queues (a subquery of ids), before the other filters narrow the rows."""
    return queryset.filter(id__in=queued_in_order().filter(in_lq__lte=count).values("id"))


def job_workload_count() -> Coalesce:
    """A job's number of workloads (a scaled job's slices, a pod group's one), counted by a
    correlated subquery on the workload's indexed ``job`` key: the job list's *workloads*
    column and its filters."""
    return Coalesce(
        Subquery(
            Workload.objects.filter(job=OuterRef("pk"))
            .order_by()
            .values("job")
            .annotate(n=Count("id"))
            .values("n")
        ),
        0,
        output_field=IntegerField(),
    )
