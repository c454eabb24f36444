"""``bench engine --config``: the pure engine on a benchmark shape's backlog."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from tools.bench.engine import ADMITTED, run_shape_engine
from tools.bench.shape import read_shape

SHAPE = {
    "name": "small",
    "cohorts": [
        {
            "className": "cohort",
            "count": 2,
            "queuesSets": [
                {
                    "className": "cq",
                    "count": 3,
                    "nominalQuota": 4,
                    "borrowingLimit": 4,
                    "reclaimWithinCohort": "Any",
                    "withinClusterQueue": "LowerPriority",
                    "workloadsSets": [
                        {
                            "count": 10,
                            "creationIntervalMs": 50,
                            "workloads": [
                                {
                                    "className": "small",
                                    "runtimeMs": 100,
                                    "priority": 50,
                                    "request": 1,
                                }
                            ],
                        },
                        {
                            "count": 2,
                            "creationIntervalMs": 200,
                            "workloads": [
                                {
                                    "className": "large",
                                    "runtimeMs": 300,
                                    "priority": 200,
                                    "request": 4,
                                }
                            ],
                        },
                    ],
                }
            ],
        }
    ],
}
SHAPE_YAML = yaml.safe_dump(SHAPE)


def test_a_run_keeps_its_backlog_and_admits_within_quota() -> None:
    shape = read_shape(SHAPE)
    # 300 pending: more than the shape's 72 workloads, so the timeline is repeated.
    run = run_shape_engine(shape, pending=300, cycles=12, tick_seconds=0.05)

    assert run.cycles == 12
    assert len(run.cycle_cpu_seconds) == 12
    assert all(c > 0 for c in run.cycle_cpu_seconds)
    assert run.admissions > 0
    # Every admission was replaced by a new workload: the backlog stays as deep.
    assert run.pending_after == 300
    # 6 queues of 4 cpu: no cycle can admit more than the cohorts hold (8 one-cpu
    # workloads per queue with borrowing), and quota comes back only as workloads finish.
    assert run.admissions / run.cycles <= 6 * 8
    assert run.heads >= run.admissions
    assert run.admissions_per_second == pytest.approx(run.admissions / sum(run.cycle_cpu_seconds))
    assert run.cycle_ms(0.5) <= run.cycle_ms(0.99)
    # Every head has one outcome; a cost per head comes only from cycles of one outcome.
    assert sum(run.outcomes.values()) == run.heads
    assert run.outcomes[ADMITTED] == run.admissions
    for kind, cycles in run.single_outcome_cycles.items():
        assert sum(n for _, n in cycles) <= run.heads
        cost = run.per_head_us(kind)
        assert cost is not None
        assert cost == pytest.approx(sum(c for c, _ in cycles) * 1e6 / sum(n for _, n in cycles))
    assert run.per_head_us("no such outcome") is None


def test_the_same_seed_makes_the_same_decisions() -> None:
    shape = read_shape(SHAPE)
    first = run_shape_engine(shape, pending=100, cycles=8, seed=3)
    second = run_shape_engine(shape, pending=100, cycles=8, seed=3)
    assert (first.admissions, first.preemptions, first.heads) == (
        second.admissions,
        second.preemptions,
        second.heads,
    )


def test_command_prints_both_sizes_their_ratio_and_a_profile(tmp_path: Path) -> None:
    config = tmp_path / "small.yaml"
    config.write_text(SHAPE_YAML)
    out = StringIO()
    call_command(
        "bench",
        "engine",
        "--config",
        str(config),
        "--pending",
        "50",
        "200",
        "--cycles",
        "6",
        "--repeat",
        "2",
        "--profile",
        stdout=out,
    )
    text = out.getvalue()

    assert "engine: small, 6 cluster queues, 6 cycles per run" in text
    assert "pending=     50:" in text
    assert "pending=    200:" in text
    assert text.count("counting the collections after the cycles); cycle mean") == 2
    assert text.count("preempted; collecting after a cycle ") == 2
    assert "cycle cost at 200 pending / at 50:" in text
    assert text.count("µs per head;") == 2
    assert text.count("heads by outcome: admitted") == 2
    assert "(per head: " in text
    assert "profile of the cycles at pending=200:" in text
    assert "run_cycle" in text or "cycle.py" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pending", "0"], "--pending"),
        (["--cycles", "0"], "--cycles"),
        (["--tick-ms", "0"], "--tick-ms"),
    ],
)
def test_command_names_the_bad_option(tmp_path: Path, args: list[str], message: str) -> None:
    config = tmp_path / "small.yaml"
    config.write_text(SHAPE_YAML)
    with pytest.raises(CommandError, match=message):
        call_command("bench", "engine", "--config", str(config), *args, stdout=StringIO())


def test_command_names_a_bad_shape(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("name: bad\ncohorts: []\n")
    with pytest.raises(CommandError, match="cohorts"):
        call_command("bench", "engine", "--config", str(config), stdout=StringIO())


def test_profile_needs_a_shape() -> None:
    with pytest.raises(CommandError, match="--profile needs --config"):
        call_command("bench", "engine", "--profile", stdout=StringIO())
