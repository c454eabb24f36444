"""Security properties of the whole site: every URL refuses anonymous requests, rate limits
on the API, sign-in and tokens, and kubeconfigs that never leave the server."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import get_resolver, resolve
from django.urls.exceptions import Resolver404
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from kueueweb.throttling import rate_limit_cache
from multicluster.models import Cluster
from scheduling.models import Event

# --- every URL refuses anonymous requests ------------------------------------------------------

# URLs anyone may open, each with the reason.
OPEN = {
    "/login/": "the sign-in page",
    "/healthz": 'the liveness probe: answers {"status": "ok"} and nothing else',
    "/admin/login/": "the admin console's sign-in page",
    "/favicon.ico": "a redirect to the site's icon, a public static file",
}
# URL prefixes served without a session or token, and why.
OPEN_PREFIXES = {
    "/webhooks/": "Kueue's admission webhooks, called by a cluster's API server without "
                  "credentials as Kueue's are (TLS authenticates the server): they answer "
                  "AdmissionReviews only and write nothing",
}
# Answers that are neither data nor an error of the server, for anonymous requests to URLs
# that only act (no page to show).
ANONYMOUS_ELSEWHERE = {
    # Logging out (a POST) needs no session: it shows nothing and sends to the sign-in page.
    ("/logout/", "POST"): 302,
    ("/admin/logout/", "POST"): 200,
}
LOGIN_PAGES = ("/login/", "/admin/login/")
SAMPLES = ("1", "x", "manager", "default", "auth", "scheduling", "multicluster", "kueueweb",
           "authtoken")


def _walk() -> tuple[list[str], list[str]]:
    """One concrete path per URL pattern (admin and API included, through every include),
    with sample values for its arguments that resolve to that very pattern's view; and the
    patterns no sample reaches."""
    paths: set[str] = set()
    unreached: list[str] = []
    resolvers: list[tuple[str, Any]] = [("", get_resolver())]
    while resolvers:
        prefix, resolver = resolvers.pop()
        # Namespaced includes (the admin's) are not in their parent's reverse map.
        resolvers.extend((prefix + sub_prefix, sub) for sub_prefix, sub
                         in resolver.namespace_dict.values())
        for view, possibilities in resolver.reverse_dict.lists():
            if not callable(view):
                continue  # the same patterns again, by name
            _reach(prefix, view, possibilities, paths, unreached)
    return sorted(paths), unreached


def _reach(prefix: str, view: Any, possibilities: list[Any], paths: set[str],
           unreached: list[str]) -> None:
    for bits, regex, *_ in possibilities:
        for template, params in bits:
            for values in itertools.product(SAMPLES, repeat=len(params)):
                path = "/" + prefix + template % dict(zip(params, values, strict=True))
                try:
                    if resolve(path).func is view:
                        paths.add(path)
                        break
                except Resolver404:
                    continue
            else:
                unreached.append(prefix + regex)


def _concrete_paths() -> list[str]:
    return _walk()[0]


def test_the_walk_covers_every_pattern() -> None:
    paths, unreached = _walk()
    assert not unreached
    assert len(paths) > 100
    assert any(p.startswith("/admin/") for p in paths)
    assert any(p.startswith("/api/v1/") for p in paths)
    assert {"/metrics", "/api/schema/", "/api/schema/ui/"} <= set(paths)


def _refused(path: str, method: str, response: Any, client: Client, hops: int = 3) -> bool:
    if response.status_code in (401, 403):
        return True
    if response.status_code in (301, 302, 308):
        location = response["Location"].removeprefix("http://testserver")
        if location.startswith(LOGIN_PAGES):
            return True
        # A redirect elsewhere on the site (as /admin/logout/ to /admin/) must end at a
        # refusal too.
        return hops > 0 and location.startswith("/") and _refused(
            location, "GET", client.get(location), client, hops - 1)
    return ANONYMOUS_ELSEWHERE.get((path, method)) == response.status_code


@pytest.mark.django_db
def test_every_url_refuses_an_anonymous_request(manager: Cluster) -> None:
    client = Client()
    failures = []
    for path in _concrete_paths():
        if path in OPEN or path.startswith(tuple(OPEN_PREFIXES)):
            continue
        methods = ["GET"]
        if path.startswith("/api/") or path == "/metrics":
            methods.append("POST")
        for method in methods:
            response = client.generic(method, path, b"{}", content_type="application/json")
            if response.status_code == 405 and method == "GET":
                # A URL that only acts (POST): it must refuse the anonymous POST.
                method = "POST"
                response = client.post(path, {})
            if not _refused(path, method, response, client):
                failures.append(f"{method} {path}: {response.status_code}")
    assert not failures


@pytest.mark.django_db
def test_the_open_urls_show_nothing_else(manager: Cluster) -> None:
    client = Client()
    assert client.get("/healthz").json() == {"status": "ok"}
    for page in LOGIN_PAGES:
        response = client.get(page)
        assert response.status_code == 200
        assert b'name="password"' in response.content


@pytest.mark.django_db
def test_metrics_take_a_token_as_prometheus_sends_it(viewer: User) -> None:
    token = Token.objects.create(user=viewer)
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Token {token.key}")
    assert response.status_code == 200
    assert Client().get("/metrics").status_code == 401


def run(coroutine: Any) -> Any:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.mark.django_db(transaction=True)
def test_every_websocket_route_refuses_an_anonymous_connection(manager: Cluster) -> None:
    from kueueweb.asgi import application
    from kueueweb.routing import websocket_urlpatterns

    async def connect(path: str) -> tuple[bool, Any]:
        comm = WebsocketCommunicator(application, path,
                                     headers=[(b"origin", b"http://testserver"),
                                              (b"host", b"testserver")])
        connected, code = await comm.connect()
        await comm.disconnect()
        return connected, code

    routes = [str(p.pattern) for p in websocket_urlpatterns]
    assert routes
    for route in routes:
        path = "/" + re.sub(r"<[^>]+>", "1", route).lstrip("^").rstrip("$")
        assert run(connect(path)) == (False, 4401), path


# --- rate limits ---------------------------------------------------------------------------


@pytest.fixture
def fresh_limits() -> Iterator[None]:
    rate_limit_cache().clear()
    yield
    rate_limit_cache().clear()


def _rates(user: str, anon: str = "off") -> dict[str, Any]:
    from django.conf import settings

    return {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"user": user, "anon": anon}}


@pytest.mark.django_db
def test_api_requests_over_the_user_rate_get_429_with_retry_after(
        fresh_limits: None, manager: Cluster, viewer: User, operator: User) -> None:
    token = Token.objects.create(user=viewer)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    with override_settings(REST_FRAMEWORK=_rates("3/minute")):
        answers = [client.get("/api/v1/clusters/").status_code for _ in range(4)]
        refused = client.get("/api/v1/resourceflavors/")
        # Per user: another user (here by session) has a rate of its own.
        other = Client()
        other.force_login(operator)
        other_status = other.get("/api/v1/clusters/").status_code
        # The same user by session counts against the same rate as by token.
        same = Client()
        same.force_login(viewer)
        same_status = same.get("/api/v1/clusters/").status_code

    assert answers == [200, 200, 200, 429]
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"].lower()
    assert other_status == 200
    assert same_status == 429


@pytest.mark.django_db
def test_anonymous_api_requests_never_get_data_whatever_the_rate(fresh_limits: None) -> None:
    """DRF checks permissions before throttles: an anonymous request is refused (401) before
    the anonymous rate counts it, and stays refused past that rate."""
    client = Client()
    with override_settings(REST_FRAMEWORK=_rates("off", anon="2/minute")):
        answers = {client.get("/api/v1/clusters/", REMOTE_ADDR="10.0.0.1").status_code
                   for _ in range(4)}
    assert answers <= {401, 429}


@pytest.mark.django_db
def test_failed_sign_ins_lock_the_username_out_even_with_the_right_password(
        fresh_limits: None, viewer: User, settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "LOGIN_FAILURE_LIMIT": 3,
                         "LOGIN_FAILURE_WINDOW_SECONDS": 600}
    client = Client()
    wrong = [client.post("/login/", {"username": "vera", "password": "nope"},
                         REMOTE_ADDR="10.0.0.1") for _ in range(3)]
    locked = client.post("/login/", {"username": "vera", "password": "pw-vera"},
                         REMOTE_ADDR="10.0.0.1")
    admin_locked = Client().post("/admin/login/", {"username": "VERA", "password": "pw-vera"},
                                 REMOTE_ADDR="10.0.0.1")
    from_elsewhere = Client().post("/login/", {"username": "vera", "password": "pw-vera"},
                                   REMOTE_ADDR="10.0.0.2")

    assert [r.status_code for r in wrong] == [200, 200, 200]
    assert b"didn't match" in wrong[0].content
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= 600
    assert b"Too many failed sign-ins" in locked.content
    assert "_auth_user_id" not in client.session
    assert admin_locked.status_code == 429
    assert 0 < int(admin_locked["Retry-After"]) <= 600
    assert b"Too many failed sign-ins" in admin_locked.content
    assert from_elsewhere.status_code == 302  # another address is not locked out


@pytest.mark.django_db
def test_the_sign_in_lock_ends_with_its_window(fresh_limits: None, viewer: User,
                                               settings: Any, monkeypatch: Any) -> None:
    import time as time_module

    settings.KUEUEWEB = {**settings.KUEUEWEB, "LOGIN_FAILURE_LIMIT": 2,
                         "LOGIN_FAILURE_WINDOW_SECONDS": 60}
    client = Client()
    for _ in range(2):
        client.post("/login/", {"username": "vera", "password": "nope"})
    assert client.post("/login/", {"username": "vera", "password": "pw-vera"}).status_code == 429

    # The window has passed (the cache entries expire with it).
    rate_limit_cache().clear()
    now = time_module.time()
    monkeypatch.setattr(time_module, "time", lambda: now + 61)
    assert client.post("/login/", {"username": "vera", "password": "pw-vera"}).status_code == 302


@pytest.mark.django_db
def test_unknown_api_tokens_lock_the_address_out(fresh_limits: None, viewer: User,
                                                 settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "TOKEN_FAILURE_LIMIT": 3,
                         "TOKEN_FAILURE_WINDOW_SECONDS": 600}
    good = Token.objects.create(user=viewer).key
    client = Client()
    guesses = [client.get("/api/v1/clusters/", HTTP_AUTHORIZATION=f"Token guess{i}",
                          REMOTE_ADDR="10.0.0.9").status_code for i in range(3)]
    locked = client.get("/api/v1/clusters/", HTTP_AUTHORIZATION=f"Token {good}",
                        REMOTE_ADDR="10.0.0.9")
    metrics = client.get("/metrics", HTTP_AUTHORIZATION=f"Token {good}", REMOTE_ADDR="10.0.0.9")
    elsewhere = client.get("/api/v1/clusters/", HTTP_AUTHORIZATION=f"Token {good}",
                           REMOTE_ADDR="10.0.0.8")

    assert guesses == [401, 401, 401]
    assert locked.status_code == 429
    assert 0 < int(locked["Retry-After"]) <= 600
    assert "unknown API token" in locked.json()["detail"]
    assert metrics.status_code == 429
    assert elsewhere.status_code == 200


# --- kubeconfigs never leave the server --------------------------------------------------------

SECRET_TOKEN = "kw-secret-token-7f3a9c"
SECRET_CERT = "a3d0c1f2e4b5LS0tLS1CRUdJTi"
KUBECONFIG = f"""\
apiVersion: v1
kind: Config
clusters:
- name: far
  cluster:
    server: https://far.example:6443
    certificate-authority-data: {SECRET_CERT}
