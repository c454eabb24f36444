"""Which objects of a cluster are managed (Kueue's ``WorkloadShouldBeSuspended``)."""

from __future__ import annotations

from scheduling.jobframework.managed import ManagedJobs, namespace_labels_of

KUEUE_DEFAULT = {"MANAGE_JOBS_WITHOUT_QUEUE_NAME": False,
                 "MANAGED_JOBS_NAMESPACE_SELECTOR": {"matchExpressions": [
                     {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                      "values": ["kube-system", "kueue-system"]}]}}
QUEUED = {"kueue.x-k8s.io/queue-name": "user-queue"}


def test_an_object_naming_a_queue_is_managed_in_any_namespace() -> None:
    managed = ManagedJobs.from_settings(KUEUE_DEFAULT)
    assert managed.manages(QUEUED, namespace_labels=namespace_labels_of("team-a"))
    # The namespace selector only widens management to objects without a queue name.
    assert managed.manages(QUEUED, namespace_labels=namespace_labels_of("kube-system"))


def test_an_object_without_a_queue_name_is_left_alone_by_default() -> None:
    managed = ManagedJobs.from_settings(KUEUE_DEFAULT)
    assert not managed.manages({"app": "x"}, namespace_labels=namespace_labels_of("team-a"))


def test_manage_jobs_without_queue_name_follows_the_namespace_selector() -> None:
    managed = ManagedJobs.from_settings({**KUEUE_DEFAULT, "MANAGE_JOBS_WITHOUT_QUEUE_NAME": True})
    assert managed.manages(None, namespace_labels=namespace_labels_of("team-a"))
    assert not managed.manages(None, namespace_labels=namespace_labels_of("kube-system"))
    assert not managed.manages(None, namespace_labels=namespace_labels_of("kueue-system"))


def test_without_a_selector_every_namespace_matches() -> None:
    managed = ManagedJobs.from_settings({"MANAGE_JOBS_WITHOUT_QUEUE_NAME": True,
                                         "MANAGED_JOBS_NAMESPACE_SELECTOR": None})
    assert managed.manages({}, namespace_labels=namespace_labels_of("kube-system"))


def test_an_object_whose_ancestor_is_managed_is_not_managed_itself() -> None:
    managed = ManagedJobs.from_settings({**KUEUE_DEFAULT, "MANAGE_JOBS_WITHOUT_QUEUE_NAME": True})
    assert not managed.manages(QUEUED, namespace_labels=namespace_labels_of("team-a"),
                               ancestor_managed=True)


def test_the_default_queue_applies_only_where_one_exists_and_none_is_named() -> None:
    managed = ManagedJobs.from_settings(KUEUE_DEFAULT)
    team = namespace_labels_of("team-a", {"env": "prod"})
    assert managed.default_queue_applies({}, namespace_labels=team, default_queue_exists=True)
    assert not managed.default_queue_applies({}, namespace_labels=team,
                                             default_queue_exists=False)
    assert not managed.default_queue_applies(QUEUED, namespace_labels=team,
                                             default_queue_exists=True)
    assert not managed.default_queue_applies({}, namespace_labels=namespace_labels_of(
        "kube-system"), default_queue_exists=True)
