"""What the job page and the workload page both show of a job: its scale control and the
history of its workload slices (Kueue elastic jobs, ``pkg/workloadslicing``).

Plain functions building template context; the views in ``scheduling.web.workloads`` and
``scheduling.web.job_detail`` call them and render ``_scale_control.html`` and
``_slice_history.html``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest
from django.urls import reverse

from kueueweb.roles import can_operate_in
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.models import Job, Workload
from scheduling.workload import conditions as cond
from scheduling.workload import slices

# What scaling will do (shown when the control is enabled).
HINT_ELASTIC = ("Elastic job: scaling down frees the quota of the removed pods at once; scaling "
                "up waits for quota for the extra pods while the job keeps running.")
HINT_QUEUED = "The job is queued: its workload will wait for quota with the new pod count."

# Scale errors carried from the POST to the page it redirects to, once (session key).
_SESSION_PREFIX = "kueueweb.scale-errors."
# Newest slices shown; a job scaled very often keeps a long chain of finished slices.
SLICE_HISTORY_LIMIT = 50


def pod_count(wl: Workload) -> int:
    return sum(int(ps.get("count", 1)) for ps in wl.pod_sets or ())


def admitted_count(wl: Workload) -> int | None:
    """Pods the admission grants (all pod sets); None while no quota is reserved.

    ``status.admission`` is immutable while set: after a scale-down in place it still records
    the old count, and the quota held follows the smaller pod set (Kueue ``pkg/workload/workload.go``
    ``totalRequestsFromAdmission``). The
    count shown is therefore per pod set the smaller of the two.
    """
    if not wl.admission:
        return None
    counts = slices.pod_set_counts(wl.pod_sets or [])
    total = 0
    for psa in wl.admission.get("podSetAssignments") or ():
        granted = int(psa.get("count") or 0)
        name = str(psa.get("name", jobframework.DEFAULT_POD_SET_NAME))
        total += min(granted, counts[name]) if name in counts else granted
    return total


def flavors(wl: Workload) -> list[str]:
    """``resource: flavor`` of the admission, sorted."""
    seen: dict[str, str] = {}
    for psa in (wl.admission or {}).get("podSetAssignments") or ():
        for resource, flavor in (psa.get("flavors") or {}).items():
            seen.setdefault(str(resource), str(flavor))
    return [f"{resource}: {flavor}" for resource, flavor in sorted(seen.items())]


def workload_url(wl: Workload) -> str:
    return reverse("ui-workload", kwargs={"cluster": wl.cluster.name, "namespace": wl.namespace,
                                          "name": wl.name})


def job_url(job: Job) -> str:
    return reverse("ui-job", kwargs={"cluster": job.cluster.name, "namespace": job.namespace,
                                     "kind": job.kind_reference, "name": job.name})


def job_workloads(job: Job) -> list[Workload]:
    return slices.ordered(Workload.objects.filter(job=job).select_related("cluster"))


# =========================================================================================
# The scale control
# =========================================================================================


def field_label(ps: jobframework.ScalablePodSet, key: str) -> str:
    if key.startswith("podSets."):
        return f"Pod set {ps.name}"
    return key[:1].upper() + key[1:]


def scale_control(
    job: Job, user: AbstractBaseUser | AnonymousUser, *, next_url: str,
    workloads: Iterable[Workload] | None = None, flash: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Context of ``_scale_control.html``: ``scale`` with the state of the control, one
    field per pod set the job's kind scales (``fields``), and the errors of the last attempt
    (``flash``, from ``pop_scale_errors``)."""
    workloads = job_workloads(job) if workloads is None else list(workloads)
    refused = slices.scale_refusal(job, workloads)
    reason = refused.reason if refused is not None else ""
    current = slices.current_slice(workloads)
    flash = flash or {}
    typed = flash.get("values") or {}
    label = f"{job.namespace}/{job.name}"
    fields = []
    for ps in slices.scalable_pod_sets(job):
        key = slices.count_field(ps)
        fields.append({
            "id": "scale-" + re.sub(r"[^A-Za-z0-9-]", "-", key),
            "name": key,
            "label": field_label(ps, key),
            "path": ps.path,
            "current": ps.count,
            "max": jobframework.MAX_INT32,
            "value": typed.get(key, ps.count),
            "edited": key in typed,
        })
    if len(fields) == 1:
        before = f"{fields[0]['label'].lower()} {fields[0]['current']}"
        confirm = f"Scale job {label} from {before} to the value entered?"
        confirm_template = f"Scale job {label} from {before} to {{n}}?"
    else:
        counts = {f["name"]: f["current"] for f in fields}
        confirm = (f"Scale job {label} from {slices.describe_counts(counts)} to the values "
                   "entered?")
        confirm_template = ""
    return {"scale": {
        "may_act": can_operate_in(user, job.namespace) and bool(fields),
        "enabled": not reason,
        # A finished job offers no scale control at all: nothing will ever change it.
        "finished": refused is slices.REFUSED_FINISHED,
        "reason": reason,
        "hint": HINT_ELASTIC if slices.is_elastic_job(job) else HINT_QUEUED,
        "fields": fields,
        "confirm": confirm,
        "confirm_template": confirm_template,
        "errors": [tuple(e) for e in flash.get("errors", ())],
        "running": admitted_count(current) if current is not None else None,
        "next": next_url,
        "label": label,
    }}


