"""``manage.py simulate``: every shared conformance scenario passes; output and errors."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

pytestmark = pytest.mark.django_db

# The shared folder sits beside the checkout (found from a worktree nested deeper too).
SCENARIOS = next(
    (folder / "shared" / "conformance" / "scenarios" for folder in Path(__file__).resolve().parents
     if (folder / "shared" / "conformance" / "scenarios").is_dir()),
    Path(__file__).resolve().parents[2].parent / "shared" / "conformance" / "scenarios",
)
SCENARIO_FILES = sorted(SCENARIOS.glob("*.yaml"))

VALID = """\
name: tiny
clusterQueues:
- name: cq
  cohort: null
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: "2"}
flavors: [{name: default}]
localQueues: [{namespace: ns, name: lq, clusterQueue: cq}]
admitted:
- name: old
  namespace: ns
  queue: lq
  podSets: [{name: main, count: 1, requests: {cpu: "1"}}]
  admission: {clusterQueue: cq, podSets: [{name: main, flavors: {cpu: default}, count: 1}]}
pending:
- {name: b, namespace: ns, queue: lq, created: 2, podSets: [{name: main, count: 1, requests: {cpu: "1"}}]}
- {name: a, namespace: ns, queue: lq, created: 1, podSets: [{name: main, count: 2, requests: {cpu: "1"}}]}
expect:
  admitted:
    ns/b: {clusterQueue: cq, podSets: [{name: main, flavors: {cpu: default}, count: 1}]}
  preempted: []
  pending: [ns/a]
cycles: until-stable
"""


def _run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("simulate", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_every_shared_scenario_passes() -> None:
    out, err = _run(str(SCENARIOS), "--check")
    assert err == ""
    assert out.strip().splitlines()[-1] == f"{len(SCENARIO_FILES)} passed, 0 failed"


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: p.stem)
def test_scenario(path: Path) -> None:
    out, _ = _run(str(path), "--check")
    assert out.strip() == "1 passed, 0 failed"


def test_json_prints_one_sorted_object_per_scenario(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(VALID.replace("name: tiny", "name: second"))
    (tmp_path / "a.yaml").write_text(VALID)
    out, _ = _run(str(tmp_path), "--json")
    lines = [json.loads(line) for line in out.strip().splitlines()]
    # files run in name order
    assert [line["name"] for line in lines] == ["tiny", "second"]
    assert lines[0] == {
        "name": "tiny",
        "admitted": {
            "ns/b": {
                "clusterQueue": "cq",
                "podSets": [{"name": "main", "flavors": {"cpu": "default"}, "count": 1}],
            }
        },
        "preempted": [],
        "pending": ["ns/a"],
    }


def test_check_reports_a_readable_diff_and_fails(tmp_path: Path) -> None:
    wrong = VALID.replace("pending: [ns/a]", "pending: [ns/a, ns/ghost]")
    (tmp_path / "wrong.yaml").write_text(wrong)
    out = StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command(
            "simulate", str(tmp_path / "wrong.yaml"), "--check", stdout=out, stderr=StringIO()
        )
    assert excinfo.value.returncode == 1
    text = out.getvalue()
    assert "FAIL tiny" in text
    assert "pending: expected but missing ['ns/ghost']" in text
    assert text.strip().splitlines()[-1] == "0 passed, 1 failed"


@pytest.mark.parametrize(
    ("content", "want"),
    [
        pytest.param(
            VALID.replace('nominalQuota: "2"', "nominalQuota: lots"),
            "clusterQueues[0].resourceGroups[0].flavors[0].resources[0].nominalQuota: 'lots' is not a valid quantity",
            id="bad-quantity",
        ),
        pytest.param(
            VALID.replace("- name: old\n  namespace: ns", "- namespace: ns"),
            "admitted[0].name: is required",
            id="missing-name",
        ),
        pytest.param(
            VALID.replace("count: 2,", "count: many,"),
            "pending[1].podSets[0].count: expected an integer, got str",
            id="wrong-type",
        ),
        pytest.param(
            VALID.replace("cycles: until-stable", "cycles: forever"),
            "cycles: 'forever' is not supported",
            id="unknown-cycles",
        ),
        pytest.param("name: [unclosed\n", "invalid YAML", id="invalid-yaml"),
    ],
)
def test_malformed_scenario_is_an_error_naming_file_and_field(
    tmp_path: Path, content: str, want: str
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(content)
    err = StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("simulate", str(path), "--check", stdout=StringIO(), stderr=err)
    assert excinfo.value.returncode == 1
    assert f"error: {path}:" in err.getvalue()
    assert want in err.getvalue()


def test_a_broken_file_does_not_stop_the_others(tmp_path: Path) -> None:
    (tmp_path / "a-broken.yaml").write_text("pending: 3\nname: x\n")
    (tmp_path / "b-good.yaml").write_text(VALID)
    out, err = StringIO(), StringIO()
    with pytest.raises(CommandError):
        call_command("simulate", str(tmp_path), "--check", stdout=out, stderr=err)
    assert "a-broken.yaml: pending: expected a list, got int" in err.getvalue()
    assert out.getvalue().strip().splitlines()[-1] == "1 passed, 0 failed, 1 could not be loaded"


def test_a_scenario_leaves_no_row_and_no_work_after_commit(
    django_capture_on_commit_callbacks, tmp_path: Path
) -> None:
    from multicluster.models import Cluster
    from scheduling.models import ClusterQueue, Event, Workload
    from scheduling.simulation import load_scenario_file, run_scenario

    path = tmp_path / "tiny.yaml"
    path.write_text(VALID)
    clusters = Cluster.objects.count()
    with django_capture_on_commit_callbacks() as callbacks:
        outcome = run_scenario(load_scenario_file(path))
    # The cycle ran (it admitted a workload and asked for follow-up work after commit) ...
    assert list(outcome["admitted"]) == ["ns/b"]
    # ... and the rollback took its rows and that work with it.
    assert callbacks == []
    assert Cluster.objects.count() == clusters
    assert not Workload.objects.exists()
    assert not ClusterQueue.objects.exists()
    assert not Event.objects.exists()
