"""Forms of the workload pages: the workload list's filters and the job submission form.

What the list's filters do is ``scheduling.filters``, which the API's workload list shares;
here they are named as the form names them.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.utils import timezone

from scheduling.choices import WorkloadPhase
from scheduling.filters import (
    STATE_CHOICES,
    WorkloadFilterSet,
    first_in_local_queue,
    in_cluster_queue,
    job_workload_count,
    reason_contains,
)
from scheduling.models import Job, Workload

# Sort keys of the list, as the column headers name them, and the fields they order by.
SORT_FIELDS = {
    "name": "name",
    "namespace": "namespace",
    "queue": "queue_name",
    "priority": "priority",
    "state": "phase",
    "created": "created_at",
}
DEFAULT_SORT = "-created"
# The job list sorts by its own columns and by those of each job's current workload
# (annotated by ``scheduling.web.job_list``).
JOB_SORT_FIELDS = {
    "name": "name",
    "namespace": "namespace",
    "kind": "kind",
    "queue": "wl_queue",
    "priority": "wl_priority",
    "state": "wl_phase",
    "created": "created_at",
}


def sort_choices(fields: dict[str, str] = SORT_FIELDS) -> list[tuple[str, str]]:
    choices = []
    for key in fields:
        choices.append((key, f"{key} ascending"))
        choices.append((f"-{key}", f"{key} descending"))
    return choices


def _day_start(value: date) -> datetime:
    return datetime.combine(value, time.min, tzinfo=timezone.get_current_timezone())


class _ListFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    """What both lists' filter forms share: the creation day range and the sort order."""

    sort_fields: dict[str, str] = SORT_FIELDS
    created_from = django_filters.DateFilter(method="filter_created_from", label="Created from")
    created_to = django_filters.DateFilter(method="filter_created_to", label="Created to")

    def filter_created_from(self, queryset: QuerySet[Any], name: str, value: date) -> QuerySet[Any]:
        return queryset.filter(created_at__gte=_day_start(value))

    def filter_created_to(self, queryset: QuerySet[Any], name: str, value: date) -> QuerySet[Any]:
        # The whole day named: an index range up to the next midnight, not ``__date``.
        return queryset.filter(created_at__lt=_day_start(value + timedelta(days=1)))

    def filter_sort(self, queryset: QuerySet[Any], name: str, value: str) -> QuerySet[Any]:
        return queryset  # applied by ``ordering`` after filtering

    def ordering(self) -> tuple[str, list[str]]:
        """(the sort key chosen, the ORDER BY fields); ties broken by id for stable pages."""
        key = DEFAULT_SORT
        if self.is_bound and self.form.is_valid():
            key = self.form.cleaned_data.get("sort") or DEFAULT_SORT
        descending = key.startswith("-")
        field = self.sort_fields[key.lstrip("-")]
        prefix = "-" if descending else ""
        return key, [f"{prefix}{field}", f"{prefix}id"]


