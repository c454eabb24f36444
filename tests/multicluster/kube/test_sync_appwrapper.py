"""An AppWrapper on a Kubernetes cluster: Kueue's example is created through the custom
objects API running, with each pod set's flavor in its component's ``podSetInfos``, followed
to PodsReady and Finished by its phase, stopped on eviction; a cluster without the
AppWrapper CRD warns the AppWrapper's workload and keeps running Jobs.

The test plays a minimal AppWrapper controller (with its components' controllers folded in):
it creates the pods of each pod set from the templates the AppWrapper controller would
create, with the ``podSetInfos`` injected."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from multicluster.kube.manifests import ORIGIN_LABEL
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import jobframework
from scheduling.choices import WorkloadPhase
from scheduling.jobs import appwrapper
from scheduling.models import ClusterQueue
from scheduling.workload import conditions as cond
from tests.multicluster.kube.crd_kinds import (
    CrdKind,
    check_eviction_releases_quota_once_pods_are_gone,
    check_missing_crd_warns_and_keeps_running_jobs,
    make_domain,
    workload,
)

pytestmark = pytest.mark.django_db

SAMPLE = (Path(__file__).resolve().parents[2] / "fixtures" / "kueue_examples" / "jobs"
          / "appwrapper-pytorch-sample.yaml")
APPWRAPPERS = "/apis/workload.codeflare.dev/v1beta2"
POD_SET_INDEX = "test.kueueweb.io/appwrapper-pod-set"
_ACTIVE = ("Pending", "Running")


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def domain(kube_api: Any, kube_cluster: Cluster, settings: Any,
           make_queue: Callable[..., ClusterQueue]) -> Cluster:
    return make_domain(kube_api, kube_cluster, settings, make_queue, KIND)


def _pods_of(kube_api: Any, namespace: str, name: str) -> list[dict[str, Any]]:
    return [p for p in kube_api.objects("pods", namespace)
            if (p["metadata"].get("labels") or {}).get(appwrapper.APPWRAPPER_LABEL) == name
            and p["status"].get("phase") in _ACTIVE]


def run_appwrapper_controller(kube_api: Any) -> None:
    """One pass of a minimal AppWrapper controller: an unsuspended, unfinished AppWrapper
    has each pod set's ``replicas`` pods running and ready (from its components' pod
    templates with the ``podSetInfos`` injected), phase Running and PodsReady; a suspended
    one no pods, phase Suspended."""
    for aw in kube_api.objects("appwrappers"):
        namespace, name = aw["metadata"]["namespace"], aw["metadata"]["name"]
        spec, status = aw.get("spec") or {}, aw.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        suspended = bool(spec.get("suspend"))
        active = _pods_of(kube_api, namespace, name)
        if suspended:
            for pod in active:
                kube_api.delete("pods", namespace, pod["metadata"]["name"])
        else:
            index = 0
            for component, created in zip(appwrapper.components(aw),
                                          appwrapper.injected_components(aw), strict=True):
                for pod_set in appwrapper.component_pod_sets(component):
                    template = appwrapper.resolve({"template": created}, pod_set.path)
                    have = [p for p in active
                            if p["metadata"]["labels"].get(POD_SET_INDEX) == str(index)]
                    for _ in range(pod_set.replicas - len(have)):
                        kube_api._create_pod(aw, template, phase="Running", ready=True,
                                             labels={POD_SET_INDEX: str(index)})
                    index += 1
        phase = "Suspended" if suspended else "Running"
        conditions = [] if suspended else [
            {"type": t, "status": "True", "reason": t, "message": t,
             "lastTransitionTime": "2026-01-01T00:00:00Z"}
            for t in ("QuotaReserved", "ResourcesDeployed", "PodsReady")]
        if status.get("phase") != phase:
            def change(obj: dict[str, Any], phase: str = phase,
                       conditions: Any = conditions) -> None:
                obj["status"] = {"phase": phase, "conditions": conditions}
            kube_api._update(kube_api._resource("appwrappers"), namespace, name, change)


def complete_appwrapper(kube_api: Any, namespace: str, name: str) -> None:
    """Every pod of the AppWrapper succeeded: phase Succeeded."""
    for pod in _pods_of(kube_api, namespace, name):
        kube_api.set_pod(namespace, pod["metadata"]["name"], phase="Succeeded", ready=False)

    def change(obj: dict[str, Any]) -> None:
        obj["status"] = {**(obj.get("status") or {}), "phase": "Succeeded"}
    kube_api._update(kube_api._resource("appwrappers"), namespace, name, change)


def test_the_sample_appwrapper_runs_to_completion_on_the_cluster(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    job = KIND.admit_sample(kube_api, domain, t0)

    started = sync_kube_cluster(domain.pk, now=t0)

    assert started.started == [f"{kube_api.namespace}/{job.name}"]
    remote = kube_api.get("appwrappers", kube_api.namespace, job.name)
    assert remote is not None
    assert (remote["spec"]["suspend"], remote["metadata"]["labels"][ORIGIN_LABEL]) == (
        False, "multikueue")
    [component] = remote["spec"]["components"]
    assert [info["nodeSelector"] for info in component["podSetInfos"]] == [
        {"instance-type": "spot"}, {"instance-type": "spot"}]
    for replica in component["template"]["spec"]["pytorchReplicaSpecs"].values():
        assert replica["template"]["metadata"]["labels"][jobframework.JOB_UID_LABEL] == str(
            job.uid)
    [created] = kube_api.requests_to(
        "POST", f"{APPWRAPPERS}/namespaces/{kube_api.namespace}/appwrappers")
    assert created.body["kind"] == "AppWrapper"

    run_appwrapper_controller(kube_api)
    pods = kube_api.objects("pods", kube_api.namespace)
    assert len(pods) == 2
    assert all(p["spec"]["nodeSelector"] == {"instance-type": "spot"} for p in pods)
    sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=10))

    ready = cond.find(workload(job).conditions, "PodsReady")
    assert ready is not None
    assert ready["status"] == "True"
    job.refresh_from_db()
    assert job.status["phase"] == "Running"

    complete_appwrapper(kube_api, kube_api.namespace, job.name)
    finished = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=60))

    assert finished.finished == [f"{kube_api.namespace}/{job.name}"]
    wl = workload(job)
    assert wl.phase == WorkloadPhase.FINISHED
    reason = cond.find(wl.conditions, "Finished")
    assert reason is not None
    assert (reason["reason"], reason["message"]) == ("Succeeded",
                                                     "AppWrapper finished successfully")
    assert kube_api.get("appwrappers", kube_api.namespace, job.name) is None


def test_an_evicted_appwrapper_releases_its_quota_once_its_pods_are_gone(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    check_eviction_releases_quota_once_pods_are_gone(KIND, kube_api, domain, t0)


def test_a_cluster_without_the_appwrapper_crd_warns_it_and_keeps_running_jobs(
    kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    check_missing_crd_warns_and_keeps_running_jobs(KIND, kube_api, domain, t0)


KIND = CrdKind(appwrapper.AppWrapper(), SAMPLE, run_appwrapper_controller)
