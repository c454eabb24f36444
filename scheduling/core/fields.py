"""A validation error at a field path in Kueue's spelling
(``spec.resourceGroups[0].flavors[1].resources[0].lendingLimit``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str


def errors_to_dict(errors: Iterable[FieldError]) -> dict[str, list[str]]:
    """Group errors by path, the shape DRF and ValidationError(dict) use."""
    result: dict[str, list[str]] = {}
    for error in errors:
        result.setdefault(error.path, []).append(error.message)
    return result
