"""``manage.py export [--cluster NAME]``: a domain's Kueue objects as YAML that
``manage.py apply`` (or ``kubectl apply`` against Kueue) reads back."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.manifests import yamlio
from scheduling.manifests.apply import UnknownCluster, export_manifests


class Command(BaseCommand):
    help = "Print the Kueue objects of a cluster (scheduling domain) as v1beta2 YAML."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="the cluster (scheduling domain); default: the "
                            "manager")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            documents = export_manifests(options["cluster"])
        except UnknownCluster as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(yamlio.dump_documents(documents), ending="")
