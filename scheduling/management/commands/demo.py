"""``manage.py demo [--if-empty]``: a small living system for a first look.

Everything comes from the files in ``scheduling/demo/``: simulated clusters and their nodes
(``clusters.yaml``, in the shape of the clusters API), Kueue YAML applied through the same
importer as ``manage.py apply`` (Kueue's own getting-started setup, the teams' quotas,
MultiKueue, and the queues of each worker), then jobs submitted as a user would submit them.
Running it again adds only what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from multicluster.choices import ClusterRole, ConnectionType
from multicluster.models import Cluster, Node
from scheduling.manifests.apply import apply_manifests
from scheduling.models import ClusterQueue, Job, LocalQueue, Workload
from scheduling.services import submit_job

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"
# Applied to the manager, in this order (a cluster queue names flavors, a local queue its
# cluster queue, the MultiKueue cluster queue its admission check).
MANAGER_FILES = ("single-clusterqueue-setup.yaml", "multikueue.yaml", "setup.yaml")
WORKER_FILE = "worker-setup.yaml"


def load(name: str) -> list[dict[str, Any]]:
    with (DEMO_DIR / name).open() as stream:
        return [document for document in yaml.safe_load_all(stream) if document]


class Command(BaseCommand):
    help = "Add demo clusters, quotas, queues and jobs (Kueue's getting-started setup included)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-empty", action="store_true",
            help="do nothing when the manager cluster already has cluster queues",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        manager = Cluster.objects.get(role=ClusterRole.MANAGER)
        if options["if_empty"] and ClusterQueue.objects.filter(cluster=manager).exists():
            self.stdout.write("The manager has cluster queues already: no demo data added.")
            return

        with transaction.atomic():
            workers = self.add_clusters(load("clusters.yaml"), manager)
            results = [apply_manifests(load(name), cluster=manager) for name in MANAGER_FILES]
            results += [apply_manifests(load(WORKER_FILE), cluster=worker) for worker in workers]
        for warning in (w for result in results for w in result.warnings):
            self.stderr.write(self.style.WARNING(f"warning: {warning}"))
        submitted = self.submit_jobs(load("jobs.yaml"), manager)

        self.stdout.write(self.style.SUCCESS(
            f"Demo ready: {Cluster.objects.count()} clusters, "
            f"{ClusterQueue.objects.filter(cluster=manager).count()} cluster queues and "
            f"{LocalQueue.objects.filter(cluster=manager).count()} local queues on the manager, "
            f"{submitted} jobs submitted ({Workload.objects.count()} workloads in all)."
        ))

    def add_clusters(self, documents: list[dict[str, Any]], manager: Cluster) -> list[Cluster]:
        """Create the simulated clusters and nodes that are missing; return the workers."""
        workers: list[Cluster] = []
        for document in documents:
            spec = document["spec"]
            connection = spec.get("connection", {})
            if spec.get("role") == ClusterRole.MANAGER:
                cluster = manager
            else:
                cluster, _ = Cluster.objects.get_or_create(
                    name=document["metadata"]["name"],
                    defaults={"role": ClusterRole.WORKER,
                              "connection_type": connection.get("type", ConnectionType.SIMULATED)},
                )
                workers.append(cluster)
            for node in connection.get("nodes", []):
                Node.objects.get_or_create(
                    cluster=cluster, name=node["name"],
                    defaults={"capacity": node["capacity"], "labels": node.get("labels", {}),
                              "taints": node.get("taints", [])},
                )
        return workers

    def submit_jobs(self, manifests: list[dict[str, Any]], manager: Cluster) -> int:
        """Submit the jobs not submitted before (by name, or by generateName prefix)."""
        submitted = 0
        for manifest in manifests:
            metadata = manifest["metadata"]
            namespace = metadata["namespace"]
            existing = Job.objects.filter(cluster=manager, namespace=namespace)
            if "name" in metadata:
                existing = existing.filter(name=metadata["name"])
            else:
                existing = existing.filter(name__startswith=metadata["generateName"])
            if existing.exists():
                continue
            submit_job(manifest, namespace=namespace, cluster=manager)
            submitted += 1
        return submitted
