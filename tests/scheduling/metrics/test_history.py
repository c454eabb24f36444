"""Usage history: one sample per cluster queue per call, engine-exact usage, the quota of the
moment, pending per local queue, the waits of the interval's reservations, 24 h retention."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.metrics.history import percentile, queued_since, sample_usage
from scheduling.models import QueueUsageSample, Workload
from scheduling.scheduler import admission
from scheduling.workload.conditions import set_condition


def test_samples_usage_counts_and_forgets_old_ones(
    manager, make_queue, make_workload, t0, django_assert_num_queries
) -> None:
    make_queue("a", {"cpu": "4", "memory": "8Gi"})
    make_queue("b", {"cpu": "2"})
    make_workload("w1", "lq-a", {"cpu": "1500m", "memory": "1Gi"}, count=2)
    admission.run_admission_cycle(manager.pk, now=t0)
    make_workload("w2", "lq-a", {"cpu": "4"})
    QueueUsageSample.objects.create(
        cluster=manager, cluster_queue="a", sampled_at=t0 - timedelta(hours=25)
    )
    with django_assert_num_queries(8):
        assert sample_usage(now=t0) == 2
    a = QueueUsageSample.objects.get(cluster_queue="a")
    assert (a.pending, a.admitted) == (1, 1)
    assert a.usage == {"default/cpu": 3, "default/memory": 2 * 1024**3}
    assert a.nominal == {"default/cpu": 4, "default/memory": 8 * 1024**3}
    assert a.local_pending == {"ns/lq-a": 1}
    assert a.cohort == ""
    b = QueueUsageSample.objects.get(cluster_queue="b")
    assert (b.pending, b.admitted, b.usage) == (0, 0, {})
    assert b.nominal == {"default/cpu": 2}
    assert b.local_pending == {}


def test_query_count_does_not_grow_with_queues(
    manager, make_queue, django_assert_num_queries, t0
) -> None:
    for index in range(10):
        make_queue(f"q{index}", {"cpu": "1"})
    with django_assert_num_queries(8):
        assert sample_usage(now=t0) == 10


def test_task_calls_the_service(manager, make_queue) -> None:
    from scheduling.tasks import sample_usage_task

    make_queue("a", {"cpu": "1"})
    sample_usage_task()
    assert QueueUsageSample.objects.filter(cluster_queue="a").count() == 1


def test_beat_schedule_has_the_sampler(settings) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["sample-queue-usage"]
    assert entry["task"] == "scheduling.tasks.sample_usage_task"
    assert entry["schedule"] == settings.USAGE_SAMPLE_INTERVAL_SECONDS == 60


def test_nominal_quota_and_cohort_are_those_of_the_moment(manager, make_queue, t0) -> None:
    cq = make_queue("a", {"cpu": "500m"}, cohort="org")
    sample_usage(now=t0)
    cq.quotas.update(nominal_quota="2")
    sample_usage(now=t0 + timedelta(minutes=1))
    first, second = QueueUsageSample.objects.filter(cluster_queue="a").order_by("sampled_at")
    assert (first.nominal, second.nominal) == ({"default/cpu": 0.5}, {"default/cpu": 2})
    assert first.cohort == second.cohort == "org"


def _created(name: str, moment) -> None:
    Workload.objects.filter(name=name).update(created_at=moment)


def test_waits_of_the_interval_are_kueues_queued_wait_times(
    manager, make_queue, make_workload, t0
) -> None:
    make_queue("a", {"cpu": "8"})
    make_queue("idle", {"cpu": "1"})
    for name, waited in (("w10", 10), ("w20", 20), ("w100", 100)):
        make_workload(name, "lq-a", {"cpu": "1"})
        _created(name, t0 - timedelta(seconds=waited))
    # Requeued 5 s before the reservation, an hour after its creation: waited 5 s.
    make_workload("requeued", "lq-a", {"cpu": "1"})
    _created("requeued", t0 - timedelta(hours=1))
    wl = Workload.objects.get(name="requeued")
    wl.conditions = set_condition(
        wl.conditions, "Requeued", True, "Preempted", "", now=t0 - timedelta(seconds=5)
    )
    wl.save(update_fields=["conditions"])
    admission.run_admission_cycle(manager.pk, now=t0)
    assert Workload.objects.filter(quota_reserved_at=t0).count() == 4

    sample_usage(now=t0 + timedelta(seconds=30))
    a = QueueUsageSample.objects.get(cluster_queue="a")
    # Waits 5, 10, 20, 100: the nearest-rank median is the 2nd, the 90th percentile the 4th.
    assert (a.reservations, a.wait_p50_seconds, a.wait_p90_seconds) == (4, 10, 100)
    idle = QueueUsageSample.objects.get(cluster_queue="idle")
    assert (idle.reservations, idle.wait_p50_seconds, idle.wait_p90_seconds) == (0, None, None)

    # The next interval starts where the previous sample ended: nothing is counted twice.
    sample_usage(now=t0 + timedelta(seconds=90))
    later = QueueUsageSample.objects.get(cluster_queue="a", sampled_at=t0 + timedelta(seconds=90))
    assert (later.reservations, later.wait_p50_seconds) == (0, None)


def test_first_sample_counts_one_interval_back(
    manager, make_queue, make_workload, t0, settings
) -> None:
    settings.USAGE_SAMPLE_INTERVAL_SECONDS = 60
    make_queue("a", {"cpu": "8"})
    make_workload("old", "lq-a", {"cpu": "1"})
    admission.run_admission_cycle(manager.pk, now=t0)
    sample_usage(now=t0 + timedelta(seconds=61))
    assert QueueUsageSample.objects.get(cluster_queue="a").reservations == 0


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [
        ([7.0], 0.5, 7.0),
        ([1.0, 2.0], 0.5, 1.0),
        ([1.0, 2.0, 3.0], 0.5, 2.0),
        ([float(v) for v in range(1, 11)], 0.9, 9.0),
        ([float(v) for v in range(1, 12)], 0.9, 10.0),
    ],
)
def test_percentile_is_nearest_rank(values, fraction, expected) -> None:
    assert percentile(values, fraction) == expected


def test_queued_since_reads_the_requeued_transition_else_creation(t0) -> None:
    assert queued_since(t0, []) == t0
    later = t0 + timedelta(minutes=3)
    conditions = set_condition([], "Requeued", False, "PodsReadyTimeout", "", now=later)
    assert queued_since(t0, conditions) == later
