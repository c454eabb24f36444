"""Usage history: one sample per cluster queue per call, engine-exact usage, 24 h retention."""

from __future__ import annotations

from datetime import timedelta

from scheduling.metrics.history import sample_usage
from scheduling.models import QueueUsageSample
from scheduling.scheduler import admission


def test_samples_usage_counts_and_forgets_old_ones(
    manager, make_queue, make_workload, t0, django_assert_num_queries
) -> None:
    make_queue("a", {"cpu": "4", "memory": "8Gi"})
    make_queue("b", {"cpu": "2"})
    make_workload("w1", "lq-a", {"cpu": "1500m", "memory": "1Gi"}, count=2)
    admission.run_admission_cycle(manager.pk, now=t0)
    make_workload("w2", "lq-a", {"cpu": "4"})
    QueueUsageSample.objects.create(cluster=manager, cluster_queue="a",
                                    sampled_at=t0 - timedelta(hours=25))
    with django_assert_num_queries(5):
        assert sample_usage(now=t0) == 2
    a = QueueUsageSample.objects.get(cluster_queue="a")
    assert (a.pending, a.admitted) == (1, 1)
    assert a.usage == {"default/cpu": 3, "default/memory": 2 * 1024**3}
    b = QueueUsageSample.objects.get(cluster_queue="b")
    assert (b.pending, b.admitted, b.usage) == (0, 0, {})


def test_query_count_does_not_grow_with_queues(manager, make_queue, django_assert_num_queries,
                                               t0) -> None:
    for index in range(10):
        make_queue(f"q{index}", {"cpu": "1"})
    with django_assert_num_queries(5):
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
