"""The zero-cost Kueue-rules model's figures, computed once per shape and code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.tools.bench.shapes import one_queue_shape
from tools.bench.model import run_model
from tools.bench.reference import cache_key, model_reference
from tools.bench.shape import Shape


def _shape(count: int = 4, *, name: str = "t") -> Shape:
    return one_queue_shape(count, runtime_ms=300, name=name, lower_bound_wall_ms=1000)


def test_the_figures_are_the_models_and_come_from_the_cache_the_second_time(tmp_path: Path) -> None:
    shape = _shape()
    lines: list[str] = []

    first = model_reference(shape, cache_dir=tmp_path, log=lines.append)
    second = model_reference(shape, cache_dir=tmp_path, log=lines.append)

    expected = run_model(shape)
    assert first["workWeightedTimeToAdmissionMs"] == expected["workWeightedTimeToAdmissionMs"]
    assert first["wallMs"] == expected["wallMs"] > 0
    assert (first["cached"], second["cached"]) == (False, True)
    assert len(lines) == 1  # computed once
    assert {k: v for k, v in second.items() if k != "cached"} == {
        k: v for k, v in first.items() if k != "cached"
    }
    assert [p.name for p in tmp_path.iterdir()] == [f"{first['key']}.json"]


def test_the_key_follows_the_work_not_the_name_or_quoted_figures() -> None:
    assert cache_key(_shape(), requeue_batch_seconds=1.0) == cache_key(
        _shape(name="renamed"), requeue_batch_seconds=1.0
    )
    assert cache_key(_shape(), requeue_batch_seconds=1.0) != cache_key(
        _shape(count=5), requeue_batch_seconds=1.0
    )
    assert cache_key(_shape(), requeue_batch_seconds=1.0) != cache_key(
        _shape(), requeue_batch_seconds=0.5
    )


def test_a_damaged_cache_file_is_computed_again(tmp_path: Path) -> None:
    shape = _shape()
    key = cache_key(shape, requeue_batch_seconds=1.0)
    (tmp_path / f"{key}.json").write_text("{not json")

    figures = model_reference(shape, cache_dir=tmp_path, log=lambda line: None)

    assert figures["cached"] is False
    stored: dict[str, Any] = json.loads((tmp_path / f"{key}.json").read_text())
    assert stored["workWeightedTimeToAdmissionMs"] == figures["workWeightedTimeToAdmissionMs"]


def test_without_a_cache_dir_nothing_is_stored(tmp_path: Path) -> None:
    figures = model_reference(_shape(), cache_dir=None, log=lambda line: None)

    assert figures["cached"] is False
    assert list(tmp_path.iterdir()) == []
