"""AdmissionChecks, MultiKueueConfigs, ProvisioningRequestConfigs (Kueue's shape, through the codec) and kueueweb's
Clusters over REST.

A Cluster's ``kubeconfig`` is write-only: it is stored encrypted and the API only says
whether there is one (``hasKubeconfig``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from multicluster.choices import ClusterRole, ConnectionType, PodSetMergePolicy
from multicluster.manifests import cluster_to_resource, read_cluster
from scheduling.api.serializers import (
    ConditionSerializer,
    KueueObjectSerializer,
    TaintSerializer,
)
from scheduling.core.patch import merge_patch
from scheduling.manifests.codec import ManifestInvalid


class AdmissionCheckParametersSerializer(serializers.Serializer[Any]):
    apiGroup = serializers.CharField(required=False)
    kind = serializers.CharField(required=False)
    name = serializers.CharField(required=False)


class AdmissionCheckSpecSerializer(serializers.Serializer[Any]):
    controllerName = serializers.CharField(
        help_text="Immutable. kueue.x-k8s.io/multikueue dispatches to worker clusters; "
        "kueue.x-k8s.io/provisioning-request asks the cluster autoscaler for capacity.")
    parameters = AdmissionCheckParametersSerializer(required=False)


class AdmissionCheckStatusSerializer(serializers.Serializer[Any]):
    conditions = ConditionSerializer(many=True)


class AdmissionCheckSerializer(KueueObjectSerializer):
    kind_name = "AdmissionCheck"
    spec = AdmissionCheckSpecSerializer()
    status = AdmissionCheckStatusSerializer(read_only=True)


class MultiKueueConfigSpecSerializer(serializers.Serializer[Any]):
    clusters = serializers.ListField(
        child=serializers.CharField(), min_length=1, max_length=20,
        help_text="Worker clusters in order of preference (the Incremental dispatcher's order).")


class MultiKueueConfigSerializer(KueueObjectSerializer):
    kind_name = "MultiKueueConfig"
    spec = MultiKueueConfigSpecSerializer()


class RetryStrategySerializer(serializers.Serializer[Any]):
    backoffLimitCount = serializers.IntegerField(required=False, default=3)
    backoffBaseSeconds = serializers.IntegerField(required=False, default=60)
    backoffMaxSeconds = serializers.IntegerField(required=False, default=1800)


class NodeSelectorUpdateSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    valueFromProvisioningClassDetail = serializers.CharField()


class PodSetUpdatesSerializer(serializers.Serializer[Any]):
    nodeSelector = NodeSelectorUpdateSerializer(many=True, required=False)


class ProvisioningRequestConfigSpecSerializer(serializers.Serializer[Any]):
    provisioningClassName = serializers.CharField(
        help_text="The cluster autoscaler's class, e.g. check-capacity.autoscaling.x-k8s.io.")
    parameters = serializers.DictField(child=serializers.CharField(max_length=255),
                                       required=False)
    managedResources = serializers.ListField(
        child=serializers.CharField(), required=False, max_length=100,
        help_text="Only pod sets requesting one of these are provisioned (all when empty).")
    retryStrategy = RetryStrategySerializer(required=False)
    podSetUpdates = PodSetUpdatesSerializer(required=False)
    podSetMergePolicy = serializers.ChoiceField(
        choices=PodSetMergePolicy.values, required=False)


class ProvisioningRequestConfigSerializer(KueueObjectSerializer):
    kind_name = "ProvisioningRequestConfig"
    spec = ProvisioningRequestConfigSpecSerializer()


class ClusterMetaSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    resourceVersion = serializers.CharField(read_only=True)
    creationTimestamp = serializers.DateTimeField(read_only=True)


class NodeSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    capacity = serializers.DictField(child=serializers.CharField(),
                                     help_text='Allocatable resources, e.g. {"cpu": "8"}.')
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    taints = TaintSerializer(many=True, required=False)


class ConnectionSerializer(serializers.Serializer[Any]):
    type = serializers.ChoiceField(choices=ConnectionType.values)
    kubeconfig = serializers.CharField(
        write_only=True, required=False,
        help_text="kubernetes only: the kubeconfig YAML. Stored encrypted, never returned; "
        "an empty string removes it.")
    hasKubeconfig = serializers.BooleanField(read_only=True, help_text="kubernetes only.")
    createNamespaces = serializers.BooleanField(
        required=False,
        help_text="kubernetes only: create a job's namespace on the cluster when it is missing "
        "(never kube-system, kube-public or kube-node-lease); default false, left out it is kept.")
    nodes = NodeSerializer(many=True, required=False,
                           help_text="simulated only: the nodes; left out, they are kept.")


class ClusterSpecSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=ClusterRole.values, required=False,
                                   help_text="Immutable; default worker.")
    connection = ConnectionSerializer()


class ClusterStatusSerializer(serializers.Serializer[Any]):
    conditions = ConditionSerializer(many=True, help_text="Active: connected and usable.")
    capacity = serializers.DictField(child=serializers.CharField())
    lostSince = serializers.DateTimeField(allow_null=True)


class ClusterSerializer(serializers.Serializer[Any]):
    """A cluster: the manager or a worker, each a scheduling domain of its own."""

    apiVersion = serializers.CharField(required=False)
    kind = serializers.CharField(required=False)
    metadata = ClusterMetaSerializer()
    spec = ClusterSpecSerializer()
    status = ClusterStatusSerializer(read_only=True)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return cluster_to_resource(instance)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError({"non_field_errors": ["the body must be an object"]})
        if self.partial and self.instance is not None:
            # Absent kubeconfig, nodes and createNamespaces mean "keep", so the patch applies to role and type.
            current = {"metadata": {"name": self.instance.name},
                       "spec": {"role": self.instance.role,
                                "connection": {"type": self.instance.connection_type}}}
            data = merge_patch(current, data)
        try:
            spec = read_cluster(data, instance=self.instance)
        except ManifestInvalid as exc:
            raise serializers.ValidationError(exc.as_dict()["errors"]) from exc
        return {"spec": spec}
