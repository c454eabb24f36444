"""The job kinds a Kubernetes cluster is watched for: the enabled integrations
(``scheduling.jobframework.registry``), each by its group, version and plural."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from multicluster.kube.backend import WatchKind, adoption_kind, job_kind
from scheduling.jobframework import GenericJob, registry


def watch_kind(integration: GenericJob) -> WatchKind:
    """The watch of a job kind on the cluster."""
    return job_kind(integration.group, integration.version, integration.plural,
                    integration.is_suspended)


def resource(integration: GenericJob) -> tuple[str, str, str]:
    return integration.group, integration.version, integration.plural


def enabled_job_kinds() -> dict[str, GenericJob]:
    """The enabled job kinds (the implicitly enabled too: a Deployment's Pods), by the
    name of their watch (``jobs.batch``)."""
    config: Mapping[str, Any] = settings.KUEUEWEB
    enabled = registry.running_names(config)
    return {watch_kind(i).name: i for i in registry.registered() if i.framework_name in enabled}


def job_kinds() -> list[WatchKind]:
    """The watches of the enabled job kinds."""
    return [watch_kind(i) for i in enabled_job_kinds().values()]


def adoptable_job_kinds() -> dict[str, GenericJob]:
    """The kinds whose objects created on the cluster kueueweb adopts, by the name of their
    adoption watch: the kinds it runs (the implicitly enabled too: a Deployment's Pods,
    which the cluster's ReplicaSet controller creates) that make their Workload from the
    object itself. Not the kinds that hand their Pods to the pod integration (a
    Deployment, a StatefulSet, a LeaderWorkerSet: Kueue makes no Workload of the object),
    nor external frameworks, whose Workload comes through the API."""
    config: Mapping[str, Any] = settings.KUEUEWEB
    running = registry.running_names(config)
    return {adoption_watch(i).name: i for i in registry.registered()
            if i.framework_name in running and i.constructs_workload
            and not i.keeps_replicas and not i.prebuilds_group_workloads}


def implicitly_enabled_job_kinds() -> set[str]:
    """The adoption watches of the kinds enabled only through another framework (the
    ``pod`` framework of a Deployment): they adopt only the objects that framework hands
    them (``accepts_implicitly``)."""
    config: Mapping[str, Any] = settings.KUEUEWEB
    enabled = registry.enabled_names(config)
    return {name for name, i in adoptable_job_kinds().items()
            if i.framework_name not in enabled}


def adoption_watch(integration: GenericJob) -> WatchKind:
    return adoption_kind(integration.group, integration.version, integration.plural,
                         integration.is_suspended)
