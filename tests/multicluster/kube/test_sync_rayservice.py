"""A RayService on a Kubernetes cluster: created through the custom objects API with each
pod set's flavor in its cluster config's templates, ready by its Ready condition, never
finished, suspended in its cluster config on eviction and deleted once its pods are gone."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework, services
from scheduling.choices import WorkloadPhase
from scheduling.models import Workload
from scheduling.scheduler import admission
from scheduling.workload import conditions as cond

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "ray-service-sample.yaml")
RAYSERVICES = "/apis/ray.io/v1"


def run_rayservice_controller(kube_api: Any) -> None:
    """One pass of a minimal KubeRay operator for RayServices: the service's cluster pods as
    a RayCluster's (none while its cluster config is suspended), and ``Ready`` while they
    run."""
    for service in kube_api.objects("rayservices"):
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        cluster = (service.get("spec") or {}).get("rayClusterConfig") or {}
        suspended = bool(cluster.get("suspend"))
        kube_api._ray_pods(service, cluster, suspended)
        ready = "False" if suspended else "True"
        conditions = (service.get("status") or {}).get("conditions") or []
        if [c.get("status") for c in conditions if c.get("type") == "Ready"] != [ready]:
            def change(obj: dict[str, Any], ready: str = ready) -> None:
                obj.setdefault("status", {})["conditions"] = [
                    {"type": "Ready", "status": ready,
                     "reason": "NonZeroServeEndpoints" if ready == "True" else "Suspended",
                     "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}]
            kube_api._update(kube_api._resource("rayservices"), namespace, name, change)


def test_the_sample_rayservice_serves_on_the_cluster_until_evicted(
    kube_api: Any, user_queue_domain: Cluster, t0: datetime,
) -> None:
    kube_api.require_fake()
    kube_api.install_crd("ray.io", "v1", "rayservices", "RayService")
    manifest = yaml.safe_load(SAMPLE.read_text())
    # The sample names namespace default; the test server's namespace is its own.
    manifest["metadata"]["namespace"] = kube_api.namespace
    job = services.submit_job(manifest, namespace=kube_api.namespace,
                              cluster=user_queue_domain)
    admission.run_admission_cycle(user_queue_domain.pk, now=t0)
    wl = Workload.objects.get(job=job)
    assert wl.phase == WorkloadPhase.ADMITTED
    key = f"{kube_api.namespace}/{job.name}"

    assert sync_kube_cluster(user_queue_domain.pk, now=t0).started == [key]

    remote = kube_api.get("rayservices", kube_api.namespace, job.name)
    assert remote["metadata"]["labels"][ORIGIN_LABEL] == "multikueue"
    cluster = remote["spec"]["rayClusterConfig"]
    assert cluster["suspend"] is False
    assert remote["spec"]["serveConfigV2"] == job.manifest["spec"]["serveConfigV2"]
    for template in (cluster["headGroupSpec"]["template"],
                     cluster["workerGroupSpecs"][0]["template"]):
        assert template["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(job.uid)
        assert template["spec"]["nodeSelector"] == {"instance-type": "spot"}
    [created] = kube_api.requests_to(
        "POST", f"{RAYSERVICES}/namespaces/{kube_api.namespace}/rayservices")
    assert created.body["kind"] == "RayService"

    run_rayservice_controller(kube_api)
    sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(seconds=10))
    wl.refresh_from_db()
    assert cond.is_true(wl.conditions, "PodsReady")
    assert len(kube_api.objects("pods", kube_api.namespace)) == 2

    # It never finishes: long after, the service still runs on its quota.
    later = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(hours=2))
    assert later.finished == []
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.ADMITTED

    services.evict_workload(wl, now=t0 + timedelta(hours=2, seconds=1))
    stopping = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(hours=2, seconds=2))
    assert stopping.stopping == [key]
    suspended = kube_api.get("rayservices", kube_api.namespace, job.name)
    assert suspended["spec"]["rayClusterConfig"]["suspend"] is True
    assert "suspend" not in suspended["spec"]

    run_rayservice_controller(kube_api)
    stopped = sync_kube_cluster(user_queue_domain.pk, now=t0 + timedelta(hours=2, seconds=3))
    assert stopped.stopped == [key]
    assert kube_api.get("rayservices", kube_api.namespace, job.name) is None
    assert kube_api.objects("pods", kube_api.namespace) == []
    wl.refresh_from_db()
    assert wl.phase == WorkloadPhase.PENDING
