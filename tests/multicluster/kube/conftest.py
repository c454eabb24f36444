"""Fixtures the Kubernetes backend's tests share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.models import ClusterQueue, LocalQueue, ResourceFlavor


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def user_queue_domain(kube_api: Any, kube_cluster: Cluster,
                      make_queue: Callable[..., ClusterQueue]) -> Cluster:
    """The Kubernetes cluster's own queues as Kueue's examples expect them: LocalQueue
    ``user-queue`` in the test namespace, a spot flavor with node labels, 10 CPUs, 10G."""
    cq = make_queue("cq", {"cpu": "10", "memory": "10G"}, flavor="spot",
                    namespace=kube_api.namespace, cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
        node_labels={"instance-type": "spot"})
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="user-queue", cluster_queue=cq)
    return kube_cluster
