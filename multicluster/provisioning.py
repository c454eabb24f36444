"""The ProvisioningRequest admission check controller (Kueue
``pkg/controller/admissionchecks/provisioning``): for a workload holding quota whose cluster
queue requires a check with ``controllerName: kueue.x-k8s.io/provisioning-request``, it asks
the cluster autoscaler for the capacity with a ProvisioningRequest and sets the check from
the request's conditions.

One pass over a domain (``sync_provisioning``), run by the domain's cluster reconciler with
the cluster's requests (``Requests``): on a simulated cluster, rows that its simulated
autoscaler provisions (``multicluster.simulated.provisioner``); on a Kubernetes cluster,
``autoscaling.x-k8s.io/v1`` objects and the PodTemplates they name
(``multicluster.kube.provisioning``). The decisions are ``multicluster.core.provisioning``'s.

- The check's ``Active`` condition says whether its parameters name a
  ProvisioningRequestConfig that exists.
- A workload with quota reserved and the check Pending gets a request
  ``<workload>-<check>-<attempt>`` for the pod sets that use a managed resource, with a pod
  template per pod set (the admission's node selector and tolerations merged in).
- ``Provisioned`` → Ready, with the ``podSetUpdates`` that let the pods consume the capacity;
  ``Failed`` (and ``BookingExpired`` before admission) → Retry with the config's back-off,
  Rejected once ``backoffLimitCount`` retries are spent; ``CapacityRevoked`` → Rejected.
- Requests of another attempt or config, and every request of a finished or evicted
  workload, are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from django.db.models import F

from kueueweb import live
from multicluster.choices import PROVISIONING_CONTROLLER_NAME
from multicluster.core import provisioning as core
from multicluster.models import AdmissionCheck, ProvisioningRequestConfig
from scheduling import job_reconciler
from scheduling.choices import EventType, WorkloadPhase
from scheduling.jobframework import merge_into_template
from scheduling.models import ClusterQueue, Event, Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond
from scheduling.workload import lifecycle

logger = logging.getLogger(__name__)

_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


class Requests(Protocol):
    """The ProvisioningRequests of a cluster, as ``autoscaling.x-k8s.io/v1`` objects."""

    # Why the cluster cannot take requests (its API does not serve them), or None.
    unserved: str | None

    def owned(self) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """Every request kueueweb made on the cluster, by (namespace, owning workload)."""

    def create(self, wl: Workload, request: Mapping[str, Any],
               templates: Mapping[str, Mapping[str, Any]]) -> None:
        """Create ``request`` and the pod templates (by name) its pod sets name; raises
        ``RequestRefused`` when the cluster refuses them."""

    def delete(self, namespace: str, name: str) -> None:
        """Delete a request (its pod templates go with it)."""


class RequestRefused(Exception):
    """The cluster refused a request or one of its PodTemplates (the message says why)."""


@dataclass
class ProvisioningOutcome:
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.deleted or self.updated)


def config_of(config: ProvisioningRequestConfig) -> core.Config:
    return core.Config(
        name=config.name,
        provisioning_class_name=config.provisioning_class_name,
        parameters=dict(config.parameters or {}),
        managed_resources=tuple(config.managed_resources or ()),
        backoff_limit_count=config.backoff_limit_count,
        backoff_base_seconds=config.backoff_base_seconds,
        backoff_max_seconds=config.backoff_max_seconds,
        node_selector_updates=tuple(
            (str(e["key"]), str(e["valueFromProvisioningClassDetail"]))
            for e in config.pod_set_updates_node_selector or ()),
        pod_set_merge_policy=config.pod_set_merge_policy,
    )


# The check's Active reason when the cluster does not serve ProvisioningRequests (Kueue
# does not run its controller then, so no check of it becomes active).
NOT_SERVED = "ProvisioningRequestNotServed"


def _checks(cluster_id: int, unserved: str | None, *,
            now: datetime) -> dict[str, core.Config | None]:
    """The domain's ProvisioningRequest checks and their configs (None: not active), their
    ``Active`` conditions brought up to date."""
    configs = {c.name: c for c in ProvisioningRequestConfig.objects.filter(cluster_id=cluster_id)}
    checks: dict[str, core.Config | None] = {}
    flipped = False
    for check in AdmissionCheck.objects.filter(cluster_id=cluster_id,
                                               controller_name=PROVISIONING_CONTROLLER_NAME):
        status, reason, message = core.active_condition(check.parameters, frozenset(configs))
        if unserved and status == "True":
            status, reason, message = "False", NOT_SERVED, unserved
        conditions = cond.set_condition(check.conditions, "Active", status == "True", reason,
                                        message, now=now)
        if conditions != check.conditions:
            AdmissionCheck.objects.filter(pk=check.pk).update(
                conditions=conditions, resource_version=F("resource_version") + 1)
            flipped = True
        config = configs.get(str((check.parameters or {}).get("name", "")))
        checks[check.name] = config_of(config) if status == "True" and config else None
    if flipped:
        # Queues that require the check become active, or inactive.
        admission.request_admission(cluster_id)
    return checks


def sync_provisioning(cluster_id: int, requests: Requests, *, now: datetime) -> ProvisioningOutcome:
    """One pass of the controller over the domain ``cluster_id`` and its cluster's
    ``requests``."""
    outcome = ProvisioningOutcome()
    checks = _checks(cluster_id, requests.unserved, now=now)
    owned = requests.owned()
    if not checks and not owned:
        return outcome
    # Only the queues that require one of the checks hold workloads that carry it: the
    # domain's other reserved workloads are not read on every pass.
    queues = [cq.pk for cq in ClusterQueue.objects.filter(cluster_id=cluster_id).only(
        "pk", "admission_checks")
        if any(entry.get("name") in checks for entry in cq.admission_checks or ())]
    rows = Workload.objects.filter(cluster_id=cluster_id, phase__in=_RESERVED,
                                   cluster_queue_id__in=queues).select_related("job")
    reserved = {(wl.namespace, wl.name): wl for wl in rows.order_by()
                if any(s.get("name") in checks for s in wl.admission_check_states or ())}
    for key, wl in sorted(reserved.items()):
        _sync_workload(wl, checks, owned.get(key, []), requests, now=now, outcome=outcome)
    for key in sorted(set(owned) - set(reserved)):
        # Finished, evicted (quota released) or gone: its requests go (Kueue's
        # CleanupProvisioningRequestsOnEviction).
        for request in owned[key]:
            name = _name(request)
            requests.delete(key[0], name)
            outcome.deleted.append(f"{key[0]}/{name}")
    if outcome.changed:
        live.notify(cluster_id)
    return outcome


def _name(request: Mapping[str, Any]) -> str:
    return str((request.get("metadata") or {}).get("name", ""))


def _sync_workload(wl: Workload, checks: Mapping[str, core.Config | None],
                   owned: Sequence[Mapping[str, Any]], requests: Requests, *, now: datetime,
                   outcome: ProvisioningOutcome) -> None:
    if cond.is_true(wl.conditions, "Evicted"):
        for request in owned:
            requests.delete(wl.namespace, _name(request))
            outcome.deleted.append(f"{wl.namespace}/{_name(request)}")
        return
    assignments = list((wl.admission or {}).get("podSetAssignments") or ())
    pod_sets = list(wl.pod_sets or ())
    admitted = wl.phase == WorkloadPhase.ADMITTED
    finished = cond.is_true(wl.conditions, "Finished")
    states = {str(s.get("name")): dict(s) for s in wl.admission_check_states or ()}
    current: dict[str, Mapping[str, Any]] = {}
    needed: dict[str, bool] = {}
    updates: list[dict[str, Any]] = []
    events: list[Event] = []
    for name, config in sorted(checks.items()):
        state = states.get(name)
        if state is None:
            continue
        needed[name] = config is not None and core.request_is_needed(
            pod_sets, assignments, config.managed_resources)
        active_request = None if config is None else core.active_or_last(
            owned, wl.name, name, config, needed=needed[name])
        if active_request is not None:
            current[name] = active_request
        new = core.sync_check_state(state, config, active_request, workload=wl.name, pod_sets=pod_sets,
                                    needed=needed[name], admitted=admitted, active=wl.active,
                                    finished=finished)
        if new != state:
            update = {k: new[k] for k in ("name", "state", "message") if k in new}
            update["podSetUpdates"] = new.get("podSetUpdates") or []
            if new.get("requeueAfterSeconds") is not None:
                update["requeueAfterSeconds"] = new["requeueAfterSeconds"]
            updates.append(update)
            states[name] = new
            if new.get("state") != state.get("state"):
                message = (f"Admission check {name} updated state from {state.get('state')} "
                           f"to {new.get('state')}")
                if new.get("message"):
                    message += f" with message: {new['message']}"
                events.append(lifecycle.workload_event(wl, "AdmissionCheckUpdated", message,
                                                       now=now))
    keep = {_name(r) for r in current.values()}
    for stale in owned:
        if _name(stale) not in keep:
            requests.delete(wl.namespace, _name(stale))
            outcome.deleted.append(f"{wl.namespace}/{_name(stale)}")
    if updates:
        try:
            admission.set_admission_check_states(wl.pk, updates, now=now)
        except admission.AdmissionCheckError as exc:
            # A request whose pod sets are not the workload's (changed by hand): nothing is
            # written, and the pass goes on with the other workloads.
            logger.warning("workload %s/%s: %s: %s", wl.namespace, wl.name, exc.path, exc)
            return
        outcome.updated.append(f"{wl.namespace}/{wl.name}")
    Event.objects.bulk_create(events)
    for name, config in sorted(checks.items()):
        if config is None or not needed.get(name) or name not in states:
            continue
        attempt = core.next_attempt(states[name], current.get(name), workload=wl.name,
                                    check=name, admitted=admitted)
        if attempt is None:
            continue
        _create(wl, name, config, attempt, assignments, requests, now=now, outcome=outcome)


def _create(wl: Workload, check: str, config: core.Config, attempt: int,
            assignments: Sequence[Mapping[str, Any]], requests: Requests, *, now: datetime,
            outcome: ProvisioningOutcome) -> None:
    """The request of ``attempt`` and its pod templates: one per (merged) pod set, the
    admission's node selector and tolerations merged in, limits as missing requests."""
    name = core.request_name(wl.name, check, attempt)
    try:
        merged = core.merge_pod_sets(wl.pod_sets or (), assignments, config.managed_resources,
                                     config.pod_set_merge_policy)
    except ValueError as exc:
        # A pod set without an assignment: Kueue reports it and retries; so does the pass.
        logger.warning("workload %s/%s: no ProvisioningRequest for check %s: %s",
                       wl.namespace, wl.name, check, exc)
        return
    infos = {info.name: info for info in job_reconciler.pod_set_infos(
        wl.cluster_id, wl, elastic_job=False)}  # type: ignore[arg-type]  # non-null key
    templates: dict[str, dict[str, Any]] = {}
    pod_sets = []
    for entry in merged:
        template_name = core.pod_template_name(name, entry.name)
        template = entry.pod_set.get("template") or {}
        info = infos.get(entry.name)
        if info is not None:
            # The flavors' placement (Kueue's podset.FromAssignment), not the pod-set label.
            template = merge_into_template(template, replace(info, labels={}))
        templates[template_name] = core.use_limits_as_missing_requests(template)
        pod_sets.append({"podTemplateRef": {"name": template_name}, "count": entry.count})
    request = {
        "apiVersion": core.API_VERSION,
        "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": wl.namespace,
                     "labels": {core.MANAGED_LABEL[0]: core.MANAGED_LABEL[1]}},
        "spec": {"provisioningClassName": config.provisioning_class_name,
                 "parameters": core.request_parameters(config, wl.annotations or {}),
                 "podSets": pod_sets},
    }
    try:
        requests.create(wl, request, templates)
    except RequestRefused as exc:
        # Kueue's handleError: a Warning event, and the reason on the check, which stays
        # Pending; the next pass tries again.
        message = f'Error creating ProvisioningRequest "{name}": {exc}'
        Event.objects.create(**lifecycle.workload_event_row(
            wl, "FailedCreate", message[:1024], now=now, type_=EventType.WARNING))
        admission.set_admission_check_states(
            wl.pk, [{"name": check, "state": "Pending", "message": message}], now=now)
        return
    Event.objects.create(**lifecycle.workload_event_row(
        wl, "ProvisioningRequestCreated", f'Created ProvisioningRequest: "{name}"', now=now))
    outcome.created.append(f"{wl.namespace}/{name}")
