"""``PATCH /api/v1/namespaces/{ns}/workloads/{name}/status``: an External MultiKueue
dispatcher's ``nominatedClusterNames``, the fields it refuses, and who may write it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster import dispatch
from multicluster.choices import ClusterRole, Dispatcher
from multicluster.models import Cluster, Dispatch, MultiKueueConfig
from scheduling.choices import WorkloadPhase
from scheduling.models import Job, Workload
from scheduling.scheduler import admission

pytestmark = pytest.mark.django_db

URL = "/api/v1/namespaces/research/workloads/{name}/status"


@pytest.fixture
def external_hub(manager: Cluster) -> Workload:
    """The demo hub with an External dispatcher; dispatched-analysis holds quota and waits
    for its MultiKueue check (Pending), nominated nowhere."""
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    Job.objects.exclude(name="dispatched-analysis").delete()
    Workload.objects.exclude(job__name="dispatched-analysis").delete()
    MultiKueueConfig.objects.filter(name="multikueue-demo").update(dispatcher=Dispatcher.EXTERNAL)
    now = timezone.now()
    admission.run_admission_cycle(manager.pk, now=now)
    dispatch.sync_dispatch(manager.pk, now=now)
    wl = _hub_workload()
    assert wl.phase == WorkloadPhase.QUOTA_RESERVED
    assert [s["state"] for s in wl.admission_check_states] == ["Pending"]
    assert wl.nominated_cluster_names == []
    assert not Dispatch.objects.exists()
    return wl


def _hub_workload() -> Workload:
    return Workload.objects.get(job__name="dispatched-analysis", cluster__role=ClusterRole.MANAGER)


@pytest.fixture
def research_operator(make_user: Callable[..., User]) -> APIClient:
    client = APIClient()
    client.force_authenticate(make_user("rita", "operator", namespaces=("research",)))
    return client


def test_operator_nominates_a_worker_and_the_hub_dispatches_there(
    external_hub: Workload, research_operator: APIClient, manager: Cluster,
) -> None:
    response = research_operator.patch(
        URL.format(name=external_hub.name), {"status": {"nominatedClusterNames": ["worker-2"]}},
        format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["kind"] == "Workload"
    assert body["metadata"]["name"] == external_hub.name
    assert body["status"]["nominatedClusterNames"] == ["worker-2"]
    assert _hub_workload().nominated_cluster_names == ["worker-2"]
    # The next dispatch pass creates the copy on that worker only.
    dispatch.sync_dispatch(manager.pk, now=timezone.now() + timedelta(seconds=1))
    assert list(Dispatch.objects.values_list("worker__name", flat=True)) == ["worker-2"]


def test_merge_patch_media_type_and_null_clears(
    external_hub: Workload, research_operator: APIClient,
) -> None:
    url = URL.format(name=external_hub.name)
    first = research_operator.patch(
        url, b'{"status": {"nominatedClusterNames": ["worker-1", "worker-2"]}}',
        content_type="application/merge-patch+json")
    assert first.status_code == 200, first.json()
    assert _hub_workload().nominated_cluster_names == ["worker-1", "worker-2"]

    cleared = research_operator.patch(url, b'{"status": {"nominatedClusterNames": null}}',
                                      content_type="application/merge-patch+json")
    assert cleared.status_code == 200, cleared.json()
    assert _hub_workload().nominated_cluster_names == []


def test_unknown_cluster_is_refused_naming_the_field(
    external_hub: Workload, research_operator: APIClient,
) -> None:
    response = research_operator.patch(
        URL.format(name=external_hub.name), {"status": {"nominatedClusterNames": ["worker-9"]}},
        format="json")

    assert response.status_code == 400
    errors = response.json()
    assert list(errors) == ["status.nominatedClusterNames"]
    assert "worker-9" in " ".join(errors["status.nominatedClusterNames"])
    assert _hub_workload().nominated_cluster_names == []


@pytest.mark.parametrize("field", ["clusterName", "conditions", "admission"])
def test_other_status_fields_are_refused_naming_them(
    external_hub: Workload, research_operator: APIClient, field: str,
) -> None:
    response = research_operator.patch(
        URL.format(name=external_hub.name),
        {"status": {field: "worker-1", "nominatedClusterNames": ["worker-1"]}}, format="json")

    assert response.status_code == 400
    assert response.json() == {f"status.{field}": ["cannot be set through the API"]}
    wl = _hub_workload()
    assert wl.nominated_cluster_names == []  # nothing of the patch applied
    assert wl.cluster_name == ""


def test_spec_is_not_changed_through_the_status_subresource(
    external_hub: Workload, research_operator: APIClient,
) -> None:
    response = research_operator.patch(
        URL.format(name=external_hub.name), {"spec": {"active": False}, "status": {}},
        format="json")

    assert response.status_code == 400
    assert "spec" in response.json()
    assert _hub_workload().active is True


def test_viewer_and_operator_of_another_namespace_are_refused(
    external_hub: Workload, viewer_client: APIClient, operator_client: APIClient,
) -> None:
    patch = {"status": {"nominatedClusterNames": ["worker-1"]}}
    url = URL.format(name=external_hub.name)

    assert viewer_client.patch(url, patch, format="json").status_code == 403
    assert operator_client.patch(url, patch, format="json").status_code == 403  # team-a only
    assert _hub_workload().nominated_cluster_names == []


def test_admission_checks_still_need_an_admin(
    external_hub: Workload, research_operator: APIClient,
) -> None:
    response = research_operator.patch(
        URL.format(name=external_hub.name),
        {"status": {"admissionChecks": [{"name": "multikueue-demo", "state": "Ready"}]}},
        format="json")

    assert response.status_code == 403
    assert [s["state"] for s in _hub_workload().admission_check_states] == ["Pending"]


def test_missing_workload_is_404(external_hub: Workload, research_operator: APIClient) -> None:
    response = research_operator.patch(
        URL.format(name="no-such-workload"), {"status": {"nominatedClusterNames": []}},
        format="json")

    assert response.status_code == 404


def test_workload_without_multikueue_check_is_refused(
    manager: Cluster, make_queue, make_workload, admin_client_api: APIClient,
) -> None:
    make_queue("cq", {"cpu": "2"})
    make_workload("plain", "lq-cq", {"cpu": "1"})

    response = admin_client_api.patch(
        "/api/v1/namespaces/ns/workloads/plain/status",
        {"status": {"nominatedClusterNames": ["worker-1"]}}, format="json")

    assert response.status_code == 400
    assert "status.nominatedClusterNames" in response.json()


def test_status_patch_is_in_the_openapi_schema(admin_client_api: APIClient) -> None:
    schema = admin_client_api.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/v1/namespaces/{namespace}/workloads/{name}/status/"]["patch"]
    content = operation["requestBody"]["content"]
    assert set(content) == {"application/merge-patch+json", "application/json"}
    assert content["application/merge-patch+json"]["schema"] == {
        "$ref": "#/components/schemas/PatchedWorkloadStatusPatchRequest"}
    fields = schema["components"]["schemas"]["WorkloadStatusFieldsPatchRequest"]["properties"]
    assert fields["nominatedClusterNames"]["type"] == "array"
    assert "admissionChecks" in fields
    assert set(operation["responses"]) >= {"200", "400", "403", "404"}


def test_a_check_controller_sets_pod_set_updates_and_bad_ones_are_refused_naming_the_field(
    external_hub: Workload, admin_client_api: APIClient,
) -> None:
    url = URL.format(name=external_hub.name)
    update = {"name": "main", "annotations": {"example.com/booked": "yes"},
              "nodeSelector": {"zone": "a"}}
    bad = admin_client_api.patch(url, {"status": {"admissionChecks": [
        {"name": "multikueue-demo", "state": "Ready",
         "podSetUpdates": [{**update, "name": "no-such-pod-set"}]}]}}, format="json")

    assert bad.status_code == 400
    assert bad.json() == {"status.admissionChecks[0].podSetUpdates[0].name": [
        "must name a pod set of the workload, not 'no-such-pod-set'"]}
    assert [s["state"] for s in _hub_workload().admission_check_states] == ["Pending"]

    good = admin_client_api.patch(url, {"status": {"admissionChecks": [
        {"name": "multikueue-demo", "state": "Ready", "podSetUpdates": [update]}]}},
        format="json")

    assert good.status_code == 200
    state = _hub_workload().admission_check_states[0]
    assert (state["state"], state["podSetUpdates"]) == ("Ready", [update])
    # Once Ready, the pods may carry them: they stay as they are.
    changed = admin_client_api.patch(url, {"status": {"admissionChecks": [
        {"name": "multikueue-demo", "state": "Ready",
         "podSetUpdates": [{**update, "nodeSelector": {"zone": "b"}}]}]}}, format="json")
    assert changed.status_code == 400
    assert changed.json() == {"status.admissionChecks[0].podSetUpdates": [
        "field is immutable while the check is Ready"]}
