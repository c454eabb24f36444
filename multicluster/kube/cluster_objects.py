"""The cluster's own PriorityClasses, LimitRanges and RuntimeClasses, listed and watched
from its API server and mirrored into the cluster's domain (``scheduling.models``), where
the admission cycle and the job submission read them, as Kueue reads them from its
informers' cache.

Each kind is a ``WatchKind`` of the pass's list + watch (no label selector: they are the
cluster's, not ours); after each refresh the domain's rows of the kind are made equal to
what the watch knows (created, updated, deleted) in one transaction. A changed LimitRange
or RuntimeClass requeues the pending workloads it may concern.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models, transaction

from multicluster.kube.backend import WatchKind, WatchState
from multicluster.kube.errors import KubeApiError
from multicluster.models import Cluster
from scheduling import services
from scheduling.models import LimitRange, PriorityClass, RuntimeClass

logger = logging.getLogger(__name__)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def reduce_priority_class(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {"name": str(_metadata(obj).get("name", "")), "value": int(obj.get("value") or 0),
            "global_default": bool(obj.get("globalDefault", False)),
            "description": str(obj.get("description") or ""),
            "preemption_policy": str(obj.get("preemptionPolicy") or "PreemptLowerPriority")}


def reduce_limit_range(obj: Mapping[str, Any]) -> dict[str, Any]:
    limits = (obj.get("spec") or {}).get("limits") or []
    return {"namespace": str(_metadata(obj).get("namespace", "")),
            "name": str(_metadata(obj).get("name", "")),
            "limits": [dict(item) for item in limits if isinstance(item, Mapping)]}


def reduce_runtime_class(obj: Mapping[str, Any]) -> dict[str, Any]:
    overhead = (obj.get("overhead") or {}).get("podFixed") or {}
    return {"name": str(_metadata(obj).get("name", "")), "handler": str(obj.get("handler", "")),
            "overhead": {str(k): str(v) for k, v in overhead.items()},
            "scheduling": dict(obj.get("scheduling") or {})}


@dataclass(frozen=True)
class MirroredKind:
    """One kind of the cluster mirrored into its domain: its watch, its model and the
    fields the reduced object sets."""

    watch: WatchKind
    model: type[models.Model]
    fields: tuple[str, ...]

    @property
    def namespaced(self) -> bool:
        return "namespace" in self.fields


PRIORITY_CLASSES = MirroredKind(
    WatchKind("priorityclasses.scheduling.k8s.io", reduce_priority_class,
              resource=("scheduling.k8s.io", "v1", "priorityclasses")),
    PriorityClass, ("value", "global_default", "description", "preemption_policy"))
LIMIT_RANGES = MirroredKind(
    WatchKind("limitranges", reduce_limit_range, resource=("", "v1", "limitranges")),
    LimitRange, ("namespace", "limits"))
RUNTIME_CLASSES = MirroredKind(
    WatchKind("runtimeclasses.node.k8s.io", reduce_runtime_class,
              resource=("node.k8s.io", "v1", "runtimeclasses")),
    RuntimeClass, ("handler", "overhead", "scheduling"))
MIRRORED_KINDS = (PRIORITY_CLASSES, LIMIT_RANGES, RUNTIME_CLASSES)


def _key(row: Mapping[str, Any]) -> str:
    namespace = row.get("namespace")
    return f"{namespace}/{row['name']}" if namespace else str(row["name"])


def mirror(cluster: Cluster, kind: MirroredKind, state: WatchState, *,
           now: datetime) -> set[str]:
    """Make the domain's rows of ``kind`` what ``state`` holds, in one transaction; returns
    the keys (``namespace/name`` or ``name``) created, changed or deleted. ``now`` is the
    pass's time, which the requeue of pending workloads is stamped with."""
    manager: Any = kind.model._default_manager
    changed: set[str] = set()
    with transaction.atomic():
        stored = {_key({"namespace": getattr(row, "namespace", None), "name": row.name}): row
                  for row in manager.filter(cluster=cluster)}
        for key, wanted in state.objects.items():
            row = stored.pop(key, None)
            values = {field: wanted[field] for field in kind.fields}
            if row is None:
                manager.create(cluster=cluster, name=wanted["name"], **values)
                changed.add(key)
            elif any(getattr(row, field) != value for field, value in values.items()):
                for field, value in values.items():
                    setattr(row, field, value)
                row.save()
                changed.add(key)
        for key, row in stored.items():
            row.delete()
            changed.add(key)
        if changed and kind is not PRIORITY_CLASSES:
            # What pending workloads ask for may have changed (Kueue's workload controller
            # watches both kinds and re-queues the pending workloads they concern).
            namespaces = ({key.partition("/")[0] for key in changed}
                          if kind is LIMIT_RANGES else None)
            services.requeue_for_cluster_objects(cluster.pk, namespaces, now=now)
    return changed


def sync_cluster_objects(cluster: Cluster, *, serves: Callable[[tuple[str, str, str]], bool],
                         refresh: Callable[[WatchKind], WatchState],
                         now: datetime) -> dict[str, set[str]]:
    """Refresh and mirror every kind the cluster serves; returns what changed by kind."""
    changes: dict[str, set[str]] = {}
    for kind in MIRRORED_KINDS:
        assert kind.watch.resource is not None
        if not serves(kind.watch.resource):
            continue
        try:
            state = refresh(kind.watch)
        except KubeApiError as exc:
            if not exc.forbidden:
                raise
            # The pass still runs the jobs; the domain keeps what it last saw of the kind.
            logger.warning("cluster %s: may not list and watch %s (%s); grant it to let "
                           "admission see them", cluster.name, kind.watch.name, exc.message)
            continue
        changed = mirror(cluster, kind, state, now=now)
        if changed:
            changes[kind.watch.name] = changed
    return changes
