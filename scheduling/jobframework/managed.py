"""Which objects of a cluster Kueue manages: suspends (or gates) on creation, makes a
Workload for, and admits (Kueue's ``WorkloadShouldBeSuspended`` and
``ApplyDefaultLocalQueue`` in ``pkg/controller/jobframework/{utils,defaults}.go``).

An object is managed when no ancestor of it is (the ancestor's Workload covers it) and:

- it names a local queue (the ``kueue.x-k8s.io/queue-name`` label), or
- ``manageJobsWithoutQueueName`` is on and its namespace's labels match
  ``managedJobsNamespaceSelector`` (a missing selector matches every namespace).

The webhook endpoints and the adoption of objects created on a cluster both ask here, so a
job is managed by the same rule whichever of them sees it first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduling.core.types import LabelSelector
from scheduling.jobframework.constants import DEFAULT_LOCAL_QUEUE_NAME, QUEUE_NAME_LABEL

# Every namespace carries its own name as this label (set by the API server).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def selector_from(document: Mapping[str, Any] | None) -> LabelSelector | None:
    """A label selector document as the engine's; None (no selector) stays None."""
    return None if document is None else LabelSelector.from_document(document)


@dataclass(frozen=True)
class ManagedJobs:
    """The two options, read once (``from_settings`` takes Django's ``KUEUEWEB``)."""

    without_queue_name: bool = False
    namespace_selector: LabelSelector | None = None

    @classmethod
    def from_settings(cls, config: Mapping[str, Any]) -> ManagedJobs:
        return cls(without_queue_name=bool(config.get("MANAGE_JOBS_WITHOUT_QUEUE_NAME")),
                   namespace_selector=selector_from(config.get("MANAGED_JOBS_NAMESPACE_SELECTOR")))

    def namespace_matches(self, namespace_labels: Mapping[str, str]) -> bool:
        return self.namespace_selector is None or self.namespace_selector.matches(
            namespace_labels)

    def manages(self, labels: Mapping[str, str] | None, *,
                namespace_labels: Mapping[str, str], ancestor_managed: bool = False) -> bool:
        """Whether an object with ``labels`` in a namespace with ``namespace_labels`` is
        Kueue's to suspend and admit."""
        if ancestor_managed:
            return False
        if (labels or {}).get(QUEUE_NAME_LABEL):
            return True
        return self.without_queue_name and self.namespace_matches(namespace_labels)

    def default_queue_applies(self, labels: Mapping[str, str] | None, *,
                              namespace_labels: Mapping[str, str], default_queue_exists: bool,
                              ancestor_managed: bool = False) -> bool:
        """Whether ``kueue.x-k8s.io/queue-name: default`` is to be set (LocalQueueDefaulting):
        the namespace has a LocalQueue named ``default``, the object names none, no
        ancestor is managed, and the namespace is one the selector matches."""
        return (default_queue_exists and not (labels or {}).get(QUEUE_NAME_LABEL)
                and not ancestor_managed and self.namespace_matches(namespace_labels))


def namespace_labels_of(name: str, labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """A namespace's labels with the name label the API server always sets."""
    return {**(labels or {}), NAMESPACE_NAME_LABEL: name}


__all__ = ["DEFAULT_LOCAL_QUEUE_NAME", "NAMESPACE_NAME_LABEL", "ManagedJobs",
           "namespace_labels_of", "selector_from"]
