"""The web process's garbage collector: a request's reference cycles are freed when it ends."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from django.core.signals import request_finished
from django.test import Client

from kueueweb import collector


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


@pytest.fixture
def tuned() -> Iterator[None]:
    threshold = gc.get_threshold()
    collector.tune()
    yield
    request_finished.disconnect(dispatch_uid="kueueweb.collector")
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_young_objects_stay_young_through_a_request(tuned: None) -> None:
    assert gc.get_threshold()[0] == collector.YOUNG_THRESHOLD
    assert gc.get_freeze_count() > 0


@pytest.mark.django_db  # request_finished's other receivers close database connections
def test_a_cycle_is_freed_when_the_request_finishes(tuned: None) -> None:
    gc.collect()
    cycle = Node()
    ref = weakref.ref(cycle)
    del cycle
    assert ref() is not None  # nothing has collected it yet
    request_finished.send(sender=None)
    assert ref() is None


@pytest.mark.django_db
def test_a_page_request_ends_with_its_garbage_collected(tuned: None) -> None:
    gc.collect()
    Client().get("/healthz")
    # The young generation was collected when the response finished: what the request
    # allocated is either freed or promoted, not pending.
    assert gc.get_count()[0] < 1000
