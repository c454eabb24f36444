"""The summary of a run, from what the application recorded: each workload's actual
creation and admission against the moment the shape's timeline scheduled it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling import services
from scheduling.manifests.apply import apply_manifests
from scheduling.models import Workload
from tests.tools.bench.shapes import one_queue_shape
from tools.bench.cluster import workload_request
from tools.bench.report import summarize
from tools.bench.run import manifests

T0 = datetime(2026, 1, 1, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def test_lag_and_both_times_to_admission_come_from_the_recorded_times() -> None:
    # Two workloads of 1 cpu x 1 s, due at 0.1 s and 0.2 s in a queue of 1 cpu.
    shape = one_queue_shape(2, lower_bound_wall_ms=1500)
    domain = services.resolve_cluster(None)
    apply_manifests(manifests(shape), cluster=domain)
    timeline = list(shape.timeline())
    services.create_workloads([workload_request(c) for c in timeline], cluster=domain)
    # The first was created 50 ms late and admitted at once; the second 300 ms late and
    # admitted when the first finished (it ran 1 s).
    recorded = {timeline[0].name: (150, 150), timeline[1].name: (500, 1150)}
    for name, (created_ms, reserved_ms) in recorded.items():
        Workload.objects.filter(cluster=domain, name=name).update(
            created_at=T0 + timedelta(milliseconds=created_ms),
            quota_reserved_at=T0 + timedelta(milliseconds=reserved_ms),
        )

    summary = summarize(
        shape,
        domain.pk,
        started_at=T0,
        mode="embedded",
        process={},
        model={"workWeightedTimeToAdmissionMs": 400},
    )

    assert summary["creationLag"] == {
        "p50Ms": 50,
        "p99Ms": 300,
        "maxMs": 300,
        "atEndOfCreationMs": 300,
    }
    small = summary["classes"]["small"]
    assert small["averageTimeToAdmissionMs"] == (0 + 650) / 2
    assert small["averageTimeToAdmissionFromScheduledMs"] == (50 + 950) / 2
    assert small["p99TimeToAdmissionFromScheduledMs"] == 950
    # Same work each: the weighted means are the plain means.
    assert summary["workWeightedTimeToAdmissionMs"] == 325
    assert summary["workWeightedTimeToAdmissionFromScheduledMs"] == 500
    comparison = summary["comparison"]
    assert comparison["lowerBoundWallMs"] == 2000  # computed: 0.1 s to 2.1 s
    assert comparison["shapeLowerBoundWallMs"] == 1500
    weighted = comparison["workWeightedTimeToAdmissionMs"]
    assert weighted["lowerBound"] == 450  # one of the two must wait 0.9 s
    assert (weighted["overLowerBound"], weighted["overModel"]) == (round(500 / 450, 3), 1.25)
