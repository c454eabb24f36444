"""Serve kueueweb over ASGI (HTTP and WebSockets) with daphne.

In embedded mode the reconcilers run in a thread of this process; with REDIS_URL set they run
in Celery workers and beat, started separately.

With KUEUEWEB_TLS_CERT_FILE and KUEUEWEB_TLS_KEY_FILE (PEM files: the serving certificate,
with its chain, and its private key) it also serves HTTPS on ``--tls-port``
(KUEUEWEB_TLS_PORT, 8443 by default): a Kubernetes API server calls admission webhooks over
HTTPS only (``manage.py webhooks``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from daphne.cli import CommandLineInterface
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kueueweb import embedded

CERT_ENV = "KUEUEWEB_TLS_CERT_FILE"
KEY_ENV = "KUEUEWEB_TLS_KEY_FILE"
DEFAULT_TLS_PORT = 8443


def _escape(value: str) -> str:
    """A value in a Twisted endpoint description, where ``:`` and ``=`` separate fields."""
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")


def tls_endpoint(host: str, port: int, cert_file: str, key_file: str) -> str:
    """daphne's (Twisted's) ``ssl:`` server endpoint for the certificate and key files,
    which must be readable PEM files; raises ValueError naming the one that is not."""
    for name, path in ((CERT_ENV, cert_file), (KEY_ENV, key_file)):
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}: cannot read {path}: {exc}") from None
        if "-----BEGIN" not in text:
            raise ValueError(f"{name}: {path} is not a PEM file")
    return (f"ssl:port={port}:interface={_escape(host)}:privateKey={_escape(key_file)}"
            f":certKey={_escape(cert_file)}")


class Command(BaseCommand):
    help = "Serve the application (HTTP + WebSockets); run the embedded reconcilers if no broker."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("KUEUEWEB_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--tls-port", type=int, default=int(
            os.environ.get("KUEUEWEB_TLS_PORT", str(DEFAULT_TLS_PORT))),
            help=f"HTTPS port, served when {CERT_ENV} and {KEY_ENV} are set")

    def handle(self, *args: Any, **options: Any) -> None:
        cert, key = os.environ.get(CERT_ENV, ""), os.environ.get(KEY_ENV, "")
        endpoints: list[str] = []
        if cert or key:
            if not (cert and key):
                raise CommandError(f"set both {CERT_ENV} and {KEY_ENV} to serve HTTPS")
            try:
                endpoints = ["-e", tls_endpoint(options["host"], options["tls_port"], cert, key)]
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        if settings.RECONCILER_MODE == "embedded":
            embedded.start_in_thread()
            self.stdout.write("Reconcilers: embedded loop in this process.")
        else:
            self.stdout.write("Reconcilers: Celery (start `celery -A kueueweb worker -B`).")
        self.stdout.write(f"Serving on http://{options['host']}:{options['port']}/")
        if endpoints:
            self.stdout.write(f"Serving on https://{options['host']}:{options['tls_port']}/")
        CommandLineInterface().run(
            ["-b", options["host"], "-p", str(options["port"]), *endpoints,
             "kueueweb.asgi:application"]
        )
