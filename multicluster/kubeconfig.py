"""The one check a kubeconfig passes before it is stored or used.

Every way in (the clusters API, the admin console's upload) and the client that connects
with a stored kubeconfig call ``read_kubeconfig``, so a kubeconfig is refused for the same
reasons, with the same words, wherever it comes from. It is parsed by the hardened YAML
loader (no anchors, bounded nesting and size).

A kubeconfig holds secrets, so nothing said about it quotes it: an error names the field
(``users[0].user.token``) and the problem, never the value, and a YAML syntax error gives
the line and column without the text around them.

Refused, besides what is not a kubeconfig at all:

- a token that is not a single word (whitespace or control characters, such as the newline
  a YAML block scalar ``token: |`` adds): it is sent as an HTTP header, where it cannot be;
- credentials that make this process run a command (``exec``, ``auth-provider``) or read
  local files (``tokenFile``, ``client-certificate``, ``client-key``,
  ``certificate-authority``), unless ``KUEUEWEB["KUBE_ALLOW_LOCAL_CREDENTIALS"]`` is set:
  the kubeconfig came through the web;
- a server or proxy that is not an http(s) URL, or that carries a user and password.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import yaml
from django.conf import settings

from scheduling.manifests.yamlio import ManifestSyntaxError, load_yaml_documents

MAX_KUBECONFIG_BYTES = 1024 * 1024
LOCAL_USER_KEYS = ("exec", "auth-provider", "tokenFile", "client-certificate", "client-key")
LOCAL_CLUSTER_KEYS = ("certificate-authority",)
_USER_STRINGS = ("token", "username", "password", "client-certificate-data", "client-key-data")
_CLUSTER_STRINGS = ("certificate-authority-data", "tls-server-name")
_NOT_A_WORD = re.compile(r"[\s\x00-\x1f\x7f]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class KubeconfigInvalid(ValueError):
    """A kubeconfig that is refused; the message names the field, never its value."""


def allow_local_credentials() -> bool:
    options: Mapping[str, Any] = settings.KUEUEWEB
    return bool(options.get("KUBE_ALLOW_LOCAL_CREDENTIALS", False))


def _syntax_message(exc: ManifestSyntaxError) -> str:
    """The loader's refusal without the quoted source: PyYAML's error text may show the
    offending line, and that line may be the token."""
    cause = exc.__cause__
    if not isinstance(cause, yaml.MarkedYAMLError):
        return str(exc)
    parts = []
    for text, mark in ((cause.context, cause.context_mark), (cause.problem, cause.problem_mark)):
        if text:
            where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            parts.append(f"{text}{where}")
    return "not valid YAML: " + ("; ".join(parts) or type(cause).__name__)


def _entries(config: Mapping[str, Any], section: str, body_key: str,
             problems: list[str]) -> list[tuple[str, Mapping[str, Any]]]:
    """(path, body) of each entry of ``clusters``/``users``/``contexts``."""
    value = config.get(section)
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{section}: must be a list")
        return []
    found = []
    for index, entry in enumerate(value):
        path = f"{section}[{index}]"
        if not isinstance(entry, Mapping):
            problems.append(f"{path}: must be a mapping with a name and a {body_key}")
            continue
        body = entry.get(body_key)
        if body is None:
            continue
        if not isinstance(body, Mapping):
            problems.append(f"{path}.{body_key}: must be a mapping")
            continue
        found.append((f"{path}.{body_key}", body))
    return found


def _check_url(value: Any, path: str, problems: list[str]) -> None:
    if not isinstance(value, str):
        problems.append(f"{path}: must be a string")
        return
    parts = urlsplit(value) if not _NOT_A_WORD.search(value) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append(f"{path}: must be an http or https URL, without spaces")
    elif parts.username is not None or parts.password is not None:
        problems.append(f"{path}: must not hold a user or password: give the credentials in "
                        "the user entry")


def _check_user(path: str, user: Mapping[str, Any], local: bool, problems: list[str]) -> None:
    for key in _USER_STRINGS:
        if key in user and not isinstance(user[key], str):
            problems.append(f"{path}.{key}: must be a string")
    token = user.get("token")
    if isinstance(token, str) and (not token or _NOT_A_WORD.search(token)):
        problems.append(f"{path}.token: must be one word, without spaces, line breaks or "
                        "control characters (it is sent as an HTTP header; a YAML block "
                        "scalar such as 'token: |' ends it with a line break)")
    for key in ("username", "password"):
        value = user.get(key)
        if isinstance(value, str) and _CONTROL.search(value):
            problems.append(f"{path}.{key}: must not contain line breaks or control characters")
    if not local:
        problems.extend(
            f"{path}.{key}: not accepted: kueueweb runs no command and reads no local file "
            "for a cluster; give the credentials inline (token, client-certificate-data, "
            "client-key-data)"
            for key in LOCAL_USER_KEYS if user.get(key))


def _check_cluster(path: str, cluster: Mapping[str, Any], local: bool,
                   problems: list[str]) -> None:
    for key in _CLUSTER_STRINGS:
        if key in cluster and not isinstance(cluster[key], str):
            problems.append(f"{path}.{key}: must be a string")
    for key in ("server", "proxy-url"):
        if key in cluster:
            _check_url(cluster[key], f"{path}.{key}", problems)
    if not local:
        problems.extend(
            f"{path}.{key}: not accepted: kueueweb reads no local file for a cluster; give "
            "the certificate inline (certificate-authority-data)"
            for key in LOCAL_CLUSTER_KEYS if cluster.get(key))


def read_kubeconfig(text: str, *, local_credentials: bool | None = None) -> dict[str, Any]:
    """The kubeconfig ``text`` as a dict, once it is known to be usable from this process.

    Raises KubeconfigInvalid with every problem found, each naming its field.
    ``local_credentials`` defaults to ``KUEUEWEB["KUBE_ALLOW_LOCAL_CREDENTIALS"]``.
    """
    local = allow_local_credentials() if local_credentials is None else local_credentials
    try:
        documents = load_yaml_documents(text, max_bytes=MAX_KUBECONFIG_BYTES)
    except ManifestSyntaxError as exc:
        raise KubeconfigInvalid(_syntax_message(exc)) from None
    config = documents[0] if len(documents) == 1 else None
    if not isinstance(config, Mapping) or not isinstance(config.get("clusters"), list) \
            or not config["clusters"]:
        raise KubeconfigInvalid("not a kubeconfig: expected a YAML mapping with a 'clusters' "
                                "list")
    problems: list[str] = []
    for path, cluster in _entries(config, "clusters", "cluster", problems):
        _check_cluster(path, cluster, local, problems)
    for path, user in _entries(config, "users", "user", problems):
        _check_user(path, user, local, problems)
    _entries(config, "contexts", "context", problems)
    if problems:
        raise KubeconfigInvalid("; ".join(problems))
    return cast(dict[str, Any], config)
