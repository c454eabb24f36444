"""Example manifests of the job kinds, one YAML file per kind named after it in lower case
(``job.yaml``, ``jobset.yaml``, ``raycluster.yaml``): what the submission page offers to
start from. A kind without a file is still accepted; it is just not offered."""

from __future__ import annotations

from pathlib import Path

from scheduling.jobframework import GenericJob

_DIR = Path(__file__).resolve().parent


def example_for(integration: GenericJob) -> str | None:
    """The example manifest of a kind, as YAML text, or None when it has none."""
    path = _DIR / f"{integration.kind.lower()}.yaml"
    return path.read_text(encoding="utf-8") if path.is_file() else None