users:
- name: kueue
  user:
    token: {SECRET_TOKEN}
contexts:
- name: far
  context: {{cluster: far, user: kueue}}
current-context: far
"""
SECRETS = (SECRET_TOKEN, SECRET_CERT)


def _leaks(text: str | bytes) -> list[str]:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return [secret for secret in SECRETS if secret in text]


@pytest.mark.django_db
def test_a_kubeconfig_is_written_but_never_read_back(
        manager: Cluster, admin_user: User, admin_client_api: APIClient,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    body = {"metadata": {"name": "far"},
            "spec": {"role": "worker", "connection": {"type": "kubernetes",
                                                      "kubeconfig": KUBECONFIG}}}
    seen: dict[str, bytes] = {}
    created = admin_client_api.post("/api/v1/clusters/", body, format="json")
    assert created.status_code == 201
    seen["create"] = created.content
    cluster = Cluster.objects.get(name="far")
    assert cluster.get_kubeconfig() == KUBECONFIG  # stored (encrypted)
    assert not _leaks(cluster.kubeconfig_encrypted)
    assert created.json()["spec"]["connection"]["hasKubeconfig"] is True

    seen["replace"] = admin_client_api.put("/api/v1/clusters/far/", body, format="json").content
    seen["patch"] = admin_client_api.patch(
        "/api/v1/clusters/far/", {"spec": {"connection": {"kubeconfig": KUBECONFIG}}},
        format="json").content
    # A MultiKueue setup that names the cluster.
    apply = ("apiVersion: kueue.x-k8s.io/v1beta2\nkind: MultiKueueConfig\n"
             "metadata: {name: mk}\nspec: {clusters: [far]}\n")
    seen["apply"] = admin_client_api.post("/api/v1/apply", apply,
                                          content_type="application/yaml").content
    for url in ("/api/v1/clusters/", "/api/v1/clusters/far/", "/api/v1/multikueueconfigs/",
                "/api/v1/multikueueconfigs/mk/", "/api/v1/export", "/api/v1/export?format=json",
                "/api/v1/export?cluster=far", "/api/schema/", "/api/schema/?format=json"):
        response = admin_client_api.get(url)
        assert response.status_code == 200, url
        seen[url] = response.content
    # A bad kubeconfig holding the secret is refused without echoing it.
    bad = admin_client_api.patch(
        "/api/v1/clusters/far/",
        {"spec": {"connection": {"kubeconfig": KUBECONFIG + "\n  : [\n"}}}, format="json")
    assert bad.status_code == 400
    seen["refused"] = bad.content

    ui = Client()
    ui.force_login(admin_user)
    admin_user.is_superuser = True
    admin_user.save()
    for url in ("/", "/clusters/", "/clusters/far/", "/clusters/partial/",
                "/clusters/partial/workers/", "/clusters/far/summary/",
                f"/admin/multicluster/cluster/{cluster.pk}/change/",
                "/admin/multicluster/cluster/", "/admin/multicluster/multikueueconfig/"):
        response = ui.get(url)
        assert response.status_code == 200, url
        seen[url] = response.content

    call_command("export")
    call_command("export", "--cluster", "far")
    seen["export command"] = capsys.readouterr().out.encode()
    seen["events"] = json.dumps([[e.reason, e.message] for e in Event.objects.all()]).encode()
    seen["logs"] = caplog.text.encode()

    leaks = {where: _leaks(content) for where, content in seen.items() if _leaks(content)}
    assert not leaks


@pytest.mark.django_db(transaction=True)
def test_live_messages_carry_no_kubeconfig(manager: Cluster, viewer: User) -> None:
    from kueueweb.consumers import LiveConsumer
    from multicluster.manifests import read_cluster, save_cluster

    async def scenario() -> list[str]:
        comm = WebsocketCommunicator(LiveConsumer.as_asgi(), "/ws/live/")
        comm.scope["user"] = viewer
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps({"subscribe": [manager.pk]}))
        texts = [await comm.receive_from()]

        def write() -> None:
            spec = read_cluster({"metadata": {"name": "far"}, "spec": {
                "role": "worker", "connection": {"type": "kubernetes",
                                                 "kubeconfig": KUBECONFIG}}}, instance=None)
            cluster = save_cluster(spec, None)
            from kueueweb.live import notify

            notify(cluster.pk)
            notify(manager.pk)

        from channels.db import database_sync_to_async

        await database_sync_to_async(write)()
        while not await comm.receive_nothing(timeout=1.0):
            texts.append(await comm.receive_from())
        await comm.disconnect()
        return texts

    texts = run(scenario())
    assert texts
    assert not [t for t in texts if _leaks(t)]
