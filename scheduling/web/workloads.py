"""A workload's page: its detail with its controls (deactivate, activate, evict, delete the
job); the list is ``scheduling.web.workload_list``.

Every region that updates live is one template include rendered both in the page and by its
partial URL (htmx ``live-refresh``). Controls are POST forms; each checks the user's role and
namespace again here and the service checks once more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from kueueweb.roles import Role, can_operate_in, role_of
from multicluster.choices import MULTIKUEUE_CONTROLLER_NAME, ClusterRole, Dispatcher
from multicluster.models import (
    AdmissionCheck,
    Cluster,
    Dispatch,
    MultiKueueConfig,
    Pod,
    PodGroup,
    ProvisioningRequest,
)
from scheduling import jobframework, services
from scheduling.api.workload_serializers import job_to_dict
from scheduling.cache import snapshots
from scheduling.choices import WorkloadPhase
from scheduling.core.quantities import format_amount
from scheduling.manifests import yamlio
from scheduling.models import Event, Workload
from scheduling.queue import visibility
from scheduling.web import slices
from scheduling.web.conditions import condition_rows
from scheduling.workload import actions
from scheduling.workload import conditions as cond
from scheduling.workload import slices as elastic

EVENTS_PAGE_SIZE = 25
DETAIL_REGIONS = ("status", "controls", "dispatch", "events", "pods", "slices", "job")

View = Callable[..., HttpResponseBase]


def reader_required(view: View) -> View:
    """Signed in and holding a role (viewer, operator or admin); 403 otherwise."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if role_of(request.user) == Role.NONE:
            raise PermissionDenied("You have no role in kueueweb; ask an administrator.")
        return view(request, *args, **kwargs)

    return wrapped


# =========================================================================================
# The detail page
# =========================================================================================


def get_workload(cluster: str, namespace: str, name: str) -> Workload:
    return get_object_or_404(
        Workload.objects.select_related("cluster", "job", "local_queue", "cluster_queue"),
        cluster__name=cluster, namespace=namespace, name=name,
    )


def _is_evicted(wl: Workload) -> bool:
    return cond.is_true(wl.conditions or [], "Evicted")


def _pod_sets(wl: Workload) -> list[dict[str, Any]]:
    result = []
    for ps in wl.pod_sets or ():
        result.append({
            "name": ps.get("name", jobframework.DEFAULT_POD_SET_NAME),
            "count": ps.get("count", 1),
            "min_count": ps.get("minCount"),
            "requests": jobframework.pod_set_requests(ps),
            "total": jobframework.pod_set_total_requests(ps),
        })
    return result


def _admission(wl: Workload) -> dict[str, Any] | None:
    """``status.admission``, and beside each pod set what it holds now when that is less
    (``snapshots.held_admission``: reclaimable pods, an elastic scale-down in place)."""
    if not wl.admission:
        return None
    held = {psa.name: psa for psa in snapshots.held_admission(
        {"admission": wl.admission, "pod_sets": wl.pod_sets,
         "reclaimable_pods": wl.reclaimable_pods}).pod_sets}
    assignments = []
    for psa in wl.admission.get("podSetAssignments") or ():
        flavors = psa.get("flavors") or {}
        usage = psa.get("resourceUsage") or {}
        now = held.get(psa.get("name", ""))
        smaller = now is not None and now.count < int(psa.get("count") or 0)
        assignments.append({
            "name": psa.get("name", ""),
            "count": psa.get("count"),
            "held_count": now.count if smaller and now is not None else None,
            "resources": [
                {"resource": r, "flavor": flavors.get(r, ""), "usage": usage.get(r, ""),
                 "held": format_amount(r, now.resource_usage.get(r, 0))
                 if smaller and now is not None else ""}
                for r in sorted(set(flavors) | set(usage))
            ],
        })
    return {"cluster_queue": wl.admission.get("clusterQueue", ""), "assignments": assignments}


def _timeline(wl: Workload) -> list[dict[str, Any]]:
    """The conditions by lastTransitionTime (oldest first), their time parsed."""
    items = []
    for c in wl.conditions or ():
        raw = c.get("lastTransitionTime")
        items.append({**c, "time": cond.parse_timestamp(raw), "raw_time": raw or ""})
    items.sort(key=lambda c: c["raw_time"])
    return items


