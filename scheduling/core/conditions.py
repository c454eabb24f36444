"""Kubernetes-style conditions on JSON status fields (``metav1.Condition``), pure.

``lastTransitionTime`` moves only when the status changes, so a timeline of transitions can
be read from them. The database queries over conditions are in ``scheduling.workload.conditions``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

Condition = dict[str, Any]


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
