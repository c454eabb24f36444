"""Kubernetes-style conditions on JSON status fields.

Conditions follow ``metav1.Condition``: ``lastTransitionTime`` moves only when the status
changes, so a timeline of transitions can be read from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

Condition = dict[str, Any]


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z, as Kubernetes writes times."""
    return moment.isoformat().replace("+00:00", "Z")


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
