from django.apps import AppConfig


class MulticlusterConfig(AppConfig):
    name = "multicluster"
    verbose_name = "Clusters and MultiKueue"
