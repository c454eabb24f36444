"""``manage.py loadtest api|live|soak``: the web side under load (``tools.loadtest``),
and the whole production stack under a steady load (``tools.soak``).

``api`` seeds a large domain into the configured database (only an empty one, unless
``--reuse``) and measures the list endpoints and pages; ``live`` sends a burst of changes
while WebSocket clients follow the domain. Both print a table with PASS/FAIL and can write
the figures as JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.models import Workload
from tools import loadtest


class Command(BaseCommand):
    help = "Load tests: `api` (lists and pages over a large database) and `live` (a burst of " \
           "changes reaching WebSocket clients)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="test", required=True)
        api = sub.add_parser("api", help="seed workloads, then time the lists and pages")
        api.add_argument("--workloads", type=int, default=50_000)
        api.add_argument("--queues", type=int, default=8, help="cluster queues to seed")
        api.add_argument("--requests", type=int, default=100,
                         help="requests per endpoint (after one warm-up request)")
        api.add_argument("--transport", choices=("http", "client"), default="http",
                         help="http: a daphne server started for the run; client: Django's "
                              "test client in this process")
        api.add_argument("--only", action="append", default=[],
                         help="measure only endpoints whose name contains this (repeatable)")
        api.add_argument("--threshold-ms", type=float, default=loadtest.THRESHOLD_MS)
        live = sub.add_parser("live", help="a burst of changes to open WebSocket clients")
        live.add_argument("--workloads", type=int, default=2000,
                          help="workloads to seed when the database is empty")
        live.add_argument("--rate", type=float, default=1000.0, help="changes per second")
        live.add_argument("--seconds", type=float, default=10.0)
        live.add_argument("--clients", type=int, default=20)
        live.add_argument("--producers", type=int, default=2,
                          help="threads committing the changes (each takes every n-th)")
        live.add_argument("--transport", choices=("auto", "asgi", "http"), default="auto",
                          help="asgi: the ASGI app in this process; http: real sockets to a "
                               "daphne server (needs REDIS_URL); auto: http when REDIS_URL "
                               "is set")
        live.add_argument("--max-lag-ms", type=float, default=2000.0)
        live.add_argument("--no-sender-throttle", action="store_true",
                          help="send every notification (kueueweb.live.THROTTLE_SECONDS = 0), "
                               "to compare with the throttled sender")
        soak_parser = sub.add_parser(
            "soak", help="start Celery workers and beat, send a steady stream of submissions "
                         "and scale calls, and report deadlocks, 5xx answers, the queue's "
                         "length and the safety net's lateness (PostgreSQL and Redis only)")
        soak_parser.add_argument("--seconds", type=float, default=600.0)
        soak_parser.add_argument("--rate", type=float, default=1.5,
                                 help="submissions per second (each followed by a scale call)")
        soak_parser.add_argument("--clients", type=int, default=6)
        soak_parser.add_argument("--workers", type=int, default=2)
        soak_parser.add_argument("--concurrency", type=int, default=2)
        soak_parser.add_argument("--period", type=float, default=2.0,
                                 help="the periodic reconcilers' interval in seconds")
        soak_parser.add_argument("--output", help="write the figures as JSON to this file")
        for p in (api, live):
            p.add_argument("--reuse", action="store_true",
                           help="run on a database that already has workloads (seeds the "
                                "load domain only if it is missing)")
            p.add_argument("--output", help="write the figures as JSON to this file")

    def handle(self, *args: Any, **options: Any) -> None:
        report: dict[str, Any] = {"test": options["test"], "machine": loadtest.machine()}
        if options["test"] == "soak":
            self._soak(options, report)
            return
        report["seed"] = self._seed(options)
        if options["test"] == "api":
            self.stdout.write(f"Measuring {options['requests']} requests per endpoint "
                              f"({options['transport']})...")
            result = loadtest.measure_api(
                transport_name=options["transport"], requests=options["requests"],
                threshold_ms=options["threshold_ms"], log=self.stdout.write,
                only=options["only"])
            report.update(result)
            lines = loadtest.format_api(result)
        else:
            transport = options["transport"]
            if transport == "auto":
                transport = "http" if os.environ.get("REDIS_URL") else "asgi"
            if options["no_sender_throttle"]:
                from kueueweb import live

                live.THROTTLE_SECONDS = 0.0
            try:
                result = loadtest.measure_live(
                    rate=options["rate"], seconds=options["seconds"], clients=options["clients"],
                    transport_name=transport, max_lag_ms=options["max_lag_ms"],
                    producers=options["producers"],
                    log=self.stdout.write)
            except RuntimeError as exc:
                raise CommandError(str(exc)) from exc
            report.update(result)
            lines = loadtest.format_live(result)
        for line in lines:
            self.stdout.write(line)
        if options["output"]:
            Path(options["output"]).write_text(json.dumps(report, indent=2) + "\n")
            self.stdout.write(f"Figures written to {options['output']}")

    def _soak(self, options: dict[str, Any], report: dict[str, Any]) -> None:
        from dataclasses import asdict

        from tools import soak

        try:
            figures = soak.run(seconds=options["seconds"], rate=options["rate"],
                               clients=options["clients"], workers=options["workers"],
                               concurrency=options["concurrency"], period=options["period"],
                               log=self.stdout.write)
        except RuntimeError as exc:
            raise CommandError(str(exc)) from exc
        for line in soak.format_figures(figures):
            self.stdout.write(line)
        if options["output"]:
            report.update(asdict(figures), queue_growth=figures.queue_growth())
            Path(options["output"]).write_text(json.dumps(report, indent=2) + "\n")
            self.stdout.write(f"Figures written to {options['output']}")

    def _seed(self, options: dict[str, Any]) -> dict[str, Any]:
        if loadtest.is_seeded() and options["reuse"]:
            self.stdout.write("Reusing the load domain already in the database.")
            return {"reused": True, "workloads_in_database": Workload.objects.count()}
        if Workload.objects.exists() and not options["reuse"]:
            raise CommandError(
                "The database already has workloads: the load test seeds tens of thousands "
                "more. Point DATABASE_URL at an empty database, or pass --reuse.")
        workloads = options["workloads"]
        self.stdout.write(f"Seeding {workloads} workloads with their jobs, events and pods...")
        summary = loadtest.seed(workloads=workloads, queues=options.get("queues", 8),
                                log=self.stdout.write)
        self.stdout.write(f"Seeded in {summary.seconds} s: {summary.phases}, "
                          f"{summary.events} events, {summary.pods} pods.")
        return {"workloads_in_database": Workload.objects.count(), **summary.__dict__}
