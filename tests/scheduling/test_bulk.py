"""Batched writes (scheduling.bulk) against the real database."""

from __future__ import annotations

import pytest
from django.db import transaction

from scheduling import bulk
from scheduling.models import Event, Workload

pytestmark = pytest.mark.django_db


def _draft(manager, name: str) -> Workload:
    return Workload(cluster=manager, namespace="ns", name=name, queue_name="lq",
                    pod_sets=[{"name": "main", "count": 1}], labels={"team": name})


def test_insert_sets_primary_keys_defaults_and_json(manager) -> None:
    drafts = [_draft(manager, f"w{i}") for i in range(3)]

    with transaction.atomic():
        created = bulk.insert(Workload, drafts, batch_size=2)

    assert [w.pk for w in created] == sorted(w.pk for w in created)
    stored = {w.name: w for w in Workload.objects.filter(pk__in=[w.pk for w in created])}
    assert set(stored) == {"w0", "w1", "w2"}
    assert stored["w1"].labels == {"team": "w1"}
    assert stored["w1"].resource_version == 1
    assert stored["w1"].created_at is not None
    assert len({w.uid for w in stored.values()}) == 3  # a default per object


def test_update_versioned_writes_only_rows_at_their_version(manager) -> None:
    with transaction.atomic():
        a, b, c = bulk.insert(Workload, [_draft(manager, n) for n in ("a", "b", "c")])
    Workload.objects.filter(pk=b.pk).update(resource_version=5)  # changed meanwhile
    Workload.objects.filter(pk=c.pk).update(phase="Finished")  # no longer matches ``where``

    with transaction.atomic():
        written = bulk.update_versioned(Workload, [
            bulk.VersionedChange(pk, 1, {"queue_state": "Inadmissible",
                                         "conditions": [{"type": "X", "status": "True"}]})
            for pk in (c.pk, b.pk, a.pk)
        ], where={"phase": ("Pending",)}, batch_size=2)

    assert written == {a.pk}
    rows = {r["id"]: r for r in Workload.objects.values("id", "queue_state", "conditions",
                                                         "resource_version")}
    assert rows[a.pk] == {"id": a.pk, "queue_state": "Inadmissible",
                          "conditions": [{"type": "X", "status": "True"}],
                          "resource_version": 2}
    assert rows[b.pk]["queue_state"] == "Active"
    assert rows[b.pk]["resource_version"] == 5
    assert rows[c.pk]["queue_state"] == "Active"


def test_update_versioned_with_nothing_to_write_runs_no_query(
        manager, django_assert_num_queries) -> None:
    with django_assert_num_queries(0):
        assert bulk.update_versioned(Workload, []) == set()


def test_insert_events(manager) -> None:
    wl = Workload.objects.create(cluster=manager, namespace="ns", name="w", pod_sets=[])
    from django.utils import timezone

    events = [Event(cluster=manager, workload=wl, object_kind="Workload", object_namespace="ns",
                    object_name="w", reason=f"R{i}", message="m", created_at=timezone.now())
              for i in range(2)]
    with transaction.atomic():
        bulk.insert(Event, events)
    assert list(Event.objects.filter(workload=wl).order_by("id").values_list(
        "reason", flat=True)) == ["R0", "R1"]
