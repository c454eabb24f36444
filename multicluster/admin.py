"""Admin console for clusters (with their nodes and kubeconfig), admission checks and
MultiKueue configs, and the simulated clusters' pods and pod groups.

A kubeconfig is write-only here as in the API: it can be uploaded (file or pasted text) or
cleared, and is stored encrypted through ``Cluster.set_kubeconfig``; the page only ever says
whether one is stored.

Faults are injected into a simulated cluster from the node and pod lists (actions "Lose
node", "Restore node", "Fail pod") and the cluster list (a simulated worker's "Disconnect"
from the MultiKueue hub and "Reconnect"), through ``multicluster.simulated.faults``; only the
admin role may run them. Pods and pod groups are written by the cluster's reconciler and are
read-only here.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import ValidationError
from django.db.models import Count, IntegerField, Model, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters, sensitive_variables

from kueueweb import reconcile
from kueueweb.admin import (
    ModelAdmin,
    ModelForm,
    ReadOnlyAdminMixin,
    RoleAdminMixin,
    TabularInline,
    is_kueueweb_admin,
)
from multicluster import admission
from multicluster.choices import ClusterRole, ConnectionType, PodPhase
from multicluster.kubeconfig import MAX_KUBECONFIG_BYTES, KubeconfigInvalid, read_kubeconfig
from multicluster.manifests import PROVISIONING_REQUEST_CONFIG
from multicluster.models import (
    AdmissionCheck,
    Cluster,
    GangWorkload,
    MultiKueueConfig,
    Node,
    Pod,
    PodGroup,
    ProvisioningRequestConfig,
)
from multicluster.simulated import faults
from scheduling.admin import (
    DomainObjectAdmin,
    EventsFollowTheirObjectMixin,
    condition_summary,
    count_of,
    pretty_json,
)
from scheduling.manifests.codec import Reader
from scheduling.validators import validate_dns1123_subdomain, validate_quantity

# Kueue: MultiKueueConfig.spec.clusters has 1..20 unique entries.
MAX_MULTIKUEUE_CLUSTERS = 20


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value, not even the one just submitted when the form
    is shown again with errors: a kubeconfig must not come back in a page."""

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        return super().get_context(name, None, attrs)


def parse_kubeconfig(text: str) -> str:
    """The kubeconfig as given, once it passed the check the clusters API applies."""
    try:
        read_kubeconfig(text)
    except KubeconfigInvalid as exc:
        raise ValidationError(str(exc)) from None
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
        fields = ["name", "role", "connection_type", "simulation", "create_namespaces"]

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


class FaultInjectionMixin:
    """Fault actions are for the admin role only, whatever Django permissions a user has
    (the action's ``permissions=["fault_injection"]`` asks this method)."""

    def has_fault_injection_permission(self, request: HttpRequest) -> bool:
        return is_kueueweb_admin(request)


class WebhooksForm(forms.Form):
    """What ``manage.py webhooks`` asks: install (URL and CA bundle) or remove."""

    operation = forms.ChoiceField(choices=[("install", "Install or update"),
                                           ("remove", "Remove")], initial="install")
    url = forms.CharField(required=False, help_text="Where the cluster's API server reaches "
                          "kueueweb: https://HOST:PORT (served with TLS).")
    ca_bundle = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}),
                                help_text="PEM of the CA that signed kueueweb's serving "
                                          "certificate (or its base64).")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("operation") != "install":
            return data
        try:
            data["url"] = admission.check_url(data.get("url") or "")
        except admission.WebhookSetupError as exc:
            self.add_error("url", str(exc).removeprefix("url: "))
        try:
            data["ca_bundle"] = admission.check_ca_bundle(
                admission.decode_ca_bundle(data.get("ca_bundle") or ""))
        except admission.WebhookSetupError as exc:
            self.add_error("ca_bundle", str(exc).removeprefix("ca-bundle: "))
        return data


