"""Admin console for quotas and queues: flavors, cohorts, cluster queues with their flavor
quotas on one page, local queues, priority classes; workloads, jobs and events read-mostly.

Quota edits go through ``scheduling.validation``, the rules the REST API and the YAML importer
use, so the console refuses exactly what the API refuses, with Kueue's field paths.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, IntegerField, Model, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.html import format_html

from kueueweb.admin import (
    InlineFormSet,
    ModelAdmin,
    ModelForm,
    ReadOnlyAdminMixin,
    RoleAdminMixin,
    TabularInline,
)
from scheduling import services
from scheduling.choices import WorkloadPhase
from scheduling.models import (
    ClusterQueue,
    Cohort,
    Event,
    FlavorQuota,
    Job,
    LimitRange,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    RuntimeClass,
    SavedView,
    Workload,
    WorkloadPriorityClass,
)
from scheduling.scheduler import admission
from scheduling.validation import (
    FieldError,
    cohort_cycle,
    resource_groups_from_rows,
    validate_fair_sharing_weight,
    validate_fungibility,
    validate_preemption,
    validate_resource_groups,
)
from scheduling.workload.conditions import timestamp

# --- helpers ------------------------------------------------------------------------------


def count_of(queryset: QuerySet[Any], field: str) -> Coalesce:
    """A correlated COUNT of ``queryset`` rows whose ``field`` is the outer row: one query
    for the whole changelist instead of one per row."""
    counted = (
        queryset.filter(**{field: OuterRef("pk")})
        .order_by()
        .values(field)
        .annotate(n=Count("*"))
        .values("n")
    )
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def pretty_json(value: Any) -> str:
    if value in (None, "", [], {}):
        return "-"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


def condition_summary(conditions: list[dict[str, Any]] | None, kind: str) -> str:
    for condition in conditions or []:
        if condition.get("type") == kind:
            reason = condition.get("reason")
            return f"{condition.get('status')} ({reason})" if reason else str(condition.get("status"))
    return "-"


class DomainChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A choice of a Kueue object, labelled with its cluster: names repeat across domains."""

    def label_from_instance(self, obj: Model) -> str:
        return f"{obj} ({obj.cluster})"  # type: ignore[attr-defined]


