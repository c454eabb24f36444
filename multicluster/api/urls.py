"""Clusters, admission checks, MultiKueue and ProvisioningRequest configs (cluster-scoped
kinds)."""

from django.urls import URLPattern, URLResolver

from multicluster.api.views import (
    AdmissionCheckViewSet,
    ClusterViewSet,
    MultiKueueConfigViewSet,
    ProvisioningRequestConfigViewSet,
)
from scheduling.api.urls import cluster_scoped

urlpatterns: list[URLPattern | URLResolver] = [
    *cluster_scoped("admissionchecks", AdmissionCheckViewSet, "admissioncheck"),
    *cluster_scoped("multikueueconfigs", MultiKueueConfigViewSet, "multikueueconfig"),
    *cluster_scoped("provisioningrequestconfigs", ProvisioningRequestConfigViewSet,
                    "provisioningrequestconfig"),
    *cluster_scoped("clusters", ClusterViewSet, "cluster"),
]
