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
