from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Queues and workloads"

    def ready(self) -> None:
        from scheduling.jobframework import registry

        # A misspelt framework name would refuse every job of that kind: fail at startup,
        # as Kueue's setup does for a framework it cannot run.
        config = settings.KUEUEWEB
        problems = registry.check_frameworks(registry.enabled_names(config))
        if problems:
            raise ImproperlyConfigured(
                "KUEUEWEB['INTEGRATIONS_FRAMEWORKS']: " + "; ".join(problems))
