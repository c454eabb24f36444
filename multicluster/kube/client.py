"""One Kubernetes API client per cluster, built from the cluster's stored kubeconfig.

Never the client library's global configuration and never ``~/.kube``: a kueueweb process
talks to many clusters at once, so each gets its own ``ApiClient`` from
``kubernetes.config.new_client_from_config_dict``. Clients are cached per process, keyed by
(cluster id, hash of the kubeconfig), so an uploaded kubeconfig takes effect at the next call.

Every call goes through ``KubeClient.call`` / ``KubeClient.open_stream``: a timeout on each
request (``KUEUEWEB["KUBE_REQUEST_TIMEOUT_SECONDS"]``, 10 s by default), no urllib3 retries
(the reconcilers retry with Kueue's back-off instead), the answer decoded from JSON into
plain dicts, and the library's exceptions turned into ``multicluster.kube.errors``.

A stored kubeconfig passes the same check as an upload (``multicluster.kubeconfig``), so
one stored before a rule existed is refused here as ``BadConfig``: one that would make this
process run a command (``exec``, ``auth-provider``) or read local files (``tokenFile``,
certificate paths) unless ``KUEUEWEB["KUBE_ALLOW_LOCAL_CREDENTIALS"]`` is set, or a token
that cannot be sent as a header. No message quotes a value from the kubeconfig.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from multicluster.kube.errors import KubeApiError, KubeConfigError, KubeUnavailable
from multicluster.kubeconfig import KubeconfigInvalid, allow_local_credentials, read_kubeconfig
from multicluster.models import Cluster

logger = logging.getLogger(__name__)

DEFAULT_REQUEST_TIMEOUT_SECONDS = 10.0
DISCOVERY_TTL_SECONDS = 60.0
# Connections kept open to one server: a pass holds one per watch while it refreshes them
# all at once (``KubeBackend.refresh_all``), and urllib3 drops, rather than reuses, any
# connection beyond its pool's size.
MAX_CONNECTIONS = 64
# Statuses that say "this server cannot be used now" rather than "this request is wrong".
_UNAVAILABLE_STATUSES = frozenset({0, 401, 429})


def _options() -> Mapping[str, Any]:
    config: Mapping[str, Any] = settings.KUEUEWEB
    return config


def request_timeout() -> float:
    """Seconds a single request may take (connect, then each read)."""
    value = float(_options().get("KUBE_REQUEST_TIMEOUT_SECONDS", DEFAULT_REQUEST_TIMEOUT_SECONDS))
    return value if value > 0 else DEFAULT_REQUEST_TIMEOUT_SECONDS


def load_kubeconfig(text: str) -> dict[str, Any]:
    """The kubeconfig as a dict, once it is known to be usable from this process
    (``multicluster.kubeconfig.read_kubeconfig``, the check every upload passes).

    Raises KubeConfigError (Kueue's ``BadConfig``) with a message an operator can act on.
    """
    if not text.strip():
        raise KubeConfigError("no kubeconfig is stored for this cluster")
    try:
        return read_kubeconfig(text, local_credentials=allow_local_credentials())
    except KubeconfigInvalid as exc:
        raise KubeConfigError(str(exc)) from None


def _config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _status_of(exc: ApiException) -> tuple[int, str, str]:
    """(code, reason, message) of an error answer, from its ``Status`` body when it has one."""
    status = int(exc.status or 0)
    reason, message = str(exc.reason or ""), ""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    if isinstance(body, dict):
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or "")
    return status, reason, message or str(exc.body or "").strip()[:500]


def describe(exc: BaseException) -> str:
    """A one-line account of a transport failure (the URL and what happened)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError):
        return f"{exc.url}: {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def _api_error(exc: ApiException) -> KubeApiError | KubeUnavailable:
    status, reason, message = _status_of(exc)
    if status in _UNAVAILABLE_STATUSES or status >= 500:
        return KubeUnavailable(f"{status} {reason}: {message}".strip())
    return KubeApiError(status, reason, message)


def _query_name(parameter: str) -> str:
    """The API's name of a query parameter the generated client spells in snake case
    (``label_selector`` -> ``labelSelector``; ``_continue`` -> ``continue``)."""
    head, *rest = parameter.lstrip("_").split("_")
    return head + "".join(word.capitalize() for word in rest)


