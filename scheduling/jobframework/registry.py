"""The registered job kinds and the enabled ones (Kueue's integration manager,
``pkg/controller/jobframework/integrationmanager.go``, and ``integrations.frameworks``).

Kinds register under their framework name in ``scheduling/jobs/__init__.py``; which of them
kueueweb accepts is the setting ``KUEUEWEB["INTEGRATIONS_FRAMEWORKS"]`` (Kueue's API default,
``["batch/job"]``), checked at startup (``check_frameworks``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from scheduling.core.fields import FieldError
from scheduling.jobframework.interface import GenericJob, JobKind

DEFAULT_FRAMEWORKS = ("batch/job",)
_BUILT_INS = "scheduling.jobs"

_integrations: dict[str, JobKind] = {}


def register(integration: JobKind) -> JobKind:
    """Register a kind under its framework name (one line per kind)."""
    name = integration.framework_name
    if name in _integrations and _integrations[name] is not integration:
        raise ValueError(f"a job integration is already registered as {name!r}")
    _integrations[name] = integration
    return integration


def unregister(framework_name: str) -> None:
    _integrations.pop(framework_name, None)


def _loaded() -> dict[str, JobKind]:
    # The built-in kinds register themselves when their package is imported.
    importlib.import_module(_BUILT_INS)
    return _integrations


def all_kinds() -> list[JobKind]:
    """Every registered kind, those that make no Workload too."""
    return list(_loaded().values())


def registered() -> list[GenericJob]:
    """The kinds Kueue queues (the ones that make Workloads)."""
    return [i for i in _loaded().values() if isinstance(i, GenericJob)]


def by_framework(name: str) -> JobKind | None:
    return _loaded().get(name)


def by_kind(api_version: str, kind: str) -> JobKind | None:
    for integration in _loaded().values():
        if integration.api_version == api_version and integration.kind == kind:
            return integration
    return None


class _StoredJob(Protocol):
    api_version: str
    kind: str


def integration_for(job: _StoredJob) -> GenericJob:
    """The registered kind of a stored job (anything with ``api_version`` and ``kind``) that
    Kueue queues; a kind that makes no Workload (a CronJob) is never run, scaled or
    reported, so asking for it is an error."""
    integration = by_kind(job.api_version, job.kind)
    if not isinstance(integration, GenericJob):
        raise LookupError(f"no job integration is registered for {job.api_version} {job.kind}")
    return integration


def kind_reference(job: _StoredJob) -> str:
    """How a stored job's type is named where a name alone may not tell it: its kind
    (``JobSet``), or ``Kind.group`` when another registered kind has the same kind in
    another API group."""
    group = job.api_version.rpartition("/")[0]
    if any(i.kind == job.kind and i.group != group for i in registered()):
        return f"{job.kind}.{group}"
    return job.kind


def enabled_names(config: Mapping[str, Any]) -> list[str]:
    """The enabled framework names: ``INTEGRATIONS_FRAMEWORKS`` and the kinds listed as
    MultiKueue external frameworks (``Kind.version.group``), enabled by being listed."""
    value = config.get("INTEGRATIONS_FRAMEWORKS")
    return [*(DEFAULT_FRAMEWORKS if value is None else value),
            *external_names(config)]


def external_names(config: Mapping[str, Any]) -> list[str]:
    """``MULTIKUEUE_EXTERNAL_FRAMEWORKS``: the kinds Kueue dispatches through MultiKueue's
    generic adapter (``scheduling.jobs.external``)."""
    return list(config.get("MULTIKUEUE_EXTERNAL_FRAMEWORKS") or ())


def implicitly_enabled(config: Mapping[str, Any]) -> list[str]:
    """The frameworks the enabled ones enable for their objects (a Deployment's ``pod``)
    that are not enabled themselves."""
    names = enabled_names(config)
    implied = {name for i in _loaded().values() if i.enabled_with in names
               for name in i.implicitly_enables}
    return sorted(implied - set(names))


def running_names(config: Mapping[str, Any]) -> list[str]:
    """The frameworks whose objects kueueweb runs: the enabled and the implicitly enabled."""
    return [*enabled_names(config), *implicitly_enabled(config)]


def check_frameworks(names: Iterable[Any]) -> list[str]:
    """What is wrong with a list of enabled framework names (empty when it is right)."""
    problems = []
    # A kind that makes no Workload is a framework of its own when it is enabled by its own
    # name (a Deployment), not by its children's (a CronJob).
    known = sorted(i.framework_name for i in _loaded().values()
                   if i.enabled_with == i.framework_name)
    for name in names:
        if not isinstance(name, str) or name not in known:
            problems.append(f"unknown job framework {name!r} (known: {', '.join(known)})")
    return problems


def enabled_for(
    manifest: Mapping[str, Any], config: Mapping[str, Any]
) -> tuple[JobKind | None, list[FieldError]]:
    """The enabled kind of a submitted object, or the error naming its ``kind``."""
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    integration = by_kind(str(api_version), str(kind))
    names = enabled_names(config)
    if integration is not None and (
            integration.enabled_with in names
            or (integration.enabled_with in implicitly_enabled(config)
                and integration.accepts_implicitly(manifest))):
        return integration, []
    enabled = [i for i in _loaded().values() if i.enabled_with in names]
    accepted = ", ".join(f"{i.api_version} {i.kind}" for i in enabled) or "none"
    return None, [FieldError("kind", f"{api_version} {kind!r} is not an enabled job kind "
                             f"(enabled: {accepted})")]
