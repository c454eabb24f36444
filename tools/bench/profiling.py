"""Profiles of a benchmark's threads, and their top entries as lines.

``cProfile`` follows the thread that enables it, so each thread of a run (the embedded
reconcilers, the generator, the simulated cluster) gets a profiler of its own, enabled
for the whole of the thread's work and read once the thread has stopped. Its clock is
the wall clock: a thread's entries also hold the time it waited for the interpreter lock
while the others ran, and for SQLite's write lock while they wrote (the statement that
begins a transaction). Timed by the thread's CPU clock, a system call per profiled call,
the profiler cost more than the run.
"""

from __future__ import annotations

import cProfile
import io
import pstats
from collections.abc import Callable
from typing import Any

# What the cumulative view lists: the application's own functions, where a reader can act.
OWN_CODE = r"(scheduling|kueueweb|multicluster|tools)/"


def profiled(target: Callable[..., Any], profiler: cProfile.Profile) -> Callable[..., Any]:
    """``target``, run with ``profiler`` enabled in the thread that calls it."""

    def run(*args: Any, **kwargs: Any) -> Any:
        profiler.enable()
        try:
            return target(*args, **kwargs)
        finally:
            profiler.disable()

    return run


def profile_lines(profiler: cProfile.Profile, top: int = 20, *, cumulative: bool = False,
                  restrict: str | None = None) -> list[str]:
    """The top of a profile as lines: by own time, or by cumulative time (then usually
    ``restrict``-ed to a path pattern such as ``OWN_CODE``)."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(pstats.SortKey.CUMULATIVE if cumulative else pstats.SortKey.TIME)
    stats.print_stats(*([restrict] if restrict else []), top)
    return [line for line in out.getvalue().splitlines() if line.strip()]
