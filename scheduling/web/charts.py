"""Charts of the stored usage samples (``QueueUsageSample``): JSON per subject and metric.

A chart is a list of panels, one per unit (a cluster queue's usage has one panel per flavor
and resource), each with series of ``[epoch ms, value]`` points:

* a point is a sample: ``null`` where no sample was taken (a gap of more than two sampling
  intervals), so a chart never draws a line through time it knows nothing about;
* ``stepped`` says how a value holds between samples: ``"after"`` for a state read at the
  sample's moment (usage, pending: the value holds until the next sample), ``"before"`` for
  what happened during the interval that ends at the sample (the waits of the reservations
  made since the previous sample).

Usage is the quota held (by reserved and admitted workloads), split as Kueue splits it in a
cluster queue's status (``flavorsReservation[].borrowed``): borrowed is usage above the
nominal quota of that moment, and nothing for a queue outside a cohort; the rest is within
nominal. A cohort's chart sums the queues
that were in its subtree (the cohort or one below it, as the tree is now) at each sample; a
flavor's chart sums every queue's usage of that flavor. Each chart costs one or two queries:
the samples of the window, and the cohort tree for a cohort.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import QuerySet, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.core.quantities import format_amount, is_milli_resource
from scheduling.models import ClusterQueue, Cohort, QueueUsageSample, ResourceFlavor
from scheduling.web.queues import role_required

DEFAULT_HOURS = 6
MAX_HOURS = 24
HOURS_CHOICES = (1, 3, 6, 12, 24)

# What each subject can chart: a flavor has no queue of its own to be pending in or wait
# for, and percentiles of different queues do not add up to a cohort's.
METRICS = {
    "clusterqueue": ("usage", "pending", "wait"),
    "cohort": ("usage", "pending"),
    "resourceflavor": ("usage",),
}
MODELS: Mapping[str, type[ClusterQueue] | type[Cohort] | type[ResourceFlavor]] = {
    "clusterqueue": ClusterQueue,
    "cohort": Cohort,
    "resourceflavor": ResourceFlavor,
}

Point = list[Any]  # [epoch ms, value or None]
Panel = dict[str, Any]


class ChartParamError(ValueError):
    """A request parameter that is not valid; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def parse_hours(value: str | None) -> int:
    """The window of a chart, in hours: a whole number from 1 to ``MAX_HOURS``."""
    if value is None or value == "":
        return DEFAULT_HOURS
    try:
        hours = int(value)
    except ValueError:
        hours = 0
    if not 1 <= hours <= MAX_HOURS:
        raise ChartParamError(
            "hours", f"Must be a whole number of hours from 1 to {MAX_HOURS}, not {value!r}."
        )
    return hours


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def sample_interval() -> timedelta:
    return timedelta(seconds=settings.USAGE_SAMPLE_INTERVAL_SECONDS)


def timeline(times: Iterable[datetime]) -> list[datetime | None]:
    """The sample times in order, with ``None`` between two samples more than two sampling
    intervals apart (the sampler was not running): the chart leaves a gap there."""
    out: list[datetime | None] = []
    previous: datetime | None = None
    limit = 2 * sample_interval()
    for moment in sorted(set(times)):
        if previous is not None and moment - previous > limit:
            out.append(None)
        out.append(moment)
        previous = moment
    return out


def points(
    times: Sequence[datetime | None], values: Mapping[datetime, float | int | None]
) -> list[Point]:
    """``[ms, value]`` per sample time, ``null`` where the value is missing; a gap marker
    (``None`` in ``times``) becomes a null point one interval after the sample before it."""
    out: list[Point] = []
    step = sample_interval()
    for index, moment in enumerate(times):
        if moment is None:
            before = times[index - 1]
            assert before is not None  # a gap always follows a sample
            out.append([_ms(before + step), None])
        else:
            out.append([_ms(moment), values.get(moment)])
    return out


# --- Units and text --------------------------------------------------------------------------