def remember_scale_errors(request: HttpRequest, job: Job, errors: list[tuple[str, str]],
                          values: Mapping[str, str]) -> None:
    request.session[f"{_SESSION_PREFIX}{job.pk}"] = {"errors": [list(e) for e in errors],
                                                      "values": dict(values)}


def pop_scale_errors(request: HttpRequest, job: Job) -> dict[str, Any]:
    """The errors of the last scale attempt on ``job`` in this session, once."""
    flash = request.session.pop(f"{_SESSION_PREFIX}{job.pk}", None)
    return flash if isinstance(flash, dict) else {}


# =========================================================================================
# The slice history
# =========================================================================================


def _quota_message(wl: Workload) -> str:
    found = cond.find(wl.conditions or [], "QuotaReserved")
    if found is not None and found.get("status") == "False":
        return str(found.get("message") or found.get("reason") or "")
    return ""


def slice_history(job: Job | None, *, workloads: Iterable[Workload] | None = None,
                  this: Workload | None = None) -> dict[str, Any]:
    """Context of ``_slice_history.html``: every workload of the job oldest first
    (``slices``), and the scale-up waiting for quota (``pending_scale_up``), if any."""
    if job is None:
        return {"slices": [], "pending_scale_up": None, "slices_hidden": 0, "has_job": False}
    all_workloads = job_workloads(job) if workloads is None else slices.ordered(workloads)
    by_key = {slices.key_of(wl): wl for wl in all_workloads}
    replaced_by: dict[str, list[Workload]] = {}
    for wl in all_workloads:
        target = slices.replacement_for(wl)
        if target:
            replaced_by.setdefault(target, []).append(wl)
    current = slices.current_slice(all_workloads)
    pending = (slices.pending_replacement(all_workloads, of=current)
               if current is not None and slices.holds_quota(current) else None)
    shown = all_workloads[-SLICE_HISTORY_LIMIT:]
    rows = []
    for wl in shown:
        target = slices.replacement_for(wl)
        replaces = by_key.get(target) if target else None
        finished = cond.find(wl.conditions or [], "Finished")
        rows.append({
            "id": wl.pk,
            "name": wl.name,
            "namespace": wl.namespace,
            "url": workload_url(wl),
            "phase": wl.phase,
            "active": wl.active,
            "evicted": cond.is_true(wl.conditions or [], "Evicted"),
            "created_at": wl.created_at,
            "pod_count": pod_count(wl),
            "admitted_count": admitted_count(wl),
            "flavors": flavors(wl),
            "replaces_key": target or "",
            "replaces_name": (target or "").split("/", 1)[-1],
            "replaces_url": workload_url(replaces) if replaces is not None else "",
            "replaced_by": [{"name": r.name, "url": workload_url(r)}
                            for r in replaced_by.get(slices.key_of(wl), ())],
            "finished_reason": (finished or {}).get("reason", "") if finished and
            finished.get("status") == "True" else "",
            "waiting": _quota_message(wl) if wl.phase == WorkloadPhase.PENDING else "",
            "is_current": current is not None and wl.pk == current.pk,
            "is_pending": pending is not None and wl.pk == pending.pk,
            "is_this": this is not None and wl.pk == this.pk,
        })
    pending_scale_up = None
    if pending is not None and current is not None:
        running = admitted_count(current)
        pending_scale_up = {
            "from": running if running is not None else pod_count(current),
            "to": pod_count(pending),
            "name": pending.name,
            "url": workload_url(pending),
            "waiting": _quota_message(pending) or "waiting for the next admission cycle",
        }
    return {"slices": rows, "pending_scale_up": pending_scale_up,
            "slices_hidden": len(all_workloads) - len(shown), "has_job": True}
