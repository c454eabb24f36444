"""Reading a benchmark shape: Kueue's generator format, names and creation times."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.bench.shape import ShapeError, load_shape, read_shape

SHARED_BENCH = Path(__file__).resolve().parents[3].parent / "shared" / "bench"


def _shape(**overrides: object) -> dict:
    wl_set = {"count": 2, "creationIntervalMs": 100,
              "workloads": [{"className": "small", "runtimeMs": 200, "priority": 50,
                             "request": 1}]}
    queues = {"className": "cq", "count": 2, "nominalQuota": 20, "borrowingLimit": 100,
              "reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority",
              "workloadsSets": [wl_set]}
    doc = {"name": "t", "cohorts": [{"className": "cohort", "count": 1,
                                     "queuesSets": [queues]}]}
    doc.update(overrides)
    return doc


def test_queues_and_workloads_are_named_as_kueue_generator_names_them() -> None:
    shape = read_shape(_shape())

    assert [q.name for q in shape.queues()] == ["cq-0-0-cohort-0", "cq-0-1-cohort-0"]
    timeline = list(shape.timeline())
    assert shape.total_workloads == len(timeline) == 4
    # Every set waits one interval before each workload, the sets of all queues at once.
    assert [(c.at_ms, c.queue, c.name) for c in timeline] == [
        (100, "cq-0-0-cohort-0", "small-0-0-0"), (100, "cq-0-1-cohort-0", "small-0-0-0"),
        (200, "cq-0-0-cohort-0", "small-0-1-0"), (200, "cq-0-1-cohort-0", "small-0-1-0"),
    ]


def test_errors_name_every_bad_field() -> None:
    doc = _shape()
    queues = doc["cohorts"][0]["queuesSets"][0]
    queues["nominalQuota"] = "lots"
    queues["withinClusterQueue"] = "Sometimes"
    queues["workloadsSets"][0]["workloads"][0]["request"] = 0

    with pytest.raises(ShapeError) as caught:
        read_shape(doc)

    paths = {e.path for e in caught.value.errors}
    assert paths == {
        "cohorts[0].queuesSets[0].nominalQuota",
        "cohorts[0].queuesSets[0].withinClusterQueue",
        "cohorts[0].queuesSets[0].workloadsSets[0].workloads[0].request",
    }


@pytest.mark.skipif(not SHARED_BENCH.is_dir(), reason="no directory of Kueue benchmark shapes (../shared/bench)")
def test_the_shared_shapes_have_the_totals_their_files_state() -> None:
    baseline = load_shape(SHARED_BENCH / "baseline.yaml")
    large = load_shape(SHARED_BENCH / "large-scale.yaml")

    assert (len(baseline.queues()), baseline.total_workloads) == (30, 15_000)
    assert (len(large.queues()), large.total_workloads) == (1_000, 50_000)
    assert baseline.lower_bound_wall_ms == 66_000
    assert baseline.kueue is not None
    assert baseline.kueue.wall_ms == 351_116
