"""The simulated cluster's ProvisioningRequests and the cluster autoscaler that answers them.

``SimulatedRequests`` holds a simulated cluster's requests as rows (``ProvisioningRequest``,
the object's ``spec`` and ``status`` and the pod templates it names) for the admission check
controller (``multicluster.provisioning``). ``provision`` plays cluster-autoscaler's part,
after the configured delay (``KUEUEWEB_SIMULATION_PROVISIONING_DELAY_SECONDS``), by class:

- ``check-capacity.autoscaling.x-k8s.io``: Provisioned when every pod of the request fits on
  the nodes as they are now; otherwise ``Provisioned=False`` (CapacityIsNotFound) and it
  looks again at the next pass;
- ``best-effort-atomic-scale-up.autoscaling.x-k8s.io``: the pods that do not fit get a new
  node each, sized to the pod and labelled with its node selector, all at once; more than
  ``KUEUEWEB_SIMULATION_PROVISIONING_MAX_NODES`` nodes fails the request;
- any other class fails the request at once: the simulated autoscaler does not know it.

A request once Provisioned or Failed stays so; the nodes it added stay in the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from multicluster.core import placement
from multicluster.core import provisioning as core
from multicluster.models import Cluster, Node, ProvisioningRequest
from scheduling import jobframework
from scheduling.core.quantities import quantity_to_int
from scheduling.models import Workload
from scheduling.workload import conditions as cond

CHECK_CAPACITY = "check-capacity.autoscaling.x-k8s.io"
ATOMIC_SCALE_UP = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
KNOWN_CLASSES = (CHECK_CAPACITY, ATOMIC_SCALE_UP)
# Room for pods on a node the autoscaler adds (the kubelet's default maxPods).
NODE_MAX_PODS = "110"


class SimulatedRequests:
    """A simulated cluster's requests, for ``multicluster.provisioning.sync_provisioning``."""

    unserved: str | None = None

    def __init__(self, cluster: Cluster, *, now: datetime) -> None:
        self.cluster, self.now = cluster, now

    def owned(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for row in (ProvisioningRequest.objects.filter(cluster=self.cluster)
                    .select_related("workload").order_by("namespace", "name")):
            found.setdefault((row.namespace, row.workload.name), []).append(as_object(row))
        return found

    def create(self, wl: Workload, request: Mapping[str, Any],
               templates: Mapping[str, Mapping[str, Any]]) -> None:
        metadata = request["metadata"]
        ProvisioningRequest.objects.create(
            cluster=self.cluster, namespace=metadata["namespace"], name=metadata["name"],
            workload=wl, labels=dict(metadata.get("labels") or {}), spec=dict(request["spec"]),
            pod_templates={name: dict(t) for name, t in templates.items()},
            created_at=self.now)

    def delete(self, namespace: str, name: str) -> None:
        ProvisioningRequest.objects.filter(cluster=self.cluster, namespace=namespace,
                                           name=name).delete()


def as_object(row: ProvisioningRequest) -> dict[str, Any]:
    """A row as the ``autoscaling.x-k8s.io/v1`` object."""
    return {
        "apiVersion": core.API_VERSION, "kind": "ProvisioningRequest",
        "metadata": {"name": row.name, "namespace": row.namespace, "labels": row.labels,
                     "creationTimestamp": cond.timestamp(row.created_at),
                     "ownerReferences": [{
                         "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                         "name": row.workload.name, "uid": str(row.workload.uid),
                         "controller": True, "blockOwnerDeletion": True}]},
        "spec": row.spec,
        "status": row.status or {},
    }


def _set(status: dict[str, Any], type_: str, value: bool, reason: str, message: str, *,
         now: datetime) -> dict[str, Any]:
    return {**status, "conditions": cond.set_condition(status.get("conditions") or [], type_,
                                                       value, reason, message, now=now)}


def _pods(row: ProvisioningRequest) -> list[tuple[placement.PodInfo, dict[str, str]]]:
    """The request's pods, as the scheduler sees them, with their requests as text."""
    pods = []
    for index, entry in enumerate(row.spec.get("podSets") or ()):
        template = (row.pod_templates or {}).get(
            str((entry.get("podTemplateRef") or {}).get("name", ""))) or {}
        spec = template.get("spec") or {}
        requests = jobframework.pod_set_requests({"template": template})
        tolerations = tuple(
            placement.Toleration(key=str(t.get("key", "")), operator=str(t.get("operator", "Equal")),
                                 value=str(t.get("value", "")), effect=str(t.get("effect", "")))
            for t in spec.get("tolerations") or () if isinstance(t, Mapping))
        for i in range(int(entry.get("count", 0))):
            pods.append((placement.PodInfo(
                name=f"{index}-{i}", requests={r: quantity_to_int(r, q) for r, q in requests.items()},
                node_selector=dict(spec.get("nodeSelector") or {}), tolerations=tolerations),
                requests))
    return pods


def provision(cluster: Cluster, *, now: datetime, scale: float = 1.0) -> datetime | None:
    """Answer the cluster's open requests (see the module's docstring); the next moment a
    request is due, if any. ``scale`` divides the delay (the cluster's simulation speed)."""
    config: dict[str, Any] = settings.KUEUEWEB
    delay = timedelta(seconds=float(config["SIMULATION_PROVISIONING_DELAY_SECONDS"]) / scale)
    max_nodes = int(config["SIMULATION_PROVISIONING_MAX_NODES"])
    due: datetime | None = None
    for row in ProvisioningRequest.objects.filter(cluster=cluster).order_by("created_at", "id"):
        obj = {"status": row.status or {}}
        if core.condition(obj, core.PROVISIONED) or core.condition(obj, core.FAILED):
            continue
        status = dict(row.status or {})
        klass = str(row.spec.get("provisioningClassName", ""))
        if klass not in KNOWN_CLASSES:
            status = _set(status, core.FAILED, True, "UnknownProvisioningClass",
                          f'the simulated cluster autoscaler does not provision class "{klass}"',
                          now=now)
        else:
            if not core.condition(obj, core.ACCEPTED):
                status = _set(status, core.ACCEPTED, True, "Accepted",
                              "ProvisioningRequest is accepted", now=now)
            ready_at = row.created_at + delay
            if now < ready_at:
                due = ready_at if due is None or ready_at < due else due
            else:
                status = _answer(row, klass, status, max_nodes, now=now)
        if status != row.status:
            row.status = status
            row.save(update_fields=["status"])
    return due


def _answer(row: ProvisioningRequest, klass: str, status: dict[str, Any], max_nodes: int, *,
            now: datetime) -> dict[str, Any]:
    # The runner's view of the nodes and what bound pods use (read when needed: a request
    # answered before may have added nodes).
    from multicluster.simulated import runner

    nodes = runner.node_infos(row.cluster)
    free = placement.free_resources(nodes, runner.used_resources(row.cluster))
    pods = _pods(row)
    fit = placement.place_group(nodes, [p for p, _ in pods], min_count=1, free=free)
    missing = [(pod, requests) for pod, requests in pods if pod.name not in fit.bindings]
    if not missing:
        return _set(status, core.PROVISIONED, True, "CapacityIsFound",
                    "Capacity is found in the cluster", now=now)
    if klass == CHECK_CAPACITY:
        return _set(status, core.PROVISIONED, False, "CapacityIsNotFound",
                    "Capacity is not found, CA will try to find it later.", now=now)
    if len(missing) > max_nodes:
        return _set(status, core.FAILED, True, "TooManyNodes",
                    f"scaling up needs {len(missing)} nodes, more than the "
                    f"{max_nodes} the simulated cluster autoscaler adds for a request", now=now)
    taken = set(Node.objects.filter(cluster=row.cluster).values_list("name", flat=True))
    for index, (pod, requests) in enumerate(missing):
        name = core.limit_object_name(f"{row.name}-{index}")
        while name in taken:
            name = core.limit_object_name(f"{name}-x")
        taken.add(name)
        Node.objects.create(cluster=row.cluster, name=name,
                            capacity={**requests, placement.PODS: NODE_MAX_PODS},
                            labels=dict(pod.node_selector))
    return _set(status, core.PROVISIONED, True, "CapacityIsProvisioned",
                f"Capacity is provisioned: {len(missing)} node(s) added", now=now)

