"""Kubernetes-style conditions on JSON status fields.

Conditions follow ``metav1.Condition``: ``lastTransitionTime`` moves only when the status
changes, so a timeline of transitions can be read from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db import connections
from django.db.models import BooleanField, F, Func, Model, Q, QuerySet

Condition = dict[str, Any]
_M = TypeVar("_M", bound=Model)


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, as Kubernetes writes times."""
    return moment.isoformat().replace("+00:00", "Z")


def parse_timestamp(value: Any) -> datetime | None:
    """The inverse of ``timestamp``: an aware datetime, or None when absent or malformed."""
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def transition_time(conditions: Sequence[Condition], type_: str) -> datetime | None:
    """lastTransitionTime of condition ``type_``, if it is set."""
    found = find(conditions, type_)
    return parse_timestamp(found.get("lastTransitionTime")) if found else None


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    for condition in conditions:
        if condition.get("type") == type_:
            return condition
    return None


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    condition = find(conditions, type_)
    return condition is not None and condition.get("status") == "True"


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: datetime,
) -> list[Condition]:
    """A new list with condition ``type_`` set; other conditions are kept as they are."""
    status_text = "True" if status else "False"
    result: list[Condition] = []
    replaced = False
    for condition in conditions:
        if condition.get("type") != type_:
            result.append(condition)
            continue
        replaced = True
        transition = condition.get("lastTransitionTime")
        if condition.get("status") != status_text or not transition:
            transition = timestamp(now)
        result.append({
            "type": type_, "status": status_text, "reason": reason, "message": message,
            "lastTransitionTime": transition,
        })
    if not replaced:
        result.append({
            "type": type_, "status": status_text, "reason": reason, "message": message,
            "lastTransitionTime": timestamp(now),
        })
    return result


def remove(conditions: Sequence[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.get("type") != type_]


def has(conditions: Sequence[Condition], type_: str, status: str) -> bool:
    found = find(conditions, type_)
    return found is not None and found.get("status") == status


class _HasCondition(Func):
    """True when the JSON list ``conditions`` holds an item with this type and status
    (SQLite's JSON1 ``json_each``; PostgreSQL uses containment instead)."""

    output_field = BooleanField()

    def __init__(self, column: str, type_: str, status: str) -> None:
        super().__init__(F(column))
        self.wanted = (type_, status)

    def as_sql(self, compiler: Any, connection: Any, function: str | None = None,
               template: str | None = None, arg_joiner: str | None = None,
               **extra_context: Any) -> tuple[str, list[Any]]:
        column, params = compiler.compile(self.source_expressions[0])
        return (f"EXISTS (SELECT 1 FROM json_each({column}) "
                "WHERE json_extract(value, '$.type') = %s "
                "AND json_extract(value, '$.status') = %s)", [*params, *self.wanted])


def condition_q(queryset: QuerySet[_M], type_: str, status: str) -> tuple[QuerySet[_M], Q]:
    """``queryset`` (with the alias SQLite needs) and a ``Q`` that holds for its rows whose
    ``conditions`` have ``type_``=``status``: for combining with other lookups (``|``, ``~``)."""
    if connections[queryset.db].vendor == "postgresql":
        return queryset, Q(conditions__contains=[{"type": type_, "status": status}])
    alias = f"_has_{type_.lower()}_{status.lower()}"
    return (queryset.alias(**{alias: _HasCondition("conditions", type_, status)}),
            Q(**{alias: True}))


def filter_by_condition(
    queryset: QuerySet[_M], type_: str, status: str, *, present: bool = True
) -> QuerySet[_M]:
    """Rows whose ``conditions`` hold (``present``) or lack a condition ``type_``=``status``,
    decided in the database: JSON containment on PostgreSQL, ``json_each`` on SQLite."""
    flagged, has = condition_q(queryset, type_, status)
    return flagged.filter(has) if present else flagged.exclude(has)
