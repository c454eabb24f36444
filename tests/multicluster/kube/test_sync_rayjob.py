"""A RayJob on a Kubernetes cluster: created through the custom objects API with its
cluster's and its submitter's flavor, ready by its cluster's state, finished by its job
deployment status, then deleted."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "ray-job-sample.yaml")


def test_the_sample_rayjob_runs_to_completion_on_the_cluster(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    kube_api.install_rayjob_crd()
    job = services.submit_job(yaml.safe_load(SAMPLE.read_text()),
                              namespace=kube_api.namespace, cluster=user_queue_domain)
    admission.run_admission_cycle(user_queue_domain.pk, now=t0)
    key = f"{kube_api.namespace}/{job.name}"

    assert sync_kube_cluster(user_queue_domain.pk, now=t0).started == [key]

    remote = kube_api.get("rayjobs", kube_api.namespace, job.name)
    assert remote["spec"]["suspend"] is False
    cluster = remote["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"],
                 cluster["workerGroupSpecs"][0]["template"],
                 remote["spec"]["submitterPodTemplate"]]
    for template in templates:
        assert template["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
        assert template["spec"]["nodeSelector"] == {"instance-type": "spot"}
    assert remote["spec"]["submitterPodTemplate"]["spec"]["containers"][0]["name"] == (
        "ray-job-submitter")

    kube_api.run_rayjob_controller()
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=10))
    wl = Workload.objects.get(job=job)
    assert cond.is_true(wl.conditions, "PodsReady")
    assert len(kube_api.objects("pods", kube_api.namespace)) == 3

    kube_api.complete_rayjob(kube_api.namespace, job.name)
    finished = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=60))

    assert finished.finished == [key]
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == ("Succeeded", "the Ray job succeeded")
    assert kube_api.get("rayjobs", kube_api.namespace, job.name) is None
