"""A kind's ``status.conditions`` as the rows of a table (``_conditions_table.html``), for
the job page and the job block of the workload page: every kind writes them as
``metav1.Condition`` or as the batch/v1 Job's ``JobCondition`` (with ``lastProbeTime``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scheduling.workload import conditions as cond


def condition_rows(conditions: Iterable[Any] | None) -> list[dict[str, Any]]:
    """One row per condition, as written (the kind's own order), its transition parsed;
    anything that is not a mapping is left out rather than shown as text."""
    rows = []
    for item in conditions or ():
        if not isinstance(item, Mapping):
            continue
        rows.append(
            {
                "type": str(item.get("type", "")),
                "status": str(item.get("status", "")),
                "reason": str(item.get("reason") or ""),
                "message": str(item.get("message") or ""),
                "time": cond.parse_timestamp(item.get("lastTransitionTime")),
            }
        )
    return rows
