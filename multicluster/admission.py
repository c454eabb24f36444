"""Kueue's admission webhooks for a Kubernetes cluster kueueweb runs: the answer to an
``AdmissionReview`` (``admission.k8s.io/v1``) the cluster's API server sends, and the
``MutatingWebhookConfiguration`` / ``ValidatingWebhookConfiguration`` that make it send them.

The rules are the job framework's (``scheduling.jobframework.webhook``); this module reads
what they need and writes nothing: whether the LocalQueue and the WorkloadPriorityClass
named ``default`` exist in the cluster's scheduling domain, and the labels of the object's
namespace, read from the cluster itself (cached for a few seconds) because an
AdmissionReview does not carry them. A namespace that cannot be read is a refusal, as in
Kueue (the webhooks fail closed).

A mutating answer is a JSONPatch (RFC 6902) from the object as sent to the object as
defaulted; a refusal carries ``status.message`` as Kueue words it, with code 403
(controller-runtime's ``Denied``); a body that is not an AdmissionReview gets an errored
answer with code 400, as controller-runtime's handler gives.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jsonpatch
from cryptography import x509
from django.conf import settings

from multicluster.choices import ConnectionType
from multicluster.kube.backend import KubeBackend
from multicluster.kube.client import client_for, config_fingerprint
from multicluster.kube.errors import KubeError
from multicluster.models import Cluster
from scheduling.jobframework import registry
from scheduling.jobframework import webhook as hooks
from scheduling.jobframework.constants import (
    DEFAULT_LOCAL_QUEUE_NAME,
    DEFAULT_PRIORITY_CLASS_NAME,
)
from scheduling.jobframework.interface import JobKind
from scheduling.jobframework.managed import ManagedJobs, namespace_labels_of
from scheduling.models import LocalQueue, WorkloadPriorityClass

logger = logging.getLogger(__name__)

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
REGISTRATION = ("admissionregistration.k8s.io", "v1")
MUTATING_RESOURCE = (*REGISTRATION, "mutatingwebhookconfigurations")
VALIDATING_RESOURCE = (*REGISTRATION, "validatingwebhookconfigurations")
MUTATING_CONFIGURATION = "kueueweb-mutating-webhook-configuration"
VALIDATING_CONFIGURATION = "kueueweb-validating-webhook-configuration"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
CLUSTER_ANNOTATION = "kueueweb.x-k8s.io/cluster"
# Where the endpoints are served (kueueweb/urls.py): /webhooks/<cluster>/<webhook path>.
URL_PREFIX = "webhooks"
NAMESPACE_CACHE_SECONDS = 10.0


def _options() -> Mapping[str, Any]:
    config: Mapping[str, Any] = settings.KUEUEWEB
    return config


def webhook_kinds(config: Mapping[str, Any] | None = None) -> list[JobKind]:
    """The kinds whose webhooks a cluster gets: the enabled and the implicitly enabled
    frameworks (a Deployment's Pods), those Kueue has webhooks for."""
    config = _options() if config is None else config
    kinds = [registry.by_framework(name) for name in registry.running_names(config)]
    return [kind for kind in kinds if kind is not None and kind.has_webhook]


def kubernetes_cluster(name: str) -> Cluster | None:
    return Cluster.objects.filter(name=name, connection_type=ConnectionType.KUBERNETES).first()


# =========================================================================================
# Answering an AdmissionReview
# =========================================================================================


class BadReview(ValueError):
    """The body is not an AdmissionReview this webhook can answer."""


def _review(uid: str, **response: Any) -> dict[str, Any]:
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND,
            "response": {"uid": uid, **response}}


def errored(uid: str, message: str, code: int = 400) -> dict[str, Any]:
    """controller-runtime's ``Errored``: not allowed, with the error as the status."""
    return _review(uid, allowed=False, status={"code": code, "message": message})


def denied(uid: str, message: str) -> dict[str, Any]:
    """controller-runtime's ``Denied``: 403 Forbidden with the message."""
    return _review(uid, allowed=False,
                   status={"code": 403, "reason": "Forbidden", "message": message})