def unit_of(resource: str) -> str:
    """How values of ``resource`` read: CPU in cores, memory and storage in bytes, the rest
    as counts (pods, GPUs, ...)."""
    if is_milli_resource(resource):
        return "cores"
    if resource in ("memory", "ephemeral-storage", "storage") or resource.startswith("hugepages-"):
        return "bytes"
    return "count"


def value_text(value: float | int | None, unit: str, resource: str = "") -> str:
    """A value as the rest of the UI writes it: quantities as Kubernetes quantities."""
    if value is None:
        return "no sample"
    if unit == "seconds":
        return f"{value:.1f} s" if value < 10 else f"{round(value)} s"
    if resource and unit in ("cores", "bytes"):
        amount = round(value * 1000) if is_milli_resource(resource) else round(value)
        return format_amount(resource, amount)
    return f"{value:g}"


def _latest(panel: Panel, empty: str = "no sample") -> Panel:
    """The panel with the values of its latest sample as text: the chart's text
    alternative. (The timeline always ends with a sample, never with a gap.)"""
    rows = []
    at = None
    for series in panel["series"]:
        last = series["points"][-1] if series["points"] else [None, None]
        at = last[0] if last[0] is not None else at
        rows.append(
            {
                "label": series["label"],
                "value": last[1],
                "text": (
                    empty
                    if last[1] is None
                    else value_text(last[1], panel["unit"], panel.get("resource", ""))
                ),
            }
        )
    panel["latest"] = {"at": at, "values": rows}
    return panel


# --- Usage -----------------------------------------------------------------------------------


def split_usage(
    usage: Mapping[str, float | int], nominal: Mapping[str, float | int], in_cohort: bool
) -> dict[str, tuple[float, float, float]]:
    """(within nominal, borrowed, nominal) per "flavor/resource" of one sample: borrowed is
    usage above nominal, nothing outside a cohort (Kueue's ``borrowed``)."""
    out = {}
    for key in set(usage) | set(nominal):
        used = usage.get(key, 0)
        quota = nominal.get(key, 0)
        borrowed = max(0, used - quota) if in_cohort else 0
        out[key] = (used - borrowed, borrowed, quota)
    return out


def _usage_panels(
    rows: Iterable[tuple[datetime, dict[str, Any], dict[str, Any], str]],
    group: Callable[[str], tuple[str, str] | None],
    nominal_label: str,
) -> list[Panel]:
    """Usage panels from sample rows (time, usage, nominal, cohort); ``group`` maps a
    "flavor/resource" key to the (flavor, resource) panel it adds to (None: not charted)."""
    totals: dict[tuple[str, str], dict[datetime, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0])
    )
    times: set[datetime] = set()
    for sampled_at, usage, nominal, cohort in rows:
        times.add(sampled_at)
        for key, (within, borrowed, quota) in split_usage(usage, nominal, bool(cohort)).items():
            target = group(key)
            if target is None:
                continue
            total = totals[target][sampled_at]
            total[0] += within
            total[1] += borrowed
            total[2] += quota
    line = timeline(times)
    panels = []
    for (flavor, resource), by_time in sorted(totals.items()):
        series = []
        for index, (label, kind) in enumerate(
            (("within nominal", "within"), ("borrowed", "borrowed"), (nominal_label, "nominal"))
        ):
            values = {t: _tidy(v[index]) for t, v in by_time.items()}
            series.append({"label": label, "kind": kind, "points": points(line, values)})
        panels.append(
            _latest(
                {
                    "title": f"{flavor} · {resource}",
                    "flavor": flavor,
                    "resource": resource,
                    "unit": unit_of(resource),
                    "stepped": "after",
                    "series": series,
                }
            )
        )
    return panels


def _tidy(value: float) -> float | int:
    """Sums of base units without float noise (0.30000000000000004 cores)."""
    rounded = round(value, 6)
    return int(rounded) if float(rounded).is_integer() else rounded


def _split_key(key: str) -> tuple[str, str]:
    flavor, _, resource = key.rpartition("/")
    return flavor, resource


