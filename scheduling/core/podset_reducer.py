"""Partial admission: the largest pod counts that fit (Kueue ``flavorassigner/podset_reducer.go``).

Each pod set may shrink from ``count`` towards ``min_count``. With ``delta_i = count_i -
min_count_i`` and ``D = sum(delta_i)``, candidate ``k`` in ``[0, D]`` gives counts
``count_i - floor(delta_i * k / D)``; a binary search (Go's ``sort.Search``) finds the
smallest ``k``, i.e. the largest counts, for which ``fits`` succeeds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from scheduling.core.types import PodSet

__all__ = ["counts_for_step", "search_partial_counts"]

R = TypeVar("R")


def counts_for_step(pod_sets: Sequence[PodSet], step: int) -> list[int]:
    """Pod counts at search step ``step`` (0 = full counts, ``D`` = the minimum counts)."""
    deltas = [
        ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in pod_sets
    ]
    total = sum(deltas)
    if total == 0:
        return [ps.count for ps in pod_sets]
    return [ps.count - d * step // total for ps, d in zip(pod_sets, deltas, strict=True)]


def search_partial_counts(
    pod_sets: Sequence[PodSet], fits: Callable[[list[int]], R | None]
) -> R | None:
    """The result of ``fits`` for the largest counts that fit, or None.

    ``fits`` returns None when the counts do not work. As in Kueue the search assumes
    fitting is monotone in the step; the answer is only used when the last successful
    probe is the one the search settles on.
    """
    total = sum(
        ps.count - (ps.min_count if ps.min_count is not None else ps.count) for ps in pod_sets
    )
    if total == 0:
        return None
    lo, hi = 0, total + 1
    last_good = 0
    last_result: R | None = None
    while lo < hi:
        mid = (lo + hi) // 2
        result = fits(counts_for_step(pod_sets, mid))
        if result is not None:
            last_good = mid
            last_result = result
            hi = mid
        else:
            lo = mid + 1
    if last_result is not None and lo == last_good:
        return last_result
    return None
