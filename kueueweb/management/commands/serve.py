"""Serve kueueweb over ASGI (HTTP and WebSockets) with daphne.

In embedded mode the reconcilers run in a thread of this process; with REDIS_URL set they run
in Celery workers and beat, started separately.
"""

from __future__ import annotations

import os
from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from kueueweb import embedded


class Command(BaseCommand):
    help = "Serve the application (HTTP + WebSockets); run the embedded reconcilers if no broker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("KUEUEWEB_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.RECONCILER_MODE == "embedded":
            embedded.start_in_thread()
            self.stdout.write("Reconcilers: embedded loop in this process.")
        else:
            self.stdout.write("Reconcilers: Celery (start `celery -A kueueweb worker -B`).")
        self.stdout.write(f"Serving on http://{options['host']}:{options['port']}/")
        CommandLineInterface().run(
            ["-b", options["host"], "-p", str(options["port"]), "kueueweb.asgi:application"]
        )
