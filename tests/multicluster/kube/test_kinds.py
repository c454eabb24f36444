"""Which job kinds a Kubernetes cluster is watched for: the enabled kinds, and among them
those whose objects created on the cluster kueueweb adopts."""

from __future__ import annotations

from typing import Any

from multicluster.kube.kinds import (
    adoptable_job_kinds,
    enabled_job_kinds,
    implicitly_enabled_job_kinds,
)


def test_adopted_kinds_are_the_running_ones_that_build_their_workload_from_the_object(
    settings: Any,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        "batch/job", "jobset.x-k8s.io/jobset", "deployment", "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset"]}

    adoptable = adoptable_job_kinds()

    # A Deployment, a StatefulSet or a LeaderWorkerSet makes no Workload of its own: their
    # Pods are adopted, through the pod framework they enable implicitly for those Pods.
    assert "Pod" in {i.kind for i in enabled_job_kinds().values()}
    assert {i.kind for i in adoptable.values()} == {"Job", "JobSet", "Pod"}
    assert set(adoptable) == {"adopt:jobs.batch", "adopt:jobsets.jobset.x-k8s.io",
                              "adopt:pods.v1"}
    assert implicitly_enabled_job_kinds() == {"adopt:pods.v1"}


def test_pods_are_adopted_once_their_framework_is_enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": ["batch/job", "pod"]}

    assert {i.kind for i in adoptable_job_kinds().values()} == {"Job", "Pod"}
    assert implicitly_enabled_job_kinds() == set()
