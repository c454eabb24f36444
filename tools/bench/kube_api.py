"""A small Kubernetes API server, for the backend tests and ``bench kube``.

No real API server can be installed where the suite runs, so ``FakeKubeAPI`` speaks the
parts of the real HTTP API the official client uses for kueueweb's calls, on 127.0.0.1 with
a free port and bearer-token auth:

- ``/version``, discovery (``/api``, ``/apis``, ``/api/v1``, ``/apis/batch/v1``,
  ``/apis/scheduling.k8s.io/v1alpha1`` while ``serve_gang_api`` is on);
- namespaces, nodes, pods, podtemplates, events, batch/v1 jobs, apps/v1 deployments,
  replicasets and statefulsets,
  ``scheduling.k8s.io/v1alpha1`` workloads, the cluster's PriorityClasses, LimitRanges and
  RuntimeClasses, and any
  custom resource once its CRD is installed (``install_crd``; before that its group/version
  and resource answer 404, as on a real server):
  create (201; 409 ``AlreadyExists``; 404 when the namespace is missing), get, list (with
  ``labelSelector`` and ``fieldSelector``), merge and strategic-merge patches, delete (``propagationPolicy``:
  a job's pods go with ``Background``/``Foreground``; jobs orphan them by default; an object
  with ``metadata.finalizers`` is only marked with a ``deletionTimestamp`` and goes once an
  update removes its last finalizer);
- the API server's Job defaulting: generated selector, controller labels on the template,
  ``spec.selector`` refused unless ``manualSelector``, ``workloadRef`` dropped from pod
  templates while the Workload API is not served;
- ``admissionregistration.k8s.io/v1`` mutating and validating webhook configurations
  (cluster-scoped, created, replaced with PUT, deleted), called as kube-apiserver calls them:
  on a CREATE, PATCH or PUT of an object their rules, ``namespaceSelector`` and
  ``objectSelector`` match, an AdmissionReview is POSTed to ``clientConfig.url`` over TLS
  verified with ``caBundle``; a mutating answer's JSONPatch is applied, a refusal is the
  webhook's code (400 at least) with ``admission webhook "<name>" denied the request:
  <message>``, and a webhook that cannot be reached fails the request (500) unless its
  ``failurePolicy`` is ``Ignore``; each call is recorded in ``admission_calls``;
- a pod's container log (``GET .../pods/{name}/log``, ``text/plain``) as the kubelet
  serves it through the API server: ``container`` (required when the pod has several),
  ``tailLines``, ``limitBytes``, ``timestamps`` and ``previous``, and the API server's 400
  answers for a container that is not the pod's, is waiting to start or has no previous
  instance; the lines are the test's (``write_log``, ``set_container_waiting``);
- a ``resourceVersion`` that increases on every write, and watches
  (``?watch=true&resourceVersion=N``) streaming newline-delimited ``ADDED`` / ``MODIFIED``
  / ``DELETED`` (and ``BOOKMARK``) events, chunked (as the watch cache does, an object a
  change brings into a selector's selection comes ``ADDED``, one it takes out ``DELETED``);
  a version older than the kept history
  gets ``410 Gone`` (a ``Status`` with reason ``Expired``, as an ``ERROR`` event or, with
  ``gone_as_http_error``, as the HTTP answer).

Test helpers play the cluster's side: ``run_job_controller`` (a minimal Job controller:
pods follow ``parallelism`` and ``suspend``), ``complete_job`` / ``fail_job`` /
``set_job_status``, ``create_pods`` / ``set_pod`` / ``delete_pods``, ``add_node``,
``run_scheduler`` (binds pods; a Workload's gang only once it can form), ``record_event``
(a pod's Event, counted again when repeated), a
minimal JobSet controller (``install_jobset_crd``, ``run_jobset_controller``,
``complete_jobset``), cluster-autoscaler's ProvisioningRequests
(``install_provisioning_request_crd``, ``provision_request``, ``fail_request``,
``expire_booking``, ``revoke_capacity``; PodTemplates
are served and go with their owner), a minimal KubeRay operator
(``install_raycluster_crd``, ``run_raycluster_controller``, ``install_rayjob_crd``,
``run_rayjob_controller``, ``complete_rayjob``), minimal apps/v1 controllers whose pods go
through the admission webhooks as they are created (``run_deployment_controller``: a
Deployment's ReplicaSet and its pods; ``run_statefulset_controller``: ordinal pods), a
minimal LeaderWorkerSet controller (``install_leaderworkerset_crd``,
``run_leaderworkerset_controller``: a leader and its workers per group), and
faults:
``compact`` (expire old versions), ``drop_next_watch`` / ``drop_watches`` (break streams),
``refuse_connections`` / ``accept_connections``. Every request is recorded in ``requests``.

The ``kube_api`` fixture (``tests/fixtures/kube_api.py``) serves it to the tests, or a real
cluster in its place; ``bench kube`` measures the backend against it.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import json
import re
import secrets
import socket
import ssl
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jsonpatch
import yaml

from scheduling.core.patch import merge_patch

TOKEN = "kueueweb-test-token"
_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
_JOB_NAME = "batch.kubernetes.io/job-name"
# The JobSet controller's pod labels.
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
TRAINING_JOB_NAME = "training.kubeflow.org/job-name"
TRAINING_REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_GROUP_LABEL = "ray.io/group"
RAY_SUBMITTER_LABEL = "kueueweb.test/rayjob-submitter"
_ACTIVE_PHASES = ("Pending", "Running")
_POD_TEMPLATE_HASH = "pod-template-hash"
_STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> tuple[str, str]:
        return self.group, self.version


NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
NODES = Resource("", "v1", "nodes", "Node", False)
PODS = Resource("", "v1", "pods", "Pod", True)
JOBS = Resource("batch", "v1", "jobs", "Job", True)
WORKLOADS = Resource("scheduling.k8s.io", "v1alpha1", "workloads", "Workload", True)
RESOURCES: tuple[Resource, ...] = (NAMESPACES, NODES, PODS, JOBS, WORKLOADS)
# core/v1 Events, recorded by the test as the cluster's components would (``record_event``).
EVENTS = Resource("", "v1", "events", "Event", True)
RESOURCES = (*RESOURCES, EVENTS)
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                             "mutatingwebhookconfigurations", "MutatingWebhookConfiguration",
                             False)
VALIDATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1",
                               "validatingwebhookconfigurations",
                               "ValidatingWebhookConfiguration", False)
RESOURCES = (*RESOURCES, MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)
# The cluster's own objects Kueue reads (priority, LimitRange defaults, pod overhead).
PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
LIMIT_RANGES = Resource("", "v1", "limitranges", "LimitRange", True)
RUNTIME_CLASSES = Resource("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
RESOURCES = (*RESOURCES, PRIORITY_CLASSES, LIMIT_RANGES, RUNTIME_CLASSES)
PODTEMPLATES = Resource("", "v1", "podtemplates", "PodTemplate", True)
RESOURCES = (*RESOURCES, PODTEMPLATES)
# apps/v1: the workload controllers whose Pods Kueue's pod integration queues
# (``run_deployment_controller``, ``run_statefulset_controller``).
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet", True)
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
RESOURCES = (*RESOURCES, DEPLOYMENTS, REPLICASETS, STATEFULSETS)
# The LeaderWorkerSet API, served once its CRD is installed, and its controller's marks on
# the Pods it makes (``run_leaderworkerset_controller``).
LEADERWORKERSETS = ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
_LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
_LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
_LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
_LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
_LWS_LEADER_NAME = "leaderworkerset.sigs.k8s.io/leader-name"
# cluster-autoscaler's ProvisioningRequest, served once its CRD is installed.
PROVISIONING_REQUESTS = ("autoscaling.x-k8s.io", "v1", "provisioningrequests",
                         "ProvisioningRequest")


@dataclass(frozen=True)
class Recorded:
    """A request as the server received it."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    authorization: str = ""
    # When it arrived (time.monotonic()): which requests were made at the same time.
    received_at: float = 0.0


@dataclass(frozen=True)
class _Event:
    seq: int
    rv: int
    plural: str
    type: str
    obj: dict[str, Any]
    # The object before a MODIFIED write: a watch with a selector tells from it whether the
    # object enters (ADDED) or leaves (DELETED) what it selects.
    previous: dict[str, Any] | None = None


class _Stale(Exception):
    """The object changed between reading it and writing its update."""


class _Abort(Exception):
    """Break the connection without ending the response (a dropped stream)."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_object(code: int, reason: str, message: str,
                  details: Mapping[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure" if code >= 400 else "Success",
                            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = dict(details)
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status_object(code, reason, message)


# --- label selectors ------------------------------------------------------------------------


def parse_selector(text: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """``a=b,c!=d,e,!f,g in (h,i),j notin (k)`` as (key, operator, values)."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    parts.append(current)
    requirements: list[tuple[str, str, tuple[str, ...]]] = []
    for raw in (p.strip() for p in parts):
        if not raw:
            continue
        match = re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", raw)
        if match:
            values = tuple(v.strip() for v in match.group(3).split(",") if v.strip())
            requirements.append((match.group(1), match.group(2), values))
        elif raw.startswith("!"):
            requirements.append((raw[1:].strip(), "!exists", ()))
        elif "!=" in raw:
            key, value = raw.split("!=", 1)
            requirements.append((key.strip(), "!=", (value.strip(),)))
        elif "=" in raw:
            key, value = raw.replace("==", "=", 1).split("=", 1)
            requirements.append((key.strip(), "=", (value.strip(),)))
        else:
            requirements.append((raw, "exists", ()))
    return requirements


def parse_field_selector(text: str) -> list[tuple[str, str, bool]]:
    """A field selector's terms: (dotted path, value, equal); ``=``, ``==`` and ``!=``."""
    terms = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        if "!=" in term:
            path, value = term.split("!=", 1)
            terms.append((path.strip(), value.strip(), False))
        else:
            path, value = term.replace("==", "=").split("=", 1)
            terms.append((path.strip(), value.strip(), True))
    return terms


def fields_match(obj: Mapping[str, Any], terms: list[tuple[str, str, bool]]) -> bool:
    for path, value, equal in terms:
        found: Any = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, Mapping) else None
        if (str(found if found is not None else "") == value) != equal:
            return False
    return True


