"""Hostile manifests: every one is refused quickly, with a 4xx (or a command error) that says
why, without much memory, and without writing anything.

They go where users send manifests: ``POST /api/v1/apply``, job submission
(``POST /api/v1/namespaces/{ns}/jobs``, JSON or YAML) and ``manage.py apply``. Oversized bodies
are also streamed to the WSGI and ASGI applications, to show that they are refused from their
declared length before being read.
"""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from multicluster.models import Cluster, Node
from scheduling.manifests import yamlio
from scheduling.models import (
    ClusterQueue,
    Cohort,
    Event,
    Job,
    LocalQueue,
    ResourceFlavor,
    Workload,
    WorkloadPriorityClass,
)

LIMIT = 1024 * 1024  # the default KUEUEWEB_MAX_MANIFEST_BYTES
TIME_BOUND_SECONDS = 2.0
# Peak memory the refusal may allocate (Python objects, tracemalloc): a few times the largest
# accepted body, far below what expanding the hostile inputs would take.
MEMORY_BOUND_BYTES = 48 * 1024 * 1024

APPLY = "/api/v1/apply"
JOBS = "/api/v1/namespaces/default/jobs"


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 10):
        previous = chr(ord("a") + level - 1)
        name = chr(ord("a") + level)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def deep_flow_yaml(depth: int = 10_000) -> str:
    return "[" * depth + "]" * depth + "\n"


def deep_flow_mapping_yaml(depth: int = 10_000) -> str:
    return "{a: " * depth + "1" + "}" * depth + "\n"


def deep_block_sequence_yaml(depth: int = 10_000) -> str:
    # Block style, compact: "- - - - x" is a list in a list in a list ...
    return "- " * depth + "x\n"


def deep_block_mapping_yaml(depth: int = 500) -> str:
    # Indented block mappings: 500 levels is already ~250 kB of indentation.
    return "".join("  " * level + "a:\n" for level in range(depth)) + "  " * depth + "b: 1\n"


def deep_json(depth: int = 10_000) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def deep_json_list(depth: int = 10_000) -> str:
    return "[" * depth + "]" * depth


def many_documents(count: int = 6000) -> str:
    return "".join(f"---\nkind: ResourceFlavor\napiVersion: kueue.x-k8s.io/v1beta1\n"
                   f"metadata: {{name: f{i}}}\n" for i in range(count))


def long_scalar() -> str:
    return ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: "
            + "a" * (LIMIT - 200) + "\n")


def long_key() -> str:
    return ("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata:\n  name: f\n"
            "spec:\n  nodeLabels:\n    ? " + "k" * (LIMIT - 200) + "\n    : v\n")


def long_job_name() -> str:
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job",
                       "metadata": {"name": "j" * (LIMIT - 500)},
                       "spec": {"template": {"spec": {"containers": [
                           {"name": "c", "image": "busybox"}], "restartPolicy": "Never"}}}})


@dataclass(frozen=True)
class Hostile:
    name: str
    body: Callable[[], str | bytes]
    content_type: str
    reason: str  # a part of the message that says why


