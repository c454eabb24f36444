"""The admission webhook endpoints a Kubernetes cluster's API server calls:
``POST /webhooks/<cluster>/<path>`` with an AdmissionReview, where ``<path>`` is Kueue's
(``mutate-batch-v1-job``, ``validate--v1-pod``). No session, no CSRF token: the caller is
the API server, which verifies kueueweb's serving certificate; nothing is written."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from multicluster import admission
from scheduling.jobframework import webhook as hooks


def _not_found(message: str) -> JsonResponse:
    return JsonResponse({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                         "message": message, "reason": "NotFound", "code": 404}, status=404)


@csrf_exempt
@require_POST
def admission_review(request: HttpRequest, cluster: str, path: str) -> HttpResponse:
    found = admission.kubernetes_cluster(cluster)
    if found is None:
        return _not_found(f"no Kubernetes cluster {cluster!r}")
    hook = hooks.find_webhook(admission.webhook_kinds(), path)
    if hook is None:
        return _not_found(f"no webhook {path!r}: not one of an enabled job kind")
    content_type = (request.content_type or "").lower()
    if content_type != "application/json":
        review = admission.errored("", f"contentType={content_type}, expected "
                                   "application/json")
    else:
        review = admission.answer(found, hook, request.body)
    return HttpResponse(json.dumps(review), content_type="application/json")