def label_selector_matches(selector: Any, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (``matchLabels``, ``matchExpressions``); none matches all."""
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, op = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op, False)
        if not ok:
            return False
    return True


def _denial(webhook: str, code: int, reason: str, message: str) -> ApiError:
    """kube-apiserver's refusal for a webhook's ``allowed: false``
    (``webhookerrors.ToStatusErr``): the webhook's code (400 at least) and its message
    after ``admission webhook "<name>" denied the request: ``."""
    return ApiError(code, reason, f'admission webhook "{webhook}" denied the request: '
                    f"{message}")


def selector_matches(labels: Mapping[str, str], requirements: list[Any]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if op in ("exists", "!exists"):  # no values to compare
            ok = present if op == "exists" else not present
        else:
            ok = {
                "=": present and value == values[0],
                "!=": not present or value != values[0],
                "in": present and value in values,
                "notin": not present or value not in values,
            }[op]
        if not ok:
            return False
    return True


# --- patches --------------------------------------------------------------------------------


_MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
               "volumes": "name", "volumeMounts": "name", "ports": "containerPort"}


def strategic_merge_patch(target: Any, patch: Any, field_name: str = "") -> Any:
    """Kubernetes' strategic merge patch, reduced: maps merge, lists with a patch merge key
    (containers, env, volumes, … by name) merge by it, other lists are replaced."""
    if isinstance(patch, list) and isinstance(target, list) and field_name in _MERGE_KEYS:
        key = _MERGE_KEYS[field_name]
        result = [copy.deepcopy(item) for item in target]
        for item in patch:
            index = next((i for i, old in enumerate(result)
                          if isinstance(old, dict) and isinstance(item, dict)
                          and old.get(key) == item.get(key)), None)
            if index is None:
                result.append(copy.deepcopy(item))
            else:
                result[index] = strategic_merge_patch(result[index], item)
        return result
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if any(str(k).startswith("$") for k in patch):
        raise ApiError(400, "BadRequest", "patch directives are not supported by the test server")
    merged: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = strategic_merge_patch(merged.get(key), value, key)
    return merged


# =========================================================================================
# The server
# =========================================================================================


class FakeKubeAPI:
    """An in-process Kubernetes API server (see the module docstring)."""

    is_fake = True

    def __init__(self, *, history_limit: int = 10_000) -> None:
        self._cond = threading.Condition()
        # etcd's revision is never 0 on a running cluster (a watch from "0" means "from
        # anything", so a fresh server must not hand it out).
        self._rv = 1000
        self._seq = 0
        self._store: dict[str, dict[tuple[str, str], dict[str, Any]]] = {
            r.plural: {} for r in RESOURCES}
        # The served resources: the built-in ones and the custom resources whose CRD is
        # installed (``install_crd``).
        self.resources: list[Resource] = list(RESOURCES)
        self._history: list[_Event] = []
        self._compacted_rv = self._rv
        self._base_seq = 0
        self.history_limit = history_limit
        self.requests: list[Recorded] = []
        # The admission webhooks called: (webhook name, operation, allowed or the failure).
        self.admission_calls: list[tuple[str, str, str]] = []
        self.serve_gang_api = False
        self.gone_as_http_error = False
        # What the token may not do, as RBAC answers (403 Forbidden): a resource ("jobs")
        # or one verb on it ("jobs:patch"; verbs get, list, watch, create, patch, delete).
        self.forbidden: set[str] = set()
        self.token = TOKEN
        self.namespace = f"kw-{secrets.token_hex(3)}"
        self._drop_after: dict[str, list[int]] = {}
        # The propagation policy of each deletion its finalizers hold, by (plural, key).
        self._deleting: dict[tuple[str, tuple[str, str]], str] = {}
        self._drop_generation = 0
        # Container logs: (namespace, pod, container, previous) -> (timestamp, line) pairs.
        self._logs: dict[tuple[str, str, str, bool], list[tuple[str, str]]] = {}
        self._stopping = False
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        # The namespaces a kube-apiserver creates as it starts: a job in "default" needs no
        # namespace of its own, as on any real cluster.
        with self._cond:
            for name in INITIAL_NAMESPACES:
                self._create(NAMESPACES, None, {"metadata": {"name": name}})

    def require_fake(self) -> None:
        """Nothing: this is the test server (a real cluster skips the test)."""

    def install_crd(self, group: str, version: str, plural: str, kind: str, *,
                    namespaced: bool = True) -> Resource:
        """Serve a custom resource, as installing its CustomResourceDefinition does: its
        group/version appears in discovery and its objects are stored like any other (the
        plural names the store, so it must be new). Before that, the real server answers
        404 on its discovery path and its resource, as this one does."""
        resource = Resource(group, version, plural, kind, namespaced)
        with self._cond:
            if all(r.plural != plural for r in self.resources):
                self.resources.append(resource)
                self._store.setdefault(plural, {})
        return resource

    def _resource(self, plural: str) -> Resource:
        return next(r for r in self.resources if r.plural == plural)

    # --- lifecycle --------------------------------------------------------------------

    def start(self) -> FakeKubeAPI:
        self._listen(self.port)
        return self

    def _listen(self, port: int) -> None:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"kube-api-{self.port}", daemon=True)
        self._thread.start()

    def _close(self) -> None:
        with self._cond:
            self._drop_generation += 1
            self._cond.notify_all()
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def stop(self) -> None:
        self._stopping = True
        self._close()

    def refuse_connections(self) -> None:
        """The server goes away: open connections break, new ones are refused."""
        self._close()

    def accept_connections(self) -> None:
        """The server is back, on the same port."""
        if self._server is None:
            self._listen(self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> str:
        return kubeconfig_for(self.url, self.token)

    # --- store ------------------------------------------------------------------------

    def _write(self, resource: Resource, key: tuple[str, str], obj: dict[str, Any] | None,
               type_: str, *, old: dict[str, Any] | None = None) -> dict[str, Any]:
        """Store (or delete) an object under a new resource version; record the event.
        Call with the condition held."""
        self._rv += 1
        target = obj if obj is not None else copy.deepcopy(old or {})
        target.setdefault("metadata", {})["resourceVersion"] = str(self._rv)
        previous = self._store[resource.plural].get(key) if type_ == "MODIFIED" else None
        if type_ == "DELETED":
            self._store[resource.plural].pop(key, None)
        else:
            self._store[resource.plural][key] = target
        self._record(resource.plural, type_, target, self._rv, previous=previous)
        return copy.deepcopy(target)

    def _record(self, plural: str, type_: str, obj: dict[str, Any], rv: int, *,
                previous: dict[str, Any] | None = None) -> None:
        self._seq += 1
        self._history.append(_Event(self._seq, rv, plural, type_, copy.deepcopy(obj),
                                    copy.deepcopy(previous) if previous else None))
        while len(self._history) > self.history_limit:
            dropped = self._history.pop(0)
            self._compacted_rv = max(self._compacted_rv, dropped.rv)
            self._base_seq = dropped.seq
        self._cond.notify_all()

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._cond:
            found = self._store[plural].get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        with self._cond:
            return [copy.deepcopy(o) for (ns, _), o in sorted(self._store[plural].items())
                    if namespace is None or ns == namespace]

    def requests_to(self, method: str, path_prefix: str) -> list[Recorded]:
        return [r for r in list(self.requests)
                if r.method == method and r.path.startswith(path_prefix)]

    # --- helpers: the cluster's side --------------------------------------------------

    def add_node(self, name: str, *, allocatable: Mapping[str, str],
                 labels: Mapping[str, str] | None = None,
                 taints: list[dict[str, Any]] | None = None, unschedulable: bool = False,
                 ready: bool = True) -> dict[str, Any]:
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": str(uuid.uuid4()), "creationTimestamp": _now(),
                         "labels": {"kubernetes.io/hostname": name, **dict(labels or {})}},
            "spec": {"taints": list(taints or []), **({"unschedulable": True}
                                                      if unschedulable else {})},
            "status": {"allocatable": dict(allocatable), "capacity": dict(allocatable),
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }
        with self._cond:
            return self._write(NODES, ("", name), node, "ADDED")

    # --- helpers: the cluster's own PriorityClasses, LimitRanges, RuntimeClasses ---------

    def put_cluster_object(self, resource: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create ``body`` as an object of ``resource``, or replace the one of its name, as
        ``kubectl apply`` of an admin would (the namespace of a LimitRange is created)."""
        metadata = body.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "") if resource.namespaced else ""
        key = (namespace, str(metadata.get("name")))
        with self._cond:
            if namespace and ("", namespace) not in self._store["namespaces"]:
                self._create(NAMESPACES, None, {"metadata": {"name": namespace}})
            current = self._store[resource.plural].get(key)
            if current is None:
                return self._create(resource, namespace or None, dict(body))
            replaced = {**copy.deepcopy(dict(body)), "apiVersion": resource.api_version,
                        "kind": resource.kind}
            replaced["metadata"] = {**current["metadata"], **dict(metadata)}
            return self._write(resource, key, replaced, "MODIFIED")

    def delete_cluster_object(self, resource: Resource, name: str, namespace: str = "") -> None:
        with self._cond:
            old = self._store[resource.plural].get((namespace, name))
            if old is not None:
                self._write(resource, (namespace, name), None, "DELETED", old=old)

    def create_namespace(self, name: str) -> None:
        with self._cond:
            if ("", name) not in self._store["namespaces"]:
                self._create(NAMESPACES, None, {"metadata": {"name": name}})

    def _update(self, resource: Resource, namespace: str, name: str,
                change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        with self._cond:
            current = self._store[resource.plural].get((namespace, name))
            if current is None:
                raise KeyError(f"{resource.plural} {namespace}/{name} not found")
            updated = copy.deepcopy(current)
            change(updated)
            return self._write(resource, (namespace, name), updated, "MODIFIED")

    def set_status(self, plural: str, namespace: str, name: str,
                   **status: Any) -> dict[str, Any]:
        """What the controller of any resource writes to an object's status."""
        return self._update(self._resource(plural), namespace, name,
                            lambda obj: obj.setdefault("status", {}).update(status))

    def set_job_status(self, namespace: str, name: str, **status: Any) -> dict[str, Any]:
        return self._update(JOBS, namespace, name,
                            lambda job: job.setdefault("status", {}).update(status))

    def complete_job(self, namespace: str, name: str) -> dict[str, Any]:
        """What the Job controller does when enough pods succeeded: pods Succeeded, status
        succeeded, SuccessCriteriaMet and Complete."""
        job = self.get("jobs", namespace, name)
        assert job is not None, f"no job {namespace}/{name}"
        spec = job.get("spec") or {}
        succeeded = int(spec.get("completions") or spec.get("parallelism") or 1)
        for pod in self._pods_of(namespace, name):
            if pod["status"].get("phase") in _ACTIVE_PHASES:
                self.set_pod(namespace, pod["metadata"]["name"], phase="Succeeded", ready=False)
        now = _now()

        def change(obj: dict[str, Any]) -> None:
            obj["status"] = {
                **(obj.get("status") or {}), "active": 0, "ready": 0, "succeeded": succeeded,
                "completionTime": now,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True",
                     "reason": "CompletionsReached", "lastTransitionTime": now},
                    {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                     "message": "Reached expected number of succeeded pods",
                     "lastTransitionTime": now},
                ],
            }
        return self._update(JOBS, namespace, name, change)

    def fail_job(self, namespace: str, name: str,
                 message: str = "Job has reached the specified backoff limit") -> dict[str, Any]:
        for pod in self._pods_of(namespace, name):
            if pod["status"].get("phase") in _ACTIVE_PHASES:
                self.set_pod(namespace, pod["metadata"]["name"], phase="Failed", ready=False)
        now = _now()

        def change(obj: dict[str, Any]) -> None:
            status = obj.setdefault("status", {})
            status.update(active=0, ready=0, failed=int(status.get("failed", 0)) + 1)
            status["conditions"] = [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": message, "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": message, "lastTransitionTime": now},
            ]
        return self._update(JOBS, namespace, name, change)

    def _pods_of(self, namespace: str, job_name: str) -> list[dict[str, Any]]:
        return [p for p in self.objects("pods", namespace)
                if (p["metadata"].get("labels") or {}).get(_JOB_NAME) == job_name]

    def create_pods(self, namespace: str, job_name: str, count: int, *, phase: str = "Running",
                    ready: bool = True) -> list[str]:
        """Pods of a job as its controller makes them (template labels, owner reference)."""
        job = self.get("jobs", namespace, job_name)
        assert job is not None, f"no job {namespace}/{job_name}"
        template = (job.get("spec") or {}).get("template") or {}
        return [self._create_pod(job, template, phase=phase, ready=ready)
                for _ in range(count)]

    def _create_pod(self, owner: Mapping[str, Any], template: Mapping[str, Any], *,
                    phase: str, ready: bool, labels: Mapping[str, str] | None = None) -> str:
        """A pod of ``template`` (its labels, and ``labels``) owned by ``owner``."""
        metadata = owner["metadata"]
        name = f"{metadata['name']}-{secrets.token_hex(3)}"
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": metadata["namespace"],
                "labels": {**((template.get("metadata") or {}).get("labels") or {}),
                           **(labels or {})},
                "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                     "name": metadata["name"], "uid": metadata["uid"],
                                     "controller": True}],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": _pod_status(phase, ready),
        }
        with self._cond:
            self._create(PODS, metadata["namespace"], pod)
        return name

    def set_pod(self, namespace: str, name: str, *, phase: str, ready: bool) -> dict[str, Any]:
        return self._update(PODS, namespace, name,
                            lambda pod: pod.update(status=_pod_status(phase, ready)))

    def write_log(self, namespace: str, pod_name: str, *lines: str, container: str = "",
                  previous: bool = False) -> None:
        """Lines written by a container of a pod (its first container unless named; of its
        previous instance with ``previous``), as the kubelet keeps them."""
        pod = self.get("pods", namespace, pod_name)
        assert pod is not None, f"no pod {namespace}/{pod_name}"
        name = container or str(pod["spec"]["containers"][0]["name"])
        with self._cond:
            self._logs.setdefault((namespace, pod_name, name, previous), []).extend(
                (_now_nano(), line) for line in lines)

    def set_container_waiting(self, namespace: str, pod_name: str, container: str,
                              reason: str, message: str = "") -> dict[str, Any]:
        """The container does not run yet (``ContainerCreating``, ``ImagePullBackOff``)."""
        def change(pod: dict[str, Any]) -> None:
            statuses = [s for s in pod["status"].get("containerStatuses") or ()
                        if s.get("name") != container]
            waiting = {"reason": reason, **({"message": message} if message else {})}
            pod["status"]["containerStatuses"] = [*statuses, {
                "name": container, "ready": False, "restartCount": 0,
                "state": {"waiting": waiting}}]
        return self._update(PODS, namespace, pod_name, change)

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> str:
        """The text ``GET .../pods/{name}/log`` answers, or the API server's refusal."""
        pod = self.get("pods", namespace, name)
        if pod is None:
            raise _not_found(PODS, name)
        names = _container_names(pod)
        regular = [str(c.get("name")) for c in (pod.get("spec") or {}).get("containers") or ()]
        container = query.get("container") or (regular[0] if len(regular) == 1 else "")
        if not container:
            raise ApiError(400, "BadRequest", f"a container name must be specified for pod "
                           f"{name}, choose one of: [{' '.join(names)}]")
        if container not in names:
            raise ApiError(400, "BadRequest", f"container {container} is not valid for pod "
                           f"{name}")
        if not (pod.get("spec") or {}).get("nodeName"):
            raise ApiError(400, "BadRequest", f"pod {name} does not have a host assigned")
        previous = query.get("previous") in ("true", "1")
        state = next((s.get("state") or {} for s in pod["status"].get("containerStatuses")
                      or () if s.get("name") == container), {})
        waiting = state.get("waiting") or {}
        if waiting and not previous:
            raise ApiError(400, "BadRequest", f'container "{container}" in pod "{name}" is '
                           f"waiting to start: {waiting.get('reason')}")
        key = (namespace, name, container, previous)
        if previous and key not in self._logs:
            raise ApiError(400, "BadRequest", f'previous terminated container "{container}" '
                           f'in pod "{name}" not found')
        lines = list(self._logs.get(key, ()))
        if "tailLines" in query:
            tail = int(query["tailLines"])
            lines = lines[-tail:] if tail > 0 else []
        stamped = query.get("timestamps") in ("true", "1")
        text = "".join(f"{at} {line}\n" if stamped else f"{line}\n" for at, line in lines)
        if "limitBytes" in query:
            # The kubelet counts bytes, not characters: a limit may cut a character.
            text = text.encode()[:int(query["limitBytes"])].decode(errors="ignore")
        return text

    def delete_pods(self, namespace: str, job_name: str | None = None) -> int:
        pods = [p for p in self.objects("pods", namespace)
                if job_name is None
                or (p["metadata"].get("labels") or {}).get(_JOB_NAME) == job_name]
        with self._cond:
            for pod in pods:
                key = (namespace, pod["metadata"]["name"])
                self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))
        return len(pods)

    def delete(self, plural: str, namespace: str, name: str) -> None:
        resource = self._resource(plural)
        with self._cond:
            key = (namespace, name)
            self._write(resource, key, None, "DELETED", old=self._store[plural][key])

    def run_job_controller(self) -> None:
        """One pass of a minimal Job controller: an unsuspended, unfinished job has
        ``parallelism`` running and ready pods; a suspended one has none; status follows."""
        for job in self.objects("jobs"):
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            spec, status = job.get("spec") or {}, job.get("status") or {}
            if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in status.get("conditions") or ()):
                continue
            active = [p for p in self._pods_of(namespace, name)
                      if p["status"].get("phase") in _ACTIVE_PHASES]
            wanted = 0 if spec.get("suspend") else int(spec.get("parallelism", 1))
            if len(active) > wanted:
                with self._cond:
                    for pod in active[wanted:]:
                        key = (namespace, pod["metadata"]["name"])
                        self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))
                active = active[:wanted]
            elif len(active) < wanted:
                self.create_pods(namespace, name, wanted - len(active))
            count = wanted

            def change(obj: dict[str, Any], count: int = count, spec: Any = spec) -> None:
                st = obj.setdefault("status", {})
                st.update(active=count, ready=count)
                if spec.get("suspend"):
                    st.pop("startTime", None)
                    st["conditions"] = [{"type": "Suspended", "status": "True",
                                         "reason": "JobSuspended", "message": "Job suspended",
                                         "lastTransitionTime": _now()}]
                else:
                    st.setdefault("startTime", _now())
                    st["conditions"] = [c for c in st.get("conditions") or ()
                                        if c.get("type") != "Suspended"]
            if (status.get("active"), status.get("ready")) != (count, count) or (
                    bool(spec.get("suspend")) != any(c.get("type") == "Suspended"
                                                     for c in status.get("conditions") or ())):
                self._update(JOBS, namespace, name, change)

    # --- helpers: kube-scheduler and its gang plugin -----------------------------------

    def run_scheduler(self, node: str = "node-1") -> list[str]:
        """One pass of a minimal kube-scheduler: every unbound pod without scheduling gates
        is bound to ``node`` (``spec.nodeName``, ``PodScheduled``), except the pods naming a
        Workload (``spec.workloadRef``) whose gang cannot form, which wait as the
        GangScheduling plugin's PreEnqueue holds them: the Workload or its pod group
        missing, or fewer than the group's ``minCount`` pods (per replica key). Returns the
        pods bound."""
        # A pod with a scheduling gate is not scheduled until its gates are removed.
        pods = [p for p in self.objects("pods") if not (p.get("spec") or {}).get("nodeName")
                and not (p.get("spec") or {}).get("schedulingGates")
                and (p.get("status") or {}).get("phase") in _ACTIVE_PHASES]
        gangs: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
        ready: list[dict[str, Any]] = []
        for pod in pods:
            ref = (pod.get("spec") or {}).get("workloadRef")
            if not ref:
                ready.append(pod)
                continue
            key = (pod["metadata"]["namespace"], ref.get("name", ""), ref.get("podGroup", ""),
                   ref.get("podGroupReplicaKey", ""))
            gangs.setdefault(key, []).append(pod)
        for (namespace, name, group, _), members in gangs.items():
            workload = self.get("workloads", namespace, name)
            policy = next((g.get("policy") or {} for g in
                           ((workload or {}).get("spec") or {}).get("podGroups") or ()
                           if g.get("name") == group), None)
            if policy is None:
                continue
            minimum = int((policy.get("gang") or {}).get("minCount") or 1)
            if "basic" in policy or len(members) >= minimum:
                ready.extend(members)
        for pod in ready:
            def bind(obj: dict[str, Any]) -> None:
                obj.setdefault("spec", {})["nodeName"] = node
                conditions = [c for c in obj.setdefault("status", {}).get("conditions") or ()
                              if c.get("type") != "PodScheduled"]
                obj["status"]["conditions"] = [*conditions, {
                    "type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]
            self._update(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], bind)
        return [pod["metadata"]["name"] for pod in ready]

    # --- helpers: Events, as the cluster's components record them ----------------------

    def record_event(self, namespace: str, pod_name: str, reason: str, message: str, *,
                     type_: str = "Warning", component: str = "default-scheduler"
                     ) -> dict[str, Any]:
        """A core/v1 Event about a pod, as client-go's event recorder writes it: the same
        reason and message on the same object again raises the ``count`` of the event
        already there (and its ``lastTimestamp``) rather than making another."""
        pod = self.get("pods", namespace, pod_name)
        assert pod is not None, f"no pod {namespace}/{pod_name}"
        metadata = pod["metadata"]
        for event in self.objects("events", namespace):
            involved = event.get("involvedObject") or {}
            if (involved.get("uid"), event.get("reason"), event.get("message")) == (
                    metadata["uid"], reason, message):
                def again(obj: dict[str, Any]) -> None:
                    obj["count"] = int(obj.get("count") or 1) + 1
                    obj["lastTimestamp"] = _now()
                return self._update(EVENTS, namespace, event["metadata"]["name"], again)
        body = {
            "metadata": {"name": f"{pod_name}.{secrets.token_hex(8)}", "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod_name,
                               "namespace": namespace, "uid": metadata["uid"]},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "firstTimestamp": _now(), "lastTimestamp": _now(),
            "source": {"component": component},
        }
        with self._cond:
            return self._create(EVENTS, namespace, body)

    # --- helpers: the JobSet controller (with the JobSet CRD installed) ----------------

    def install_jobset_crd(self) -> Resource:
        return self.install_crd("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")

    def _jobset_pods(self, namespace: str, name: str, rj: str | None = None
                     ) -> list[dict[str, Any]]:
        return [p for p in self.objects("pods", namespace)
                if (p["metadata"].get("labels") or {}).get(JOBSET_NAME) == name
                and (rj is None or p["metadata"]["labels"].get(REPLICATED_JOB_NAME) == rj)]

    def run_jobset_controller(self) -> None:
        """One pass of a minimal JobSet controller: an unsuspended, unfinished JobSet has
        replicas × parallelism running and ready pods per replicated job (owned by the
        JobSet itself: the child Jobs are left out), a suspended one none; the status
        counts each replicated job's Jobs as ready."""
        for jobset in self.objects("jobsets"):
            namespace, name = jobset["metadata"]["namespace"], jobset["metadata"]["name"]
            spec, status = jobset.get("spec") or {}, jobset.get("status") or {}
            if status.get("terminalState"):
                continue
            statuses = []
            for rj in spec.get("replicatedJobs") or ():
                job_spec = (rj.get("template") or {}).get("spec") or {}
                replicas = int(rj.get("replicas", 1))
                wanted = 0 if spec.get("suspend") else replicas * int(
                    job_spec.get("parallelism", 1))
                active = [p for p in self._jobset_pods(namespace, name, rj["name"])
                          if p["status"].get("phase") in _ACTIVE_PHASES]
                with self._cond:
                    for pod in active[wanted:]:
                        key = (namespace, pod["metadata"]["name"])
                        self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))
                for _ in range(wanted - len(active)):
                    self._create_pod(jobset, job_spec.get("template") or {}, phase="Running",
                                     ready=True, labels={JOBSET_NAME: name,
                                                         REPLICATED_JOB_NAME: rj["name"]})
                running = 0 if spec.get("suspend") else replicas
                statuses.append({"name": rj["name"], "ready": running, "active": running,
                                 "succeeded": 0, "failed": 0,
                                 "suspended": replicas if spec.get("suspend") else 0})
            if status.get("replicatedJobsStatus") != statuses:
                def change(obj: dict[str, Any], statuses: list[Any] = statuses) -> None:
                    obj.setdefault("status", {})["replicatedJobsStatus"] = statuses
                self._update(self._resource("jobsets"), namespace, name, change)

    def complete_jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """What the JobSet controller does once every child Job completed."""
        for pod in self._jobset_pods(namespace, name):
            if pod["status"].get("phase") in _ACTIVE_PHASES:
                self.set_pod(namespace, pod["metadata"]["name"], phase="Succeeded", ready=False)
        now = _now()

        def change(obj: dict[str, Any]) -> None:
            obj["status"] = {
                **(obj.get("status") or {}), "terminalState": "Completed",
                "replicatedJobsStatus": [
                    {"name": rj["name"], "ready": 0, "active": 0, "failed": 0, "suspended": 0,
                     "succeeded": int(rj.get("replicas", 1))}
                    for rj in (obj.get("spec") or {}).get("replicatedJobs") or ()],
                "conditions": [{"type": "Completed", "status": "True",
                                "reason": "AllJobsCompleted",
                                "message": "jobset completed successfully",
                                "lastTransitionTime": now}],
            }
        return self._update(self._resource("jobsets"), namespace, name, change)

    def _training_pods(self, namespace: str, name: str, rtype: str | None = None
                       ) -> list[dict[str, Any]]:
        return [p for p in self.objects("pods", namespace)
                if (p["metadata"].get("labels") or {}).get(TRAINING_JOB_NAME) == name
                and (rtype is None or p["metadata"]["labels"].get(TRAINING_REPLICA_TYPE)
                     == rtype.lower())]

    def run_training_operator(self, plural: str, replica_specs: str) -> None:
        """One pass of a minimal Kubeflow training operator over the jobs of ``plural``
        (their replicas under ``spec.<replica_specs>``): an unsuspended (``runPolicy``),
        unfinished job has ``replicas`` running and ready pods per replica type and the
        ``Running`` condition, a suspended one no pods and no ``Running``."""
        for job in self.objects(plural):
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            spec, status = job.get("spec") or {}, job.get("status") or {}
            if any(c["type"] in ("Succeeded", "Failed") for c in status.get("conditions") or ()):
                continue
            suspended = bool((spec.get("runPolicy") or {}).get("suspend"))
            statuses = {}
            for rtype, replica in (spec.get(replica_specs) or {}).items():
                wanted = 0 if suspended else int(replica.get("replicas", 1))
                active = [p for p in self._training_pods(namespace, name, rtype)
                          if p["status"].get("phase") in _ACTIVE_PHASES]
                with self._cond:
                    for pod in active[wanted:]:
                        key = (namespace, pod["metadata"]["name"])
                        self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))
                for _ in range(wanted - len(active)):
                    self._create_pod(job, replica.get("template") or {}, phase="Running",
                                     ready=True, labels={TRAINING_JOB_NAME: name,
                                                         TRAINING_REPLICA_TYPE: rtype.lower()})
                statuses[rtype] = {"active": wanted}
            conditions = [] if suspended else [
                {"type": "Running", "status": "True", "reason": f"{job['kind']}Running",
                 "message": f"{job['kind']} {name} is running.", "lastTransitionTime": _now()}]
            if status.get("replicaStatuses") != statuses or (
                    status.get("conditions") or []) != conditions:
                def change(obj: dict[str, Any], statuses: Any = statuses,
                           conditions: Any = conditions) -> None:
                    obj["status"] = {"replicaStatuses": statuses, "conditions": conditions}
                self._update(self._resource(plural), namespace, name, change)

    def complete_training_job(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        """What the training operator does when the job succeeds: its pods Succeeded, the
        ``Succeeded`` condition."""
        counts: dict[str, int] = {}
        for pod in self._training_pods(namespace, name):
            if pod["status"].get("phase") in _ACTIVE_PHASES:
                self.set_pod(namespace, pod["metadata"]["name"], phase="Succeeded", ready=False)
                rtype = pod["metadata"]["labels"][TRAINING_REPLICA_TYPE]
                counts[rtype] = counts.get(rtype, 0) + 1
        now = _now()

        def change(obj: dict[str, Any]) -> None:
            kind, job_name = obj["kind"], obj["metadata"]["name"]
            obj["status"] = {
                "replicaStatuses": {t: {"succeeded": n} for t, n in counts.items()},
                "conditions": [
                    {"type": "Running", "status": "False", "reason": f"{kind}Succeeded",
                     "lastTransitionTime": now},
                    {"type": "Succeeded", "status": "True", "reason": f"{kind}Succeeded",
                     "message": f"{kind} {job_name} is successfully completed.",
                     "lastTransitionTime": now}]}
        return self._update(self._resource(plural), namespace, name, change)

    # --- helpers: the KubeRay operator (with the RayCluster CRD installed) --------------

    def install_raycluster_crd(self) -> Resource:
        return self.install_crd("ray.io", "v1", "rayclusters", "RayCluster")

    def install_rayjob_crd(self) -> Resource:
        return self.install_crd("ray.io", "v1", "rayjobs", "RayJob")

    def _ray_pods(self, owner: Mapping[str, Any], cluster: Mapping[str, Any],
                  suspended: bool) -> None:
        """A Ray cluster's pods as KubeRay keeps them: one running and ready head pod and
        ``replicas`` per worker group (labelled with the cluster and the group), none when
        suspended."""
        namespace, name = owner["metadata"]["namespace"], owner["metadata"]["name"]
        groups = [("headgroup", 1, (cluster.get("headGroupSpec") or {}).get("template"))] + [
            (g["groupName"], int(g.get("replicas", 1)), g.get("template"))
            for g in cluster.get("workerGroupSpecs") or ()]
        for group, replicas, template in groups:
            wanted = 0 if suspended else replicas
            active = [p for p in self.objects("pods", namespace)
                      if (p["metadata"].get("labels") or {}).get(RAY_CLUSTER_LABEL) == name
                      and p["metadata"]["labels"].get(RAY_GROUP_LABEL) == group
                      and p["status"].get("phase") in _ACTIVE_PHASES]
            with self._cond:
                for pod in active[wanted:]:
                    key = (namespace, pod["metadata"]["name"])
                    self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))
            for _ in range(wanted - len(active)):
                self._create_pod(owner, template or {}, phase="Running", ready=True,
                                 labels={RAY_CLUSTER_LABEL: name, RAY_GROUP_LABEL: group})

    def run_raycluster_controller(self) -> None:
        """One pass of a minimal KubeRay operator for RayClusters: the cluster's pods
        (``_ray_pods``); ``status.state`` is ``ready`` while it runs."""
        for cluster in self.objects("rayclusters"):
            namespace, name = cluster["metadata"]["namespace"], cluster["metadata"]["name"]
            spec, status = cluster.get("spec") or {}, cluster.get("status") or {}
            self._ray_pods(cluster, spec, bool(spec.get("suspend")))
            state = "suspended" if spec.get("suspend") else "ready"
            if status.get("state") != state:
                def change(obj: dict[str, Any], state: str = state) -> None:
                    obj.setdefault("status", {})["state"] = state
                self._update(self._resource("rayclusters"), namespace, name, change)

    def run_rayjob_controller(self) -> None:
        """One pass of a minimal KubeRay operator for RayJobs: an unfinished one has its
        cluster's pods and one submitter pod (its ``submitterPodTemplate``), a suspended one
        none; ``Running`` with a ``ready`` cluster while it runs."""
        for job in self.objects("rayjobs"):
            namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
            spec, status = job.get("spec") or {}, job.get("status") or {}
            if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
                continue
            suspended = bool(spec.get("suspend"))
            self._ray_pods(job, spec.get("rayClusterSpec") or {}, suspended)
            submitters = [p for p in self.objects("pods", namespace)
                          if (p["metadata"].get("labels") or {}).get(RAY_SUBMITTER_LABEL) == name
                          and p["status"].get("phase") in _ACTIVE_PHASES]
            if suspended:
                with self._cond:
                    for pod in submitters:
                        key = (namespace, pod["metadata"]["name"])
                        self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))
            elif not submitters and spec.get("submitterPodTemplate"):
                self._create_pod(job, spec["submitterPodTemplate"], phase="Running",
                                 ready=True, labels={RAY_SUBMITTER_LABEL: name})
            wanted = ({"jobDeploymentStatus": "Suspended", "rayClusterStatus": {}}
                      if suspended else {"jobDeploymentStatus": "Running",
                                         "jobStatus": "RUNNING",
                                         "rayClusterStatus": {"state": "ready"}})
            if any(status.get(k) != v for k, v in wanted.items()):
                def change(obj: dict[str, Any], wanted: dict[str, Any] = wanted) -> None:
                    obj.setdefault("status", {}).update(wanted)
                self._update(self._resource("rayjobs"), namespace, name, change)

    def complete_rayjob(self, namespace: str, name: str) -> dict[str, Any]:
        """The Ray job succeeded: KubeRay shuts the cluster down
        (``shutdownAfterJobFinishes``) and marks the RayJob Complete."""
        with self._cond:
            for pod in self.objects("pods", namespace):
                labels = pod["metadata"].get("labels") or {}
                if name in (labels.get(RAY_CLUSTER_LABEL), labels.get(RAY_SUBMITTER_LABEL)):
                    key = (namespace, pod["metadata"]["name"])
                    self._write(PODS, key, None, "DELETED", old=self._store["pods"].get(key))

        def change(obj: dict[str, Any]) -> None:
            obj.setdefault("status", {}).update(
                jobDeploymentStatus="Complete", jobStatus="SUCCEEDED",
                message="the Ray job succeeded", rayClusterStatus={})
        return self._update(self._resource("rayjobs"), namespace, name, change)

    # --- helpers: cluster-autoscaler's ProvisioningRequests -----------------------------

    def install_provisioning_request_crd(self) -> Resource:
        return self.install_crd(*PROVISIONING_REQUESTS)

    def _request_condition(self, namespace: str, name: str, type_: str, reason: str,
                           message: str, **status: Any) -> dict[str, Any]:
        def change(obj: dict[str, Any]) -> None:
            current = obj.setdefault("status", {})
            conditions = [c for c in current.get("conditions") or () if c.get("type") != type_]
            conditions.append({"type": type_, "status": "True", "reason": reason,
                               "message": message, "lastTransitionTime": _now(),
                               "observedGeneration": obj["metadata"].get("generation", 1)})
            current.update(status, conditions=conditions)
        return self._update(self._resource(PROVISIONING_REQUESTS[2]), namespace, name, change)

    def provision_request(self, namespace: str, name: str, *,
                          details: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The autoscaler found (or made) the capacity: Provisioned=True, with the class
        details a config's podSetUpdates may read."""
        return self._request_condition(
            namespace, name, "Provisioned", "Provisioned",
            "Provisioning Request was successfully provisioned.",
            provisioningClassDetails=dict(details or {}))

    def fail_request(self, namespace: str, name: str,
                     message: str = "Provisioning Request failed.") -> dict[str, Any]:
        return self._request_condition(namespace, name, "Failed", "Failed", message)

    def expire_booking(self, namespace: str, name: str) -> dict[str, Any]:
        """The booked capacity was not used in time (cluster-autoscaler's 10 minutes)."""
        return self._request_condition(namespace, name, "BookingExpired", "BookingExpired",
                                       "Capacity booking for the Provisioning Request has "
                                       "expired")

    def revoke_capacity(self, namespace: str, name: str) -> dict[str, Any]:
        """The provisioned nodes went away."""
        return self._request_condition(namespace, name, "CapacityRevoked", "CapacityRevoked",
                                       "Capacity for the Provisioning Request was revoked")

    # --- helpers: the Deployment, ReplicaSet and StatefulSet controllers (apps/v1) -----

    def _owned_pods(self, owner: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The live pods ``owner`` controls, oldest first."""
        uid = owner["metadata"]["uid"]
        return [p for p in self.objects("pods", owner["metadata"]["namespace"])
                if any(ref.get("uid") == uid and ref.get("controller")
                       for ref in p["metadata"].get("ownerReferences") or ())
                and (p.get("status") or {}).get("phase") in _ACTIVE_PHASES]

    def _create_owned_pod(self, owner: Mapping[str, Any], template: Mapping[str, Any],
                          name: str, labels: Mapping[str, str],
                          annotations: Mapping[str, str] | None = None) -> None:
        """A pod of ``template`` controlled by ``owner``, created as the controller creates
        it: through the admission webhooks (Kueue's pod webhook gates it there)."""
        metadata = owner["metadata"]
        namespace = metadata["namespace"]
        template_metadata = template.get("metadata") or {}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": name, "namespace": namespace,
            "labels": {**(template_metadata.get("labels") or {}), **labels},
            "annotations": {**(template_metadata.get("annotations") or {}),
                            **(annotations or {})},
            "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                 "name": metadata["name"], "uid": metadata["uid"],
                                 "controller": True, "blockOwnerDeletion": True}]},
            "spec": copy.deepcopy(template.get("spec") or {})}
        pod = self._admit(PODS, namespace, "CREATE", pod, None)
        with self._cond:
            self._create(PODS, namespace, pod)

    def _delete_pod(self, pod: Mapping[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self._cond:
            if key in self._store["pods"]:
                self._write(PODS, key, None, "DELETED", old=self._store["pods"][key])

    def run_deployment_controller(self) -> None:
        """One pass of minimal Deployment and ReplicaSet controllers: each Deployment has
        one ReplicaSet ``<name>-<hash>`` of its template (labelled ``pod-template-hash``),
        which keeps ``spec.replicas`` live pods ``<replicaset>-<suffix>``: it creates the
        missing ones and deletes the surplus, the ones not scheduled first, then the
        newest, as the ReplicaSet controller ranks them."""
        for deployment in self.objects("deployments"):
            metadata, spec = deployment["metadata"], deployment.get("spec") or {}
            namespace = metadata["namespace"]
            template = spec.get("template") or {}
            digest = hashlib.sha256(json.dumps(template, sort_keys=True).encode())
            template_hash = digest.hexdigest()[:10]
            name = f"{metadata['name']}-{template_hash}"
            replicas = int(spec.get("replicas", 1))
            replica_set = self.get("replicasets", namespace, name)
            if replica_set is None:
                labels = {**((template.get("metadata") or {}).get("labels") or {}),
                          _POD_TEMPLATE_HASH: template_hash}
                with self._cond:
                    replica_set = self._create(REPLICASETS, namespace, {"metadata": {
                        "name": name, "labels": labels,
                        "ownerReferences": [{
                            "apiVersion": "apps/v1", "kind": "Deployment",
                            "name": metadata["name"], "uid": metadata["uid"],
                            "controller": True, "blockOwnerDeletion": True}]},
                        "spec": {"replicas": replicas, "template": copy.deepcopy(template)}})
            elif int((replica_set.get("spec") or {}).get("replicas", 0)) != replicas:
                def scale(rs: dict[str, Any], replicas: int = replicas) -> None:
                    rs.setdefault("spec", {})["replicas"] = replicas
                replica_set = self._update(REPLICASETS, namespace, name, scale)
            self._sync_replica_set(replica_set, template_hash)
            live = self._owned_pods(replica_set)
            self._set_replicas(DEPLOYMENTS, deployment, live)

    def _sync_replica_set(self, replica_set: Mapping[str, Any], template_hash: str) -> None:
        spec = replica_set.get("spec") or {}
        wanted = int(spec.get("replicas", 0))
        pods = self._owned_pods(replica_set)
        if len(pods) > wanted:
            # Unscheduled pods go first, then the newest (the ReplicaSet's ranking, reduced).
            newest = sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"],
                            reverse=True)
            ranked = sorted(newest, key=lambda p: bool((p.get("spec") or {}).get("nodeName")))
            for pod in ranked[:len(pods) - wanted]:
                self._delete_pod(pod)
        for _ in range(wanted - len(pods)):
            self._create_owned_pod(
                replica_set, spec.get("template") or {},
                f"{replica_set['metadata']['name']}-{secrets.token_hex(3)}",
                {_POD_TEMPLATE_HASH: template_hash})

    def run_statefulset_controller(self) -> None:
        """One pass of a minimal StatefulSet controller (``podManagementPolicy: Parallel``):
        pods ``<name>-0`` … ``<name>-<replicas-1>``, each created when missing (a deleted
        one is replaced under its name), those past ``replicas`` deleted."""
        for statefulset in self.objects("statefulsets"):
            metadata, spec = statefulset["metadata"], statefulset.get("spec") or {}
            namespace, name = metadata["namespace"], metadata["name"]
            replicas = int(spec.get("replicas", 1))
            pods = {p["metadata"]["name"]: p for p in self._owned_pods(statefulset)}
            for ordinal in range(replicas):
                pod_name = f"{name}-{ordinal}"
                if pod_name not in pods and self.get("pods", namespace, pod_name) is None:
                    self._create_owned_pod(statefulset, spec.get("template") or {}, pod_name,
                                           {_STATEFULSET_POD_NAME: pod_name})
            for pod_name, pod in pods.items():
                if int(pod_name.rpartition("-")[2]) >= replicas:
                    self._delete_pod(pod)
            self._set_replicas(STATEFULSETS, statefulset, self._owned_pods(statefulset))

    # --- helpers: the LeaderWorkerSet controller (with the LWS CRD installed) ------------

    def install_leaderworkerset_crd(self) -> Resource:
        return self.install_crd(*LEADERWORKERSETS)

    def run_leaderworkerset_controller(self) -> None:
        """One pass of a minimal LeaderWorkerSet controller: per group ``i`` below
        ``replicas``, the leader ``<name>-<i>`` (of the leader template, else the
        workers') and the workers ``<name>-<i>-<j>``, ``j`` in 1 … ``size-1``, each created
        when missing with the controller's labels (the set's name, the group's index, the
        worker's index) and annotations (the size; a worker's leader). The real controller
        owns them through StatefulSets; here the set controls them itself."""
        for lws in self.objects(LEADERWORKERSETS[2]):
            metadata, spec = lws["metadata"], lws.get("spec") or {}
            namespace, name = metadata["namespace"], metadata["name"]
            group = spec.get("leaderWorkerTemplate") or {}
            size = int(group.get("size", 1))
            worker_template = group.get("workerTemplate") or {}
            for index in range(int(spec.get("replicas", 1))):
                leader = f"{name}-{index}"
                for worker in range(size):
                    pod_name = f"{leader}-{worker}" if worker else leader
                    if self.get("pods", namespace, pod_name) is not None:
                        continue
                    template = ((group.get("leaderTemplate") or worker_template)
                                if worker == 0 else worker_template)
                    annotations = {_LWS_SIZE: str(size)}
                    if worker:
                        annotations[_LWS_LEADER_NAME] = leader
                    self._create_owned_pod(lws, template, pod_name, {
                        _LWS_NAME: name, _LWS_GROUP_INDEX: str(index),
                        _LWS_WORKER_INDEX: str(worker)}, annotations)

    def _set_replicas(self, resource: Resource, owner: Mapping[str, Any],
                      pods: list[dict[str, Any]]) -> None:
        status = {"replicas": len(pods), "readyReplicas": sum(_pod_ready(p) for p in pods)}
        if {k: (owner.get("status") or {}).get(k) for k in status} != status:
            self._update(resource, owner["metadata"]["namespace"], owner["metadata"]["name"],
                         lambda obj: obj.setdefault("status", {}).update(status))

    # --- helpers: faults --------------------------------------------------------------

    def compact(self) -> None:
        """Forget the event history (etcd compaction): older versions get 410 Gone."""
        with self._cond:
            self._compacted_rv = self._rv
            if self._history:
                self._base_seq = self._history[-1].seq
            self._history.clear()

    def drop_next_watch(self, plural: str, *, after_events: int = 0) -> None:
        """The next watch of ``plural`` (after those already set to break) breaks after
        sending ``after_events`` events."""
        with self._cond:
            self._drop_after.setdefault(plural, []).append(after_events)

    def drop_watches(self) -> None:
        """Every open watch stream breaks now."""
        with self._cond:
            self._drop_generation += 1
            self._cond.notify_all()

    def send_bookmark(self) -> None:
        """A BOOKMARK at the current version for watches that asked for bookmarks."""
        with self._cond:
            self._record("*", "BOOKMARK", {"metadata": {"resourceVersion": str(self._rv)}},
                         self._rv)

    # --- request handling -------------------------------------------------------------

    def handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        path = url.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(request.headers.get("Content-Length") or 0)
        raw = request.rfile.read(length) if length else b""
        content_type = (request.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            _send(request, 400, status_object(400, "BadRequest", "the body is not JSON"))
            return
        self.requests.append(Recorded(method, path, query, content_type, body,
                                      request.headers.get("Authorization") or "",
                                      time.monotonic()))
        if path != "/version" and request.headers.get("Authorization") != f"Bearer {self.token}":
            _send(request, 401, status_object(401, "Unauthorized", "Unauthorized"))
            return
        try:
            answer = self._route(request, method, path, query, content_type, body)
        except ApiError as exc:
            _send(request, int(exc.status["code"]), exc.status)
            return
        if answer is not None:
            _send(request, *answer)

    def _route(self, request: BaseHTTPRequestHandler, method: str, path: str,
               query: dict[str, str], content_type: str, body: Any
               ) -> tuple[int, dict[str, Any]] | None:
        if path == "/version":
            return 200, {"major": "1", "minor": "35", "gitVersion": "v1.35.0",
                         "platform": "linux/amd64"}
        if path == "/api":
            return 200, {"kind": "APIVersions", "versions": ["v1"]}
        if path == "/apis":
            return 200, self._group_list()
        segments = path.strip("/").split("/")
        if segments[0] == "api" and len(segments) >= 2:
            group, version, rest = "", segments[1], segments[2:]
        elif segments[0] == "apis" and len(segments) >= 3:
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        served = self._served(group, version)
        if not served:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            return 200, self._resource_list(group, version, served)
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource = next((r for r in served if r.plural == rest[0]), None)
        if (resource is PODS and namespace is not None and len(rest) == 3 and rest[2] == "log"
                and method == "GET"):
            if "pods/log" in self.forbidden:
                raise ApiError(403, "Forbidden", f'pods "{rest[1]}" is forbidden: User '
                               '"system:serviceaccount:kueue-system:test" cannot get resource '
                               f'"pods/log" in API group "" in the namespace "{namespace}"')
            _send_text(request, 200, self._log(namespace, rest[1], query))
            return None
        if resource is None or len(rest) > 2:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) == 2 else None
        verb = {"GET": "list" if name is None else "get", "POST": "create", "PATCH": "patch",
                "DELETE": "delete", "PUT": "update"}.get(method, method.lower())
        if name is None and method == "GET" and query.get("watch") in ("true", "1"):
            verb = "watch"
        if {resource.plural, f"{resource.plural}:{verb}"} & self.forbidden:
            raise ApiError(403, "Forbidden", f'{resource.plural} is forbidden: User '
                           f'"system:serviceaccount:kueue-system:test" cannot {verb} '
                           f'resource "{resource.plural}"')
        if name is None:
            if method == "GET" and query.get("watch") in ("true", "1"):
                self._watch(request, resource, namespace, query)
                return None
            if method == "GET":
                return 200, self._list(resource, namespace, query)
            if method == "POST":
                body = self._admit(resource, namespace, "CREATE", body, None)
                with self._cond:
                    return 201, self._create(resource, namespace, body)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")
        key = (namespace or "", name)
        if method == "GET":
            found = self.get(resource.plural, *key)
            if found is None:
                raise _not_found(resource, name)
            return 200, found
        if method in ("PATCH", "PUT"):
            return 200, self._update_through_admission(resource, namespace, key, method,
                                                       content_type, body)
        if method == "DELETE":
            return 200, self._delete(resource, key, query, body)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _served(self, group: str, version: str) -> list[Resource]:
        if (group, version) == WORKLOADS.group_version and not self.serve_gang_api:
            return []
        return [r for r in self.resources if r.group_version == (group, version)]

    def _group_list(self) -> dict[str, Any]:
        groups = []
        for group, version in sorted({r.group_version for r in self.resources if r.group}):
            if self._served(group, version):
                gv = {"groupVersion": f"{group}/{version}", "version": version}
                groups.append({"name": group, "versions": [gv], "preferredVersion": gv})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}

    def _resource_list(self, group: str, version: str, served: list[Resource]
                       ) -> dict[str, Any]:
        verbs = ["create", "delete", "get", "list", "patch", "watch"]
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version,
                "resources": [{"name": r.plural, "singularName": r.kind.lower(),
                               "namespaced": r.namespaced, "kind": r.kind, "verbs": verbs}
                              for r in served]}

    def _list(self, resource: Resource, namespace: str | None, query: dict[str, str]
              ) -> dict[str, Any]:
        requirements = parse_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""))
        with self._cond:
            items = [copy.deepcopy(obj) for (ns, _), obj in sorted(
                        self._store[resource.plural].items())
                     if (namespace is None or ns == namespace)
                     and selector_matches((obj.get("metadata") or {}).get("labels") or {},
                                          requirements)
                     and fields_match(obj, fields)]
            version = str(self._rv)
        return {"kind": f"{resource.kind}List", "apiVersion": resource.api_version,
                "metadata": {"resourceVersion": version}, "items": items}

    def _create(self, resource: Resource, namespace: str | None, body: Any) -> dict[str, Any]:
        """Create an object (condition held)."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        obj = copy.deepcopy(body)
        metadata = obj.setdefault("metadata", {})
        if resource.namespaced:
            if metadata.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "BadRequest", "the namespace of the provided object does "
                               "not match the namespace sent on the request")
            if ("", namespace) not in self._store["namespaces"]:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
            metadata["namespace"] = namespace
        name = metadata.get("name") or (
            f"{metadata['generateName']}{secrets.token_hex(3)}"
            if metadata.get("generateName") else "")
        if not name:
            raise ApiError(422, "Invalid", "metadata.name: Required value: name or "
                           "generateName is required")
        metadata["name"] = name
        key = (namespace or "", name)
        if key in self._store[resource.plural]:
            group = f".{resource.group}" if resource.group else ""
            raise ApiError(409, "AlreadyExists",
                           f'{resource.plural}{group} "{name}" already exists')
        metadata.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource is JOBS:
            self._default_job(obj)
        elif resource is NAMESPACES:
            obj["status"] = {"phase": "Active"}
        elif resource is PODS:
            obj.setdefault("status", {"phase": "Pending"})
        return self._write(resource, key, obj, "ADDED")

    def _default_job(self, job: dict[str, Any]) -> None:
        """The API server's defaulting and validation of a new batch/v1 Job (reduced)."""
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        spec = job.setdefault("spec", {})
        template = spec.get("template")
        if not isinstance(template, dict) or not (template.get("spec") or {}).get("containers"):
            raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: '
                           "spec.template.spec.containers: Required value")
        if (template["spec"].get("restartPolicy") not in ("Never", "OnFailure")):
            raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: '
                           "spec.template.spec.restartPolicy: Required value: valid values: "
                           '"OnFailure", "Never"')
        if spec.get("selector") and not spec.get("manualSelector"):
            raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: spec.selector: '
                           "Invalid value: `selector` not auto-generated")
        labels = (template.setdefault("metadata", {}).get("labels") or {})
        for key in ("controller-uid", _CONTROLLER_UID):
            if key in labels and labels[key] != uid:
                raise ApiError(422, "Invalid", f'Job.batch "{name}" is invalid: '
                               "spec.template.metadata.labels: Invalid value: `selector` does "
                               "not match template `labels`")
        template["metadata"]["labels"] = {**labels, _CONTROLLER_UID: uid, "controller-uid": uid,
                                          _JOB_NAME: name, "job-name": name}
        spec["selector"] = {"matchLabels": {_CONTROLLER_UID: uid}}
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        if not self.serve_gang_api:
            # A field of a disabled feature gate (GenericWorkload) is dropped on create.
            template["spec"].pop("workloadRef", None)
        job["status"] = {}

    def _patched(self, resource: Resource, key: tuple[str, str], content_type: str,
                 body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The stored object and the object the patch makes of it (nothing written)."""
        if content_type == "application/merge-patch+json":
            apply: Callable[[Any, Any], Any] = merge_patch
        elif content_type == "application/strategic-merge-patch+json":
            apply = strategic_merge_patch
        else:
            raise ApiError(415, "UnsupportedMediaType",
                           f"the body of the request was in an unknown format - accepted media "
                           f"types include: application/merge-patch+json, "
                           f"application/strategic-merge-patch+json (got {content_type!r})")
        with self._cond:
            current = self._store[resource.plural].get(key)
            if current is None:
                raise _not_found(resource, key[1])
            patched = apply(copy.deepcopy(current), body)
            return copy.deepcopy(current), patched

    def _store_update(self, resource: Resource, key: tuple[str, str], current: dict[str, Any],
                      patched: dict[str, Any]) -> dict[str, Any]:
        """Write an updated object over ``current``; ``_Stale`` when it changed since it
        was read (admission webhooks run in between, without the lock)."""
        with self._cond:
            stored = self._store[resource.plural].get(key)
            if stored is None:
                raise _not_found(resource, key[1])
            if stored["metadata"].get("resourceVersion") != current["metadata"].get(
                    "resourceVersion"):
                raise _Stale
            for field_name in ("name", "namespace", "uid", "creationTimestamp"):
                patched.setdefault("metadata", {})[field_name] = current["metadata"].get(
                    field_name)
            if resource is JOBS and (patched.get("spec") or {}).get("selector") != (
                    current.get("spec") or {}).get("selector"):
                raise ApiError(422, "Invalid", f'Job.batch "{key[1]}" is invalid: '
                               "spec.selector: Invalid value: field is immutable")
            if patched.get("spec") != current.get("spec"):
                patched["metadata"]["generation"] = int(
                    current["metadata"].get("generation", 1)) + 1
            deleting = current["metadata"].get("deletionTimestamp")
            if not deleting:
                return self._write(resource, key, patched, "MODIFIED")
            for field_name in ("deletionTimestamp", "deletionGracePeriodSeconds"):
                patched["metadata"][field_name] = current["metadata"].get(field_name)
            if patched["metadata"].get("finalizers"):
                return self._write(resource, key, patched, "MODIFIED")
            # The last finalizer is gone: the deletion asked for completes.
            policy = self._deleting.pop((resource.plural, key), None)
            updated = self._write(resource, key, patched, "MODIFIED")
            self._write(resource, key, None, "DELETED", old=patched)
            if policy in ("Background", "Foreground"):
                self._collect_dependents(current["metadata"]["uid"])
            return updated

    def _delete(self, resource: Resource, key: tuple[str, str], query: dict[str, str],
                body: Any) -> dict[str, Any]:
        policy = query.get("propagationPolicy") or (
            body.get("propagationPolicy") if isinstance(body, dict) else None)
        if policy is None:
            # batch/v1 Jobs orphan their pods unless told otherwise (legacy default).
            policy = "Orphan" if resource is JOBS else "Background"
        with self._cond:
            current = self._store[resource.plural].get(key)
            if current is None:
                raise _not_found(resource, key[1])
            if current["metadata"].get("finalizers"):
                # Finalizers hold the object, marked for deletion, until the last of them is
                # removed (``_store_update`` deletes it then).
                if not current["metadata"].get("deletionTimestamp"):
                    marked = copy.deepcopy(current)
                    marked["metadata"]["deletionTimestamp"] = _now()
                    marked["metadata"]["deletionGracePeriodSeconds"] = 0
                    self._deleting[(resource.plural, key)] = policy
                    current = self._write(resource, key, marked, "MODIFIED")
                return copy.deepcopy(current)
            self._write(resource, key, None, "DELETED", old=current)
            uid = current["metadata"]["uid"]
            if resource is NAMESPACES:
                for plural, objects in self._store.items():
                    for other_key in [k for k in objects if k[0] == key[1]]:
                        other = self._resource(plural)
                        self._write(other, other_key, None, "DELETED", old=objects[other_key])
            elif policy in ("Background", "Foreground"):
                self._collect_dependents(uid)
        if resource is PODS:
            # The pod registry answers with the deleted pod, as the client expects.
            return current
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": key[1], "group": resource.group, "kind": resource.plural,
                            "uid": uid}}

    def _collect_dependents(self, uid: str) -> None:
        """The garbage collector after the object ``uid`` went: a dependent of it goes once
        none of its owners is left; one that has another owner only loses the reference to
        it (a pod group's gang Workload is owned by every member pod)."""
        live = {o["metadata"].get("uid") for objects in self._store.values()
                for o in objects.values()}
        # A JobSet's Jobs too, and a Deployment's ReplicaSets.
        for plural in ("pods", "workloads", "podtemplates", "jobs", "replicasets"):
            dependent = self._resource(plural)
            for owned_key, owned in list(self._store[plural].items()):
                refs = owned["metadata"].get("ownerReferences") or ()
                if not any(ref.get("uid") == uid for ref in refs):
                    continue
                others = [ref for ref in refs if ref.get("uid") != uid]
                if not any(ref.get("uid") in live for ref in others):
                    self._write(dependent, owned_key, None, "DELETED", old=owned)
                    continue
                kept = copy.deepcopy(owned)
                kept["metadata"]["ownerReferences"] = others
                self._write(dependent, owned_key, kept, "MODIFIED")

    # --- admission webhooks (admissionregistration.k8s.io/v1) ---------------------------

    def _replaced(self, resource: Resource, key: tuple[str, str],
                  body: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """A PUT (replace): the stored object and the body, which must name its resource
        version when it gives one."""
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be an object")
        with self._cond:
            current = self._store[resource.plural].get(key)
            if current is None:
                raise _not_found(resource, key[1])
            given = (body.get("metadata") or {}).get("resourceVersion")
            if given and given != current["metadata"].get("resourceVersion"):
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                               f'{resource.plural} "{key[1]}": the object has been modified; '
                               "please apply your changes to the latest version and try again")
            replaced = copy.deepcopy(body)
            replaced["apiVersion"], replaced["kind"] = resource.api_version, resource.kind
            return copy.deepcopy(current), replaced

    def _update_through_admission(self, resource: Resource, namespace: str | None,
                                  key: tuple[str, str], method: str, content_type: str,
                                  body: Any) -> dict[str, Any]:
        """A PATCH or PUT: the new object, through the admission webhooks, written unless
        the object changed meanwhile (a patch is then applied again, as the API server
        retries it; a replace is a conflict)."""
        for _ in range(10):
            current, updated = (self._patched(resource, key, content_type, body)
                                if method == "PATCH" else self._replaced(resource, key, body))
            for field_name in ("name", "namespace", "uid", "creationTimestamp"):
                updated.setdefault("metadata", {})[field_name] = current["metadata"].get(
                    field_name)
            updated = self._admit(resource, namespace, "UPDATE", updated, current)
            try:
                return self._store_update(resource, key, current, updated)
            except _Stale:
                if method == "PUT":
                    raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on '
                                   f'{resource.plural} "{key[1]}": the object has been '
                                   "modified; please apply your changes to the latest "
                                   "version and try again") from None
        raise ApiError(409, "Conflict", f'{resource.plural} "{key[1]}" kept changing')

    def _webhooks(self, resource: Resource) -> list[dict[str, Any]]:
        """The webhooks of the stored configurations, by configuration name then order."""
        with self._cond:
            configs = [copy.deepcopy(o) for _, o in sorted(self._store[resource.plural].items())]
        return [hook for config in configs for hook in config.get("webhooks") or ()
                if isinstance(hook, dict)]

    def _namespace_labels(self, namespace: str | None) -> dict[str, str]:
        if not namespace:
            return {}
        found = self.get("namespaces", "", namespace) or {}
        return {**((found.get("metadata") or {}).get("labels") or {}),
                "kubernetes.io/metadata.name": namespace}

    @staticmethod
    def _rule_matches(hook: Mapping[str, Any], resource: Resource, operation: str) -> bool:
        def has(values: Any, value: str) -> bool:
            return isinstance(values, list) and ("*" in values or value in values)

        return any(isinstance(rule, dict) and has(rule.get("apiGroups"), resource.group)
                   and has(rule.get("apiVersions"), resource.version)
                   and has(rule.get("operations"), operation)
                   and has(rule.get("resources"), resource.plural)
                   for rule in hook.get("rules") or ())

    def _admit(self, resource: Resource, namespace: str | None, operation: str, obj: Any,
               old: dict[str, Any] | None) -> Any:
        """Run the installed admission webhooks on a CREATE or UPDATE, as kube-apiserver
        does: the mutating ones in order, each JSONPatch applied, then the validating ones;
        a refusal or an unreachable webhook whose failurePolicy is Fail refuses the
        request. Called without the lock (a webhook may read from this server)."""
        if resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS) or not isinstance(obj, dict):
            return obj
        mutating, validating = self._webhooks(MUTATING_WEBHOOKS), self._webhooks(
            VALIDATING_WEBHOOKS)
        if not mutating and not validating:
            return obj
        obj = copy.deepcopy(obj)
        obj["apiVersion"], obj["kind"] = resource.api_version, resource.kind
        if resource.namespaced and namespace:
            obj.setdefault("metadata", {})["namespace"] = namespace
        ns_labels = self._namespace_labels(namespace)
        for hook, is_mutating in [*((h, True) for h in mutating),
                                  *((h, False) for h in validating)]:
            if not self._rule_matches(hook, resource, operation):
                continue
            if not label_selector_matches(hook.get("namespaceSelector"), ns_labels):
                continue
            labels = [(o.get("metadata") or {}).get("labels") or {}
                      for o in (obj, old) if o is not None]
            if not any(label_selector_matches(hook.get("objectSelector"), lab)
                       for lab in labels):
                continue
            response = self._call_webhook(hook, resource, namespace, operation, obj, old)
            if response is None:
                continue
            name = str(hook.get("name"))
            if not response.get("allowed"):
                status = dict(response.get("status") or {})
                code = int(status.get("code") or 0)
                message = status.get("message") or "without explanation"
                self.admission_calls.append((name, operation, "denied"))
                raise _denial(name, max(code, 400), str(status.get("reason") or ""),
                              str(message))
            self.admission_calls.append((name, operation, "allowed"))
            if is_mutating and response.get("patch"):
                if response.get("patchType") != "JSONPatch":
                    raise ApiError(500, "InternalError", f'Internal error occurred: webhook '
                                   f'"{name}" answered an unknown patchType')
                operations = json.loads(base64.b64decode(response["patch"]))
                obj = jsonpatch.apply_patch(obj, operations)
        return obj

    def _call_webhook(self, hook: Mapping[str, Any], resource: Resource,
                      namespace: str | None, operation: str, obj: dict[str, Any],
                      old: dict[str, Any] | None) -> dict[str, Any] | None:
        """POST an AdmissionReview to the webhook's URL over TLS verified with its
        caBundle; its response, or None when it failed and its failurePolicy is Ignore."""
        name = str(hook.get("name"))
        config = hook.get("clientConfig") or {}
        url = str(config.get("url") or "")
        timeout = int(hook.get("timeoutSeconds") or 10)
        uid = str(uuid.uuid4())
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": uid,
            "kind": {"group": resource.group, "version": resource.version,
                     "kind": resource.kind},
            "resource": {"group": resource.group, "version": resource.version,
                         "resource": resource.plural},
            "name": (obj.get("metadata") or {}).get("name", ""),
            "namespace": namespace or "", "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kueue-system:test"},
            "object": obj, "oldObject": old, "dryRun": False}}
        try:
            context = ssl.create_default_context(
                cadata=base64.b64decode(config.get("caBundle") or "").decode() or None)
            request = urllib.request.Request(
                f"{url}?timeout={timeout}s", data=json.dumps(review).encode(), method="POST",
                headers={"Content-Type": "application/json", "Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=timeout, context=context) as answer:
                data = json.loads(answer.read())
            response = data.get("response") if isinstance(data, dict) else None
            if not isinstance(response, dict) or response.get("uid") != uid:
                raise ValueError("the answer is not an AdmissionReview response to the request")
        except (OSError, ValueError) as exc:
            self.admission_calls.append((name, operation, f"failed: {exc}"))
            if hook.get("failurePolicy", "Fail") == "Ignore":
                return None
            raise ApiError(500, "InternalError", f'Internal error occurred: failed calling '
                           f'webhook "{name}": failed to call webhook: Post "{url}'
                           f'?timeout={timeout}s": {exc}') from None
        return response

    # --- watch ------------------------------------------------------------------------

    def _watch(self, request: BaseHTTPRequestHandler, resource: Resource,
               namespace: str | None, query: dict[str, str]) -> None:
        requirements = parse_selector(query.get("labelSelector", ""))
        fields = parse_field_selector(query.get("fieldSelector", ""))
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout = min(float(query.get("timeoutSeconds") or 1800), 1800.0)
        deadline = time.monotonic() + timeout
        with self._cond:
            start = query.get("resourceVersion", "")
            initial: list[tuple[str, dict[str, Any]]] = []
            if start in ("", "0"):
                cursor = self._seq
                initial = [("ADDED", copy.deepcopy(o))
                           for (ns, _), o in sorted(self._store[resource.plural].items())
                           if namespace is None or ns == namespace]
                expired = False
            else:
                start_rv = int(start)
                expired = start_rv < self._compacted_rv
                cursor = self._base_seq
                for event in self._history:
                    if event.rv > start_rv:
                        break
                    cursor = event.seq
            drops = self._drop_after.get(resource.plural) or []
            drop_after = drops.pop(0) if drops else None
            generation = self._drop_generation
            current = self._rv
        if expired:
            status = status_object(410, "Expired",
                                   f"too old resource version: {start} ({current})")
            if self.gone_as_http_error:
                _send(request, 410, status)
                return
            _start_stream(request)
            _chunk(request, {"type": "ERROR", "object": status})
            _end_stream(request)
            return
        _start_stream(request)
        sent = 0

        def emit(type_: str, obj: dict[str, Any]) -> None:
            nonlocal sent
            if drop_after is not None and sent >= drop_after:
                raise _Abort
            _chunk(request, {"type": type_, "object": obj})
            sent += 1

        def check_drop() -> None:
            if drop_after is not None and sent >= drop_after:
                raise _Abort

        try:
            for type_, obj in initial:
                if selector_matches((obj.get("metadata") or {}).get("labels") or {},
                                    requirements) and fields_match(obj, fields):
                    emit(type_, obj)
            while True:
                check_drop()
                with self._cond:
                    while True:
                        pending = [e for e in self._history if e.seq > cursor]
                        remaining = deadline - time.monotonic()
                        if (pending or remaining <= 0 or self._stopping
                                or self._drop_generation != generation):
                            break
                        self._cond.wait(min(remaining, 0.5))
                    broken = self._stopping or self._drop_generation != generation
                for event in pending:
                    cursor = event.seq
                    if event.type == "BOOKMARK":
                        if bookmarks:
                            emit("BOOKMARK", {"kind": resource.kind,
                                              "apiVersion": resource.api_version, **event.obj})
                        continue
                    if event.plural != resource.plural:
                        continue
                    metadata = event.obj.get("metadata") or {}
                    if namespace is not None and metadata.get("namespace") != namespace:
                        continue
                    matches = (selector_matches(metadata.get("labels") or {}, requirements)
                               and fields_match(event.obj, fields))
                    before = event.previous
                    matched = before is None or (
                        selector_matches((before.get("metadata") or {}).get("labels") or {},
                                         requirements) and fields_match(before, fields))
                    # As the watch cache does: an object a change brings into the selection
                    # is ADDED, one it takes out of it DELETED.
                    if matches:
                        emit(event.type if matched else "ADDED", event.obj)
                    elif matched and before is not None:
                        emit("DELETED", event.obj)
                if broken:
                    raise _Abort
                if time.monotonic() >= deadline:
                    _end_stream(request)
                    return
        except _Abort:
            request.close_connection = True
            with contextlib.suppress(OSError):
                request.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            request.close_connection = True


def _not_found(resource: Resource, name: str) -> ApiError:
    group = f".{resource.group}" if resource.group else ""
    return ApiError(404, "NotFound", f'{resource.plural}{group} "{name}" not found')


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or ())


def _pod_status(phase: str, ready: bool) -> dict[str, Any]:
    return {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}


def _send(request: BaseHTTPRequestHandler, code: int, body: Mapping[str, Any]) -> None:
    data = json.dumps(body).encode()
    request.send_response(code)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def _send_text(request: BaseHTTPRequestHandler, code: int, text: str) -> None:
    data = text.encode()
    request.send_response(code)
    request.send_header("Content-Type", "text/plain")
    request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    request.wfile.write(data)


def _container_names(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [str(c.get("name")) for key in ("initContainers", "containers")
            for c in spec.get(key) or ()]


def _now_nano() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def _start_stream(request: BaseHTTPRequestHandler) -> None:
    request.send_response(200)
    request.send_header("Content-Type", "application/json")
    request.send_header("Transfer-Encoding", "chunked")
    request.end_headers()
    request.wfile.flush()


def _chunk(request: BaseHTTPRequestHandler, event: Mapping[str, Any]) -> None:
    data = json.dumps(event).encode() + b"\n"
    request.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    request.wfile.flush()


def _end_stream(request: BaseHTTPRequestHandler) -> None:
    request.wfile.write(b"0\r\n\r\n")
    request.wfile.flush()


def _handler_for(api: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # As kube-apiserver (Go turns Nagle's algorithm off on every connection): the
            # headers and the body go out as two writes, and with Nagle the body waited
            # for the client's delayed ACK, 40 ms on every kept-alive request.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with api._cond:
                api._connections.add(self.connection)

        def finish(self) -> None:
            with api._cond:
                api._connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

        def do_GET(self) -> None:  # noqa: N802
            api.handle(self, "GET")

        def do_POST(self) -> None:  # noqa: N802
            api.handle(self, "POST")

        def do_PATCH(self) -> None:  # noqa: N802
            api.handle(self, "PATCH")

        def do_DELETE(self) -> None:  # noqa: N802
            api.handle(self, "DELETE")

        def do_PUT(self) -> None:  # noqa: N802
            api.handle(self, "PUT")

    return Handler


def kubeconfig_for(server: str, token: str, *, name: str = "kueueweb-test") -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    })