class _CountFilter(django_filters.NumberFilter):  # type: ignore[misc]  # untyped
    """A count or a 1-based position: a whole number (its least value given as
    ``min_value``), at most what a database integer holds."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_value", 2**31 - 1)
        super().__init__(*args, **kwargs)


class WorkloadListFilter(_ListFilter, WorkloadFilterSet):
    """The filters and the sort order of the workload list (all optional, all GET): one per
    column. Text matches a part of the value, any case."""

    namespace = django_filters.CharFilter(
        field_name="namespace", lookup_expr="icontains", label="Namespace")
    queue = django_filters.CharFilter(
        field_name="queue_name", lookup_expr="icontains", label="Local queue")
    cluster_queue = django_filters.CharFilter(method="filter_cluster_queue", label="Cluster queue")
    state = django_filters.MultipleChoiceFilter(
        choices=STATE_CHOICES, method="filter_states", label="State")
    priority_min = django_filters.NumberFilter(
        field_name="priority", lookup_expr="gte", label="Priority ≥")
    priority_max = django_filters.NumberFilter(
        field_name="priority", lookup_expr="lte", label="Priority ≤")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    cluster = django_filters.CharFilter(
        field_name="cluster__name", lookup_expr="icontains", label="Cluster")
    reason = django_filters.CharFilter(method="filter_reason", label="Reason contains")
    position_max = _CountFilter(
        method="filter_position_max", label="Position in local queue ≤", min_value=1
    )
    sort = django_filters.ChoiceFilter(
        choices=sort_choices(), method="filter_sort", label="Sort", empty_label="Newest first")

    def filter_cluster_queue(
        self, queryset: QuerySet[Workload], name: str, value: str
    ) -> QuerySet[Workload]:
        return in_cluster_queue(queryset, value, lookup="icontains")

    def filter_reason(
        self, queryset: QuerySet[Workload], name: str, value: str
    ) -> QuerySet[Workload]:
        return reason_contains(queryset, value)

    def filter_position_max(
        self, queryset: QuerySet[Workload], name: str, value: int
    ) -> QuerySet[Workload]:
        return first_in_local_queue(queryset, value)


class JobListFilter(_ListFilter):
    """The filters and the sort order of the job list; queue, cluster queue, priority and
    state are those of each job's current workload (``scheduling.web.job_list``)."""

    sort_fields = JOB_SORT_FIELDS
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    namespace = django_filters.CharFilter(
        field_name="namespace", lookup_expr="icontains", label="Namespace")
    kind = django_filters.CharFilter(field_name="kind", lookup_expr="icontains", label="Kind")
    queue = django_filters.CharFilter(
        field_name="wl_queue", lookup_expr="icontains", label="Local queue")
    cluster_queue = django_filters.CharFilter(
        field_name="wl_cluster_queue", lookup_expr="icontains", label="Cluster queue")
    state = django_filters.MultipleChoiceFilter(
        choices=WorkloadPhase.choices, field_name="wl_phase", label="State")
    priority_min = django_filters.NumberFilter(
        field_name="wl_priority", lookup_expr="gte", label="Priority ≥")
    priority_max = django_filters.NumberFilter(
        field_name="wl_priority", lookup_expr="lte", label="Priority ≤")
    cluster = django_filters.CharFilter(
        field_name="cluster__name", lookup_expr="icontains", label="Cluster")
    workloads_min = _CountFilter(
        method="filter_workloads", lookup_expr="gte", label="Workloads ≥", min_value=0
    )
    workloads_max = _CountFilter(
        method="filter_workloads", lookup_expr="lte", label="Workloads ≤", min_value=0
    )
    sort = django_filters.ChoiceFilter(
        choices=sort_choices(JOB_SORT_FIELDS), method="filter_sort", label="Sort",
        empty_label="Newest first")

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_workloads(self, queryset: QuerySet[Job], name: str, value: int) -> QuerySet[Job]:
        """The job's number of workloads, counted only when a bound is given (both bounds
        share the one annotation)."""
        if "workload_count" not in queryset.query.annotations:
            queryset = queryset.annotate(workload_count=job_workload_count())
        lookup = self.filters[name].lookup_expr
        return queryset.filter(**{f"workload_count__{lookup}": value})


def field_errors(exc: ValidationError) -> list[tuple[str, str]]:
    """A service's ValidationError as (field path, message) pairs, shown next to the field;
    an error of no field has the path ""."""
    if hasattr(exc, "error_dict"):
        return [(path, message) for path, msgs in exc.message_dict.items() for message in msgs]
    return [("", message) for message in exc.messages]


class JobSubmitForm(forms.Form):
    """A namespace and a job manifest of an enabled kind in YAML (parsed by the view,
    safely); the page offers each enabled kind's example (``scheduling.jobs.examples``)."""

    namespace = forms.CharField(
        max_length=63,
        widget=forms.TextInput(attrs={"list": "namespace-options", "autocomplete": "off",
                                      "spellcheck": "false"}),
    )
    manifest = forms.CharField(
        strip=False,
        widget=forms.Textarea(attrs={
            "id": "manifest", "rows": 28, "spellcheck": "false", "autocapitalize": "off",
            "autocomplete": "off", "class": "yaml-editor",
            "aria-describedby": "manifest-help manifest-errors",
        }),
    )

    def __init__(self, *args: Any, max_bytes: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_bytes = max_bytes

    def clean_manifest(self) -> str:
        text: str = self.cleaned_data["manifest"]
        if len(text.encode("utf-8")) > self.max_bytes:
            raise forms.ValidationError(
                f"The manifest is larger than {self.max_bytes} bytes (KUEUEWEB_MAX_MANIFEST_BYTES).")
        return text

