"""Kueue's webhook rules for job kinds (scheduling.jobframework.webhook): names, paths,
defaulting and the create/update checks, with Kueue's words."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.core.fields import FieldError
from scheduling.jobframework import registry
from scheduling.jobframework import webhook as hooks
from scheduling.jobframework.managed import ManagedJobs, namespace_labels_of
from tests.fixtures.scheduling import job_manifest

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
NS = namespace_labels_of("team-a", {"team": "a"})


def kind(framework: str) -> Any:
    found = registry.by_framework(framework)
    assert found is not None
    return found


def job(**labels: str) -> dict[str, Any]:
    manifest = job_manifest("train", "q")
    manifest["metadata"]["labels"] = dict(labels)
    manifest["metadata"]["namespace"] = "team-a"
    return manifest


def pod(**labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team-a", "labels": dict(labels)},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "restartPolicy": "Never"}}


def default(framework: str, obj: dict[str, Any], managed: ManagedJobs | None = None,
            **options: Any) -> dict[str, Any]:
    return hooks.default_object(kind(framework), obj, managed or ManagedJobs(), **{
        "namespace_labels": NS, "default_queue_exists": True,
        "default_priority_class_exists": True, **options})


# --- names, paths, rules -------------------------------------------------------------------


@pytest.mark.parametrize(("framework", "mutating", "name", "path", "operations"), [
    ("batch/job", True, "mjob.kb.io", "mutate-batch-v1-job", ["CREATE"]),
    ("batch/job", False, "vjob.kb.io", "validate-batch-v1-job", ["CREATE", "UPDATE"]),
    ("pod", True, "mpod.kb.io", "mutate--v1-pod", ["CREATE"]),
    ("jobset.x-k8s.io/jobset", True, "mjobset.kb.io",
     "mutate-jobset-x-k8s-io-v1alpha2-jobset", ["CREATE"]),
    ("kubeflow.org/pytorchjob", False, "vpytorchjob.kb.io",
     "validate-kubeflow-org-v1-pytorchjob", ["CREATE", "UPDATE"]),
    ("deployment", True, "mdeployment.kb.io", "mutate-apps-v1-deployment",
     ["CREATE", "UPDATE"]),
])
def test_webhooks_are_named_routed_and_ruled_as_kueues(
        framework: str, mutating: bool, name: str, path: str, operations: list[str]) -> None:
    hook = hooks.Webhook(kind(framework), mutating)
    assert (hook.name, hook.path, hook.rule()["operations"]) == (name, path, operations)
    assert hooks.find_webhook([kind(framework)], path) == hook


def test_a_cronjob_has_no_webhook_of_its_own() -> None:
    assert hooks.webhooks_of([kind("batch/cronjob")]) == []
    assert [h.name for h in hooks.webhooks_of([kind("batch/job"), kind("pod")])] == [
        "mjob.kb.io", "mpod.kb.io", "vjob.kb.io", "vpod.kb.io"]


def test_the_namespace_selector_of_pod_based_kinds_follows_the_managed_jobs_selector() -> None:
    selector = {"matchLabels": {"kueue": "on"}}
    managed = ManagedJobs.from_settings({"MANAGED_JOBS_NAMESPACE_SELECTOR": selector})
    assert hooks.namespace_selector(kind("pod"), managed, selector) == selector
    assert hooks.namespace_selector(kind("batch/job"), managed, selector) == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system", "kueue-system"]}]}


# --- defaulting ----------------------------------------------------------------------------


def test_a_job_gets_the_default_queue_and_priority_class_and_is_suspended() -> None:
    original = job()
    defaulted = default("batch/job", original)
    assert defaulted["metadata"]["labels"] == {QUEUE: "default", PRIORITY: "default"}
    assert defaulted["spec"]["suspend"] is True
    assert original["metadata"]["labels"] == {}  # not changed in place


def test_a_job_naming_its_queue_and_class_keeps_them() -> None:
    defaulted = default("batch/job", job(**{QUEUE: "lq", PRIORITY: "high"}))
    assert defaulted["metadata"]["labels"] == {QUEUE: "lq", PRIORITY: "high"}
    assert defaulted["spec"]["suspend"] is True


def test_without_a_default_queue_an_unlabelled_job_is_left_running() -> None:
    defaulted = default("batch/job", job(), default_queue_exists=False,
                        default_priority_class_exists=False)
    assert defaulted == job()


def test_manage_jobs_without_queue_name_suspends_in_matching_namespaces_only() -> None:
    managed = ManagedJobs(without_queue_name=True,
                          namespace_selector=ManagedJobs.from_settings({
                              "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchLabels": {"team": "a"}}
                          }).namespace_selector)
    options = {"default_queue_exists": False, "default_priority_class_exists": False}
    assert default("batch/job", job(), managed, **options)["spec"]["suspend"] is True
    elsewhere = default("batch/job", job(), managed, namespace_labels=namespace_labels_of("b"),
                        **options)
    assert "suspend" not in elsewhere["spec"]


def test_a_job_whose_owner_is_integrated_gets_no_defaults() -> None:
    defaulted = default("batch/job", job(), ancestor_managed=True)
    assert defaulted == job()


def test_a_managed_pod_is_gated_labelled_and_finalised_as_kueues_pod_webhook_does() -> None:
    defaulted = default("pod", pod())
    assert defaulted["metadata"]["labels"] == {QUEUE: "default", PRIORITY: "default",
                                               "kueue.x-k8s.io/managed": "true"}
    assert defaulted["metadata"]["finalizers"] == ["kueue.x-k8s.io/managed"]
    assert defaulted["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert defaulted["metadata"]["annotations"]["kueue.x-k8s.io/role-hash"]


def test_a_pod_outside_the_managed_namespaces_is_left_alone_even_with_a_queue() -> None:
    managed = ManagedJobs.from_settings({
        "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchLabels": {"team": "b"}}})
    assert default("pod", pod(**{QUEUE: "lq"}), managed) == pod(**{QUEUE: "lq"})


def test_needs_namespace_only_when_a_selector_can_change_the_answer() -> None:
    selective = ManagedJobs.from_settings({
        "MANAGE_JOBS_WITHOUT_QUEUE_NAME": True,
        "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchLabels": {"team": "a"}}})
    assert not hooks.needs_namespace(kind("batch/job"), job(), ManagedJobs(),
                                     default_queue_exists=True)
    by_name_only = ManagedJobs.from_settings({"MANAGED_JOBS_NAMESPACE_SELECTOR": {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                              "values": ["kube-system"]}]}})
    assert not hooks.needs_namespace(kind("pod"), pod(), by_name_only,
                                     default_queue_exists=True)
    assert hooks.needs_namespace(kind("batch/job"), job(), selective,
                                 default_queue_exists=False)
    assert not hooks.needs_namespace(kind("batch/job"), job(**{QUEUE: "lq"}), selective,
                                     default_queue_exists=True)
    assert hooks.needs_namespace(kind("pod"), pod(**{QUEUE: "lq"}), selective,
                                 default_queue_exists=False)


# --- validation ----------------------------------------------------------------------------


def update(old: dict[str, Any], new: dict[str, Any], *, framework: str = "batch/job",
           default_queue_exists: bool = False) -> list[FieldError]:
    return hooks.validate_update(kind(framework), old, new, namespace="team-a", managed=True,
                                 slices_enabled=True, default_queue_exists=default_queue_exists)


def running(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["spec"]["suspend"] = False
    return manifest


def test_the_queue_name_of_a_running_job_is_immutable() -> None:
    errors = update(running(job(**{QUEUE: "a"})), running(job(**{QUEUE: "b"})))
    assert hooks.denial_message(errors) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "b": field is immutable')
    suspended = job(**{QUEUE: "b"})
    suspended["spec"]["suspend"] = True
    assert update(running(job(**{QUEUE: "a"})), suspended) == []


def test_the_queue_name_cannot_be_emptied_where_a_default_queue_exists() -> None:
    old, new = job(**{QUEUE: "a"}), job()
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert update(old, new) == []
    assert hooks.denial_message(update(old, new, default_queue_exists=True)) == (
        'metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "": queue-name must not '
        "be empty in namespace with default queue")


def test_a_priority_class_cannot_be_added_to_a_running_job_nor_ever_removed() -> None:
    added = update(running(job(**{QUEUE: "a"})), running(job(**{QUEUE: "a", PRIORITY: "p"})))
    assert hooks.denial_message(added) == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "p": '
        "WorkloadPriorityClass cannot be added to a non-suspended workload")
    old, new = job(**{QUEUE: "a", PRIORITY: "p"}), job(**{QUEUE: "a"})
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    assert hooks.denial_message(update(old, new)) == (
        'metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "": '
        "WorkloadPriorityClass cannot be removed from a workload")


def test_several_errors_are_bracketed_as_kubernetes_aggregates_them() -> None:
    errors = update(running(job(**{QUEUE: "a", PRIORITY: "p"})), running(job(**{QUEUE: "b"})))
    assert hooks.denial_message(errors) == (
        '[metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "b": field is '
        'immutable, metadata.labels[kueue.x-k8s.io/priority-class]: Invalid value: "": '
        "WorkloadPriorityClass cannot be removed from a workload]")


def test_create_runs_the_kinds_own_checks_for_a_managed_job_only() -> None:
    bad = job(**{QUEUE: "lq"})
    bad["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    errors = hooks.validate_create(kind("batch/job"), bad, namespace="team-a", managed=True,
                                   slices_enabled=True)
    assert [e.path for e in errors] == ["spec.template.spec.restartPolicy"]
    unmanaged = hooks.validate_create(kind("batch/job"), {**bad, "metadata": {
        "name": "x", "labels": {"kueue.x-k8s.io/max-exec-time-seconds": "0"}}},
        namespace="team-a", managed=False, slices_enabled=True)
    assert hooks.denial_message(unmanaged) == (
        "metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: should be greater than 0")


def test_a_deployment_update_follows_its_own_rules_with_ready_replicas_as_running() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "d", "namespace": "team-a", "labels": {QUEUE: "a"}},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                           "template": {"metadata": {"labels": {"app": "d"}}, "spec": {
                               "containers": [{"name": "c", "image": "busybox"}]}}},
                  "status": {"readyReplicas": 1}}
    moved = {**deployment, "metadata": {**deployment["metadata"], "labels": {QUEUE: "b"}}}
    errors = update(deployment, moved, framework="deployment")
    assert [(e.path, e.message) for e in errors] == [
        ("metadata.labels[kueue.x-k8s.io/queue-name]", "field is immutable")]
    idle = {**deployment, "status": {"readyReplicas": 0}}
    assert update(idle, moved, framework="deployment") == []


def test_an_owner_is_integrated_when_its_controller_is_of_an_enabled_kind() -> None:
    owned = job()
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2",
                                             "kind": "JobSet", "name": "js", "uid": "u",
                                             "controller": True}]
    assert hooks.owner_is_integrated(owned, [kind("jobset.x-k8s.io/jobset")])
    assert not hooks.owner_is_integrated(owned, [kind("batch/job")])
    owned["metadata"]["ownerReferences"][0]["controller"] = False
    assert not hooks.owner_is_integrated(owned, [kind("jobset.x-k8s.io/jobset")])
