"""Kueue manifests of the multicluster kinds (AdmissionCheck, MultiKueueConfig,
MultiKueueCluster, ProvisioningRequestConfig), the core/v1 Node of a simulated cluster and the REST shape of a kueueweb
Cluster, on the codec of ``scheduling.manifests.codec``.

A MultiKueueCluster becomes a worker ``Cluster``. Kueue reads the worker's kubeconfig from a
Secret (or a path) in the manager cluster; kueueweb stores the kubeconfig itself, uploaded
with ``PATCH /api/v1/clusters/{name}/``, so the manifest's ``clusterSource`` only says that
the worker is a real (kubernetes) cluster. State Kueue has no field for travels in
``kueueweb.io/`` annotations: a worker's connection type and a config's dispatcher.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models, transaction

from kueueweb import reconcile
from multicluster.choices import (
    ClusterRole,
    ConnectionType,
    Dispatcher,
    PodPhase,
    PodSetMergePolicy,
)
from multicluster.kubeconfig import KubeconfigInvalid, read_kubeconfig
from multicluster.models import (
    AdmissionCheck,
    Cluster,
    GangWorkload,
    MultiKueueConfig,
    Node,
    Pod,
    ProvisioningRequestConfig,
)
from scheduling.api.base import object_metadata
from scheduling.manifests.codec import (
    _SERVER_METADATA,
    ANNOTATION_PREFIX,
    Kind,
    Manifest,
    ManifestInvalid,
    Plan,
    Reader,
    WriteContext,
    join,
    quantity_text,
    read_taints,
)
from scheduling.models import ClusterQueue, Cohort, FlavorQuota, LocalQueue, Workload
from scheduling.validation import FieldError
from scheduling.validators import validate_labels, validate_qualified_name, validate_quantity

CONNECTION_ANNOTATION = f"{ANNOTATION_PREFIX}connection"
DISPATCHER_ANNOTATION = f"{ANNOTATION_PREFIX}dispatcher"
MAX_MULTIKUEUE_CLUSTERS = 20
LOCATION_TYPES = ("Secret", "Path")
_PARAMETER_KIND = re.compile(r"^[A-Za-z]([-A-Za-z0-9]*[A-Za-z0-9])?$")


# --- AdmissionCheck -------------------------------------------------------------------------


class AdmissionCheckKind(Kind[AdmissionCheck]):
    kind = "AdmissionCheck"
    plural = "admissionchecks"
    model = AdmissionCheck

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        unsupported = {"retryDelayMinutes": "deprecated in v1beta1"} if r.v1beta1 else None
        spec = r.fields(document.get("spec"), "spec", ("controllerName", "parameters"),
                        unsupported=unsupported)
        result: dict[str, Any] = {
            "controllerName": r.string(spec.get("controllerName"), "spec.controllerName",
                                       required=True, max_length=253),
        }
        if "parameters" in spec:
            path = "spec.parameters"
            raw = r.fields(spec["parameters"], path, ("apiGroup", "kind", "name"))
            parameters: dict[str, str] = {}
            group = r.string(raw.get("apiGroup"), f"{path}.apiGroup", name="subdomain")
            kind = r.string(raw.get("kind"), f"{path}.kind", max_length=63)
            name = r.string(raw.get("name"), f"{path}.name", name="label")
            if kind is not None and not _PARAMETER_KIND.match(kind):
                r.error(f"{path}.kind", f'"{kind}" is not a valid kind name')
            for key, value in (("apiGroup", group), ("kind", kind), ("name", name)):
                if value:
                    parameters[key] = value
            result["parameters"] = parameters
        return result

    def check(self, manifest: Manifest, plan: Plan, existing: AdmissionCheck | None,
              r: Reader) -> None:
        if existing is not None and existing.controller_name != manifest.spec["controllerName"]:
            r.error("spec.controllerName", "field is immutable")

    def spec_of(self, obj: AdmissionCheck) -> dict[str, Any]:
        spec: dict[str, Any] = {"controllerName": obj.controller_name}
        if obj.parameters is not None:
            spec["parameters"] = obj.parameters
        return spec

    def write(self, manifest: Manifest, obj: AdmissionCheck | None,
              ctx: WriteContext) -> AdmissionCheck:
        obj = obj or AdmissionCheck(cluster=ctx.domain, name=manifest.name)
        obj.controller_name = manifest.spec["controllerName"]
        obj.parameters = manifest.spec.get("parameters")
        obj.save()
        return obj

    def in_use(self, obj: AdmissionCheck) -> str | None:
        users = sorted(
            queue.name
            for queue in ClusterQueue.objects.filter(cluster=obj.cluster).only(
                "name", "admission_checks")
            if any(check.get("name") == obj.name for check in queue.admission_checks or ())
        )
        if not users:
            return None
        quoted = ", ".join(f'"{name}"' for name in users)
        return (f'AdmissionCheck "{obj.name}" is in use by ClusterQueue {quoted}: remove it from '
                "their admissionChecksStrategy first")

    def status_of(self, obj: AdmissionCheck, computed: Mapping[str, Any] | None) -> dict[str, Any]:
        return {"conditions": obj.conditions or []}


# --- MultiKueueConfig -------------------------------------------------------------------------


class MultiKueueConfigKind(Kind[MultiKueueConfig]):
    kind = "MultiKueueConfig"
    plural = "multikueueconfigs"
    model = MultiKueueConfig
    known_annotations = (DISPATCHER_ANNOTATION,)

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        spec = r.fields(document.get("spec"), "spec", ("clusters", "quotaManagement"))
        clusters = r.string_list(spec.get("clusters"), "spec.clusters", name="subdomain",
                                 unique=True, min_items=1, max_items=MAX_MULTIKUEUE_CLUSTERS)
        mode = r.string(spec.get("quotaManagement"), "spec.quotaManagement",
                        choices=("Manual", "Automated"))
        if mode == "Automated":
            r.unsupported("spec.quotaManagement", "Automated is an alpha Kueue feature")
        return {"clusters": clusters}

    def read_annotations(self, annotations: Mapping[str, str], r: Reader) -> dict[str, str]:
        dispatcher = r.string(annotations.get(DISPATCHER_ANNOTATION),
                              f"metadata.annotations[{DISPATCHER_ANNOTATION}]",
                              choices=Dispatcher.values, default=Dispatcher.ALL_AT_ONCE)
        return {} if dispatcher == Dispatcher.ALL_AT_ONCE else {DISPATCHER_ANNOTATION: str(dispatcher)}

    def spec_of(self, obj: MultiKueueConfig) -> dict[str, Any]:
        return {"clusters": list(obj.clusters)}

    def annotations_of(self, obj: MultiKueueConfig) -> dict[str, str]:
        if obj.dispatcher == Dispatcher.ALL_AT_ONCE:
            return {}
        return {DISPATCHER_ANNOTATION: obj.dispatcher}

    def write(self, manifest: Manifest, obj: MultiKueueConfig | None,
              ctx: WriteContext) -> MultiKueueConfig:
        obj = obj or MultiKueueConfig(cluster=ctx.domain, name=manifest.name)
        obj.clusters = manifest.spec["clusters"]
        obj.dispatcher = manifest.annotations.get(DISPATCHER_ANNOTATION, Dispatcher.ALL_AT_ONCE)
        obj.save()
        return obj


# --- ProvisioningRequestConfig ---------------------------------------------------------------

MAX_PARAMETERS = 100
MAX_PARAMETER_LENGTH = 255
MAX_MANAGED_RESOURCES = 100
MAX_NODE_SELECTOR_UPDATES = 8
RETRY_DEFAULTS = {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
# A nodeSelector key: an optional DNS subdomain prefix and "/", then a qualified name part.
_NODE_SELECTOR_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$")


class ProvisioningRequestConfigKind(Kind[ProvisioningRequestConfig]):
    """Kueue's ProvisioningRequestConfig: what the ProvisioningRequest admission check asks
    the cluster autoscaler for. Its checks become Active once it exists."""

    kind = "ProvisioningRequestConfig"
    plural = "provisioningrequestconfigs"
    model = ProvisioningRequestConfig

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        spec = r.fields(document.get("spec"), "spec", (
            "provisioningClassName", "parameters", "managedResources", "retryStrategy",
            "podSetUpdates", "podSetMergePolicy"))
        result: dict[str, Any] = {
            "provisioningClassName": r.string(
                spec.get("provisioningClassName"), "spec.provisioningClassName",
                required=True, max_length=253, name="subdomain"),
        }
        parameters = self._read_parameters(spec.get("parameters"), r)
        if parameters:
            result["parameters"] = parameters
        managed = r.string_list(spec.get("managedResources"), "spec.managedResources",
                                name="qualified", unique=True, max_items=MAX_MANAGED_RESOURCES)
        if managed:
            result["managedResources"] = managed
        retry = r.fields(spec.get("retryStrategy"), "spec.retryStrategy", tuple(RETRY_DEFAULTS))
        result["retryStrategy"] = {
            key: value if (value := r.int32(retry.get(key), f"spec.retryStrategy.{key}"))
            is not None else default
            for key, default in RETRY_DEFAULTS.items()
        }
        if "podSetUpdates" in spec:
            updates = r.fields(spec["podSetUpdates"], "spec.podSetUpdates", ("nodeSelector",))
            result["podSetUpdates"] = {
                "nodeSelector": self._read_node_selector(updates.get("nodeSelector"), r)}
        policy = r.string(spec.get("podSetMergePolicy"), "spec.podSetMergePolicy",
                          choices=PodSetMergePolicy.values)
        if policy:
            result["podSetMergePolicy"] = policy
        return result

    @staticmethod
    def _read_parameters(value: Any, r: Reader) -> dict[str, str]:
        path = "spec.parameters"
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            r.error(path, "must be an object of parameter names to values")
            return {}
        raw = dict(value)
        if len(raw) > MAX_PARAMETERS:
            r.error(path, f"must have at most {MAX_PARAMETERS} properties")
        parameters: dict[str, str] = {}
        for key, item in raw.items():
            if item is None:
                continue
            text = r.string(item, join(path, str(key)), max_length=MAX_PARAMETER_LENGTH)
            if text is not None:
                parameters[str(key)] = text
        return parameters

    @staticmethod
    def _read_node_selector(value: Any, r: Reader) -> list[dict[str, str]]:
        path = "spec.podSetUpdates.nodeSelector"
        if value is None:
            return []
        if not isinstance(value, list):
            r.error(path, "must be a list")
            return []
        if len(value) > MAX_NODE_SELECTOR_UPDATES:
            r.error(path, f"must have at most {MAX_NODE_SELECTOR_UPDATES} items")
        entries: list[dict[str, str]] = []
        for i, raw in enumerate(value):
            epath = join(path, i)
            entry = r.fields(raw, epath, ("key", "valueFromProvisioningClassDetail"))
            key = r.string(entry.get("key"), join(epath, "key"), required=True, max_length=317)
            if key is not None and not _NODE_SELECTOR_KEY.match(key):
                r.error(join(epath, "key"), f'"{key}" is not a valid node selector key')
                key = None
            if key is not None and any(e["key"] == key for e in entries):
                r.error(join(epath, "key"), f'Duplicate value: "{key}"')
                key = None
            detail = r.string(entry.get("valueFromProvisioningClassDetail"),
                              join(epath, "valueFromProvisioningClassDetail"), required=True,
                              max_length=32768)
            if key is not None and detail is not None:
                entries.append({"key": key, "valueFromProvisioningClassDetail": detail})
        return entries

    def spec_of(self, obj: ProvisioningRequestConfig) -> dict[str, Any]:
        spec: dict[str, Any] = {"provisioningClassName": obj.provisioning_class_name}
        if obj.parameters:
            spec["parameters"] = dict(obj.parameters)
        if obj.managed_resources:
            spec["managedResources"] = list(obj.managed_resources)
        spec["retryStrategy"] = {"backoffLimitCount": obj.backoff_limit_count,
                                 "backoffBaseSeconds": obj.backoff_base_seconds,
                                 "backoffMaxSeconds": obj.backoff_max_seconds}
        if obj.pod_set_updates_node_selector:
            spec["podSetUpdates"] = {"nodeSelector": list(obj.pod_set_updates_node_selector)}
        if obj.pod_set_merge_policy:
            spec["podSetMergePolicy"] = obj.pod_set_merge_policy
        return spec

    def state_of_manifest(self, manifest: Manifest) -> Any:
        spec = dict(manifest.spec)
        if spec.get("podSetUpdates") == {"nodeSelector": []}:
            spec.pop("podSetUpdates")  # stored as no updates
        return (spec, manifest.annotations)

    def write(self, manifest: Manifest, obj: ProvisioningRequestConfig | None,
              ctx: WriteContext) -> ProvisioningRequestConfig:
        spec = manifest.spec
        obj = obj or ProvisioningRequestConfig(cluster=ctx.domain, name=manifest.name)
        obj.provisioning_class_name = spec["provisioningClassName"]
        obj.parameters = dict(spec.get("parameters") or {})
        obj.managed_resources = list(spec.get("managedResources") or [])
        retry = spec.get("retryStrategy") or RETRY_DEFAULTS
        obj.backoff_limit_count = retry["backoffLimitCount"]
        obj.backoff_base_seconds = retry["backoffBaseSeconds"]
        obj.backoff_max_seconds = retry["backoffMaxSeconds"]
        obj.pod_set_updates_node_selector = list(
            (spec.get("podSetUpdates") or {}).get("nodeSelector") or [])
        obj.pod_set_merge_policy = spec.get("podSetMergePolicy", "")
        obj.save()
        # Its checks' Active condition follows (the cluster's pass runs the controller).
        reconcile.request_cluster_sync(ctx.domain.pk)
        return obj


# --- MultiKueueCluster → Cluster -------------------------------------------------------------


class MultiKueueClusterKind(Kind[Cluster]):
    kind = "MultiKueueCluster"
    plural = "multikueueclusters"
    model = Cluster
    known_annotations = (CONNECTION_ANNOTATION,)

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        if r.v1beta1:  # v1beta1 has kubeConfig / clusterProfileRef directly in spec
            source = r.fields(document.get("spec"), "spec", ("kubeConfig", "clusterProfileRef"))
            path = "spec"
        else:
            spec = r.fields(document.get("spec"), "spec", ("clusterSource",),
                            hints={"kubeConfig": 'v1beta2 nests it in "clusterSource"'})
            path = "spec.clusterSource"
            source = r.fields(spec.get("clusterSource"), path, ("kubeConfig", "clusterProfileRef"))
        if ("kubeConfig" in source) == ("clusterProfileRef" in source):
            r.error(path, "exactly one of kubeConfig or clusterProfileRef must be set")
            return {}
        if "kubeConfig" in source:
            kpath = f"{path}.kubeConfig"
            raw = r.fields(source["kubeConfig"], kpath, ("location", "locationType"))
            location = r.string(raw.get("location"), f"{kpath}.location", required=True,
                                max_length=256)
            location_type = r.string(raw.get("locationType"), f"{kpath}.locationType",
                                     choices=LOCATION_TYPES, default="Secret")
            return {"clusterSource": {"kubeConfig": {"locationType": location_type,
                                                     "location": location}}}
        ppath = f"{path}.clusterProfileRef"
        raw = r.fields(source["clusterProfileRef"], ppath, ("name",))
        name = r.string(raw.get("name"), f"{ppath}.name", required=True, max_length=256)
        return {"clusterSource": {"clusterProfileRef": {"name": name}}}

    def read_annotations(self, annotations: Mapping[str, str], r: Reader) -> dict[str, str]:
        connection = r.string(annotations.get(CONNECTION_ANNOTATION),
                              f"metadata.annotations[{CONNECTION_ANNOTATION}]",
                              choices=ConnectionType.values, default=ConnectionType.KUBERNETES)
        if connection == ConnectionType.KUBERNETES:
            return {}
        return {CONNECTION_ANNOTATION: str(connection)}

    def check(self, manifest: Manifest, plan: Plan, existing: Cluster | None, r: Reader) -> None:
        if manifest.name == plan.domain.name:
            r.error("metadata.name",
                    f'cluster "{manifest.name}" cannot be a MultiKueue worker of itself')
        elif existing is not None and existing.role == ClusterRole.MANAGER:
            r.error("metadata.name", f'cluster "{manifest.name}" is the MultiKueue manager; a '
                                     "MultiKueueCluster names a worker")
        connection = manifest.annotations.get(CONNECTION_ANNOTATION, ConnectionType.KUBERNETES)
        if connection != ConnectionType.KUBERNETES:
            return
        if existing is None or not existing.has_kubeconfig:
            source = manifest.spec.get("clusterSource", {})
            where = (f'{source["kubeConfig"]["locationType"]} '
                     f'"{source["kubeConfig"]["location"]}"' if "kubeConfig" in source
                     else f'cluster profile "{source.get("clusterProfileRef", {}).get("name")}"')
            r.warnings.append(
                f"kueueweb does not read the kubeconfig from {where}: upload it with PATCH "
                f"/api/v1/clusters/{manifest.name}/ "
                '({"spec": {"connection": {"kubeconfig": "..."}}})'
            )

    def queryset(self, domain: Cluster) -> models.QuerySet[Cluster]:
        return Cluster.objects.filter(role=ClusterRole.WORKER)

    def existing(self, domain: Cluster,
                 manifests: Sequence[Manifest]) -> dict[tuple[str, str], Cluster]:
        names = {m.name for m in manifests}
        return {("", c.name): c for c in Cluster.objects.filter(name__in=names)}

    def spec_of(self, obj: Cluster) -> dict[str, Any]:
        # The kubeconfig lives in kueueweb; the location is only the conventional name.
        return {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": obj.name}}}

    def annotations_of(self, obj: Cluster) -> dict[str, str]:
        if obj.connection_type == ConnectionType.KUBERNETES:
            return {}
        return {CONNECTION_ANNOTATION: obj.connection_type}

    def state_of(self, obj: Cluster) -> Any:
        return (obj.role, obj.connection_type)

    def state_of_manifest(self, manifest: Manifest) -> Any:
        return (ClusterRole.WORKER,
                manifest.annotations.get(CONNECTION_ANNOTATION, ConnectionType.KUBERNETES))

    def write(self, manifest: Manifest, obj: Cluster | None, ctx: WriteContext) -> Cluster:
        connection = manifest.annotations.get(CONNECTION_ANNOTATION, ConnectionType.KUBERNETES)
        obj = obj or Cluster(name=manifest.name, role=ClusterRole.WORKER)
        if obj.pk is not None and obj.connection_type != connection:
            switch_connection(obj, connection)
        obj.connection_type = connection
        obj.save()
        return obj

    def in_use(self, obj: Cluster) -> str | None:
        return cluster_in_use(obj)


ADMISSION_CHECK = AdmissionCheckKind()
MULTIKUEUE_CONFIG = MultiKueueConfigKind()
MULTIKUEUE_CLUSTER = MultiKueueClusterKind()
PROVISIONING_REQUEST_CONFIG = ProvisioningRequestConfigKind()


# --- Node (core/v1) ---------------------------------------------------------------------------

NODE_API_VERSION = "v1"
# What a Node of a simulated cluster is made of; everything else a real Node prints is set by
# the kubelet, the cloud provider or the node controllers, so ``kubectl get node -o yaml``
# output applies with those fields dropped.
_NODE_SPEC_FIELDS = ("taints", "unschedulable")
_NODE_SPEC_IGNORED = frozenset({"podCIDR", "podCIDRs", "providerID", "externalID",
                                "configSource"})


class NodeKind(Kind[Node]):
    """A core/v1 Node of a simulated cluster: its labels, taints, ``unschedulable`` and
    resources (``status.allocatable``, else ``status.capacity``).

    Not a Kueue kind: ``read_document`` reads its envelope (``apiVersion: v1``), which
    ``scheduling.manifests.codec.read_manifest`` does not know. ``spec`` of the manifest holds the
    node's whole defined state (labels and resources included), so "unchanged" is a plain
    comparison. Readiness is run-time state (fault injection), not part of the manifest: an
    update leaves it alone and a new node starts Ready. Only a simulated cluster's nodes are
    defined here; a kubernetes cluster's are observed from it.
    """

    kind = "Node"
    plural = "nodes"
    model = Node

    # -- read
    def read_document(self, document: Any, *, index: int | None = None,
                      default_kind: str | None = None) -> Manifest:
        """Check one Node document on its own (raises ManifestInvalid), as ``read_manifest``
        does for the Kueue kinds. ``default_kind``: the kind an endpoint serves, used when
        the body names none (apiVersion then defaults to v1)."""
        if not isinstance(document, Mapping):
            raise ManifestInvalid([FieldError("", "a manifest must be an object, not "
                                                  f"{type(document).__name__}")], index=index)
        r = Reader()
        raw = r.fields(document, "", ("apiVersion", "kind", "metadata", "spec", "status"))
        api_version = raw.get("apiVersion") or (NODE_API_VERSION if default_kind else None)
        r.string(api_version, "apiVersion", required=True, choices=(NODE_API_VERSION,))
        kind = raw.get("kind") or default_kind
        if kind != self.kind:
            r.error("kind", f'must be "{default_kind}" at this endpoint' if default_kind
                    else f'must be "{self.kind}"')
        metadata = r.fields(raw.get("metadata"), "metadata",
                            ("name", "namespace", "labels", "annotations"),
                            ignored=_SERVER_METADATA)
        name = r.string(metadata.get("name"), "metadata.name", required=True, name="subdomain")
        annotations = metadata.get("annotations") or {}
        if not isinstance(annotations, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
        ):
            r.error("metadata.annotations", "must be a map of strings to strings")
        elif any(not key.startswith("kubectl.kubernetes.io/") for key in annotations):
            r.unsupported("metadata.annotations", "a Node keeps no annotations")
        spec = self.read_spec(raw, r)
        if r.errors:
            raise ManifestInvalid(r.errors, index=index, kind=self.kind, name=name)
        return Manifest(kind=self.kind, name=name or "", spec=spec, index=index,
                        warnings=r.warnings)

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        metadata = document.get("metadata")
        labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        labels = labels if labels is not None else {}
        try:
            validate_labels(labels)
        except ValidationError as exc:
            r.error("metadata.labels", exc.messages[0])
            labels = {}
        spec = r.fields(document.get("spec"), "spec", _NODE_SPEC_FIELDS,
                        ignored=_NODE_SPEC_IGNORED)
        taints = read_taints(spec.get("taints"), "spec.taints", r)
        unschedulable = spec.get("unschedulable", False)
        if not isinstance(unschedulable, bool):
            r.error("spec.unschedulable", "must be a boolean")
            unschedulable = False
        # A node's status is observed, so only its resources are read; the rest (conditions,
        # addresses, nodeInfo, ...) is whatever the cluster printed and is dropped.
        status = document.get("status")
        if status is not None and not isinstance(status, Mapping):
            r.error("status", "must be an object")
            status = None
        status = status or {}
        capacity = _read_resources(status.get("capacity"), "status.capacity", r)
        allocatable = _read_resources(status.get("allocatable"), "status.allocatable", r)
        # What the scheduler may place is the allocatable part, as kube-scheduler uses it.
        resources = allocatable if status.get("allocatable") is not None else capacity
        return {"labels": dict(labels), "taints": taints, "unschedulable": unschedulable,
                "resources": resources}

    def check(self, manifest: Manifest, plan: Plan, existing: Node | None, r: Reader) -> None:
        if plan.domain.connection_type != ConnectionType.SIMULATED:
            r.error("", f'cluster "{plan.domain.name}" has a {plan.domain.connection_type} '
                        "connection: its nodes are observed from the cluster, not defined; "
                        "only the nodes of a simulated cluster can be applied")

    # -- stored side
    def queryset(self, domain: Cluster) -> models.QuerySet[Node]:
        # A kubernetes cluster's nodes are not exported: apply would refuse them.
        return Node.objects.filter(cluster=domain, cluster__connection_type=ConnectionType.SIMULATED)

    def spec_of(self, obj: Node) -> dict[str, Any]:
        return {
            "labels": dict(obj.labels or {}),
            "taints": list(obj.taints or []),
            "unschedulable": obj.unschedulable,
            "resources": {resource: quantity_text(quantity)
                          for resource, quantity in (obj.capacity or {}).items()},
        }

    def write(self, manifest: Manifest, obj: Node | None, ctx: WriteContext) -> Node:
        spec = manifest.spec
        obj = obj or Node(cluster=ctx.domain, name=manifest.name)
        obj.labels = spec["labels"]
        obj.taints = spec["taints"]
        obj.unschedulable = spec["unschedulable"]
        obj.capacity = spec["resources"]
        obj.save()
        # Pods waiting for room may fit now, or a cordoned node takes no more.
        reconcile.request_cluster_sync(ctx.domain.pk)
        return obj

    def in_use(self, obj: Node) -> str | None:
        if obj.cluster.connection_type != ConnectionType.SIMULATED:
            return (f'Node "{obj.name}" belongs to cluster "{obj.cluster.name}", whose nodes are '
                    "observed from the cluster, not deleted here")
        bound = Pod.objects.filter(cluster_id=obj.cluster_id, node_name=obj.name) \
            .exclude(phase__in=(PodPhase.SUCCEEDED, PodPhase.FAILED)).count()
        if not bound:
            return None
        return (f'Node "{obj.name}" is in use: {bound} pod(s) are bound to it; set '
                "spec.unschedulable and let them finish, or lose the node (fault injection) "
                "first")

    # -- print
    def to_manifest(self, obj: Node, *, export: bool = False,
                    status: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The Node as core/v1 prints it. ``export``: what ``apply`` reads back, which for a
        Node includes ``status.capacity``, the simulated node's resources."""
        metadata: dict[str, Any] = {"name": obj.name}
        if obj.labels:
            metadata["labels"] = dict(obj.labels)
        if not export:
            metadata["cluster"] = obj.cluster.name  # as object_metadata adds it
        spec: dict[str, Any] = {}
        if obj.taints:
            spec["taints"] = list(obj.taints)
        if obj.unschedulable:
            spec["unschedulable"] = True
        resources = self.spec_of(obj)["resources"]
        printed: dict[str, Any] = {"capacity": resources}
        if not export:
            printed["allocatable"] = dict(resources)
            printed["conditions"] = [{"type": "Ready", "status": "True" if obj.ready else "False"}]
        return {"apiVersion": NODE_API_VERSION, "kind": self.kind, "metadata": metadata,
                "spec": spec, "status": printed}


