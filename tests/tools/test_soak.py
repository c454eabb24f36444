"""A bounded soak in production mode (``tools.soak``): PostgreSQL, Redis, two Celery
workers and beat under a steady stream of submissions and scale calls stay healthy."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tools import soak

pytestmark = [pytest.mark.production, pytest.mark.slow]

# About two minutes of load (KUEUEWEB_SOAK_SECONDS for another length), at the rate of the six clients the figures in
# docs/performance.md were measured with.
SECONDS = float(os.environ.get("KUEUEWEB_SOAK_SECONDS", 120))
RATE = 1.5


@pytest.mark.usefixtures("broker")
def test_a_steady_load_causes_no_deadlock_no_5xx_and_no_growing_queue(
        manager: Any) -> None:
    figures = soak.run(seconds=SECONDS, rate=RATE, clients=6, workers=2, concurrency=2,
                       period=2.0, log=print)
    report = "\n".join(soak.format_figures(figures))
    print(report)

    assert figures.requests > SECONDS * RATE, report  # the load ran
    assert figures.deadlocks == 0, report
    assert figures.server_errors == 0, report
    # Jobs are scaled while they run: a scale is refused only for a job that has finished.
    scales = figures.scale_statuses
    assert scales.get("200", 0) >= 0.9 * sum(scales.values()), report
    # Flat: the last quarter's median length is within a few messages of the second
    # quarter's (one waiting message per target and reconciler is about 5), where a queue
    # that grows with the work it reconciles adds dozens per quarter.
    assert figures.queue_growth() <= 10, report
    assert figures.max_queue() <= 50, report
    # On time: beat's safety net ran within one period of when it was due (the gap between
    # two runs stays under two periods, plus the one-second sampling and a worker's task).
    assert figures.safety_net_gap <= 2 * figures.safety_net_period + 3.0, report
