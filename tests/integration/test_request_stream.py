"""A stream of submissions served by two real Celery workers and no beat: every request
for a cycle reaches a worker, so no workload waits for the periodic safety net."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

pytestmark = pytest.mark.production


@pytest.fixture
def worker_without_beat(broker: redis.Redis, settings: Any,
                        tmp_path: Any) -> Iterator[Any]:
    """Two Celery worker processes and no beat: no periodic safety net would hide a request
    that was held back and never served."""
    from tests.fixtures.processes import worker_only

    with worker_only(settings.REDIS_URL, tmp_path, concurrency=2) as processes:
        yield processes


@pytest.mark.slow
def test_every_submission_of_a_stream_is_admitted_without_the_periodic_net(
    worker_without_beat: Any, make_queue: Any,
) -> None:
    import random
    import time

    from scheduling import services
    from scheduling.models import Workload
    from tests.fixtures.processes import wait_for
    from tests.fixtures.scheduling import job_manifest

    make_queue("cq", {"cpu": "100"})
    rng = random.Random(7)
    names = [f"stream-{i}" for i in range(60)]
    for name in names:  # one transaction each, some while a cycle runs
        services.submit_job(job_manifest(name, "lq-cq", cpu="1"), namespace="ns")
        time.sleep(rng.uniform(0, 0.03))

    def pending() -> list[str]:
        return list(Workload.objects.filter(quota_reserved_at__isnull=True)
                    .values_list("job__name", flat=True))

    wait_for(lambda: not pending(), timeout=60, processes=worker_without_beat,
             what="every workload of the stream admitted", interval=0.1)
    assert Workload.objects.filter(job__name__in=names).count() == len(names)
    assert "Traceback" not in worker_without_beat.logs()
