from django.apps import AppConfig


class KueuewebConfig(AppConfig):
    name = "kueueweb"
    verbose_name = "Access"
