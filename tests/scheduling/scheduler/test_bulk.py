"""Batched writes (scheduling.scheduler.bulk) against the real database."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from scheduling.models import Event, Workload
from scheduling.scheduler import bulk
from tests.fixtures import plans
from tests.fixtures.row_locks import held_open, write_without_waiting

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


def test_insert_rows_writes_what_insert_writes_without_instances(manager) -> None:
    """Rows across batches, a time shared by the batch and one of its own, a default (the
    event type), a null foreign key: stored as ``insert`` stores the same Events."""
    wl = Workload.objects.create(cluster=manager, namespace="ns", name="w", pod_sets=[])
    shared = datetime(2026, 3, 1, 12, 30, 15, 250000, tzinfo=UTC)
    own = datetime(2026, 3, 1, 14, 0, tzinfo=dt_timezone(timedelta(hours=2)))
    values = [{"cluster_id": manager.pk, "workload_id": wl.pk if i % 2 else None,
               "object_kind": "Workload", "object_namespace": "ns", "object_name": f"w{i}",
               "reason": f"R{i}", "message": f'm "{i}", {{}}',
               "created_at": own if i == 3 else shared} for i in range(5)]
    with transaction.atomic():
        bulk.insert_rows(Event, values, batch_size=2)
        bulk.insert(Event, [Event(**{**row, "reason": row["reason"] + "-orm"})
                            for row in values])

    fields = ("workload_id", "object_name", "message", "type", "created_at")
    by_rows = list(Event.objects.filter(cluster=manager, reason__in=[
        f"R{i}" for i in range(5)]).order_by("id").values_list(*fields))
    by_orm = list(Event.objects.filter(cluster=manager, reason__endswith="-orm")
                  .order_by("id").values_list(*fields))
    assert by_rows == by_orm
    assert [row[-1] for row in by_rows] == [shared, shared, shared, own, shared]
    assert {row[3] for row in by_rows} == {"Normal"}  # the field's default


def test_insert_rows_refuses_a_row_without_a_field_save_would_fill(manager) -> None:
    rows = [{"cluster_id": manager.pk, "namespace": "ns", "name": "w", "pod_sets": [],
             "created_at": datetime(2026, 3, 1, tzinfo=UTC)}]
    with pytest.raises(ValueError, match=r"rows\[0\]: updated_at must be given"):
        bulk.insert_rows(Workload, rows)
    assert not Workload.objects.filter(name="w").exists()


AWKWARD = [
    {"msg": 'quotes " and \\ backslash, {braces}, commas, and NULL', "n": [1, [2, {}]]},
    [],
    {"ünïcode": "日本語", "empty": ""},
]


def test_awkward_values_round_trip_to_the_right_rows(manager) -> None:
    # PostgreSQL writes a batch as one array per column (unnest): the values, nulls and
    # order of every row must come back as they went in.
    drafts = [_draft(manager, f'odd,"{i}"{{}}') for i in range(5)]
    for i, draft in enumerate(drafts):
        draft.labels = {"value": AWKWARD[i % len(AWKWARD)]}
        draft.annotations = {}
        draft.queue_name = "" if i % 2 else 'lq "x", {y}'

    with transaction.atomic():
        created = bulk.insert(Workload, drafts, batch_size=3)
        written = bulk.update_versioned(Workload, [
            bulk.VersionedChange(w.pk, 1, {"conditions": AWKWARD[i % len(AWKWARD)]
                                           if i % 2 == 0 else [],
                                           "requeue_at": None,
                                           "admission": None if i % 2 else AWKWARD[0]})
            for i, w in enumerate(created)], batch_size=2)

    assert written == {w.pk for w in created}
    for i, w in enumerate(created):
        stored = Workload.objects.get(pk=w.pk)
        assert stored.name == f'odd,"{i}"{{}}'
        assert stored.labels == {"value": AWKWARD[i % len(AWKWARD)]}
        assert stored.queue_name == ("" if i % 2 else 'lq "x", {y}')
        assert stored.conditions == (AWKWARD[i % len(AWKWARD)] if i % 2 == 0 else [])
        assert stored.admission == (None if i % 2 else AWKWARD[0])
        assert stored.requeue_at is None
        assert stored.resource_version == 2


_NOW = datetime(2026, 11, 21, 23, 45, 1, 250_000, tzinfo=UTC)
CONVERTED = [
    ("conditions", [{"type": "Evicted", "status": "True", "message": 'a "quoted" ü'}]),
    ("conditions", []),
    ("labels", {"team": "a", "nested": {"n": [1, 2.5, None, True]}}),
    ("admission", None),
    ("admission", "a JSON string"),  # not a dict or list: through the field
    ("quota_reserved_at", _NOW),
    ("quota_reserved_at", _NOW.replace(microsecond=0)),  # str() drops zero microseconds
    ("quota_reserved_at", _NOW.astimezone(dt_timezone(timedelta(hours=-5)))),
    ("quota_reserved_at", None),
    ("name", 'plain "text"'),
    ("priority", -3),
]


@pytest.mark.parametrize(("name", "value"), CONVERTED)
def test_a_converter_gives_what_the_field_gives(name, value) -> None:
    # The shortcuts for JSON and time columns on SQLite must write exactly the parameter
    # Django would, so that reads, lookups and indexes see the same text.
    field = Workload._meta.get_field(name)
    conn = connections[DEFAULT_DB_ALIAS]
    ours, django = bulk._converter(field, conn)(value), field.get_db_prep_save(value, conn)
    if conn.vendor == "postgresql" and hasattr(django, "obj"):
        # A JSON value as its text, which the jsonb cast parses to what the field's
        # wrapper (psycopg's Jsonb) holds.
        assert type(ours) is str
        assert json.loads(ours) == django.obj
        return
    # PostgreSQL: times go through the field.
    assert getattr(ours, "obj", ours) == getattr(django, "obj", django)


def test_a_conditional_write_finds_its_rows_by_key_without_statistics(manager) -> None:
    # A new database, or one that autovacuum has not analysed yet: with the conditions
    # in the UPDATE, PostgreSQL hashed every row matching them (every pending workload)
    # to write a batch of a few.
    if connection.vendor != "postgresql":
        pytest.skip("a plan of PostgreSQL's")
    pending = plans.job_sized_workloads(manager, 12_000, "pending")
    plans.without_statistics("scheduling_workload")
    batch = pending[:120]

    with plans.rows_read("scheduling_workload", "WITH v") as reads, transaction.atomic():
        written = bulk.update_versioned(Workload, [
            bulk.VersionedChange(w.pk, 1, {"queue_state": "Inadmissible"}) for w in batch
        ], where={"phase": "Pending", "active": True})

    assert written == {w.pk for w in batch}
    (read,) = reads
    assert read <= len(batch), read


def test_a_batch_that_breaks_a_constraint_raises_djangos_error_and_writes_nothing(
        manager) -> None:
    # On PostgreSQL the batches run on a cursor of their own (server-side binding): its
    # errors must still be Django's, for the callers that catch them.
    from django.db import IntegrityError

    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.insert(Workload, [_draft(manager, "same"), _draft(manager, "same")])
    assert not Workload.objects.filter(name="same").exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs PostgreSQL row locks")
def test_update_versioned_leaves_rows_that_reference_the_written_ones_free_to_insert(
        manager) -> None:
    (wl,) = bulk.insert(Workload, [_draft(manager, "a")])
    change = bulk.VersionedChange(wl.pk, wl.resource_version, {"queue_name": "other"})

    with held_open(lambda: bulk.update_versioned(Workload, [change])):
        write_without_waiting(lambda: Event.objects.create(
            cluster=manager, workload_id=wl.pk, object_kind="Workload", object_name="a",
            reason="Pending", created_at=datetime(2026, 1, 1, tzinfo=UTC)))

    assert Workload.objects.get(pk=wl.pk).queue_name == "other"
    assert Event.objects.filter(workload_id=wl.pk).count() == 1


def test_insert_rows_returning_ids_gives_each_rows_id_and_writes_shared_json_once_each(
        manager) -> None:
    at = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    shared = [{"name": "main", "count": 1, "template": {"spec": {}}}]
    rows = [{"cluster_id": manager.pk, "namespace": "ns", "name": f"w{i}", "uid": uuid.uuid4(),
             "pod_sets": shared if i != 2 else [], "labels": {"i": str(i)},
             "created_at": at, "updated_at": at} for i in range(5)]
    with transaction.atomic():
        ids = bulk.insert_rows_returning_ids(Workload, rows, batch_size=2)

    stored = dict(Workload.objects.filter(pk__in=ids).values_list("pk", "name"))
    assert [stored[pk] for pk in ids] == [f"w{i}" for i in range(5)]
    by_name = {wl.name: wl for wl in Workload.objects.filter(pk__in=ids)}
    assert [by_name[f"w{i}"].pod_sets for i in range(5)] == [shared, shared, [], shared, shared]
    assert [by_name[f"w{i}"].labels for i in range(5)] == [{"i": str(i)} for i in range(5)]
    assert all(wl.conditions == [] and wl.scheduler_state == {} for wl in by_name.values())


def test_load_gives_what_only_gives(manager) -> None:
    at = datetime(2026, 3, 1, 12, 30, 15, 250000, tzinfo=UTC)
    with transaction.atomic():
        created = bulk.insert(Workload, [_draft(manager, f"w{i}") for i in range(5)])
    Workload.objects.filter(pk=created[1].pk).update(
        conditions=[{"type": "Admitted", "status": "True"}], admission={"clusterQueue": "cq"},
        quota_reserved_at=at, active=False, preempting=True, phase="Admitted")
    names = ("cluster_id", "name", "admission", "conditions", "quota_reserved_at", "active",
             "preempting", "phase", "resource_version", "job_id")
    ids = [created[i].pk for i in (3, 1, 4)] + [max(w.pk for w in created) + 100]

    loaded = {wl.pk: wl for wl in bulk.load(Workload, ids, names, batch_size=2)}
    by_orm = {wl.pk: wl for wl in Workload.objects.filter(pk__in=ids).only(*names)}

    assert sorted(loaded) == sorted(by_orm) == sorted(ids[:3])
    for pk, wl in loaded.items():
        assert {n: getattr(wl, n) for n in names} == {n: getattr(by_orm[pk], n) for n in names}
        assert wl.get_deferred_fields() == by_orm[pk].get_deferred_fields()
        assert not wl._state.adding
    assert loaded[created[1].pk].quota_reserved_at == at
    assert loaded[created[1].pk].conditions == [{"type": "Admitted", "status": "True"}]
    # A field not loaded is read when asked for, as with ``only``.
    assert loaded[created[3].pk].labels == {"team": "w3"}
