"""Access control: which namespaces an operator may act in.

Roles are Django groups: ``viewer`` reads everything, ``operator`` also submits and acts on
workloads in the namespaces granted to them (all namespaces when granted ``*``), ``admin``
(or a superuser) also manages quotas and clusters.
"""

from django.conf import settings
from django.db import models

from scheduling.validators import validate_dns1123_label

ALL_NAMESPACES = "*"


def validate_grant_namespace(value: str) -> None:
    if value != ALL_NAMESPACES:
        validate_dns1123_label(value)


class NamespaceGrant(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="namespace_grants"
    )
    namespace = models.CharField(
        max_length=63, validators=[validate_grant_namespace], help_text='A namespace, or "*".'
    )

    class Meta:
        ordering = ["user", "namespace"]
        constraints = [
            models.UniqueConstraint(fields=["user", "namespace"], name="grant_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.user} → {self.namespace}"
