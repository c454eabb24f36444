"""``manage.py simulate``: every shared conformance scenario passes; output and errors."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from tests.scheduling.core import test_kueue_cases as kueue_cases
from tools.conformance import check_outcome, load_scenario, load_scenario_file, run_scenario

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
        pytest.param(
            VALID.replace("admission: {clusterQueue: cq,", "admission: {clusterQueue: gone,"),
            "admitted[0].admission.clusterQueue: 'gone' is not in clusterQueues",
            id="unknown-cluster-queue",
        ),
        pytest.param(
            VALID.replace("localQueues: [{namespace: ns, name: lq, clusterQueue: cq}]",
                          "localQueues: [{namespace: ns, name: lq, clusterQueue: cq}, "
                          "{namespace: ns, name: lq, clusterQueue: cq}]"),
            "localQueues: 'ns/lq' is defined more than once",
            id="duplicate-local-queue",
        ),
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

    path = tmp_path / "tiny.yaml"
    path.write_text(VALID)
    clusters = Cluster.objects.count()
    with django_capture_on_commit_callbacks() as callbacks:
        outcome = run_scenario(load_scenario_file(path))
    # The cycle ran and wrote (an admission, its events) ...
    assert list(outcome["admitted"]) == ["ns/b"]
    # ... and the rollback took its rows and its after-commit work (the metrics, the
    # requests for the next cycle and the dispatch) with it.
    assert callbacks == []
    assert Cluster.objects.count() == clusters
    assert not Workload.objects.exists()
    assert not ClusterQueue.objects.exists()
    assert not Event.objects.exists()


def test_a_namespace_matching_the_selector_by_its_labels_is_admitted(tmp_path: Path) -> None:
    selected = VALID.replace("- name: cq\n  cohort: null\n", (
        "- name: cq\n  cohort: null\n  namespaceSelector:\n"
        "    matchExpressions: [{key: dep, operator: In, values: [eng]}]\n"))
    matching = selected + "namespaces: [{name: ns, labels: {dep: eng}}]\n"
    other = selected + "namespaces: [{name: ns, labels: {dep: sales}}]\n"
    (tmp_path / "a.yaml").write_text(matching.replace("name: tiny", "name: matching"))
    (tmp_path / "b.yaml").write_text(other.replace("name: tiny", "name: other"))
    out, _ = _run(str(tmp_path), "--json")
    matched, mismatched = (json.loads(line) for line in out.strip().splitlines())
    assert list(matched["admitted"]) == ["ns/b"]
    assert mismatched["admitted"] == {}
    assert mismatched["pending"] == ["ns/a", "ns/b"]


def test_a_local_queue_of_a_missing_cluster_queue_leaves_its_workloads_pending(
    tmp_path: Path,
) -> None:
    path = tmp_path / "orphan.yaml"
    path.write_text(VALID.replace("{namespace: ns, name: lq, clusterQueue: cq}",
                                  "{namespace: ns, name: lq, clusterQueue: gone}"))
    out, _ = _run(str(path), "--json")
    outcome = json.loads(out)
    assert outcome["admitted"] == {}
    assert outcome["pending"] == ["ns/a", "ns/b"]


def test_a_cluster_queue_naming_a_missing_flavor_is_inactive(tmp_path: Path) -> None:
    path = tmp_path / "missing-flavor.yaml"
    path.write_text(VALID.replace("flavors: [{name: default}]", "flavors: [{name: other}]"))
    out, _ = _run(str(path), "--json")
    outcome = json.loads(out)
    assert outcome["admitted"] == {}
    assert outcome["pending"] == ["ns/a", "ns/b"]


@pytest.mark.parametrize(
    ("doc", "want"),
    [pytest.param(d, w, id=name) for name, d, w in kueue_cases.CASES + kueue_cases.MULTI_CYCLE],
)
def test_kueue_case_through_the_admission_path(doc: dict[str, Any], want: dict[str, Any]) -> None:
    """The cases the engine's own tests take from Kueue's, on the production path too."""
    scenario = load_scenario(doc, source="kueue-case")
    assert check_outcome(run_scenario(scenario), want) == []
