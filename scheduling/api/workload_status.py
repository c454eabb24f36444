"""``/namespaces/{ns}/workloads/{name}/status``: the status subresource that controllers
write (a JSON merge patch of ``status``).

- ``admissionChecks``: admission-check states (a manual check, or an external controller);
  admin role.
- ``nominatedClusterNames``: MultiKueue's External dispatcher (an outside controller chooses
  the worker clusters), ``multicluster.dispatch.set_nominated_clusters``; operator role in
  the workload's namespace.

Every other status field is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from kueueweb.roles import Role, role_of
from scheduling.api.workload_serializers import WorkloadSerializer, WorkloadStatusPatchSerializer
from scheduling.api.workload_views import (
    CLUSTER_PARAMETER,
    NAME_PARAMETER,
    NAMESPACE_PARAMETER,
    NOT_FOUND,
    PARSERS,
    REFUSED,
    WorkloadViewSet,
    _body,
)
from scheduling.models import Workload
from scheduling.scheduler import admission

WRITABLE_STATUS_FIELDS = ("admissionChecks", "nominatedClusterNames")
# Top-level keys a client may send back unchanged (a whole Workload read with GET).
_IGNORED_TOP_LEVEL = ("apiVersion", "kind", "metadata")

STATUS_FIELD_ERRORS = OpenApiResponse(
    description="Field errors by path: a bad value, or a field that cannot be set here.",
    examples=[
        OpenApiExample("unknown worker", value={
            "status.nominatedClusterNames": [
                "not in the workload's MultiKueueConfig: worker-9"]}),
        OpenApiExample("read-only field", value={
            "status.clusterName": ["cannot be set through the API"]}),
    ],
)


class WorkloadStatusViewSet(WorkloadViewSet):
    # Operators (in the workload's namespace) may set nominatedClusterNames; admission-check
    # states need the admin role, checked in status_update.
    write_role = Role.OPERATOR
    parser_classes = PARSERS

    @extend_schema(
        summary="Update a workload's status (admission checks, MultiKueue nomination)",
        description="A JSON merge patch of `status` (`application/merge-patch+json` or "
        "`application/json`).\n\n"
        '- `{"status": {"nominatedClusterNames": ["worker-1"]}}`: the worker clusters a '
        "MultiKueue workload is dispatched to, for an External dispatcher. Names must come "
        "from the workload's MultiKueueConfig; only while quota is reserved, the MultiKueue "
        "admission check is Pending and no worker has admitted it. Operator role in the "
        "namespace.\n"
        '- `{"status": {"admissionChecks": [{"name": "my-check", "state": "Ready", '
        '"message": "..."}]}}`: all checks Ready admits the workload; Retry evicts and '
        "requeues it; Rejected deactivates it. Admin role.\n\n"
        "Any other status field is refused (400, naming it). Answers with the workload.",
        parameters=[NAMESPACE_PARAMETER, NAME_PARAMETER, CLUSTER_PARAMETER],
        request={"application/merge-patch+json": WorkloadStatusPatchSerializer,
                 "application/json": WorkloadStatusPatchSerializer},
        responses={200: WorkloadSerializer, 400: STATUS_FIELD_ERRORS, 401: REFUSED,
                   403: REFUSED, 404: NOT_FOUND},
        examples=[OpenApiExample("External dispatcher", request_only=True,
                                 value={"status": {"nominatedClusterNames": ["worker-1"]}})],
    )
    def status_update(self, request: Request, namespace: str, name: str) -> Response:
        workload = self.get_object()
        body = _body(request.data)
        other = sorted(str(k) for k in set(body) - {"status", *_IGNORED_TOP_LEVEL})
        if other:
            raise ValidationError({key: ["cannot be changed through the status subresource"]
                                   for key in other})
        status_patch = body.get("status")
        if not isinstance(status_patch, Mapping):
            raise ValidationError({"status": ["must be an object"]})
        unknown = sorted(str(k) for k in set(status_patch) - set(WRITABLE_STATUS_FIELDS))
        if unknown:
            raise ValidationError({f"status.{key}": ["cannot be set through the API"]
                                   for key in unknown})
        if "admissionChecks" in status_patch and role_of(request.user) < Role.ADMIN:
            raise PermissionDenied("Setting status.admissionChecks needs the admin role.")
        if "nominatedClusterNames" in status_patch:
            workload = self._nominate(workload, status_patch["nominatedClusterNames"])
        if "admissionChecks" in status_patch:
            workload = self._set_checks(workload, status_patch["admissionChecks"])
        return Response(self.get_serializer(workload).data)

    @staticmethod
    def _nominate(workload: Workload, names: Any) -> Workload:
        """``multicluster.dispatch.set_nominated_clusters``; its ValidationError (keyed
        ``status.nominatedClusterNames``) becomes a 400 through the exception handler. A
        merge patch's null clears the list."""
        from multicluster import dispatch

        return dispatch.set_nominated_clusters(workload, [] if names is None else names,
                                               now=timezone.now())

    @staticmethod
    def _set_checks(workload: Workload, checks: Any) -> Workload:
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            raise ValidationError({"status.admissionChecks": ["must be a list of objects"]})
        try:
            return admission.set_admission_check_states(workload.pk, checks, now=timezone.now())
        except admission.AdmissionCheckError as exc:
            raise ValidationError({exc.path: [str(exc)]}) from exc
