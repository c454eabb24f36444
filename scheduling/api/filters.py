"""Query filters of the quota kinds' lists, named after Kueue's fields (``?cohort=``,
``?clusterQueue=``, ...)."""

from __future__ import annotations

import django_filters

from scheduling.models import ClusterQueue, Cohort, LocalQueue


class ClusterQueueFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    cohort = django_filters.CharFilter(field_name="cohort__name", help_text="spec.cohortName.")

    class Meta:
        model = ClusterQueue
        fields: list[str] = []


class CohortFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    parentName = django_filters.CharFilter(field_name="parent__name", help_text="spec.parentName.")

    class Meta:
        model = Cohort
        fields: list[str] = []


class LocalQueueFilter(django_filters.FilterSet):  # type: ignore[misc]  # untyped
    clusterQueue = django_filters.CharFilter(
        field_name="cluster_queue__name", help_text="spec.clusterQueue.")
    namespace = django_filters.CharFilter(
        field_name="namespace", help_text="metadata.namespace (for the list across namespaces).")

    class Meta:
        model = LocalQueue
        fields: list[str] = []
