"""Partial admission: the largest pod counts that fit, by binary search."""

from __future__ import annotations

import pytest

from scheduling.core.podset_reducer import counts_for_step, search_partial_counts
from tests.builders import pod_set


def test_counts_shrink_proportionally_to_each_delta() -> None:
    pod_sets = [
        pod_set("fixed", 20),
        pod_set("two", 30, min_count=10),
        pod_set("three", 15, min_count=5),
    ]
    assert counts_for_step(pod_sets, 0) == [20, 30, 15]
    assert counts_for_step(pod_sets, 15) == [20, 20, 10]
    assert counts_for_step(pod_sets, 30) == [20, 10, 5]


@pytest.mark.parametrize(
    ("capacity", "want"),
    [
        pytest.param(50, [20, 20, 10], id="largest-counts-that-fit"),
        pytest.param(65, [20, 30, 15], id="full-counts-fit"),
        pytest.param(35, [20, 10, 5], id="only-the-minimum-fits"),
        pytest.param(34, None, id="nothing-fits"),
    ],
)
def test_search_finds_the_largest_fitting_counts(capacity: int, want: list[int] | None) -> None:
    pod_sets = [
        pod_set("fixed", 20),
        pod_set("two", 30, min_count=10),
        pod_set("three", 15, min_count=5),
    ]
    probes: list[list[int]] = []

    def fits(counts: list[int]) -> list[int] | None:
        probes.append(counts)
        return counts if sum(counts) <= capacity else None

    assert search_partial_counts(pod_sets, fits) == want
    # binary search over 31 steps: at most 5 probes
    assert len(probes) <= 5


def test_no_min_count_means_no_search() -> None:
    assert search_partial_counts([pod_set("main", 4)], lambda c: c) is None
