"""Kueue's webhooks end to end: installed with ``manage.py webhooks`` on the Kubernetes API
test server, which calls kueueweb over HTTPS (daphne's ssl endpoint, verified with the CA
bundle installed) for objects created and changed with the official ``kubernetes`` client,
as ``kubectl`` would."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command

from multicluster.models import Cluster
from scheduling.models import ClusterQueue, LocalQueue, WorkloadPriorityClass
from tests.fixtures.kube_api import FakeKubeAPI
from tests.fixtures.scheduling import job_manifest
from tests.fixtures.tls import HttpsServer

pytestmark = pytest.mark.slow

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"


@pytest.fixture
def installed(https_kueueweb: HttpsServer, kube_api: FakeKubeAPI, kube_cluster: Cluster,
              make_queue: Callable[..., ClusterQueue], settings: Any) -> FakeKubeAPI:
    """The default LocalQueue and WorkloadPriorityClass in the cluster's domain, and the
    webhooks of Jobs, JobSets and Pods installed, calling kueueweb over HTTPS."""
    kube_api.require_fake()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        "batch/job", "jobset.x-k8s.io/jobset", "pod"]}
    kube_api.create_namespace(kube_api.namespace)
    kube_api.install_jobset_crd()
    cq = make_queue("cq", {"cpu": "10"}, namespace=kube_api.namespace, cluster=kube_cluster)
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="default", cluster_queue=cq)
    WorkloadPriorityClass.objects.create(cluster=kube_cluster, name="default", value=100)
    call_command("webhooks", "install", "--cluster", kube_cluster.name,
                 "--url", https_kueueweb.url,
                 "--ca-bundle", str(https_kueueweb.certificate.ca_file))
    return kube_api


def _pod_spec() -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}}}],
            "restartPolicy": "Never"}


def test_objects_created_with_kubectl_come_back_suspended_with_kueues_defaults(
        installed: FakeKubeAPI, kubectl_api: Any) -> None:
    from kubernetes import client as k8s  # noqa: TID251 - the user's client

    ns = installed.namespace
    body = job_manifest("train", "ignored")
    del body["metadata"]["labels"][QUEUE]
    job = k8s.BatchV1Api(kubectl_api).create_namespaced_job(ns, body)
    assert job.spec.suspend is True
    assert job.metadata.labels[QUEUE] == "default"
    assert job.metadata.labels[PRIORITY] == "default"

    jobset = k8s.CustomObjectsApi(kubectl_api).create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", ns, "jobsets", {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "js", "labels": {QUEUE: "default"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "spec": {"parallelism": 1, "completions": 1,
                         "template": {"spec": _pod_spec()}}}}]}})
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["labels"] == {QUEUE: "default", PRIORITY: "default"}

    pod = k8s.CoreV1Api(kubectl_api).create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo"}, "spec": _pod_spec()})
    assert [g.name for g in pod.spec.scheduling_gates] == ["kueue.x-k8s.io/admission"]
    assert pod.metadata.labels == {QUEUE: "default", PRIORITY: "default",
                                   "kueue.x-k8s.io/managed": "true"}
    assert pod.metadata.finalizers == ["kueue.x-k8s.io/managed"]
    assert "kueue.x-k8s.io/role-hash" in pod.metadata.annotations
    # Every object went through both of its webhooks, over HTTPS, and was allowed.
    assert installed.admission_calls == [
        ("mjob.kb.io", "CREATE", "allowed"), ("vjob.kb.io", "CREATE", "allowed"),
        ("mjobset.kb.io", "CREATE", "allowed"), ("vjobset.kb.io", "CREATE", "allowed"),
        ("mpod.kb.io", "CREATE", "allowed"), ("vpod.kb.io", "CREATE", "allowed")]


def test_a_queue_change_on_a_running_job_is_refused_with_kueues_message(
        installed: FakeKubeAPI, kubectl_api: Any) -> None:
    from kubernetes import client as k8s  # noqa: TID251 - the user's client
    from kubernetes.client.exceptions import ApiException  # noqa: TID251

    ns, batch = installed.namespace, k8s.BatchV1Api(kubectl_api)
    batch.create_namespaced_job(ns, job_manifest("train", "default"))
    # Unsuspended (as Kueue does once admitted): an update the webhooks allow.
    running = batch.patch_namespaced_job("train", ns, {"spec": {"suspend": False}})
    assert running.spec.suspend is False

    with pytest.raises(ApiException) as refused:
        batch.patch_namespaced_job("train", ns,
                                   {"metadata": {"labels": {QUEUE: "other"}}})
    assert refused.value.status == 403
    assert json.loads(refused.value.body)["message"] == (
        'admission webhook "vjob.kb.io" denied the request: '
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": '
        "field is immutable")
    assert installed.get("jobs", ns, "train")["metadata"]["labels"][QUEUE] == "default"

    # Suspended again, the queue may change.
    batch.patch_namespaced_job("train", ns, {"spec": {"suspend": True}})
    moved = batch.patch_namespaced_job("train", ns, {"metadata": {"labels": {QUEUE: "other"}}})
    assert moved.metadata.labels[QUEUE] == "other"


def test_an_unreachable_webhook_refuses_the_request_under_failure_policy_fail(
        installed: FakeKubeAPI, kubectl_api: Any, kube_cluster: Cluster) -> None:
    from kubernetes import client as k8s  # noqa: TID251 - the user's client
    from kubernetes.client.exceptions import ApiException  # noqa: TID251

    config = installed.get("mutatingwebhookconfigurations", "",
                           "kueueweb-mutating-webhook-configuration")
    for hook in config["webhooks"]:
        hook["clientConfig"]["url"] = hook["clientConfig"]["url"].replace(
            "127.0.0.1", "localhost")  # the certificate names 127.0.0.1 only
    with installed._cond:
        installed._store["mutatingwebhookconfigurations"][
            ("", "kueueweb-mutating-webhook-configuration")] = config
    with pytest.raises(ApiException) as refused:
        k8s.BatchV1Api(kubectl_api).create_namespaced_job(
            installed.namespace, job_manifest("train", "default"))
    assert refused.value.status == 500
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('Internal error occurred: failed calling webhook "mjob.kb.io"')
    assert "CERTIFICATE_VERIFY_FAILED" in message
    assert installed.get("jobs", installed.namespace, "train") is None

    # With failurePolicy Ignore the request goes on without that webhook's answer.
    for hook in config["webhooks"]:
        hook["failurePolicy"] = "Ignore"
    with installed._cond:
        installed._store["mutatingwebhookconfigurations"][
            ("", "kueueweb-mutating-webhook-configuration")] = config
    job = k8s.BatchV1Api(kubectl_api).create_namespaced_job(
        installed.namespace, job_manifest("train", "default"))
    assert job.spec.suspend is False
    assert [call[2] for call in installed.admission_calls][-1] == "allowed"


def test_only_objects_the_selectors_match_are_sent_to_the_webhooks(
        installed: FakeKubeAPI, kubectl_api: Any) -> None:
    from kubernetes import client as k8s  # noqa: TID251 - the user's client

    batch = k8s.BatchV1Api(kubectl_api)
    # Kueue's namespaceSelector leaves kube-system out.
    system = batch.create_namespaced_job("kube-system", job_manifest("sys", "default"))
    assert system.spec.suspend is False
    assert installed.admission_calls == []
    # An objectSelector: only objects labelled for it.
    for plural, name in (("mutatingwebhookconfigurations",
                          "kueueweb-mutating-webhook-configuration"),
                         ("validatingwebhookconfigurations",
                          "kueueweb-validating-webhook-configuration")):
        config = installed.get(plural, "", name)
        for hook in config["webhooks"]:
            hook["objectSelector"] = {"matchExpressions": [
                {"key": "team", "operator": "In", "values": ["ml"]}]}
        with installed._cond:
            installed._store[plural][("", name)] = config
    skipped = batch.create_namespaced_job(installed.namespace, job_manifest("a", "default"))
    assert skipped.spec.suspend is False
    taken = batch.create_namespaced_job(installed.namespace,
                                        job_manifest("b", "default", labels={"team": "ml"}))
    assert taken.spec.suspend is True
    assert installed.admission_calls == [("mjob.kb.io", "CREATE", "allowed"),
                                         ("vjob.kb.io", "CREATE", "allowed")]


def test_removed_webhooks_are_no_longer_called(installed: FakeKubeAPI, kubectl_api: Any,
                                               kube_cluster: Cluster) -> None:
    from kubernetes import client as k8s  # noqa: TID251 - the user's client

    call_command("webhooks", "remove", "--cluster", kube_cluster.name)
    job = k8s.BatchV1Api(kubectl_api).create_namespaced_job(
        installed.namespace, job_manifest("train", "default"))
    assert job.spec.suspend is False
    assert installed.admission_calls == []
