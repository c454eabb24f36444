"""The REST API fuzzed from its OpenAPI schema as the roles that may not do everything: an
operator granted one namespace, and a viewer, each with an API token, through the ASGI
application the servers run (``kueueweb.asgi:application``, with its body-size limit).

Every operation gets generated requests, valid (positive) and invalid (negative). Two in
three are aimed at the world: their ``{namespace}`` and ``{name}`` are replaced by the
granted namespace or another one, and by the name of an object that exists, so that reads
and writes meet real objects on both sides of the grant. After each request every row of
every model is compared with the row before it (``tests.fixtures.writes``):

- nothing answers 5xx (nor raises);
- the viewer writes no row at all;
- every row the operator creates, changes or deletes belongs to its namespace.

The requests go to the application in process, through schemathesis' ASGI client, on its
own event loop thread; the database is therefore committed to (a transactional test), as
it is for a server. The generation is derandomized and the number of examples small, so the
run is repeatable and bounded in time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
import yaml
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from rest_framework.authtoken.models import Token
from schemathesis import GenerationMode
from schemathesis.python import asgi

from tests.fixtures import writes
from tests.kueueweb.conftest import GRANTED, OTHER, Target

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(900)]

# Per operation, role and mode: about 400 requests per role, the run bounded by that count.
EXAMPLES_PER_OPERATION = 3

@pytest.fixture
def api_schema(grant_world: list[Target], application: Any, viewer: User) -> Any:
    """The schema as a client reads it, from /api/schema/ through the application."""
    token = Token.objects.create(user=viewer)
    with asgi.get_client(application) as client:
        response = client.get("http://testserver/api/schema/",
                              headers={"Accept": "application/vnd.oai.openapi",
                                       "Authorization": f"Token {token.key}"})
    assert response.status_code == 200, response.text[:500]
    token.delete()
    schema = schemathesis.openapi.from_dict(yaml.safe_load(response.content))
    schema.config.update(base_url="http://testserver")
    return schema


def _aimed(path: str, world: list[Target]) -> st.SearchStrategy[dict[str, str] | None]:
    """Path parameters naming real objects of the operation's kind, in the granted namespace
    or another, or None to leave the generated ones."""
    plural = re.search(r"/([a-z]+)/(?:\{name\}|$)", path)
    kind = plural.group(1) if plural else ""
    aims = [{"namespace": namespace, "name": name} if namespace else {"name": name}
            for plural_, namespace, name in world if plural_ == kind]
    if "{namespace}" in path:
        aims += [{"namespace": GRANTED}, {"namespace": OTHER}]
    return st.sampled_from([*aims, *aims, None]) if aims else st.none()


Check = Callable[[list[writes.Write], writes.Rows, writes.Rows], list[writes.Write]]


class Fuzzer:
    """Sends the generated cases of every operation as one user, and records what failed:
    a 5xx, an exception, or a row written that ``check`` returns."""

    def __init__(self, app: Any, token: str, world: list[Target], check: Check,
                 statements: writes.WriteStatements) -> None:
        self.app, self.token, self.world, self.check = app, token, world, check
        self.statements = statements
        self.failures: list[str] = []
        self.written: list[writes.Write] = []
        self.operations = 0
        statements.take()
        self.rows = writes.snapshot()

    def compare(self, label: str) -> None:
        """The rows written since the last comparison, if any statement could have."""
        if not self.statements.take():
            return
        before, self.rows = self.rows, writes.snapshot()
        found = writes.diff(before, self.rows)
        self.written += found
        for write in self.check(found, before, self.rows):
            self.failures.append(f"wrote outside the grant: {write}\n  by {label}")

    def send(self, case: Any) -> None:
        try:
            response = case.call(app=self.app, headers={"Authorization": f"Token {self.token}"})
        except Exception as exc:  # the application raised: a 500 in production
            label = f"{case.method} {case.formatted_path}: raised {exc!r}"
            self.failures.append(f"{label}\n  {case.as_curl_command()}")
            self.compare(label)
            return
        label = (f"{case.method} {case.formatted_path} -> {response.status_code}\n"
                 f"  {case.as_curl_command()}\n  {response.text[:300]}")
        if response.status_code >= 500:
            self.failures.append(label)
        self.compare(label)

    def operation(self, operation: Any, mode: GenerationMode) -> None:
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
                  database=None, suppress_health_check=list(HealthCheck), print_blob=False)
        @given(case=operation.as_strategy(generation_mode=mode), aim=_aimed(operation.path, self.world))
        def fuzz(case: Any, aim: dict[str, str] | None) -> None:
            if aim is not None:
                for key in case.path_parameters:
                    if key in aim:
                        case.path_parameters[key] = aim[key]
            self.send(case)

        try:
            fuzz()
        except Unsatisfiable:
            # No invalid input exists for this operation (nothing in it can be made invalid).
            assert mode is GenerationMode.NEGATIVE, operation.label


def _fuzz_as(user: User, api_schema: Any, app: Any, world: list[Target],
             check: Check) -> Fuzzer:
    token = Token.objects.create(user=user).key
    with writes.write_statements() as statements:
        fuzzer = Fuzzer(app, token, world, check, statements)
        first = fuzzer.rows
        for result in api_schema.get_all_operations():
            operation = result.ok()
            fuzzer.operations += 1
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                fuzzer.operation(operation, mode)
    # Whatever was written by a way the statements were not counted on is still found here.
    last = writes.snapshot()
    for write in check(writes.diff(first, last), first, last):
        fuzzer.failures.append(f"wrote outside the grant during the run: {write}")
    return fuzzer


def test_a_viewer_fuzzing_the_api_gets_no_5xx_and_writes_nothing(
        grant_world: list[Target], api_schema: Any, application: Any, viewer: User) -> None:
    def every_write(found: list[writes.Write], before: writes.Rows,
                    after: writes.Rows) -> list[writes.Write]:
        return found

    fuzzer = _fuzz_as(viewer, api_schema, application, grant_world, every_write)
    assert fuzzer.operations > 40
    failures = fuzzer.failures
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(dict.fromkeys(failures))


def test_an_operator_fuzzing_the_api_gets_no_5xx_and_writes_only_in_its_namespace(
        grant_world: list[Target], api_schema: Any, application: Any, operator: User) -> None:
    def outside_the_grant(found: list[writes.Write], before: writes.Rows,
                          after: writes.Rows) -> list[writes.Write]:
        return writes.outside(found, {GRANTED}, before, after)

    assert set(operator.namespace_grants.values_list("namespace", flat=True)) == {GRANTED}
    fuzzer = _fuzz_as(operator, api_schema, application, grant_world, outside_the_grant)
    assert fuzzer.operations > 40
    failures = fuzzer.failures
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(dict.fromkeys(failures))
    # The aimed requests reached the operator's own objects: it did write, in its namespace.
    assert {w.label for w in fuzzer.written} >= {"scheduling.Job", "scheduling.Workload"}, (
        [str(w) for w in fuzzer.written])