def _region_status(wl: Workload) -> dict[str, Any]:
    requeue = wl.requeue_state or {}
    return {
        "evicted": _is_evicted(wl),
        "pod_sets": _pod_sets(wl),
        "admission": _admission(wl),
        "timeline": _timeline(wl),
        "requeue_count": requeue.get("count"),
        "requeue_at": wl.requeue_at or cond.parse_timestamp(requeue.get("requeueAt")),
        "reclaimable_pods": wl.reclaimable_pods or [],
        "admission_checks": wl.admission_check_states or [],
        "provisioning_requests": _provisioning_requests(wl),
        "why_pending": waiting_in_queue(wl),
        "slice_notice": _slice_notice(wl),
    }


def _slice_notice(wl: Workload) -> dict[str, Any] | None:
    """For a slice of an elastic job that is not the one the job runs on: the slice that
    replaced it (Kueue's ``kueue.x-k8s.io/workload-slice-replacement-for``) and the job's
    current slice, or the scale-up slice still waiting to replace it."""
    if wl.job is None:
        return None
    workloads = slices.job_workloads(wl.job)
    current = elastic.current_slice(workloads)
    key = elastic.key_of(wl)
    successors = [w for w in workloads if w.pk != wl.pk and elastic.replacement_for(w) == key]
    if wl.phase == WorkloadPhase.FINISHED and successors:
        replaced_by = successors[-1]
        return {"replaced_by": replaced_by, "replaced_by_url": slices.workload_url(replaced_by),
                "current": current if current is not None and current.pk != replaced_by.pk
                else None,
                "current_url": slices.workload_url(current) if current is not None else ""}
    if current is not None and current.pk == wl.pk:
        waiting = elastic.pending_replacement(workloads, of=wl)
        if waiting is not None:
            return {"waiting": waiting, "waiting_url": slices.workload_url(waiting)}
    return None


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, …, 11th, 12th, 13th, 21st."""
    suffix = "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def waiting_in_queue(wl: Workload) -> dict[str, Any] | None:
    """For a pending workload: its place in both queues (1-based, for people), the reason
    and message of its QuotaReserved=False condition as the scheduler wrote them (else
    why it waits, as the visibility API says), and since when it waits: its queue-order
    timestamp, the creation or the eviction that requeued it, as Kueue orders the queue."""
    if wl.phase != WorkloadPhase.PENDING:
        return None
    lq = wl.local_queue
    cq = lq.cluster_queue if lq is not None and lq.cluster_queue_id is not None else None
    place = visibility.workload_place(wl)
    reserved = cond.find(wl.conditions or [], "QuotaReserved") or {}
    refused = reserved.get("status") == "False"
    reason = str(reserved.get("reason") or "") if refused else ""
    message = str(reserved.get("message") or "") if refused else ""
    if place is not None and cq is not None:
        parked = visibility.parked_shape_of(wl, visibility.parked_shapes(cq))
        message = visibility.why_pending(wl, cq, place.position_in_cluster_queue, parked)
        reason = reason or (parked.reason if parked is not None else "Pending")
    elif not wl.active:
        reason = reason or "Inactive"
        message = message or "The workload is deactivated: it is out of its queue until activated"
    return {
        "place": place and {
            "in_cq": place.position_in_cluster_queue + 1,
            "in_lq": place.position_in_local_queue + 1,
            "in_cq_text": ordinal(place.position_in_cluster_queue + 1),
            "in_lq_text": ordinal(place.position_in_local_queue + 1),
            "cq_length": place.cluster_queue_length,
            "lq_length": place.local_queue_length,
        },
        "reason": reason or "Pending",
        "message": message,
        "waiting_since": wl.queued_at or wl.created_at,
        "requeued": wl.queued_at is not None and wl.queued_at != wl.created_at,
        "local_queue": lq,
        "cluster_queue": cq,
    }


def _provisioning_requests(wl: Workload) -> list[dict[str, str]]:
    """The workload's ProvisioningRequests on its simulated cluster, with their latest
    condition (a Kubernetes cluster's are in that cluster)."""
    shown = []
    for request in ProvisioningRequest.objects.filter(workload=wl).order_by("name"):
        conditions = sorted((request.status or {}).get("conditions") or (),
                            key=lambda c: str(c.get("lastTransitionTime", "")))
        last = conditions[-1] if conditions else {}
        condition = f"{last['type']}={last.get('status')}" if last else ""
        shown.append({"name": request.name, "condition": condition,
                      "message": str(last.get("message", ""))})
    return shown


def _region_events(wl: Workload, request: HttpRequest) -> dict[str, Any]:
    events = Event.objects.filter(workload=wl).order_by("-created_at", "-id")
    paginator = Paginator(events, EVENTS_PAGE_SIZE)
    page = paginator.get_page(request.GET.get("events_page"))
    return {"events_page": page}


def _region_pods(wl: Workload) -> dict[str, Any]:
    pods = Pod.objects.filter(job=wl.job) if wl.job_id is not None else Pod.objects.filter(workload=wl)
    return {
        "pods": list(pods.select_related("cluster").order_by("pod_set", "name")[:500]),
        "pod_groups": list(PodGroup.objects.filter(workload=wl).order_by("pod_set")),
    }


def _region_slices(wl: Workload) -> dict[str, Any]:
    return slices.slice_history(wl.job, this=wl)


def _cluster_queue_checks(wl: Workload) -> list[str]:
    """The admission checks of the workload's cluster queue (admitted to, or queued for)."""
    cq = wl.cluster_queue or (wl.local_queue.cluster_queue if wl.local_queue else None)
    names = []
    for item in (cq.admission_checks if cq is not None else None) or ():
        name = item.get("name") if isinstance(item, Mapping) else item
        if isinstance(name, str):
            names.append(name)
    return names


def _multikueue_check(wl: Workload) -> AdmissionCheck | None:
    """The MultiKueue admission check of the workload: from its check states, or while
    pending from its cluster queue."""
    states = [str(s.get("name", "")) for s in wl.admission_check_states or ()]
    names = states or _cluster_queue_checks(wl)
    if not names:
        return None
    checks = {ac.name: ac for ac in AdmissionCheck.objects.filter(
        cluster=wl.cluster, controller_name=MULTIKUEUE_CONTROLLER_NAME, name__in=names)}
    return next((checks[name] for name in names if name in checks), None)


def _remote_status(remote: Workload | None) -> dict[str, Any] | None:
    """The copy's Admitted condition once admitted there, else its QuotaReserved one."""
    if remote is None:
        return None
    admitted = cond.find(remote.conditions or [], "Admitted")
    if admitted is not None and admitted.get("status") == "True":
        return {"type": "Admitted", **admitted}
    reserved = cond.find(remote.conditions or [], "QuotaReserved")
    if reserved is not None:
        return {"type": "QuotaReserved", **reserved}
    return None


def _region_dispatch(wl: Workload) -> dict[str, Any]:
    """MultiKueue on the hub: the check, the dispatcher, the nomination, the rounds, the
    winner and the copies on the workers (``multicluster.dispatch``)."""
    check = _multikueue_check(wl)
    if check is None:
        return {"dispatch": None}
    state = next((dict(s) for s in wl.admission_check_states or ()
                  if s.get("name") == check.name), None)
    config_name = str((check.parameters or {}).get("name", ""))
    config = MultiKueueConfig.objects.filter(cluster=wl.cluster, name=config_name).first()
    copies: list[dict[str, Any]] = []
    rounds: dict[int, datetime] = {}  # round -> when its last copy was nominated
    for d in (Dispatch.objects.filter(workload=wl).select_related("worker", "remote_workload")
              .order_by("round", "worker__name")):
        rounds[d.round] = max(rounds.get(d.round, d.nominated_at), d.nominated_at)
        remote = d.remote_workload
        copies.append({
            "worker": d.worker.name, "round": d.round, "nominated_at": d.nominated_at,
            "state": d.state, "remote": remote,
            "remote_phase": remote.phase if remote is not None else "",
            "remote_status": _remote_status(remote),
            "lost": d.worker.lost_since is not None,
        })
    current = max(rounds, default=0)
    next_round_at = None
    if config is not None and config.dispatcher == Dispatcher.INCREMENTAL and current \
            and not wl.cluster_name and state is not None and state.get("state") == "Pending":
        next_round_at = rounds[current] + timedelta(
            seconds=float(settings.KUEUEWEB["DISPATCH_ROUND_TIMEOUT_SECONDS"]))
    return {"dispatch": {
        "removed": _copies_removed(wl, list(config.clusters) if config is not None else [],
                                   [c["worker"] for c in copies]),
        "check": check.name,
        "state": state,
        "config": config,
        "config_name": config_name,
        "dispatcher": config.dispatcher if config is not None else "",
        "configured": list(config.clusters) if config is not None else [],
        "nominated": list(wl.nominated_cluster_names or ()),
        "round": current,
        "next_round_at": next_round_at,
        "winner": wl.cluster_name,
        "copies": copies,
    }}


def _copy_removal(hub_wl: Workload, worker: str) -> str:
    """Why ``hub_wl`` has no copy on ``worker`` any more, or "" if that cannot be told.

    No record of a removal is kept (the dispatch goes with the copy): the reason follows
    from what is recorded, the winner (``status.clusterName``; the other workers' copies go
    once it admits) and whether the workload finished (then the winner's copy goes too)."""
    winner = hub_wl.cluster_name
    if winner and worker != winner:
        return f"removed from {worker} when {winner} admitted the workload"
    if hub_wl.phase == WorkloadPhase.FINISHED:
        return f"removed from {worker} after the workload finished"
    return ""


def _copies_removed(wl: Workload, configured: list[str], with_copy: list[str]) -> list[str]:
    """What became of the copies the region no longer lists: the other workers' once the
    winner admitted (whether each had one is not kept: "any"), the winner's once the
    workload finished."""
    winner = wl.cluster_name
    if not winner:
        return []
    notes = []
    others = [w for w in configured if w != winner and w not in with_copy]
    if others:
        notes.append(f"Any copies on {', '.join(others)} were removed when {winner} admitted "
                     "the workload.")
    if winner not in with_copy and wl.phase == WorkloadPhase.FINISHED:
        notes.append(f"The copy on {winner} was removed after the workload finished.")
    return notes


def _removed_copy(cluster: str, namespace: str, name: str) -> dict[str, Any] | None:
    """For the address of a worker's copy that is gone: the hub workload it copied and why
    it went, or None when the address was never a MultiKueue copy's."""
    worker = Cluster.objects.filter(name=cluster, role=ClusterRole.WORKER).first()
    hub_wl = (Workload.objects.filter(cluster__role=ClusterRole.MANAGER, namespace=namespace,
                                      name=name).select_related("cluster").first())
    if worker is None or hub_wl is None or _multikueue_check(hub_wl) is None:
        return None
    return {"worker": worker.name, "hub_wl": hub_wl, "hub_url": slices.workload_url(hub_wl),
            "removal": _copy_removal(hub_wl, worker.name)}


def _hub_origin(wl: Workload) -> dict[str, Any] | None:
    """For a worker's copy of a hub workload (label ``kueue.x-k8s.io/multikueue-origin``):
    the hub workload it copies."""
    from multicluster.dispatch import MULTIKUEUE_ORIGIN_LABEL

    origin = (wl.labels or {}).get(MULTIKUEUE_ORIGIN_LABEL)
    if origin is None or wl.cluster.role == ClusterRole.MANAGER:
        return None
    d = (Dispatch.objects.filter(remote_workload=wl).select_related("workload__cluster")
         .first())
    if d is not None:
        hub_wl = d.workload
        return {"origin": origin, "cluster": hub_wl.cluster.name, "namespace": hub_wl.namespace,
                "name": hub_wl.name, "exists": True}
    hub = Cluster.objects.filter(role=ClusterRole.MANAGER).first()
    exists = hub is not None and Workload.objects.filter(
        cluster=hub, namespace=wl.namespace, name=wl.name).exists()
    return {"origin": origin, "cluster": hub.name if hub is not None else "",
            "namespace": wl.namespace, "name": wl.name, "exists": exists}


def _live_clusters(wl: Workload, dispatch: Mapping[str, Any] | None,
                   hub_origin: Mapping[str, Any] | None) -> str:
    """The domains the page follows: the workload's, and for MultiKueue the workers its
    copies are on (the hub's, for a copy)."""
    ids = {wl.cluster.pk}
    if dispatch is not None:
        ids.update(Cluster.objects.filter(role=ClusterRole.WORKER).values_list("pk", flat=True))
    if hub_origin is not None:
        ids.update(Cluster.objects.filter(role=ClusterRole.MANAGER).values_list("pk", flat=True))
    return " ".join(str(pk) for pk in sorted(ids))


def _region_job(wl: Workload) -> dict[str, Any]:
    if wl.job is None:
        return {"job_yaml": "", "job_status": {}, "condition_rows": []}
    manifest = job_to_dict(wl.job)
    status = manifest.pop("status", {}) or {}
    # The conditions get a table of their own; the other fields are scalars or small maps.
    rows = condition_rows(status.pop("conditions", None))
    return {"job_yaml": yamlio.dump_documents([manifest]), "job_status": status,
            "condition_rows": rows}


def _region_controls(wl: Workload, request: HttpRequest, *, page: bool = False) -> dict[str, Any]:
    """The controls; on the page itself (``page``) also the errors of the last scale attempt,
    which the live refreshes of the region keep (``hx-preserve``)."""
    may_act = can_operate_in(request.user, wl.namespace)
    finished = actions.finished_refusal(wl)
    context: dict[str, Any] = {
        "may_act": may_act,
        # What the state allows, as the services decide (``scheduling.workload.actions``).
        "actions": actions.allowed(wl),
        "finished_reason": finished.message if finished is not None else "",
    }
    if wl.job is not None and may_act:
        flash = slices.pop_scale_errors(request, wl.job) if page else None
        context.update(slices.scale_control(wl.job, request.user, next_url=slices.workload_url(wl),
                                            flash=flash))
    return context


def _detail_context(
    wl: Workload, request: HttpRequest, regions: tuple[str, ...], *, page: bool = False
) -> dict[str, Any]:
    context: dict[str, Any] = {"wl": wl, "phase_choices": WorkloadPhase}
    builders: Mapping[str, Callable[[], dict[str, Any]]] = {
        "status": lambda: _region_status(wl),
        "controls": lambda: _region_controls(wl, request, page=page),
        "dispatch": lambda: _region_dispatch(wl),
        "events": lambda: _region_events(wl, request),
        "pods": lambda: _region_pods(wl),
        "slices": lambda: _region_slices(wl),
        "job": lambda: _region_job(wl),
    }
    for region in regions:
        context.update(builders[region]())
    return context


@require_GET
@reader_required
def workload_detail(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    try:
        wl = get_workload(cluster, namespace, name)
    except Http404:
        # A link to a MultiKueue copy that was cleaned up says where the workload went.
        removed = _removed_copy(cluster, namespace, name)
        if removed is None:
            raise
        return render(request, "scheduling/workload_copy_removed.html", removed, status=404)
    context = _detail_context(wl, request, DETAIL_REGIONS, page=True)
    context["hub_origin"] = _hub_origin(wl)
    context["live_clusters"] = _live_clusters(wl, context["dispatch"], context["hub_origin"])
    return render(request, "scheduling/workload_detail.html", context)


@require_GET
@reader_required
def workload_region(
    request: HttpRequest, cluster: str, namespace: str, name: str, region: str
) -> HttpResponse:
    if region not in DETAIL_REGIONS:
        raise Http404("No such region.")
    wl = get_workload(cluster, namespace, name)
    context = _detail_context(wl, request, (region,))
    return render(request, f"scheduling/_workload_{region}.html", context)


# =========================================================================================
# Controls
# =========================================================================================

ACTIONS = actions.ACTIONS


def _error_text(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        if hasattr(exc, "error_dict"):
            return "; ".join(f"{path}: {' '.join(msgs)}" for path, msgs in exc.message_dict.items())
        return " ".join(exc.messages)
    return str(exc) or exc.__class__.__name__


@require_POST
@reader_required
def workload_action(
    request: HttpRequest, cluster: str, namespace: str, name: str, action: str
) -> HttpResponse:
    if action not in ACTIONS:
        raise Http404("No such action.")
    wl = get_workload(cluster, namespace, name)
    if not can_operate_in(request.user, wl.namespace):
        raise PermissionDenied(f"You may not act on workloads in namespace {wl.namespace!r}.")
    detail_url = reverse("ui-workload", kwargs={"cluster": cluster, "namespace": namespace,
                                                "name": name})
    label = f"{wl.namespace}/{wl.name}"
    try:
        if action == "deactivate":
            services.update_workload(wl, {"spec": {"active": False}})
            messages.success(request, f"Workload {label} deactivated.")
        elif action == "activate":
            services.update_workload(wl, {"spec": {"active": True}})
            messages.success(request, f"Workload {label} activated.")
        elif action == "evict":
            services.evict_workload(wl, user=request.user, now=timezone.now())
            messages.success(request, f"Workload {label} evicted; it goes back to its queue "
                             "once its pods are gone.")
        else:
            refused = actions.refusal(wl, actions.DELETE_JOB)
            if refused is not None or wl.job is None:
                messages.error(request, f"Could not delete the job of {label}: "
                               f"{refused.message if refused else 'it has none'}")
                return HttpResponseRedirect(detail_url)
            job_name = wl.job.name
            services.delete_job(wl.job)
            if Workload.objects.filter(pk=wl.pk).exists():
                # A pod group's Workload outlives one member while others remain.
                messages.success(request, f"{wl.job.kind} {wl.namespace}/{job_name} deleted; "
                                 f"workload {label} waits for a replacement.")
                return HttpResponseRedirect(detail_url)
            messages.success(request, f"Job {wl.namespace}/{job_name} and its workloads deleted.")
            return HttpResponseRedirect(reverse("ui-workloads"))
    except (services.ConflictError, ValidationError, PermissionDenied) as exc:
        messages.error(request, f"Could not {action.replace('-', ' ')} {label}: {_error_text(exc)}")
    return HttpResponseRedirect(detail_url)
