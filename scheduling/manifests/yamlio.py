"""Reading and writing Kueue manifests as YAML or JSON, safely.

Manifests come from users (``POST /api/v1/apply``, ``manage.py apply``), so the loader
refuses what could make a small input expensive before doing the work: bodies over
``KUEUEWEB["MAX_MANIFEST_BYTES"]``, YAML anchors and aliases (the "billion laughs" expansion;
Kubernetes manifests never need them) and nesting deeper than any Kueue object. Only plain
data comes out (SafeLoader: no Python objects).
"""

from __future__ import annotations

import itertools
import json
import re
import sys
from collections.abc import Iterable, Mapping
from typing import Any, cast

import yaml
from django.conf import settings
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    NodeEvent,
)

# Kueue's deepest object (a ClusterQueue's resource quotas, a flavor's toleration) is about
# eight levels deep; twice that leaves room for labels and annotations.
MAX_DEPTH = 32
# A ``kind: List`` may hold other lists, as kubectl allows, but not without end.
MAX_DOCUMENTS = 5000

# A line that starts with "---" and a blank (or ends there) starts a document: YAML forbids
# that marker inside a scalar or a flow collection, so the parser either starts a document
# there or refuses the stream. Counting them bounds the documents from below without parsing.
_DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|\Z)", re.MULTILINE)

YAML_MEDIA_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


class ManifestSyntaxError(ValueError):
    """Input that is not a readable stream of manifests; the message says why."""


class ManifestTooLarge(ManifestSyntaxError):
    """Input larger than ``KUEUEWEB["MAX_MANIFEST_BYTES"]``."""


def max_manifest_bytes() -> int:
    return cast(int, settings.KUEUEWEB["MAX_MANIFEST_BYTES"])


class _SafeLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors/aliases and deep nesting while composing.

    The checks run as each node is composed, so a hostile document is refused at its first
    anchor or at the first level past the limit, not after it has been expanded.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, AliasEvent) or (isinstance(event, NodeEvent) and event.anchor):
            raise ManifestSyntaxError(
                f"YAML anchors and aliases are not accepted ({_where(event)}): write the value "
                "out in full"
            )
        if isinstance(event, CollectionStartEvent):
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise ManifestSyntaxError(
                    f"nesting deeper than {MAX_DEPTH} levels ({_where(event)}): no Kueue object "
                    "is that deep"
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)


def _where(event: Any) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"


# Timestamps stay strings, as they do when kubectl turns YAML into JSON for the API server.
_SafeLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

# libyaml, when PyYAML was built with it, reads a megabyte in a fraction of the time the pure
# Python reader takes. Its composer cannot be hooked, so the same checks run first on its
# event stream (``_check_events``): nothing is composed before the whole stream passed them.
_CSafeLoader: type[Any] | None = getattr(yaml, "CSafeLoader", None)
if _CSafeLoader is not None:
    _CSafeLoader = type("_CSafeLoader", (_CSafeLoader,), {
        "yaml_implicit_resolvers": _SafeLoader.yaml_implicit_resolvers})


