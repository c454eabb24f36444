"""The multicluster app's Celery tasks: one task runs a pass of any cluster, whatever its
connection, and one periodic task asks for a pass of every cluster; every task and beat
entry is named in ``kueueweb.reconcile``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.conf import settings

from kueueweb import reconcile
from kueueweb.celery import app
from multicluster import tasks
from multicluster.choices import ConnectionType
from multicluster.kube.backend import KubeBackend
from multicluster.kube.client import client_for
from multicluster.models import Cluster, Pod
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.models import ClusterQueue, Job, Workload
from scheduling.scheduler import admission
from tests.fixtures.broker import messages
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db

OUR_APPS = ("scheduling.", "multicluster.", "kueueweb.")


def _admitted(job: Job) -> None:
    assert Workload.objects.get(job=job).phase == WorkloadPhase.ADMITTED


def test_one_task_runs_a_kubernetes_cluster_and_a_simulated_one(
    kube_api: Any, kube_cluster: Cluster, manager: Cluster,
    make_queue: Callable[..., ClusterQueue],
) -> None:
    make_queue("sim", {"cpu": "4"})
    make_queue("kube", {"cpu": "4"}, namespace=kube_api.namespace, cluster=kube_cluster)
    simulated = services.submit_job(job_manifest("on-sim", "lq-sim"), namespace="ns")
    kubernetes = services.submit_job(job_manifest("on-kube", "lq-kube"),
                                     namespace=kube_api.namespace, cluster=kube_cluster)
    for domain in (manager, kube_cluster):
        admission.run_admission_cycle(domain.pk, now=simulated.created_at)
    _admitted(simulated)
    _admitted(kubernetes)

    tasks.sync_cluster_task(kube_cluster.pk)
    tasks.sync_cluster_task(manager.pk)

    # The Kubernetes sync created the job on the API server; the simulated runner, pods.
    remote = KubeBackend(client_for(kube_cluster)).get_job(kube_api.namespace, "on-kube")
    assert remote is not None
    assert remote["spec"]["suspend"] is False
    assert Pod.objects.filter(job=simulated).count() == 1
    assert not Pod.objects.filter(job=kubernetes).exists()
    for job in (simulated, kubernetes):
        job.refresh_from_db()
        assert job.suspend is False, job.name


def _cluster_syncs_asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, float, tuple[Any, ...]]]:
    asked: list[tuple[str, float, tuple[Any, ...]]] = []
    monkeypatch.setattr(reconcile, "request_later",
                        lambda task, delay, *args: asked.append((task, delay, args)))
    return asked


def test_the_periodic_task_asks_the_one_task_for_every_cluster(
    monkeypatch: pytest.MonkeyPatch, manager: Cluster,
) -> None:
    kubernetes = Cluster.objects.create(name="kube-worker", role="worker",
                                        connection_type=ConnectionType.KUBERNETES)
    simulated = Cluster.objects.create(name="sim-worker", role="worker")
    asked = _cluster_syncs_asked(monkeypatch)

    tasks.sync_all_clusters_task()

    assert sorted(asked) == sorted((reconcile.CLUSTER_SYNC_TASK, 0.0, (pk,))
                                   for pk in (manager.pk, kubernetes.pk, simulated.pk))


@pytest.mark.production
def test_the_periodic_task_sends_one_message_per_cluster(broker: redis.Redis,
                                                         manager: Cluster) -> None:
    kubernetes = Cluster.objects.create(name="kube-worker", role="worker",
                                        connection_type=ConnectionType.KUBERNETES)

    tasks.sync_all_clusters_task()
    tasks.sync_all_clusters_task()  # coalesced with the first while it waits

    for cluster in (manager, kubernetes):
        assert messages(broker, reconcile.CLUSTER_SYNC_TASK, cluster.pk) == 1, cluster.name
    assert broker.llen("celery") == 2


def test_beat_asks_for_every_cluster_through_one_entry() -> None:
    entries = [entry for entry in settings.CELERY_BEAT_SCHEDULE.values()
               if entry["task"] == reconcile.CLUSTER_SYNC_ALL_TASK]

    assert [entry["schedule"] for entry in entries] == [settings.CLUSTER_SYNC_INTERVAL_SECONDS]
    assert tasks.sync_all_clusters_task.name == reconcile.CLUSTER_SYNC_ALL_TASK
    assert tasks.sync_cluster_task.name == reconcile.CLUSTER_SYNC_TASK
    assert reconcile.CLUSTER_SYNC_TASK in reconcile.COALESCED_TASKS


def test_every_task_and_beat_entry_is_named_in_reconcile() -> None:
    app.loader.import_default_modules()
    named = {value for name, value in vars(reconcile).items()
             if name.endswith("_TASK") and isinstance(value, str)}
    registered = {name for name in app.tasks if name.startswith(OUR_APPS)}

    assert registered == named
    assert {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()} <= named
