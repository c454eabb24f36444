"""Migrations that do more than the model state says: indexes outside it (0009)."""

from __future__ import annotations

import pytest
from django.db import connection


@pytest.mark.django_db
def test_list_order_indexes_cover_the_id_on_postgresql_only() -> None:
    # Migration 0009: PostgreSQL needs the id inside the namespace/name index to answer a
    # late page from the index alone; SQLite's indexes carry the rowid already.
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname IN "
                "('workload_list_order', 'job_list_order') ORDER BY indexname")
            found = dict(cursor.fetchall())
            assert set(found) == {"job_list_order", "workload_list_order"}
            for definition in found.values():
                assert "(cluster_id, namespace, name) INCLUDE (id)" in definition
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND name IN "
                           "('workload_list_order', 'job_list_order')")
            assert cursor.fetchall() == []
