"""Job submission: a manifest of an enabled job kind (a batch/v1 Job, ...) in YAML, parsed safely, submitted through
``services.submit_job``; errors are shown by field path next to the editor."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from kueueweb.models import ALL_NAMESPACES
from kueueweb.roles import Role, granted_namespaces, role_of
from scheduling import services
from scheduling.jobframework import registry
from scheduling.jobs import examples as job_examples
from scheduling.manifests import yamlio
from scheduling.models import LocalQueue
from scheduling.web.forms import JobSubmitForm, field_errors
from scheduling.web.slices import job_url
from scheduling.web.workloads import reader_required


def namespace_options(user: AbstractBaseUser | AnonymousUser) -> list[str]:
    """The namespaces to suggest: an operator's grants (every namespace with a LocalQueue
    for a ``*`` grant), and every namespace with a LocalQueue for an admin."""
    grants = granted_namespaces(user)
    if role_of(user) >= Role.ADMIN or ALL_NAMESPACES in grants:
        return sorted(set(LocalQueue.objects.values_list("namespace", flat=True)))
    return sorted(grants)


def _parse(text: str) -> tuple[Mapping[str, Any] | None, list[tuple[str, str]]]:
    try:
        documents = yamlio.load_yaml_documents(text)
    except yamlio.ManifestSyntaxError as exc:
        return None, [("manifest", str(exc))]
    if len(documents) != 1:
        return None, [("manifest", f"expected one job, found {len(documents)} documents")]
    if not isinstance(documents[0], Mapping):
        return None, [("manifest", "the manifest must be an object (a batch/v1 Job or another enabled kind)")]
    return documents[0], []


@dataclass(frozen=True)
class Example:
    """An example manifest the form offers: ``key`` names it in ``?example=``."""

    key: str
    label: str
    text: str


def examples() -> list[Example]:
    """The example manifest of every enabled kind that has one, the batch/v1 Job first; a
    kind that makes no Workload is offered with the framework that enables it (a CronJob
    with ``batch/job``)."""
    config: Mapping[str, Any] = settings.KUEUEWEB
    enabled = registry.enabled_names(config)
    found = []
    for integration in registry.all_kinds():
        text = job_examples.example_for(integration) if integration.enabled_with in enabled else None
        if text is not None:
            found.append(Example(integration.kind, f"{integration.kind} ({integration.api_version})",
                                 text))
    return sorted(found, key=lambda e: (e.key != "Job", e.key))


@require_http_methods(["GET", "POST"])
@reader_required
def job_new(request: HttpRequest) -> HttpResponse:
    if role_of(request.user) < Role.OPERATOR:
        raise PermissionDenied("Viewers cannot submit jobs.")
    options = namespace_options(request.user)
    max_bytes = yamlio.max_manifest_bytes()
    errors: list[tuple[str, str]] = []
    offered = examples()
    chosen = next((e for e in offered if e.key == request.GET.get("example")),
                  offered[0] if offered else None)
    if request.method == "POST":
        form = JobSubmitForm(request.POST, max_bytes=max_bytes)
        if form.is_valid():
            namespace = form.cleaned_data["namespace"]
            manifest, errors = _parse(form.cleaned_data["manifest"])
            if manifest is not None:
                try:
                    job = services.submit_job(manifest, namespace=namespace, user=request.user)
                except ValidationError as exc:
                    errors = field_errors(exc)
                except services.ConflictError as exc:
                    errors = [("metadata.name", str(exc))]
                except PermissionDenied as exc:
                    form.add_error("namespace", str(exc))
                else:
                    workload = job.workloads.order_by("id").first()
                    if workload is None:
                        # A kind that makes no Workload (a CronJob, a Deployment), or a pod
                        # whose group is not complete yet: its own page.
                        return HttpResponseRedirect(job_url(job))
                    return HttpResponseRedirect(reverse("ui-workload", kwargs={
                        "cluster": job.cluster.name, "namespace": workload.namespace,
                        "name": workload.name}))
        errors = [*((f"{name}" if name != "__all__" else "", str(e))
                    for name, es in form.errors.items() if name != "namespace" for e in es),
                  *errors]
    else:
        namespace = request.GET.get("namespace") or (options[0] if len(options) == 1 else "")
        initial = {"manifest": chosen.text if chosen is not None else "", "namespace": namespace}
        form = JobSubmitForm(initial=initial, max_bytes=max_bytes)
    return render(request, "scheduling/job_new.html", {
        "form": form,
        "errors": errors,
        "namespace_options": options,
        "max_bytes": max_bytes,
        "examples": offered,
        "chosen_example": chosen.key if chosen is not None else "",
        "example_texts": {e.key: e.text for e in offered},
    })
