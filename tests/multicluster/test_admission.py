"""Kueue's webhook endpoints (``POST /webhooks/<cluster>/<path>``, multicluster.admission):
AdmissionReview v1 in and out, per kind, and the configurations ``manage.py webhooks``
installs. The end to end path over HTTPS is ``test_admission_e2e.py``."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml
from django.core.management import CommandError, call_command
from django.test import Client

from multicluster import admission
from multicluster.models import Cluster
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload, WorkloadPriorityClass
from tests.fixtures.kube_api import FakeKubeAPI
from tests.fixtures.scheduling import job_manifest
from tests.fixtures.tls import make_serving_certificate

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
EXAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "kueue_examples" / "jobs"
GVK = {"Job": ("batch", "v1"), "JobSet": ("jobset.x-k8s.io", "v1alpha2"), "Pod": ("", "v1"),
       "RayJob": ("ray.io", "v1"), "Deployment": ("apps", "v1")}


@pytest.fixture
def cluster(kube_api: FakeKubeAPI, kube_cluster: Cluster,
            make_queue: Callable[..., ClusterQueue], settings: Any) -> Cluster:
    """The cluster's domain with LocalQueue ``default`` and WorkloadPriorityClass
    ``default``; Jobs, JobSets, RayJobs and Pods enabled."""
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        "batch/job", "jobset.x-k8s.io/jobset", "ray.io/rayjob", "pod"]}
    admission.forget_namespaces()
    kube_api.create_namespace(kube_api.namespace)
    cq = make_queue("cq", {"cpu": "10"}, namespace=kube_api.namespace, cluster=kube_cluster)
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="default", cluster_queue=cq)
    WorkloadPriorityClass.objects.create(cluster=kube_cluster, name="default", value=10)
    return kube_cluster


def review(obj: dict[str, Any], *, operation: str = "CREATE", namespace: str,
           old: dict[str, Any] | None = None, uid: str = "req-1") -> dict[str, Any]:
    group, version = GVK[obj["kind"]]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": "x"},
        "namespace": namespace, "operation": operation, "object": obj, "oldObject": old}}


def post(cluster: Cluster, path: str, body: Any, *,
         content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    response = Client().post(f"/webhooks/{cluster.name}/{path}", data=data,
                             content_type=content_type)
    return response.status_code, response.json()


def mutated(cluster: Cluster, path: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The object as the mutating webhook's JSONPatch leaves it."""
    status, answer = post(cluster, path, review(obj, namespace=namespace))
    assert status == 200
    response = answer["response"]
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert response["uid"] == "req-1"
    assert response["allowed"] is True
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(obj, json.loads(base64.b64decode(response["patch"])))


def validated(cluster: Cluster, path: str, obj: dict[str, Any], namespace: str,
              **options: Any) -> dict[str, Any]:
    status, answer = post(cluster, path, review(obj, namespace=namespace, **options))
    assert status == 200
    return answer["response"]


def job(name: str = "train", queue: str | None = None) -> dict[str, Any]:
    manifest = job_manifest(name, queue or "")
    if queue is None:
        del manifest["metadata"]["labels"][QUEUE]
    return manifest


def pod(**labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "restartPolicy": "Never"}}


def jobset() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "sample-jobset.yaml").read_text())


def rayjob() -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES / "ray-job-sample.yaml").read_text())


# --- mutating ------------------------------------------------------------------------------


def test_a_job_is_defaulted_and_suspended_by_a_jsonpatch(cluster: Cluster,
                                                         kube_api: FakeKubeAPI) -> None:
    before = list(kube_api.requests)
    result = mutated(cluster, "mutate-batch-v1-job", job(), kube_api.namespace)
    assert result["metadata"]["labels"] == {QUEUE: "default", PRIORITY: "default"}
    assert result["spec"]["suspend"] is True
    # Nothing to read from the cluster for that, and nothing written here.
    assert kube_api.requests[len(before):] == [], before
    assert (Job.objects.count(), Workload.objects.count()) == (0, 0)


