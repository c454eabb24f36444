"""The embedded SQLite backend hands the write lock from thread to thread in a process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from kueueweb.db.sqlite3 import base


def _wrapper(path: Path) -> base.DatabaseWrapper:
    settings = {**connections["default"].settings_dict, "NAME": str(path),
                "OPTIONS": {"timeout": 5, "transaction_mode": "IMMEDIATE"}}
    return base.DatabaseWrapper(settings, alias="lock-test")


def _begin(conn: base.DatabaseWrapper) -> None:
    conn.set_autocommit(False, force_begin_transaction_with_broken_autocommit=True)


def _end(conn: base.DatabaseWrapper, *, commit: bool = True) -> None:
    conn.commit() if commit else conn.rollback()
    conn.set_autocommit(True)


def _lock_is_free() -> bool:
    if base._write_lock.acquire(blocking=False):
        base._write_lock.release()
        return True
    return False


@pytest.fixture(autouse=True)
def _own_databases(django_db_blocker: Any) -> Iterator[None]:
    # These tests open SQLite files of their own, never the test database.
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def database(tmp_path: Path) -> Path:
    path = tmp_path / "db.sqlite3"
    conn = _wrapper(path)
    with conn.cursor() as cursor:
        cursor.execute("CREATE TABLE t (n integer)")
    conn.close()
    return path


def test_a_transaction_holds_the_process_lock_until_it_ends(database: Path) -> None:
    conn = _wrapper(database)
    for commit in (True, False):
        _begin(conn)
        assert not _lock_is_free()
        conn.cursor().execute("INSERT INTO t VALUES (1)")
        _end(conn, commit=commit)
        assert _lock_is_free()
    _begin(conn)
    conn.close()  # a connection closed in a transaction gives the lock back
    assert _lock_is_free()


def test_a_second_thread_begins_when_the_first_commits(database: Path) -> None:
    order: list[str] = []
    holding = threading.Event()

    def first() -> None:
        conn = _wrapper(database)
        _begin(conn)
        holding.set()
        time.sleep(0.3)  # the second thread tries to begin meanwhile
        order.append("first commits")
        conn.cursor().execute("INSERT INTO t VALUES (1)")
        _end(conn)
        conn.close()

    def second() -> None:
        holding.wait()
        conn = _wrapper(database)
        _begin(conn)
        order.append("second began")
        rows: Any = conn.cursor().execute("SELECT count(*) FROM t").fetchone()
        order.append(f"second sees {rows[0]}")
        _end(conn)
        conn.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert order == ["first commits", "second began", "second sees 1"]
    assert _lock_is_free()


def test_a_begin_that_fails_gives_the_lock_back(database: Path, monkeypatch) -> None:
    conn = _wrapper(database)

    def refuse(self: Any) -> None:
        raise RuntimeError("BEGIN failed")

    monkeypatch.setattr(base.base.DatabaseWrapper, "_start_transaction_under_autocommit", refuse)
    with pytest.raises(RuntimeError):
        _begin(conn)
    assert _lock_is_free()
    conn.close()


def test_a_write_outside_a_transaction_waits_for_the_process_lock(database: Path) -> None:
    # An autocommit UPDATE or DELETE is a transaction of its own: it waits for the writer
    # of another thread like a BEGIN does, and goes as soon as that one ends, rather than
    # in SQLite's busy handler, which sleeps up to 100 ms between attempts.
    conn = _wrapper(database)
    released: list[float] = []

    def release_soon() -> None:
        time.sleep(0.3)
        released.append(time.monotonic())
        base._write_lock.release()

    base._write_lock.acquire()
    helper = threading.Thread(target=release_soon)
    helper.start()
    conn.cursor().execute("INSERT INTO t VALUES (1)")
    wrote = time.monotonic()
    helper.join(timeout=10)
    assert released
    assert wrote >= released[0]
    assert _lock_is_free()

    # Reads never wait: WAL lets them go past a writer.
    base._write_lock.acquire()
    try:
        assert conn.cursor().execute("SELECT count(*) FROM t").fetchone() == (1,)
        assert conn.cursor().execute(" with n as (select 1) select * from n").fetchone() == (1,)
    finally:
        base._write_lock.release()
    conn.close()


@pytest.mark.parametrize(("query", "writes"), [
    ("UPDATE t SET n = 1", True), ("  delete from t", True), ("INSERT INTO t VALUES (1)", True),
    ("REPLACE INTO t VALUES (1)", True), ("SELECT 1", False), ("PRAGMA foreign_keys", False),
])
def test_writes_are_told_from_reads_by_their_first_word(query: str, writes: bool) -> None:
    assert base._writes(query) is writes
