"""The job reconciler both cluster backends share: when a job runs, and how many pods."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling import job_reconciler as reconciler
from scheduling.choices import WorkloadPhase
from scheduling.models import Workload

pytestmark = pytest.mark.django_db

EVICTED = [{"type": "Evicted", "status": "True", "reason": "Preempted", "message": ""}]


def workload(**fields: Any) -> Workload:
    values: dict[str, Any] = {"phase": WorkloadPhase.ADMITTED, "active": True,
                              "cluster_name": "", "conditions": [],
                              "pod_sets": [{"name": "main", "count": 4}],
                              "admission": {"podSetAssignments": [{"name": "main", "count": 4}]}}
    values.update(fields)
    return Workload(**values)


@pytest.mark.parametrize(("fields", "runs", "on_worker"), [
    ({}, True, False),
    ({"phase": WorkloadPhase.QUOTA_RESERVED}, False, False),
    ({"active": False}, False, False),
    ({"conditions": EVICTED}, False, False),
    ({"cluster_name": "worker-1"}, False, True),
    ({"cluster_name": "worker-1", "conditions": EVICTED}, False, False),
], ids=["admitted", "reserved only", "deactivated", "evicted", "on a worker",
        "evicted on a worker"])
def test_a_job_runs_here_only_while_its_workload_is_admitted_here(
    fields: dict[str, Any], runs: bool, on_worker: bool,
) -> None:
    wl = workload(**fields)

    assert reconciler.should_run(wl) is runs
    assert reconciler.placed_on_worker(wl) is on_worker


def test_nothing_runs_without_a_workload() -> None:
    assert not reconciler.should_run(None)
    assert not reconciler.placed_on_worker(None)


def test_an_elastic_slice_runs_no_more_than_its_scaled_down_count() -> None:
    wl = workload(pod_sets=[{"name": "main", "count": 2}])

    assert reconciler.admitted_pods(wl, elastic_job=True) == 2
    assert reconciler.admitted_pods(wl, elastic_job=False) == 4