def cohort_subtree(cluster: Cluster, name: str) -> set[str]:
    """The names of ``name`` and every cohort below it, as the tree is now (one query)."""
    children: dict[str | None, list[str]] = defaultdict(list)
    for cohort, parent in Cohort.objects.filter(cluster=cluster).values_list(
        "name", "parent__name"
    ):
        children[parent].append(cohort)
    found, stack = set(), [name]
    while stack:
        current = stack.pop()
        if current not in found:
            found.add(current)
            stack.extend(children.get(current, ()))
    return found


def _window(cluster: Cluster, hours: int) -> QuerySet[QueueUsageSample]:
    since = timezone.now() - timedelta(hours=hours)
    return QueueUsageSample.objects.filter(cluster=cluster, sampled_at__gte=since).order_by()


def usage_chart(cluster: Cluster, subject: str, name: str, hours: int) -> list[Panel]:
    """Usage per (flavor, resource): of one cluster queue, summed over the queues of a
    cohort's subtree, or summed over every queue's share of one flavor."""
    samples = _window(cluster, hours)
    fields = ("sampled_at", "usage", "nominal", "cohort")
    if subject == "clusterqueue":
        rows = samples.filter(cluster_queue=name).values_list(*fields)
        return _usage_panels(rows, _split_key, "nominal quota")
    if subject == "cohort":
        rows = samples.filter(cohort__in=cohort_subtree(cluster, name)).values_list(*fields)
        return _usage_panels(rows, _split_key, "nominal quota of its queues")

    def of_flavor(key: str) -> tuple[str, str] | None:
        flavor, resource = _split_key(key)
        return (flavor, resource) if flavor == name else None

    return _usage_panels(samples.values_list(*fields), of_flavor, "nominal quota of its queues")


# --- Pending and waits ------------------------------------------------------------------------


def pending_chart(cluster: Cluster, subject: str, name: str, hours: int) -> list[Panel]:
    """Pending workloads per sample: the total, then per local queue (a cluster queue) or per
    cluster queue (a cohort's subtree)."""
    samples = _window(cluster, hours)
    if subject == "clusterqueue":
        samples = samples.filter(cluster_queue=name)
    else:
        samples = samples.filter(cohort__in=cohort_subtree(cluster, name))
    total: dict[datetime, int] = defaultdict(int)
    parts: dict[str, dict[datetime, int]] = defaultdict(dict)
    for sampled_at, queue, pending, local_pending in samples.values_list(
        "sampled_at", "cluster_queue", "pending", "local_pending"
    ):
        total[sampled_at] += pending
        if subject == "clusterqueue":
            for local_queue, n in (local_pending or {}).items():
                parts[f"LocalQueue {local_queue}"][sampled_at] = n
        else:
            parts[f"ClusterQueue {queue}"][sampled_at] = pending
    line = timeline(total)
    series = [{"label": "pending", "kind": "total", "points": points(line, total)}]
    for label, values in sorted(parts.items()):
        # A part without a sample at some time had nothing pending then (the sampler
        # records only local queues with pending workloads), unless the queue had no
        # sample at all then.
        filled = {t: values.get(t, 0) for t in total} if subject == "clusterqueue" else values
        series.append({"label": label, "kind": "part", "points": points(line, filled)})
    return [
        _latest(
            {"title": "Pending workloads", "unit": "count", "stepped": "after", "series": series}
        )
    ]


def wait_chart(cluster: Cluster, name: str, hours: int) -> list[Panel]:
    """The median and 90th percentile of the waits of the reservations of each interval."""
    p50: dict[datetime, float | None] = {}
    p90: dict[datetime, float | None] = {}
    counts: dict[datetime, int] = {}
    for sampled_at, median, high, n in (
        _window(cluster, hours)
        .filter(cluster_queue=name)
        .values_list("sampled_at", "wait_p50_seconds", "wait_p90_seconds", "reservations")
    ):
        p50[sampled_at], p90[sampled_at], counts[sampled_at] = median, high, n
    line = timeline(p50)
    series = [
        {"label": "median wait", "kind": "p50", "points": points(line, p50)},
        {"label": "90th percentile wait", "kind": "p90", "points": points(line, p90)},
    ]
    panel = _latest(
        {
            "title": "Wait for quota reservation",
            "unit": "seconds",
            "stepped": "before",
            "series": series,
        },
        empty="no reservation in the interval",
    )
    if counts:
        n = counts[max(counts)]
        panel["latest"]["values"].append(
            {"label": "quota reservations in the interval", "value": n, "text": str(n)}
        )
    return [panel]


