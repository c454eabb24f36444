"""Dominant Resource Share (Kueue ``pkg/cache/scheduler/fair_sharing.go``).

The DRS of a queue or cohort is, over resource names, the largest ratio of what it
borrows above its subtree quota to what its parent could lend, scaled by 1000 and
divided by the fair-sharing weight. A zero weight makes any borrowing infinitely large.
Floats are used exactly where Kueue uses them, so comparisons agree bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from scheduling.core.resources import FlavorResource
from scheduling.core.snapshot import CohortNode, QuotaNode

__all__ = ["DRS", "NEGATIVE_DRS", "compare_drs", "dominant_resource_share"]


@dataclass(frozen=True, slots=True)
class DRS:
    """A node's dominant resource share; compare with ``compare_drs``."""

    fair_weight: float
    unweighted_ratio: float
    dominant_resource: str
    borrowing: bool
    borrowed_frs: tuple[FlavorResource, ...] = ()

    def is_zero(self) -> bool:
        """Zero ratio, which in practice means not borrowing."""
        return self.unweighted_ratio == 0

    def weighted_share(self) -> float:
        """Ratio divided by weight; +inf for a borrowing zero-weight node."""
        if self.is_zero():
            return 0.0
        if self.fair_weight == 0:
            return math.inf
        return self.unweighted_ratio / self.fair_weight

    def zero_weight_borrows(self) -> bool:
        """A zero-weight node that borrows (it loses every comparison)."""
        return self.fair_weight == 0 and not self.is_zero()

    def is_borrowing_on(self, requested: Mapping[FlavorResource, int]) -> bool:
        """Whether the node borrows on a flavor-resource the request needs (> 0)."""
        return any(requested.get(fr, 0) > 0 for fr in self.borrowed_frs)

    def rounded_weighted_share(self) -> int:
        """The value Kueue reports in ``status.fairSharing.weightedShare``."""
        if self.zero_weight_borrows():
            return 9223372036854775807
        return math.ceil(self.weighted_share())


# The starting point of "find the highest share" scans: below every real share.
NEGATIVE_DRS = DRS(fair_weight=1.0, unweighted_ratio=-1.0, dominant_resource="", borrowing=False)


def _cmp(a: float, b: float) -> int:
    return (a > b) - (a < b)


def compare_drs(a: DRS, b: DRS) -> int:
    """-1/0/1; a lower share is preferred for admission, a higher one for preemption."""
    a_inf = a.zero_weight_borrows()
    b_inf = b.zero_weight_borrows()
    if a_inf and b_inf:
        return _cmp(a.unweighted_ratio, b.unweighted_ratio)
    if a_inf:
        return 1
    if b_inf:
        return -1
    return _cmp(a.weighted_share(), b.weighted_share())


def dominant_resource_share(
    node: QuotaNode, request: Mapping[FlavorResource, int] | None = None
) -> DRS:
    """DRS of ``node`` with ``request`` added to its usage (root nodes are always 0)."""
    parent = node.parent
    # A root (or a queue without cohort) has nobody to borrow from.
    if parent is None:
        return DRS(node.fair_weight, 0.0, "", False)
    # Borrowing per resource name, summed over flavors; only the subtree quota's
    # flavor-resources count, as in Kueue.
    borrowed: dict[str, int] = {}
    borrowed_frs: list[FlavorResource] = []
    usage = node.usage
    for fr, quota in node.subtree_quota.items():
        amount = usage.get(fr, 0) - quota
        if request:
            amount += request.get(fr, 0)
        if amount > 0:
            borrowed[fr.resource] = borrowed.get(fr.resource, 0) + amount
            borrowed_frs.append(fr)
    if not borrowed:
        return DRS(node.fair_weight, 0.0, "", False)
    # Relative to what the parent could lend in total: a resource with nothing
    # lendable contributes no ratio (the node still counts as borrowing).
    lendable = _lendable_of(parent)
    ratio_max = 0.0
    dominant = ""
    for resource, amount in borrowed.items():
        lendable_amount = lendable.get(resource, 0)
        if lendable_amount > 0:
            ratio = float(amount) * 1000.0 / float(lendable_amount)
            # Ties go to the alphabetically smallest resource for determinism.
            if ratio > ratio_max or (ratio == ratio_max and resource < dominant):
                ratio_max = ratio
                dominant = resource
    return DRS(node.fair_weight, ratio_max, dominant, True, tuple(borrowed_frs))


def _lendable_of(cohort: CohortNode) -> Mapping[str, int]:
    return cohort.lendable
