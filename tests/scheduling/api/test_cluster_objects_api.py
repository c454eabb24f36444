"""The cluster's own PriorityClasses, LimitRanges and RuntimeClasses over REST: applied with
``POST /api/v1/apply``, listed and read as Kubernetes prints them, never written one by one."""

from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling.models import LimitRange, PriorityClass

pytestmark = pytest.mark.django_db

MANIFESTS = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
globalDefault: true
---
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: team-a}
spec:
  limits:
  - type: Container
    defaultRequest: {cpu: 500m}
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata
overhead: {podFixed: {cpu: 250m}}
"""


def test_apply_then_list_and_read(manager: Cluster, admin_client_api: APIClient,
                                  viewer_client: APIClient) -> None:
    response = admin_client_api.post("/api/v1/apply", MANIFESTS, content_type="application/yaml")
    assert response.status_code == 200, response.content
    assert response.json()["created"] == [
        {"kind": "PriorityClass", "name": "high"},
        {"kind": "LimitRange", "name": "defaults", "namespace": "team-a"},
        {"kind": "RuntimeClass", "name": "kata"},
    ]

    listed = viewer_client.get("/api/v1/priorityclasses/").json()
    assert [(item["apiVersion"], item["metadata"]["name"], item["value"], item["globalDefault"])
            for item in listed["results"]] == [("scheduling.k8s.io/v1", "high", 1000, True)]
    limit_range = viewer_client.get("/api/v1/namespaces/team-a/limitranges/defaults").json()
    assert (limit_range["apiVersion"], limit_range["spec"]) == (
        "v1", {"limits": [{"type": "Container", "defaultRequest": {"cpu": "500m"}}]})
    assert [item["metadata"]["namespace"] for item in
            viewer_client.get("/api/v1/limitranges/").json()["results"]] == ["team-a"]
    assert viewer_client.get("/api/v1/namespaces/other/limitranges/").json()["results"] == []
    runtime = viewer_client.get("/api/v1/runtimeclasses/kata/").json()
    assert (runtime["handler"], runtime["overhead"]) == ("kata", {"podFixed": {"cpu": "250m"}})
    missing = viewer_client.get("/api/v1/runtimeclasses/gvisor")
    assert missing.status_code == 404
    assert missing.json()["detail"] == 'runtimeclasses.node.k8s.io "gvisor" not found'


def test_they_are_written_with_apply_only(manager: Cluster, admin_client_api: APIClient) -> None:
    body = json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                       "metadata": {"name": "high"}, "value": 1})
    assert admin_client_api.post("/api/v1/priorityclasses/", body,
                                 content_type="application/json").status_code == 405
    assert not PriorityClass.objects.exists()


def test_apply_to_a_kubernetes_cluster_is_refused(manager: Cluster,
                                                  admin_client_api: APIClient) -> None:
    Cluster.objects.create(name="kube-1", role="worker", connection_type="kubernetes")
    response = admin_client_api.post("/api/v1/apply?cluster=kube-1", MANIFESTS,
                                     content_type="application/yaml")
    assert response.status_code == 400
    assert response.json()["detail"] == (
        'documents[0] (PriorityClass "high"): cluster "kube-1" has a kubernetes connection: '
        "its priorityclasses are the cluster's own, read from it; only a simulated cluster's "
        "priorityclasses can be applied")
    assert not PriorityClass.objects.exists()
    assert not LimitRange.objects.exists()


def test_export_lists_them_after_the_kueue_kinds(manager: Cluster,
                                                 admin_client_api: APIClient) -> None:
    admin_client_api.post("/api/v1/apply", MANIFESTS, content_type="application/yaml")
    exported = admin_client_api.get("/api/v1/export", HTTP_ACCEPT="application/json").json()
    kinds = [item["kind"] for item in exported["items"]]
    assert kinds[-3:] == ["PriorityClass", "LimitRange", "RuntimeClass"]