def domain_choice(db_field: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``formfield_for_foreignkey`` arguments that label each choice with its cluster."""
    queryset = db_field.remote_field.model._default_manager.select_related("cluster")
    return {**kwargs, "queryset": queryset, "form_class": DomainChoiceField}


def raise_field_errors(errors: list[FieldError], field_of: dict[str, str]) -> None:
    """Attach Kueue field errors to the form fields they concern (``field_of`` maps a Kueue
    path to a form field; the rest become form-wide errors)."""
    if not errors:
        return
    by_field: dict[str, list[str]] = {}
    for error in errors:
        field = field_of.get(error.path)
        by_field.setdefault(field or "__all__", []).append(f"{error.path}: {error.message}")
    raise ValidationError(by_field)


class EventsFollowTheirObjectMixin:
    """Events cannot be deleted on their own, but they go with the object they are about
    (as Kubernetes garbage-collects them): their permission does not block a delete."""

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(  # type: ignore[misc]
            objs, request)
        perms_needed.discard(Event._meta.verbose_name)
        return deleted, counts, perms_needed, protected


class DomainObjectAdmin(EventsFollowTheirObjectMixin, RoleAdminMixin, ModelAdmin):
    """An object of a scheduling domain: its cluster and name are fixed once created, as a
    Kubernetes object's name and cluster are."""

    identity_fields: tuple[str, ...] = ("cluster", "name")
    meta_fields: tuple[str, ...] = ("uid", "resource_version", "created_at", "updated_at")
    domain_fks: tuple[str, ...] = ()
    # Quota and queue edits can let pending workloads in (or park them): ask for an admission
    # cycle of the domain after commit, as the API does.
    requests_admission = True

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: Any,
                     change: bool) -> None:
        super().save_related(request, form, formsets, change)
        if self.requests_admission:
            admission.request_admission(form.instance.cluster_id)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        super().delete_model(request, obj)
        if self.requests_admission:
            admission.request_admission(obj.cluster_id)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        cluster_ids = set(queryset.values_list("cluster_id", flat=True))
        super().delete_queryset(request, queryset)
        if self.requests_admission:
            for cluster_id in sorted(cluster_ids):
                admission.request_admission(cluster_id)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        fields = [*super().get_readonly_fields(request, obj), *self.meta_fields]
        if obj is not None:
            fields.extend(f for f in self.identity_fields if f not in fields)
        return fields

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name in self.domain_fks:
            kwargs = domain_choice(db_field, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def check_same_cluster(form: ModelForm, field: str, what: str) -> None:
    """Objects refer to objects of their own scheduling domain only."""
    cluster = form.cleaned_data.get("cluster") or getattr(form.instance, "cluster", None)
    target = form.cleaned_data.get(field)
    if cluster is not None and target is not None and target.cluster_id != cluster.pk:
        form.add_error(field, f"{what} {target.name!r} is in cluster {target.cluster.name!r}, "
                              f"not in {cluster.name!r}: objects refer to their own cluster only.")


# --- flavor quotas (shared by cluster queues and cohorts) --------------------------------

_QUOTA_PATH = re.compile(
    r"^spec\.resourceGroups\[(?P<g>\d+)\]"
    r"(?:\.coveredResources\[(?P<cr>\d+)\]"
    r"|\.flavors\[(?P<f>\d+)\](?:\.name|\.resources(?:\[(?P<r>\d+)\](?:\.(?P<field>\w+))?)?)?)?"
)


@dataclass
class _QuotaRow:
    """The attributes ``resource_groups_from_rows`` reads, taken from one inline form."""

    resource_group: int
    position: int
    pk: int
    flavor: ResourceFlavor
    resource: str
    nominal_quota: str
    borrowing_limit: str | None
    lending_limit: str | None


class FlavorQuotaFormSet(InlineFormSet):
    """The quota rows of one owner, validated together as Kueue ``resourceGroups``.

    Rows are ordered by resource group, then position, then their order on the page; the
    same order becomes the stored positions, so what was validated is what is saved (flavor
    order is Kueue's preference order).
    """

    # How the owner names its parent for the limits rule ("must be nil when cohort is empty").
    parent_field = "cohort"
    # lendingLimit <= nominalQuota is a ClusterQueue rule; Kueue's Cohort webhook omits it.
    enforce_lending_limit = True

    def owner_has_parent(self) -> bool:
        return self.instance.cohort_id is not None

    def _live_forms(self) -> list[ModelForm]:
        return [
            form for form in self.forms
            if (form.has_changed() or form.instance.pk is not None)
            and not form.cleaned_data.get("DELETE", False)
        ]

    def clean(self) -> None:
        super().clean()
        if any(self.errors):
            return
        live = self._live_forms()
        order = sorted(
            range(len(live)),
            key=lambda i: (live[i].cleaned_data["resource_group"],
                           live[i].cleaned_data["position"], i),
        )
        self._ordered = [live[i] for i in order]
        rows = []
        cluster_id = self.instance.cluster_id
        problems: list[str] = []
        for index, form in enumerate(self._ordered):
            data = form.cleaned_data
            flavor = data["flavor"]
            if cluster_id is not None and flavor.cluster_id != cluster_id:
                problems.append(f"ResourceFlavor {flavor.name!r} belongs to cluster "
                                f"{flavor.cluster.name!r}, not to this object's cluster.")
            rows.append(_QuotaRow(
                resource_group=data["resource_group"], position=index, pk=index,
                flavor=flavor, resource=data["resource"], nominal_quota=data["nominal_quota"],
                borrowing_limit=data.get("borrowing_limit"), lending_limit=data.get("lending_limit"),
            ))
        groups = resource_groups_from_rows(rows)
        group_numbers = sorted({row.resource_group for row in rows})
        errors = validate_resource_groups(
            groups, has_parent=self.owner_has_parent(), parent_field=self.parent_field,
            enforce_lending_limit=self.enforce_lending_limit,
        )
        problems.extend(self._describe(error, groups, group_numbers) for error in errors)
        if problems:
            raise ValidationError(problems)

    @staticmethod
    def _describe(error: FieldError, groups: list[dict[str, Any]], numbers: list[int]) -> str:
        """The error with the row it is about in the page's terms, then Kueue's path."""
        match = _QUOTA_PATH.match(error.path)
        if match is None:
            return f"{error.path}: {error.message}"
        g = int(match["g"])
        where = [f"resource group {numbers[g] if g < len(numbers) else g}"]
        group = groups[g] if g < len(groups) else {}
        if match["cr"] is not None:
            where.append(f"resource {group['coveredResources'][int(match['cr'])]}")
        elif match["f"] is not None:
            flavor = group["flavors"][int(match["f"])]
            where.append(f"flavor {flavor['name']}")
            if match["r"] is not None:
                where.append(f"resource {flavor['resources'][int(match['r'])]['name']}")
        subject = f"{match['field']} " if match["field"] else ""
        return f"{', '.join(where)}: {subject}{error.message} ({error.path})"

    def save(self, commit: bool = True) -> list[Any]:
        saved = super().save(commit)
        if commit and hasattr(self, "_ordered"):
            # Store the validated order as consecutive positions.
            rows = [form.instance for form in self._ordered if form.instance.pk is not None]
            for position, row in enumerate(rows):
                row.position = position
            FlavorQuota.objects.bulk_update(rows, ["position"])
        return saved


class CohortQuotaFormSet(FlavorQuotaFormSet):
    parent_field = "parentName"
    enforce_lending_limit = False

    def owner_has_parent(self) -> bool:
        return self.instance.parent_id is not None


class FlavorQuotaInline(RoleAdminMixin, TabularInline):
    model = FlavorQuota
    fk_name = "cluster_queue"
    formset = FlavorQuotaFormSet
    fields = ["resource_group", "position", "flavor", "resource", "nominal_quota",
              "borrowing_limit", "lending_limit"]
    extra = 1
    verbose_name = "flavor quota"
    verbose_name_plural = (
        "flavor quotas (Kueue resourceGroups: rows of one resource group must give every flavor "
        "the same resources in the same order; flavor order is preference order)"
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).select_related("flavor__cluster")
        return queryset

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "flavor":
            kwargs = domain_choice(db_field, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class CohortQuotaInline(FlavorQuotaInline):
    fk_name = "cohort"
    formset = CohortQuotaFormSet


# --- ResourceFlavor ----------------------------------------------------------------------


@admin.register(ResourceFlavor)
class ResourceFlavorAdmin(DomainObjectAdmin):
    list_display = ["name", "cluster", "labels", "quota_rows"]
    list_filter = ["cluster"]
    search_fields = ["name"]
    list_select_related = ["cluster"]
    fields = ["cluster", "name", "node_labels", "node_taints", "tolerations", "topology_name",
              "uid", "resource_version", "created_at", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            quota_count=count_of(FlavorQuota.objects.all(), "flavor"))
        return queryset

    @admin.display(description="node labels")
    def labels(self, obj: ResourceFlavor) -> str:
        return ", ".join(f"{k}={v}" for k, v in (obj.node_labels or {}).items()) or "-"

    @admin.display(description="quota rows", ordering="quota_count")
    def quota_rows(self, obj: ResourceFlavor) -> int:
        return int(getattr(obj, "quota_count", 0))


# --- Cohort ------------------------------------------------------------------------------


class CohortForm(ModelForm):
    class Meta:
        model = Cohort
        fields = ["cluster", "name", "parent", "fair_sharing_weight"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        check_same_cluster(self, "parent", "Cohort")
        parent = data.get("parent")
        name = data.get("name") or self.instance.name
        cluster = data.get("cluster") or getattr(self.instance, "cluster", None)
        if parent is not None and name and cluster is not None and "parent" not in self.errors:
            # Kueue disables every member of a cohort cycle; refuse to create one.
            parents = dict(
                Cohort.objects.filter(cluster=cluster).exclude(pk=self.instance.pk)
                .values_list("name", "parent__name")
            )
            cycle = cohort_cycle(name, parent.name, parents)
            if cycle:
                self.add_error("parent", "spec.parentName: this parent would make a cohort cycle: "
                                         + " → ".join(cycle))
        raise_field_errors(
            validate_fair_sharing_weight(data.get("fair_sharing_weight"), "spec.fairSharing.weight"),
            {"spec.fairSharing.weight": "fair_sharing_weight"},
        )
        return data


@admin.register(Cohort)
class CohortAdmin(DomainObjectAdmin):
    form = CohortForm
    inlines = [CohortQuotaInline]
    list_display = ["name", "cluster", "parent", "cluster_queues", "child_cohorts"]
    list_filter = ["cluster"]
    search_fields = ["name", "parent__name"]
    list_select_related = ["cluster", "parent"]
    fields = ["cluster", "name", "parent", "fair_sharing_weight", "conditions_display",
              "uid", "resource_version", "created_at", "updated_at"]
    domain_fks = ("parent",)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "conditions_display"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            cq_count=count_of(ClusterQueue.objects.all(), "cohort"),
            child_count=count_of(Cohort.objects.all(), "parent"),
        )
        return queryset

    @admin.display(description="cluster queues", ordering="cq_count")
    def cluster_queues(self, obj: Cohort) -> int:
        return int(getattr(obj, "cq_count", 0))

    @admin.display(description="child cohorts", ordering="child_count")
    def child_cohorts(self, obj: Cohort) -> int:
        return int(getattr(obj, "child_count", 0))

    @admin.display(description="conditions")
    def conditions_display(self, obj: Cohort) -> str:
        return pretty_json(obj.conditions)


# --- ClusterQueue ------------------------------------------------------------------------


class ClusterQueueForm(ModelForm):
    class Meta:
        model = ClusterQueue
        fields = [
            "cluster", "name", "cohort", "queueing_strategy", "namespace_selector",
            "stop_policy", "within_cluster_queue", "reclaim_within_cohort",
            "borrow_within_cohort_policy", "borrow_within_cohort_max_priority_threshold",
            "when_can_borrow", "when_can_preempt", "fungibility_preference",
            "fair_sharing_weight", "admission_checks",
        ]

    def clean_admission_checks(self) -> list[dict[str, Any]]:
        value = self.cleaned_data.get("admission_checks") or []
        if not isinstance(value, list) or not all(
            isinstance(item, dict) and isinstance(item.get("name"), str)
            and isinstance(item.get("onFlavors", []), list)
            for item in value
        ):
            raise ValidationError(
                'spec.admissionChecksStrategy.admissionChecks: a list of {"name": ..., '
                '"onFlavors": [...]} objects (empty onFlavors: every flavor)'
            )
        return value

    def clean_namespace_selector(self) -> Any:
        value = self.cleaned_data.get("namespace_selector")
        if value is not None and (
            not isinstance(value, dict) or set(value) - {"matchLabels", "matchExpressions"}
        ):
            raise ValidationError("spec.namespaceSelector: a label selector (matchLabels, "
                                  "matchExpressions); {} selects every namespace, empty none")
        return value

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        check_same_cluster(self, "cohort", "Cohort")
        fungibility = {
            "whenCanBorrow": data.get("when_can_borrow"),
            "whenCanPreempt": data.get("when_can_preempt"),
            "preference": data.get("fungibility_preference"),
        }
        preemption = {
            "withinClusterQueue": data.get("within_cluster_queue"),
            "reclaimWithinCohort": data.get("reclaim_within_cohort"),
            "borrowWithinCohort": {"policy": data.get("borrow_within_cohort_policy")},
        }
        raise_field_errors(
            [
                *validate_fungibility(fungibility, "spec.flavorFungibility"),
                *validate_preemption(preemption, "spec.preemption"),
                *validate_fair_sharing_weight(data.get("fair_sharing_weight"),
                                              "spec.fairSharing.weight"),
            ],
            {
                "spec.flavorFungibility.preference": "fungibility_preference",
                "spec.preemption.borrowWithinCohort.policy": "borrow_within_cohort_policy",
                "spec.fairSharing.weight": "fair_sharing_weight",
            },
        )
        return data


@admin.register(ClusterQueue)
class ClusterQueueAdmin(DomainObjectAdmin):
    form = ClusterQueueForm
    inlines = [FlavorQuotaInline]
    list_display = ["name", "cluster", "cohort", "queueing_strategy", "stop_policy",
                    "pending", "admitted"]
    list_filter = ["cluster", "cohort", "queueing_strategy", "stop_policy"]
    search_fields = ["name", "cohort__name"]
    list_select_related = ["cluster", "cohort"]
    domain_fks = ("cohort",)
    fieldsets = [
        (None, {"fields": ["cluster", "name", "cohort", "queueing_strategy",
                           "namespace_selector", "stop_policy"]}),
        ("Preemption", {"fields": ["within_cluster_queue", "reclaim_within_cohort",
                                   "borrow_within_cohort_policy",
                                   "borrow_within_cohort_max_priority_threshold"]}),
        ("Flavor fungibility", {"fields": ["when_can_borrow", "when_can_preempt",
                                           "fungibility_preference"]}),
        ("Fair sharing and admission checks", {"fields": ["fair_sharing_weight",
                                                          "admission_checks"]}),
        ("Status", {"fields": ["conditions_display", "parked_shapes_display", "uid",
                               "resource_version", "created_at", "updated_at"]}),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "conditions_display",
                "parked_shapes_display"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # Kueue's pendingWorkloads counts active workloads waiting in the queue; usage is
        # never stored, so both counts come from the workloads themselves.
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            pending_count=count_of(
                Workload.objects.filter(phase=WorkloadPhase.PENDING, active=True),
                "local_queue__cluster_queue",
            ),
            admitted_count=count_of(
                Workload.objects.filter(phase=WorkloadPhase.ADMITTED), "cluster_queue"
            ),
        )
        return queryset

    @admin.display(description="pending", ordering="pending_count")
    def pending(self, obj: ClusterQueue) -> int:
        return int(getattr(obj, "pending_count", 0))

    @admin.display(description="admitted", ordering="admitted_count")
    def admitted(self, obj: ClusterQueue) -> int:
        return int(getattr(obj, "admitted_count", 0))

    @admin.display(description="conditions")
    def conditions_display(self, obj: ClusterQueue) -> str:
        return pretty_json(obj.conditions)

    @admin.display(description="parked shapes")
    def parked_shapes_display(self, obj: ClusterQueue) -> str:
        """Pending workloads of these priorities and pod sets wait until quota comes back
        in the cohort (Kueue's scheduling-equivalence bulk move), and why."""
        return pretty_json([
            {"priority": shape.priority, "podSetsHash": shape.pod_sets_hash,
             "reason": shape.reason, "message": shape.message,
             "parkedAt": timestamp(shape.parked_at)}
            for shape in obj.parked_shapes.order_by("-priority", "parked_at")
        ] if obj.pk else [])


# --- LocalQueue --------------------------------------------------------------------------


class LocalQueueForm(ModelForm):
    class Meta:
        model = LocalQueue
        fields = ["cluster", "namespace", "name", "cluster_queue", "stop_policy",
                  "fair_sharing_weight"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        check_same_cluster(self, "cluster_queue", "ClusterQueue")
        raise_field_errors(
            validate_fair_sharing_weight(data.get("fair_sharing_weight"), "spec.fairSharing.weight"),
            {"spec.fairSharing.weight": "fair_sharing_weight"},
        )
        return data


@admin.register(LocalQueue)
class LocalQueueAdmin(DomainObjectAdmin):
    form = LocalQueueForm
    # spec.clusterQueue is immutable in Kueue.
    identity_fields = ("cluster", "namespace", "name", "cluster_queue")
    list_display = ["name", "namespace", "cluster_queue", "cluster", "stop_policy",
                    "pending", "admitted"]
    list_filter = ["cluster", "namespace", "cluster_queue", "stop_policy"]
    search_fields = ["name", "namespace", "cluster_queue__name"]
    list_select_related = ["cluster", "cluster_queue"]
    domain_fks = ("cluster_queue",)
    fields = ["cluster", "namespace", "name", "cluster_queue", "stop_policy",
              "fair_sharing_weight", "conditions_display",
              "uid", "resource_version", "created_at", "updated_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "conditions_display"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            pending_count=count_of(
                Workload.objects.filter(phase=WorkloadPhase.PENDING, active=True), "local_queue"
            ),
            admitted_count=count_of(
                Workload.objects.filter(phase=WorkloadPhase.ADMITTED), "local_queue"
            ),
        )
        return queryset

    @admin.display(description="pending", ordering="pending_count")
    def pending(self, obj: LocalQueue) -> int:
        return int(getattr(obj, "pending_count", 0))

    @admin.display(description="admitted", ordering="admitted_count")
    def admitted(self, obj: LocalQueue) -> int:
        return int(getattr(obj, "admitted_count", 0))

    @admin.display(description="conditions")
    def conditions_display(self, obj: LocalQueue) -> str:
        return pretty_json(obj.conditions)


# --- WorkloadPriorityClass ---------------------------------------------------------------


@admin.register(WorkloadPriorityClass)
class WorkloadPriorityClassAdmin(DomainObjectAdmin):
    list_display = ["name", "value", "cluster", "description"]
    list_filter = ["cluster"]
    search_fields = ["name", "description"]
    list_select_related = ["cluster"]
    fields = ["cluster", "name", "value", "description",
              "uid", "resource_version", "created_at", "updated_at"]


# --- The cluster's own objects: applied (simulated) or mirrored (Kubernetes) --------------


class ClusterObjectAdmin(ReadOnlyAdminMixin, DomainObjectAdmin):
    """Read-only: a simulated cluster's are written with ``apply``, and a Kubernetes
    cluster's are mirrored from its API server, so neither is edited here."""

    list_filter = ["cluster"]
    list_select_related = ["cluster"]
    requests_admission = False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


@admin.register(PriorityClass)
class PriorityClassAdmin(ClusterObjectAdmin):
    list_display = ["name", "value", "global_default", "preemption_policy", "cluster"]
    search_fields = ["name", "description"]
    fields = ["cluster", "name", "value", "global_default", "preemption_policy", "description",
              "uid", "resource_version", "created_at", "updated_at"]


@admin.register(LimitRange)
class LimitRangeAdmin(ClusterObjectAdmin):
    list_display = ["name", "namespace", "cluster"]
    list_filter = ["cluster", "namespace"]
    search_fields = ["name", "namespace"]
    fields = ["cluster", "namespace", "name", "limits_display",
              "uid", "resource_version", "created_at", "updated_at"]

    @admin.display(description="limits")
    def limits_display(self, obj: LimitRange) -> str:
        return pretty_json(obj.limits)


@admin.register(RuntimeClass)
class RuntimeClassAdmin(ClusterObjectAdmin):
    list_display = ["name", "handler", "overhead_summary", "cluster"]
    search_fields = ["name", "handler"]
    fields = ["cluster", "name", "handler", "overhead_summary", "scheduling_display",
              "uid", "resource_version", "created_at", "updated_at"]

    @admin.display(description="overhead (podFixed)")
    def overhead_summary(self, obj: RuntimeClass) -> str:
        return ", ".join(f"{resource}={quantity}"
                         for resource, quantity in sorted((obj.overhead or {}).items())) or "-"

    @admin.display(description="scheduling")
    def scheduling_display(self, obj: RuntimeClass) -> str:
        return pretty_json(obj.scheduling)


# --- Workload, Job, Event: written by services and reconcilers ---------------------------


@admin.register(Workload)
class WorkloadAdmin(DomainObjectAdmin):
    """Workloads come from submitted jobs; here only ``active`` can change, through the
    same service as the API's patch (the reconcilers then evict a deactivated workload)."""

    list_display = ["name", "namespace", "queue_name", "phase", "priority", "cluster_queue",
                    "active", "cluster", "created_at"]
    list_filter = ["cluster", "phase", "namespace", "active", "queue_state", "cluster_queue"]
    search_fields = ["name", "namespace", "queue_name", "job__name"]
    list_select_related = ["cluster", "cluster_queue"]
    editable_fields = ("active",)
    requests_admission = False  # the services below ask for cycles themselves
    fieldsets = [
        ("Spec", {"fields": ["cluster", "namespace", "name", "queue_name", "priority_class_name",
                             "priority_class_source", "priority", "active",
                             "maximum_execution_time_seconds", "job", "pod_sets_display",
                             "labels_display", "annotations_display"]}),
        ("Status", {"fields": ["phase", "queue_state", "local_queue", "cluster_queue",
                               "admission_display", "conditions_display", "queued_at",
                               "quota_reserved_at", "requeue_state", "requeue_at",
                               "reclaimable_pods", "admission_check_states",
                               "accumulated_past_execution_time_seconds", "scheduling_stats",
                               "nominated_cluster_names", "cluster_name"]}),
        ("Metadata", {"fields": ["uid", "resource_version", "created_at", "updated_at"]}),
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        every = [str(name) for _, options in self.fieldsets for name in options["fields"]]
        return [name for name in every if name not in self.editable_fields]

    def save_model(self, request: HttpRequest, obj: Workload, form: ModelForm,
                   change: bool) -> None:
        # The form changed ``obj`` in memory; the service compares with the stored workload
        # and writes conditionally on its version, as the API's PATCH does.
        stored = Workload.objects.get(pk=obj.pk)
        try:
            services.update_workload(stored, {"spec": {"active": obj.active}})
        except (services.ConflictError, ValidationError) as exc:
            messages.error(request, f"Workload not changed: {exc}")

    def delete_model(self, request: HttpRequest, obj: Workload) -> None:
        services.delete_workload(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for workload in queryset:
            services.delete_workload(workload)

    @admin.display(description="pod sets")
    def pod_sets_display(self, obj: Workload) -> str:
        return pretty_json(obj.pod_sets)

    @admin.display(description="labels")
    def labels_display(self, obj: Workload) -> str:
        return pretty_json(obj.labels)

    @admin.display(description="annotations")
    def annotations_display(self, obj: Workload) -> str:
        return pretty_json(obj.annotations)

    @admin.display(description="admission")
    def admission_display(self, obj: Workload) -> str:
        return pretty_json(obj.admission)

    @admin.display(description="conditions")
    def conditions_display(self, obj: Workload) -> str:
        return pretty_json(obj.conditions)


@admin.register(Job)
class JobAdmin(ReadOnlyAdminMixin, DomainObjectAdmin):
    """Submitted jobs of every kind (batch/v1 Jobs, ...): the manifest is shown as submitted;
    delete removes the job and its workloads."""

    requests_admission = False  # services.delete_job asks for a cycle itself
    list_display = ["name", "namespace", "cluster", "source", "workload_count", "created_at"]
    list_filter = ["cluster", "source", "namespace"]
    search_fields = ["name", "namespace"]
    list_select_related = ["cluster"]
    fields = ["cluster", "namespace", "name", "source", "manifest_display", "status_display",
              "uid", "resource_version", "created_at", "updated_at"]
    readonly_fields = ["namespace", "manifest_display", "status_display"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request).annotate(
            workload_total=count_of(Workload.objects.all(), "job"))
        return queryset

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        services.delete_job(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for job in queryset:
            services.delete_job(job)

    @admin.display(description="workloads", ordering="workload_total")
    def workload_count(self, obj: Job) -> int:
        return int(getattr(obj, "workload_total", 0))

    @admin.display(description="manifest")
    def manifest_display(self, obj: Job) -> str:
        return pretty_json(obj.manifest)

    @admin.display(description="status")
    def status_display(self, obj: Job) -> str:
        return pretty_json(obj.status)


EVENT_FIELDS = ("cluster", "workload", "object_kind", "object_namespace", "object_name", "type",
                "reason", "message", "created_at")


@admin.register(Event)
class EventAdmin(ReadOnlyAdminMixin, RoleAdminMixin, ModelAdmin):
    """The append-only history: read, never written or deleted here."""

    list_display = ["created_at", "type", "reason", "object_kind", "object_namespace",
                    "object_name", "short_message", "cluster"]
    list_filter = ["type", "object_kind", "cluster"]
    search_fields = ["reason", "object_name", "object_namespace", "message"]
    list_select_related = ["cluster"]
    fields = readonly_fields = EVENT_FIELDS

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    @admin.display(description="message")
    def short_message(self, obj: Event) -> str:
        return obj.message if len(obj.message) <= 100 else obj.message[:99] + "…"


@admin.register(SavedView)
class SavedViewAdmin(RoleAdminMixin, ModelAdmin):
    """Users' saved list views (their own, from the list pages); kept here to remove a
    departed user's or to look into one."""

    list_display = ["name", "page", "user", "created_at"]
    list_filter = ["page"]
    search_fields = ["name", "user__username"]
    list_select_related = ["user"]
    fields = ["user", "page", "name", "query", "created_at"]
    readonly_fields = ["created_at"]
