"""``manage.py apply -f FILE [-f FILE ...] [--cluster NAME]``: ``kubectl apply`` for Kueue's
quota objects (``-f -`` reads standard input). All files are applied in one transaction."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.manifests import yamlio
from scheduling.manifests.apply import ApplyError, UnknownCluster, apply_manifests
from scheduling.manifests.codec import Conflict


class Command(BaseCommand):
    help = ("Create or update Kueue objects (ResourceFlavor, Cohort, ClusterQueue, LocalQueue, "
            "WorkloadPriorityClass, AdmissionCheck, MultiKueueConfig, MultiKueueCluster, "
            "ProvisioningRequestConfig) from "
            "YAML or JSON files, all in one transaction.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("-f", "--filename", action="append", required=True, dest="files",
                            metavar="FILE", help="a YAML or JSON file; '-' reads stdin")
        parser.add_argument("--cluster", help="the cluster (scheduling domain); default: the "
                            "manager")

    def handle(self, *args: Any, **options: Any) -> None:
        documents: list[Any] = []
        sources: list[tuple[str, int]] = []  # (file, index in that file) of each document
        for name in options["files"]:
            for index, document in enumerate(self._load(name)):
                documents.append(document)
                sources.append((name, index))
        try:
            result = apply_manifests(documents, cluster=options["cluster"])
        except UnknownCluster as exc:
            raise CommandError(str(exc)) from exc
        except Conflict as exc:
            raise CommandError(str(exc)) from exc
        except ApplyError as exc:
            lines = []
            for document in exc.documents:
                where = ""
                if document.index is not None and len(options["files"]) > 1:
                    file, index = sources[document.index]
                    where = f" [{file}, document {index}]"
                lines.append(document.message() + where)
            raise CommandError("nothing was applied:\n" + "\n".join(lines)) from exc
        for obj in result.objects:
            self.stdout.write(obj.line())
        for warning in result.warnings:
            self.stderr.write(self.style.WARNING(f"Warning: {warning}"))

    def _load(self, name: str) -> list[Any]:
        limit = yamlio.max_manifest_bytes()
        try:
            if name == "-":
                data = sys.stdin.buffer.read(limit + 1)
            else:
                with Path(name).open("rb") as stream:
                    data = stream.read(limit + 1)
        except OSError as exc:
            raise CommandError(f"{name}: {exc.strerror}") from exc
        content_type = "application/json" if name.endswith(".json") else "application/yaml"
        try:
            return yamlio.load_documents(data, content_type=content_type)
        except yamlio.ManifestSyntaxError as exc:
            raise CommandError(f"{name}: {exc}") from exc