@admin.register(Cluster)
class ClusterAdmin(FaultInjectionMixin, EventsFollowTheirObjectMixin, RoleAdminMixin, ModelAdmin):
    form = ClusterForm
    inlines = [NodeInline]
    list_display = ["name", "role", "connection_type", "active", "node_count",
                    "kubeconfig_stored"]
    list_filter = ["role", "connection_type"]
    search_fields = ["name"]
    actions = ["disconnect_clusters", "reconnect_clusters", "manage_webhooks"]
    fieldsets = [
        (None, {"fields": ["name", "role", "connection_type", "simulation",
                           "create_namespaces"]}),
        ("Kubeconfig", {"fields": ["kubeconfig_stored", "kubeconfig_file", "kubeconfig_text",
                                   "clear_kubeconfig"]}),
        ("Status", {"fields": ["active", "conditions_display", "capacity_display", "lost_since",
                               "reconnect_attempts", "next_reconnect_at", "resource_version",
                               "created_at", "updated_at"]}),
    ]
    readonly_fields = ["kubeconfig_stored", "active", "conditions_display", "capacity_display",
                       "lost_since", "reconnect_attempts", "next_reconnect_at",
                       "resource_version", "created_at", "updated_at"]

    # A kubeconfig is posted here: an error page shows neither the pasted text nor any
    # variable of the frames that handle it.
    @method_decorator(sensitive_post_parameters("kubeconfig_text"))
    @method_decorator(sensitive_variables())
    def changeform_view(self, request: HttpRequest, object_id: str | None = None,
                        form_url: str = "",
                        extra_context: dict[str, Any] | None = None) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

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

    @admin.action(description="Disconnect (simulated worker)", permissions=["fault_injection"])
    def disconnect_clusters(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        now = timezone.now()
        workers = self._simulated_workers(request, queryset)
        for cluster in workers:
            faults.disconnect_cluster(cluster, now=now)
        if workers:
            self.message_user(request, f"{len(workers)} worker(s) disconnected (Active=False); "
                                       "the hub dispatches nothing to them and re-dispatches "
                                       "what they won after workerLostTimeout.",
                              messages.SUCCESS)

    @admin.action(description="Reconnect", permissions=["fault_injection"])
    def reconnect_clusters(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        now = timezone.now()
        workers = self._simulated_workers(request, queryset)
        for cluster in workers:
            faults.reconnect_cluster(cluster, now=now)
        if workers:
            self.message_user(request, f"{len(workers)} worker(s) reconnected (Active=True).",
                              messages.SUCCESS)

    @admin.action(description="Install or remove Kueue's webhooks (Kubernetes)",
                  permissions=["change"])
    def manage_webhooks(self, request: HttpRequest,
                        queryset: QuerySet[Any]) -> HttpResponse | None:
        """Ask for the URL the cluster reaches kueueweb at and the CA bundle it trusts,
        then install (or remove) the webhook configurations on each selected cluster, as
        ``manage.py webhooks`` does."""
        clusters = list(queryset.order_by("name"))
        form = WebhooksForm(request.POST if "apply" in request.POST else None)
        if "apply" in request.POST and form.is_valid():
            remove = form.cleaned_data["operation"] == "remove"
            for cluster in clusters:
                try:
                    if remove:
                        done = admission.remove_webhooks(cluster)
                    else:
                        done = admission.install_webhooks(
                            cluster, form.cleaned_data["url"], form.cleaned_data["ca_bundle"])
                except admission.WebhookSetupError as exc:
                    self.message_user(request, str(exc), messages.ERROR)
                    continue
                self.message_user(request, f"{cluster.name}: {'; '.join(done)}",
                                  messages.SUCCESS)
            return None
        return TemplateResponse(request, "admin/multicluster/cluster/webhooks.html", {
            **self.admin_site.each_context(request),
            "title": "Kueue's admission webhooks",
            "opts": self.model._meta,
            "clusters": clusters,
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        })

    def _simulated_workers(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[Cluster]:
        """The selected simulated workers; the manager is never disconnected, and a real
        cluster's Active condition comes from its probe, which would overwrite a fault."""
        clusters = list(queryset.order_by("name"))
        skipped = [c for c in clusters if c.role != ClusterRole.WORKER
                   or c.connection_type != ConnectionType.SIMULATED]
        if skipped:
            names = ", ".join(c.name for c in skipped)
            self.message_user(request, f"Skipped {names}: only simulated worker clusters are "
                                       "disconnected or reconnected.", messages.WARNING)
        return [c for c in clusters if c not in skipped]


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


class ProvisioningRequestConfigForm(ModelForm):
    """Checked by the manifest codec, as apply and the API check it (Kueue's rules)."""

    class Meta:
        model = ProvisioningRequestConfig
        fields = ["cluster", "name", "provisioning_class_name", "parameters",
                  "managed_resources", "backoff_limit_count", "backoff_base_seconds",
                  "backoff_max_seconds", "pod_set_updates_node_selector",
                  "pod_set_merge_policy"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        spec = {
            "provisioningClassName": data.get("provisioning_class_name"),
            "parameters": data.get("parameters") or None,
            "managedResources": data.get("managed_resources") or None,
            "retryStrategy": {"backoffLimitCount": data.get("backoff_limit_count"),
                              "backoffBaseSeconds": data.get("backoff_base_seconds"),
                              "backoffMaxSeconds": data.get("backoff_max_seconds")},
            "podSetUpdates": {"nodeSelector": data.get("pod_set_updates_node_selector") or []},
            "podSetMergePolicy": data.get("pod_set_merge_policy") or None,
        }
        reader = Reader()
        PROVISIONING_REQUEST_CONFIG.read_spec({"spec": spec}, reader)
        if reader.errors:
            raise ValidationError([f"{e.path}: {e.message}" for e in reader.errors])
        return data


@admin.register(ProvisioningRequestConfig)
class ProvisioningRequestConfigAdmin(DomainObjectAdmin):
    form = ProvisioningRequestConfigForm
    list_display = ["name", "cluster", "provisioning_class_name", "backoff_limit_count"]
    list_filter = ["cluster", "provisioning_class_name"]
    search_fields = ["name", "provisioning_class_name"]
    list_select_related = ["cluster"]
    fields = ["cluster", "name", "provisioning_class_name", "parameters", "managed_resources",
              "backoff_limit_count", "backoff_base_seconds", "backoff_max_seconds",
              "pod_set_updates_node_selector", "pod_set_merge_policy",
              "uid", "resource_version", "created_at", "updated_at"]

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any,
                     change: bool) -> None:
        super().save_related(request, form, formsets, change)
        # Its checks' Active condition follows in the cluster's next pass.
        reconcile.request_cluster_sync(form.instance.cluster_id)


# --- simulated clusters: nodes, pods, pod groups, fault injection ------------------------------


def _bound_pods() -> Coalesce:
    """How many pods not yet terminated are bound to each node (pods name their node, as in
    Kubernetes, rather than pointing at a row): one correlated COUNT for the changelist."""
    counted = (
        Pod.objects.filter(cluster=OuterRef("cluster"), node_name=OuterRef("name"))
        .exclude(phase__in=(PodPhase.SUCCEEDED, PodPhase.FAILED))
        .order_by().values("cluster").annotate(n=Count("*")).values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


class NodeAdminForm(NodeForm):
    class Meta(NodeForm.Meta):
        fields = ["cluster", *NodeForm.Meta.fields]


@admin.register(Node)
class NodeAdmin(FaultInjectionMixin, RoleAdminMixin, ModelAdmin):
    """Every cluster's nodes in one list (each cluster's page also edits its own), with the
    node faults of a simulated cluster as actions."""

    form = NodeAdminForm
    list_display = ["name", "cluster", "ready", "unschedulable", "capacity_summary",
                    "pod_count"]
    list_filter = ["cluster", "ready", "unschedulable"]
    search_fields = ["name"]
    list_select_related = ["cluster"]
    actions = ["lose_nodes", "restore_nodes"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(pods_bound=_bound_pods())
        return queryset

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            # Pods name their node by cluster and name: both are its identity.
            fields.extend(["cluster", "name"])
        return fields

    def save_model(self, request: HttpRequest, obj: Node, form: ModelForm, change: bool) -> None:
        super().save_model(request, obj, form, change)
        reconcile.request_cluster_sync(obj.cluster_id)  # new room, or a cordon, for the placement

    @admin.display(description="capacity")
    def capacity_summary(self, obj: Node) -> str:
        return ", ".join(f"{resource}={quantity}"
                         for resource, quantity in sorted((obj.capacity or {}).items())) or "-"

    @admin.display(description="pods", ordering="pods_bound")
    def pod_count(self, obj: Node) -> int:
        return int(getattr(obj, "pods_bound", 0))

    @admin.action(description="Lose node (fault injection)", permissions=["fault_injection"])
    def lose_nodes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        now = timezone.now()
        nodes = self._simulated(request, queryset)
        failed = sum(faults.lose_node(node, now=now) for node in nodes)
        if nodes:
            self.message_user(request, f"{len(nodes)} node(s) lost (NotReady); {failed} pod(s) "
                                       "on them failed with reason NodeLost.", messages.SUCCESS)

    @admin.action(description="Restore node", permissions=["fault_injection"])
    def restore_nodes(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        nodes = self._simulated(request, queryset)
        for node in nodes:
            faults.restore_node(node)
        if nodes:
            self.message_user(request, f"{len(nodes)} node(s) restored (Ready).",
                              messages.SUCCESS)

    def _simulated(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[Node]:
        """The selected nodes of simulated clusters; a real cluster's nodes are observed,
        and a fault written on them would only be overwritten by its next sync."""
        nodes = list(queryset.select_related("cluster").order_by("cluster", "name"))
        real = [node for node in nodes if node.cluster.connection_type != ConnectionType.SIMULATED]
        if real:
            names = ", ".join(f"{node.cluster.name}/{node.name}" for node in real)
            self.message_user(request, f"Skipped {names}: faults are injected into simulated "
                                       "clusters only.", messages.WARNING)
        return [node for node in nodes if node not in real]


class SimulatedObjectAdmin(ReadOnlyAdminMixin, RoleAdminMixin, ModelAdmin):
    """Written by the simulated cluster's reconciler: listed and shown, never edited."""

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(Pod)
class PodAdmin(FaultInjectionMixin, SimulatedObjectAdmin):
    list_display = ["pod_name", "job", "pod_set", "node_name", "phase", "ready", "reason",
                    "created_at", "scheduled_at", "ready_at", "finished_at", "cluster"]
    list_filter = ["cluster", "phase", "ready"]
    search_fields = ["name", "namespace", "node_name", "job__name"]
    list_select_related = ["cluster", "job"]
    fields = readonly_fields = (
        "cluster", "namespace", "name", "job", "workload", "group", "pod_set", "requests",
        "node_selector", "tolerations", "scheduling_gates", "workload_ref", "node_name",
        "phase", "ready",
        "reason", "message",
        "fail", "created_at", "scheduled_at", "ready_at", "finish_at", "finished_at",
    )
    actions = ["fail_pods"]

    @admin.display(description="pod", ordering="name")
    def pod_name(self, obj: Pod) -> str:
        return f"{obj.namespace}/{obj.name}"

    @admin.action(description="Fail pod (fault injection)", permissions=["fault_injection"])
    def fail_pods(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        now = timezone.now()
        pods = list(queryset.order_by("pk"))
        failed = sum(faults.fail_pod(pod, now=now) for pod in pods)
        self.message_user(request, f"{failed} pod(s) failed (a pod not yet running fails when "
                                   "it starts).", messages.SUCCESS)
        if failed < len(pods):
            self.message_user(request, f"{len(pods) - failed} pod(s) had already terminated.",
                              messages.WARNING)


class PodGroupBoundFilter(admin.SimpleListFilter):
    """A gang is bound once ``min_count`` of its pods fit at once; until then it waits."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("bound", "Bound"), ("waiting", "Waiting")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "bound":
            return queryset.filter(bound_at__isnull=False)
        if self.value() == "waiting":
            return queryset.filter(bound_at__isnull=True)
        return queryset


@admin.register(GangWorkload)
class GangWorkloadAdmin(ReadOnlyAdminMixin, RoleAdminMixin, ModelAdmin):
    """A simulated cluster's ``scheduling.k8s.io/v1alpha1`` Workloads: written by apply
    (``manage.py apply``, ``POST /api/v1/apply``), whose checks an edit here would skip;
    deleted here (its pods then wait for it again)."""

    list_display = ["name", "namespace", "pod_groups", "controller_ref", "created_at",
                    "cluster"]
    list_filter = ["cluster"]
    search_fields = ["name", "namespace"]
    list_select_related = ["cluster"]
    fields = readonly_fields = ("cluster", "namespace", "name", "uid", "controller_ref",
                                "pod_groups", "created_at")


@admin.register(PodGroup)
class PodGroupAdmin(SimulatedObjectAdmin):
    list_display = ["workload_name", "job", "pod_set", "min_count", "pod_count", "state",
                    "waiting_since", "bound_at", "timeouts", "created_at", "cluster"]
    list_filter = ["cluster", PodGroupBoundFilter]
    search_fields = ["workload__name", "workload__namespace", "job__name", "pod_set"]
    list_select_related = ["cluster", "workload", "job"]
    fields = readonly_fields = (
        "cluster", "workload", "job", "gang", "pod_set", "replica_key", "min_count",
        "created_at", "waiting_since", "bound_at", "timeouts", "message",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            pods_total=count_of(Pod.objects.all(), "group"))
        return queryset

    @admin.display(description="workload", ordering="workload__name")
    def workload_name(self, obj: PodGroup) -> str:
        return f"{obj.workload.namespace}/{obj.workload.name}"

    @admin.display(description="pods", ordering="pods_total")
    def pod_count(self, obj: PodGroup) -> int:
        return int(getattr(obj, "pods_total", 0))

    @admin.display(description="state")
    def state(self, obj: PodGroup) -> str:
        return "Bound" if obj.bound_at is not None else "Waiting"
