"""``manage.py loadtest`` at a tiny scale, so that the load tests keep working."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from multicluster.models import Cluster
from scheduling.models import Event, Workload


def _run(*args: str, tmp_path: Path) -> dict[str, Any]:
    output = tmp_path / "figures.json"
    call_command("loadtest", *args, "--output", str(output))
    return json.loads(output.read_text())


@pytest.mark.django_db(transaction=True)
def test_api_load_test_seeds_every_phase_and_times_every_endpoint(
    manager: Cluster, tmp_path: Path
) -> None:
    report = _run("api", "--workloads", "300", "--requests", "1", "--transport", "client",
                  tmp_path=tmp_path)

    assert report["seed"]["workloads"] == 300
    assert set(report["seed"]["phases"]) == {"pending", "admitted", "finished", "evicted"}
    assert Workload.objects.count() == 300
    # Several events per workload, as a history.
    assert Event.objects.count() >= 3 * 300
    assert report["transport"] == "django-test-client"
    assert report["errors"] == 0
    names = {e["name"] for e in report["endpoints"]}
    assert {"workloads: first page", "workloads: late page", "overview", "workloads page",
            "workload page: finished", "cluster queue page"} <= names
    for endpoint in report["endpoints"]:
        assert endpoint["status"] == 200, endpoint
        assert endpoint["requests"] == 1
        assert endpoint["queries"] > 0
        assert 0 < endpoint["p50_ms"] <= endpoint["p99_ms"] <= endpoint["max_ms"]


@pytest.mark.django_db(transaction=True)
def test_api_load_test_refuses_a_database_with_workloads(
    manager: Cluster, tmp_path: Path, make_queue: Any, make_workload: Any
) -> None:
    make_queue("cq", {"cpu": "1"})
    make_workload("mine", "lq-cq", {"cpu": "1"})

    with pytest.raises(CommandError, match="already has workloads"):
        _run("api", "--workloads", "10", "--requests", "1", "--transport", "client",
             tmp_path=tmp_path)
    assert list(Workload.objects.values_list("name", flat=True)) == ["mine"]


@pytest.mark.django_db(transaction=True)
def test_live_load_test_delivers_a_burst_to_every_client(
    manager: Cluster, tmp_path: Path
) -> None:
    # One producer thread: the test database on SQLite is in memory with a shared cache,
    # where a second writer's BEGIN IMMEDIATE fails at once ("database table is locked")
    # instead of waiting as it does on a database file.
    report = _run("live", "--workloads", "50", "--rate", "100", "--seconds", "1",
                  "--clients", "3", "--transport", "asgi", "--producers", "1",
                  tmp_path=tmp_path)

    assert report["transport"] == "asgi-in-process"
    assert report["changes"] == 100
    assert len(report["clients"]) == 3
    for client in report["clients"]:
        assert client["messages"] >= 1
        assert client["missed"] == 0
    assert set(report["checks"]) >= {"every_client_saw_the_last_change", "lag_not_growing"}
    assert report["checks"]["every_client_saw_the_last_change"] is True


@pytest.mark.django_db
def test_the_soak_refuses_to_run_without_postgresql_and_redis(settings: Any) -> None:
    from django.db import connection

    if connection.vendor == "postgresql" and settings.REDIS_URL:
        settings.REDIS_URL = ""
    with pytest.raises(CommandError, match="PostgreSQL .*Redis"):
        call_command("loadtest", "soak", "--seconds", "1")
