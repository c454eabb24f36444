"""Query filters of the workload and job lists (``?queueName=``, ``?phase=``, ...)."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from scheduling.choices import WorkloadPhase
from scheduling.models import Job, Workload


class IntegerFilter(django_filters.NumberFilter):  # type: ignore[misc]  # untyped
    field_class = forms.IntegerField


class WorkloadFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    job = django_filters.CharFilter(
        field_name="job__name", help_text="Workloads of the Job with this name.")
    queueName = django_filters.CharFilter(field_name="queue_name", help_text="spec.queueName.")
    phase = django_filters.ChoiceFilter(
        choices=WorkloadPhase.choices,
        help_text="Kueue's derived status: Pending, QuotaReserved, Admitted or Finished.")
    clusterQueue = django_filters.CharFilter(
        method="filter_cluster_queue",
        help_text="Workloads holding quota in this ClusterQueue (status.admission.clusterQueue) "
        "and workloads waiting for it through their LocalQueue.")
    priority = IntegerFilter(field_name="priority", help_text="spec.priority.")
    search = django_filters.CharFilter(
        method="filter_search",
        help_text="Text in the name, namespace, queue name or job name (case-insensitive).")

    class Meta:
        model = Workload
        fields: list[str] = []

    def filter_cluster_queue(
        self, queryset: QuerySet[Workload], name: str, value: str
    ) -> QuerySet[Workload]:
        return in_cluster_queue(queryset, value)

    def filter_search(
        self, queryset: QuerySet[Workload], name: str, value: str
    ) -> QuerySet[Workload]:
        return queryset.filter(
            Q(name__icontains=value)
            | Q(namespace__icontains=value)
            | Q(queue_name__icontains=value)
            | Q(job__name__icontains=value)
        )


class JobFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    search = django_filters.CharFilter(
        method="filter_search", help_text="Text in the name or namespace (case-insensitive).")

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(Q(name__icontains=value) | Q(namespace__icontains=value))


def in_cluster_queue(queryset: QuerySet[Workload], name: str) -> QuerySet[Workload]:
    """Workloads holding quota in cluster queue ``name``, or waiting for it through their
    LocalQueue."""
    return queryset.filter(
        Q(cluster_queue__name=name)
        | Q(cluster_queue__isnull=True, local_queue__cluster_queue__name=name)
    )
