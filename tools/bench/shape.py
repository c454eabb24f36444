"""The shape of a scheduler benchmark: Kueue's ``generator.yaml`` format, read and expanded.

A shape names cohort sets, each with queue sets, each with workload sets (Kueue
``test/performance/scheduler/runner/generator``). Expanding it gives the cluster queues
(named as Kueue's generator names them: ``<class>-<set>-<index>-<cohort>``, each with a
LocalQueue of the same name in a namespace of the same name) and the creation timeline:
every workload set of every queue creates its ``count`` workloads concurrently with the
others, one every ``creationIntervalMs``, the first one interval after the start.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduling.core.quantities import quantity_to_int
from scheduling.manifests import yamlio
from scheduling.validation import FieldError

# Kueue's generator labels (generator.go): the runner reads the running time from the first.
RUNNING_TIME_LABEL = "kueue.x-k8s.io/performance-scheduler-running-ms"
CLASS_LABEL = "kueue.x-k8s.io/performance-scheduler-class"
PREEMPTION_POLICIES = ("Never", "LowerPriority", "LowerOrNewerEqualPriority", "Any")


class ShapeError(ValueError):
    """A shape file that cannot be run; ``errors`` name each bad field."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(f"{e.path}: {e.message}" for e in errors))
        self.errors = errors


@dataclass(frozen=True)
class WorkloadTemplate:
    class_name: str
    runtime_ms: int
    priority: int
    request: str  # cpu, as a Kubernetes quantity
    request_milli: int


@dataclass(frozen=True)
class WorkloadsSet:
    count: int
    creation_interval_ms: int
    workloads: tuple[WorkloadTemplate, ...]


@dataclass(frozen=True)
class QueuesSet:
    class_name: str
    count: int
    nominal_quota: str
    borrowing_limit: str | None
    reclaim_within_cohort: str
    within_cluster_queue: str
    workloads_sets: tuple[WorkloadsSet, ...]


@dataclass(frozen=True)
class CohortSet:
    class_name: str
    count: int
    queues_sets: tuple[QueuesSet, ...]


@dataclass(frozen=True)
class KueueFigures:
    """What Kueue measured on the shape, for the ratios of the summary."""

    wall_ms: int
    average_time_to_admission_ms: Mapping[str, int]


@dataclass(frozen=True)
class Shape:
    name: str
    cohorts: tuple[CohortSet, ...]
    kueue: KueueFigures | None
    lower_bound_wall_ms: int | None

    def queues(self) -> list[QueueInstance]:
        """Every cluster queue of the shape, in generation order."""
        result = []
        for cohort_set in self.cohorts:
            for cohort_index in range(cohort_set.count):
                cohort = f"{cohort_set.class_name}-{cohort_index}"
                for set_index, queues_set in enumerate(cohort_set.queues_sets):
                    for index in range(queues_set.count):
                        name = f"{queues_set.class_name}-{set_index}-{index}-{cohort}"
                        result.append(QueueInstance(name=name, cohort=cohort, spec=queues_set))
        return result

    @property
    def total_workloads(self) -> int:
        return sum(
            cohort_set.count * queues_set.count * wl_set.count * len(wl_set.workloads)
            for cohort_set in self.cohorts
            for queues_set in cohort_set.queues_sets
            for wl_set in queues_set.workloads_sets
        )

    def timeline(self) -> Iterator[Creation]:
        """Every workload to create, in order of creation time (ms after the start)."""
        streams = []
        for queue in self.queues():
            for set_index, wl_set in enumerate(queue.spec.workloads_sets):
                streams.append(_set_stream(queue, set_index, wl_set))
        return heapq.merge(*streams, key=lambda c: (c.at_ms, c.sequence_key))


@dataclass(frozen=True)
class QueueInstance:
    """One cluster queue of the shape (and its LocalQueue and namespace, same name)."""

    name: str
    cohort: str
    spec: QueuesSet


@dataclass(frozen=True)
class Creation:
    at_ms: int
    queue: str  # the cluster queue; also the namespace and the LocalQueue
    name: str
    template: WorkloadTemplate

    @property
    def sequence_key(self) -> tuple[str, str]:
        return (self.queue, self.name)


def _set_stream(queue: QueueInstance, set_index: int, wl_set: WorkloadsSet) -> Iterator[Creation]:
    # Kueue's generateWlSet waits one interval before each workload it creates.
    step = 0
    for si in range(wl_set.count):
        for i, template in enumerate(wl_set.workloads):
            step += 1
            yield Creation(
                at_ms=step * wl_set.creation_interval_ms,
                queue=queue.name,
                name=f"{template.class_name}-{set_index}-{si}-{i}",
                template=template,
            )


# --- reading ---------------------------------------------------------------------------------


def load_shape(path: str | Path) -> Shape:
    """Read a shape file; raises ShapeError naming every bad field, OSError if unreadable."""
    data = Path(path).read_bytes()
    try:
        documents = yamlio.load_yaml_documents(data)
    except yamlio.ManifestSyntaxError as exc:
        raise ShapeError([FieldError("(file)", str(exc))]) from exc
    if len(documents) != 1:
        raise ShapeError([FieldError("(file)", "must hold exactly one YAML document")])
    return read_shape(documents[0])


def read_shape(document: Any) -> Shape:
    reader = _Reader()
    shape = reader.shape(document)
    if reader.errors or shape is None:
        raise ShapeError(reader.errors)
    return shape


