"""JSON merge patch (RFC 7386), the ``application/merge-patch+json`` of a Kubernetes PATCH.

The REST endpoints apply it to the stored object before validating the result, so a patch
is read exactly as ``kubectl patch --type=merge`` would have the API server read it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """``target`` with ``patch`` applied: objects merge member by member, ``null`` removes a
    member, anything else (lists included) replaces. Neither argument is changed, and the
    result shares nothing with ``patch``, so the caller may edit it freely."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_patch_from(source: Mapping[str, Any], target: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest merge patch that turns ``source`` into ``target`` (``merge_patch(source,
    result) == target``): members that differ, ``null`` for those ``target`` drops, objects
    compared member by member, lists whole. Only what changed is sent, so whatever else the
    server or its controllers wrote meanwhile is left alone."""
    patch: dict[str, Any] = {}
    for key in source.keys() - target.keys():
        patch[key] = None
    for key, value in target.items():
        old = source.get(key)
        if key in source and old == value:
            continue
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            patch[key] = merge_patch_from(old, value)
        else:
            patch[key] = copy.deepcopy(value)
    return patch
