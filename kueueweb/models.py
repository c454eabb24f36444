"""Access control: which namespaces an operator may act in, and what they may submit there.

A grant gives an operator a namespace (or all of them, ``*``) and bounds the pods they may
submit in it: the Pod Security Standards level their pod templates must meet, the service
accounts (besides ``default``) the pods may run as, and the WorkloadPriorityClasses their
workloads may name. Admins are not bound by grants.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from scheduling.core import pod_security
from scheduling.validators import validate_dns1123_label, validate_dns1123_subdomain

ALL_NAMESPACES = "*"
ALL_NAMES = "*"


def validate_grant_namespace(value: str) -> None:
    if value == ALL_NAMESPACES:
        return
    validate_dns1123_label(value)
    if value in pod_security.SYSTEM_NAMESPACES:
        raise ValidationError(
            f"{value!r} is a Kubernetes system namespace: kueueweb never submits to it",
            code="system_namespace")


def split_names(value: str) -> frozenset[str]:
    """The names of a comma- or space-separated list (``"a, b c"``)."""
    return frozenset(part for part in value.replace(",", " ").split() if part)


def validate_name_list(value: str) -> None:
    """A list of object names, or ``*`` alone for all of them."""
    names = split_names(value)
    if ALL_NAMES in names:
        if len(names) > 1:
            raise ValidationError('"*" stands for every name: give it alone',
                                  code="invalid_name_list")
        return
    for name in sorted(names):
        validate_dns1123_subdomain(name)


class PodSecurityLevel(models.TextChoices):
    """The Pod Security Standards levels (Kubernetes' names)."""

    PRIVILEGED = pod_security.PRIVILEGED
    BASELINE = pod_security.BASELINE
    RESTRICTED = pod_security.RESTRICTED


class NamespaceGrant(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="namespace_grants"
    )
    namespace = models.CharField(
        max_length=63, validators=[validate_grant_namespace], help_text='A namespace, or "*".'
    )
    pod_security_level = models.CharField(
        max_length=16, choices=PodSecurityLevel.choices, default=PodSecurityLevel.BASELINE,
        help_text="The Pod Security Standards level every pod template submitted under this "
        "grant must meet.",
    )
    allowed_service_accounts = models.CharField(
        max_length=1000, blank=True, default="", validators=[validate_name_list],
        help_text='Service accounts pods may run as besides "default", comma-separated; '
        '"*" for any.',
    )
    allowed_priority_classes = models.CharField(
        max_length=1000, blank=True, default=ALL_NAMES, validators=[validate_name_list],
        help_text='WorkloadPriorityClasses workloads may name, comma-separated; "*" for all, '
        "empty for none.",
    )

    class Meta:
        ordering = ["user", "namespace"]
        constraints = [
            models.UniqueConstraint(fields=["user", "namespace"], name="grant_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} → {self.namespace}"

    @property
    def service_accounts(self) -> frozenset[str]:
        return split_names(self.allowed_service_accounts)

    @property
    def priority_classes(self) -> frozenset[str]:
        return split_names(self.allowed_priority_classes)

    def allows_priority_class(self, name: str) -> bool:
        classes = self.priority_classes
        return ALL_NAMES in classes or name in classes
