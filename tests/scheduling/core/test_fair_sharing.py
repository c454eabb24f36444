"""Dominant resource share: ratios, weights (including 0) and comparisons."""

from __future__ import annotations

import math

import pytest

from scheduling.core import FlavorResource, compare_drs, dominant_resource_share
from scheduling.core.fair_sharing import DRS
from tests.builders import admitted, cluster_queue, snapshot

CPU = FlavorResource("default", "cpu")


def _share(usage_b: str, *, weight: float = 1.0, request: int = 0) -> DRS:
    snap = snapshot(
        [
            cluster_queue("a", quotas={"default": {"cpu": "3"}}, cohort="all"),
            cluster_queue("b", quotas={"default": {"cpu": "3"}}, cohort="all", weight=weight),
            cluster_queue("c", quotas={"default": {"cpu": "3"}}, cohort="all"),
        ],
        admitted_workloads=[admitted("w", "b", cpu=usage_b)],
    )
    return dominant_resource_share(snap.cluster_queues["b"], {CPU: request} if request else None)


@pytest.mark.parametrize(
    ("usage", "weight", "extra", "want_ratio", "want_share"),
    [
        pytest.param("3", 1.0, 0, 0.0, 0.0, id="within-nominal-is-zero"),
        # borrows 3 of the 9 the cohort could lend: 3 * 1000 / 9
        pytest.param("6", 1.0, 0, 3000 / 9, 3000 / 9, id="borrowing-ratio-times-1000"),
        pytest.param("6", 2.0, 0, 3000 / 9, 1500 / 9, id="weight-divides-the-share"),
        pytest.param("6", 0.0, 0, 3000 / 9, math.inf, id="zero-weight-borrowing-is-infinite"),
        pytest.param("3", 1.0, 1000, 1000 / 9, 1000 / 9, id="request-counted-as-usage"),
    ],
)
def test_dominant_resource_share(
    usage: str, weight: float, extra: int, want_ratio: float, want_share: float
) -> None:
    drs = _share(usage, weight=weight, request=extra)
    assert drs.unweighted_ratio == want_ratio
    assert drs.weighted_share() == want_share
    assert drs.dominant_resource == ("cpu" if want_ratio else "")


def test_queue_without_cohort_never_borrows() -> None:
    snap = snapshot(
        [cluster_queue("solo", quotas={"default": {"cpu": "1"}})],
        admitted_workloads=[admitted("w", "solo", cpu="5")],
    )
    assert dominant_resource_share(snap.cluster_queues["solo"]) == DRS(1.0, 0.0, "", False)


def test_compare_orders_zero_weight_borrowers_last() -> None:
    low = _share("4")
    high = _share("6")
    zero_small = _share("4", weight=0.0)
    zero_big = _share("6", weight=0.0)
    assert compare_drs(low, high) == -1
    assert compare_drs(high, zero_small) == -1
    assert compare_drs(zero_small, zero_big) == -1
    assert compare_drs(zero_big, zero_big) == 0
    assert zero_big.rounded_weighted_share() == 9223372036854775807
    assert high.rounded_weighted_share() == 334
