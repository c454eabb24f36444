"""A pass refreshes all of its watches at once: each watch is read until the server has
been quiet for ``KUBE_WATCH_QUIET_SECONDS``, so one after another a pass would cost one
quiet period per watch (the job kinds' copies, the adopted objects, the cluster's own
objects, pods, pod events)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings

from multicluster.kube.sync import sync_kube_cluster
from multicluster.models import Cluster

pytestmark = pytest.mark.django_db

QUIET = 0.5


def test_a_pass_waits_one_quiet_period_whatever_the_number_of_watches(
        kube_api: Any, kube_cluster: Cluster, t0: datetime) -> None:
    kube_api.require_fake()
    kube_api.install_jobset_crd()
    settings.KUEUEWEB = {**settings.KUEUEWEB, "KUBE_WATCH_QUIET_SECONDS": QUIET,
                         "KUBE_WATCH_MAX_SECONDS": 5, "INTEGRATIONS_FRAMEWORKS": [
                             *settings.KUEUEWEB["INTEGRATIONS_FRAMEWORKS"], "pod"]}
    listed = sync_kube_cluster(kube_cluster.pk, now=t0)
    assert listed.connected
    assert all(result.listed for result in listed.watches.values())
    before = len(kube_api.requests)

    started = time.monotonic()
    watched = sync_kube_cluster(kube_cluster.pk, now=t0 + timedelta(seconds=1))
    elapsed = time.monotonic() - started

    watches = [r for r in kube_api.requests[before:] if r.query.get("watch") == "true"]
    # Each enabled kind served (Job, JobSet, Pod) twice: copies and adopted objects.
    assert {r.path for r in watches} >= {
        "/apis/batch/v1/jobs", "/apis/jobset.x-k8s.io/v1alpha2/jobsets", "/api/v1/pods",
        "/api/v1/events", "/api/v1/limitranges"}
    assert len(watches) >= 8
    assert len(watches) == len(watched.watches)
    assert not any(result.listed for result in watched.watches.values())
    # Every watch was opened before the first could have gone quiet: one after another,
    # the last would have waited for all the others' quiet periods.
    arrivals = [r.received_at for r in watches]
    assert max(arrivals) - min(arrivals) < QUIET
    assert elapsed < 3 * QUIET
