from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed


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
        load_training_runtimes(config)
        setting_changed.connect(_reload_training_runtimes, dispatch_uid="training-runtimes")


def load_training_runtimes(config: Mapping[str, Any]) -> None:
    """The TrainJob runtimes from the YAML files ``KUEUEWEB["TRAINING_RUNTIMES"]`` names;
    an unreadable file or a malformed runtime fails startup, naming the file."""
    from scheduling.jobs.trainjob import RUNTIMES

    documents: list[Any] = []
    problems: list[str] = []
    for path in config.get("TRAINING_RUNTIMES") or ():
        try:
            loaded = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        documents.extend(loaded)
        problems.extend(f"{path}: {p}" for p in RUNTIMES.read(loaded)[1])
    problems = problems or RUNTIMES.replace(documents)
    if problems:
        raise ImproperlyConfigured("KUEUEWEB['TRAINING_RUNTIMES']: " + "; ".join(problems))


def _reload_training_runtimes(*, setting: str, **_: Any) -> None:
    if setting == "KUEUEWEB":
        load_training_runtimes(settings.KUEUEWEB)
