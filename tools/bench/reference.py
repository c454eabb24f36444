"""The zero-cost Kueue-rules model's figures on a shape, computed once and kept.

Every summary of a real run sets its time to admission beside the model's
(``tools.bench.model``, Kueue's requeue batch period, cycles that cost nothing). The model
is deterministic, but it is slow on big shapes (tens of seconds of cpu on
``large-scale``), so its figures are stored in a cache directory under a key that
changes with everything they depend on: the shape's cohorts, queues and workloads (not its
name or the figures it quotes), the model's settings, and the source of the engine and the
model. A change to any of them computes the figures again; nothing stale is ever read.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.bench.model import KUEUE_REQUEUE_BATCH_SECONDS, run_model
from tools.bench.shape import Shape

ROOT = Path(__file__).resolve().parents[2]
# What the model's figures are computed by: the engine, the model and the shape's reading.
_SOURCES = (
    ROOT / "scheduling" / "core",
    ROOT / "tools" / "bench" / "model.py",
    ROOT / "tools" / "bench" / "shape.py",
)
# What a real run's summary keeps of the model's.
_KEPT = ("wallMs", "workWeightedTimeToAdmissionMs", "evictions", "classes", "model")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kueueweb" / "bench-model"


def cache_key(shape: Shape, *, requeue_batch_seconds: float) -> str:
    """sha256 over the shape's content, the model's settings and the code that runs it."""
    digest = hashlib.sha256()
    content = json.dumps([dataclasses.asdict(c) for c in shape.cohorts], sort_keys=True)
    digest.update(content.encode())
    digest.update(f"\0requeue={requeue_batch_seconds!r}\0".encode())
    for source in _SOURCES:
        files = sorted(source.rglob("*.py")) if source.is_dir() else [source]
        for path in files:
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()


def model_reference(
    shape: Shape,
    *,
    cache_dir: Path | None,
    requeue_batch_seconds: float = KUEUE_REQUEUE_BATCH_SECONDS,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The model's figures on ``shape``: read from ``cache_dir`` when there, else computed
    (and stored there, unless ``cache_dir`` is None). ``cached`` says which."""
    key = cache_key(shape, requeue_batch_seconds=requeue_batch_seconds)
    path = cache_dir / f"{key}.json" if cache_dir is not None else None
    if path is not None:
        try:
            figures = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            figures = None  # absent or unreadable: computed again below
        if isinstance(figures, dict) and all(k in figures for k in _KEPT):
            return {**figures, "cached": True, "key": key}
    log(f"computing the zero-cost Kueue-rules model of {shape.name} (once per shape and code)")
    started = time.monotonic()
    summary = run_model(shape, requeue_batch_seconds=requeue_batch_seconds)
    figures = {k: summary[k] for k in _KEPT}
    figures["model"] = {**figures["model"], "seconds": round(time.monotonic() - started, 2)}
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole or not at all: a reader never sees half a file.
        with tempfile.NamedTemporaryFile(
            "w", encoding="utf-8", dir=path.parent, suffix=".tmp", delete=False
        ) as out:
            json.dump(figures, out)
        os.replace(out.name, path)
    return {**figures, "cached": False, "key": key}
