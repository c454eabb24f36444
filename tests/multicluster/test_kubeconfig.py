"""A kubeconfig's secrets never show: every kind of bad kubeconfig is refused at upload, by
the clusters API and the admin console alike, with the field named; one stored anyway makes
the cluster ``Active=False`` with the field named; and a distinctive token planted in each
appears in no log record, traceback, Event, condition, API response or admin page (DEBUG
on)."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from multicluster.kube.connection import probe_cluster
from multicluster.kube.sync import sync_kube_cluster
from multicluster.kubeconfig import KubeconfigInvalid, read_kubeconfig
from multicluster.models import Cluster
from scheduling.models import Event
from scheduling.workload import conditions as cond
from tests.fixtures.kube_api import kubeconfig_for

pytestmark = pytest.mark.django_db

SERVER = "https://worker.example:6443"


def _config(token: str | None = None, *, server: str = SERVER, user: dict[str, Any] | None = None,
            cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    config: dict[str, Any] = yaml.safe_load(kubeconfig_for(server, token or "t"))
    if token is None:
        del config["users"][0]["user"]["token"]
    config["users"][0]["user"].update(user or {})
    config["clusters"][0]["cluster"].update(cluster or {})
    return config


def _dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config)


def _block_scalar_token(planted: str, server: str) -> str:
    """``token: |`` with the token on the next line: YAML keeps the line break."""
    text = _dump(_config(None, server=server))
    # Not the last line: a pasted kubeconfig is stripped, and its last line break with it.
    return text.replace("  user: {}\n", f"  user:\n    token: |\n      {planted}\n") \
        + "preferences: {}\n"


def _deep(planted: str, server: str) -> str:
    return _dump(_config(planted, server=server)) + "preferences: " + "[" * 3000 + planted \
        + "]" * 3000 + "\n"


def _anchors(planted: str, server: str) -> str:
    laughs = "\n".join(f"  l{i}: &l{i} [*l{i - 1}, *l{i - 1}, *l{i - 1}]" for i in range(1, 10))
    return (_dump(_config(planted, server=server))
            + f"preferences:\n  l0: &l0 [{planted}]\n{laughs}\n")


# (id, kubeconfig made from (planted token, server), the field or problem the refusal names)
CASES: list[tuple[str, Callable[[str, str], str], str]] = [
    ("block-scalar-token", _block_scalar_token, "users[0].user.token"),
    ("token-with-a-space",
     lambda p, s: _dump(_config(f"{p} {p}", server=s)), "users[0].user.token"),
    ("token-with-a-control-character",
     lambda p, s: _dump(_config(f"{p}\x07", server=s)), "users[0].user.token"),
    ("token-not-a-string",
     lambda p, s: _dump(_config(None, server=s, user={"token": [p]})), "users[0].user.token"),
    ("password-with-a-line-break",
     lambda p, s: _dump(_config(None, server=s, user={"username": "admin", "password": f"{p}\n"})),
     "users[0].user.password"),
    ("exec",
     lambda p, s: _dump(_config(None, server=s, user={"exec": {
         "apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/echo",
         "args": [p], "env": [{"name": "TOKEN", "value": p}]}})),
     "users[0].user.exec"),
    ("auth-provider",
     lambda p, s: _dump(_config(None, server=s, user={"auth-provider": {
         "name": "oidc", "config": {"id-token": p, "refresh-token": p}}})),
     "users[0].user.auth-provider"),
    ("token-file",
     lambda p, s: _dump(_config(p, server=s, user={"tokenFile": f"/run/{p}"})),
     "users[0].user.tokenFile"),
    ("client-certificate-paths",
     lambda p, s: _dump(_config(p, server=s, user={"client-certificate": f"/etc/{p}.crt",
                                                   "client-key": f"/etc/{p}.key"})),
     "users[0].user.client-certificate"),
    ("certificate-authority-path",
     lambda p, s: _dump(_config(p, server=s, cluster={"certificate-authority": f"/etc/{p}.pem"})),
     "clusters[0].cluster.certificate-authority"),
    ("password-in-the-server-url",
     lambda p, s: _dump(_config(p, server=s.replace("://", f"://admin:{p}@"))),
     "clusters[0].cluster.server"),
    ("not-yaml",
     lambda p, s: _dump(_config(p, server=s)).replace(f"token: {p}", f"token: {p}: {p}"),
     "not valid YAML"),
    ("deep-nesting", _deep, "nesting deeper than"),
    ("billion-laughs", _anchors, "anchors and aliases are not accepted"),
]
IDS = [case[0] for case in CASES]


def planted_for(case_id: str) -> str:
    return f"PLANTED{case_id.replace('-', '')}q7Zx"


@pytest.fixture
def t0() -> datetime:
    return timezone.now().replace(microsecond=0)


@pytest.fixture
def debug_admin(settings: Any, admin_user: User) -> Client:
    """The admin console with DEBUG on, rendering an error page instead of raising."""
    settings.DEBUG = True
    client = Client(raise_request_exception=False)
    client.force_login(admin_user)
    return client


def _log_text(caplog: pytest.LogCaptureFixture) -> str:
    """Every captured record: message, arguments, traceback and stack."""
    parts = []
    for record in caplog.records:
        parts.append(record.getMessage())
        if record.exc_info:
            parts.append("".join(traceback.format_exception(*record.exc_info)))
        parts.extend(str(part) for part in (record.exc_text, record.stack_info) if part)
    return "\n".join(parts)


@pytest.mark.parametrize(("case_id", "make", "named"), CASES, ids=IDS)
def test_the_shared_check_refuses_it_naming_the_field_not_the_value(
    case_id: str, make: Callable[[str, str], str], named: str, settings: Any,
) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "KUBE_ALLOW_LOCAL_CREDENTIALS": False}
    planted = planted_for(case_id)

    with pytest.raises(KubeconfigInvalid) as refused:
        read_kubeconfig(make(planted, SERVER))

    assert named in str(refused.value)
    # Neither the message nor a chained exception (the parser's, quoting the source).
    assert planted not in "".join(traceback.format_exception(refused.value))


def test_inline_credentials_pass_the_check() -> None:
    config = _config("abc.def-123", user={"client-certificate-data": "Y2VydA==",
                                          "client-key-data": "a2V5"},
                     cluster={"certificate-authority-data": "Y2E="})

    assert read_kubeconfig(_dump(config)) == config


def test_local_credentials_pass_the_check_when_allowed(settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "KUBE_ALLOW_LOCAL_CREDENTIALS": True}
    config = _config(None, user={"tokenFile": "/run/token"},
                     cluster={"certificate-authority": "/etc/ca.pem"})

    assert read_kubeconfig(_dump(config)) == config
    with pytest.raises(KubeconfigInvalid, match=r"users\[0\]\.user\.token"):
        read_kubeconfig(_dump(_config("two words")))


@pytest.mark.parametrize(("case_id", "make", "named"), CASES, ids=IDS)
def test_the_api_refuses_it_at_upload_with_the_field_named(
    case_id: str, make: Callable[[str, str], str], named: str, manager: Cluster,
    admin_client_api: APIClient, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    planted = planted_for(case_id)
    body = {"metadata": {"name": "worker-1"},
            "spec": {"connection": {"type": "kubernetes", "kubeconfig": make(planted, SERVER)}}}

    created = admin_client_api.post("/api/v1/clusters/", body, format="json")
    Cluster.objects.create(name="worker-2", connection_type="kubernetes")
    patched = admin_client_api.patch("/api/v1/clusters/worker-2/", {"spec": body["spec"]},
                                      format="json")

    for response in (created, patched):
        assert response.status_code == 400, response.content
        [message] = response.json()["spec.connection.kubeconfig"]
        assert named in message
        assert planted not in response.content.decode()
    assert not Cluster.objects.filter(name="worker-1").exists()
    assert not Cluster.objects.get(name="worker-2").has_kubeconfig
    assert planted not in _log_text(caplog)


@pytest.mark.parametrize("as_file", [False, True], ids=["pasted", "uploaded"])
@pytest.mark.parametrize(("case_id", "make", "named"), CASES, ids=IDS)
def test_the_admin_refuses_it_with_the_field_named_and_never_shows_it(
    case_id: str, make: Callable[[str, str], str], named: str, as_file: bool,
    manager: Cluster, debug_admin: Client, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    planted = planted_for(case_id)
    text = make(planted, SERVER)
    data: dict[str, Any] = {
        "name": "worker-1", "role": "worker", "connection_type": "kubernetes",
        "simulation": "{}", "nodes-TOTAL_FORMS": 0, "nodes-INITIAL_FORMS": 0,
        "nodes-MIN_NUM_FORMS": 0, "nodes-MAX_NUM_FORMS": 1000,
    }
    if as_file:
        data["kubeconfig_file"] = SimpleUploadedFile("kubeconfig", text.encode())
    else:
        data["kubeconfig_text"] = text

    response = debug_admin.post(reverse("admin:multicluster_cluster_add"), data)

    page = response.content.decode()
    assert response.status_code == 200, page[:2000]
    assert named.replace("'", "&#x27;") in page
    assert planted not in page
    assert not Cluster.objects.filter(name="worker-1").exists()
    assert planted not in _log_text(caplog)


@pytest.mark.parametrize(("case_id", "make", "named"), CASES, ids=IDS)
def test_one_stored_anyway_is_bad_config_and_its_secret_shows_nowhere(
    case_id: str, make: Callable[[str, str], str], named: str, kube_api: Any, manager: Cluster,
    admin_client_api: APIClient, debug_admin: Client, caplog: pytest.LogCaptureFixture,
    t0: datetime,
) -> None:
    # A kubeconfig stored before these checks existed, pointing at a live API server.
    kube_api.require_fake()
    caplog.set_level(logging.DEBUG)
    planted = planted_for(case_id)
    cluster = Cluster(name="worker-1", role="worker", connection_type="kubernetes")
    cluster.set_kubeconfig(make(planted, kube_api.url.replace("http://", "https://")
                                if "cert" in case_id else kube_api.url))
    cluster.save()

    result = probe_cluster(cluster.pk, now=t0)
    for _ in range(2):
        sync_kube_cluster(cluster.pk, now=t0)

    assert result is not None
    assert (result.connected, result.reason) == (False, "BadConfig")
    cluster.refresh_from_db()
    active = cond.find(cluster.conditions, "Active")
    assert active is not None
    assert (active["status"], active["reason"]) == ("False", "BadConfig")
    assert active["message"].startswith("load client config failed: ")
    assert named in active["message"]
    seen = {
        "conditions": json.dumps(cluster.conditions),
        "events": json.dumps(list(Event.objects.values_list("reason", "message"))),
        "logs": _log_text(caplog),
        "api": admin_client_api.get(f"/api/v1/clusters/{cluster.name}/").content.decode()
        + admin_client_api.get("/api/v1/clusters/").content.decode(),
        "admin": debug_admin.get(reverse("admin:multicluster_cluster_change",
                                         args=[cluster.pk])).content.decode()
        + debug_admin.get(reverse("admin:multicluster_cluster_changelist")).content.decode(),
    }
    assert [where for where, text in seen.items() if planted in text] == []
    assert not [r for r in kube_api.requests if planted in r.authorization]


def test_an_error_page_while_storing_one_shows_none_of_it(
    settings: Any, manager: Cluster, admin_user: User, debug_admin: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A key that is no Fernet key fails the encryption: a 500 while the kubeconfig is in
    # the POST data and in the variables of the frames storing it.
    caplog.set_level(logging.DEBUG)
    settings.KUEUEWEB_ENCRYPTION_KEY = "not-a-fernet-key"
    planted = planted_for("error-page")
    text = _dump(_config(planted))
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(user=admin_user)

    pages = [
        debug_admin.post(reverse("admin:multicluster_cluster_add"), {
            "name": "worker-1", "role": "worker", "connection_type": "kubernetes",
            "simulation": "{}", "kubeconfig_text": text, "nodes-TOTAL_FORMS": 0,
            "nodes-INITIAL_FORMS": 0, "nodes-MIN_NUM_FORMS": 0, "nodes-MAX_NUM_FORMS": 1000}),
        api.post("/api/v1/clusters/", {"metadata": {"name": "worker-2"}, "spec": {
            "connection": {"type": "kubernetes", "kubeconfig": text}}}, format="json",
            HTTP_ACCEPT="text/html"),
    ]

    for page in pages:
        assert page.status_code == 500
        html = page.content.decode()
        assert "KUEUEWEB_ENCRYPTION_KEY" in html  # the debug page, with its traceback
        assert planted not in html
    assert planted not in _log_text(caplog)
