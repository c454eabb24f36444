"""Django's SQLite backend, with the write lock handed from thread to thread in a process.

In embedded mode one process writes from several threads: the web requests, the
reconciler loop (admission, lifecycle, the simulated clusters) and, under ``bench``, the
workload generator and the benchmark's cluster. Every transaction takes SQLite's write lock
when it begins (``BEGIN IMMEDIATE``, see the settings). A transaction that finds the lock
taken is left to SQLite's busy handler, which does not wait for the lock to be released: it
sleeps and tries again, 1, 2, 5 … up to 100 ms at a time. A writer then waits up to tens of
milliseconds after the lock is free, and an admission cycle or a finished job waits that
long to write; with several busy threads the reconciler spends much of its time in
``BEGIN``.

Here the transactions of one process first take a lock of the process, which wakes the next
writer as soon as the previous one commits or rolls back; SQLite's own lock still guards
against other processes (``manage.py`` commands, a second server), with its busy handler.
A writer that cannot get the process lock within the connection's timeout goes on to
SQLite's lock as before, so a thread that never ends its transaction cannot stop the others
for longer than SQLite would.

A write outside a transaction (an ``update()`` or ``delete()`` in autocommit mode) is a
transaction of its own, and SQLite takes its write lock for the statement: it takes the
process lock first too: otherwise the admission cycle's autocommit writes (the lease,
the requeue of parked workloads) would wait in SQLite's busy handler whenever another
thread writes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db.backends.sqlite3 import base

_write_lock = threading.Lock()
# Statements that write, by their first word. A ``WITH`` may lead a read as well as a write;
# this code base writes with one only inside transactions, so it is not counted here.
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _writes(query: str) -> bool:
    return query.lstrip()[:7].upper().startswith(_WRITES)


class _Cursor(base.SQLiteCursorWrapper):
    """Takes the process lock around a write that is a transaction of its own."""

    lock_timeout = 5.0

    @contextmanager
    def _locked_if_own_write(self, query: str) -> Iterator[None]:
        if self.connection.in_transaction or not _writes(query):
            yield
            return
        held = _write_lock.acquire(timeout=self.lock_timeout)
        try:
            yield
        finally:
            if held:
                _write_lock.release()

    def execute(self, query: str, params: Any = None) -> Any:
        with self._locked_if_own_write(query):
            return super().execute(query, params)

    def executemany(self, query: str, param_list: Any) -> Any:
        with self._locked_if_own_write(query):
            return super().executemany(query, param_list)


class DatabaseWrapper(base.DatabaseWrapper):
    _holds_write_lock = False

    def _lock_timeout(self) -> float:
        return float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))

    def create_cursor(self, name: str | None = None) -> Any:
        cursor = self.connection.cursor(factory=_Cursor)
        cursor.lock_timeout = self._lock_timeout()
        return cursor

    def _start_transaction_under_autocommit(self) -> None:
        self._holds_write_lock = _write_lock.acquire(timeout=self._lock_timeout())
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]
        except BaseException:
            self._release_write_lock()
            raise

    def _release_write_lock(self) -> None:
        if self._holds_write_lock:
            self._holds_write_lock = False
            _write_lock.release()

    def _commit(self) -> Any:
        try:
            return super()._commit()  # type: ignore[misc]
        finally:
            self._release_write_lock()

    def _rollback(self) -> Any:
        try:
            return super()._rollback()  # type: ignore[misc]
        finally:
            self._release_write_lock()

    def _close(self) -> Any:
        try:
            return super()._close()  # type: ignore[misc]
        finally:
            self._release_write_lock()