HOSTILE = [
    Hostile("billion laughs", billion_laughs, "application/yaml", "anchors and aliases"),
    Hostile("10000-deep flow sequence", deep_flow_yaml, "application/yaml", "nesting deeper"),
    Hostile("10000-deep flow mapping", deep_flow_mapping_yaml, "application/yaml",
            "nesting deeper"),
    Hostile("10000-deep block sequence", deep_block_sequence_yaml, "application/yaml",
            "nesting deeper"),
    Hostile("500-deep block mapping", deep_block_mapping_yaml, "application/yaml",
            "nesting deeper"),
    Hostile("10000-deep JSON object", deep_json, "application/json", "nesting deeper"),
    Hostile("10000-deep JSON list", deep_json_list, "application/json", "nesting deeper"),
    Hostile("10000-deep JSON sent as YAML", deep_json, "application/yaml", "nesting deeper"),
    Hostile("invalid UTF-8", lambda: b"kind: ResourceFlavor\nmetadata: {name: \xff\xfe}\n",
            "application/yaml", "UTF-8"),
    Hostile("invalid UTF-8 JSON", lambda: b'{"kind": "\xc3\x28"}', "application/json", "UTF-8"),
    Hostile("tabs", lambda: "kind: ResourceFlavor\nmetadata:\n\tname: x\n", "application/yaml",
            "not valid YAML"),
    Hostile("control characters", lambda: "kind: Resource\x00Flavor\n", "application/yaml",
            "not valid YAML"),
    Hostile("garbage", lambda: bytes(range(256)) * 64, "application/yaml", "UTF-8"),
    Hostile("unclosed flow", lambda: "kind: [a, b\n", "application/yaml", "not valid YAML"),
    Hostile("python object tag", lambda: "!!python/object/apply:os.system ['true']\n",
            "application/yaml", "not valid YAML"),
    Hostile("one byte over the limit", lambda: "#" * (LIMIT + 1), "application/yaml",
            f"at most {LIMIT} bytes"),
    Hostile("a number of 5000 digits", lambda: "kind: ResourceFlavor\nx: " + "9" * 5000 + "\n",
            "application/yaml", "a number longer than"),
]
APPLY_ONLY = [
    Hostile("6000 tiny documents", many_documents, "application/yaml", "more than 5000"),
    Hostile("a scalar of almost 1 MB", long_scalar, "application/yaml", "metadata.name"),
    Hostile("a key of almost 1 MB", long_key, "application/yaml", "spec.nodeLabels"),
]
JOBS_ONLY = [
    Hostile("many documents", lambda: "---\n{}\n" * 3000, "application/yaml",
             "expected one object"),
    Hostile("a name of almost 1 MB", long_job_name, "application/json", "metadata.name"),
]


def counts() -> dict[str, int]:
    models = (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, WorkloadPriorityClass, Job,
              Workload, Event, Cluster, Node)
    return {model.__name__: model.objects.count() for model in models}


def measured(call: Callable[[], Any], *, timed_runs: int = 3) -> tuple[Any, float, int]:
    """(result, seconds, peak bytes allocated). The seconds are the best of ``timed_runs``
    runs: a refusal that does too much work is slow every time, while a stall of the machine
    (another process, a collection of the whole suite's garbage) is not in every run. One
    more run under tracemalloc (which slows Python down several times) gives the memory."""
    result: Any = None
    elapsed = float("inf")
    for _ in range(timed_runs):
        started = time.perf_counter()
        result = call()
        elapsed = min(elapsed, time.perf_counter() - started)
    tracemalloc.start()
    try:
        call()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, elapsed, peak


def message_of(response: Any) -> str:
    body = response.json()
    return json.dumps(body)


@pytest.fixture
def world(manager: Cluster) -> Cluster:
    yamlio_setup = (
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: default}\n"
        "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: cq}\n"
        "spec:\n  namespaceSelector: {}\n  resourceGroups:\n  - coveredResources: [cpu]\n"
        "    flavors:\n    - name: default\n      resources:\n      - {name: cpu, "
        "nominalQuota: 9}\n---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\n"
        "metadata: {namespace: default, name: user-queue}\nspec: {clusterQueue: cq}\n"
    )
    from scheduling.manifests.apply import apply_manifests

    apply_manifests(yamlio.load_yaml_documents(yamlio_setup), cluster=manager)
    return manager


def _warm_up(client: APIClient, url: str) -> None:
    """One small request first: imports and caches filled on first use are not the hostile
    input's cost."""
    client.generic("POST", url, b"kind: [", content_type="application/yaml")


def _post(client: APIClient, url: str, case: Hostile) -> Any:
    body = case.body()
    data = body if isinstance(body, bytes) else body.encode("utf-8", errors="surrogatepass")
    return client.generic("POST", url, data, content_type=case.content_type)


