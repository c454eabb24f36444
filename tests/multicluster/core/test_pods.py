"""Run times of simulated pods, from the job."""

from __future__ import annotations

from multicluster.core.pods import RUN_SECONDS_ANNOTATION, run_seconds, sleep_seconds


def test_sleep_in_shell_command() -> None:
    assert sleep_seconds([{"command": ["/bin/sh"], "args": ["-c", "sleep 60"]}]) == 60
    assert sleep_seconds([{"command": ["sleep", "2m"]}]) == 120
    assert sleep_seconds([{"args": ["echo hi; sleep 1.5s && true"]}]) == 1.5
    assert sleep_seconds([{"command": ["sleeper", "5"]}]) is None
    assert sleep_seconds([{"command": ["sleep", "5"]}, {"command": ["sleep", "9"]}]) == 9


def test_annotation_wins_over_sleep_and_template_over_job() -> None:
    template = {"metadata": {"annotations": {RUN_SECONDS_ANNOTATION: "7"}},
                "spec": {"containers": [{"command": ["sleep", "60"]}]}}
    assert run_seconds(template, {RUN_SECONDS_ANNOTATION: "9"}, default=1) == 7
    del template["metadata"]
    assert run_seconds(template, {RUN_SECONDS_ANNOTATION: "9"}, default=1) == 9
    assert run_seconds(template, None, default=1) == 60
    assert run_seconds({"spec": {"containers": [{"image": "x"}]}}, None, default=3) == 3
    assert run_seconds({}, {RUN_SECONDS_ANNOTATION: "bad"}, default=3) == 3
