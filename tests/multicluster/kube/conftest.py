"""Fixtures the Kubernetes backend's tests share."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from multicluster.kube.backend import KubeBackend, WatchKind, WatchState
from multicluster.kube.client import client_for
from multicluster.models import Cluster
from scheduling.jobframework.managed import ManagedJobs
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


@pytest.fixture
def run_stamp_members(user_queue_domain: Cluster) -> Callable[[Callable[..., list[str]]], list[str]]:
    """Runs a kind's ``stamp_members`` (``statefulset_pods``, ``leaderworkerset_pods``)
    alone, over the cluster's Pods listed afresh, with the default managed-jobs options."""

    def run(stamp_members: Callable[..., list[str]]) -> list[str]:
        backend = KubeBackend(client_for(user_queue_domain))

        def refresh(kind: WatchKind, selector: str) -> WatchState:
            state = WatchState()
            backend.relist(kind, state, label_selector=selector)
            return state

        return stamp_members(backend, ManagedJobs(), {}, refresh=refresh)

    return run