class _Reader:
    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def fail(self, path: str, message: str) -> None:
        self.errors.append(FieldError(path, message))

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            self.fail(path, "must be a mapping")
            return {}
        return value

    def items(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list) or not value:
            self.fail(path, "must be a non-empty list")
            return []
        return value

    def integer(self, value: Any, path: str, *, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(path, f"must be an integer ≥ {minimum}")
            return minimum
        return int(value)

    def text(self, value: Any, path: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(path, "must be a non-empty string")
            return ""
        return value

    def cpu(self, value: Any, path: str) -> tuple[str, int]:
        text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
        try:
            milli = quantity_to_int("cpu", text)
        except (ValueError, TypeError):
            self.fail(path, f"must be a cpu quantity, not {value!r}")
            return "0", 0
        if milli < 0:
            self.fail(path, "must not be negative")
        return text, milli

    def policy(self, value: Any, path: str, default: str) -> str:
        if value is None:
            return default
        if value not in PREEMPTION_POLICIES:
            self.fail(path, f"must be one of {', '.join(PREEMPTION_POLICIES)}")
            return default
        return str(value)

    def shape(self, document: Any) -> Shape | None:
        doc = self.mapping(document, "(document)")
        cohorts = tuple(
            self.cohort_set(item, f"cohorts[{i}]")
            for i, item in enumerate(self.items(doc.get("cohorts"), "cohorts"))
        )
        kueue = None
        if doc.get("kueue") is not None:
            figures = self.mapping(doc["kueue"], "kueue")
            averages = self.mapping(figures.get("averageTimeToAdmissionMs", {}),
                                    "kueue.averageTimeToAdmissionMs")
            kueue = KueueFigures(
                wall_ms=self.integer(figures.get("wallMs"), "kueue.wallMs", minimum=1),
                average_time_to_admission_ms={
                    str(k): self.integer(v, f"kueue.averageTimeToAdmissionMs.{k}", minimum=0)
                    for k, v in averages.items()
                },
            )
        lower = doc.get("lowerBoundWallMs")
        return Shape(
            name=self.text(doc.get("name", "shape"), "name"),
            cohorts=cohorts,
            kueue=kueue,
            lower_bound_wall_ms=(self.integer(lower, "lowerBoundWallMs", minimum=1)
                                 if lower is not None else None),
        )

    def cohort_set(self, value: Any, path: str) -> CohortSet:
        doc = self.mapping(value, path)
        return CohortSet(
            class_name=self.text(doc.get("className"), f"{path}.className"),
            count=self.integer(doc.get("count"), f"{path}.count", minimum=1),
            queues_sets=tuple(
                self.queues_set(item, f"{path}.queuesSets[{i}]")
                for i, item in enumerate(self.items(doc.get("queuesSets"), f"{path}.queuesSets"))
            ),
        )

    def queues_set(self, value: Any, path: str) -> QueuesSet:
        doc = self.mapping(value, path)
        nominal, _ = self.cpu(doc.get("nominalQuota"), f"{path}.nominalQuota")
        borrowing = None
        if doc.get("borrowingLimit") is not None:
            borrowing, _ = self.cpu(doc["borrowingLimit"], f"{path}.borrowingLimit")
        return QueuesSet(
            class_name=self.text(doc.get("className"), f"{path}.className"),
            count=self.integer(doc.get("count"), f"{path}.count", minimum=1),
            nominal_quota=nominal,
            borrowing_limit=borrowing,
            reclaim_within_cohort=self.policy(doc.get("reclaimWithinCohort"),
                                              f"{path}.reclaimWithinCohort", "Never"),
            within_cluster_queue=self.policy(doc.get("withinClusterQueue"),
                                             f"{path}.withinClusterQueue", "Never"),
            workloads_sets=tuple(
                self.workloads_set(item, f"{path}.workloadsSets[{i}]")
                for i, item in enumerate(
                    self.items(doc.get("workloadsSets"), f"{path}.workloadsSets"))
            ),
        )

    def workloads_set(self, value: Any, path: str) -> WorkloadsSet:
        doc = self.mapping(value, path)
        return WorkloadsSet(
            count=self.integer(doc.get("count"), f"{path}.count", minimum=1),
            creation_interval_ms=self.integer(doc.get("creationIntervalMs", 0),
                                              f"{path}.creationIntervalMs", minimum=0),
            workloads=tuple(
                self.template(item, f"{path}.workloads[{i}]")
                for i, item in enumerate(self.items(doc.get("workloads"), f"{path}.workloads"))
            ),
        )

    def template(self, value: Any, path: str) -> WorkloadTemplate:
        doc = self.mapping(value, path)
        request, milli = self.cpu(doc.get("request"), f"{path}.request")
        if milli == 0 and not any(e.path == f"{path}.request" for e in self.errors):
            self.fail(f"{path}.request", "must be more than 0")
        priority = doc.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int) or not (
                -(2**31) <= priority < 2**31):
            self.fail(f"{path}.priority", "must be an int32")
            priority = 0
        return WorkloadTemplate(
            class_name=self.text(doc.get("className"), f"{path}.className"),
            runtime_ms=self.integer(doc.get("runtimeMs"), f"{path}.runtimeMs", minimum=0),
            priority=priority,
            request=request,
            request_milli=milli,
        )