def chart(cluster: Cluster, subject: str, name: str, metric: str, hours: int) -> dict[str, Any]:
    """The JSON of one chart (``metric`` of ``subject`` ``name`` over the last ``hours``)."""
    if metric == "usage":
        panels = usage_chart(cluster, subject, name, hours)
    elif metric == "pending":
        panels = pending_chart(cluster, subject, name, hours)
    else:
        panels = wait_chart(cluster, name, hours)
    return {
        "subject": subject,
        "name": name,
        "metric": metric,
        "hours": hours,
        "interval_seconds": settings.USAGE_SAMPLE_INTERVAL_SECONDS,
        "panels": panels,
    }


# --- The overview ------------------------------------------------------------------------------


def domain_history(clusters: Sequence[Cluster], hours: int) -> dict[str, Any]:
    """Pending and admitted workloads per domain over time (one query, summed per domain
    and sample in the database), as a one-panel chart."""
    since = timezone.now() - timedelta(hours=hours)
    names = {c.pk: c.name for c in clusters}
    values: dict[tuple[int, str], dict[datetime, int]] = defaultdict(dict)
    times: set[datetime] = set()
    for cluster_id, sampled_at, pending, admitted in (
        QueueUsageSample.objects.filter(cluster_id__in=names, sampled_at__gte=since)
        .values_list("cluster_id", "sampled_at")
        .annotate(_pending=Sum("pending"), _admitted=Sum("admitted"))
        .order_by()
    ):
        times.add(sampled_at)
        values[(cluster_id, "pending")][sampled_at] = pending
        values[(cluster_id, "admitted")][sampled_at] = admitted
    line = timeline(times)
    series = [
        {
            "label": f"{name}: {kind}",
            "kind": kind,
            "points": points(line, values[(cluster_id, kind)]),
        }
        for cluster_id, name in names.items()
        for kind in ("pending", "admitted")
    ]
    panels = (
        [
            _latest(
                {
                    "title": "Pending and admitted workloads",
                    "unit": "count",
                    "stepped": "after",
                    "series": series,
                }
            )
        ]
        if times
        else []
    )
    return {
        "hours": hours,
        "interval_seconds": settings.USAGE_SAMPLE_INTERVAL_SECONDS,
        "panels": panels,
    }


# --- View ------------------------------------------------------------------------------------


def _error(field: str, message: str) -> JsonResponse:
    return JsonResponse({"errors": {field: [message]}}, status=400)


@role_required
def chart_data(
    request: HttpRequest, cluster: str, subject: str, name: str, metric: str
) -> HttpResponse:
    """``GET c/<cluster>/charts/<subject>/<name>/<metric>/?hours=N``: one chart's JSON."""
    if subject not in METRICS:
        return _error("subject", f"Must be one of {', '.join(METRICS)}, not {subject!r}.")
    if metric not in METRICS[subject]:
        return _error(
            "metric", f"A {subject} charts {', '.join(METRICS[subject])}, not {metric!r}."
        )
    try:
        hours = parse_hours(request.GET.get("hours"))
    except ChartParamError as error:
        return _error(error.field, str(error))
    domain = get_object_or_404(Cluster, name=cluster)
    get_object_or_404(MODELS[subject], cluster=domain, name=name)
    return JsonResponse(chart(domain, subject, name, metric, hours))


@role_required
def overview_history_data(request: HttpRequest) -> HttpResponse:
    """``GET overview/history/data/?hours=N``: pending and admitted workloads per domain."""
    try:
        hours = parse_hours(request.GET.get("hours"))
    except ChartParamError as error:
        return _error(error.field, str(error))
    return JsonResponse(domain_history(list(Cluster.objects.all()), hours))
