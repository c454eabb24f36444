"""The log of a pod of a job on a Kubernetes cluster, as ``kubectl logs`` shows it.

The pod is named in the URL under its job's: it is read from the cluster first and must
carry the job's uid label, so that no other pod of the cluster can be read by name (404,
with the same words whether the pod is another's or gone). The log is read through the
cluster's client, bounded (``tailLines``, at most ``MAX_TAIL_LINES``; ``limitBytes``
``LIMIT_BYTES``; the client's request timeout) and shown escaped, or downloaded as text.
The API server's refusals (a container waiting to start, no previous instance) are shown
on the page with its status; a cluster that cannot be reached is a 502. A log's text is
never written to kueueweb's own log.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from multicluster.choices import ConnectionType
from multicluster.kube import job_pods as kube_pods
from multicluster.kube.errors import KubeApiError, KubeError
from scheduling.web import job_pods, slices
from scheduling.web.job_detail import get_job
from scheduling.web.workloads import reader_required

logger = logging.getLogger(__name__)

DEFAULT_TAIL_LINES = 500
MAX_TAIL_LINES = 10_000
LIMIT_BYTES = 1024 * 1024
_TRUE = ("1", "true", "on")
_FALSE = ("", "0", "false", "off")


def _flag(request: HttpRequest, name: str, errors: dict[str, str]) -> bool:
    value = (request.GET.get(name) or "").strip().lower()
    if value not in _TRUE + _FALSE:
        errors[name] = f"{name}: must be true or false, not {value[:20]!r}"
    return value in _TRUE


def _tail_lines(request: HttpRequest, errors: dict[str, str]) -> int:
    raw = (request.GET.get("tailLines") or "").strip()
    if not raw:
        return DEFAULT_TAIL_LINES
    if raw.isdigit() and 1 <= int(raw[:6]) <= MAX_TAIL_LINES and len(raw) <= 6:
        return int(raw)
    errors["tailLines"] = (
        f"tailLines: must be a whole number from 1 to {MAX_TAIL_LINES}, not {raw[:20]!r}"
    )
    return DEFAULT_TAIL_LINES


def _page(request: HttpRequest, context: dict[str, Any], status: int) -> HttpResponse:
    return render(request, "scheduling/pod_logs.html", context, status=status)


@require_GET
@reader_required
def job_pod_logs(
    request: HttpRequest, cluster: str, namespace: str, kind: str, name: str, pod: str
) -> HttpResponse:
    job = get_job(cluster, namespace, kind, name)
    label = f"{job.namespace}/{job.name}"
    if job.cluster.connection_type != ConnectionType.KUBERNETES:
        raise Http404(
            f"Logs are available on Kubernetes clusters; cluster {job.cluster.name} is simulated."
        )
    errors: dict[str, str] = {}
    tail_lines = _tail_lines(request, errors)
    previous = _flag(request, "previous", errors)
    timestamps = _flag(request, "timestamps", errors)
    context: dict[str, Any] = {
        "job": job,
        "job_url": slices.job_url(job),
        "pod_name": pod,
        "pod": None,
        "tail_lines": tail_lines,
        "previous": previous,
        "timestamps": timestamps,
        "max_tail_lines": MAX_TAIL_LINES,
        "limit_bytes": LIMIT_BYTES,
        "errors": errors,
        "error": "",
        "log": None,
    }
    missing = f"No pod {pod} of job {label} on cluster {job.cluster.name} (it may be gone)."
    try:
        found = kube_pods.read_pod(job.cluster, job.namespace, pod)
    except KubeApiError as exc:
        if exc.not_found:
            raise Http404(missing) from exc
        return _refused(request, context, exc)
    except KubeError as exc:
        return _unreachable(request, context, exc)
    if not job_pods.owns(job, found):
        raise Http404(missing)
    context["pod"] = found
    names = [c.name for c in found.containers]
    container = (request.GET.get("container") or "").strip() or found.default_container
    context["container"] = container
    if container not in names:
        errors["container"] = (
            f"container: {container[:63]!r} is not a container of pod "
            f"{pod} (choose one of {', '.join(names)})"
        )
    if errors:
        return _page(request, context, 400)
    try:
        log = kube_pods.read_log(
            job.cluster,
            found,
            container=container,
            tail_lines=tail_lines,
            limit_bytes=LIMIT_BYTES,
            previous=previous,
            timestamps=timestamps,
        )
    except KubeApiError as exc:
        return _refused(request, context, exc)
    except KubeError as exc:
        return _unreachable(request, context, exc)
    if request.GET.get("download") in _TRUE:
        suffix = "-previous" if previous else ""
        response = HttpResponse(log.text, content_type="text/plain; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="{found.name}-{container}{suffix}.log"'
        )
        return response
    context["log"] = log
    return _page(request, context, 200)


def _refused(request: HttpRequest, context: dict[str, Any], exc: KubeApiError) -> HttpResponse:
    """The API server's answer, said as it says it: its status when the request was wrong
    (400: the container is waiting to start; 403: no ``pods/log`` permission)."""
    context["error"] = f"The cluster refused to read the log: {exc.message or exc}"
    return _page(request, context, exc.status if 400 <= exc.status < 500 else 502)


def _unreachable(request: HttpRequest, context: dict[str, Any], exc: KubeError) -> HttpResponse:
    job = context["job"]
    context["error"] = f"The log could not be read from cluster {job.cluster.name}: {exc}"
    logger.warning("log of pod %s/%s: %s", job.namespace, context["pod_name"], exc)
    return _page(request, context, 502)