def test_a_jobset_and_a_rayjob_are_suspended_with_their_own_queue(
        cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    result = mutated(cluster, "mutate-jobset-x-k8s-io-v1alpha2-jobset", jobset(),
                     kube_api.namespace)
    assert result["metadata"]["labels"] == {QUEUE: "user-queue", PRIORITY: "default"}
    assert result["spec"]["suspend"] is True
    ray = mutated(cluster, "mutate-ray-io-v1-rayjob", rayjob(), kube_api.namespace)
    assert ray["metadata"]["labels"][QUEUE] == "user-queue"
    assert ray["spec"]["suspend"] is True


def test_a_pod_is_gated_and_labelled_managed(cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    result = mutated(cluster, "mutate--v1-pod", pod(**{QUEUE: "lq"}), kube_api.namespace)
    assert result["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert result["metadata"]["labels"] == {QUEUE: "lq", PRIORITY: "default",
                                            "kueue.x-k8s.io/managed": "true"}


def test_without_default_queue_an_unlabelled_job_is_allowed_unchanged(
        cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    LocalQueue.objects.filter(name="default").delete()
    WorkloadPriorityClass.objects.all().delete()
    answer = validated(cluster, "mutate-batch-v1-job", job(), kube_api.namespace)
    assert answer == {"uid": "req-1", "allowed": True}


def test_the_namespace_is_read_from_the_cluster_when_a_selector_decides(
        cluster: Cluster, kube_api: FakeKubeAPI, settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MANAGE_JOBS_WITHOUT_QUEUE_NAME": True,
                         "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchLabels": {"kueue": "on"}}}
    LocalQueue.objects.filter(name="default").delete()
    assert "suspend" not in mutated(cluster, "mutate-batch-v1-job", job(),
                                    kube_api.namespace)["spec"]
    kube_api._update(kube_api._resource("namespaces"), "", kube_api.namespace,
                     lambda ns: ns["metadata"].update(labels={"kueue": "on"}))
    admission.forget_namespaces()
    assert mutated(cluster, "mutate-batch-v1-job", job(),
                   kube_api.namespace)["spec"]["suspend"] is True
    reads = kube_api.requests_to("GET", f"/api/v1/namespaces/{kube_api.namespace}")
    assert len(reads) == 2
    # Read at most every few seconds: a third object is decided from the cache.
    mutated(cluster, "mutate-batch-v1-job", job("second"), kube_api.namespace)
    assert len(kube_api.requests_to("GET", f"/api/v1/namespaces/{kube_api.namespace}")) == 2


def test_an_unreadable_namespace_is_a_refusal(cluster: Cluster, kube_api: FakeKubeAPI,
                                              settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MANAGE_JOBS_WITHOUT_QUEUE_NAME": True,
                         "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchLabels": {"kueue": "on"}}}
    kube_api.refuse_connections()
    answer = validated(cluster, "mutate-batch-v1-job", job(), kube_api.namespace)
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 403
    assert answer["status"]["message"].startswith(
        f"failed to get namespace {kube_api.namespace!r} from cluster 'kube-worker': ")
    assert "patch" not in answer


# --- validating ----------------------------------------------------------------------------


def test_a_job_with_an_invalid_queue_name_is_refused_naming_the_field(
        cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    answer = validated(cluster, "validate-batch-v1-job", job(queue="Not_A_Name"),
                       kube_api.namespace)
    assert answer["allowed"] is False
    assert answer["status"]["reason"] == "Forbidden"
    assert answer["status"]["message"].startswith(
        "metadata.labels[kueue.x-k8s.io/queue-name]: ")


def test_a_valid_job_jobset_rayjob_and_pod_are_allowed(cluster: Cluster,
                                                       kube_api: FakeKubeAPI) -> None:
    for path, obj in (("validate-batch-v1-job", job(queue="default")),
                      ("validate-jobset-x-k8s-io-v1alpha2-jobset", jobset()),
                      ("validate-ray-io-v1-rayjob", rayjob()),
                      ("validate--v1-pod", pod(**{QUEUE: "lq"}))):
        assert validated(cluster, path, obj, kube_api.namespace) == {
            "uid": "req-1", "allowed": True}, path


def test_a_pod_with_a_wrong_managed_label_is_refused(cluster: Cluster,
                                                     kube_api: FakeKubeAPI) -> None:
    answer = validated(cluster, "validate--v1-pod",
                       pod(**{QUEUE: "lq", "kueue.x-k8s.io/managed": "yes"}),
                       kube_api.namespace)
    assert answer["status"]["message"] == (
        "metadata.labels[kueue.x-k8s.io/managed]: managed label value can only be 'true'")


def test_a_running_jobsets_queue_is_immutable_and_its_class_cannot_be_added(
        cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    old = jobset()
    old["spec"]["suspend"] = False
    new = yaml.safe_load(json.dumps(old))
    new["metadata"]["labels"] = {QUEUE: "other", PRIORITY: "default"}
    answer = validated(cluster, "validate-jobset-x-k8s-io-v1alpha2-jobset", new,
                       kube_api.namespace, operation="UPDATE", old=old)
    assert answer["status"]["message"] == (
        '[metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is '
        'immutable, metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: '
        '"default": WorkloadPriorityClass cannot be added to a non-suspended workload]')


def test_a_rayjobs_priority_class_can_never_be_removed(cluster: Cluster,
                                                       kube_api: FakeKubeAPI) -> None:
    old = rayjob()
    old["metadata"]["labels"][PRIORITY] = "default"
    old["spec"]["suspend"] = True
    new = rayjob()
    new["spec"]["suspend"] = True
    answer = validated(cluster, "validate-ray-io-v1-rayjob", new, kube_api.namespace,
                       operation="UPDATE", old=old)
    assert answer["status"]["message"] == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "": '
        "WorkloadPriorityClass cannot be removed from a workload")


def test_a_delete_is_allowed_without_looking(cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    body = review(job(), namespace=kube_api.namespace, operation="DELETE")
    body["request"]["object"] = None
    assert post(cluster, "validate-batch-v1-job", body)[1]["response"] == {
        "uid": "req-1", "allowed": True}


# --- bad requests --------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "the body is not JSON"),
    ([], "the body must be an AdmissionReview object"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}},
     "apiVersion and kind must be admission.k8s.io/v1 AdmissionReview, not "
     "'admission.k8s.io/v1beta1' 'AdmissionReview'"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
     "request: must be an object"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}},
     "request.uid: is required"),
])
def test_a_body_that_is_no_admission_review_gets_an_errored_review(
        cluster: Cluster, body: Any, message: str) -> None:
    status, answer = post(cluster, "mutate-batch-v1-job", body)
    assert status == 200
    assert answer["response"] == {"uid": "", "allowed": False,
                                  "status": {"code": 400, "message": message}}


