"""Celery tasks of the scheduling app: ids in, one service call, nothing else (style §5.4)."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from scheduling import admission


@shared_task(name="scheduling.tasks.admission_cycle_task")
def admission_cycle_task(cluster_id: int) -> None:
    """One scheduling cycle of a domain (skipped if another worker holds its lease)."""
    admission.run_admission_cycle(cluster_id, now=timezone.now())


@shared_task(name="scheduling.tasks.schedule_admission_all_task")
def schedule_admission_all_task() -> None:
    """Periodic: ask for a cycle of every domain, so nothing waits for a missed trigger."""
    admission.request_all_domains()