class CoreObjectsApi:
    """``CustomObjectsApi``'s calls for the core group (``""``), whose objects live under
    ``/api/{version}`` rather than ``/apis/{group}/{version}``: a Pod handled like any job
    object, its body sent and answered as plain JSON (the typed ``CoreV1Api`` would read it
    into the library's models, dropping fields newer than the library).

    Each call is the official client's own request path (``ApiClient.param_serialize``, the
    bearer token and headers it adds, ``call_api``) and answers as a generated call with
    ``_preload_content=False`` does: the not yet read response, or ``ApiException``."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def _request(self, method: str, version: str, plural: str, namespace: str | None = None,
                 name: str | None = None, *, body: Any = None, _content_type: str | None = None,
                 _request_timeout: Any = None, _preload_content: bool = False,
                 **query: Any) -> Any:
        path, params = "/api/{version}", {"version": version, "plural": plural}
        if namespace is not None:
            path, params["namespace"] = path + "/namespaces/{namespace}", namespace
        path += "/{plural}"
        if name is not None:
            path, params["name"] = path + "/{name}", name
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = _content_type or "application/json"
        request = self.api_client.param_serialize(
            method=method, resource_path=path, path_params=params,
            query_params=[(_query_name(k), v) for k, v in query.items() if v is not None],
            header_params=headers, body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        if _preload_content:
            response.read()
            return json.loads(response.data or b"{}")
        return response.response

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str,
                                        plural: str, body: Any, **options: Any) -> Any:
        return self._request("POST", version, plural, namespace, body=body, **options)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str,
                                     plural: str, name: str, **options: Any) -> Any:
        return self._request("GET", version, plural, namespace, name, **options)

    def patch_namespaced_custom_object(self, group: str, version: str, namespace: str,
                                       plural: str, name: str, body: Any,
                                       **options: Any) -> Any:
        return self._request("PATCH", version, plural, namespace, name, body=body, **options)

    def delete_namespaced_custom_object(self, group: str, version: str, namespace: str,
                                        plural: str, name: str, **options: Any) -> Any:
        return self._request("DELETE", version, plural, namespace, name, **options)

    def list_cluster_custom_object(self, group: str, version: str, plural: str,
                                   **options: Any) -> Any:
        return self._request("GET", version, plural, **options)


class KubeClient:
    """The APIs of one cluster, sharing one ``ApiClient`` (its connection pool)."""

    def __init__(self, api_client: Any, *, timeout: float) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.core = k8s.CoreV1Api(api_client)
        # Jobs and the gang Workload go through the generic API: their bodies are sent as
        # given (the typed APIs validate them against the library's models and would refuse
        # fields newer than the library, e.g. a pod template's workloadRef).
        self.custom = k8s.CustomObjectsApi(api_client)
        self.core_objects = CoreObjectsApi(api_client)
        self.versions = k8s.VersionApi(api_client)
        self._discovery: dict[str, tuple[float, frozenset[str] | None]] = {}
        self._lock = threading.Lock()

    @property
    def max_connections(self) -> int:
        """The connections its pool keeps: the most requests worth making at once."""
        size = self.api_client.configuration.connection_pool_maxsize
        return max(int(size or 1), 1)

    def objects(self, group: str) -> Any:
        """The generic API of a group's objects: the custom objects API, or its counterpart
        on ``/api`` for the core group."""
        return self.core_objects if group == "" else self.custom

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    def _send(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
              timeout: float | tuple[float, float]) -> Any:
        kwargs.update(_preload_content=False, _request_timeout=timeout)
        try:
            return method(*args, **kwargs)
        except ApiException as exc:
            raise _api_error(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(describe(exc)) from exc
        except ValueError:
            # http.client refuses a header value with a line break and quotes the whole
            # header, the token included: neither its text nor the chained exception may
            # reach a condition or a traceback in the log.
            raise KubeUnavailable(
                "the request could not be sent: a header made from the kubeconfig's "
                "credentials is not a valid HTTP header value") from None

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)`` of one of this client's APIs, with the timeout; the
        answer decoded from JSON (``{}`` when empty)."""
        response = self._send(method, args, kwargs, (self.timeout, self.timeout))
        try:
            data = response.data
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise KubeUnavailable(describe(exc)) from exc
        finally:
            response.release_conn()
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as exc:
            raise KubeUnavailable(f"the server answered with something else than JSON: "
                                  f"{data[:200]!r}") from exc

    def open_stream(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The not yet read response of a streaming call (a watch); the caller closes it."""
        return self._send(method, args, kwargs, (self.timeout, self.timeout))

    def served_resources(self, group_version: str) -> frozenset[str] | None:
        """The resources the server serves in ``group_version`` (discovery, cached for a
        minute), or None when the group/version is not served."""
        now = time.monotonic()
        with self._lock:
            cached = self._discovery.get(group_version)
        if cached is not None and now - cached[0] < DISCOVERY_TTL_SECONDS:
            return cached[1]
        group, _, version = group_version.rpartition("/")
        try:
            if group:
                answer = self.call(self.custom.get_api_resources, group, version)
            else:
                answer = self.call(self.core.get_api_resources)
            names: frozenset[str] | None = frozenset(
                str(r.get("name")) for r in answer.get("resources") or () if isinstance(r, dict))
        except KubeApiError as exc:
            if not (exc.not_found or exc.forbidden):
                raise
            names = None
        with self._lock:
            self._discovery[group_version] = (now, names)
        return names

    def forget_discovery(self) -> None:
        with self._lock:
            self._discovery.clear()

    def close(self) -> None:
        try:
            self.api_client.close()
        except Exception:  # closing a pool must never break the caller
            logger.debug("closing a Kubernetes client failed", exc_info=True)


def build_client(kubeconfig: str) -> KubeClient:
    """A new client for ``kubeconfig`` (YAML text); raises KubeConfigError."""
    data = load_kubeconfig(kubeconfig)
    configuration = k8s.Configuration()
    # No urllib3 retries: a failure is reported at once and retried with back-off.
    configuration.retries = 0
    configuration.connection_pool_maxsize = MAX_CONNECTIONS
    try:
        api_client = k8s_config.new_client_from_config_dict(  # type: ignore[no-untyped-call]
            data, persist_config=False, client_configuration=configuration)
    except k8s_config.ConfigException as exc:
        # The library's messages name keys and entries, not values.
        raise KubeConfigError(f"the kubeconfig cannot be loaded: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        # Python's own messages may quote the value that did not fit (a credential).
        raise KubeConfigError(
            f"the kubeconfig cannot be loaded ({type(exc).__name__})") from None
    return KubeClient(api_client, timeout=request_timeout())


_clients: dict[int, tuple[str, KubeClient]] = {}
_clients_lock = threading.Lock()


def client_for(cluster: Cluster) -> KubeClient:
    """The cached client of ``cluster``, rebuilt when its kubeconfig changed."""
    try:
        kubeconfig = cluster.get_kubeconfig()
    except ImproperlyConfigured as exc:
        raise KubeConfigError(str(exc)) from exc
    key = _config_hash(f"{kubeconfig}\n{request_timeout()}\n"
                       f"{_options().get('KUBE_ALLOW_LOCAL_CREDENTIALS', False)}")
    with _clients_lock:
        cached = _clients.get(cluster.pk)
        if cached is not None and cached[0] == key:
            return cached[1]
    fresh = build_client(kubeconfig)
    with _clients_lock:
        previous = _clients.get(cluster.pk)
        _clients[cluster.pk] = (key, fresh)
    if previous is not None:
        previous[1].close()
    return fresh


def config_fingerprint(cluster: Cluster) -> str:
    """A short digest of the cluster's kubeconfig: watch state is kept per fingerprint, so
    pointing a cluster at another server starts from a fresh list."""
    try:
        return _config_hash(cluster.get_kubeconfig())[:16]
    except ImproperlyConfigured:
        return "undecryptable"


def forget_clients() -> None:
    """Drop every cached client (tests; a changed encryption key)."""
    with _clients_lock:
        clients = [entry[1] for entry in _clients.values()]
        _clients.clear()
    for kube in clients:
        kube.close()
