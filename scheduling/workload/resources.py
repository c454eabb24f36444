"""What an admitted workload's pods ask of their nodes (Kueue's ``pkg/workload/resources.go``
adjusts a workload's requests the same way before admission: ``scheduling.cache.snapshots``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling import jobframework
from scheduling.cache import snapshots
from scheduling.jobframework import resources


def admitted_pod_requests(cluster_id: int, namespace: str,
                          pod_set: Mapping[str, Any]) -> dict[str, str]:
    """What one pod of ``pod_set`` asks a node for once Kubernetes' admission has applied
    the cluster's LimitRange defaults and RuntimeClass overhead (its LimitRanger and
    RuntimeClass admission plugins): the simulated cluster places pods by it."""
    objects = snapshots.load_cluster_objects(cluster_id)
    adjusted = resources.adjust_pod_sets([pod_set], overheads=objects.overheads,
                                         summary=objects.summaries.get(namespace, {}))
    return jobframework.pod_set_requests(adjusted[0])
