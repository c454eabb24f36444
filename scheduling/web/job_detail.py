"""A job's page: its spec and status, its pods, its scale control and the history of its
workload slices, plus the scale action shared with the workload page.

As on the workload page, every region that updates live is one template include rendered
both in the page and by its partial URL (htmx ``live-refresh``). Scaling is a POST form
(CSRF, a confirmation dialog); it checks the user's namespace here and the service
(``scheduling.workload.slices.scale_job``) checks again. Errors are shown next to the control, by
field, on the page the form came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import Resolver404, resolve
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from kueueweb.roles import can_operate_in
from multicluster.choices import PodPhase
from multicluster.models import Pod
from scheduling import deployments, jobframework, leaderworkersets, services, statefulsets
from scheduling.choices import EventType, WorkloadPhase
from scheduling.jobframework import registry
from scheduling.jobs import deployment as deployment_kind
from scheduling.jobs import leaderworkerset as lws_kind
from scheduling.models import Event, Job, Workload
from scheduling.web import job_pods, slices
from scheduling.web.conditions import condition_rows
from scheduling.web.forms import field_errors
from scheduling.web.workloads import reader_required, waiting_in_queue
from scheduling.workload import conditions as cond
from scheduling.workload import slices as elastic

JOB_REGIONS = ("summary", "controls", "pods", "slices", "events")
EVENTS_PAGE_SIZE = 25
_INTEGER = re.compile(r"^[+-]?\d+$")
# Digits kept of a typed number: more are far outside an int32, and Python refuses to read
# more than 4300 (a ValueError, not a field error).
_DIGITS_READ = 20


def get_job(cluster: str, namespace: str, kind: str, name: str) -> Job:
    jobs = Job.objects.select_related("cluster").filter(cluster__name=cluster,
                                                          namespace=namespace)
    try:
        job = services.find_job(jobs, name, kind=kind)
    except ValidationError as exc:  # a malformed kind names no page
        raise Http404(" ".join(exc.messages)) from exc
    if job is None:
        raise Http404(f"No {kind} {namespace}/{name} in cluster {cluster}.")
    return job


# =========================================================================================
# Regions
# =========================================================================================


def _region_summary(job: Job, workloads: list[Workload]) -> dict[str, Any]:
    status = job.status or {}
    current = elastic.current_slice(workloads)
    pods = Pod.objects.filter(job=job)
    gated = sum(1 for gates, reason in pods.values_list("scheduling_gates", "reason")
                if gates or reason == "SchedulingGated")
    conditions = [c for c in status.get("conditions") or () if c.get("status") == "True"]
    labels = ((job.manifest or {}).get("metadata") or {}).get("labels") or {}
    counts = []
    for ps in elastic.scalable_pod_sets(job):
        key = elastic.count_field(ps)
        counts.append({"slug": re.sub(r"[^a-z0-9-]", "-", key.lower()), "path": ps.path,
                       "label": slices.field_label(ps, key), "value": ps.count})
    # The pod sets as the current workload asks for them (minCount: partial admission).
    pod_sets = [{"name": ps.get("name", jobframework.DEFAULT_POD_SET_NAME),
                 "count": ps.get("count", 1), "min_count": ps.get("minCount")}
                for ps in (current.pod_sets if current is not None else ())]
    return {
        "spec": {
            "counts": counts,
            "pod_sets": pod_sets,
            "elastic": elastic.is_elastic_job(job),
            "queue": labels.get(jobframework.QUEUE_NAME_LABEL, ""),
            "suspend": job.suspend,
        },
        "job_status": {
            "active": status.get("active", 0),
            "ready": status.get("ready", 0),
            "succeeded": status.get("succeeded", 0),
            "failed": status.get("failed", 0),
            "gated": gated,
            "conditions": conditions,
        },
        "condition_rows": condition_rows(status.get("conditions")),
        "serving": _serving(job),
        "current": current,
        # A queued job waits as its workload does: the same block as on the workload page.
        "current_why_pending": waiting_in_queue(current) if current is not None else None,
        "current_admitted": slices.admitted_count(current) if current is not None else None,
        "current_pods": slices.pod_count(current) if current is not None else None,
    }


def _serving(job: Job) -> dict[str, Any] | None:
    """A Deployment, a StatefulSet or a LeaderWorkerSet serves until deleted: its replicas
    (Pods; a LeaderWorkerSet's, groups of Pods) as desired and ready, and its Pods, each a
    job: a Deployment's each with its own workload, a StatefulSet's members of its one
    group workload, a LeaderWorkerSet's members of their group's."""
    if deployments.manages(job):
        desired, children = deployment_kind.replicas(job.manifest), deployments.owned_pods(job)
        note = "each Pod is queued on its own"
    elif statefulsets.manages(job):
        desired, children = deployment_kind.replicas(job.manifest), statefulsets.owned_pods(job)
        note = "the Pods are admitted together, as one group"
    elif leaderworkersets.manages(job):
        desired, children = lws_kind.replicas(job.manifest), leaderworkersets.owned_pods(job)
        note = (f"groups of {lws_kind.size(job.manifest)} Pods, each group queued as one "
                "Workload")
    else:
        return None
    status = job.status or {}
    return {"desired": desired,
            "ready": status.get("readyReplicas", 0), "replicas": status.get("replicas", 0),
            "updated": status.get("updatedReplicas", 0), "note": note,
            "pods": [p.name for p in children]}


def _region_controls(job: Job, workloads: list[Workload], request: HttpRequest, *,
                     page: bool) -> dict[str, Any]:
    flash = slices.pop_scale_errors(request, job) if page else None
    return slices.scale_control(job, request.user, next_url=slices.job_url(job),
                                workloads=workloads, flash=flash)


def _pod_counts() -> dict[str, int]:
    return {"total": 0, "running": 0, "ready": 0, "pending": 0, "gated": 0}


def _count_pod(counts: dict[str, int], pod: job_pods.PodRow) -> None:
    counts["total"] += 1
    counts["running"] += pod.phase == PodPhase.RUNNING
    counts["ready"] += bool(pod.ready)
    counts["pending"] += pod.phase == PodPhase.PENDING
    counts["gated"] += bool(pod.scheduling_gates) or pod.reason == "SchedulingGated"


def _job_pod_sets(job: Job, workloads: list[Workload]) -> Sequence[Mapping[str, Any]]:
    """The pod sets (roles) of the job: as its current workload asks for them, else as its
    newest workload did (a finished job), else as its kind reads them from the manifest
    (none for a kind that makes no Workload, a CronJob)."""
    shown = elastic.current_slice(workloads) or (workloads[-1] if workloads else None)
    if shown is not None:
        return list(shown.pod_sets or ())
    integration = registry.by_kind(job.api_version, job.kind)
    if not isinstance(integration, jobframework.GenericJob):
        return []
    return integration.pod_sets(job.manifest, partial_admission=True)


def _region_pods(job: Job, workloads: list[Workload]) -> dict[str, Any]:
    listed = job_pods.job_pods(job, workloads)
    pods = listed.rows
    counts = _pod_counts()
    by_pod_set: dict[str, dict[str, int]] = {}
    for pod in pods:
        _count_pod(counts, pod)
        _count_pod(by_pod_set.setdefault(pod.pod_set, _pod_counts()), pod)
    pod_sets = []
    for ps in _job_pod_sets(job, workloads):
        name = str(ps.get("name", jobframework.DEFAULT_POD_SET_NAME))
        requests = jobframework.pod_set_requests(ps)
        pod_sets.append({
            "name": name, "count": ps.get("count", 1), "min_count": ps.get("minCount"),
            "requests": [f"{resource}: {value}" for resource, value in requests.items()],
            "pods": by_pod_set.get(name, _pod_counts()),
        })
    return {"pods": pods, "pod_counts": counts, "pod_sets": pod_sets,
            "pods_on_kubernetes": listed.on_kubernetes, "pods_error": listed.error,
            "why_pending": why_pending(workloads)}


# How many of the newest pod warnings "why pending" reads.
WHY_PENDING_EVENTS = 50


def why_pending(workloads: list[Workload]) -> list[Event]:
    """Why the pods of an admitted job do not run yet: the newest Warning event about each
    of its pods (a Kubernetes cluster's FailedScheduling, FailedMount, image pull back-off;
    a simulated cluster's wait for a gang's Workload), until its pods are ready."""
    current = elastic.current_slice(workloads)
    if (current is None or current.phase != WorkloadPhase.ADMITTED
            or cond.is_true(current.conditions, "PodsReady")):
        return []
    newest: dict[str, Event] = {}
    for event in Event.objects.filter(workload=current, object_kind="Pod",
                                      type=EventType.WARNING
                                      ).order_by("-created_at", "-id")[:WHY_PENDING_EVENTS]:
        newest.setdefault(event.object_name, event)
    return [newest[name] for name in sorted(newest)]


def _region_events(job: Job, request: HttpRequest) -> dict[str, Any]:
    # The job's workload ids as a list rather than a join or subquery: each side of the OR
    # then uses its own index (events of those workloads; events naming the job) instead of
    # a scan of the whole history in date order.
    workload_ids = list(Workload.objects.filter(job=job).values_list("id", flat=True))
    events = Event.objects.filter(
        Q(workload_id__in=workload_ids)
        | Q(cluster_id=job.cluster_id, object_kind=job.kind, object_namespace=job.namespace,
            object_name=job.name)
    ).order_by("-created_at", "-id")
    page = Paginator(events, EVENTS_PAGE_SIZE).get_page(request.GET.get("events_page"))
    return {"events_page": page}


def _job_context(job: Job, request: HttpRequest, regions: tuple[str, ...], *,
                 page: bool = False) -> dict[str, Any]:
    workloads = slices.job_workloads(job)
    context: dict[str, Any] = {"job": job}
    builders: Mapping[str, Callable[[], dict[str, Any]]] = {
        "summary": lambda: _region_summary(job, workloads),
        "controls": lambda: _region_controls(job, workloads, request, page=page),
        "pods": lambda: _region_pods(job, workloads),
        "slices": lambda: slices.slice_history(job, workloads=workloads),
        "events": lambda: _region_events(job, request),
    }
    for region in regions:
        context.update(builders[region]())
    return context


@require_GET
@reader_required
def job_by_name(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    """A job addressed by its name alone: its page when one kind has the name, else the
    jobs of that name to choose from."""
    jobs = list(Job.objects.select_related("cluster").filter(
        cluster__name=cluster, namespace=namespace, name=name).order_by("api_group", "kind"))
    if not jobs:
        raise Http404(f"No job {namespace}/{name} in cluster {cluster}.")
    if len(jobs) == 1:
        return HttpResponseRedirect(slices.job_url(jobs[0]))
    return render(request, "scheduling/job_choose.html", {
        "jobs": [(job, slices.job_url(job)) for job in jobs], "namespace": namespace,
        "name": name, "cluster": cluster})


@require_GET
@reader_required
def job_detail(request: HttpRequest, cluster: str, namespace: str, kind: str,
               name: str) -> HttpResponse:
    job = get_job(cluster, namespace, kind, name)
    context = _job_context(job, request, JOB_REGIONS, page=True)
    context["live_clusters"] = str(job.cluster_id)
    return render(request, "scheduling/job_detail.html", context)


@require_GET
@reader_required
def job_region(
    request: HttpRequest, cluster: str, namespace: str, kind: str, name: str, region: str
) -> HttpResponse:
    if region not in JOB_REGIONS:
        raise Http404("No such region.")
    job = get_job(cluster, namespace, kind, name)
    return render(request, f"scheduling/_job_{region}.html",
                  _job_context(job, request, (region,)))


# =========================================================================================
# Scaling
# =========================================================================================


def _done_message(result: elastic.ScaleResult, label: str) -> str:
    before = elastic.describe_counts(result.previous)
    after = elastic.describe_counts(result.counts)
    what = _counted(result.job)
    wl = result.workload
    if result.action == "unchanged":
        return f"Job {label} already has {what} {after}."
    if result.action == "scale-down":
        return (f"Job {label} scaled down from {before} to {after}: the quota of the removed "
                "pods is free.")
    if result.action in ("scale-up", "scale-up-updated") and wl is not None:
        return (f"Job {label} scaling up from {before} to {after}: workload slice {wl.name} "
                "waits for quota for the extra pods; the job keeps running meanwhile.")
    return f"Job {label} scaled from {before} to {after}."


def _counted(job: Job) -> str:
    """What the counts are called: the one scalable field (``parallelism``), or counts."""
    scalable = elastic.scalable_pod_sets(job)
    if len(scalable) == 1:
        return slices.field_label(scalable[0], elastic.count_field(scalable[0])).lower()
    return "counts"


def _safe_next(request: HttpRequest, job: Job) -> str:
    candidate = request.POST.get("next") or ""
    if candidate.startswith("/") and url_has_allowed_host_and_scheme(
            candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return candidate
    return slices.job_url(job)


def _after_scale_url(back: str, job: Job, result: elastic.ScaleResult) -> str:
    """Where a successful scale leads: back to the page the form came from, except that a
    workload page leads on to the slice the job goes on with (a scale-up's new slice, else
    the job's current one), so that no one keeps acting on a slice that is being replaced."""
    try:
        match = resolve(urlsplit(back).path)
    except Resolver404:
        return back
    if match.url_name != "ui-workload":
        return back
    target = result.workload
    if target is None or target.phase == WorkloadPhase.FINISHED:
        target = elastic.current_slice(slices.job_workloads(job))
    return slices.workload_url(target) if target is not None else back


def _typed_integer(raw: str) -> int:
    """The integer typed; one of more than ``_DIGITS_READ`` significant digits becomes one of
    that many nines, with its sign, which is as far out of range for the service."""
    sign = "-" if raw.startswith("-") else ""
    digits = raw.lstrip("+-").lstrip("0") or "0"
    return int(sign + (digits if len(digits) <= _DIGITS_READ else "9" * _DIGITS_READ))


@require_POST
@reader_required
def job_scale(request: HttpRequest, cluster: str, namespace: str, kind: str,
              name: str) -> HttpResponse:
    """Set the counts of the job's scalable pod sets (one field each, named as
    ``slices.scale_control`` names them); back to the page the form came from (``next``)."""
    job = get_job(cluster, namespace, kind, name)
    if not can_operate_in(request.user, job.namespace):
        raise PermissionDenied(f"You may not scale jobs in namespace {job.namespace!r}.")
    back = _safe_next(request, job)
    label = f"{job.namespace}/{job.name}"
    raw: dict[str, str] = {}
    counts: dict[str, Any] = {}
    errors: list[tuple[str, str]] = []
    for ps in elastic.scalable_pod_sets(job):
        key = elastic.count_field(ps)
        raw[key] = (request.POST.get(key) or "").strip()
        if not raw[key]:
            errors.append((ps.path, "Required: the new count"))
        else:
            # As typed: the service names the field when it is not an int32 ≥ 0.
            counts[ps.name] = (_typed_integer(raw[key]) if _INTEGER.match(raw[key])
                               else raw[key])
    if not errors:
        try:
            result = elastic.scale_job(job, counts, user=request.user)
        except ValidationError as exc:
            errors = field_errors(exc)
        except services.ConflictError as exc:
            errors = [("", f"{exc} (the job changed meanwhile; try again)")]
        except PermissionDenied as exc:
            errors = [("", str(exc))]
        else:
            messages.success(request, _done_message(result, label))
            return HttpResponseRedirect(_after_scale_url(back, job, result))
    slices.remember_scale_errors(request, job, errors, raw)
    return HttpResponseRedirect(back)
