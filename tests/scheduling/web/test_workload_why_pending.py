"""The why-pending block of the workload page for workloads that are not simply queued."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from scheduling.models import ClusterQueue, Workload

pytestmark = pytest.mark.django_db


def page(client: Client, wl: Workload) -> str:
    url = reverse(
        "ui-workload",
        kwargs={"cluster": wl.cluster.name, "namespace": wl.namespace, "name": wl.name},
    )
    return client.get(url).content.decode()


@pytest.fixture
def queued(
    make_queue: Callable[..., ClusterQueue], make_workload: Callable[..., Workload]
) -> list[Workload]:
    make_queue("cq", {"cpu": "1"})
    return [make_workload(f"w-{n}", "lq-cq", {"cpu": "1"}) for n in range(3)]


def test_a_queued_workload_counts_from_one_in_both_queues(
    viewer_ui: Client, queued: list[Workload]
) -> None:
    body = page(viewer_ui, queued[1])
    assert 'data-position-cq="2" data-position-lq="2"' in body
    assert "2nd of 3 in local queue" in body
    assert "(its creation: the time its queue orders it by)" in body


def test_a_deactivated_workload_is_out_of_its_queue_and_still_links_to_it(
    viewer_ui: Client, queued: list[Workload]
) -> None:
    Workload.objects.filter(pk=queued[0].pk).update(active=False)
    body = page(viewer_ui, queued[0])
    assert 'id="wl-why-pending"' in body
    assert "data-position-cq" not in body
    assert "Not in a queue now." in body
    assert 'id="wl-link-lq"' in body
    assert 'id="wl-link-cq"' in body
    assert "The workload is deactivated" in body
    # The others move up.
    assert "1st of 2 in cluster queue" in page(viewer_ui, queued[1])


def test_a_requeued_workload_waits_since_its_requeue(
    viewer_ui: Client, queued: list[Workload]
) -> None:
    wl = queued[2]
    Workload.objects.filter(pk=wl.pk).update(queued_at=wl.created_at + timedelta(minutes=5))
    body = page(viewer_ui, wl)
    assert "its requeue after an eviction" in body
    assert (wl.created_at + timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M:%S") in body


def test_a_workload_of_a_missing_queue_and_a_running_one_show_no_place(
    viewer_ui: Client, queued: list[Workload], make_workload: Callable[..., Workload]
) -> None:
    lost = make_workload("lost", "no-such-queue", {"cpu": "1"})
    body = page(viewer_ui, lost)
    assert "Not in a queue now." in body
    assert 'id="wl-link-lq"' not in body
    Workload.objects.filter(pk=queued[0].pk).update(phase="Admitted")
    assert 'id="wl-why-pending"' not in page(viewer_ui, queued[0])
