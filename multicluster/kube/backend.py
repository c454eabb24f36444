"""The calls kueueweb makes to a Kubernetes cluster: jobs, pods, namespaces, the gang
Workload, and list + watch with resource versions.

Everything is sent and received as plain dicts (the JSON of the API), through
``KubeClient.call``: the generic custom-objects API carries batch/v1 Jobs and the
``scheduling.k8s.io/v1alpha1`` Workload exactly as ``multicluster.kube.manifests`` builds them,
and its counterpart for the core group (``KubeClient.objects``) a Pod run as a job.

List + watch (``KubeBackend.refresh``) keeps a ``WatchState`` (resource version and reduced
objects) up to date: a list when there is no resource version, else a watch from it that is
read until the server has been quiet for a moment; a stream that breaks is resumed once from
the last version seen, and ``410 Gone`` (the version is too old) means a fresh list.
``KubeBackend.refresh_all`` refreshes many watches at once, so a pass waits for one quiet
moment, not one per watch.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import urllib3

from multicluster.kube.client import KubeClient, describe
from multicluster.kube.errors import KubeApiError, KubeUnavailable
from multicluster.kube.manifests import (
    GANG_API_GROUP,
    GANG_API_VERSION,
    GANG_RESOURCE,
    object_key,
    reduce_adoptable,
    reduce_event,
    reduce_job,
    reduce_namespace,
    reduce_node,
    reduce_pod,
)
from scheduling.core.pod_security import SYSTEM_NAMESPACES

logger = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_LIST_PAGE_SIZE = 500


# =========================================================================================
# List + watch
# =========================================================================================


@dataclass
class WatchState:
    """What list + watch knows of one kind: the last resource version and the objects."""

    resource_version: str = ""
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"resourceVersion": self.resource_version, "objects": self.objects}

    @classmethod
    def from_json(cls, data: Any) -> WatchState:
        if not isinstance(data, dict):
            return cls()
        objects = data.get("objects")
        return cls(resource_version=str(data.get("resourceVersion") or ""),
                   objects=dict(objects) if isinstance(objects, dict) else {})


@dataclass
class RefreshResult:
    """How a refresh went: a fresh list, how many watch events, broken streams resumed."""

    listed: bool = False
    expired: bool = False  # a watch answered 410 Gone: the state was listed again
    events: int = 0
    resumed: int = 0


@dataclass(frozen=True)
class WatchKind:
    """A kind the reconciler lists and watches across all namespaces. With ``tombstones``
    a deleted object stays in the state, marked ``deleted``, with its last status, until
    the reader drops it: a Job that finished and was deleted at once
    (``ttlSecondsAfterFinished``) still says how it ended. ``resource`` (group, version,
    plural) names a kind served through the generic objects API: the job kinds, a Pod
    among them."""

    name: str
    reduce: Callable[[Mapping[str, Any]], dict[str, Any]]
    tombstones: bool = False
    resource: tuple[str, str, str] | None = None
    # Sent with every list and watch of the kind, so only the objects it selects come.
    field_selector: str | None = None


TOMBSTONE = "deleted"
BATCH_JOBS = ("batch", "v1", "jobs")
PODS = WatchKind("pods", reduce_pod)
NODES = WatchKind("nodes", reduce_node)
# The warnings about pods (FailedScheduling, FailedMount, BackOff, ...): why a pod of ours
# does not run. Events carry no labels of their pod, so the rest of the selection is by the
# pods the reconciler knows (``multicluster.kube.pod_events``).
POD_EVENTS = WatchKind("events", reduce_event,
                       field_selector="involvedObject.kind=Pod,type=Warning")
NAMESPACES = WatchKind("namespaces", reduce_namespace)


def job_kind(group: str, version: str, plural: str,
             is_suspended: Callable[[Mapping[str, Any]], bool] | None = None) -> WatchKind:
    """The watch of a job kind (a registered integration's group, version and plural, and
    how it says it is suspended)."""
    # A core kind is named by its version: a Pod's watch as a job must not share the state
    # of the pods' own watch (``PODS``).
    return WatchKind(f"{plural}.{group or version}", functools.partial(reduce_job,
                                                            is_suspended=is_suspended),
                     tombstones=True,
                     resource=(group, version, plural))


def adoption_kind(group: str, version: str, plural: str,
                  is_suspended: Callable[[Mapping[str, Any]], bool] | None = None
                  ) -> WatchKind:
    """The watch of a job kind's objects created on the cluster (kubectl), which kueueweb
    adopts: the kind's resource, under a name (and so a state) of its own."""
    return WatchKind(f"adopt:{plural}.{group or version}",
                     functools.partial(reduce_adoptable, is_suspended=is_suspended),
                     tombstones=True, resource=(group, version, plural))


