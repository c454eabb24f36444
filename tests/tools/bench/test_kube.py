"""``bench kube``: admitted jobs created and unsuspended on the Kubernetes API test server,
and the API calls that took."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.bench.kube import classify
from tools.bench.kube_api import Recorded

ROOT = Path(__file__).resolve().parents[3]


def _request(method: str, path: str, **query: str) -> Recorded:
    return Recorded(method=method, path=path, query=query, content_type="", body=None)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (_request("POST", "/apis/batch/v1/namespaces/ns/jobs"), ("create", "jobs")),
        (_request("GET", "/apis/batch/v1/namespaces/ns/jobs"), ("list", "jobs")),
        (_request("GET", "/apis/batch/v1/jobs", watch="true"), ("watch", "jobs")),
        (_request("GET", "/apis/batch/v1/namespaces/ns/jobs/a"), ("get", "jobs")),
        (_request("PATCH", "/apis/batch/v1/namespaces/ns/jobs/a"), ("patch", "jobs")),
        (_request("PATCH", "/apis/batch/v1/namespaces/ns/jobs/a/status"), ("patch", "jobs/status")),
        (_request("DELETE", "/api/v1/namespaces/ns/pods/p"), ("delete", "pods")),
        (_request("GET", "/api/v1/namespaces/ns"), ("get", "namespaces")),
        (_request("GET", "/api/v1/namespaces"), ("list", "namespaces")),
        (_request("GET", "/api/v1/nodes"), ("list", "nodes")),
        (_request("GET", "/apis/batch/v1"), ("get", "/apis/batch/v1")),
        (_request("GET", "/version"), ("get", "/version")),
    ],
)
def test_requests_are_counted_by_verb_and_resource(
    request_: Recorded, expected: tuple[str, str]
) -> None:
    assert classify(request_) == expected


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_bench_kube_starts_every_job_without_a_list_per_job() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE")
    }
    env["KUEUEWEB_KUBE_WATCH_QUIET_SECONDS"] = "0.25"
    done = subprocess.run(
        [sys.executable, "manage.py", "bench", "kube", "--jobs", "10", "20"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "10 admitted jobs created and unsuspended" in out
    assert "20 admitted jobs created and unsuspended" in out
    # Each job is created once, already unsuspended, and no job is read back by a list.
    assert re.search(r"create jobs\s+20\s+1\.000/job", out)
    # The namespace is made sure of once per pass, not once per job.
    assert re.search(r"get namespaces\s+1\s", out)
    assert not re.search(r"get namespaces\s+(?:[2-9]|\d\d+)\s", out)
    per_job = re.search(r"20 admitted jobs .*?: (\d+) jobs/s\n  API calls: (\d+) in all", out)
    assert per_job is not None
    assert int(per_job.group(1)) > 0
    lists = re.search(r"lists and watches by number of jobs: 10: (\d+), 20: (\d+) \(the same", out)
    assert lists is not None, out
    assert lists.group(1) == lists.group(2)
