"""Which of a user's actions a workload's state allows: one definition, used by the services
(which refuse the others, naming the field and the reason) and by the workload page (which
offers only these).

- Nothing changes a finished workload (a job that completed or failed, a slice replaced by
  a scale-up, one out of sync with its job): Kueue's workload controller ignores a
  Finished workload, so an eviction would never complete and ``spec.active`` would mean
  nothing. Only its job can be deleted.
- ``evict``: an active workload holding quota that is not being evicted already (a
  deactivated one is evicted by its deactivation).
- ``deactivate`` / ``activate``: flip ``spec.active``.
- ``delete-job``: the workload has a job.

Scaling a job follows ``scheduling.workload.slices.scale_refusal``.
"""

from __future__ import annotations

from scheduling.choices import WorkloadPhase
from scheduling.models import Workload
from scheduling.validation import FieldError
from scheduling.workload import conditions as cond

EVICT = "evict"
DEACTIVATE = "deactivate"
ACTIVATE = "activate"
DELETE_JOB = "delete-job"
ACTIONS = (DEACTIVATE, ACTIVATE, EVICT, DELETE_JOB)

_RESERVED = (WorkloadPhase.QUOTA_RESERVED, WorkloadPhase.ADMITTED)


def finished_refusal(wl: Workload, path: str = "status.conditions") -> FieldError | None:
    """The refusal of every change to a finished workload, with its Finished reason, on the
    field ``path`` that was asked to change."""
    if wl.phase != WorkloadPhase.FINISHED:
        return None
    finished = cond.find(wl.conditions or [], "Finished") or {}
    reason = finished.get("reason") or "Finished"
    return FieldError(path, f"the workload has finished ({reason}): a finished workload does "
                      "not change; only its job can be deleted")


def refusal(wl: Workload, action: str) -> FieldError | None:
    """Why ``action`` cannot be done on ``wl`` now, as a field error; None if it can."""
    if action == DELETE_JOB:
        if wl.job_id is None:
            return FieldError("metadata.ownerReferences", "the workload has no job to delete")
        return None
    finished = finished_refusal(wl, "status.conditions" if action == EVICT else "spec.active")
    if finished is not None:
        return finished
    if action == EVICT:
        if wl.phase not in _RESERVED or wl.cluster_queue_id is None:
            return FieldError("status.admission", "the workload holds no quota: only an "
                              "admitted workload (or one with quota reserved) can be evicted")
        if not wl.active:
            return FieldError("spec.active", "the workload is deactivated: its deactivation "
                              "evicts it")
        if cond.is_true(wl.conditions or [], "Evicted"):
            return FieldError("status.conditions", "the workload is already being evicted")
    elif action == DEACTIVATE and not wl.active:
        return FieldError("spec.active", "the workload is already deactivated")
    elif action == ACTIVATE and wl.active:
        return FieldError("spec.active", "the workload is already active")
    return None


def allowed(wl: Workload) -> dict[str, bool]:
    """Each action (``delete-job`` as ``delete_job``, for templates) and whether the state
    allows it now."""
    return {action.replace("-", "_"): refusal(wl, action) is None for action in ACTIONS}
