"""The quota kinds over REST, in Kueue's own shape (``apiVersion``, ``kind``, ``metadata``,
``spec``, ``status``, camelCase fields).

Reading and writing both go through ``scheduling.manifests.codec``: ``to_representation`` prints
what ``Kind.to_manifest`` prints and ``to_internal_value`` runs ``read_manifest``, so the API,
``apply`` and the admin console accept and refuse the same objects with the same field
paths. The declared fields describe the same shapes for the OpenAPI schema only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduling.choices import (
    BorrowWithinCohortPolicy,
    FungibilityPolicy,
    FungibilityPreference,
    QueueingStrategy,
    ReclaimWithinCohort,
    StopPolicy,
    WithinClusterQueue,
)
from scheduling.core.patch import merge_patch
from scheduling.manifests.apply import KINDS
from scheduling.manifests.codec import (
    V1BETA2,
    Kind,
    ManifestInvalid,
    cluster_queue_statuses,
    local_queue_statuses,
    read_manifest,
)

# --- schema pieces (documentation of the shapes; the codec does the work) -------------------


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "number"}],
                      "description": "A Kubernetes quantity such as 9, 500m or 36Gi.",
                      "example": "36Gi"})
class QuantityField(serializers.Field):  # type: ignore[type-arg]
    pass


class KueueObjectMetaSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="Unique per kind (and namespace) in its cluster.")
    namespace = serializers.CharField(required=False, help_text="Namespaced kinds only.")
    uid = serializers.CharField(read_only=True)
    resourceVersion = serializers.CharField(
        required=False, help_text="Sent back on update: a stale value answers 409.")
    creationTimestamp = serializers.DateTimeField(read_only=True)
    annotations = serializers.DictField(
        child=serializers.CharField(), required=False,
        help_text="Only kueueweb.io/ annotations are kept.")
    cluster = serializers.CharField(
        read_only=True, help_text="Not a Kubernetes field: the cluster (scheduling domain) "
        "the object lives in.")


class ConditionSerializer(serializers.Serializer[Any]):
    type = serializers.CharField()
    status = serializers.ChoiceField(choices=["True", "False", "Unknown"])
    reason = serializers.CharField()
    message = serializers.CharField()
    lastTransitionTime = serializers.DateTimeField()
    observedGeneration = serializers.IntegerField(required=False)


class ResourceQuotaSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="A covered resource, in coveredResources order.")
    nominalQuota = QuantityField()
    borrowingLimit = QuantityField(required=False, help_text="Needs a cohort (a parent).")
    lendingLimit = QuantityField(required=False, help_text="Needs a cohort (a parent).")


class FlavorQuotasSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="A ResourceFlavor of the same cluster.")
    resources = ResourceQuotaSerializer(many=True)


class ResourceGroupSerializer(serializers.Serializer[Any]):
    coveredResources = serializers.ListField(child=serializers.CharField())
    flavors = FlavorQuotasSerializer(many=True, help_text="In order of preference.")


class FairSharingSerializer(serializers.Serializer[Any]):
    weight = QuantityField(required=False)


class LabelSelectorRequirementSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    operator = serializers.ChoiceField(choices=["In", "NotIn", "Exists", "DoesNotExist"])
    values = serializers.ListField(child=serializers.CharField(), required=False)


class LabelSelectorSerializer(serializers.Serializer[Any]):
    matchLabels = serializers.DictField(child=serializers.CharField(), required=False)
    matchExpressions = LabelSelectorRequirementSerializer(many=True, required=False)


# A pattern, not an enum: the schema would otherwise name the one choice set twice.
@extend_schema_field({"type": "string", "pattern": "^(MayStopSearch|TryNextFlavor)$",
                      "description": "MayStopSearch or TryNextFlavor (v1beta1's Borrow and "
                      "Preempt are read as MayStopSearch)."})
class FungibilityPolicyField(serializers.ChoiceField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=FungibilityPolicy.values, **kwargs)


class FlavorFungibilitySerializer(serializers.Serializer[Any]):
    whenCanBorrow = FungibilityPolicyField(required=False)
    whenCanPreempt = FungibilityPolicyField(required=False)
    preference = serializers.ChoiceField(
        choices=FungibilityPreference.values, required=False,
        help_text="Only when both whenCanBorrow and whenCanPreempt are TryNextFlavor.")


class BorrowWithinCohortSerializer(serializers.Serializer[Any]):
    policy = serializers.ChoiceField(choices=BorrowWithinCohortPolicy.values, required=False)
    maxPriorityThreshold = serializers.IntegerField(required=False)


class ClusterQueuePreemptionSerializer(serializers.Serializer[Any]):
    withinClusterQueue = serializers.ChoiceField(choices=WithinClusterQueue.values,
                                                 required=False)
    reclaimWithinCohort = serializers.ChoiceField(choices=ReclaimWithinCohort.values,
                                                  required=False)
    borrowWithinCohort = BorrowWithinCohortSerializer(required=False)


class AdmissionCheckStrategyRuleSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    onFlavors = serializers.ListField(
        child=serializers.CharField(), required=False,
        help_text="Flavors of this ClusterQueue; empty means every flavor.")


class AdmissionChecksStrategySerializer(serializers.Serializer[Any]):
    admissionChecks = AdmissionCheckStrategyRuleSerializer(many=True)


class ResourceUsageSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    total = serializers.CharField()
    borrowed = serializers.CharField()


class FlavorUsageSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    resources = ResourceUsageSerializer(many=True)


class LocalQueueResourceUsageSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    total = serializers.CharField()


class LocalQueueFlavorUsageSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    resources = LocalQueueResourceUsageSerializer(many=True)


class TaintSerializer(serializers.Serializer[Any]):
    key = serializers.CharField()
    value = serializers.CharField(required=False)
    effect = serializers.ChoiceField(choices=["NoSchedule", "PreferNoSchedule", "NoExecute"])


class TolerationSerializer(serializers.Serializer[Any]):
    key = serializers.CharField(required=False)
    operator = serializers.ChoiceField(choices=["Equal", "Exists"], required=False)
    value = serializers.CharField(required=False)
    effect = serializers.ChoiceField(choices=["NoSchedule", "PreferNoSchedule", "NoExecute"],
                                     required=False)
    tolerationSeconds = serializers.IntegerField(required=False)


class ResourceFlavorSpecSerializer(serializers.Serializer[Any]):
    nodeLabels = serializers.DictField(child=serializers.CharField(), required=False)
    nodeTaints = TaintSerializer(many=True, required=False)
    tolerations = TolerationSerializer(many=True, required=False)
    topologyName = serializers.CharField(required=False)


class CohortSpecSerializer(serializers.Serializer[Any]):
    parentName = serializers.CharField(required=False, help_text="Created empty if missing.")
    resourceGroups = ResourceGroupSerializer(many=True, required=False)
    fairSharing = FairSharingSerializer(required=False)


class CohortStatusSerializer(serializers.Serializer[Any]):
    conditions = ConditionSerializer(many=True)


class ClusterQueueSpecSerializer(serializers.Serializer[Any]):
    cohortName = serializers.CharField(
        required=False, help_text="A Cohort; created empty if missing (Kueue's implicit cohort).")
    namespaceSelector = LabelSelectorSerializer(
        required=False, allow_null=True,
        help_text="Absent or null: no namespace may use the queue; {}: every namespace.")
    queueingStrategy = serializers.ChoiceField(choices=QueueingStrategy.values, required=False)
    resourceGroups = ResourceGroupSerializer(many=True, required=False)
    flavorFungibility = FlavorFungibilitySerializer(required=False)
    preemption = ClusterQueuePreemptionSerializer(required=False)
    admissionChecksStrategy = AdmissionChecksStrategySerializer(required=False)
    stopPolicy = serializers.ChoiceField(choices=StopPolicy.values, required=False)
    fairSharing = FairSharingSerializer(required=False)


class ClusterQueueStatusSerializer(serializers.Serializer[Any]):
    conditions = ConditionSerializer(many=True)
    pendingWorkloads = serializers.IntegerField()
    reservingWorkloads = serializers.IntegerField()
    admittedWorkloads = serializers.IntegerField()
    flavorsReservation = FlavorUsageSerializer(many=True, help_text="Quota held by workloads "
                                               "with a reservation (admitted or not yet).")
    flavorsUsage = FlavorUsageSerializer(many=True, help_text="Quota used by admitted "
                                         "workloads.")


class LocalQueueSpecSerializer(serializers.Serializer[Any]):
    clusterQueue = serializers.CharField(help_text="Immutable; in the same cluster.")
    stopPolicy = serializers.ChoiceField(choices=StopPolicy.values, required=False)
    fairSharing = FairSharingSerializer(required=False)


class LocalQueueStatusSerializer(serializers.Serializer[Any]):
    conditions = ConditionSerializer(many=True)
    pendingWorkloads = serializers.IntegerField()
    reservingWorkloads = serializers.IntegerField()
    admittedWorkloads = serializers.IntegerField()
    flavorsReservation = LocalQueueFlavorUsageSerializer(many=True)
    flavorsUsage = LocalQueueFlavorUsageSerializer(many=True)


# --- the objects ------------------------------------------------------------------------------


class StatusListSerializer(serializers.ListSerializer[Any]):
    """Lists compute the status of the whole page at once (a fixed number of queries)."""

    def to_representation(self, data: Any) -> list[Any]:
        items = list(data.all() if isinstance(data, models.Manager) else data)
        child: KueueObjectSerializer = self.child  # type: ignore[assignment]
        statuses = child.statuses(items)
        return [child.represent(item, statuses.get(item.pk)) for item in items]


class KueueObjectSerializer(serializers.Serializer[Any]):
    """A Kueue object, printed and read by the codec of ``kind_name``."""

    kind_name: ClassVar[str]
    apiVersion = serializers.CharField(required=False, default=V1BETA2)
    kind = serializers.CharField(required=False)
    metadata = KueueObjectMetaSerializer()

    class Meta:
        list_serializer_class = StatusListSerializer

    @property
    def codec(self) -> Kind[Any]:
        return KINDS[self.kind_name]

    def statuses(self, items: Sequence[Any]) -> Mapping[int, Mapping[str, Any]]:
        return {}

    def represent(self, instance: Any, status: Mapping[str, Any] | None) -> dict[str, Any]:
        return self.codec.to_manifest(instance, status=status)

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return self.represent(instance, None)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        """Checks the body on its own (field rules); the view applies it. A PATCH is a JSON
        merge patch of the stored object."""
        if not isinstance(data, Mapping):
            raise serializers.ValidationError({"non_field_errors": ["the body must be an object"]})
        if self.partial and self.instance is not None:
            current = self.codec.to_manifest(self.instance, export=True)
            data = merge_patch(current, data)
        namespace = self.context.get("namespace")
        try:
            read_manifest(data, KINDS, default_kind=self.kind_name,
                          default_namespace=namespace or "default")
        except ManifestInvalid as exc:
            raise serializers.ValidationError(exc.as_dict()["errors"]) from exc
        return {"document": data}


class ResourceFlavorSerializer(KueueObjectSerializer):
    kind_name = "ResourceFlavor"
    spec = ResourceFlavorSpecSerializer(required=False)


class CohortSerializer(KueueObjectSerializer):
    kind_name = "Cohort"
    spec = CohortSpecSerializer(required=False)
    status = CohortStatusSerializer(read_only=True)


class ClusterQueueSerializer(KueueObjectSerializer):
    kind_name = "ClusterQueue"
    spec = ClusterQueueSpecSerializer(required=False)
    status = ClusterQueueStatusSerializer(read_only=True)

    def statuses(self, items: Sequence[Any]) -> Mapping[int, Mapping[str, Any]]:
        return cluster_queue_statuses(items)


class LocalQueueSerializer(KueueObjectSerializer):
    kind_name = "LocalQueue"
    spec = LocalQueueSpecSerializer()
    status = LocalQueueStatusSerializer(read_only=True)

    def statuses(self, items: Sequence[Any]) -> Mapping[int, Mapping[str, Any]]:
        return local_queue_statuses(items)


class WorkloadPriorityClassSerializer(KueueObjectSerializer):
    kind_name = "WorkloadPriorityClass"
    value = serializers.IntegerField(help_text="The priority of workloads of this class.")
    description = serializers.CharField(required=False, max_length=2048)


class ClusterObjectSerializer(KueueObjectSerializer):
    """One of the cluster's own objects (PriorityClass, LimitRange, RuntimeClass), printed
    as Kubernetes prints it; written through ``apply`` only."""

    apiVersion = serializers.CharField(read_only=True)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        raise serializers.ValidationError({"non_field_errors": [
            f"{self.kind_name} objects are written with apply (POST /api/v1/apply)"]})


class PriorityClassSerializer(ClusterObjectSerializer):
    kind_name = "PriorityClass"
    value = serializers.IntegerField(read_only=True, help_text="The priority of pods and "
                                     "Workloads naming this class.")
    globalDefault = serializers.BooleanField(read_only=True, required=False, help_text=(
        "The priority of pods and Workloads naming no class."))
    description = serializers.CharField(read_only=True, required=False)
    preemptionPolicy = serializers.CharField(read_only=True)


class LimitRangeItemSerializer(serializers.Serializer[Any]):
    type = serializers.CharField(help_text="Container, Pod or PersistentVolumeClaim.")
    default = serializers.DictField(child=serializers.CharField(), required=False)
    defaultRequest = serializers.DictField(child=serializers.CharField(), required=False)
    min = serializers.DictField(child=serializers.CharField(), required=False)
    max = serializers.DictField(child=serializers.CharField(), required=False)
    maxLimitRequestRatio = serializers.DictField(child=serializers.CharField(), required=False)


class LimitRangeSpecSerializer(serializers.Serializer[Any]):
    limits = LimitRangeItemSerializer(many=True)


class LimitRangeSerializer(ClusterObjectSerializer):
    kind_name = "LimitRange"
    spec = LimitRangeSpecSerializer(read_only=True)


class RuntimeClassOverheadSerializer(serializers.Serializer[Any]):
    podFixed = serializers.DictField(child=serializers.CharField(), help_text=(
        "Charged to every pod naming the class, on top of its containers' requests."))


class RuntimeClassSerializer(ClusterObjectSerializer):
    kind_name = "RuntimeClass"
    handler = serializers.CharField(read_only=True)
    overhead = RuntimeClassOverheadSerializer(read_only=True, required=False)
    scheduling = serializers.DictField(read_only=True, required=False)


class ApplyResultObjectSerializer(serializers.Serializer[Any]):
    kind = serializers.CharField()
    name = serializers.CharField()
    namespace = serializers.CharField(required=False)
    implicit = serializers.BooleanField(
        required=False, help_text="Created because another object names it (a cohort).")


class ApplyResultSerializer(serializers.Serializer[Any]):
    cluster = serializers.CharField()
    created = ApplyResultObjectSerializer(many=True)
    updated = ApplyResultObjectSerializer(many=True)
    unchanged = ApplyResultObjectSerializer(many=True)
    warnings = serializers.ListField(child=serializers.CharField())


class DocumentErrorsSerializer(serializers.Serializer[Any]):
    index = serializers.IntegerField(allow_null=True, help_text="Position in the input, from 0.")
    kind = serializers.CharField(allow_null=True)
    name = serializers.CharField(allow_null=True)
    namespace = serializers.CharField(allow_null=True)
    # The metaclass moves declared fields off the class, so this does not hide ``.errors``.
    errors = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()),
        help_text="Messages by field path.")


class ApplyErrorSerializer(serializers.Serializer[Any]):
    detail = serializers.CharField()
    documents = DocumentErrorsSerializer(many=True)
