"""ProvisioningRequestConfigs over REST, in Kueue's shape: defaults, validation naming the
field, and a check that becomes Active once its config exists."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster import provisioning
from multicluster.models import AdmissionCheck, Cluster, ProvisioningRequestConfig
from multicluster.simulated.provisioner import SimulatedRequests
from scheduling.manifests.apply import apply_manifests
from scheduling.workload import conditions as cond

V2 = "kueue.x-k8s.io/v1beta2"
URL = "/api/v1/provisioningrequestconfigs/"

pytestmark = pytest.mark.django_db


def test_create_defaults_the_retry_strategy_and_the_check_becomes_active(
    manager: Cluster, admin_client_api: APIClient,
) -> None:
    apply_manifests([{"apiVersion": V2, "kind": "AdmissionCheck", "metadata": {"name": "prov"},
                      "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request",
                               "parameters": {"apiGroup": "kueue.x-k8s.io",
                                              "kind": "ProvisioningRequestConfig",
                                              "name": "gpu"}}}])
    now = timezone.now()
    provisioning.sync_provisioning(manager.pk, SimulatedRequests(manager, now=now), now=now)
    assert cond.find(AdmissionCheck.objects.get(name="prov").conditions,
                     "Active")["reason"] == "BadParametersRef"  # type: ignore[index]

    response = admin_client_api.post(URL, {
        "metadata": {"name": "gpu"},
        "spec": {"provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                 "managedResources": ["nvidia.com/gpu"],
                 "retryStrategy": {"backoffLimitCount": 1},
                 "podSetUpdates": {"nodeSelector": [
                     {"key": "cloud.example.com/pool", "valueFromProvisioningClassDetail":
                      "poolName"}]}}}, format="json")

    assert response.status_code == 201
    assert response.json()["spec"] == {
        "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
        "managedResources": ["nvidia.com/gpu"],
        "retryStrategy": {"backoffLimitCount": 1, "backoffBaseSeconds": 60,
                          "backoffMaxSeconds": 1800},
        "podSetUpdates": {"nodeSelector": [{"key": "cloud.example.com/pool",
                                            "valueFromProvisioningClassDetail": "poolName"}]},
    }
    later = now + timedelta(seconds=1)
    provisioning.sync_provisioning(manager.pk, SimulatedRequests(manager, now=later), now=later)
    active = cond.find(AdmissionCheck.objects.get(name="prov").conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"]) == ("True", "Active")


def test_invalid_configs_are_refused_naming_each_field(
    manager: Cluster, admin_client_api: APIClient,
) -> None:
    response = admin_client_api.post(URL, {
        "metadata": {"name": "bad"},
        "spec": {"provisioningClassName": "Not_A_Class",
                 "parameters": {"long": "x" * 256},
                 "managedResources": ["cpu", "cpu"],
                 "retryStrategy": {"backoffLimitCount": "three"},
                 "podSetUpdates": {"nodeSelector": [{"key": "bad key!"}]},
                 "podSetMergePolicy": "Anything"}}, format="json")

    assert response.status_code == 400
    errors = response.json()
    assert sorted(errors) == [
        "spec.managedResources[1]", "spec.parameters.long",
        "spec.podSetMergePolicy", "spec.podSetUpdates.nodeSelector[0].key",
        "spec.podSetUpdates.nodeSelector[0].valueFromProvisioningClassDetail",
        "spec.provisioningClassName", "spec.retryStrategy.backoffLimitCount"]
    assert errors["spec.podSetMergePolicy"] == [
        'Unsupported value: "Anything": supported values: "IdenticalPodTemplates", '
        '"IdenticalWorkloadSchedulingRequirements"']
    assert not ProvisioningRequestConfig.objects.exists()

    missing = admin_client_api.post(URL, {"metadata": {"name": "empty"}, "spec": {}},
                                    format="json")
    assert (missing.status_code, missing.json()) == (
        400, {"spec.provisioningClassName": ["Required value"]})
