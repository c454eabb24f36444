"""Fixtures of the fuzzing tests: two namespaces, one of them granted to the operator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from multicluster.models import Cluster

GRANTED = "team-a"
OTHER = "team-b"

WORLD = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
"""


def job(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"kueue.x-k8s.io/queue-name": "lq-cluster-queue"}},
        "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "30"],
                            "resources": {"requests": {"cpu": "1", "memory": "200Mi"}}}]}}},
    }


# An object of the world: (the API's plural of its kind, its namespace or None, its name).
Target = tuple[str, str | None, str]


@pytest.fixture
def grant_world(manager: Cluster, admin_user: User,
                make_queue: Callable[..., Any]) -> list[Target]:
    """Queues in both namespaces and two jobs in each; every object of the world."""
    from scheduling.manifests import yamlio
    from scheduling.manifests.apply import apply_manifests
    from scheduling.models import ClusterQueue, LocalQueue, Workload
    from scheduling.services import submit_job

    make_queue("cluster-queue", {"cpu": 9, "memory": "36Gi"}, flavor="default-flavor",
               namespace=GRANTED)
    LocalQueue.objects.create(cluster=manager, namespace=OTHER, name="lq-cluster-queue",
                              cluster_queue=ClusterQueue.objects.get(name="cluster-queue"))
    apply_manifests(yamlio.load_yaml_documents(WORLD), cluster=manager)
    targets: list[Target] = [
        ("resourceflavors", None, "default-flavor"), ("clusterqueues", None, "cluster-queue"),
        ("workloadpriorityclasses", None, "high"), ("clusters", None, manager.name),
    ]
    for namespace in (GRANTED, OTHER):
        targets.append(("localqueues", namespace, "lq-cluster-queue"))
        for name in ("sample-job", "other-job"):
            submit_job(job(namespace, name), namespace=namespace, cluster=manager,
                       user=admin_user)
            targets.append(("jobs", namespace, name))
    targets += [("workloads", namespace, name) for namespace, name
                in Workload.objects.values_list("namespace", "name").order_by("namespace", "name")]
    return targets


@pytest.fixture
def application() -> Any:
    """The ASGI application the servers run (HTTP to Django behind the body-size limit)."""
    from kueueweb.asgi import application

    return application
