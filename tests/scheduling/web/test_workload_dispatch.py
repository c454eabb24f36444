"""The workload page's MultiKueue region: the check, dispatcher, nomination, rounds, winner
and the copies on the workers, after stepping the demo hub; and a copy's page naming the hub
workload it copies."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from multicluster import dispatch
from multicluster.choices import ClusterRole, Dispatcher
from multicluster.models import Cluster, MultiKueueConfig
from scheduling.models import FlavorQuota, Job, Workload
from scheduling.scheduler import admission

pytestmark = pytest.mark.django_db


@pytest.fixture
def hub(manager: Cluster) -> Cluster:
    """The demo: a manager with multikueue-cq dispatching to worker-1 and worker-2, and only
    the dispatched-analysis job."""
    call_command("demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    Job.objects.exclude(name="dispatched-analysis").delete()
    Workload.objects.exclude(job__name="dispatched-analysis").delete()
    return manager


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0) + timedelta(seconds=1)


def hub_workload() -> Workload:
    return Workload.objects.get(job__name="dispatched-analysis", cluster__role=ClusterRole.MANAGER)


def page_url(wl: Workload, cluster: str | None = None) -> str:
    return reverse("ui-workload", kwargs={"cluster": cluster or wl.cluster.name,
                                          "namespace": wl.namespace, "name": wl.name})


def region(html: str) -> str:
    match = re.search(r'<section id="wl-dispatch".*?</section>', html, re.S)
    assert match is not None, "no dispatch region"
    return match.group(0)


def copy_rows(html: str) -> dict[str, str]:
    return {m.group(1): m.group(0) for m in
            re.finditer(r'<tr data-worker="([^"]+)".*?</tr>', region(html), re.S)}


def dd(html: str, ident: str) -> str:
    match = re.search(rf'<dd id="{ident}"[^>]*>(.*?)</dd>', region(html), re.S)
    assert match is not None, ident
    return " ".join(re.sub(r"<[^>]+>", " ", match.group(1)).split())


def test_all_at_once_copies_then_the_winner(hub: Cluster, t0: datetime, viewer_ui: Client,
                                            ) -> None:
    admission.run_admission_cycle(hub.pk, now=t0)
    wl = hub_workload()
    html = viewer_ui.get(page_url(wl)).content.decode()
    assert dd(html, "wl-dispatch-check").startswith("multikueue-demo: Pending")
    assert 'id="wl-dispatch-none"' in region(html)  # nothing dispatched yet

    dispatch.sync_dispatch(hub.pk, now=t0)
    response = viewer_ui.get(page_url(wl))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-dispatcher="AllAtOnce"' in region(html)
    assert dd(html, "wl-dispatch-dispatcher").startswith("AllAtOnce")
    assert dd(html, "wl-dispatch-nominated") == "worker-1, worker-2"
    assert dd(html, "wl-dispatch-round") == "1"
    assert dd(html, "wl-dispatch-winner") == "none yet"
    rows = copy_rows(html)
    assert sorted(rows) == ["worker-1", "worker-2"]
    for worker, row in rows.items():
        assert 'data-state="Created"' in row
        assert 'data-remote-phase="Pending"' in row
        assert page_url(wl, worker) in row  # the remote workload's page
    # The page follows the workers too (live updates of the copies).
    workers = Cluster.objects.filter(role=ClusterRole.WORKER).values_list("pk", flat=True)
    live = re.search(r'data-live-clusters="([^"]*)"', html).group(1).split()
    assert sorted(live) == sorted(str(pk) for pk in [hub.pk, *workers])

    # worker-2 admits its copy first: it wins; worker-1's copy goes.
    w2 = Cluster.objects.get(name="worker-2")
    admission.run_admission_cycle(w2.pk, now=t0 + timedelta(seconds=1))
    dispatch.sync_dispatch(hub.pk, now=t0 + timedelta(seconds=2))
    html = viewer_ui.get(page_url(wl)).content.decode()
    assert dd(html, "wl-dispatch-check") == \
        "multikueue-demo: Ready — The workload was admitted on worker-2"
    assert dd(html, "wl-dispatch-winner").startswith("worker-2")
    assert dd(html, "wl-dispatch-nominated") == "—"
    rows = copy_rows(html)
    assert list(rows) == ["worker-2"]
    assert 'data-state="Won"' in rows["worker-2"]
    assert 'data-remote-phase="Admitted"' in rows["worker-2"]
    assert "Admitted=True" in rows["worker-2"]


def test_region_partial_renders_the_same_section(hub: Cluster, t0: datetime,
                                                 viewer_ui: Client) -> None:
    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    wl = hub_workload()
    url = reverse("ui-workload-partial", kwargs={
        "cluster": "manager", "namespace": wl.namespace, "name": wl.name, "region": "dispatch"})

    body = viewer_ui.get(url).content.decode().strip()

    assert body.startswith('<section id="wl-dispatch"')
    assert "data-live-refresh" in body
    assert f'hx-get="{url}"' in body
    assert sorted(copy_rows(body)) == ["worker-1", "worker-2"]


def test_incremental_rounds_are_shown(hub: Cluster, t0: datetime, viewer_ui: Client,
                                      settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "DISPATCH_STEP_SIZE": 1,
                         "DISPATCH_ROUND_TIMEOUT_SECONDS": 300}
    MultiKueueConfig.objects.filter(name="multikueue-demo").update(
        dispatcher=Dispatcher.INCREMENTAL, clusters=["worker-2", "worker-1"])
    # Neither worker can admit: their queues hold nothing.
    FlavorQuota.objects.filter(cluster_queue__cluster__role=ClusterRole.WORKER).update(
        nominal_quota="0")
    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    for worker in Cluster.objects.filter(role=ClusterRole.WORKER):
        admission.run_admission_cycle(worker.pk, now=t0)
    wl = hub_workload()

    html = viewer_ui.get(page_url(wl)).content.decode()
    assert dd(html, "wl-dispatch-dispatcher").startswith("Incremental")
    assert dd(html, "wl-dispatch-round").startswith("1 (next round")
    next_round = re.search(r'id="wl-dispatch-round".*?<time datetime="([^"]+)"', html, re.S)
    assert next_round is not None
    assert datetime.fromisoformat(next_round.group(1)) == t0 + timedelta(seconds=300)
    assert list(copy_rows(html)) == ["worker-2"]
    assert "QuotaReserved=False" in copy_rows(html)["worker-2"]

    dispatch.sync_dispatch(hub.pk, now=t0 + timedelta(seconds=301))
    html = viewer_ui.get(page_url(wl)).content.decode()
    assert dd(html, "wl-dispatch-round").startswith("2")
    assert dd(html, "wl-dispatch-nominated") == "worker-2, worker-1"
    rows = copy_rows(html)
    assert list(rows) == ["worker-2", "worker-1"]  # by round
    assert 'data-round="1"' in rows["worker-2"]
    assert 'data-round="2"' in rows["worker-1"]


def test_copy_page_names_the_hub_workload(hub: Cluster, t0: datetime, viewer_ui: Client) -> None:
    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    wl = hub_workload()

    html = viewer_ui.get(page_url(wl, "worker-1")).content.decode()

    line = re.search(r'<p id="wl-hub-origin".*?</p>', html, re.S)
    assert line is not None
    text = " ".join(re.sub(r"<[^>]+>", " ", line.group(0)).split())
    assert text.startswith(f"Copy of {wl.namespace}/{wl.name} dispatched by the MultiKueue hub")
    assert f'href="{page_url(wl)}"' in line.group(0)
    assert 'id="wl-dispatch"' not in html  # a copy is not dispatched further
    live = re.search(r'data-live-clusters="([^"]*)"', html).group(1).split()
    assert str(hub.pk) in live
    # The hub workload's own page has no such line.
    assert 'id="wl-hub-origin"' not in viewer_ui.get(page_url(wl)).content.decode()


def test_workload_without_multikueue_has_no_dispatch_region(
    manager: Cluster, make_queue: Any, make_workload: Any, viewer_ui: Client,
) -> None:
    make_queue("cq", {"cpu": "2"})
    wl = make_workload("plain", "lq-cq", {"cpu": "1"})

    html = viewer_ui.get(page_url(wl)).content.decode()

    assert html.count('id="wl-status"') == 1  # the page did render
    assert 'id="wl-dispatch"' not in html
    assert 'id="wl-hub-origin"' not in html


def test_removed_copies_say_where_they_went(hub: Cluster, t0: datetime,
                                            viewer_ui: Client) -> None:
    from scheduling.workload import lifecycle

    admission.run_admission_cycle(hub.pk, now=t0)
    dispatch.sync_dispatch(hub.pk, now=t0)
    wl = hub_workload()
    w2 = Cluster.objects.get(name="worker-2")
    admission.run_admission_cycle(w2.pk, now=t0 + timedelta(seconds=1))
    dispatch.sync_dispatch(hub.pk, now=t0 + timedelta(seconds=2))  # worker-2 wins

    html = viewer_ui.get(page_url(wl)).content.decode()
    assert "Any copies on worker-1 were removed when worker-2 admitted the workload." \
        in region(html)
    # The address of worker-1's copy, from a page shown before: where did it go?
    response = viewer_ui.get(page_url(wl, "worker-1"))
    assert response.status_code == 404
    page = response.content.decode()
    assert "removed from worker-1 when worker-2 admitted the workload" in page
    assert f'href="{page_url(wl)}"' in page

    # The workload finishes on worker-2; the hub follows, then removes the winner's copy.
    remote = Workload.objects.get(cluster=w2, namespace=wl.namespace, name=wl.name)
    lifecycle.finish(remote, "Succeeded", "done", now=t0 + timedelta(seconds=3), events=[])
    dispatch.sync_dispatch(hub.pk, now=t0 + timedelta(seconds=4))
    dispatch.sync_dispatch(hub.pk, now=t0 + timedelta(seconds=5))
    assert not Workload.objects.filter(cluster=w2, name=wl.name).exists()

    html = viewer_ui.get(page_url(wl)).content.decode()
    assert 'id="wl-dispatch-none"' in region(html)
    assert "The copy on worker-2 was removed after the workload finished." in region(html)
    response = viewer_ui.get(page_url(wl, "worker-2"))
    assert response.status_code == 404
    assert "removed from worker-2 after the workload finished" in response.content.decode()


def test_an_unknown_copy_address_is_a_plain_404(hub: Cluster, viewer_ui: Client) -> None:
    response = viewer_ui.get(reverse("ui-workload", kwargs={
        "cluster": "worker-1", "namespace": "team-a", "name": "never-existed"}))
    assert response.status_code == 404
    assert "Page not found" in response.content.decode()
