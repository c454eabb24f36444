"""Batched writes for the reconcilers' hot paths: many rows per statement.

The admission cycle, the lifecycle and the workload generator of the benchmark write
thousands of rows a second. Through the ORM each row costs a query build (``update()``) or,
for ``bulk_create``, a preparation of every field of every object; at that rate those
costs, not the database, bound throughput. These
helpers keep the ORM's field conversions (``get_db_prep_save``) but build one statement
per batch:

* ``insert`` writes new objects with one ``INSERT ... RETURNING id`` per batch and sets
  their primary keys, as ``bulk_create`` does; ``insert_rows`` writes plain rows (no
  instances, no keys returned) for what is written and never read back in the call, and
  ``insert_rows_returning_ids`` the same rows with their keys, for callers that make
  instances of their own;
* ``load`` reads instances by primary key with some fields loaded, as ``only()`` does,
  without building a queryset for each batch of a few hundred keys;
* ``update_versioned`` is Kubernetes' optimistic write for many objects at once: each row is
  written only if it is still at the ``resource_version`` read (and matches ``where``), its
  version is bumped, and the ids actually written come back (``UPDATE ... FROM (VALUES ...)
  RETURNING id``), so a caller knows exactly which decisions took effect.

All run on the default connection inside the caller's transaction; PostgreSQL and SQLite
(3.35 or later, for RETURNING) are supported. On PostgreSQL the columns go as arrays in the
binary format (``_cursor``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db import models as db_models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

_M = TypeVar("_M", bound=db_models.Model)

# Rows per statement: under SQLite's and PostgreSQL's limits on bound parameters with room
# for wide rows, and small enough that one statement stays a short lock.
BATCH_SIZE = 500


def _converter(field: db_models.Field[Any, Any], conn: BaseDatabaseWrapper,
               ) -> Callable[[Any], Any]:
    """How a Python value of ``field`` becomes a query parameter on ``conn``. Plain values
    of plain columns pass as they are; JSON, time and UUID columns go through the field.

    On SQLite the two columns every hot write carries take a shortcut that gives what the
    field gives (``tests/scheduling/test_bulk.py`` compares them): a dict or list of a
    JSON column is dumped, an aware datetime becomes the connection's naive local time as
    text. Anything else still goes through the field.

    On PostgreSQL a JSON value goes as its text too, which the statement's ``jsonb[]`` cast
    parses as it parses the field's ``Jsonb`` (``_rows``): the field's wrapper is dumped
    by psycopg for every element of the array, so a value many rows share (a default, a
    batch's pod sets) would be encoded for each row, where the text is made once per
    call (``insert_rows``' memo). SQL NULL for None, as the field writes it."""
    def through_field(value: Any) -> Any:
        return field.get_db_prep_save(value, connection=conn)

    if (conn.vendor == "postgresql" and isinstance(field, db_models.JSONField)
            and field.encoder is None):
        def jsonb_text(value: Any) -> Any:
            if value is None:
                return None
            if type(value) in _JSON_TYPES:
                return json.dumps(value)
            return through_field(value)
        return jsonb_text

    if conn.vendor == "sqlite":
        if isinstance(field, db_models.JSONField) and field.encoder is None:
            def json_text(value: Any) -> Any:
                if value is None:
                    return None  # SQL NULL, as the field writes it
                if type(value) in (dict, list):
                    return json.dumps(value)
                return through_field(value)
            return json_text
        if isinstance(field, db_models.DateTimeField) and settings.USE_TZ:
            zone = conn.timezone

            def naive_text(value: Any) -> Any:
                if type(value) is datetime and value.tzinfo is not None:
                    return str(value.astimezone(zone).replace(tzinfo=None))
                return through_field(value)
            return naive_text
    if isinstance(field, (db_models.JSONField, db_models.DateTimeField, db_models.UUIDField,
                          db_models.DateField, db_models.DecimalField)):
        return through_field
    return _as_is


# What ``jsonb_text`` dumps itself: the types the field's ``Jsonb`` dumps with json.dumps.
_JSON_TYPES = (dict, list, tuple, str, int, float, bool)


def _as_is(value: Any) -> Any:
    return value


def _converters(fields: Sequence[db_models.Field[Any, Any]]) -> list[Callable[[Any], Any]]:
    """``_converter`` of each field on the default connection (the wrapper itself, looked
    up once, not the thread-local proxy on every value)."""
    conn = connections[DEFAULT_DB_ALIAS]
    return [_converter(field, conn) for field in fields]


def _rows(fields: Sequence[db_models.Field[Any, Any]], rows: Sequence[Sequence[Any]],
          ) -> tuple[str, list[Any]]:
    """A row source for ``rows`` (one value per field each) and its parameters.

    PostgreSQL: ``SELECT * FROM unnest(%b::type[], ...)``, one array per column, in the
    binary format (``_cursor`` runs it). The statement stays a few hundred characters
    whatever the batch, so psycopg converts it once and caches it; a VALUES list of 500
    rows is tens of kilobytes that psycopg would parse again for every batch, in every
    writer of workloads. SQLite: ``VALUES (?, ...), ...``.
    """
    if connection.vendor == "postgresql":
        arrays = ", ".join(
            f"%b::{field.cast_db_type(connection)}[]"  # type: ignore[attr-defined]
            for field in fields)
        return (f"SELECT * FROM unnest({arrays})",
                [list(column) for column in zip(*rows, strict=True)] if rows
                else [[] for _ in fields])
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    return "VALUES " + ", ".join([row_sql] * len(rows)), [v for row in rows for v in row]


@contextmanager
def _cursor() -> Iterator[CursorWrapper]:
    """A cursor of the default connection for the statements of this module.

    On PostgreSQL it binds parameters on the server, so that ``_rows``' arrays go in the
    binary format. Django's cursors bind on the client, and psycopg then writes an array
    as a literal, escaping each double quote of each element with a Python regex: a JSON
    value is full of them. Binary elements go as they are, with no escaping to do on
    either side. Errors, query logging and execute
    wrappers are Django's, as with ``connection.cursor()``.
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    import psycopg

    connection.ensure_connection()
    connection.validate_thread_sharing()
    with connection.wrap_database_errors:
        raw = psycopg.Cursor(connection.connection)
    wrapper = CursorDebugWrapper if connection.queries_logged else CursorWrapper
    with wrapper(raw, connection) as cursor:
        yield cursor


def insert(model: type[_M], objs: Sequence[_M], *, batch_size: int = BATCH_SIZE) -> list[_M]:
    """INSERT ``objs`` (new, without primary keys) in batches; sets each one's ``pk``.

    Field defaults and ``auto_now_add`` apply as in ``save()`` (``pre_save``); no signals
    are sent, as with ``bulk_create``.
    """
    meta = model._meta
    # Columns the database computes (GeneratedField) are not written, as with bulk_create.
    fields = [f for f in meta.concrete_fields if not f.primary_key and not f.generated]
    converters = _converters(fields)
    table = connection.ops.quote_name(meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    pk_column = connection.ops.quote_name(meta.pk.column)
    with _cursor() as cursor:
        for start in range(0, len(objs), batch_size):
            chunk = objs[start:start + batch_size]
            source, params = _rows(fields, [
                [convert(field.pre_save(obj, True))
                 for field, convert in zip(fields, converters, strict=True)]
                for obj in chunk])
            # Rows come back in the order they were given (VALUES and unnest keep it).
            cursor.execute(f"INSERT INTO {table} ({columns}) {source} RETURNING {pk_column}",
                           params)
            for obj, (pk,) in zip(chunk, cursor.fetchall(), strict=True):
                obj.pk = pk
                obj._state.adding = False
                obj._state.db = connection.alias
    return list(objs)


def insert_rows(model: type[db_models.Model], rows: Sequence[Mapping[str, Any]], *,
                batch_size: int = BATCH_SIZE) -> None:
    """INSERT ``rows``, each a mapping of field name (``attname``: ``cluster_id``) to value,
    without making model instances: for rows that are written and not read back, such as
    the events of an admission cycle, hundreds per call. A field a row leaves out takes
    its default, evaluated once per call (so a callable default such as a UUID must be
    given per row); a field filled in by ``save()`` (``auto_now``) must be given. Values
    are converted as ``insert`` converts them, each time once per call, and each JSON
    object once per call however many rows carry that same object."""
    _insert_rows(model, rows, batch_size=batch_size, returning=False)


def insert_rows_returning_ids(model: type[db_models.Model], rows: Sequence[Mapping[str, Any]],
                              *, batch_size: int = BATCH_SIZE) -> list[Any]:
    """``insert_rows``, and the primary key of each row, in the order of ``rows``."""
    return _insert_rows(model, rows, batch_size=batch_size, returning=True)


def _insert_rows(model: type[db_models.Model], rows: Sequence[Mapping[str, Any]], *,
                 batch_size: int, returning: bool) -> list[Any]:
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key and not f.generated]
    for field in fields:
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            missing = [i for i, row in enumerate(rows) if field.attname not in row]
            if missing:
                raise ValueError(f"rows[{missing[0]}]: {field.attname} must be given")
    # Per field: its name, its default, its conversion (None: the value as it is) and a
    # memo of converted values. A batch shares a few times (the cycle's "now"), memoized by
    # value, and often the same JSON object in many rows (a default, a shared spec),
    # memoized by identity: a JSON value is unhashable, and encoding it is the costly part.
    plan: list[tuple[str, Any, Callable[[Any], Any] | None, dict[Any, Any] | None, bool]] = [
        (field.attname, field.get_default(), None if convert is _as_is else convert,
         {} if isinstance(field, (db_models.DateTimeField, db_models.JSONField)) else None,
         isinstance(field, db_models.JSONField))
        for field, convert in zip(fields, _converters(fields), strict=True)]

    def values(row: Mapping[str, Any]) -> list[Any]:
        out: list[Any] = []
        for name, default, convert, memo, by_identity in plan:
            value = row.get(name, default)
            if convert is not None:
                if memo is None:
                    value = convert(value)
                else:
                    # Rows keep their JSON objects alive for the call, so ids stay unique.
                    key = id(value) if by_identity else value
                    if key in memo:
                        value = memo[key]
                    else:
                        value = memo[key] = convert(value)
            out.append(value)
        return out

    table = connection.ops.quote_name(meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    suffix = f" RETURNING {connection.ops.quote_name(meta.pk.column)}" if returning else ""
    ids: list[Any] = []
    with _cursor() as cursor:
        for start in range(0, len(rows), batch_size):
            source, params = _rows(fields, [values(row) for row in rows[start:start + batch_size]])
            # Rows come back in the order they were given (VALUES and unnest keep it).
            cursor.execute(f"INSERT INTO {table} ({columns}) {source}{suffix}", params)
            if returning:
                ids.extend(pk for (pk,) in cursor.fetchall())
    return ids


def load(model: type[_M], ids: Iterable[Any], field_names: Sequence[str], *,
         batch_size: int = BATCH_SIZE) -> list[_M]:
    """The instances of ``model`` whose primary keys are in ``ids`` (those that exist, in
    no particular order) with ``field_names`` loaded, as ``.filter(pk__in=ids).only(...)``
    loads them: the values converted by the same converters, any other field read when
    first asked for. A reconciler that reads a few hundred rows by key at a time spent
    more on the queryset (compiling its SQL, dispatching converters, ``from_db``'s search
    for each field among those loaded) than on the read: here the statement and the plan
    are made once per call."""
    meta = model._meta
    names = list(dict.fromkeys([meta.pk.name, *field_names]))
    fields = [meta.get_field(name) for name in names]
    table = connection.ops.quote_name(meta.db_table)
    columns = []
    # Per field loaded: its place among the model's columns and its converters, as the
    # queryset's compiler finds them.
    plan: list[tuple[int, list[Callable[..., Any]], Any]] = []
    positions = {f.attname: i for i, f in enumerate(meta.concrete_fields)}
    for field in fields:
        assert isinstance(field, db_models.Field)
        assert field.column is not None
        columns.append(f"{table}.{connection.ops.quote_name(field.column)}")
        col = field.get_col(meta.db_table)
        converters = [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]
        plan.append((positions[field.attname], converters, col))
    template: list[Any] = [db_models.DEFERRED] * len(meta.concrete_fields)
    attnames = [f.attname for f in meta.concrete_fields]  # with a value in every place
    pk_column = f"{table}.{connection.ops.quote_name(meta.pk.column)}"
    keys = list(ids)
    found: list[_M] = []
    with connection.cursor() as cursor:
        for start in range(0, len(keys), batch_size):
            chunk = keys[start:start + batch_size]
            if connection.vendor == "postgresql":
                where, params = f"{pk_column} = ANY(%s)", [chunk]
            else:
                where, params = f"{pk_column} IN ({', '.join(['%s'] * len(chunk))})", chunk
            cursor.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE {where}", params)
            for row in cursor.fetchall():
                values = template.copy()
                for value, (position, converters, col) in zip(row, plan, strict=True):
                    for convert in converters:
                        value = convert(value, col, connection)
                    values[position] = value
                found.append(model.from_db(connection.alias, attnames, values))
    return found


class VersionedChange(NamedTuple):
    """New values for one row, to be written only at ``resource_version``."""

    pk: int
    resource_version: int
    values: Mapping[str, Any]


def _column(model: type[db_models.Model], name: str) -> tuple[db_models.Field[Any, Any], str]:
    """A concrete field of ``model`` and its quoted column."""
    field = model._meta.get_field(name)
    assert isinstance(field, db_models.Field)
    assert field.column is not None
    return field, connection.ops.quote_name(field.column)


def _row_lock(model: type[db_models.Model], fields: Sequence[db_models.Field[Any, Any]]) -> str:
    """The row lock of an UPDATE that writes ``fields``: the one PostgreSQL's UPDATE itself
    takes. FOR NO KEY UPDATE unless a written column belongs to a key (a primary key or a
    unique constraint), so inserts that reference the rows keep their foreign-key checks
    (FOR KEY SHARE) from waiting for the writer's commit."""
    meta = model._meta
    key_columns = {name for names in meta.unique_together for name in names}
    for constraint in meta.constraints:
        if isinstance(constraint, db_models.UniqueConstraint):
            key_columns.update(constraint.fields)
    if any(f.primary_key or f.unique or f.name in key_columns for f in fields):
        return "FOR UPDATE"
    return "FOR NO KEY UPDATE"


def update_versioned(
    model: type[db_models.Model],
    changes: Sequence[VersionedChange],
    *,
    where: Mapping[str, Any] | None = None,
    batch_size: int = BATCH_SIZE,
) -> set[int]:
    """Write each change whose row is still at its ``resource_version`` (and matches
    ``where``: a field's value, or a tuple of values), bumping the version; returns the
    primary keys written. Every change sets the same fields. Rows are written (and, on
    PostgreSQL, locked) in primary-key order.

    On PostgreSQL ``where`` is checked on the rows as the lock reads them, and the write
    itself finds its rows by primary key alone. With the conditions in the UPDATE, a table
    without statistics yet (a new database, or one whose autovacuum is off or behind)
    led the planner to hash every row matching them, every pending workload for an
    admission, instead of looking the batch up by key, whatever the size of the batch."""
    if not changes:
        return set()
    names = list(changes[0].values)
    targets = [_column(model, name) for name in names]
    converters = _converters([field for field, _ in targets])
    table = connection.ops.quote_name(model._meta.db_table)
    pk_field, pk_column = _column(model, model._meta.pk.name)
    version_field, version_column = _column(model, "resource_version")
    value_columns = [f"v_{index}" for index in range(len(targets))]
    assignments = ", ".join(f"{column} = v.{value}"
                            for (_, column), value in zip(targets, value_columns, strict=True))
    conditions = [f"{table}.{pk_column} = v.v_pk", f"{table}.{version_column} = v.v_rv"]
    checks: list[tuple[str, set[Any]]] = []  # (quoted column, values it may hold)
    for name, wanted in (where or {}).items():
        field, column = _column(model, name)
        values = wanted if isinstance(wanted, tuple) else (wanted,)
        checks.append((column, {field.get_db_prep_value(v, connection) for v in values}))
    locking = connection.vendor == "postgresql"
    where_params: list[Any] = []
    if not locking:
        for column, allowed in checks:
            conditions.append(f"{table}.{column} IN ({', '.join(['%s'] * len(allowed))})")
            where_params.extend(allowed)
    lock_sql = (f"SELECT {', '.join([pk_column, *(column for column, _ in checks)])} "
                f"FROM {table} WHERE {pk_column} = ANY(%s) ORDER BY {pk_column} "
                f"{_row_lock(model, [field for field, _ in targets])}")
    written: set[int] = set()
    ordered = sorted(changes, key=lambda change: change.pk)
    # The check and the write are one transaction, so the lock holds until the commit.
    with transaction.atomic(savepoint=False), _cursor() as cursor:
        for start in range(0, len(ordered), batch_size):
            chunk = ordered[start:start + batch_size]
            if locking:
                # Lock the rows in id order first: an UPDATE ... FROM locks them in whatever
                # order its join visits them, and two writers of overlapping rows in
                # different orders deadlock.
                cursor.execute(lock_sql, [[change.pk for change in chunk]])
                matching = {row[0] for row in cursor.fetchall()
                            if all(value in allowed
                                   for value, (_, allowed) in zip(row[1:], checks, strict=True))}
                chunk = [change for change in chunk if change.pk in matching]
                if not chunk:
                    continue
            source, params = _rows(
                [pk_field, version_field, *(field for field, _ in targets)],
                [[change.pk, change.resource_version,
                  *(convert(change.values[name])
                    for name, convert in zip(names, converters, strict=True))]
                 for change in chunk])
            cursor.execute(
                f"WITH v (v_pk, v_rv, {', '.join(value_columns)}) AS ({source}) "
                f"UPDATE {table} SET {assignments}, "
                f"{version_column} = {table}.{version_column} + 1 "
                f"FROM v WHERE {' AND '.join(conditions)} RETURNING {table}.{pk_column}",
                params + where_params)
            written.update(pk for (pk,) in cursor.fetchall())
    return written
