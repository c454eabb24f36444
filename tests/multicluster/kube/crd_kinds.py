"""What every custom-resource kind goes through on a Kubernetes cluster, written once for the
kinds whose tests share it (``test_sync_appwrapper.py``, ``test_sync_sparkapplication.py``):
the domain that admits the kind, its Kueue sample admitted, an eviction that releases the
quota once the pods are gone, and a cluster without the kind's CRD."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from multicluster.kube import connection
from multicluster.kube.client import client_for
from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster
from scheduling import services
from scheduling.choices import EventType, WorkloadPhase
from scheduling.jobframework import GenericJob
from scheduling.models import ClusterQueue, Event, Job, LocalQueue, ResourceFlavor, Workload
from scheduling.scheduler import admission
from tests.fixtures.scheduling import job_manifest


@dataclass(frozen=True)
class CrdKind:
    """A kind under test: its integration, Kueue's sample of it, and the test's minimal
    controller for it (one pass over every object of the kind)."""

    integration: GenericJob
    sample: Path
    run_controller: Callable[[Any], None]

    @property
    def plural(self) -> str:
        return self.integration.plural

    @property
    def api_path(self) -> str:
        return f"/apis/{self.integration.api_version}"

    def install_crd(self, kube_api: Any) -> None:
        kube_api.install_crd(self.integration.group, self.integration.version, self.plural,
                             self.integration.kind)

    def submit_sample(self, kube_api: Any, domain: Cluster) -> Job:
        return services.submit_job(yaml.safe_load(self.sample.read_text()),
                                   namespace=kube_api.namespace, cluster=domain)

    def admit_sample(self, kube_api: Any, domain: Cluster, now: datetime) -> Job:
        """The sample, submitted and admitted on a cluster with the kind's CRD."""
        kube_api.require_fake()
        self.install_crd(kube_api)
        job = self.submit_sample(kube_api, domain)
        admission.run_admission_cycle(domain.pk, now=now)
        assert workload(job).phase == WorkloadPhase.ADMITTED
        return job


def workload(job: Job) -> Workload:
    return Workload.objects.get(job=job)


def make_domain(kube_api: Any, kube_cluster: Cluster, settings: Any,
                make_queue: Callable[..., ClusterQueue], kind: CrdKind) -> Cluster:
    """The test cluster as a domain with the kind enabled, a ``spot`` flavor (node label
    ``instance-type: spot``) and the samples' ``user-queue``."""
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], kind.integration.framework_name]}
    cq = make_queue("cq", {"cpu": "10", "memory": "4Gi"}, flavor="spot",
                    namespace=kube_api.namespace, cluster=kube_cluster)
    ResourceFlavor.objects.filter(cluster=kube_cluster, name="spot").update(
        node_labels={"instance-type": "spot"})
    LocalQueue.objects.create(cluster=kube_cluster, namespace=kube_api.namespace,
                              name="user-queue", cluster_queue=cq)
    return kube_cluster


def check_eviction_releases_quota_once_pods_are_gone(
    kind: CrdKind, kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    """Evicted, the object is suspended; the quota is held while its pods (attributed by
    the job-uid label) run, released once the controller removed them, and the job starts
    again when admitted again."""
    job = kind.admit_sample(kube_api, domain, t0)
    sync_kube_cluster(domain.pk, now=t0)
    kind.run_controller(kube_api)
    services.evict_workload(workload(job), now=t0 + timedelta(seconds=10))

    stopping = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=11))

    assert stopping.stopping == [f"{kube_api.namespace}/{job.name}"]
    remote = kube_api.get(kind.plural, kube_api.namespace, job.name)
    assert kind.integration.is_suspended(remote)
    assert workload(job).phase == WorkloadPhase.ADMITTED

    kind.run_controller(kube_api)
    stopped = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=12))

    assert stopped.stopped == [f"{kube_api.namespace}/{job.name}"]
    assert workload(job).phase == WorkloadPhase.PENDING
    job.refresh_from_db()
    assert job.suspend is True

    admission.run_admission_cycle(domain.pk, now=t0 + timedelta(seconds=13))
    again = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=13))
    assert again.started == [f"{kube_api.namespace}/{job.name}"]


def check_missing_crd_warns_and_keeps_running_jobs(
    kind: CrdKind, kube_api: Any, domain: Cluster, t0: datetime,
) -> None:
    """Without the CRD, the kind's admitted job stays suspended with a ``FailedCreate``
    warning naming the resource while a Job runs; once the CRD is installed it starts."""
    kube_api.require_fake()
    probe = connection.probe_cluster(domain.pk, now=t0)
    assert probe is not None
    assert probe.connected, probe.message
    job = kind.submit_sample(kube_api, domain)
    batch = services.submit_job(job_manifest("plain", "lq-cq"), namespace=kube_api.namespace,
                                cluster=domain)
    admission.run_admission_cycle(domain.pk, now=t0)

    outcome = sync_kube_cluster(domain.pk, now=t0)

    assert outcome.connected
    assert outcome.started == [f"{kube_api.namespace}/plain"]
    [warning] = Event.objects.filter(workload=workload(job), reason="FailedCreate")
    assert warning.type == EventType.WARNING
    integration = kind.integration
    assert f"{kind.plural}.{integration.group}/{integration.version}" in warning.message
    assert (f"CustomResourceDefinition of {integration.kind} is not installed"
            in warning.message)
    job.refresh_from_db()
    assert job.suspend is True
    assert not kube_api.requests_to("POST", kind.api_path)
    assert workload(batch).phase == WorkloadPhase.ADMITTED

    kind.install_crd(kube_api)
    client_for(domain).forget_discovery()
    later = sync_kube_cluster(domain.pk, now=t0 + timedelta(seconds=5))

    assert later.started == [f"{kube_api.namespace}/{job.name}"]
    assert kube_api.get(kind.plural, kube_api.namespace, job.name) is not None
