"""Install or remove Kueue's admission webhooks on a Kubernetes cluster kueueweb runs.

    manage.py webhooks install --cluster NAME --url https://HOST:PORT --ca-bundle FILE
    manage.py webhooks remove --cluster NAME

``install`` creates or updates the cluster's MutatingWebhookConfiguration and
ValidatingWebhookConfiguration (one webhook per enabled job kind, calling
``<url>/webhooks/<cluster>/<Kueue's path>`` and trusting the CA in FILE); ``remove``
deletes them. kueueweb must be served over HTTPS at that URL (``manage.py serve`` with
KUEUEWEB_TLS_CERT_FILE and KUEUEWEB_TLS_KEY_FILE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from multicluster import admission
from multicluster.models import Cluster


class Command(BaseCommand):
    help = "Install or remove Kueue's admission webhooks on a Kubernetes cluster."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        install = actions.add_parser("install", help="create or update both configurations")
        install.add_argument("--cluster", required=True, help="the kueueweb cluster's name")
        install.add_argument("--url", required=True,
                             help="where the cluster reaches kueueweb: https://HOST:PORT")
        install.add_argument("--ca-bundle", required=True, type=Path,
                             help="PEM file of the CA that signed kueueweb's serving "
                                  "certificate")
        remove = actions.add_parser("remove", help="delete both configurations")
        remove.add_argument("--cluster", required=True, help="the kueueweb cluster's name")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"--cluster: there is no cluster {options['cluster']!r}")
        try:
            if options["action"] == "install":
                path: Path = options["ca_bundle"]
                try:
                    pem = path.read_bytes()
                except OSError as exc:
                    raise CommandError(f"--ca-bundle: cannot read {path}: "
                                       f"{exc.strerror}") from None
                done = admission.install_webhooks(cluster, options["url"], pem)
            else:
                done = admission.remove_webhooks(cluster)
        except admission.WebhookSetupError as exc:
            raise CommandError(str(exc)) from None
        for line in done:
            self.stdout.write(line)
