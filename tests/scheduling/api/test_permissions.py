"""Who may do what on the quota endpoints: viewers read, only admins write (operators
included, even in their own namespaces), anonymous requests are refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from rest_framework.test import APIClient

from multicluster.models import Cluster
from scheduling.manifests.apply import apply_manifests, export_manifests

V2 = "kueue.x-k8s.io/v1beta2"


@pytest.fixture
def setup(manager: Cluster) -> Cluster:
    def doc(kind: str, name: str, **rest: Any) -> dict[str, Any]:
        metadata = {"name": name, **({"namespace": rest.pop("namespace")}
                                     if "namespace" in rest else {})}
        return {"apiVersion": V2, "kind": kind, "metadata": metadata, **rest}

    apply_manifests([
        doc("ResourceFlavor", "default"), doc("ResourceFlavor", "unused"),
        doc("Cohort", "lonely"),
        doc("ClusterQueue", "team-a", spec={}), doc("ClusterQueue", "spare", spec={}),
        doc("LocalQueue", "lq", namespace="team-a", spec={"clusterQueue": "team-a"}),
        doc("WorkloadPriorityClass", "low", value=1),
    ])
    return manager


READS = [
    "/api/v1/resourceflavors/", "/api/v1/resourceflavors/default/",
    "/api/v1/cohorts/", "/api/v1/cohorts/lonely/",
    "/api/v1/clusterqueues/", "/api/v1/clusterqueues/team-a/",
    "/api/v1/workloadpriorityclasses/", "/api/v1/workloadpriorityclasses/low/",
    "/api/v1/localqueues/", "/api/v1/namespaces/team-a/localqueues/",
    "/api/v1/namespaces/team-a/localqueues/lq/",
    "/api/v1/export", "/api/schema/",
]


@dataclass(frozen=True)
class Write:
    name: str
    method: str
    url: str
    body: Any = None
    want_admin: int = 200


WRITES = [
    Write("create flavor", "post", "/api/v1/resourceflavors/", {"metadata": {"name": "new"}}, 201),
    Write("replace flavor", "put", "/api/v1/resourceflavors/unused/",
          {"metadata": {"name": "unused"}, "spec": {"nodeLabels": {"a": "b"}}}),
    Write("patch flavor", "patch", "/api/v1/resourceflavors/unused/",
          {"spec": {"nodeLabels": {"a": "b"}}}),
    Write("delete flavor", "delete", "/api/v1/resourceflavors/unused/", want_admin=204),
    Write("create cohort", "post", "/api/v1/cohorts/", {"metadata": {"name": "new"}}, 201),
    Write("replace cohort", "put", "/api/v1/cohorts/lonely/",
          {"metadata": {"name": "lonely"}, "spec": {"fairSharing": {"weight": "2"}}}),
    Write("patch cohort", "patch", "/api/v1/cohorts/lonely/",
          {"spec": {"fairSharing": {"weight": "2"}}}),
    Write("delete cohort", "delete", "/api/v1/cohorts/lonely/", want_admin=204),
    Write("create cluster queue", "post", "/api/v1/clusterqueues/",
          {"metadata": {"name": "new"}, "spec": {}}, 201),
    Write("replace cluster queue", "put", "/api/v1/clusterqueues/spare/",
          {"metadata": {"name": "spare"}, "spec": {"stopPolicy": "Hold"}}),
    Write("patch cluster queue", "patch", "/api/v1/clusterqueues/spare/",
          {"spec": {"stopPolicy": "Hold"}}),
    Write("delete cluster queue", "delete", "/api/v1/clusterqueues/spare/", want_admin=204),
    Write("create local queue", "post", "/api/v1/namespaces/team-a/localqueues/",
          {"metadata": {"name": "new"}, "spec": {"clusterQueue": "team-a"}}, 201),
    Write("replace local queue", "put", "/api/v1/namespaces/team-a/localqueues/lq/",
          {"metadata": {"name": "lq"}, "spec": {"clusterQueue": "team-a", "stopPolicy": "Hold"}}),
    Write("patch local queue", "patch", "/api/v1/namespaces/team-a/localqueues/lq/",
          {"spec": {"stopPolicy": "Hold"}}),
    Write("delete local queue", "delete", "/api/v1/namespaces/team-a/localqueues/lq/",
          want_admin=204),
    Write("create priority class", "post", "/api/v1/workloadpriorityclasses/",
          {"metadata": {"name": "new"}, "value": 5}, 201),
    Write("replace priority class", "put", "/api/v1/workloadpriorityclasses/low/",
          {"metadata": {"name": "low"}, "value": 2}),
    Write("patch priority class", "patch", "/api/v1/workloadpriorityclasses/low/", {"value": 2}),
    Write("delete priority class", "delete", "/api/v1/workloadpriorityclasses/low/",
          want_admin=204),
    Write("apply", "post", "/api/v1/apply",
          [{"apiVersion": V2, "kind": "ResourceFlavor", "metadata": {"name": "applied"}}]),
]


def send(client: APIClient, write: Write) -> Any:
    return getattr(client, write.method)(write.url, write.body, format="json")


def state() -> list[Any]:
    return export_manifests()


@pytest.mark.parametrize("url", READS)
def test_anonymous_requests_are_refused(setup: Cluster, anon_client: APIClient, url: str) -> None:
    assert anon_client.get(url).status_code == 401


@pytest.mark.parametrize("url", READS)
@pytest.mark.parametrize("role", ["viewer_client", "operator_client", "admin_client_api"])
def test_every_role_reads(setup: Cluster, role: str, url: str,
                          request: pytest.FixtureRequest) -> None:
    client: APIClient = request.getfixturevalue(role)

    assert client.get(url).status_code == 200


@pytest.mark.parametrize("write", WRITES, ids=lambda write: write.name)
@pytest.mark.parametrize(
    ("role", "want"),
    [("anon_client", 401), ("viewer_client", 403), ("operator_client", 403)],
)
def test_only_admins_write(setup: Cluster, write: Write, role: str, want: int,
                           request: pytest.FixtureRequest) -> None:
    client: APIClient = request.getfixturevalue(role)
    before = state()

    response = send(client, write)

    assert response.status_code == want
    assert state() == before


@pytest.mark.parametrize("write", WRITES, ids=lambda write: write.name)
def test_admins_write(setup: Cluster, write: Write, admin_client_api: APIClient) -> None:
    before = state()

    response = send(admin_client_api, write)

    assert response.status_code == write.want_admin
    assert state() != before
