"""A Kubernetes cluster's ProvisioningRequests (cluster-autoscaler's
``autoscaling.x-k8s.io/v1``) and the core/v1 PodTemplates they name, for the admission check
controller (``multicluster.provisioning``).

The Workload a request is for lives in kueueweb, not in the cluster, so a request cannot be
owned by it there (the garbage collector would delete an object whose owner is missing): it
carries Kueue's ``kueue.x-k8s.io/managed`` label, the origin label of kueueweb's objects, and
names its workload in an annotation. Its PodTemplates are owned by the request, as Kueue
leaves them once the request exists, so deleting the request deletes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from multicluster.core import provisioning as core
from multicluster.kube.backend import KubeBackend
from multicluster.kube.errors import KubeApiError
from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.provisioning import RequestRefused
from scheduling.models import Workload

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
POD_TEMPLATES = "podtemplates"
# The kueueweb workload a request is for (a name may be longer than a label value).
WORKLOAD_ANNOTATION = "kueueweb.io/workload"


class KubeRequests:
    """The requests of one cluster, through its API (``multicluster.provisioning.Requests``)."""

    def __init__(self, backend: KubeBackend, *, origin: str, create_namespaces: bool = False
                 ) -> None:
        self.backend, self.kube, self.origin = backend, backend.kube, origin
        self.create_namespaces = create_namespaces
        served = self.kube.served_resources(f"{GROUP}/{VERSION}")
        self.unserved = None if served is not None and PLURAL in served else (
            f"the cluster does not serve {GROUP}/{VERSION} {PLURAL}: install the "
            "ProvisioningRequest CustomResourceDefinition (cluster-autoscaler)")

    def _selector(self) -> str:
        return f"{core.MANAGED_LABEL[0]}={core.MANAGED_LABEL[1]},{ORIGIN_LABEL}={self.origin}"

    def owned(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        if self.unserved:
            return {}
        answer = self.kube.call(self.kube.custom.list_cluster_custom_object, GROUP, VERSION,
                                PLURAL, label_selector=self._selector())
        found: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for item in answer.get("items") or ():
            metadata = item.get("metadata") or {}
            workload = str((metadata.get("annotations") or {}).get(WORKLOAD_ANNOTATION, ""))
            if workload:
                found.setdefault((str(metadata.get("namespace", "")), workload), []).append(item)
        for items in found.values():
            items.sort(key=lambda i: str((i.get("metadata") or {}).get("name", "")))
        return found

    def create(self, wl: Workload, request: Mapping[str, Any],
               templates: Mapping[str, Mapping[str, Any]]) -> None:
        metadata = dict(request["metadata"])
        namespace = str(metadata["namespace"])
        metadata["labels"] = {**(metadata.get("labels") or {}), ORIGIN_LABEL: self.origin}
        metadata["annotations"] = {**(metadata.get("annotations") or {}),
                                   WORKLOAD_ANNOTATION: wl.name}
        if self.create_namespaces:
            self.backend.ensure_namespace(namespace)
        try:
            created = self.kube.call(self.kube.custom.create_namespaced_custom_object, GROUP,
                                     VERSION, namespace, PLURAL,
                                     {**request, "metadata": metadata})
        except KubeApiError as exc:
            if not exc.conflict:
                raise RequestRefused(str(exc)) from exc
            # An earlier pass created it and did not see it listed yet.
            created = self.kube.call(self.kube.custom.get_namespaced_custom_object, GROUP,
                                     VERSION, namespace, PLURAL, str(metadata["name"]))
        owner = {"apiVersion": core.API_VERSION, "kind": "ProvisioningRequest",
                 "name": created["metadata"]["name"], "uid": created["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}
        for name, template in templates.items():
            body = {"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": name, "namespace": namespace,
                                 "labels": {core.MANAGED_LABEL[0]: core.MANAGED_LABEL[1],
                                            ORIGIN_LABEL: self.origin},
                                 "ownerReferences": [owner]},
                    "template": dict(template)}
            try:
                self.kube.call(self.kube.core_objects.create_namespaced_custom_object, "", "v1",
                               namespace, POD_TEMPLATES, body)
            except KubeApiError as exc:
                if not exc.conflict:
                    raise RequestRefused(str(exc)) from exc

    def delete(self, namespace: str, name: str) -> None:
        try:
            self.kube.call(self.kube.custom.delete_namespaced_custom_object, GROUP, VERSION,
                           namespace, PLURAL, name, propagation_policy="Background")
        except KubeApiError as exc:
            if not exc.not_found:
                raise
