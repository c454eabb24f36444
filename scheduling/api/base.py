"""Shared pieces of the API's Kubernetes-shaped objects: ``metadata`` and conditions."""

from __future__ import annotations

from typing import Any

from django.db import models


def object_metadata(obj: models.Model, *, namespaced: bool = False) -> dict[str, Any]:
    """Kubernetes ObjectMeta for one of our objects (read side)."""
    metadata: dict[str, Any] = {"name": obj.name}  # type: ignore[attr-defined]
    if namespaced:
        metadata["namespace"] = obj.namespace  # type: ignore[attr-defined]
    uid = getattr(obj, "uid", None)
    if uid is not None:
        metadata["uid"] = str(uid)
    metadata["resourceVersion"] = str(getattr(obj, "resource_version", 1))
    created = getattr(obj, "created_at", None)
    if created is not None:
        metadata["creationTimestamp"] = created.isoformat().replace("+00:00", "Z")
    for field in ("labels", "annotations"):
        value = getattr(obj, field, None)
        if value:
            metadata[field] = value
    cluster = getattr(obj, "cluster", None)
    if cluster is not None and hasattr(cluster, "name"):
        # Not a Kubernetes field: which scheduling domain (cluster) the object lives in.
        metadata["cluster"] = cluster.name
    return metadata
