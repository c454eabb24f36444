"""``manage.py simulate PATH [PATH ...] [--json] [--check]``: run admission scenarios.

The contract is ``shared/conformance/README.md``. Each scenario runs through the
production admission path in a domain of its own, inside a transaction that is rolled
back: nothing stays in the database. The work is done by ``tools.conformance``; this command only parses
arguments and prints.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tools.conformance import (
    ScenarioError,
    check_outcome,
    load_scenario_file,
    outcome_to_json,
    run_scenario,
    scenario_paths,
)


class Command(BaseCommand):
    help = "Run Kueue admission scenarios (files or folders of *.yaml) through the admission cycle."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="scenario file or folder")
        parser.add_argument(
            "--json", action="store_true", help="print one JSON object per scenario per line"
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="compare each outcome with the scenario's expect; exit 1 on any difference",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        as_json: bool = options["json"]
        check: bool = options["check"]
        files = scenario_paths(options["paths"])
        if not files:
            raise CommandError("no scenario files found in " + ", ".join(options["paths"]))
        # With --json stdout carries only JSON lines; diffs and the summary go to stderr.
        report = self.stderr if as_json else self.stdout
        passed = failed = errors = 0
        for path in files:
            try:
                scenario = load_scenario_file(path)
            except ScenarioError as exc:
                errors += 1
                self.stderr.write(f"error: {exc}")
                continue
            outcome = run_scenario(scenario)
            if as_json:
                self.stdout.write(outcome_to_json(scenario.name, outcome))
            elif not check:
                self.stdout.write(_describe(scenario.name, outcome))
            if not check:
                continue
            if scenario.expect is None:
                errors += 1
                self.stderr.write(f"error: {path}: expect: is required with --check")
                continue
            diff = check_outcome(outcome, scenario.expect)
            if diff:
                failed += 1
                report.write(f"FAIL {scenario.name} ({path})")
                for line in diff:
                    report.write(f"    {line}")
            else:
                passed += 1
        if check:
            summary = f"{passed} passed, {failed} failed"
            if errors:
                summary += f", {errors} could not be loaded"
            report.write(summary)
        if errors or failed:
            problems = []
            if failed:
                problems.append(f"{failed} scenario(s) differ from their expectations")
            if errors:
                problems.append(f"{errors} scenario file(s) could not be loaded")
            raise CommandError("; ".join(problems), returncode=1)


def _describe(name: str, outcome: dict[str, Any]) -> str:
    lines = [name]
    for key, admission in outcome["admitted"].items():
        lines.append(f"  admitted {key}: {json.dumps(admission)}")
    if outcome["preempted"]:
        lines.append(f"  preempted: {', '.join(outcome['preempted'])}")
    if outcome["pending"]:
        lines.append(f"  pending: {', '.join(outcome['pending'])}")
    return "\n".join(lines)
