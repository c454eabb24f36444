"""The example deployment under deploy/ names commands that exist, so it cannot rot."""

from __future__ import annotations

import configparser
import http.client
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import yaml
from cryptography.fernet import Fernet
from django.core.management import get_commands

from kueueweb.celery import app
from tests.fixtures.processes import free_port, wait_port

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
    # The browser's Host, port included: the live socket and forms must come from a page of
    # that host and port.
    hosts = [line.split()[-1] for line in conf.splitlines() if "proxy_set_header Host" in line]
    assert set(hosts) == {"$http_host;"}


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


# --- the client's address behind the shipped proxy ------------------------------------------


def test_nginx_appends_the_address_it_saw_to_x_forwarded_for() -> None:
    conf = (DEPLOY / "nginx" / "kueueweb.conf").read_text()
    setters = [line.split() for line in conf.splitlines()
               if "proxy_set_header X-Forwarded-For" in line]

    assert setters, "nginx must pass the client's address on"
    assert all(words[-1] == "$proxy_add_x_forwarded_for;" for words in setters)


def test_no_shipped_daphne_takes_the_address_from_the_client_s_header() -> None:
    """daphne's --proxy-headers takes the leftmost X-Forwarded-For entry as the client's
    address: the one the client wrote."""
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    commands = [" ".join(_command(_compose()["services"][name])) for name in ("web-1", "web-2")]
    commands.append(_unit("kueueweb-web.service")["Service"]["ExecStart"])
    commands.append(dockerfile.split("CMD", 1)[1])

    assert all("daphne" in command for command in commands)
    assert not [command for command in commands if "proxy-headers" in command]


def _compose_web() -> tuple[list[str], dict[str, str]]:
    service = _compose()["services"]["web-1"]
    env = {k: str(v) for k, v in service["environment"].items()}
    return _command(service), env


def _systemd_web() -> tuple[list[str], dict[str, str]]:
    service = _unit("kueueweb-web.service")["Service"]
    env = dict(item.split("=", 1) for item in service.get("Environment", "").split())
    return service["ExecStart"].split(), env


@pytest.fixture(scope="module")
def web_database(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a web process on a database of its own with one user, as a
    deployment's environment file gives it (the deployment's own settings module)."""
    directory = tmp_path_factory.mktemp("deployed")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KUEUEWEB_", "DJANGO_")) and k not in {
               "DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DEBUG"}}
    env.update({
        "DJANGO_SETTINGS_MODULE": "kueueweb.settings",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "KUEUEWEB_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "DATABASE_URL": f"sqlite:///{directory / 'db.sqlite3'}",
        "KUEUEWEB_VAR_DIR": str(directory),
        "ALLOWED_HOSTS": "127.0.0.1",
        # Plain HTTP between this test and daphne.
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "KUEUEWEB_LOGIN_FAILURE_LIMIT": "5",
    })
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
    subprocess.run([*manage, "shell", "-c", "from django.contrib.auth.models import User; "
                    "User.objects.create_user('vera', password='pw-vera-1234')"],
                   cwd=ROOT, env=env, check=True)
    return env


class Browser:
    """A browser behind the shipped proxy: every request comes from ``address`` through
    nginx, which appends that address to whatever X-Forwarded-For the client sent."""

    def __init__(self, port: int, address: str, forwarded: str | None = None) -> None:
        self.port = port
        self.address = address
        self.forwarded = forwarded
        self.cookies: dict[str, str] = {}

    def request(self, method: str, path: str, body: str = "") -> tuple[int, str]:
        chain = f"{self.forwarded}, {self.address}" if self.forwarded else self.address
        headers = {"X-Forwarded-For": chain, "X-Forwarded-Proto": "http",
                   "Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if body:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            for header, value in response.getheaders():
                if header.lower() == "set-cookie":
                    name, _, rest = value.partition("=")
                    self.cookies[name] = rest.split(";", 1)[0]
            return response.status, response.read().decode(errors="replace")
        finally:
            connection.close()

    def sign_in(self, password: str) -> int:
        status, page = self.request("GET", "/login/")
        assert status == 200, page
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        assert token is not None, page
        form = urlencode({"csrfmiddlewaretoken": token.group(1), "username": "vera",
                          "password": password})
        return self.request("POST", "/login/", form)[0]


@pytest.mark.parametrize("deployment", [_compose_web, _systemd_web], ids=["compose", "systemd"])
def test_the_sign_in_lockout_counts_the_address_the_proxy_saw(
        deployment: Callable[[], tuple[list[str], dict[str, str]]],
        web_database: dict[str, str], tmp_path: Path) -> None:
    """daphne as the deployment starts it, behind nginx as the deployment configures it: a
    client cannot spread its guesses over addresses of its choosing, nor lock somebody
    else's address out, by writing X-Forwarded-For itself."""
    command, deployed_env = deployment()
    assert Path(command[0]).name == "daphne"
    port = free_port()
    args = list(command[1:])
    args[args.index("-b") + 1] = "127.0.0.1"
    args[args.index("-p") + 1] = str(port)
    env = {**web_database, **{k: v for k, v in deployed_env.items()
                              if k not in {"DATABASE_URL", "REDIS_URL"}}}
    log = tmp_path / "daphne.log"
    proc = subprocess.Popen([sys.executable, "-m", "daphne", *args], cwd=ROOT, env=env,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_port(port, proc, timeout=60, what="daphne", log=log)
        # An attacker at 203.0.113.7 makes up a new address for every guess.
        guesses = [Browser(port, "203.0.113.7", forwarded=f"10.9.{n}.{n}").sign_in("wrong")
                   for n in range(5)]
        right = Browser(port, "203.0.113.7", forwarded="10.9.99.99").sign_in("pw-vera-1234")
        # The victim's own address, written by the attacker, locks nobody out but the
        # attacker.
        for _ in range(5):
            Browser(port, "203.0.113.8", forwarded="198.51.100.20").sign_in("wrong")
        victim = Browser(port, "198.51.100.20").sign_in("pw-vera-1234")
    finally:
        proc.terminate()
        proc.wait(timeout=20)

    assert guesses == [200] * 5
    assert right == 429, log.read_text(errors="replace")[-3000:]
    assert victim == 302
