"""What a fresh database holds before anyone touches it: the manager cluster, connected to a
simulated cluster whose nodes come from settings. Used by the data migration and by tests
that flush the database."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def ensure_manager_cluster(cluster_model: Any, node_model: Any) -> Any:
    """The manager cluster, created with its default simulated nodes if missing.

    Takes the model classes so the data migration can pass its historical models.
    """
    existing = cluster_model.objects.filter(role="manager").first()
    if existing is not None:
        return existing
    manager = cluster_model.objects.create(name="manager", role="manager",
                                           connection_type="simulated")
    config: dict[str, Any] = settings.KUEUEWEB
    node_model.objects.bulk_create(
        node_model(
            cluster=manager,
            name=f"node-{index}",
            capacity={
                "cpu": config["DEFAULT_NODE_CPU"],
                "memory": config["DEFAULT_NODE_MEMORY"],
                "pods": "110",
            },
            labels={"kubernetes.io/hostname": f"node-{index}"},
        )
        for index in range(1, int(config["DEFAULT_NODE_COUNT"]) + 1)
    )
    return manager


def ensure_role_groups(group_model: Any) -> None:
    for name in ("viewer", "operator", "admin"):
        group_model.objects.get_or_create(name=name)
