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

        config = settings.KUEUEWEB
        configure_external_frameworks(config)
        setting_changed.connect(_reconfigure_external_frameworks,
                                dispatch_uid="external-frameworks")
        # A misspelt framework name would refuse every job of that kind: fail at startup,
        # as Kueue's setup does for a framework it cannot run.
        problems = registry.check_frameworks(registry.enabled_names(config))
        if problems:
            raise ImproperlyConfigured(
                "KUEUEWEB['INTEGRATIONS_FRAMEWORKS']: " + "; ".join(problems))
        load_training_runtimes(config)
        setting_changed.connect(_reload_training_runtimes, dispatch_uid="training-runtimes")


def configure_external_frameworks(config: Mapping[str, Any]) -> None:
    """Register a kind per entry of ``KUEUEWEB["MULTIKUEUE_EXTERNAL_FRAMEWORKS"]``; a
    malformed entry fails startup, naming it."""
    from scheduling.jobs.external import configure_external_frameworks as configure

    names = config.get("MULTIKUEUE_EXTERNAL_FRAMEWORKS") or []
    problems = (["must be a list of Kind.version.group names, not "
                 f"{type(names).__name__}"] if not isinstance(names, (list, tuple))
                else configure(names))
    if problems:
        raise ImproperlyConfigured(
            "KUEUEWEB['MULTIKUEUE_EXTERNAL_FRAMEWORKS']: " + "; ".join(problems))


def _reconfigure_external_frameworks(*, setting: str, **_: Any) -> None:
    if setting == "KUEUEWEB":
        configure_external_frameworks(settings.KUEUEWEB)


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