@pytest.mark.parametrize(
    ("url", "case"),
    [(APPLY, case) for case in HOSTILE + APPLY_ONLY] + [(JOBS, case) for case in HOSTILE + JOBS_ONLY],
    ids=lambda value: value.name if isinstance(value, Hostile) else value.strip("/").replace("/", "."),
)
def test_endpoint_refuses(url: str, case: Hostile, world: Cluster,
                          admin_client_api: APIClient) -> None:
    # The apply endpoint and job submission: refused quickly, the field named, nothing kept.
    _warm_up(admin_client_api, url)
    before = counts()

    response, elapsed, peak = measured(lambda: _post(admin_client_api, url, case))

    assert 400 <= response.status_code < 500, response.content[:300]
    assert case.reason in message_of(response)
    assert elapsed < TIME_BOUND_SECONDS
    assert peak < MEMORY_BOUND_BYTES
    assert counts() == before


@pytest.mark.parametrize("case", HOSTILE + APPLY_ONLY, ids=lambda c: c.name)
def test_apply_command_refuses(case: Hostile, world: Cluster, tmp_path: Path) -> None:
    body = case.body()
    path = tmp_path / ("manifest.json" if case.content_type == "application/json"
                       else "manifest.yaml")
    path.write_bytes(body if isinstance(body, bytes)
                     else body.encode("utf-8", errors="surrogatepass"))
    before = counts()

    def run() -> str:
        with pytest.raises(CommandError) as refused:
            call_command("apply", "-f", str(path))
        return str(refused.value)

    message, elapsed, peak = measured(run)

    assert case.reason in message
    assert elapsed < TIME_BOUND_SECONDS
    assert peak < MEMORY_BOUND_BYTES
    assert counts() == before


def test_the_refusals_say_why() -> None:
    """The messages themselves, read once as a user reads them."""
    cases = {
        billion_laughs(): "YAML anchors and aliases are not accepted (line 1, column 4): write "
                          "the value out in full",
        deep_flow_yaml(): "nesting deeper than 32 levels (line 1, column 33): no Kueue object "
                          "is that deep",
        deep_block_sequence_yaml(): "nesting deeper than 32 levels (line 1, column 65): no "
                                    "Kueue object is that deep",
    }
    for text, want in cases.items():
        with pytest.raises(yamlio.ManifestSyntaxError) as refused:
            yamlio.load_yaml_documents(text)
        assert str(refused.value) == want
    with pytest.raises(yamlio.ManifestSyntaxError) as refused:
        yamlio.load_json_documents(deep_json())
    assert str(refused.value).startswith("nesting deeper than 32 levels")


# --- oversized bodies, streamed --------------------------------------------------------------


