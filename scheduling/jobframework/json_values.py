"""Helpers for plain JSON values (dicts, lists, strings, numbers, booleans, null) that the
batch paths handle many times over: an identity key, to tell equal values apart from
merely similar ones, and a cheap copy."""

from __future__ import annotations

from typing import Any

__all__ = ["NotJson", "json_copy", "json_key"]


class NotJson(Exception):
    """A value holds something other than JSON's own types (a tuple, a subclass of dict...)."""


def json_key(value: Any) -> Any:
    """A hashable key, equal for two JSON values exactly when they are the same JSON: the
    same types (``1``, ``1.0`` and ``true`` differ, as they do to validation) and the same
    key order (a value is stored as written). Raises ``NotJson`` for any other type,
    subclasses included, since validation may tell them apart (a tuple is not a list)."""
    kind = type(value)
    if kind is str or value is None:
        return value
    if kind is dict:
        items: list[Any] = ["{"]
        for name, item in value.items():
            if type(name) is not str:
                raise NotJson
            items.append(name)
            items.append(json_key(item))
        return tuple(items)
    if kind is list:
        return ("[", *[json_key(item) for item in value])
    if kind is int or kind is bool:
        return (kind, value)
    if kind is float:
        return (kind, repr(value))  # -0.0 and nan as written, not as compared
    raise NotJson


def json_copy(value: Any) -> Any:
    """A copy of a JSON value, its dicts and lists new: ``copy.deepcopy`` for the types
    JSON has, several times cheaper (no memo, no dispatch per type)."""
    kind = type(value)
    if kind is dict:
        return {name: json_copy(item) for name, item in value.items()}
    if kind is list:
        return [json_copy(item) for item in value]
    return value
