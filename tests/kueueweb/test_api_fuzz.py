"""The REST API fuzzed from its own OpenAPI schema (schemathesis).

The schema is read from ``/api/schema/`` as a client reads it, then every operation gets
generated requests, valid (positive) and invalid (negative), sent as an admin with an API
token through the WSGI application. Whatever comes in, the API must:

- never answer 5xx (nor raise);
- answer a refused input (400/422) with a body that names the field at fault: field errors
  by path (``{"spec.parallelism": ["..."]}``), apply's errors by document, or, for a body
  that cannot be read at all, ``{"detail": ..., "body": [...]}``.

The number of examples per operation is small and the generation derandomized, so the test
is repeatable and bounded in time (about a minute on two cores, SQLite or PostgreSQL).
It found: a 500 for a kubeconfig holding control characters (the YAML reader refused them
outside the error handling), 500s for ``?cluster=`` holding a NUL character on PostgreSQL,
and bodies that could not be read refused without naming a field.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
import yaml
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode

from multicluster.models import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.django_db, pytest.mark.timeout(900)]

# Each of valid and invalid input: 16 requests per operation, about 1100 in all. The run is
# bounded by this count (and derandomized), not by time; the timeout only stops a run that
# hangs.
EXAMPLES_PER_OPERATION = 8

SETUP = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cluster-queue}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 9}
      - {name: memory, nominalQuota: 36Gi}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {namespace: default, name: user-queue}
spec: {clusterQueue: cluster-queue}
"""

JOB = {
    "apiVersion": "batch/v1", "kind": "Job",
    "metadata": {"name": "sample-job", "namespace": "default",
                 "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
    "spec": {"parallelism": 1, "completions": 1, "suspend": True, "template": {"spec": {
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "30"],
                        "resources": {"requests": {"cpu": "1", "memory": "200Mi"}}}]}}},
}


@pytest.fixture
def wsgi_app(api_schema: Any, wsgi_app: WSGIHandler) -> WSGIHandler:
    """The shared WSGI application, taken after the schema was read: the test client that
    reads it reconnects the connection-closing signals the application turns off."""
    return wsgi_app


@pytest.fixture
def fuzz_world(manager: Cluster, admin_user: Any) -> dict[str, Any]:
    """A small system so that reads and writes meet real objects, and the admin's token."""
    from scheduling.manifests import yamlio
    from scheduling.manifests.apply import apply_manifests
    from scheduling.services import submit_job

    apply_manifests(yamlio.load_yaml_documents(SETUP), cluster=manager)
    submit_job(JOB, namespace="default", cluster=manager, user=admin_user)
    token = Token.objects.create(user=admin_user)
    return {"token": token.key, "user": admin_user}


@pytest.fixture
def api_schema(fuzz_world: dict[str, Any]) -> Any:
    """The schema as a client reads it, from /api/schema/ (signed in: it is not public)."""
    client = Client()
    client.force_login(fuzz_world["user"])
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    assert response.status_code == 200
    schema = schemathesis.openapi.from_dict(yaml.safe_load(response.content))
    schema.config.update(base_url="http://testserver")
    return schema


def _names_a_field(body: Any) -> bool:
    """The error shapes of the API (``kueueweb.api``): every key a field path with messages,
    or apply's per-document errors, or ``detail`` plus ``body`` for an unreadable body."""
    if not isinstance(body, dict) or not body:
        return False
    documents = body.get("documents")
    # apply: {"detail": ..., "documents": [{"errors": {...}}]}; a "documents" key holding
    # messages is a field of that name (an unknown field sent in the body).
    if isinstance(documents, list) and not all(isinstance(d, str) for d in documents):
        return bool(documents) and all(
            isinstance(d, dict) and d.get("errors") and all(
                isinstance(k, str) and k and v for k, v in d["errors"].items())
            for d in documents)
    fields = {k: v for k, v in body.items() if k != "detail"}
    return bool(fields) and all(
        isinstance(k, str) and k and isinstance(v, list) and v
        and all(isinstance(m, str) and m for m in v)
        for k, v in fields.items())


def _run_operation(operation: Any, app: WSGIHandler, token: str, mode: GenerationMode,
                   failures: list[str]) -> None:
    strategy = operation.as_strategy(generation_mode=mode)

    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
              database=None, suppress_health_check=list(HealthCheck), print_blob=False)
    @given(case=strategy)
    def fuzz(case: Any) -> None:
        try:
            response = case.call(app=app, headers={"Authorization": f"Token {token}"})
        except Exception as exc:  # the application raised: a 500 in production
            failures.append(f"{case.method} {case.formatted_path}: raised {exc!r}\n"
                            f"  {case.as_curl_command()}")
            return
        label = (f"{case.method} {case.formatted_path} -> {response.status_code}\n"
                 f"  {case.as_curl_command()}\n  {response.text[:300]}")
        if response.status_code >= 500:
            failures.append(label)
        elif response.status_code in (400, 422):
            try:
                body = json.loads(response.content)
            except ValueError:
                body = None
            if not _names_a_field(body):
                failures.append("no field named: " + label)

    try:
        fuzz()
    except Unsatisfiable:
        # No invalid input exists for this operation (nothing in it can be made invalid).
        assert mode is GenerationMode.NEGATIVE, operation.label


def test_no_input_makes_the_api_fail_or_refuse_without_naming_the_field(
        fuzz_world: dict[str, Any], api_schema: Any, wsgi_app: WSGIHandler) -> None:
    failures: list[str] = []
    operations = 0
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            _run_operation(operation, wsgi_app, fuzz_world["token"], mode, failures)
    assert operations > 40
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(dict.fromkeys(failures))


def test_the_schema_generates_without_warnings(tmp_path: Any) -> None:
    call_command("spectacular", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
