"""Admin console for clusters (with their nodes and kubeconfig), admission checks and
MultiKueue configs.

A kubeconfig is write-only here as in the API: it can be uploaded (file or pasted text) or
cleared, and is stored encrypted through ``Cluster.set_kubeconfig``; the page only ever says
whether one is stored.
"""

from __future__ import annotations

from typing import Any

import yaml
from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from kueueweb.admin import ModelAdmin, ModelForm, RoleAdminMixin, TabularInline
from multicluster.choices import ClusterRole
from multicluster.models import AdmissionCheck, Cluster, MultiKueueConfig, Node
from scheduling.admin import (
    DomainObjectAdmin,
    EventsFollowTheirObjectMixin,
    condition_summary,
    count_of,
    pretty_json,
)
from scheduling.validators import validate_dns1123_subdomain, validate_quantity

MAX_KUBECONFIG_BYTES = 1024 * 1024
# Kueue: MultiKueueConfig.spec.clusters has 1..20 unique entries.
MAX_MULTIKUEUE_CLUSTERS = 20


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value, not even the one just submitted when the form
    is shown again with errors: a kubeconfig must not come back in a page."""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        return super().get_context(name, None, attrs)


def parse_kubeconfig(text: str) -> str:
    """The kubeconfig as given, once it is known to be a YAML kubeconfig with clusters."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"not valid YAML: {exc.__class__.__name__}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("clusters"), list):
        raise ValidationError("not a kubeconfig: expected a YAML mapping with a 'clusters' list")
    return text


