"""Query filters of the workload and job lists (``?queueName=``, ``?phase=``, ...), named
after Kueue's fields; what the workload filters do is ``scheduling.filters``, which the UI's
list shares."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import Q, QuerySet

from scheduling.choices import WorkloadPhase
from scheduling.filters import WorkloadFilterSet
from scheduling.models import Job


class IntegerFilter(django_filters.NumberFilter):  # type: ignore[misc]  # untyped
    field_class = forms.IntegerField


class WorkloadFilter(WorkloadFilterSet):
    job = django_filters.CharFilter(
        field_name="job__name", help_text="Workloads of the job with this name, of any kind.")
    jobKind = django_filters.CharFilter(
        field_name="job__kind",
        help_text="Workloads of jobs of this kind (Job, JobSet, RayCluster, ...).")
    queueName = django_filters.CharFilter(field_name="queue_name", help_text="spec.queueName.")
    phase = django_filters.ChoiceFilter(
        choices=WorkloadPhase.choices, method="filter_state",
        help_text="Kueue's derived status: Pending, QuotaReserved, Admitted or Finished.")
    clusterQueue = django_filters.CharFilter(
        method="filter_cluster_queue",
        help_text="Workloads holding quota in this ClusterQueue (status.admission.clusterQueue) "
        "and workloads waiting for it through their LocalQueue.")
    priority = IntegerFilter(field_name="priority", help_text="spec.priority.")
    search = django_filters.CharFilter(
        method="filter_search",
        help_text="Text in the name, namespace, queue name or job name (case-insensitive).")


class JobFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    kind = django_filters.CharFilter(
        field_name="kind", help_text="Jobs of this kind (Job, JobSet, RayCluster, ...).")
    search = django_filters.CharFilter(
        method="filter_search", help_text="Text in the name or namespace (case-insensitive).")

    class Meta:
        model = Job
        fields: list[str] = []

    def filter_search(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(Q(name__icontains=value) | Q(namespace__icontains=value))

