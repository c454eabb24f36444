"""``/namespaces/{ns}/workloads/{name}/status``: the status subresource that controllers
write. Admission-check states are set here (a manual check, or an external controller)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from kueueweb.roles import Role
from scheduling import admission
from scheduling.api.workload_serializers import WorkloadSerializer
from scheduling.api.workload_views import WorkloadViewSet, _body


class WorkloadStatusViewSet(WorkloadViewSet):
    # Status is written by controllers; here that is an admin (or a controller's token).
    write_role = Role.ADMIN

    @extend_schema(
        summary="Update a workload's status (admission checks)",
        description='`{"status": {"admissionChecks": [{"name": "my-check", "state": "Ready", '
        '"message": "..."}]}}`. All checks Ready admits the workload; Retry evicts and '
        "requeues it; Rejected deactivates it.",
        request=inline_serializer("WorkloadStatusPatch", {"status": serializers.DictField()}),
        responses={200: WorkloadSerializer},
    )
    def status_update(self, request: Request, namespace: str, name: str) -> Response:
        workload = self.get_object()
        status_patch = _body(request.data).get("status")
        if not isinstance(status_patch, dict):
            raise ValidationError({"status": ["must be an object"]})
        unknown = sorted(set(status_patch) - {"admissionChecks"})
        if unknown:
            raise ValidationError({f"status.{key}": ["is not writable here"] for key in unknown})
        checks: Any = status_patch.get("admissionChecks", [])
        if not isinstance(checks, list) or not all(isinstance(c, dict) for c in checks):
            raise ValidationError({"status.admissionChecks": ["must be a list of objects"]})
        try:
            workload = admission.set_admission_check_states(workload.pk, checks,
                                                            now=timezone.now())
        except admission.AdmissionCheckError as exc:
            raise ValidationError({exc.path: [str(exc)]}) from exc
        return Response(self.get_serializer(workload).data)
