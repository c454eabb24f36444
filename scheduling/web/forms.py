"""Forms of the workload pages: the workload list's filters and the job submission form.

What the list's filters do is ``scheduling.filters``, which the API's workload list shares;
here they are named as the form names them.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError
from django.db.models import QuerySet

from scheduling.filters import STATE_CHOICES, WorkloadFilterSet
from scheduling.models import Workload

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


def sort_choices() -> list[tuple[str, str]]:
    choices = []
    for key in SORT_FIELDS:
        choices.append((key, f"{key} ascending"))
        choices.append((f"-{key}", f"{key} descending"))
    return choices


class WorkloadListFilter(WorkloadFilterSet):
    """The filters and the sort order of the workload list (all optional, all GET)."""

    namespace = django_filters.CharFilter(field_name="namespace", label="Namespace")
    queue = django_filters.CharFilter(field_name="queue_name", label="Local queue")
    cluster_queue = django_filters.CharFilter(method="filter_cluster_queue", label="Cluster queue")
    state = django_filters.ChoiceFilter(
        choices=STATE_CHOICES, method="filter_state", label="State", empty_label="Any")
    priority_min = django_filters.NumberFilter(
        field_name="priority", lookup_expr="gte", label="Priority ≥")
    priority_max = django_filters.NumberFilter(
        field_name="priority", lookup_expr="lte", label="Priority ≤")
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Name contains")
    sort = django_filters.ChoiceFilter(
        choices=sort_choices(), method="filter_sort", label="Sort", empty_label="Newest first")

    def filter_sort(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        return queryset  # applied by ``ordering`` after filtering

    def ordering(self) -> tuple[str, list[str]]:
        """(the sort key chosen, the ORDER BY fields); ties broken by id for stable pages."""
        key = DEFAULT_SORT
        if self.is_bound and self.form.is_valid():
            key = self.form.cleaned_data.get("sort") or DEFAULT_SORT
        descending = key.startswith("-")
        field = SORT_FIELDS[key.lstrip("-")]
        prefix = "-" if descending else ""
        return key, [f"{prefix}{field}", f"{prefix}id"]


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

