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
        configure_kinds(config)
        setting_changed.connect(_reconfigure_kinds, dispatch_uid="configure-job-kinds")


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


def configure_kinds(config: Mapping[str, Any]) -> None:
    """Give each registered kind the documents of the YAML files its ``document_settings``
    list (a TrainJob's training runtimes); an unreadable file or a malformed document fails
    startup, naming the setting and the file."""
    from scheduling.jobframework import registry

    for kind in registry.all_kinds():
        files: dict[str, list[tuple[str, list[Any]]]] = {}
        problems: list[str] = []
        for key in kind.document_settings:
            for path in config.get(key) or ():
                try:
                    documents = [d for d in yaml.safe_load_all(Path(path).read_text())
                                 if d is not None]
                except (OSError, yaml.YAMLError) as exc:
                    problems.append(f"KUEUEWEB['{key}']: {path}: {exc}")
                    continue
                files.setdefault(key, []).append((str(path), documents))
        if not problems:
            problems = [f"KUEUEWEB[{', '.join(repr(k) for k in kind.document_settings)}]: {p}"
                        for p in kind.configure(files)]
        if problems:
            raise ImproperlyConfigured("; ".join(problems))


def _reconfigure_kinds(*, setting: str, **_: Any) -> None:
    if setting == "KUEUEWEB":
        configure_kinds(settings.KUEUEWEB)
