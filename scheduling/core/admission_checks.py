"""A workload's admission check states (``status.admissionChecks``), pure (Kueue
``pkg/workload/admissionchecks.go`` and ``pkg/workload/evict``).

Which states an eviction resets, when a retried workload may be queued again, and the
pod-set updates of the checks merged into what the admission puts on the pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from scheduling.core.conditions import parse_timestamp

__all__ = [
    "CHECK_STATES",
    "PodSetUpdateConflict",
    "merge_pod_set_updates",
    "reset_on_eviction",
    "retry_time",
    "sync_required",
]

CHECK_STATES = ("Pending", "Ready", "Retry", "Rejected")


def reset_on_eviction(states: Sequence[Mapping[str, Any]], timestamp: str) -> list[dict[str, Any]]:
    """Every check back to Pending, as an eviction leaves them: a Retry counts one more
    retry (``retryCount``), and its ``requeueAfterSeconds`` is kept."""
    reset = []
    for state in states:
        entry = dict(state)
        previous = entry.get("state")
        if previous != "Pending":
            entry = {"name": entry.get("name"), "state": "Pending",
                     "lastTransitionTime": timestamp,
                     "message": f"Reset to Pending after eviction. Previously: {previous}"}
            if state.get("requeueAfterSeconds") is not None:
                entry["requeueAfterSeconds"] = state["requeueAfterSeconds"]
            retries = int(state.get("retryCount") or 0) + (1 if previous == "Retry" else 0)
            if retries:
                entry["retryCount"] = retries
        reset.append(entry)
    return reset


def retry_time(states: Sequence[Mapping[str, Any]]) -> datetime | None:
    """The latest moment a Retry check asks the workload to wait until (its last transition
    plus ``requeueAfterSeconds``), or None."""
    latest: datetime | None = None
    for state in states:
        after = state.get("requeueAfterSeconds")
        since = parse_timestamp(state.get("lastTransitionTime"))
        if state.get("state") != "Retry" or after is None or since is None:
            continue
        moment = since + timedelta(seconds=int(after))
        if latest is None or moment > latest:
            latest = moment
    return latest


def sync_required(states: Sequence[Mapping[str, Any]], required: Sequence[str],
                  timestamp: str) -> list[dict[str, Any]]:
    """The states of the ``required`` checks, sorted by name: the ones held kept as they
    are (with their retry count), the missing ones added as Pending (Kueue's workload
    controller, ``syncAdmissionCheckConditions``)."""
    held = {str(s.get("name")): dict(s) for s in states}
    return [held.get(name) or {"name": name, "state": "Pending",
                               "lastTransitionTime": timestamp, "message": ""}
            for name in sorted(set(required))]


class PodSetUpdateConflict(ValueError):
    """A check's pod-set update sets a key the admission (or another check) set otherwise."""


def _merge_map(into: dict[str, str], update: Mapping[str, Any], field: str, check: str) -> None:
    for key, value in update.items():
        if key in into and into[key] != str(value):
            raise PodSetUpdateConflict(
                f'in admission check "{check}": invalid admission check PodSetUpdate: '
                f'conflict for {field}: conflict for key={key}, value1={into[key]}, '
                f'value2={value}')
        into[key] = str(value)


def merge_pod_set_updates(
    pod_set: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
    states: Sequence[Mapping[str, Any]],
) -> None:
    """The ``podSetUpdates`` the checks give for ``pod_set`` merged, in place, into what
    the admission puts on its pods; a key set to two values raises
    ``PodSetUpdateConflict`` (the job cannot start)."""
    for state in states:
        check = str(state.get("name", ""))
        for update in state.get("podSetUpdates") or ():
            if update.get("name") != pod_set:
                continue
            _merge_map(annotations, update.get("annotations") or {}, "annotations", check)
            _merge_map(labels, update.get("labels") or {}, "labels", check)
            _merge_map(node_selector, update.get("nodeSelector") or {}, "nodeSelector", check)
            for toleration in update.get("tolerations") or ():
                if toleration not in tolerations:
                    tolerations.append(dict(toleration))
