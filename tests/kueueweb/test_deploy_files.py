"""The example deployment under deploy/ names commands that exist, so it cannot rot."""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import get_commands

from kueueweb.celery import app

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _command(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return command if isinstance(command, list) else command.split()


def test_compose_has_the_production_layout() -> None:
    services = _compose()["services"]

    assert {"db", "redis", "migrate", "web-1", "web-2", "worker", "beat", "proxy"} <= set(services)
    assert services["worker"]["deploy"]["replicas"] == 2
    assert "replicas" not in services["beat"].get("deploy", {})
    for name in ("web-1", "web-2", "worker", "beat", "migrate"):
        env = services[name]["environment"]
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
        assert services[name]["env_file"] == "kueueweb.env"
    for name in ("web-1", "web-2", "worker", "beat"):
        assert services[name]["depends_on"]["migrate"]["condition"] == \
            "service_completed_successfully"


def test_compose_runs_the_asgi_app_and_the_celery_app_of_the_project() -> None:
    services = _compose()["services"]

    for name in ("web-1", "web-2"):
        command = _command(services[name])
        assert command[0] == "daphne"
        assert command[-1] == "kueueweb.asgi:application"
    for name, role in (("worker", "worker"), ("beat", "beat")):
        command = _command(services[name])
        assert command[:4] == ["celery", "-A", app.main, role]
    assert app.main == "kueueweb"


def test_compose_and_units_call_management_commands_that_exist() -> None:
    commands = get_commands()
    migrate = " ".join(_command(_compose()["services"]["migrate"]))
    for name in ("migrate", "ensure_admin"):
        assert f"manage.py {name}" in migrate
        assert name in commands
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "manage.py collectstatic" in dockerfile
    assert "collectstatic" in commands


def test_nginx_forwards_websocket_upgrades_to_both_web_processes() -> None:
    conf = (DEPLOY / "nginx" / "kueueweb.conf").read_text()

    assert "server web-1:8000" in conf
    assert "server web-2:8000" in conf
    assert "location /ws/" in conf
    assert "proxy_set_header Upgrade $http_upgrade" in conf


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(DEPLOY / "systemd" / name)
    return parser


@pytest.mark.parametrize(("unit", "program", "args"), [
    ("kueueweb-web.service", "daphne", ["kueueweb.asgi:application"]),
    ("kueueweb-worker@.service", "celery", ["-A", "kueueweb", "worker"]),
    ("kueueweb-beat.service", "celery", ["-A", "kueueweb", "beat"]),
])
def test_systemd_units_start_the_project_processes(unit: str, program: str,
                                                   args: list[str]) -> None:
    service = _unit(unit)["Service"]
    command = service["ExecStart"].split()

    assert command[0].endswith(f"/.venv/bin/{program}")
    joined = " ".join(command)
    assert " ".join(args) in joined
    assert service["EnvironmentFile"] == "/etc/kueueweb/kueueweb.env"


def test_the_env_example_names_the_settings_kueueweb_reads() -> None:
    example = (DEPLOY / "kueueweb.env.example").read_text()
    settings_source = (ROOT / "kueueweb" / "settings.py").read_text()
    names = {line.split("=", 1)[0].lstrip("# ").strip() for line in example.splitlines()
             if "=" in line and line.lstrip("# ").split("=", 1)[0].isupper()}

    assert {"DEBUG", "SECRET_KEY", "KUEUEWEB_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL",
            "ALLOWED_HOSTS", "CSRF_TRUSTED_ORIGINS"} <= names
    for name in names - {"KUEUEWEB_ADMIN_PASSWORD"}:
        # Secrets are read as NAME (the _FILE variant by env_secret).
        assert f'"{name.removesuffix("_FILE")}"' in settings_source, name
