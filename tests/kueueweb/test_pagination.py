"""Every pager, in the UI and the API, answers a page or offset far past the end (even one no
database integer holds) with a page or a clear 400, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

HUGE = ("99999999999999999999", "9223372036854775807", "9223372036854775808", "-99999999999999999999")


@pytest.fixture
def queue_with_work(manager: Any, make_queue: Any, make_workload: Any) -> Any:
    make_queue("team-a", {"cpu": "4"})
    return make_workload("w-1", "lq-team-a", {"cpu": "1"})


def _ui_pages(workload: Any) -> list[str]:
    cq = {"cluster": "manager", "name": "team-a"}
    lq = {"cluster": "manager", "namespace": "ns", "name": "lq-team-a"}
    pages = [reverse("ui-workloads") + "?page={n}",
             reverse("ui-workloads-partial") + "?page={n}",
             reverse("ui-cluster-pods", kwargs={"name": "manager"}) + "?pods_page={n}"]
    for view, kwargs in (("ui-clusterqueue", cq), ("ui-clusterqueue-pending", cq),
                         ("ui-clusterqueue-admitted", cq), ("ui-localqueue", lq),
                         ("ui-localqueue-pending", lq), ("ui-localqueue-admitted", lq)):
        pages += [reverse(view, kwargs=kwargs) + "?pending_page={n}&admitted_page={n}"]
    wl = {"cluster": "manager", "namespace": workload.namespace, "name": workload.name}
    pages += [reverse("ui-workload", kwargs=wl) + "?events_page={n}",
              reverse("ui-workload-partial", kwargs={**wl, "region": "events"})
              + "?events_page={n}"]
    return pages


@pytest.mark.django_db
@pytest.mark.parametrize("number", HUGE)
def test_ui_pagers_answer_any_page_number(queue_with_work: Any, viewer_ui: Client,
                                          number: str) -> None:
    viewer_ui.raise_request_exception = False
    answers = {url: viewer_ui.get(url.format(n=number)).status_code
               for url in _ui_pages(queue_with_work)}

    assert {url: status for url, status in answers.items() if status != 200} == {}


@pytest.mark.django_db
@pytest.mark.parametrize("number", HUGE)
def test_api_pagers_answer_any_offset(queue_with_work: Any, viewer_client: APIClient,
                                      number: str) -> None:
    viewer_client.raise_request_exception = False
    lists = ["/api/v1/workloads/?offset={n}", "/api/v1/workloads/?limit={n}",
             "/api/v1/clusterqueues/?offset={n}",
             "/api/v1/clusterqueues/team-a/pendingworkloads?offset={n}",
             "/api/v1/clusterqueues/team-a/pendingworkloads?limit={n}",
             "/api/v1/namespaces/ns/localqueues/lq-team-a/pendingworkloads?offset={n}",
             "/api/v1/namespaces/ns/localqueues/lq-team-a/pendingworkloads?limit={n}"]
    answers = {url: viewer_client.get(url.format(n=number)).status_code for url in lists}

    assert {url: status for url, status in answers.items() if status not in (200, 400)} == {}