def _read_resources(value: Any, path: str, r: Reader) -> dict[str, str]:
    """A ResourceList: resource names to non-negative quantities (kept as written)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        r.error(path, 'must be a map of resources to quantities, e.g. {"cpu": "8"}')
        return {}
    resources: dict[str, str] = {}
    for resource, quantity in value.items():
        rpath = f"{path}[{resource}]"
        try:
            validate_qualified_name(resource)
            validate_quantity(quantity)
        except ValidationError as exc:
            r.error(rpath, exc.messages[0])
            continue
        resources[resource] = quantity_text(quantity)
    return resources


NODE = NodeKind()


# --- scheduling.k8s.io/v1alpha1 Workload (the gang of a simulated cluster) -----------------------

GANG_WORKLOAD_API_VERSION = "scheduling.k8s.io/v1alpha1"
# Kubernetes' WorkloadMaxPodGroups.
MAX_POD_GROUPS = 8
_PATH_SEGMENT_FORBIDDEN = ("/", "%")


class GangWorkloadKind(Kind[GangWorkload]):
    """Kubernetes v1.35's ``scheduling.k8s.io/v1alpha1`` Workload, applied to a simulated
    cluster (``GangWorkload``): the pod groups that pods naming it (``spec.workloadRef``)
    are scheduled by. Checked as the API server's validation does: an optional
    ``controllerRef`` (kind and name required, path segments; apiGroup a DNS subdomain), one
    to 8 ``podGroups`` with unique DNS-label names, each with exactly one of ``basic: {}`` or
    ``gang: {minCount: n}`` (n ≥ 1); the spec is immutable. Not Kueue's Workload: its key
    in apply is ``Workload.scheduling.k8s.io``."""

    kind = "Workload.scheduling.k8s.io"
    plural = "workloads.scheduling.k8s.io"
    model = GangWorkload
    namespaced = True

    def read_document(self, document: Any, *, index: int | None = None,
                      default_namespace: str = "default") -> Manifest:
        if not isinstance(document, Mapping):
            raise ManifestInvalid([FieldError("", "a manifest must be an object, not "
                                                  f"{type(document).__name__}")], index=index)
        r = Reader()
        raw = r.fields(document, "", ("apiVersion", "kind", "metadata", "spec", "status"))
        r.string(raw.get("apiVersion"), "apiVersion", required=True,
                 choices=(GANG_WORKLOAD_API_VERSION,))
        metadata = r.fields(raw.get("metadata"), "metadata",
                            ("name", "namespace", "labels", "annotations"),
                            ignored=_SERVER_METADATA)
        name = r.string(metadata.get("name"), "metadata.name", required=True, name="subdomain")
        namespace = r.string(metadata.get("namespace"), "metadata.namespace", name="label",
                             default=default_namespace) or default_namespace
        spec = self.read_spec(raw, r)
        if r.errors:
            raise ManifestInvalid(r.errors, index=index, kind=self.kind, name=name,
                                  namespace=namespace)
        return Manifest(kind=self.kind, name=name or "", namespace=namespace, spec=spec,
                        index=index, warnings=r.warnings)

    def read_spec(self, document: Mapping[str, Any], r: Reader) -> dict[str, Any]:
        if document.get("spec") is None:
            r.error("spec", "Required value")
            return {}
        spec = r.fields(document.get("spec"), "spec", ("controllerRef", "podGroups"))
        result: dict[str, Any] = {"controllerRef": {}, "podGroups": []}
        if "controllerRef" in spec:
            path = "spec.controllerRef"
            ref = r.fields(spec["controllerRef"], path, ("apiGroup", "kind", "name"))
            group = r.string(ref.get("apiGroup"), f"{path}.apiGroup", name="subdomain")
            kind = r.string(ref.get("kind"), f"{path}.kind", required=True)
            ref_name = r.string(ref.get("name"), f"{path}.name", required=True)
            for key, value in (("kind", kind), ("name", ref_name)):
                if value is not None and (value in (".", "..") or any(
                        c in value for c in _PATH_SEGMENT_FORBIDDEN)):
                    r.error(f"{path}.{key}", f'"{value}" is not a valid path segment name: it '
                                            "may not be '.' or '..' nor contain '/' or '%'")
            result["controllerRef"] = {key: value for key, value in
                                       (("apiGroup", group), ("kind", kind), ("name", ref_name))
                                       if value}
        groups = spec.get("podGroups")
        path = "spec.podGroups"
        if not groups:
            r.error(path, "Required value: must have at least one item")
            return result
        if not isinstance(groups, list):
            r.error(path, "must be a list")
            return result
        if len(groups) > MAX_POD_GROUPS:
            r.error(path, f"Too many: {len(groups)}: must have at most {MAX_POD_GROUPS} items")
            return result
        seen: set[str] = set()
        for i, item in enumerate(groups):
            gpath = join(path, i)
            group_spec = r.fields(item, gpath, ("name", "policy"))
            group_name = r.string(group_spec.get("name"), f"{gpath}.name", required=True,
                                  name="label")
            if group_name is not None:
                if group_name in seen:
                    r.error(f"{gpath}.name", f'Duplicate value: "{group_name}"')
                seen.add(group_name)
            policy = r.fields(group_spec.get("policy"), f"{gpath}.policy", ("basic", "gang"))
            set_fields = [key for key in ("basic", "gang") if key in policy]
            if len(set_fields) != 1:
                r.error(f"{gpath}.policy", "exactly one of `basic`, `gang` is required" + (
                    ", but multiple fields are set" if set_fields else ""))
                continue
            if set_fields == ["basic"]:
                r.fields(policy["basic"], f"{gpath}.policy.basic", ())
                read: dict[str, Any] = {"basic": {}}
            else:
                gang = r.fields(policy["gang"], f"{gpath}.policy.gang", ("minCount",))
                count = r.int32(gang.get("minCount"), f"{gpath}.policy.gang.minCount",
                                required=True)
                if count is not None and count < 1:
                    r.error(f"{gpath}.policy.gang.minCount",
                            "must be greater than zero")
                read = {"gang": {"minCount": count}}
            result["podGroups"].append({"name": group_name, "policy": read})
        return result

    def check(self, manifest: Manifest, plan: Plan, existing: GangWorkload | None,
              r: Reader) -> None:
        if plan.domain.connection_type != ConnectionType.SIMULATED:
            r.error("", f'cluster "{plan.domain.name}" has a {plan.domain.connection_type} '
                        "connection: its Workloads are the cluster's own (kueueweb creates "
                        "those of its jobs); only a simulated cluster's can be applied")
        if existing is None:
            return
        if existing.controller_ref and existing.controller_ref != manifest.spec["controllerRef"]:
            r.error("spec.controllerRef", "field is immutable")
        if list(existing.pod_groups) != manifest.spec["podGroups"]:
            r.error("spec.podGroups", "field is immutable")

    def queryset(self, domain: Cluster) -> models.QuerySet[GangWorkload]:
        return GangWorkload.objects.filter(cluster=domain)

    def spec_of(self, obj: GangWorkload) -> dict[str, Any]:
        return {"controllerRef": dict(obj.controller_ref or {}),
                "podGroups": list(obj.pod_groups or [])}

    def write(self, manifest: Manifest, obj: GangWorkload | None,
              ctx: WriteContext) -> GangWorkload:
        obj = obj or GangWorkload(cluster=ctx.domain, namespace=manifest.namespace,
                                  name=manifest.name)
        obj.controller_ref = manifest.spec["controllerRef"]
        obj.pod_groups = manifest.spec["podGroups"]
        if obj.pk is not None:
            obj.resource_version += 1
        obj.save()
        # Pods waiting for this Workload may be scheduled now.
        reconcile.request_cluster_sync(ctx.domain.pk)
        return obj

    def to_manifest(self, obj: GangWorkload, *, export: bool = False,
                    status: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if export:
            metadata: dict[str, Any] = {"name": obj.name, "namespace": obj.namespace}
        else:
            metadata = object_metadata(obj, namespaced=True)
        spec: dict[str, Any] = {}
        if obj.controller_ref:
            spec["controllerRef"] = dict(obj.controller_ref)
        spec["podGroups"] = list(obj.pod_groups or [])
        return {"apiVersion": GANG_WORKLOAD_API_VERSION, "kind": "Workload",
                "metadata": metadata, "spec": spec}


GANG_WORKLOAD = GangWorkloadKind()


# --- the REST shape of a Cluster ---------------------------------------------------------------

CLUSTER_API_VERSION = "kueueweb.io/v1"
CLUSTER_KIND = "Cluster"
NODE_FIELDS = ("name", "capacity", "labels", "taints")


def cluster_to_resource(cluster: Cluster) -> dict[str, Any]:
    """A Cluster as the API prints it. The kubeconfig is never returned, only whether there
    is one. ``cluster`` should prefetch ``nodes``."""
    connection: dict[str, Any] = {"type": cluster.connection_type}
    if cluster.connection_type == ConnectionType.KUBERNETES:
        connection["hasKubeconfig"] = cluster.has_kubeconfig
        connection["createNamespaces"] = cluster.create_namespaces
    else:
        connection["nodes"] = [node_to_dict(node) for node in cluster.nodes.all()]
    lost_since = cluster.lost_since.isoformat().replace("+00:00", "Z") if cluster.lost_since else None
    return {
        "apiVersion": CLUSTER_API_VERSION,
        "kind": CLUSTER_KIND,
        "metadata": object_metadata(cluster),
        "spec": {"role": cluster.role, "connection": connection},
        "status": {
            "conditions": cluster.conditions or [],
            "capacity": cluster.capacity or {},
            "lostSince": lost_since,
        },
    }


def node_to_dict(node: Node) -> dict[str, Any]:
    return {"name": node.name, "capacity": node.capacity, "labels": node.labels,
            "taints": node.taints}


@dataclass
class ClusterSpec:
    """A Cluster as read from the API. ``kubeconfig``/``nodes`` None: keep what is stored."""

    name: str
    role: str
    connection_type: str
    # Kept out of the repr: a dataclass's repr shows in tracebacks and debug pages.
    kubeconfig: str | None = field(default=None, repr=False)
    nodes: list[dict[str, Any]] | None = None
    create_namespaces: bool | None = None


def read_cluster(data: Any, *, instance: Cluster | None) -> ClusterSpec:
    """Check a Cluster resource (create when ``instance`` is None, else a full replace of its
    spec) and raise ManifestInvalid with field paths."""
    r = Reader()
    document = r.fields(data, "", ("apiVersion", "kind", "metadata", "spec", "status"))
    if document.get("apiVersion") not in (None, CLUSTER_API_VERSION):
        r.error("apiVersion", f'Unsupported value: "{document["apiVersion"]}": supported values: '
                              f'"{CLUSTER_API_VERSION}"')
    if document.get("kind") not in (None, CLUSTER_KIND):
        r.error("kind", f'must be "{CLUSTER_KIND}" at this endpoint')
    metadata = r.fields(document.get("metadata"), "metadata", ("name",),
                        ignored={"uid", "resourceVersion", "creationTimestamp", "labels",
                                 "annotations", "generation", "managedFields"})
    name = r.string(metadata.get("name"), "metadata.name", required=instance is None,
                    name="subdomain")
    if instance is not None:
        if name is not None and name != instance.name:
            r.error("metadata.name", f'the name of the object ("{name}") does not match the name '
                                     f'in the URL ("{instance.name}")')
        name = instance.name
    spec = r.fields(document.get("spec"), "spec", ("role", "connection"))
    role = r.string(spec.get("role"), "spec.role", choices=ClusterRole.values,
                    default=instance.role if instance else ClusterRole.WORKER)
    if instance is not None and role != instance.role:
        r.error("spec.role", "field is immutable")
    elif instance is None and role == ClusterRole.MANAGER:
        manager = Cluster.objects.filter(role=ClusterRole.MANAGER).first()
        if manager is not None:
            r.error("spec.role", f'there is already a manager cluster ("{manager.name}")')
    connection = r.fields(spec.get("connection"), "spec.connection",
                          ("type", "kubeconfig", "nodes", "createNamespaces"),
                          ignored={"hasKubeconfig"})
    default_type = instance.connection_type if instance else ConnectionType.SIMULATED
    connection_type = r.string(connection.get("type"), "spec.connection.type",
                               choices=ConnectionType.values, default=default_type)
    kubeconfig = None
    if "kubeconfig" in connection:
        kubeconfig = _read_kubeconfig(connection["kubeconfig"], r)
        if connection_type != ConnectionType.KUBERNETES:
            r.error("spec.connection.kubeconfig", "only a kubernetes connection has a kubeconfig")
    nodes = None
    if "nodes" in connection:
        nodes = _read_nodes(connection["nodes"], r)
        if connection_type != ConnectionType.SIMULATED:
            r.error("spec.connection.nodes",
                    "only a simulated connection has its nodes defined here (a kubernetes "
                    "cluster reports its own)")
    create_namespaces = None
    if "createNamespaces" in connection:
        create_namespaces = _read_create_namespaces(connection["createNamespaces"],
                                                    str(connection_type), r)
    if r.errors:
        raise ManifestInvalid(r.errors, kind=CLUSTER_KIND, name=name)
    return ClusterSpec(name=name or "", role=str(role), connection_type=str(connection_type),
                       kubeconfig=kubeconfig, nodes=nodes, create_namespaces=create_namespaces)


def _read_create_namespaces(value: Any, connection_type: str, r: Reader) -> bool | None:
    path = "spec.connection.createNamespaces"
    if not isinstance(value, bool):
        r.error(path, "must be true or false")
        return None
    if connection_type != ConnectionType.KUBERNETES:
        # A simulated cluster has no namespaces to create: every job runs in its own.
        r.error(path, "only a kubernetes connection creates namespaces")
        return None
    return value


def _read_kubeconfig(value: Any, r: Reader) -> str | None:
    path = "spec.connection.kubeconfig"
    if not isinstance(value, str):
        r.error(path, "must be the kubeconfig YAML as a string")
        return None
    if value == "":
        return ""  # clears the stored kubeconfig
    try:
        read_kubeconfig(value)
    except KubeconfigInvalid as exc:
        r.error(path, str(exc))
        return None
    return value


def _read_nodes(value: Any, r: Reader) -> list[dict[str, Any]]:
    path = "spec.connection.nodes"
    if not isinstance(value, list):
        r.error(path, "must be a list of nodes")
        return []
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        npath = join(path, i)
        node = r.fields(raw, npath, NODE_FIELDS)
        name = r.string(node.get("name"), join(npath, "name"), required=True, name="subdomain")
        if name in seen:
            r.error(join(npath, "name"), f'Duplicate value: "{name}"')
        seen.add(name or "")
        capacity = _read_resources(node.get("capacity"), join(npath, "capacity"), r)
        labels = node.get("labels", {})
        try:
            validate_labels(labels)
        except ValidationError as exc:
            r.error(join(npath, "labels"), exc.messages[0])
        taints = read_taints(node.get("taints"), join(npath, "taints"), r)
        nodes.append({"name": name, "capacity": capacity,
                      "labels": dict(labels) if isinstance(labels, Mapping) else {},
                      "taints": taints})
    return nodes


def switch_connection(cluster: Cluster, connection_type: str) -> None:
    """Nodes defined for a simulated cluster are not those of a real one: drop them when the
    connection becomes kubernetes (the cluster reconciler then reports the real nodes)."""
    if connection_type == ConnectionType.KUBERNETES and cluster.pk is not None:
        cluster.nodes.all().delete()


@transaction.atomic
def save_cluster(spec: ClusterSpec, instance: Cluster | None) -> Cluster:
    """Create or update a Cluster (and a simulated cluster's nodes) from ``read_cluster``."""
    cluster = instance or Cluster(name=spec.name, role=spec.role)
    if cluster.pk is not None and cluster.connection_type != spec.connection_type:
        switch_connection(cluster, spec.connection_type)
    cluster.connection_type = spec.connection_type
    if spec.kubeconfig is not None:
        cluster.set_kubeconfig(spec.kubeconfig)
    if spec.create_namespaces is not None:
        cluster.create_namespaces = spec.create_namespaces
    cluster.save()
    if spec.nodes is not None:
        _replace_nodes(cluster, spec.nodes)
    return cluster


def _replace_nodes(cluster: Cluster, nodes: Sequence[Mapping[str, Any]]) -> None:
    """Update nodes in place by name (rows keep their identity), add new ones, drop others."""
    current = {node.name: node for node in cluster.nodes.all()}
    for data in nodes:
        node = current.pop(data["name"], None) or Node(cluster=cluster, name=data["name"])
        node.capacity = dict(data["capacity"])
        node.labels = dict(data["labels"])
        node.taints = list(data["taints"])
        node.save()
    if current:
        Node.objects.filter(pk__in=[node.pk for node in current.values()]).delete()


@transaction.atomic
def delete_cluster(cluster: Cluster) -> None:
    """Delete a cluster and its domain's objects (call ``cluster_in_use`` first).

    The quota objects refer to each other through protected keys (a flavor's quotas, a
    queue's local queues, a cohort's children), which a plain cascade from the cluster
    refuses; they go first, in dependency order.
    """
    LocalQueue.objects.filter(cluster=cluster).delete()
    FlavorQuota.objects.filter(
        models.Q(cluster_queue__cluster=cluster) | models.Q(cohort__cluster=cluster)
    ).delete()
    ClusterQueue.objects.filter(cluster=cluster).delete()
    Cohort.objects.filter(cluster=cluster).update(parent=None)
    Cohort.objects.filter(cluster=cluster).delete()
    cluster.delete()


def cluster_in_use(cluster: Cluster) -> str | None:
    """Why a cluster cannot be deleted: it is the manager, or work still runs through it."""
    if cluster.role == ClusterRole.MANAGER:
        return f'cluster "{cluster.name}" is the manager and cannot be deleted'
    workloads = Workload.objects.filter(cluster=cluster).count()
    dispatches = cluster.dispatches.count()
    reasons = []
    if workloads:
        reasons.append(f"{workloads} workload(s) in its domain")
    if dispatches:
        reasons.append(f"{dispatches} workload(s) dispatched to it")
    if not reasons:
        return None
    return f'cluster "{cluster.name}" is in use: ' + "; ".join(reasons)