class ClusterForm(ModelForm):
    kubeconfig_file = forms.FileField(
        required=False, label="Upload kubeconfig",
        help_text="Stored encrypted; never shown again.",
    )
    kubeconfig_text = forms.CharField(
        required=False, label="or paste kubeconfig", widget=WriteOnlyTextarea(attrs={"rows": 6}),
        help_text="Stored encrypted; never shown again.",
    )
    clear_kubeconfig = forms.BooleanField(required=False, label="Clear the stored kubeconfig")

    class Meta:
        model = Cluster
        fields = ["name", "role", "connection_type", "simulation"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        upload = data.get("kubeconfig_file")
        pasted = (data.get("kubeconfig_text") or "").strip()
        if upload and pasted:
            raise ValidationError("Give the kubeconfig either as a file or as text, not both.")
        if (upload or pasted) and data.get("clear_kubeconfig"):
            raise ValidationError("Either upload a kubeconfig or clear it, not both.")
        text = ""
        if upload:
            if upload.size > MAX_KUBECONFIG_BYTES:
                self.add_error("kubeconfig_file", "larger than 1 MiB")
                return data
            try:
                text = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                self.add_error("kubeconfig_file", "not UTF-8 text")
                return data
        elif pasted:
            text = pasted
        if text:
            try:
                data["kubeconfig"] = parse_kubeconfig(text)
            except ValidationError as exc:
                self.add_error("kubeconfig_file" if upload else "kubeconfig_text", exc)
        return data


class NodeForm(ModelForm):
    class Meta:
        model = Node
        fields = ["name", "capacity", "labels", "taints", "unschedulable", "ready"]

    def clean_capacity(self) -> Any:
        capacity = self.cleaned_data.get("capacity")
        if not isinstance(capacity, dict):
            raise ValidationError('a map of resource names to quantities, e.g. {"cpu": "8"}')
        for resource, quantity in capacity.items():
            try:
                validate_quantity(quantity)
            except ValidationError as exc:
                raise ValidationError(f"{resource}: {exc.messages[0]}") from exc
        return capacity


class NodeInline(RoleAdminMixin, TabularInline):
    model = Node
    form = NodeForm
    extra = 0
    fields = ["name", "capacity", "labels", "taints", "unschedulable", "ready"]


@admin.register(Cluster)
class ClusterAdmin(EventsFollowTheirObjectMixin, RoleAdminMixin, ModelAdmin):
    form = ClusterForm
    inlines = [NodeInline]
    list_display = ["name", "role", "connection_type", "active", "node_count",
                    "kubeconfig_stored"]
    list_filter = ["role", "connection_type"]
    search_fields = ["name"]
    fieldsets = [
        (None, {"fields": ["name", "role", "connection_type", "simulation"]}),
        ("Kubeconfig", {"fields": ["kubeconfig_stored", "kubeconfig_file", "kubeconfig_text",
                                   "clear_kubeconfig"]}),
        ("Status", {"fields": ["active", "conditions_display", "capacity_display", "lost_since",
                               "reconnect_attempts", "next_reconnect_at", "resource_version",
                               "created_at", "updated_at"]}),
    ]
    readonly_fields = ["kubeconfig_stored", "active", "conditions_display", "capacity_display",
                       "lost_since", "reconnect_attempts", "next_reconnect_at",
                       "resource_version", "created_at", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            # A cluster's name is its identity in every domain object and MultiKueue config.
            fields.append("name")
            if obj.role == ClusterRole.MANAGER:  # type: ignore[attr-defined]
                fields.append("role")
        return fields

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # Deleting the manager would delete every queue and workload of the hub.
        if obj is not None and obj.role == ClusterRole.MANAGER:  # type: ignore[attr-defined]
            return False
        return super().has_delete_permission(request, obj)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            nodes_total=count_of(Node.objects.all(), "cluster"))
        return queryset

    def save_model(self, request: HttpRequest, obj: Cluster, form: ModelForm,
                   change: bool) -> None:
        if form.cleaned_data.get("clear_kubeconfig"):
            obj.set_kubeconfig("")
        elif form.cleaned_data.get("kubeconfig"):
            obj.set_kubeconfig(form.cleaned_data["kubeconfig"])
        super().save_model(request, obj, form, change)

    @admin.display(description="kubeconfig stored", boolean=True)
    def kubeconfig_stored(self, obj: Cluster) -> bool:
        return obj.has_kubeconfig

    @admin.display(description="Active")
    def active(self, obj: Cluster) -> str:
        return condition_summary(obj.conditions, "Active")

    @admin.display(description="nodes", ordering="nodes_total")
    def node_count(self, obj: Cluster) -> int:
        return getattr(obj, "nodes_total", 0)

    @admin.display(description="conditions")
    def conditions_display(self, obj: Cluster) -> str:
        return pretty_json(obj.conditions)

    @admin.display(description="capacity")
    def capacity_display(self, obj: Cluster) -> str:
        return pretty_json(obj.capacity)


@admin.register(AdmissionCheck)
class AdmissionCheckAdmin(DomainObjectAdmin):
    # spec.controllerName is immutable in Kueue.
    identity_fields = ("cluster", "name", "controller_name")
    list_display = ["name", "cluster", "controller_name", "active"]
    list_filter = ["cluster", "controller_name"]
    search_fields = ["name", "controller_name"]
    list_select_related = ["cluster"]
    fields = ["cluster", "name", "controller_name", "parameters", "active", "conditions_display",
              "uid", "resource_version", "created_at", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "active", "conditions_display"]

    @admin.display(description="Active")
    def active(self, obj: AdmissionCheck) -> str:
        return condition_summary(obj.conditions, "Active")

    @admin.display(description="conditions")
    def conditions_display(self, obj: AdmissionCheck) -> str:
        return pretty_json(obj.conditions)


class MultiKueueConfigForm(ModelForm):
    class Meta:
        model = MultiKueueConfig
        fields = ["cluster", "name", "clusters", "dispatcher"]

    def clean_clusters(self) -> list[str]:
        clusters = self.cleaned_data.get("clusters")
        if not isinstance(clusters, list) or not all(isinstance(c, str) for c in clusters):
            raise ValidationError('spec.clusters: a list of worker cluster names, e.g. ["worker-1"]')
        if not 1 <= len(clusters) <= MAX_MULTIKUEUE_CLUSTERS:
            raise ValidationError(f"spec.clusters: 1 to {MAX_MULTIKUEUE_CLUSTERS} clusters")
        if len(set(clusters)) != len(clusters):
            raise ValidationError("spec.clusters: names must be unique")
        for name in clusters:
            try:
                validate_dns1123_subdomain(name)
            except ValidationError as exc:
                raise ValidationError(f"spec.clusters: {exc.messages[0]}") from exc
        return clusters


@admin.register(MultiKueueConfig)
class MultiKueueConfigAdmin(DomainObjectAdmin):
    form = MultiKueueConfigForm
    list_display = ["name", "cluster", "dispatcher", "cluster_list"]
    list_filter = ["cluster", "dispatcher"]
    search_fields = ["name"]
    list_select_related = ["cluster"]
    fields = ["cluster", "name", "clusters", "dispatcher",
              "uid", "resource_version", "created_at", "updated_at"]

    @admin.display(description="worker clusters (in order)")
    def cluster_list(self, obj: MultiKueueConfig) -> str:
        return ", ".join(obj.clusters or []) or "-"