class EndlessBody:
    """A request body of ``size`` bytes produced as it is read, counting what was read."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        remaining = self.size - self.read_bytes
        n = remaining if n is None or n < 0 else min(n, remaining)
        self.read_bytes += n
        return b"#" * n

    def readline(self, n: int = -1) -> bytes:
        return self.read(n)


def wsgi_post(app: WSGIHandler, path: str, body: EndlessBody, token: str,
              content_type: str, *, declared: int | None) -> tuple[int, bytes]:
    environ = {
        "REQUEST_METHOD": "POST", "PATH_INFO": path, "QUERY_STRING": "",
        "SERVER_NAME": "testserver", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
        "wsgi.input": body, "wsgi.errors": BytesIO(), "CONTENT_TYPE": content_type,
        "HTTP_AUTHORIZATION": f"Token {token}", "HTTP_HOST": "testserver",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    if declared is not None:
        environ["CONTENT_LENGTH"] = str(declared)
    status: list[str] = []
    chunks = app(environ, lambda s, headers, exc_info=None: status.append(s))
    content = b"".join(chunks)
    return int(status[0].split()[0]), content


HUGE = 50 * 1024 * 1024


@pytest.mark.parametrize("path", [APPLY, JOBS])
@pytest.mark.parametrize("content_type", ["application/yaml", "application/json"])
@pytest.mark.parametrize("size", [LIMIT + 1, HUGE])
def test_an_oversized_body_is_refused_from_its_declared_length_without_reading_it(
        world: Cluster, admin_user: Any, wsgi_app: WSGIHandler, path: str, content_type: str,
        size: int) -> None:
    token = Token.objects.create(user=admin_user).key
    body = EndlessBody(size)
    before = counts()

    (status, content), elapsed, peak = measured(
        lambda: wsgi_post(wsgi_app, path, body, token, content_type, declared=size))

    assert status == 413
    assert json.loads(content)["detail"] == (
        f"manifests are {size} bytes; at most {LIMIT} bytes are accepted "
        "(KUEUEWEB_MAX_MANIFEST_BYTES)")
    assert body.read_bytes == 0
    assert elapsed < TIME_BOUND_SECONDS
    assert peak < MEMORY_BOUND_BYTES
    assert counts() == before


@pytest.mark.parametrize("path", [APPLY, JOBS])
def test_a_body_longer_than_it_declared_is_read_only_up_to_the_limit(
        world: Cluster, admin_user: Any, wsgi_app: WSGIHandler, path: str) -> None:
    """A client that lies (declares the limit, sends 50 MB): the excess is never read."""
    token = Token.objects.create(user=admin_user).key
    bodies: list[EndlessBody] = []

    def post() -> tuple[int, bytes]:
        bodies.append(EndlessBody(HUGE))
        return wsgi_post(wsgi_app, path, bodies[-1], token, "application/yaml",
                         declared=LIMIT)

    (status, content), elapsed, peak = measured(post)

    assert 400 <= status < 500
    assert all(body.read_bytes <= LIMIT + 1 for body in bodies)
    assert elapsed < TIME_BOUND_SECONDS
    assert peak < MEMORY_BOUND_BYTES


def asgi_post(path: str, size: int, *, declared: bool) -> tuple[int, dict[str, Any], int]:
    """POST ``size`` bytes to the ASGI application in 64 kB chunks; (status, body, bytes the
    application took from the client)."""
    from kueueweb.asgi import application

    chunk = 64 * 1024
    taken = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal taken
        if taken >= size:
            await asyncio.sleep(3600)  # the client waits for the answer
        n = min(chunk, size - taken)
        taken += n
        return {"type": "http.request", "body": b"#" * n, "more_body": taken < size}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"host", b"testserver"), (b"content-type", b"application/yaml")]
    if declared:
        headers.append((b"content-length", str(size).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("testserver", 80)}

    async def scenario() -> None:
        await asyncio.wait_for(application(scope, receive, send), timeout=10)

    asyncio.run(scenario())
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), taken


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_the_asgi_application_refuses_a_huge_body_before_reading_it(declared: bool) -> None:
    (status, body, taken), elapsed, _ = measured(lambda: asgi_post(APPLY, HUGE,
                                                                   declared=declared))

    limit = LIMIT + 64 * 1024
    assert status == 413
    assert f"at most {limit} bytes are accepted" in body["detail"]
    if declared:
        assert taken == 0
    else:
        assert taken <= limit + 64 * 1024
    assert elapsed < TIME_BOUND_SECONDS


# --- the number of documents -----------------------------------------------------------------


def test_too_many_documents_are_refused_before_the_parser_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the parser ran")

    monkeypatch.setattr(yaml, "parse", parse)
    monkeypatch.setattr(yamlio, "_SafeLoader", parse)
    monkeypatch.setattr(yamlio, "_CSafeLoader", parse)
    with pytest.raises(yamlio.ManifestSyntaxError, match="more than 5000 documents"):
        yamlio.load_yaml_documents(many_documents(yamlio.MAX_DOCUMENTS + 1))


@pytest.mark.parametrize("text", [
    "---\n{}\n" * yamlio.MAX_DOCUMENTS,  # as many as accepted, each with its marker
    "--- {}\n" * yamlio.MAX_DOCUMENTS,
    # Not markers: "---" inside an indented block scalar, as a plain scalar, or as a key.
    "a: |\n" + "  ---\n" * 6000,
    "---x: 1\nb:\n" + "  - ---\n" * 6000,
])
def test_the_count_of_markers_refuses_nothing_the_parser_accepts(text: str) -> None:
    documents = yamlio.load_yaml_documents(text)
    assert 1 <= len(documents) <= yamlio.MAX_DOCUMENTS


def test_the_exact_count_still_comes_from_the_parser() -> None:
    # One implicit document before 5000 marked ones: 5001, refused by the parser's count.
    with pytest.raises(yamlio.ManifestSyntaxError, match="more than 5000 documents"):
        yamlio.load_yaml_documents("{}\n" + "---\n{}\n" * yamlio.MAX_DOCUMENTS)