def test_a_review_of_another_kind_or_without_its_object_is_errored(
        cluster: Cluster, kube_api: FakeKubeAPI) -> None:
    status, answer = post(cluster, "mutate-batch-v1-job",
                          review(pod(), namespace=kube_api.namespace))
    assert answer["response"]["status"] == {
        "code": 400,
        "message": "request.kind: this webhook takes batch/v1 Job, not /v1 Pod"}
    body = review(job(), namespace=kube_api.namespace, operation="UPDATE")
    assert post(cluster, "validate-batch-v1-job", body)[1]["response"]["status"][
        "message"] == "request.oldObject: must be an object on UPDATE"
    assert post(cluster, "validate-batch-v1-job", "{}", content_type="text/plain")[1][
        "response"]["status"]["message"] == "contentType=text/plain, expected application/json"


def test_unknown_clusters_and_paths_are_not_found(cluster: Cluster, manager: Cluster) -> None:
    assert Client().post("/webhooks/nowhere/mutate-batch-v1-job", data="{}",
                         content_type="application/json").status_code == 404
    # The simulated manager has no webhooks; a disabled kind has none either.
    assert Client().post(f"/webhooks/{manager.name}/mutate-batch-v1-job", data="{}",
                         content_type="application/json").status_code == 404
    response = Client().post(f"/webhooks/{cluster.name}/mutate-kubeflow-org-v1-tfjob",
                             data="{}", content_type="application/json")
    assert response.status_code == 404
    assert response.json()["message"] == (
        "no webhook 'mutate-kubeflow-org-v1-tfjob': not one of an enabled job kind")
    assert Client().get(f"/webhooks/{cluster.name}/mutate-batch-v1-job").status_code == 405


# --- the configurations: manage.py webhooks ------------------------------------------------


def install(cluster: Cluster, tmp_path: Path, url: str = "https://kueueweb.example:8443",
            **kwargs: Any) -> str:
    from io import StringIO

    certificate = make_serving_certificate(tmp_path / "tls", "kueueweb.example")
    out = StringIO()
    call_command("webhooks", "install", "--cluster", cluster.name, "--url", url,
                 "--ca-bundle", str(kwargs.get("ca_file", certificate.ca_file)), stdout=out)
    return out.getvalue()


def test_install_creates_both_configurations_with_one_webhook_per_enabled_kind(
        cluster: Cluster, kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    out = install(cluster, tmp_path)
    assert out.splitlines() == [
        "MutatingWebhookConfiguration kueueweb-mutating-webhook-configuration created "
        "(mjob.kb.io, mjobset.kb.io, mpod.kb.io, mrayjob.kb.io)",
        "ValidatingWebhookConfiguration kueueweb-validating-webhook-configuration created "
        "(vjob.kb.io, vjobset.kb.io, vpod.kb.io, vrayjob.kb.io)"]
    mutating = kube_api.get("mutatingwebhookconfigurations", "",
                            "kueueweb-mutating-webhook-configuration")
    validating = kube_api.get("validatingwebhookconfigurations", "",
                              "kueueweb-validating-webhook-configuration")
    ca = (tmp_path / "tls" / "ca.pem").read_bytes()
    not_system = {"matchExpressions": [{"key": "kubernetes.io/metadata.name",
                                        "operator": "NotIn",
                                        "values": ["kube-system", "kueue-system"]}]}
    assert mutating["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kueueweb"}
    assert mutating["webhooks"][0] == {
        "name": "mjob.kb.io", "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://kueueweb.example:8443/webhooks/kube-worker/"
                                "mutate-batch-v1-job",
                         "caBundle": base64.b64encode(ca).decode()},
        "failurePolicy": "Fail", "sideEffects": "None",
        "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"],
                   "resources": ["jobs"]}],
        "namespaceSelector": not_system}
    assert validating["webhooks"][2]["name"] == "vpod.kb.io"
    assert validating["webhooks"][2]["rules"] == [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
        "resources": ["pods"]}]
    assert validating["webhooks"][2]["clientConfig"]["url"].endswith(
        "/webhooks/kube-worker/validate--v1-pod")