def _check_events(text: str, loader: type[Any]) -> None:
    """Anchors, aliases, nesting and the number of documents, from the parser's events."""
    depth = 0
    documents = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, AliasEvent) or (isinstance(event, NodeEvent) and event.anchor):
            raise ManifestSyntaxError(
                f"YAML anchors and aliases are not accepted ({_where(event)}): write the value "
                "out in full"
            )
        if isinstance(event, CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise ManifestSyntaxError(
                    f"nesting deeper than {MAX_DEPTH} levels ({_where(event)}): no Kueue object "
                    "is that deep"
                )
        elif isinstance(event, CollectionEndEvent):
            depth -= 1
        elif isinstance(event, DocumentStartEvent):
            documents += 1
            if documents > MAX_DOCUMENTS:
                raise ManifestSyntaxError(f"more than {MAX_DOCUMENTS} documents")


def _check_c_events(text: str, loader: type[Any]) -> None:
    """``_check_events`` on libyaml's event stream.

    The libyaml of PyYAML 6.0.4's wheels stops scanning at 1,000 levels of flow nesting,
    before its parser has given a single event, with an error that names no limit of ours
    nor where it was passed. The pure-Python parser, whose events come as it reads, then
    finds the first level past ``MAX_DEPTH`` and says where it is."""
    try:
        _check_events(text, loader)
    except yaml.scanner.ScannerError as exc:
        if "nesting depth" not in str(exc.problem):
            raise
        _check_events(text, _SafeLoader)
        raise


def _check_document_starts(text: str) -> None:
    """Refuse a stream with too many documents before parsing it: the parser makes a dozen
    Python objects for a tiny document, and a megabyte holds tens of thousands of them."""
    starts = _DOCUMENT_START.finditer(text)
    if next(itertools.islice(starts, MAX_DOCUMENTS, None), None) is not None:
        raise ManifestSyntaxError(f"more than {MAX_DOCUMENTS} documents")


def _check_size(data: bytes | str, max_bytes: int) -> str:
    if isinstance(data, str):
        size = len(data.encode("utf-8", errors="surrogatepass"))
        text = data
    else:
        size = len(data)
        if size <= max_bytes:
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise ManifestSyntaxError(f"manifests must be UTF-8 text: {exc.reason}") from exc
    if size > max_bytes:
        raise ManifestTooLarge(
            f"manifests are {size} bytes; at most {max_bytes} bytes are accepted "
            "(KUEUEWEB_MAX_MANIFEST_BYTES)"
        )
    return text


def _depth_ok(value: Any) -> bool:
    """Iterative depth check for data that did not come through the YAML loader (JSON)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > MAX_DEPTH:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def _flatten(documents: Iterable[Any]) -> list[Any]:
    """Expand Kubernetes ``kind: List`` documents (``kubectl get -o yaml`` output) in place."""
    result: list[Any] = []
    pending = list(documents)
    pending.reverse()
    while pending:
        document = pending.pop()
        if document is None:
            continue  # an empty YAML document ("---" twice): kubectl skips it too
        if (
            isinstance(document, Mapping)
            and isinstance(document.get("kind"), str)
            and document["kind"].endswith("List")
            and "items" in document
        ):
            items = document.get("items") or []
            if not isinstance(items, list):
                raise ManifestSyntaxError(f"{document['kind']}.items must be a list")
            pending.extend(reversed(items))
            continue
        result.append(document)
        if len(result) > MAX_DOCUMENTS:
            raise ManifestSyntaxError(f"more than {MAX_DOCUMENTS} documents")
    return result


def load_yaml_documents(data: bytes | str, *, max_bytes: int | None = None) -> list[Any]:
    """Every document of a YAML stream (``---`` separated), ``List`` kinds expanded.

    Raises ManifestSyntaxError (ManifestTooLarge for the size limit) with a message fit for
    a user: the line of a syntax error, an alias, or too deep nesting.
    """
    text = _check_size(data, max_manifest_bytes() if max_bytes is None else max_bytes)
    documents: list[Any] = []
    loader: Any = None
    _check_document_starts(text)
    try:
        if _CSafeLoader is not None:
            _check_c_events(text, _CSafeLoader)
        # The reader refuses control characters as it is built: inside the try, so that
        # they are a syntax error like any other.
        loader = (_CSafeLoader or _SafeLoader)(text)
        while loader.check_data():
            documents.append(loader.get_data())
            if len(documents) > MAX_DOCUMENTS:
                raise ManifestSyntaxError(f"more than {MAX_DOCUMENTS} documents")
    except yaml.YAMLError as exc:
        raise ManifestSyntaxError(f"not valid YAML: {exc}") from exc
    except RecursionError as exc:  # a safety net: compose_node refuses deep nesting first
        raise ManifestSyntaxError(f"nesting deeper than {MAX_DEPTH} levels") from exc
    except ManifestSyntaxError:
        raise
    except ValueError as exc:
        # The resolver reads a plain scalar of digits as an int, and Python refuses to
        # convert one longer than sys.get_int_max_str_digits(): a syntax error to the user.
        raise ManifestSyntaxError(
            f"a number longer than {sys.get_int_max_str_digits()} digits") from exc
    finally:
        if loader is not None:
            loader.dispose()
    return _flatten(documents)


def load_json_documents(data: bytes | str, *, max_bytes: int | None = None) -> list[Any]:
    """Manifests from JSON: one object, a list of objects or a ``List``."""
    text = _check_size(data, max_manifest_bytes() if max_bytes is None else max_bytes)
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise ManifestSyntaxError(f"nesting deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:
        raise ManifestSyntaxError(f"not valid JSON: {exc}") from exc
    if not _depth_ok(value):
        raise ManifestSyntaxError(f"nesting deeper than {MAX_DEPTH} levels: no Kueue object is that deep")
    return _flatten(value if isinstance(value, list) else [value])


def load_documents(
    data: bytes | str, *, content_type: str = "", max_bytes: int | None = None
) -> list[Any]:
    """Manifests from a body whose media type says JSON or YAML (YAML when unsure).

    JSON is read by the JSON parser when the media type says so; otherwise text that starts
    like JSON is still accepted because JSON is YAML.
    """
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json" or media_type.endswith("+json"):
        return load_json_documents(data, max_bytes=max_bytes)
    return load_yaml_documents(data, max_bytes=max_bytes)


class _Dumper(yaml.SafeDumper):
    """Block-style YAML with list items indented under their key, as kubectl prints them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump_documents(documents: Iterable[Mapping[str, Any]]) -> str:
    """A multi-document YAML stream, keys in the order given (apiVersion, kind, ...)."""
    return yaml.dump_all(
        [dict(document) for document in documents],
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        explicit_start=True,
    )
