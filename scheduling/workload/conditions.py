"""Kubernetes-style conditions on JSON status fields.

Conditions follow ``metav1.Condition``: ``lastTransitionTime`` moves only when the status
changes, so a timeline of transitions can be read from them.
"""

from __future__ import annotations

from typing import Any, TypeVar

from django.db import connections
from django.db.models import BooleanField, F, Func, Model, Q, QuerySet

# The pure helpers are the engine's; callers get every condition helper from this module.
from scheduling.core.conditions import (
    Condition,
    find,
    has,
    is_true,
    parse_timestamp,
    remove,
    set_condition,
    timestamp,
    transition_time,
)

__all__ = [
    "Condition",
    "condition_q",
    "filter_by_condition",
    "find",
    "has",
    "is_true",
    "parse_timestamp",
    "remove",
    "set_condition",
    "timestamp",
    "transition_time",
]

_M = TypeVar("_M", bound=Model)


class _HasCondition(Func):
    """True when the JSON list ``conditions`` holds an item with this type and status
    (SQLite's JSON1 ``json_each``; PostgreSQL uses containment instead)."""

    output_field = BooleanField()

    def __init__(self, column: str, type_: str, status: str, reason: str | None = None) -> None:
        super().__init__(F(column))
        self.wanted = (type_, status) if reason is None else (type_, status, reason)

    def as_sql(self, compiler: Any, connection: Any, function: str | None = None,
               template: str | None = None, arg_joiner: str | None = None,
               **extra_context: Any) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.source_expressions[0])
        reason = " AND json_extract(value, '$.reason') = %s" if len(self.wanted) > 2 else ""
        return (f"EXISTS (SELECT 1 FROM json_each({column}) "
                "WHERE json_extract(value, '$.type') = %s "
                f"AND json_extract(value, '$.status') = %s{reason})", [*params, *self.wanted])


def condition_q(queryset: QuerySet[_M], type_: str, status: str,
                reason: str | None = None) -> tuple[QuerySet[_M], Q]:
    """``queryset`` (with the alias SQLite needs) and a ``Q`` that holds for its rows whose
    ``conditions`` have ``type_``=``status`` (with ``reason``, when given): for combining
    with other lookups (``|``, ``~``)."""
    wanted = {"type": type_, "status": status}
    if reason is not None:
        wanted["reason"] = reason
    if connections[queryset.db].vendor == "postgresql":
        return queryset, Q(conditions__contains=[wanted])
    alias = "_has_" + "_".join(value.lower() for value in wanted.values())
    return (queryset.alias(**{alias: _HasCondition("conditions", type_, status, reason)}),
            Q(**{alias: True}))


def filter_by_condition(
    queryset: QuerySet[_M], type_: str, status: str, *, present: bool = True,
    reason: str | None = None,
) -> QuerySet[_M]:
    """Rows whose ``conditions`` hold (``present``) or lack a condition ``type_``=``status``
    (with ``reason``, when given), decided in the database: JSON containment on PostgreSQL,
    ``json_each`` on SQLite."""
    flagged, matches = condition_q(queryset, type_, status, reason)
    return flagged.filter(matches) if present else flagged.exclude(matches)