def allowed(uid: str, patch: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if not patch:
        return _review(uid, allowed=True)
    encoded = base64.b64encode(json.dumps(patch).encode()).decode()
    return _review(uid, allowed=True, patchType="JSONPatch", patch=encoded)


@dataclass(frozen=True)
class Request:
    uid: str
    operation: str
    namespace: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


def parse_review(body: bytes, hook: hooks.Webhook) -> Request:
    """The request of an AdmissionReview for ``hook``'s kind; raises BadReview, naming the
    field that is wrong."""
    try:
        review = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadReview("the body is not JSON") from None
    if not isinstance(review, dict):
        raise BadReview("the body must be an AdmissionReview object")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != ADMISSION_KIND:
        raise BadReview(f"apiVersion and kind must be {ADMISSION_API_VERSION} "
                        f"{ADMISSION_KIND}, not {review.get('apiVersion')!r} "
                        f"{review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict):
        raise BadReview("request: must be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid: is required")
    gvk = request.get("kind")
    if not isinstance(gvk, dict):
        raise BadReview("request.kind: must be an object")
    kind = hook.kind
    if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) != (
            kind.group, kind.version, kind.kind):
        raise BadReview(f"request.kind: this webhook takes {kind.api_version} {kind.kind}, "
                        f"not {gvk.get('group', '')}/{gvk.get('version')} {gvk.get('kind')}")
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise BadReview("request.operation: is required")
    obj, old = request.get("object"), request.get("oldObject")
    if operation in (hooks.CREATE, hooks.UPDATE) and not isinstance(obj, dict):
        raise BadReview("request.object: must be an object")
    if operation == hooks.UPDATE and not isinstance(old, dict):
        raise BadReview("request.oldObject: must be an object on UPDATE")
    namespace = request.get("namespace") or (
        (obj or {}).get("metadata") or {}).get("namespace") or ""
    if not isinstance(namespace, str):
        raise BadReview("request.namespace: must be a string")
    return Request(uid, operation, namespace, obj if isinstance(obj, dict) else {},
                   old if isinstance(old, dict) else None)


_namespaces: dict[tuple[int, str, str], tuple[float, dict[str, str]]] = {}
_namespaces_lock = threading.Lock()


def namespace_labels(cluster: Cluster, namespace: str) -> dict[str, str]:
    """The labels of ``namespace`` on the cluster, read at most every few seconds; raises
    KubeError when the cluster cannot say."""
    key = (cluster.pk, config_fingerprint(cluster), namespace)
    now = time.monotonic()
    with _namespaces_lock:
        cached = _namespaces.get(key)
    if cached is not None and now - cached[0] < NAMESPACE_CACHE_SECONDS:
        return dict(cached[1])
    labels = KubeBackend(client_for(cluster)).namespace_labels(namespace)
    with _namespaces_lock:
        _namespaces[key] = (now, labels)
    return dict(labels)


def forget_namespaces() -> None:
    with _namespaces_lock:
        _namespaces.clear()


def answer(cluster: Cluster, hook: hooks.Webhook, body: bytes) -> dict[str, Any]:
    """The AdmissionReview answering ``body`` for ``hook`` on ``cluster``."""
    try:
        request = parse_review(body, hook)
    except BadReview as exc:
        return errored("", str(exc))
    if request.operation not in hook.operations:
        return allowed(request.uid)
    config = _options()
    integration, _ = registry.enabled_for(request.obj, config)
    if integration is None:
        # A kind enabled only for another framework's objects (a Deployment's Pods)
        # leaves the others alone.
        return allowed(request.uid)
    managed = ManagedJobs.from_settings(config)
    default_queue = LocalQueue.objects.filter(
        cluster=cluster, namespace=request.namespace, name=DEFAULT_LOCAL_QUEUE_NAME).exists()
    ns_labels = namespace_labels_of(request.namespace)
    if hooks.needs_namespace(hook.kind, request.obj, managed,
                             default_queue_exists=default_queue):
        try:
            ns_labels = namespace_labels(cluster, request.namespace)
        except KubeError as exc:
            logger.warning("webhook %s: namespace %r of cluster %s unreadable: %s",
                           hook.name, request.namespace, cluster.name, exc)
            return denied(request.uid, f"failed to get namespace {request.namespace!r} from "
                          f"cluster {cluster.name!r}: {exc}")
    ancestor = hooks.owner_is_integrated(request.obj, webhook_kinds(config))
    if hook.mutating:
        default_class = WorkloadPriorityClass.objects.filter(
            cluster=cluster, name=DEFAULT_PRIORITY_CLASS_NAME).exists()
        defaulted = hooks.default_object(
            hook.kind, request.obj, managed, namespace_labels=ns_labels,
            default_queue_exists=default_queue, default_priority_class_exists=default_class,
            ancestor_managed=ancestor)
        return allowed(request.uid, jsonpatch.make_patch(request.obj, defaulted).patch)
    is_managed = hooks.is_managed(hook.kind, request.obj, managed, namespace_labels=ns_labels,
                                  ancestor_managed=ancestor)
    slices = bool(config.get("ELASTIC_JOBS_VIA_WORKLOAD_SLICES"))
    if request.operation == hooks.CREATE:
        errors = hooks.validate_create(hook.kind, request.obj, namespace=request.namespace,
                                       managed=is_managed, slices_enabled=slices)
    else:
        errors = hooks.validate_update(
            hook.kind, request.old or {}, request.obj, namespace=request.namespace,
            managed=is_managed, slices_enabled=slices, default_queue_exists=default_queue)
    if errors:
        return denied(request.uid, hooks.denial_message(errors))
    return allowed(request.uid)


# =========================================================================================
# Installing the webhook configurations
# =========================================================================================


class WebhookSetupError(Exception):
    """The configurations cannot be installed or removed; the message says why."""


def check_url(url: str) -> str:
    """The base URL the cluster calls: https, a host, no query, fragment or credentials
    (the API server's rules for ``clientConfig.url``); without a trailing slash."""
    parts = urlsplit(url.strip())
    if parts.scheme != "https":
        raise WebhookSetupError(f"url: must start with https:// (the API server calls "
                                f"webhooks over HTTPS only), not {url!r}")
    if not parts.hostname:
        raise WebhookSetupError(f"url: {url!r} has no host")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise WebhookSetupError("url: may not have a query, a fragment or user info")
    try:
        _ = parts.port
    except ValueError:
        raise WebhookSetupError(f"url: {url!r} has an invalid port") from None
    return url.strip().rstrip("/")


def check_ca_bundle(pem: bytes) -> bytes:
    """The PEM certificates the cluster verifies kueueweb's serving certificate with."""
    try:
        certificates = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise WebhookSetupError("ca-bundle: is not a PEM certificate (or several)") from None
    if not certificates:
        raise WebhookSetupError("ca-bundle: holds no certificate")
    return pem


def webhook_configurations(cluster: Cluster, url: str, ca_bundle: bytes,
                           config: Mapping[str, Any] | None = None,
                           ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MutatingWebhookConfiguration and ValidatingWebhookConfiguration of the enabled
    kinds, calling ``url`` (checked) and trusting ``ca_bundle`` (PEM, checked)."""
    config = _options() if config is None else config
    base = check_url(url)
    bundle = base64.b64encode(check_ca_bundle(ca_bundle)).decode()
    kinds = webhook_kinds(config)
    if not kinds:
        raise WebhookSetupError("no enabled job kind has a webhook "
                                "(KUEUEWEB['INTEGRATIONS_FRAMEWORKS'])")
    managed = ManagedJobs.from_settings(config)
    selector = config.get("MANAGED_JOBS_NAMESPACE_SELECTOR")
    entries: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for hook in hooks.webhooks_of(kinds):
        entries[hook.mutating].append({
            "name": hook.name,
            "admissionReviewVersions": ["v1"],
            "clientConfig": {"url": f"{base}/{URL_PREFIX}/{cluster.name}/{hook.path}",
                             "caBundle": bundle},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "rules": [hook.rule()],
            "namespaceSelector": hooks.namespace_selector(hook.kind, managed, selector),
        })
    metadata = {"labels": {MANAGED_BY_LABEL: "kueueweb"},
                "annotations": {CLUSTER_ANNOTATION: cluster.name}}
    return (
        {"apiVersion": "/".join(REGISTRATION), "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": MUTATING_CONFIGURATION, **metadata}, "webhooks": entries[True]},
        {"apiVersion": "/".join(REGISTRATION), "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": VALIDATING_CONFIGURATION, **metadata},
         "webhooks": entries[False]},
    )


def _backend(cluster: Cluster) -> KubeBackend:
    if cluster.connection_type != ConnectionType.KUBERNETES:
        raise WebhookSetupError(f"cluster {cluster.name!r} is not a Kubernetes cluster "
                                f"(its connection is {cluster.connection_type})")
    try:
        return KubeBackend(client_for(cluster))
    except KubeError as exc:
        raise WebhookSetupError(f"cluster {cluster.name!r}: {exc}") from None


def install_webhooks(cluster: Cluster, url: str, ca_bundle: bytes) -> list[str]:
    """Create or update both configurations on the cluster; what was done, one line each.
    Everything is checked before the first write."""
    mutating, validating = webhook_configurations(cluster, url, ca_bundle)
    backend = _backend(cluster)
    done = []
    for resource, body in ((MUTATING_RESOURCE, mutating), (VALIDATING_RESOURCE, validating)):
        try:
            _, created = backend.apply_cluster_object(resource, body)
        except KubeError as exc:
            raise WebhookSetupError(f"{body['kind']} {body['metadata']['name']} on cluster "
                                    f"{cluster.name!r}: {exc}") from None
        names = ", ".join(w["name"] for w in body["webhooks"])
        done.append(f"{body['kind']} {body['metadata']['name']} "
                    f"{'created' if created else 'updated'} ({names})")
    return done


def remove_webhooks(cluster: Cluster) -> list[str]:
    """Delete both configurations from the cluster; what was done, one line each."""
    backend = _backend(cluster)
    done = []
    for resource, name, kind in (
            (MUTATING_RESOURCE, MUTATING_CONFIGURATION, "MutatingWebhookConfiguration"),
            (VALIDATING_RESOURCE, VALIDATING_CONFIGURATION, "ValidatingWebhookConfiguration")):
        try:
            deleted = backend.delete_cluster_object(resource, name)
        except KubeError as exc:
            raise WebhookSetupError(f"{kind} {name} on cluster {cluster.name!r}: {exc}"
                                    ) from None
        done.append(f"{kind} {name} {'deleted' if deleted else 'was not there'}")
    return done


def decode_ca_bundle(text: str) -> bytes:
    """A CA bundle given as PEM text or as its base64 (the form ``caBundle`` takes)."""
    data = text.strip().encode()
    if data.startswith(b"-----BEGIN"):
        return data
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise WebhookSetupError("ca-bundle: is neither PEM nor base64 of PEM") from None
