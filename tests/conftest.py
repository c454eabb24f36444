"""Shared fixtures: users of each role and API clients logged in as them."""

from __future__ import annotations

import os

import pytest

pytest_plugins = [
    "tests.fixtures.accounts", "tests.fixtures.scheduling", "tests.fixtures.processes",
    "tests.fixtures.browser", "tests.fixtures.broker",
]


def _is_production_mode() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith("postgres") and bool(
        os.environ.get("REDIS_URL")
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``production`` need PostgreSQL and Redis: they run in the PostgreSQL pass."""
    if _is_production_mode():
        return
    skip = pytest.mark.skip(reason="production mode only (DATABASE_URL=postgres…, REDIS_URL)")
    for item in items:
        if "production" in item.keywords:
            item.add_marker(skip)

# The Kubernetes API test server for the cluster backend (multicluster/kube).
pytest_plugins += ["tests.fixtures.kube_api", "tests.fixtures.tls"]
