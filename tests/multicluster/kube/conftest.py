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
def make_user_queue_domain(kube_api: Any, kube_cluster: Cluster,
                           make_queue: Callable[..., ClusterQueue]) -> Callable[[str], Cluster]:
    """The Kubernetes cluster's own queues as Kueue's examples expect them: LocalQueue
    ``user-queue`` in the test namespace, a spot flavor with node labels, the CPUs given
    and 10G."""

    def make(cpu: str) -> Cluster:
        cq = make_queue("cq", {"cpu": cpu, "memory": "10G"}, flavor="spot",
                        namespace=kube_api.namespace, cluster=kube_cluster)
        ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
            node_labels={"instance-type": "spot"})
        LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                                  name="user-queue", cluster_queue=cq)
        return kube_cluster

    return make


@pytest.fixture
def user_queue_domain(make_user_queue_domain: Callable[[str], Cluster]) -> Cluster:
    """``user-queue`` with 10 CPUs."""
    return make_user_queue_domain("10")
