"""The gang scheduling metrics of a Kubernetes cluster, from what kueueweb observes there
(kube-scheduler reports no such thing through the API):

- an **attempt** begins when kueueweb creates a job's gang Workload
  (``scheduling.k8s.io/v1alpha1``), and again after each timeout;
- a **success** is the first pass that sees at least the Workload's ``minCount`` pods
  (summed over its pod groups) naming it (``spec.workloadRef``) bound to nodes
  (``spec.nodeName``);
- a **timeout** is an attempt still short of that once the gang scheduling timeout
  (``GANG_SCHEDULING_TIMEOUT_SECONDS``, 5 minutes as kube-scheduler's) has passed since it
  began: kube-scheduler has then sent the pods back to its queue.

The gangs being watched are kept in the cache with the pass's other state (any worker may
run the next pass); a gang whose Workload kueueweb deletes is forgotten.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils.dateparse import parse_datetime

from scheduling.workload import lifecycle

STATE_TIMEOUT_SECONDS = 7 * 24 * 3600


def _key(cluster_id: int) -> str:
    return f"kueueweb:kube:{cluster_id}:gangs"


def _timeout() -> timedelta:
    config: Mapping[str, Any] = settings.KUEUEWEB
    return timedelta(seconds=float(config["GANG_SCHEDULING_TIMEOUT_SECONDS"]))


def _load(cluster_id: int) -> dict[str, dict[str, Any]]:
    state = cache.get(_key(cluster_id))
    return dict(state) if isinstance(state, dict) else {}


def _save(cluster_id: int, state: Mapping[str, Any]) -> None:
    cache.set(_key(cluster_id), dict(state), timeout=STATE_TIMEOUT_SECONDS)


def created(cluster_id: int, namespace: str, name: str, pod_groups: Mapping[str, int], *,
            now: datetime) -> None:
    """kueueweb created the gang Workload ``namespace/name``: its first attempt."""
    state = _load(cluster_id)
    state[f"{namespace}/{name}"] = {"since": now.isoformat(),
                                    "minCount": sum(int(c) for c in pod_groups.values()),
                                    "bound": False}
    _save(cluster_id, state)
    lifecycle.gang_scheduling(cluster_id=cluster_id, attempts=1)


def deleted(cluster_id: int, namespace: str, name: str) -> None:
    state = _load(cluster_id)
    if state.pop(f"{namespace}/{name}", None) is not None:
        _save(cluster_id, state)


def observe(cluster_id: int, pods: Iterable[Mapping[str, Any]], *, now: datetime) -> None:
    """Count the gangs bound and the attempts timed out since the last pass, from the
    observed pods (``manifests.reduce_pod``)."""
    state = _load(cluster_id)
    waiting = {key: gang for key, gang in state.items() if not gang.get("bound")}
    if not waiting:
        return
    scheduled: Counter[str] = Counter(
        f"{pod.get('namespace')}/{pod.get('gang')}" for pod in pods
        if pod.get("gang") and pod.get("node"))
    successes = timeouts = 0
    for key, gang in waiting.items():
        if scheduled[key] >= int(gang.get("minCount") or 1):
            gang["bound"] = True
            successes += 1
            continue
        since = parse_datetime(str(gang.get("since") or "")) or now
        if now - since >= _timeout():
            gang["since"] = now.isoformat()
            timeouts += 1
    if successes or timeouts:
        _save(cluster_id, state)
        lifecycle.gang_scheduling(cluster_id=cluster_id, attempts=timeouts,
                                   successes=successes, timeouts=timeouts)