def _chunks(response: Any) -> Iterator[bytes]:
    """The body as it arrives: chunk by chunk (API servers stream watches chunked), or
    whatever is available for a body delimited by the connection's end."""
    if getattr(response, "chunked", False):
        yield from response.stream(amt=None, decode_content=False)
        return
    while True:
        data = response.read1(65536)
        if not data:
            return
        yield data


def _lines(response: Any) -> Iterator[str]:
    buffer = bytearray()
    for chunk in _chunks(response):
        buffer.extend(chunk)
        while (end := buffer.find(b"\n")) != -1:
            line = bytes(buffer[:end]).decode("utf-8", errors="replace").strip()
            del buffer[:end + 1]
            if line:
                yield line


def _set_read_timeout(response: Any, seconds: float) -> None:
    """From now on a read waits at most ``seconds``: the response headers came within the
    request timeout; the events after them are read until the stream is quiet."""
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.settimeout(seconds)
        except OSError:
            logger.debug("could not set the watch read timeout", exc_info=True)


class KubeBackend:
    """The operations kueueweb performs on one cluster."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    # --- cluster ------------------------------------------------------------------------

    def server_version(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.kube.call(self.kube.versions.get_code)
        return answer

    def serves(self, resource: tuple[str, str, str]) -> bool:
        """The server serves the job kind (discovery: a custom resource exists only once
        its CustomResourceDefinition is installed)."""
        group, version, plural = resource
        served = self.kube.served_resources(f"{group}/{version}" if group else version)
        return served is not None and plural in served

    def can_list_jobs(self, resource: tuple[str, str, str] = BATCH_JOBS) -> None:
        """Raises unless this client may list the job kind in every namespace."""
        self.kube.call(self.kube.objects(resource[0]).list_cluster_custom_object, *resource,
                       limit=1)

    def list_nodes(self) -> list[dict[str, Any]]:
        items, _ = self._list(NODES, label_selector=None)
        return items

    def ensure_namespace(self, name: str) -> bool:
        """Create namespace ``name`` unless it exists; True when it was created. A service
        account that may not read or create namespaces is not an error: the job's creation
        will say whether the namespace exists."""
        _refuse_system_namespace(name)
        try:
            self.kube.call(self.kube.core.read_namespace, name)
            return False
        except KubeApiError as exc:
            if not (exc.not_found or exc.forbidden):
                raise
        try:
            self.kube.call(self.kube.core.create_namespace,
                           {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        except KubeApiError as exc:
            if exc.conflict or exc.forbidden:
                return False
            raise
        return True

    def delete_namespace(self, name: str) -> bool:
        _refuse_system_namespace(name)
        try:
            self.kube.call(self.kube.core.delete_namespace, name)
        except KubeApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    def namespace_labels(self, name: str) -> dict[str, str]:
        """The labels of namespace ``name`` (with the name label the API server sets);
        raises KubeApiError (``not_found``) when there is none."""
        namespace = self.kube.call(self.kube.core.read_namespace, name)
        labels = (namespace.get("metadata") or {}).get("labels") or {}
        return {**{str(k): str(v) for k, v in labels.items()},
                "kubernetes.io/metadata.name": name}

    # --- cluster-scoped objects (admission webhook configurations) -----------------------

    def get_cluster_object(self, resource: tuple[str, str, str],
                           name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.kube.call(
                self.kube.custom.get_cluster_custom_object, *resource, name)
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise
        return found

    def apply_cluster_object(self, resource: tuple[str, str, str],
                             body: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create the object, or replace the one of its name (at its resource version, so
        a concurrent change is a conflict rather than lost); True when it was created."""
        name = str((body.get("metadata") or {}).get("name", ""))
        current = self.get_cluster_object(resource, name)
        if current is None:
            created: dict[str, Any] = self.kube.call(
                self.kube.custom.create_cluster_custom_object, *resource, dict(body))
            return created, True
        metadata = {**(body.get("metadata") or {}),
                    "resourceVersion": (current.get("metadata") or {}).get("resourceVersion")}
        replaced: dict[str, Any] = self.kube.call(
            self.kube.custom.replace_cluster_custom_object, *resource, name,
            {**body, "metadata": metadata})
        return replaced, False

    def delete_cluster_object(self, resource: tuple[str, str, str], name: str) -> bool:
        """Delete the object; False when there was none."""
        try:
            self.kube.call(self.kube.custom.delete_cluster_custom_object, *resource, name)
        except KubeApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    # --- jobs ---------------------------------------------------------------------------

    def _jobs(self, method: str, resource: tuple[str, str, str],
              namespace: str, *args: Any, **kwargs: Any) -> Any:
        """``method`` of the generic objects API of the job kind's group (the custom objects
        API; for the core group, a Pod, its counterpart on ``/api``)."""
        group, version, plural = resource
        return self.kube.call(getattr(self.kube.objects(group), method), group, version,
                              namespace, plural, *args, **kwargs)

    def create_job(self, body: Mapping[str, Any], *,
                   resource: tuple[str, str, str] = BATCH_JOBS) -> dict[str, Any]:
        """Create the job object; raises KubeApiError (``conflict`` when the name is taken)."""
        namespace = str((body.get("metadata") or {}).get("namespace", ""))
        _refuse_system_namespace(namespace)
        created: dict[str, Any] = self._jobs(
            "create_namespaced_custom_object", resource, namespace, dict(body),
            _content_type="application/json")
        return created

    def get_job(self, namespace: str, name: str, *,
                resource: tuple[str, str, str] = BATCH_JOBS) -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = self._jobs(
                "get_namespaced_custom_object", resource, namespace, name)
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise
        return job

    def patch_job(self, namespace: str, name: str, patch: Mapping[str, Any], *,
                  strategic: bool = False, resource: tuple[str, str, str] = BATCH_JOBS,
                  ) -> dict[str, Any] | None:
        """A merge patch (or a strategic-merge patch) of the job object; None if it is gone."""
        try:
            patched: dict[str, Any] = self._jobs(
                "patch_namespaced_custom_object", resource, namespace, name,
                dict(patch), _content_type=STRATEGIC_MERGE_PATCH if strategic else MERGE_PATCH)
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise
        return patched

    def suspend_job(self, namespace: str, name: str, *,
                    resource: tuple[str, str, str] = BATCH_JOBS,
                    patch: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
        """Suspend the job (``patch``, the kind's merge patch that suspends it; default
        ``spec.suspend = true``): the kind's controller deletes the job's active pods."""
        return self.patch_job(namespace, name, patch or {"spec": {"suspend": True}},
                              resource=resource)

    def delete_job(self, namespace: str, name: str, *,
                   resource: tuple[str, str, str] = BATCH_JOBS) -> bool:
        """Delete the job object and, in the background, its pods; False if it was gone."""
        try:
            self._jobs("delete_namespaced_custom_object", resource, namespace,
                       name, propagation_policy="Background")
        except KubeApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    # --- the gang Workload (Kubernetes v1.35 Workload API) -------------------------------

    def supports_gang_workloads(self) -> bool:
        """The server serves ``scheduling.k8s.io/v1alpha1`` workloads (discovery)."""
        served = self.kube.served_resources(f"{GANG_API_GROUP}/{GANG_API_VERSION}")
        return served is not None and GANG_RESOURCE in served

    def create_gang_workload(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create the Workload; None when one of that name exists already."""
        namespace = str((body.get("metadata") or {}).get("namespace", ""))
        _refuse_system_namespace(namespace)
        try:
            created: dict[str, Any] = self.kube.call(
                self.kube.custom.create_namespaced_custom_object, GANG_API_GROUP,
                GANG_API_VERSION, namespace, GANG_RESOURCE, dict(body),
                _content_type="application/json")
        except KubeApiError as exc:
            if exc.conflict:
                return None
            raise
        return created

    def get_gang_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.kube.call(
                self.kube.custom.get_namespaced_custom_object, GANG_API_GROUP, GANG_API_VERSION,
                namespace, GANG_RESOURCE, name)
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise
        return found

    def patch_gang_workload(self, namespace: str, name: str,
                            patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """A merge patch of the Workload; None if it is gone."""
        try:
            patched: dict[str, Any] = self.kube.call(
                self.kube.custom.patch_namespaced_custom_object, GANG_API_GROUP,
                GANG_API_VERSION, namespace, GANG_RESOURCE, name, dict(patch),
                _content_type=MERGE_PATCH)
        except KubeApiError as exc:
            if exc.not_found:
                return None
            raise
        return patched

    def delete_gang_workload(self, namespace: str, name: str) -> bool:
        try:
            self.kube.call(self.kube.custom.delete_namespaced_custom_object, GANG_API_GROUP,
                           GANG_API_VERSION, namespace, GANG_RESOURCE, name)
        except KubeApiError as exc:
            if exc.not_found:
                return False
            raise
        return True

    # --- list + watch -------------------------------------------------------------------

    def _list_method(self, kind: WatchKind) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        if kind.resource is not None:
            return self.kube.objects(kind.resource[0]).list_cluster_custom_object, kind.resource
        if kind is PODS:
            return self.kube.core.list_pod_for_all_namespaces, ()
        if kind is NODES:
            return self.kube.core.list_node, ()
        if kind is POD_EVENTS:
            return self.kube.core.list_event_for_all_namespaces, ()
        if kind is NAMESPACES:
            return self.kube.core.list_namespace, ()
        raise ValueError(f"unknown kind {kind.name}")

    def _list(self, kind: WatchKind, *, label_selector: str | None
              ) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``kind`` (page by page) and the list's resource version."""
        method, args = self._list_method(kind)
        options: dict[str, Any] = {"limit": _LIST_PAGE_SIZE}
        if label_selector:
            options["label_selector"] = label_selector
        if kind.field_selector:
            options["field_selector"] = kind.field_selector
        items: list[dict[str, Any]] = []
        version = ""
        while True:
            answer = self.kube.call(method, *args, **options)
            metadata = answer.get("metadata") or {}
            version = version or str(metadata.get("resourceVersion") or "")
            items.extend(item for item in answer.get("items") or () if isinstance(item, dict))
            token = metadata.get("continue")
            if not token:
                return items, version
            options["_continue"] = token

    def relist(self, kind: WatchKind, state: WatchState, *, label_selector: str | None) -> None:
        items, version = self._list(kind, label_selector=label_selector)
        state.objects = {object_key(item): kind.reduce(item) for item in items}
        state.resource_version = version

    def refresh(self, kind: WatchKind, state: WatchState, *, label_selector: str | None,
                quiet_seconds: float, max_seconds: float) -> RefreshResult:
        """Bring ``state`` up to date with the server (list, or watch from its version).

        Raises KubeUnavailable when the server cannot be reached; a stream that breaks after
        it was opened is resumed once from the last version seen, then left for the next
        refresh (the state stays consistent: only whole events are applied).
        """
        result = RefreshResult()
        if not state.resource_version:
            self.relist(kind, state, label_selector=label_selector)
            result.listed = True
            return result
        deadline = time.monotonic() + max_seconds
        for attempt in range(2):
            try:
                events, complete = self._watch(kind, state, label_selector=label_selector,
                                               quiet_seconds=quiet_seconds, deadline=deadline)
            except KubeApiError as exc:
                if not exc.gone:
                    raise
                logger.info("watch of %s on %s expired (%s): listing again", kind.name,
                            self.kube.host, exc.message)
                self.relist(kind, state, label_selector=label_selector)
                result.listed = result.expired = True
                return result
            result.events += events
            if complete or time.monotonic() >= deadline:
                break
            if attempt == 0:
                result.resumed += 1
        return result

    def refresh_all(self, watches: Sequence[tuple[WatchKind, WatchState, str | None]], *,
                    quiet_seconds: float, max_seconds: float
                    ) -> list[RefreshResult | Exception]:
        """``refresh`` of each (kind, state, label selector), all at once: each watch waits
        for its stream to go quiet, so one after another a pass would wait once per watch.

        Each refresh runs in a thread of its own and touches only its own ``state`` and the
        client, whose connection pool (urllib3's) is safe to share between threads; what it
        raises is returned in its place, in the order given, for the caller to decide."""
        if not watches:
            return []

        def one(watch: tuple[WatchKind, WatchState, str | None]) -> RefreshResult | Exception:
            kind, state, selector = watch
            try:
                return self.refresh(kind, state, label_selector=selector,
                                    quiet_seconds=quiet_seconds, max_seconds=max_seconds)
            except Exception as exc:  # handed back to the caller's thread, raised there
                return exc

        workers = min(len(watches), self.kube.max_connections)
        with ThreadPoolExecutor(max_workers=workers,
                                thread_name_prefix="kube-watch") as pool:
            return list(pool.map(one, watches))

    def _watch(self, kind: WatchKind, state: WatchState, *, label_selector: str | None,
               quiet_seconds: float, deadline: float) -> tuple[int, bool]:
        """One watch from ``state.resource_version``; returns (events applied, whether the
        stream ended normally: the server closed it, it went quiet or time ran out)."""
        method, args = self._list_method(kind)
        options: dict[str, Any] = {
            "watch": True, "resource_version": state.resource_version,
            "allow_watch_bookmarks": True,
            "timeout_seconds": max(1, math.ceil(deadline - time.monotonic())),
        }
        if label_selector:
            options["label_selector"] = label_selector
        if kind.field_selector:
            options["field_selector"] = kind.field_selector
        response = self.kube.open_stream(method, *args, **options)
        _set_read_timeout(response, quiet_seconds)
        applied = 0
        try:
            for line in _lines(response):
                try:
                    event = json.loads(line)
                except ValueError:
                    logger.warning("watch of %s on %s: not an event: %.200s", kind.name,
                                   self.kube.host, line)
                    continue
                applied += self._apply(kind, state, event)
                if time.monotonic() >= deadline:
                    return applied, True
            return applied, True
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError):
            return applied, True
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            logger.info("watch of %s on %s broke after %d events (%s): resuming from %s",
                        kind.name, self.kube.host, applied, describe(exc),
                        state.resource_version)
            return applied, False
        finally:
            response.close()
            response.release_conn()

    def _apply(self, kind: WatchKind, state: WatchState, event: Mapping[str, Any]) -> int:
        type_ = event.get("type")
        obj = event.get("object") or {}
        if type_ == "ERROR":
            code = int(obj.get("code") or 0)
            error = KubeApiError(code, str(obj.get("reason") or ""), str(obj.get("message") or ""))
            if code >= 500 or code == 0:
                raise KubeUnavailable(str(error))
            raise error
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if type_ == "BOOKMARK":
            state.resource_version = version or state.resource_version
            return 0
        key = object_key(obj)
        if type_ == "DELETED" and kind.tombstones:
            state.objects[key] = {**kind.reduce(obj), TOMBSTONE: True}
        elif type_ == "DELETED":
            state.objects.pop(key, None)
        elif type_ in ("ADDED", "MODIFIED"):
            state.objects[key] = kind.reduce(obj)
        else:
            return 0
        if version:
            state.resource_version = version
        return 1


class SystemNamespaceRefused(ValueError):
    """A write to one of Kubernetes' own namespaces, which kueueweb never makes."""


def _refuse_system_namespace(namespace: str) -> None:
    if namespace in SYSTEM_NAMESPACES:
        raise SystemNamespaceRefused(f"kueueweb does not write to namespace {namespace!r}")
