"""The setup commands `make run` calls: ensure_admin, demo and local_secrets."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet, InvalidToken
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from kueueweb.env import check_fernet_key, check_secret_key, derived_fernet_key
from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig, Node
from scheduling.models import (
    ClusterQueue,
    Cohort,
    FlavorQuota,
    Job,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)
from tests.fixtures.processes import ROOT, free_port, wait_port


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=out)
    return out.getvalue()


# --- ensure_admin ------------------------------------------------------------------------


@pytest.mark.django_db
def test_ensure_admin_creates_the_superuser_with_the_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given
    monkeypatch.setenv("KUEUEWEB_ADMIN_PASSWORD", "correct-horse-battery")
    # when
    output = run("ensure_admin")
    # then
    admin = User.objects.get()
    assert (admin.username, admin.is_superuser, admin.is_staff) == ("admin", True, True)
    assert admin.check_password("correct-horse-battery")
    assert list(admin.groups.values_list("name", flat=True)) == ["admin"]
    assert "correct-horse-battery" not in output
    assert "KUEUEWEB_ADMIN_PASSWORD" in output


@pytest.mark.django_db
def test_ensure_admin_is_idempotent_and_prints_nothing_secret_the_second_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUEUEWEB_ADMIN_PASSWORD", "correct-horse-battery")
    run("ensure_admin")
    monkeypatch.setenv("KUEUEWEB_ADMIN_PASSWORD", "another-password-now")
    output = run("ensure_admin")
    assert User.objects.count() == 1
    assert User.objects.get().check_password("correct-horse-battery")
    assert output == "A superuser exists already: nothing to do.\n"


@pytest.mark.django_db
def test_ensure_admin_generates_a_password_and_prints_it_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUEUEWEB_ADMIN_PASSWORD", raising=False)
    output = run("ensure_admin")
    match = re.search(r"username: (\S+)\n\s+password: (\S+)\n", output)
    assert match is not None, output
    username, password = match.groups()
    assert username == "admin"
    assert len(password) >= 20
    assert User.objects.get(username="admin").check_password(password)
    assert password not in run("ensure_admin")


@pytest.mark.django_db
def test_ensure_admin_does_nothing_when_any_superuser_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    User.objects.create_superuser("root", "", "root-password")
    monkeypatch.setenv("KUEUEWEB_ADMIN_PASSWORD", "correct-horse-battery")
    run("ensure_admin")
    assert list(User.objects.values_list("username", flat=True)) == ["root"]


@pytest.mark.django_db
def test_ensure_admin_leaves_an_ordinary_user_named_admin_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    User.objects.create_user("admin", password="their-own-password")
    monkeypatch.setenv("KUEUEWEB_ADMIN_PASSWORD", "correct-horse-battery")
    output = run("ensure_admin")
    user = User.objects.get()
    assert (user.is_superuser, user.check_password("their-own-password")) == (False, True)
    assert "not changing it" in output


@pytest.mark.django_db
def test_ensure_admin_refuses_a_too_short_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUEUEWEB_ADMIN_PASSWORD", "short")
    with pytest.raises(CommandError, match="KUEUEWEB_ADMIN_PASSWORD: This password is too short"):
        run("ensure_admin")
    assert not User.objects.exists()


# --- demo --------------------------------------------------------------------------------


def _domain(cluster: Cluster) -> dict[str, object]:
    """Everything the demo puts in one cluster, by name."""
    return {
        "nodes": sorted(cluster.nodes.values_list("name", flat=True)),
        "flavors": sorted(ResourceFlavor.objects.filter(cluster=cluster)
                          .values_list("name", flat=True)),
        "cluster_queues": sorted(ClusterQueue.objects.filter(cluster=cluster)
                                 .values_list("name", flat=True)),
        "local_queues": sorted(LocalQueue.objects.filter(cluster=cluster)
                               .values_list("namespace", "name", "cluster_queue__name")),
    }


def _counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in (
        Cluster, Node, ResourceFlavor, Cohort, ClusterQueue, FlavorQuota, LocalQueue,
        WorkloadPriorityClass, AdmissionCheck, MultiKueueConfig, Job, Workload)}


@pytest.mark.django_db
def test_demo_creates_clusters_quotas_queues_and_jobs(manager: Cluster) -> None:
    # given a fresh database; when
    output = run("demo")
    # then the manager has Kueue's getting-started setup and the teams' queues
    assert "Demo ready" in output
    default_nodes = [f"node-{i}" for i in range(1, 5)]
    assert _domain(manager) == {
        "nodes": sorted([*default_nodes, "on-demand-1", "on-demand-2", "spot-1", "spot-2"]),
        "flavors": ["default-flavor", "on-demand", "spot"],
        "cluster_queues": ["cluster-queue", "multikueue-cq", "research-cq", "team-a-cq",
                           "team-b-cq"],
        "local_queues": [("default", "user-queue", "cluster-queue"),
                         ("research", "multikueue-queue", "multikueue-cq"),
                         ("research", "research-queue", "research-cq"),
                         ("team-a", "team-a-queue", "team-a-cq"),
                         ("team-b", "team-b-queue", "team-b-cq")],
    }
    assert ResourceFlavor.objects.get(cluster=manager, name="spot").node_labels == {
        "instance-type": "spot"}
    # the cohort shares quota with borrowing and lending limits
    cohort = Cohort.objects.get(cluster=manager, name="all-teams")
    assert sorted(cohort.cluster_queues.values_list("name", flat=True)) == [
        "research-cq", "team-a-cq", "team-b-cq"]
    team_a_cpu = FlavorQuota.objects.get(cluster_queue__name="team-a-cq",
                                         flavor__name="on-demand", resource="cpu")
    assert (team_a_cpu.nominal_quota, team_a_cpu.borrowing_limit, team_a_cpu.lending_limit) == (
        "10", "6", "4")
    sample_cpu = FlavorQuota.objects.get(cluster_queue__cluster=manager,
                                         cluster_queue__name="cluster-queue", resource="cpu")
    assert (sample_cpu.flavor.name, sample_cpu.nominal_quota) == ("default-flavor", "9")
    assert sorted(WorkloadPriorityClass.objects.values_list("name", "value")) == [
        ("high-priority", 10000), ("low-priority", 100)]
    # MultiKueue: the check, its config over both workers, and queues in each worker
    check = AdmissionCheck.objects.get(cluster=manager, name="multikueue-demo")
    assert check.controller_name == "kueue.x-k8s.io/multikueue"
    assert MultiKueueConfig.objects.get(name="multikueue-demo").clusters == ["worker-1",
                                                                             "worker-2"]
    workers = {c.name: c for c in Cluster.objects.filter(role="worker")}
    assert sorted(workers) == ["worker-1", "worker-2"]
    for name, nodes in (("worker-1", 3), ("worker-2", 2)):
        domain = _domain(workers[name])
        assert len(domain["nodes"]) == nodes  # type: ignore[arg-type]
        assert domain["local_queues"] == [("research", "multikueue-queue", "cluster-queue")]
    # and jobs were submitted, each with its workload, Kueue's sample job and its elastic
    # sample-scalable-job among them
    jobs = sorted(Job.objects.values_list("namespace", "name"))
    assert len(jobs) == 9
    default = [name for ns, name in jobs if ns == "default"]
    assert default[0] == "sample-elastic-job"
    assert default[1].startswith("sample-job-")
    assert sorted(n for ns, n in jobs if ns != "default") == [
        "climate-simulation", "dispatched-analysis", "etl-nightly", "hyperparameter-sweep",
        "large-pretraining", "train-resnet", "weekly-report"]
    assert Workload.objects.count() == 9
    assert set(Workload.objects.values_list("namespace", flat=True)) == {
        "default", "team-a", "team-b", "research"}


@pytest.mark.django_db
def test_demo_if_empty_is_idempotent(manager: Cluster) -> None:
    run("demo", "--if-empty")
    after_first = _counts()
    output = run("demo", "--if-empty")
    assert _counts() == after_first
    assert output == "The manager has cluster queues already: no demo data added.\n"


@pytest.mark.django_db
def test_demo_if_empty_leaves_a_configured_manager_alone(manager: Cluster) -> None:
    ClusterQueue.objects.create(cluster=manager, name="mine")
    before = _counts()
    run("demo", "--if-empty")
    assert _counts() == before


@pytest.mark.django_db
def test_demo_run_again_adds_nothing(manager: Cluster) -> None:
    run("demo")
    after_first = _counts()
    run("demo")
    assert _counts() == after_first


# --- serve (embedded mode) ---------------------------------------------------------------

SERVE_SETUP = """
import django; django.setup()
from importlib import import_module
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from multicluster.models import Cluster
from scheduling.manifests.apply import apply_manifests
api = "kueue.x-k8s.io/v1beta2"
apply_manifests([
    {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": "default"}},
    {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": {
        "namespaceSelector": {}, "resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
            {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "4"}]}]}]}},
    {"apiVersion": api, "kind": "LocalQueue", "metadata": {"name": "lq", "namespace": "ns"},
     "spec": {"clusterQueue": "cq"}},
])
user = User.objects.create_superuser("admin", password="not-used-here-1")
store = import_module(settings.SESSION_ENGINE).SessionStore()
store[SESSION_KEY] = str(user.pk)
store[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
store[HASH_SESSION_KEY] = user.get_session_auth_hash()
store.create()
print(Cluster.objects.get(name="manager").pk, store.session_key)
"""

SERVE_SUBMIT = """
import django; django.setup()
from scheduling import services
from tests.fixtures.scheduling import job_manifest
services.submit_job(job_manifest("late", "lq", cpu="1"), namespace="ns")
"""


@pytest.mark.slow
def test_serve_in_embedded_mode_tells_a_socket_what_its_reconcilers_commit(
    tmp_path: Path,
) -> None:
    """``make run``'s server: SQLite, the in-memory channel layer, the reconcilers in a
    thread of the process. A job submitted by another process is admitted by that thread's
    periodic pass, and the browser's socket hears of it."""
    from websockets.sync.client import connect

    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
               DJANGO_SETTINGS_MODULE="kueueweb.settings", DEBUG="true",
               KUEUEWEB_RECONCILE_INTERVAL_SECONDS="0.5", PYTHONUNBUFFERED="1")

    def python(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    python("manage.py", "migrate", "--noinput", "-v", "0")
    cluster_id, session = python("-c", SERVE_SETUP).split()
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen([sys.executable, "manage.py", "serve", "--port", str(port)],
                                  cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    try:
        wait_port(port, server, timeout=30, what="serve", log=log)
        with connect(f"ws://127.0.0.1:{port}/ws/live/", open_timeout=10,
                     additional_headers={"Cookie": f"sessionid={session}",
                                         "Origin": f"http://127.0.0.1:{port}"}) as socket:
            socket.send(json.dumps({"subscribe": [int(cluster_id)]}))
            assert json.loads(socket.recv(timeout=10))["type"] == "subscribed"
            python("-c", SERVE_SUBMIT)
            assert json.loads(socket.recv(timeout=10)) == {"type": "changed",
                                                           "cluster": int(cluster_id)}
        admitted = python("-c", "import django; django.setup()\n"
                                "from scheduling.models import Workload\n"
                                "print(Workload.objects.get(name__startswith='job-late').phase)")
        assert admitted.strip() in ("QuotaReserved", "Admitted")
    finally:
        server.terminate()
        server.wait(timeout=10)


# --- local_secrets: the keys of a `make run` installation --------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.django_db
def test_local_secrets_generates_the_keys_once_readable_by_their_owner_only(
        tmp_path: Path, settings: Any) -> None:
    settings.VAR_DIR = tmp_path / "var"

    first = run("local_secrets")
    keys = {name: (settings.VAR_DIR / name).read_text() for name in
            ("secret_key", "encryption_key")}
    again = run("local_secrets")

    assert "Generated" in first
    assert "Generated" not in again
    assert {name: (settings.VAR_DIR / name).read_text() for name in keys} == keys
    assert {_mode(settings.VAR_DIR / name) for name in keys} == {0o600}
    check_secret_key("SECRET_KEY", keys["secret_key"].strip())
    check_fernet_key("KUEUEWEB_ENCRYPTION_KEY", keys["encryption_key"].strip())
    assert keys["secret_key"].strip() not in first + again  # never printed


@pytest.mark.django_db
def test_local_secrets_moves_kubeconfigs_off_the_development_key(
        tmp_path: Path, settings: Any) -> None:
    settings.VAR_DIR = tmp_path / "var"
    development = Fernet(derived_fernet_key(settings.SECRET_KEY).encode())
    old = Cluster.objects.create(name="far", kubeconfig_encrypted=development.encrypt(
        b"apiVersion: v1\nkind: Config\n").decode())
    foreign = Cluster.objects.create(name="elsewhere", kubeconfig_encrypted=Fernet(
        Fernet.generate_key()).encrypt(b"other").decode())

    out = run("local_secrets")
    installation = Fernet((settings.VAR_DIR / "encryption_key").read_text().strip().encode())
    old.refresh_from_db()
    foreign_token = Cluster.objects.get(pk=foreign.pk).kubeconfig_encrypted
    rerun = run("local_secrets")

    assert installation.decrypt(old.kubeconfig_encrypted.encode()) == \
        b"apiVersion: v1\nkind: Config\n"
    with pytest.raises(InvalidToken):
        development.decrypt(old.kubeconfig_encrypted.encode())
    assert "Re-encrypted 1 kubeconfig" in out
    assert foreign_token == foreign.kubeconfig_encrypted  # left as it was, and said so
    assert "1 stored kubeconfig(s) open with neither" in out
    assert "Re-encrypted" not in rerun


def test_make_run_serves_with_debug_off_on_the_installation_s_keys(tmp_path: Path) -> None:
    var = tmp_path / "var"
    plan = subprocess.run(["make", "-n", "-W", "pyproject.toml", "run",
                           f"KUEUEWEB_VAR_DIR={var}"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.replace("\\\n", " ")
    steps = [shlex.split(line) for line in plan.splitlines() if "manage.py" in line]
    names = [step[step.index("manage.py") + 1] for step in steps]
    assert names[0] == "local_secrets"
    assert names[-1] == "serve"

    def env_of(step: list[str]) -> dict[str, str]:
        assigned = dict(word.split("=", 1) for word in step[:step.index("manage.py") - 1])
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KUEUEWEB_", "DJANGO_"))
                and k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"}}
        return {**base, "DJANGO_SETTINGS_MODULE": "kueueweb.settings", **assigned}

    subprocess.run([sys.executable, "manage.py", "local_secrets"], cwd=ROOT,
                   env=env_of(steps[0]), check=True, capture_output=True)
    served = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import "
         "settings as s; print(s.DEBUG, s.SECRET_KEY, s.KUEUEWEB_ENCRYPTION_KEY)"],
        cwd=ROOT, env=env_of(steps[-1]), capture_output=True, text=True, check=True)

    debug, secret_key, encryption_key = served.stdout.split()
    assert debug == "False"
    assert secret_key == (var / "secret_key").read_text().strip()
    assert encryption_key == (var / "encryption_key").read_text().strip()


# --- serve over HTTPS ----------------------------------------------------------------------


@pytest.mark.slow
def test_serve_answers_over_https_with_the_certificate_it_is_given(tmp_path: Path) -> None:
    """KUEUEWEB_TLS_CERT_FILE and KUEUEWEB_TLS_KEY_FILE add daphne's ssl endpoint on
    ``--tls-port``, beside plain HTTP: a client trusting the CA gets its answer there."""
    import ssl
    import urllib.request

    from tests.fixtures.tls import make_serving_certificate

    certificate = make_serving_certificate(tmp_path / "tls")
    env = {key: value for key, value in os.environ.items()
           if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
               DJANGO_SETTINGS_MODULE="kueueweb.settings_testing",
               KUEUEWEB_TEST_RECONCILER_MODE="celery", PYTHONUNBUFFERED="1",
               KUEUEWEB_TLS_CERT_FILE=str(certificate.cert_file),
               KUEUEWEB_TLS_KEY_FILE=str(certificate.key_file))
    port, tls_port = free_port(), free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port), "--tls-port",
             str(tls_port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        wait_port(tls_port, server, timeout=30, what="serve (https)", log=log)
        context = ssl.create_default_context(cafile=str(certificate.ca_file))
        with urllib.request.urlopen(f"https://127.0.0.1:{tls_port}/healthz",
                                    context=context, timeout=10) as answer:
            assert json.loads(answer.read()) == {"status": "ok"}
        # A client that does not trust the CA is refused by its own TLS check.
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(f"https://127.0.0.1:{tls_port}/healthz", timeout=10,
                                   context=ssl.create_default_context())
        assert f"Serving on https://127.0.0.1:{tls_port}/" in log.read_text()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_serve_refuses_half_a_tls_configuration_or_an_unreadable_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUEUEWEB_TLS_CERT_FILE", str(tmp_path / "tls.crt"))
    monkeypatch.delenv("KUEUEWEB_TLS_KEY_FILE", raising=False)
    with pytest.raises(CommandError, match="^set both KUEUEWEB_TLS_CERT_FILE and "
                                           "KUEUEWEB_TLS_KEY_FILE to serve HTTPS$"):
        call_command("serve")
    monkeypatch.setenv("KUEUEWEB_TLS_KEY_FILE", str(tmp_path / "tls.key"))
    with pytest.raises(CommandError, match="^KUEUEWEB_TLS_CERT_FILE: cannot read "):
        call_command("serve")
    (tmp_path / "tls.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "tls.key").write_text("not pem")
    with pytest.raises(CommandError, match="^KUEUEWEB_TLS_KEY_FILE: .* is not a PEM file$"):
        call_command("serve")


def test_the_tls_endpoint_escapes_what_twisted_would_read_as_separators() -> None:
    from kueueweb.management.commands.serve import _escape

    assert _escape(r"C:\certs\a=b") == r"C\:\\certs\\a\=b"
