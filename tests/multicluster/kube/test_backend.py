"""The backend's calls through the official client over HTTP: the remote Job as Kueue's
MultiKueue adapter builds it, parallelism patches, suspend, delete, the gang Workload, and
list + watch with resource versions (resume after a broken stream, relist on 410 Gone).

These run against the test API server, or unchanged against the real cluster named by
``KUEUEWEB_TEST_KUBECONFIG`` (the fault-injection tests are skipped there)."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from multicluster.kube import backend as kb
from multicluster.kube.backend import PODS, KubeBackend, WatchState, job_kind
from multicluster.kube.client import client_for
from multicluster.kube.errors import KubeApiError
from multicluster.kube.manifests import (
    ORIGIN_LABEL,
    gang_workload,
    gang_workload_name,
    reduce_job,
    remote_object,
)
from multicluster.models import Cluster
from scheduling.jobframework import PODSET_LABEL, PREBUILT_WORKLOAD_LABEL, PodSetInfo
from scheduling.jobs.job import BatchJob
from scheduling.jobs.jobset import JobSet
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

ORIGIN = "kueueweb-test"
SELECTOR = f"{ORIGIN_LABEL}={ORIGIN}"
SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
QUIET = {"quiet_seconds": 0.25, "max_seconds": 3.0}
JOBS = job_kind("batch", "v1", "jobs")


def job_uid(name: str) -> str:
    """The uid of the local job ``name`` (the label its remote pods are attributed by)."""
    return f"uid-of-{name}"


def remote_job(manifest: dict[str, Any], *, namespace: str, origin: str, workload_name: str,
               parallelism: int, node_labels: dict[str, str] | None = None,
               tolerations: list[dict[str, Any]] | None = None,
               gang_workload: str | None = None) -> dict[str, Any]:
    """The Job's copy for an admission of ``parallelism`` pods on flavors with these node
    labels and tolerations."""
    info = PodSetInfo("main", parallelism, dict(node_labels or {}), list(tolerations or []),
                      {PODSET_LABEL: "main"})
    return remote_object(BatchJob(), manifest, namespace=namespace, origin=origin,
                         workload_name=workload_name,
                         job_uid=job_uid(manifest["metadata"]["name"]),
                         infos=[info], gang_workload=gang_workload)


@pytest.fixture
def backend(kube_api: Any, kube_cluster: Cluster) -> KubeBackend:
    backend = KubeBackend(client_for(kube_cluster))
    backend.ensure_namespace(kube_api.namespace)
    if not kube_api.is_fake:
        QUIET.update(quiet_seconds=1.0, max_seconds=10.0)
    return backend


def submitted(name: str, **kwargs: Any) -> dict[str, Any]:
    """A job as stored after submission to the hub: suspended, managed by MultiKueue, with
    a selector and job-controller labels left from an earlier life."""
    manifest = job_manifest(name, "lq", **kwargs)
    manifest["spec"].update(
        suspend=True, managedBy="kueue.x-k8s.io/multikueue",
        selector={"matchLabels": {"batch.kubernetes.io/controller-uid": "old-uid"}})
    template = manifest["spec"]["template"]
    template["metadata"] = {"labels": {"batch.kubernetes.io/controller-uid": "old-uid",
                                       "controller-uid": "old-uid", "job-name": name,
                                       "app": "demo"}}
    template["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    return manifest


def create(backend: KubeBackend, namespace: str, name: str, *,
           parallelism: int = 1) -> dict[str, Any]:
    return backend.create_job(remote_job(
        submitted(name, parallelism=parallelism), namespace=namespace, origin=ORIGIN,
        workload_name=f"job-{name}-abcde", parallelism=parallelism))


# --- the remote Job ---------------------------------------------------------------------


def test_creates_the_admitted_job_with_flavor_placement_and_origin_labels(
    kube_api: Any, backend: KubeBackend,
) -> None:
    body = remote_job(
        submitted("train", parallelism=5, node_selector={"disk": "ssd"}),
        namespace=kube_api.namespace, origin=ORIGIN, workload_name="job-train-abcde",
        parallelism=3, node_labels={"instance-type": "spot"}, tolerations=[SPOT])

    created = backend.create_job(body)
    job = backend.get_job(kube_api.namespace, "train")

    assert job is not None
    uid = created["metadata"]["uid"]
    assert job["metadata"]["uid"] == uid
    assert job["metadata"]["labels"][ORIGIN_LABEL] == ORIGIN
    assert job["metadata"]["labels"][PREBUILT_WORKLOAD_LABEL] == "job-train-abcde"
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq"
    spec = job["spec"]
    assert (spec["suspend"], spec["parallelism"]) == (False, 3)
    assert "managedBy" not in spec
    assert spec["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"] == uid
    template = spec["template"]
    assert template["spec"]["nodeSelector"] == {"disk": "ssd", "instance-type": "spot"}
    assert template["spec"]["tolerations"] == [{"key": "gpu", "operator": "Exists"}, SPOT]
    labels = template["metadata"]["labels"]
    assert (labels[ORIGIN_LABEL], labels[PODSET_LABEL], labels["app"]) == (ORIGIN, "main",
                                                                           "demo")
    assert labels["batch.kubernetes.io/controller-uid"] == uid
    assert labels["controller-uid"] == uid


def test_a_copied_selector_is_refused_by_the_server(kube_api: Any, backend: KubeBackend) -> None:
    body = remote_job(submitted("copied"), namespace=kube_api.namespace, origin=ORIGIN,
                      workload_name="w", parallelism=1)
    body["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "old"}}

    with pytest.raises(KubeApiError) as caught:
        backend.create_job(body)

    assert caught.value.invalid
    assert backend.get_job(kube_api.namespace, "copied") is None


def test_a_taken_name_is_a_conflict(kube_api: Any, backend: KubeBackend) -> None:
    create(backend, kube_api.namespace, "twice")

    with pytest.raises(KubeApiError) as caught:
        create(backend, kube_api.namespace, "twice")

    assert caught.value.conflict


def test_completions_follow_parallelism_when_annotated() -> None:
    manifest = job_manifest("j", "lq", parallelism=4, completions=4, annotations={
        "kueue.x-k8s.io/job-completions-equal-parallelism": "true"})

    body = remote_job(manifest, namespace="ns", origin=ORIGIN, workload_name="w",
                      parallelism=2)

    assert (body["spec"]["parallelism"], body["spec"]["completions"]) == (2, 2)
    assert "completions" not in remote_job(job_manifest("k", "lq", parallelism=4),
                                           namespace="ns", origin=ORIGIN, workload_name="w",
                                           parallelism=2)["spec"]


def test_the_elastic_scheduling_gate_is_not_copied() -> None:
    manifest = job_manifest("e", "lq")
    manifest["spec"]["template"]["spec"]["schedulingGates"] = [
        {"name": "kueue.x-k8s.io/elastic-job"}, {"name": "example.com/other"}]
    original = copy.deepcopy(manifest)

    body = remote_job(manifest, namespace="ns", origin=ORIGIN, workload_name="w",
                      parallelism=1)

    assert body["spec"]["template"]["spec"]["schedulingGates"] == [
        {"name": "example.com/other"}]
    assert manifest == original


def test_patches_parallelism_with_a_merge_patch(kube_api: Any, backend: KubeBackend) -> None:
    create(backend, kube_api.namespace, "scale", parallelism=2)

    patched = backend.patch_job(kube_api.namespace, "scale", BatchJob().scale({}, {"main": 4}))

    assert patched is not None
    job = backend.get_job(kube_api.namespace, "scale")
    assert job is not None
    assert job["spec"]["parallelism"] == 4
    assert backend.patch_job(kube_api.namespace, "gone", {"spec": {"parallelism": 4}}) is None
    if kube_api.is_fake:
        [request, _] = kube_api.requests_to("PATCH", "/apis/batch/v1/namespaces/")
        assert request.content_type == "application/merge-patch+json"
        assert request.body == {"spec": {"parallelism": 4}}


def test_a_strategic_merge_patch_merges_maps(kube_api: Any, backend: KubeBackend) -> None:
    create(backend, kube_api.namespace, "smp")

    backend.patch_job(kube_api.namespace, "smp", {"metadata": {"labels": {"extra": "yes"}}},
                      strategic=True)

    job = backend.get_job(kube_api.namespace, "smp")
    assert job is not None
    assert job["metadata"]["labels"]["extra"] == "yes"
    assert job["metadata"]["labels"][ORIGIN_LABEL] == ORIGIN
    if kube_api.is_fake:
        [request] = kube_api.requests_to("PATCH", "/apis/batch/v1/namespaces/")
        assert request.content_type == "application/strategic-merge-patch+json"


def test_suspends_a_job(kube_api: Any, backend: KubeBackend) -> None:
    create(backend, kube_api.namespace, "pause")

    backend.suspend_job(kube_api.namespace, "pause")

    job = backend.get_job(kube_api.namespace, "pause")
    assert job is not None
    assert job["spec"]["suspend"] is True
    assert backend.suspend_job(kube_api.namespace, "gone") is None


def test_deletes_a_job_and_its_pods_in_the_background(kube_api: Any,
                                                     backend: KubeBackend) -> None:
    create(backend, kube_api.namespace, "done", parallelism=2)
    if kube_api.is_fake:
        kube_api.create_pods(kube_api.namespace, "done", 2)

    assert backend.delete_job(kube_api.namespace, "done") is True

    assert backend.get_job(kube_api.namespace, "done") is None
    assert backend.delete_job(kube_api.namespace, "done") is False
    if kube_api.is_fake:
        deletes = kube_api.requests_to("DELETE", "/apis/batch/v1/namespaces/")
        assert [r.query for r in deletes] == [{"propagationPolicy": "Background"}] * 2
        assert kube_api.objects("pods", kube_api.namespace) == []


def test_ensure_namespace_creates_it_once(kube_api: Any, kube_cluster: Cluster) -> None:
    backend = KubeBackend(client_for(kube_cluster))
    namespace = f"{kube_api.namespace}-extra"
    try:
        assert backend.ensure_namespace(namespace) is True
        assert backend.ensure_namespace(namespace) is False
    finally:
        backend.delete_namespace(namespace)


def test_a_namespace_that_may_not_be_read_is_left_to_the_job_creation(
    kube_api: Any, kube_cluster: Cluster,
) -> None:
    kube_api.require_fake()
    kube_api.forbidden.add("namespaces")
    backend = KubeBackend(client_for(kube_cluster))

    assert backend.ensure_namespace("unreadable") is False

    with pytest.raises(KubeApiError) as caught:
        create(backend, "unreadable", "j")
    assert caught.value.not_found


# --- the gang Workload ------------------------------------------------------------------


def test_the_gang_workload_is_created_where_the_workload_api_is_served(
    kube_api: Any, kube_cluster: Cluster,
) -> None:
    kube_api.require_fake()
    kube_api.serve_gang_api = True
    backend = KubeBackend(client_for(kube_cluster))
    backend.ensure_namespace(kube_api.namespace)
    assert backend.supports_gang_workloads() is True

    created = backend.create_job(remote_job(
        submitted("gang", parallelism=3), namespace=kube_api.namespace, origin=ORIGIN,
        workload_name="w", parallelism=3, gang_workload="job-gang"))
    backend.create_gang_workload(gang_workload(
        BatchJob(), namespace=kube_api.namespace, job_name="gang", origin=ORIGIN,
        pod_groups={"main": 3},
        job_uid=created["metadata"]["uid"]))

    job = backend.get_job(kube_api.namespace, "gang")
    assert job is not None
    assert job["spec"]["template"]["spec"]["workloadRef"] == {"name": "job-gang",
                                                              "podGroup": "main"}
    # Named after the job's kind too: a JobSet "gang" would have its own.
    workload = backend.get_gang_workload(kube_api.namespace, "job-gang")
    assert workload is not None
    assert workload["spec"]["podGroups"] == [{"name": "main",
                                              "policy": {"gang": {"minCount": 3}}}]
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job",
                                                 "name": "gang"}
    assert workload["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]

    backend.delete_job(kube_api.namespace, "gang")
    assert backend.get_gang_workload(kube_api.namespace, "job-gang") is None


def test_gang_workload_names_differ_by_kind_and_fit_a_name() -> None:
    assert (gang_workload_name(BatchJob(), "train"), gang_workload_name(JobSet(), "train")) == (
        "job-train", "jobset-train")
    long = "a" * 253
    names = {gang_workload_name(BatchJob(), long), gang_workload_name(JobSet(), long)}
    assert len(names) == 2
    assert all(len(name) <= 253 for name in names)


def test_without_the_workload_api_there_is_no_gang(kube_api: Any, backend: KubeBackend) -> None:
    kube_api.require_fake()

    assert backend.supports_gang_workloads() is False
    assert kube_api.requests_to("GET", "/apis/scheduling.k8s.io/v1alpha1")[0].path == (
        "/apis/scheduling.k8s.io/v1alpha1")


def test_the_gang_workload_follows_discovery_on_a_real_cluster(
    kube_api: Any, backend: KubeBackend,
) -> None:
    served = backend.supports_gang_workloads()
    if not served:
        pytest.skip("the cluster does not serve scheduling.k8s.io/v1alpha1 workloads")
    created = create(backend, kube_api.namespace, "gang-real", parallelism=2)
    backend.create_gang_workload(gang_workload(
        BatchJob(), namespace=kube_api.namespace, job_name="gang-real", origin=ORIGIN,
        pod_groups={"main": 2},
        job_uid=created["metadata"]["uid"]))

    found = backend.get_gang_workload(kube_api.namespace, "job-gang-real")

    assert found is not None
    assert found["spec"]["podGroups"][0]["policy"]["gang"]["minCount"] == 2


# --- list + watch -----------------------------------------------------------------------


def test_lists_then_watches_from_the_resource_version(kube_api: Any,
                                                     backend: KubeBackend) -> None:
    create(backend, kube_api.namespace, "first")
    state = WatchState()

    listed = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    listed_version = state.resource_version
    create(backend, kube_api.namespace, "second")
    backend.delete_job(kube_api.namespace, "first")
    watched = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)

    assert (listed.listed, listed.events) == (True, 0)
    assert (watched.listed, watched.expired) == (False, False)
    assert watched.events >= 2
    second = state.objects[f"{kube_api.namespace}/second"]
    assert (second["name"], second["workload"], second["suspend"]) == (
        "second", "job-second-abcde", False)
    first = state.objects[f"{kube_api.namespace}/first"]
    assert first[kb.TOMBSTONE] is True
    assert int(state.resource_version) > int(listed_version)
    if kube_api.is_fake:
        [watch] = [r for r in kube_api.requests_to("GET", "/apis/batch/v1/jobs")
                   if r.query.get("watch") == "true"]
        assert watch.query["resourceVersion"] == listed_version
        assert watch.query["labelSelector"] == SELECTOR


def test_a_watch_returns_once_the_stream_is_quiet(kube_api: Any, backend: KubeBackend) -> None:
    state = WatchState()
    backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    create(backend, kube_api.namespace, "quiet")

    started = time.monotonic()
    result = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    elapsed = time.monotonic() - started

    assert result.events == 1
    # Well before the server would end the stream (timeoutSeconds = max_seconds).
    assert elapsed < QUIET["max_seconds"] / 2


def test_the_label_selector_keeps_other_jobs_out(kube_api: Any, backend: KubeBackend) -> None:
    backend.create_job(remote_job(submitted("foreign"), namespace=kube_api.namespace,
                                  origin="someone-else", workload_name="w", parallelism=1))
    create(backend, kube_api.namespace, "ours")
    state = WatchState()

    backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)

    names = sorted(o["name"] for o in state.objects.values()
                   if o["namespace"] == kube_api.namespace)
    assert names == ["ours"]


def test_resumes_a_broken_watch_from_the_last_version_seen(kube_api: Any,
                                                          backend: KubeBackend) -> None:
    kube_api.require_fake()
    state = WatchState()
    backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    for name in ("a", "b", "c"):
        create(backend, kube_api.namespace, name)
    version_of_b = kube_api.get("jobs", kube_api.namespace, "b")["metadata"]["resourceVersion"]
    kube_api.drop_next_watch("jobs", after_events=2)

    result = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)

    assert (result.resumed, result.events, result.listed) == (1, 3, False)
    assert sorted(o["name"] for o in state.objects.values()) == ["a", "b", "c"]
    watches = [r.query["resourceVersion"] for r in kube_api.requests_to("GET", "/apis/batch/v1/jobs")
               if r.query.get("watch") == "true"]
    assert watches[-1] == version_of_b
    assert len(watches) == 2


def test_a_broken_stream_is_picked_up_by_the_next_refresh(kube_api: Any,
                                                         backend: KubeBackend) -> None:
    kube_api.require_fake()
    state = WatchState()
    backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    create(backend, kube_api.namespace, "x")
    kube_api.drop_next_watch("jobs", after_events=0)
    kube_api.drop_next_watch("jobs", after_events=0)

    first = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    assert (first.events, first.resumed) == (0, 1)
    assert state.objects == {}

    second = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    assert second.events == 1
    assert list(state.objects) == [f"{kube_api.namespace}/x"]


@pytest.mark.parametrize("as_http_error", [False, True], ids=["error-event", "http-410"])
def test_lists_again_when_the_version_expired(kube_api: Any, backend: KubeBackend,
                                              as_http_error: bool) -> None:
    kube_api.require_fake()
    kube_api.gone_as_http_error = as_http_error
    create(backend, kube_api.namespace, "old")
    state = WatchState()
    backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    stale = state.resource_version
    backend.delete_job(kube_api.namespace, "old")
    create(backend, kube_api.namespace, "new")
    kube_api.compact()

    result = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)

    assert (result.expired, result.listed, result.events) == (True, True, 0)
    assert list(state.objects) == [f"{kube_api.namespace}/new"]
    assert state.resource_version == str(kube_api.resource_version)
    assert state.resource_version != stale


def test_a_bookmark_moves_the_version_without_an_event(kube_api: Any,
                                                      backend: KubeBackend) -> None:
    kube_api.require_fake()
    state = WatchState()
    backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)
    kube_api.add_node("n1", allocatable={"cpu": "1"})  # a write the job watch does not see
    kube_api.send_bookmark()

    result = backend.refresh(JOBS, state, label_selector=SELECTOR, **QUIET)

    assert result.events == 0
    assert state.resource_version == str(kube_api.resource_version)


def test_pods_are_reduced_to_their_job_uid_phase_and_readiness(kube_api: Any,
                                                          backend: KubeBackend) -> None:
    kube_api.require_fake()
    create(backend, kube_api.namespace, "p", parallelism=2)
    state = WatchState()
    backend.refresh(PODS, state, label_selector=SELECTOR, **QUIET)
    [running, waiting] = kube_api.create_pods(kube_api.namespace, "p", 2)
    kube_api.set_pod(kube_api.namespace, waiting, phase="Pending", ready=False)

    backend.refresh(PODS, state, label_selector=SELECTOR, **QUIET)

    pods = {o["name"]: (o["job_uid"], o["phase"], o["ready"]) for o in state.objects.values()}
    assert pods == {running: (job_uid("p"), "Running", True),
                    waiting: (job_uid("p"), "Pending", False)}


def test_nodes_are_listed_and_watched(kube_api: Any, backend: KubeBackend) -> None:
    kube_api.require_fake()
    kube_api.add_node("n1", allocatable={"cpu": "4"}, labels={"zone": "a"})
    state = WatchState()
    backend.refresh(kb.NODES, state, label_selector=None, **QUIET)
    kube_api.add_node("n2", allocatable={"cpu": "2"}, unschedulable=True, ready=False)

    result = backend.refresh(kb.NODES, state, label_selector=None, **QUIET)

    assert result.events == 1
    assert state.objects["n2"] == {"name": "n2", "allocatable": {"cpu": "2"},
                                   "labels": {"kubernetes.io/hostname": "n2"}, "taints": [],
                                   "unschedulable": True, "ready": False}
    assert state.objects["n1"]["labels"] == {"kubernetes.io/hostname": "n1", "zone": "a"}


def test_a_reduced_job_keeps_what_the_reconciler_reads() -> None:
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u",
                        "labels": {PREBUILT_WORKLOAD_LABEL: "wl"},
                        "deletionTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"suspend": True, "parallelism": 3, "completions": 6,
                    "template": {"spec": {"containers": []}}},
           "status": {"active": 2, "ready": 1}}

    assert reduce_job(job) == {
        "namespace": "ns", "name": "j", "uid": "u", "workload": "wl", "suspend": True,
        "spec": {"suspend": True, "parallelism": 3, "completions": 6}, "deleting": True,
        "status": {"active": 2, "ready": 1}}