def test_install_again_updates_and_takes_the_managed_namespace_selector(
        cluster: Cluster, kube_api: FakeKubeAPI, tmp_path: Path, settings: Any) -> None:
    install(cluster, tmp_path)
    selector = {"matchLabels": {"kueue": "on"}}
    settings.KUEUEWEB = {**settings.KUEUEWEB, "MANAGED_JOBS_NAMESPACE_SELECTOR": selector}
    out = install(cluster, tmp_path, url="https://other.example/")
    assert "kueueweb-mutating-webhook-configuration updated" in out
    mutating = kube_api.get("mutatingwebhookconfigurations", "",
                            "kueueweb-mutating-webhook-configuration")
    by_name = {h["name"]: h for h in mutating["webhooks"]}
    assert by_name["mpod.kb.io"]["namespaceSelector"] == selector
    assert by_name["mjob.kb.io"]["namespaceSelector"]["matchExpressions"][0]["operator"] == (
        "NotIn")
    assert by_name["mjob.kb.io"]["clientConfig"]["url"] == (
        "https://other.example/webhooks/kube-worker/mutate-batch-v1-job")
    assert len(kube_api.objects("mutatingwebhookconfigurations")) == 1


def test_remove_deletes_both_configurations(cluster: Cluster, kube_api: FakeKubeAPI,
                                            tmp_path: Path) -> None:
    from io import StringIO

    install(cluster, tmp_path)
    out = StringIO()
    call_command("webhooks", "remove", "--cluster", cluster.name, stdout=out)
    assert out.getvalue().splitlines() == [
        "MutatingWebhookConfiguration kueueweb-mutating-webhook-configuration deleted",
        "ValidatingWebhookConfiguration kueueweb-validating-webhook-configuration deleted"]
    assert kube_api.objects("mutatingwebhookconfigurations") == []
    assert kube_api.objects("validatingwebhookconfigurations") == []
    out = StringIO()
    call_command("webhooks", "remove", "--cluster", cluster.name, stdout=out)
    assert "was not there" in out.getvalue()


@pytest.mark.parametrize(("url", "message"), [
    ("http://kueueweb.example:8000", "url: must start with https:// (the API server calls "
     "webhooks over HTTPS only), not 'http://kueueweb.example:8000'"),
    ("https://kueueweb.example?x=1", "url: may not have a query, a fragment or user info"),
])
def test_install_refuses_a_url_the_api_server_would_not_call(
        cluster: Cluster, kube_api: FakeKubeAPI, tmp_path: Path, url: str,
        message: str) -> None:
    with pytest.raises(CommandError, match="^" + message.replace("?", r"\?") .replace(
            "(", r"\(").replace(")", r"\)") + "$"):
        install(cluster, tmp_path, url=url)
    assert kube_api.objects("mutatingwebhookconfigurations") == []


def test_install_refuses_a_bad_ca_bundle_an_unknown_cluster_and_a_simulated_one(
        cluster: Cluster, manager: Cluster, kube_api: FakeKubeAPI, tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    with pytest.raises(CommandError, match="^ca-bundle: is not a PEM certificate"):
        install(cluster, tmp_path, ca_file=bad)
    with pytest.raises(CommandError, match="^--ca-bundle: cannot read"):
        install(cluster, tmp_path, ca_file=tmp_path / "missing.pem")
    with pytest.raises(CommandError, match="^--cluster: there is no cluster 'nowhere'$"):
        call_command("webhooks", "remove", "--cluster", "nowhere")
    with pytest.raises(CommandError, match="is not a Kubernetes cluster"):
        install(manager, tmp_path)
    assert kube_api.objects("mutatingwebhookconfigurations") == []


def test_an_unreachable_cluster_is_reported(cluster: Cluster, kube_api: FakeKubeAPI,
                                            tmp_path: Path) -> None:
    kube_api.refuse_connections()
    with pytest.raises(CommandError, match=(
            "^MutatingWebhookConfiguration kueueweb-mutating-webhook-configuration on "
            "cluster 'kube-worker': ")):
        install(cluster, tmp_path)
