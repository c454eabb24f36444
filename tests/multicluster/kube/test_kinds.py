"""Which job kinds a Kubernetes cluster is watched for: the enabled kinds, and among them
those whose objects created on the cluster kueueweb adopts."""

from __future__ import annotations

from typing import Any

from multicluster.kube.kinds import adoptable_job_kinds, enabled_job_kinds


def test_adopted_kinds_are_the_enabled_ones_that_build_their_workload_from_the_object(
    settings: Any,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": [
        "batch/job", "jobset.x-k8s.io/jobset", "deployment", "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset"]}

    adoptable = {i.kind for i in adoptable_job_kinds().values()}

    # A Deployment's Pods are kueueweb's to create: Pods are run, but not adopted, while
    # the pod framework is enabled only for them; StatefulSets and LeaderWorkerSets build
    # their Workloads up front.
    assert "Pod" in {i.kind for i in enabled_job_kinds().values()}
    assert adoptable == {"Job", "JobSet"}
    assert set(adoptable_job_kinds()) == {"adopt:jobs.batch", "adopt:jobsets.jobset.x-k8s.io"}


def test_pods_are_adopted_once_their_framework_is_enabled(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "INTEGRATIONS_FRAMEWORKS": ["batch/job", "pod"]}

    assert {i.kind for i in adoptable_job_kinds().values()} == {"Job", "Pod"}
