"""Two admission cycles at once on one domain never admit twice or beyond quota.

Runs real threads with their own PostgreSQL connections. The lease lets one cycle through;
the fence and conditional updates stop a cycle whose lease was taken over meanwhile.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, connections

from scheduling.choices import WorkloadPhase
from scheduling.core.quantities import quantity_to_int
from scheduling.models import Event, Workload
from scheduling.scheduler import admission
from scheduling.scheduler.lease import acquire

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="needs PostgreSQL (concurrent writers)"
    ),
]


def _admitted_cpu() -> int:
    total = 0
    for wl in Workload.objects.filter(phase__in=(WorkloadPhase.ADMITTED, WorkloadPhase.QUOTA_RESERVED)):
        for ps in wl.admission["podSetAssignments"]:
            total += quantity_to_int("cpu", ps["resourceUsage"]["cpu"])
    return total


def test_concurrent_cycles_never_double_admit_or_exceed_quota(
    manager, make_queue, make_workload
) -> None:
    make_queue("a", {"cpu": "5"}, cohort="shared")
    make_queue("b", {"cpu": "5"}, cohort="shared")
    for index in range(24):
        make_workload(f"w{index}", "lq-a" if index % 2 else "lq-b", {"cpu": "1"})
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    ran = Counter[str]()

    def worker(name: str) -> None:
        try:
            barrier.wait()
            for step in range(20):
                outcome = admission.run_admission_cycle(
                    manager.pk, now=NOW + timedelta(milliseconds=step * 10)
                )
                ran[name] += int(outcome.ran)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert errors == []
    # However the race went, what the concurrent cycles admitted fits in the quota.
    assert _admitted_cpu() <= 10_000
    # Then let cycles run one at a time until nothing more fits.
    for step in range(20):
        admission.run_admission_cycle(manager.pk, now=NOW + timedelta(seconds=1 + step))
    admitted = Workload.objects.filter(phase=WorkloadPhase.ADMITTED)
    assert admitted.count() == 10  # 10 cpu in the cohort, 1 cpu each
    assert _admitted_cpu() == 10_000
    reserved_events = Counter(
        Event.objects.filter(reason="QuotaReserved").values_list("workload_id", flat=True)
    )
    assert len(reserved_events) == 10
    assert max(reserved_events.values()) == 1
    assert sum(ran.values()) >= 1


def test_a_cycle_that_lost_its_lease_writes_nothing(manager, make_queue, make_workload) -> None:
    make_queue("cq", {"cpu": "4"})
    wl = make_workload("a", "lq-cq", {"cpu": "1"})
    holder = "slow-worker"
    assert acquire(manager.pk, holder, now=NOW, duration=timedelta(seconds=1))
    # Another worker takes over after expiry while the slow one is still deciding.
    assert acquire(manager.pk, "new-worker", now=NOW + timedelta(seconds=2),
                   duration=timedelta(seconds=30))

    outcome = admission._cycle_under_lease(manager.pk, holder, now=NOW + timedelta(seconds=3))

    assert outcome.ran is False
    assert Workload.objects.get(pk=wl.pk).phase == WorkloadPhase.PENDING
    assert not Event.objects.filter(reason="QuotaReserved").exists()
