"""Example manifests of the job kinds, one YAML file per kind named after it in lower case
(``job.yaml``, ``jobset.yaml``, ``cronjob.yaml``): what the submission page offers to start
from, for the kinds that make Workloads and for those that make none (a CronJob, a
Deployment). A kind without a file is still accepted; it is just not offered."""

from __future__ import annotations

from pathlib import Path

from scheduling.jobframework import JobKind

_DIR = Path(__file__).resolve().parent


def example_for(integration: JobKind) -> str | None:
    """The example manifest of a kind, as YAML text, or None when it has none."""
    path = _DIR / f"{integration.kind.lower()}.yaml"
    return path.read_text(encoding="utf-8") if path.is_file() else None
