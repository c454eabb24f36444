"""How long a simulated pod runs, read from its job the way an operator would guess it.

Pure: no Django, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# A job may say how long its pods run (seconds); otherwise a ``sleep N`` in a container's
# command or arguments is the run time (the Kueue examples sleep).
RUN_SECONDS_ANNOTATION = "kueueweb.io/run-seconds"

_SLEEP = re.compile(r"(?:^|[\s;&|(])sleep\s+(\d+(?:\.\d+)?)([smhd]?)(?=$|[\s;&|)])")
_UNIT = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _annotation_seconds(annotations: Any) -> float | None:
    if not isinstance(annotations, Mapping):
        return None
    value = annotations.get(RUN_SECONDS_ANNOTATION)
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and seconds >= 0 else None


def _command_line(container: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for key in ("command", "args"):
        value = container.get(key)
        if isinstance(value, Sequence) and not isinstance(value, str):
            parts.extend(str(v) for v in value)
    return " ".join(parts)


def sleep_seconds(containers: Sequence[Mapping[str, Any]]) -> float | None:
    """The longest ``sleep N[smhd]`` found in the containers' command lines, if any."""
    found: list[float] = []
    for container in containers:
        if not isinstance(container, Mapping):
            continue
        for amount, unit in _SLEEP.findall(_command_line(container)):
            found.append(float(amount) * _UNIT[unit])
    return max(found) if found else None


def run_seconds(
    template: Mapping[str, Any], job_annotations: Mapping[str, Any] | None, *, default: float
) -> float | None:
    """Seconds a pod of ``template`` runs once started: the run-seconds annotation of the
    pod template, then of the job; a pod whose spec says ``restartPolicy: Always`` (a
    Deployment's, a serving pod's) runs until it is deleted (None), since its containers
    are restarted whenever they exit; else a ``sleep`` in its containers, else
    ``default``. A spec without a restartPolicy keeps the batch guess: the pod templates of
    batch kinds leave it to their controllers."""
    metadata = template.get("metadata") if isinstance(template, Mapping) else None
    for source in ((metadata or {}).get("annotations"), job_annotations):
        seconds = _annotation_seconds(source)
        if seconds is not None:
            return seconds
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if isinstance(spec, Mapping) and spec.get("restartPolicy") == "Always":
        return None
    containers = (spec or {}).get("containers") if isinstance(spec, Mapping) else None
    if isinstance(containers, Sequence):
        slept = sleep_seconds(containers)
        if slept is not None:
            return slept
    return default
