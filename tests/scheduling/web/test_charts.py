"""Chart data: usage split as Kueue splits it, sums per cohort subtree and per flavor, pending
per local queue, interval waits, gaps where no sample exists, and validated parameters."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from multicluster.models import Cluster
from scheduling.metrics.history import sample_usage
from scheduling.models import Cohort, QueueUsageSample
from scheduling.scheduler import admission
from scheduling.web.charts import split_usage


@pytest.fixture
def ui(viewer_ui: Client) -> Client:
    return viewer_ui


@pytest.fixture
def now() -> datetime:
    return timezone.now().replace(microsecond=0) - timedelta(minutes=30)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def sample(manager: Cluster, queue: str, at: datetime, **fields: Any) -> QueueUsageSample:
    return QueueUsageSample.objects.create(
        cluster=manager, cluster_queue=queue, sampled_at=at, **fields
    )


def get_chart(ui: Client, subject: str, name: str, metric: str, **params: Any) -> Any:
    url = reverse(
        "ui-chart",
        kwargs={"cluster": "manager", "subject": subject, "name": name, "metric": metric},
    )
    response = ui.get(url, params)
    assert response.status_code == 200, response.content
    return response.json()


def series(panel: dict[str, Any], kind: str) -> list[list[Any]]:
    return next(s["points"] for s in panel["series"] if s["kind"] == kind)


def test_split_usage_borrows_only_above_nominal_and_only_in_a_cohort() -> None:
    usage, nominal = {"f/cpu": 6, "f/memory": 1}, {"f/cpu": 4, "f/memory": 2, "f/gpu": 1}
    assert split_usage(usage, nominal, in_cohort=True) == {
        "f/cpu": (4, 2, 4),
        "f/memory": (1, 0, 2),
        "f/gpu": (0, 0, 1),
    }
    # Kueue reports nothing borrowed by a queue outside a cohort (a quota cut below usage).
    assert split_usage(usage, nominal, in_cohort=False)["f/cpu"] == (6, 0, 4)


def test_cluster_queue_usage_is_stepped_with_gaps_where_no_sample_exists(
    manager, make_queue, ui, now, settings
) -> None:
    settings.USAGE_SAMPLE_INTERVAL_SECONDS = 60
    make_queue("team-a", {"cpu": "4"}, cohort="org")
    times = [now, now + timedelta(minutes=1), now + timedelta(minutes=10)]
    # The quota grows before the last sample: 6 is then within the nominal quota of the moment.
    for moment, used, quota in zip(times, (3, 6, 6), (4, 4, 8), strict=True):
        sample(
            manager,
            "team-a",
            moment,
            usage={"default/cpu": used},
            nominal={"default/cpu": quota},
            cohort="org",
        )
    sample(manager, "other", times[1], usage={"default/cpu": 1}, nominal={"default/cpu": 1})

    data = get_chart(ui, "clusterqueue", "team-a", "usage", hours=1)
    assert data["hours"] == 1
    [panel] = data["panels"]
    assert (panel["title"], panel["unit"], panel["stepped"]) == ("default · cpu", "cores", "after")
    gap = ms(times[1] + timedelta(minutes=1))
    assert series(panel, "within") == [
        [ms(times[0]), 3],
        [ms(times[1]), 4],
        [gap, None],
        [ms(times[2]), 6],
    ]
    assert series(panel, "borrowed") == [
        [ms(times[0]), 0],
        [ms(times[1]), 2],
        [gap, None],
        [ms(times[2]), 0],
    ]
    assert series(panel, "nominal") == [
        [ms(times[0]), 4],
        [ms(times[1]), 4],
        [gap, None],
        [ms(times[2]), 8],
    ]
    latest = {row["label"]: row["text"] for row in panel["latest"]["values"]}
    assert latest == {"within nominal": "6", "borrowed": "0", "nominal quota": "8"}
    assert panel["latest"]["at"] == ms(times[2])


def test_window_excludes_older_samples(manager, make_queue, ui, now, settings) -> None:
    settings.USAGE_SAMPLE_INTERVAL_SECONDS = 60
    make_queue("team-a", {"cpu": "4"})
    sample(
        manager,
        "team-a",
        now - timedelta(hours=2),
        usage={"default/cpu": 1},
        nominal={"default/cpu": 4},
    )
    sample(manager, "team-a", now, usage={"default/cpu": 2}, nominal={"default/cpu": 4})
    [panel] = get_chart(ui, "clusterqueue", "team-a", "usage", hours=1)["panels"]
    assert series(panel, "within") == [[ms(now), 2]]
    [panel] = get_chart(ui, "clusterqueue", "team-a", "usage", hours=3)["panels"]
    old = now - timedelta(hours=2)
    assert series(panel, "within") == [
        [ms(old), 1],
        [ms(old + timedelta(minutes=1)), None],
        [ms(now), 2],
    ]


def test_cohort_usage_sums_its_subtree(manager, make_queue, ui, now) -> None:
    make_queue("a", {"cpu": "4"}, cohort="org")
    make_queue("b", {"cpu": "2"}, cohort="team")
    Cohort.objects.filter(name="team").update(parent=Cohort.objects.get(name="org"))
    make_queue("c", {"cpu": "1"}, cohort="elsewhere")
    memory = 2 * 1024**3
    sample(
        manager,
        "a",
        now,
        usage={"default/cpu": 5, "default/memory": memory},
        nominal={"default/cpu": 4, "default/memory": memory},
        cohort="org",
    )
    sample(manager, "b", now, usage={"default/cpu": 1}, nominal={"default/cpu": 2}, cohort="team")
    sample(
        manager, "c", now, usage={"default/cpu": 9}, nominal={"default/cpu": 1}, cohort="elsewhere"
    )

    cpu, mem = get_chart(ui, "cohort", "org", "usage")["panels"]
    assert (series(cpu, "within"), series(cpu, "borrowed"), series(cpu, "nominal")) == (
        [[ms(now), 5]],
        [[ms(now), 1]],
        [[ms(now), 6]],
    )
    assert (mem["unit"], series(mem, "within")) == ("bytes", [[ms(now), memory]])
    latest = {row["label"]: row["text"] for row in mem["latest"]["values"]}
    assert latest["within nominal"] == "2Gi"
    [team_cpu] = get_chart(ui, "cohort", "team", "usage")["panels"]
    assert series(team_cpu, "within") == [[ms(now), 1]]


def test_flavor_usage_sums_the_queues_using_it(manager, make_queue, ui, now) -> None:
    make_queue("a", {"cpu": "4"}, flavor="spot", cohort="org")
    make_queue("b", {"cpu": "2"}, flavor="spot", cohort="org")
    sample(
        manager,
        "a",
        now,
        usage={"spot/cpu": 4.5, "default/cpu": 7},
        nominal={"spot/cpu": 4, "default/cpu": 8},
        cohort="org",
    )
    sample(manager, "b", now, usage={"spot/cpu": 0.25}, nominal={"spot/cpu": 2}, cohort="org")
    [panel] = get_chart(ui, "resourceflavor", "spot", "usage")["panels"]
    assert panel["title"] == "spot · cpu"
    assert series(panel, "within") == [[ms(now), 4.25]]
    assert series(panel, "borrowed") == [[ms(now), 0.5]]
    assert series(panel, "nominal") == [[ms(now), 6]]
    latest = {row["label"]: row["text"] for row in panel["latest"]["values"]}
    assert latest["within nominal"] == "4250m"


def test_pending_per_local_queue_and_per_cohort_queue(manager, make_queue, ui, now) -> None:
    make_queue("a", {"cpu": "4"}, cohort="org")
    later = now + timedelta(minutes=1)
    sample(manager, "a", now, pending=3, local_pending={"ns/lq-a": 2, "x/lq-x": 1}, cohort="org")
    sample(manager, "a", later, pending=1, local_pending={"ns/lq-a": 1}, cohort="org")
    sample(manager, "b", later, pending=5, cohort="org")

    [panel] = get_chart(ui, "clusterqueue", "a", "pending")["panels"]
    assert panel["stepped"] == "after"
    assert series(panel, "total") == [[ms(now), 3], [ms(later), 1]]
    parts = {s["label"]: s["points"] for s in panel["series"] if s["kind"] == "part"}
    # A local queue the sampler did not list had nothing pending then.
    assert parts == {
        "LocalQueue ns/lq-a": [[ms(now), 2], [ms(later), 1]],
        "LocalQueue x/lq-x": [[ms(now), 1], [ms(later), 0]],
    }

    [panel] = get_chart(ui, "cohort", "org", "pending")["panels"]
    assert series(panel, "total") == [[ms(now), 3], [ms(later), 6]]
    parts = {s["label"]: s["points"] for s in panel["series"] if s["kind"] == "part"}
    # Queue b has no sample at the first moment: unknown, not zero.
    assert parts["ClusterQueue b"] == [[ms(now), None], [ms(later), 5]]


def test_wait_chart_steps_before_each_sample(manager, make_queue, ui, now) -> None:
    make_queue("a", {"cpu": "4"})
    later = now + timedelta(minutes=1)
    sample(manager, "a", now, reservations=4, wait_p50_seconds=10, wait_p90_seconds=100)
    sample(manager, "a", later, reservations=0)
    [panel] = get_chart(ui, "clusterqueue", "a", "wait")["panels"]
    assert (panel["unit"], panel["stepped"]) == ("seconds", "before")
    assert series(panel, "p50") == [[ms(now), 10], [ms(later), None]]
    assert series(panel, "p90") == [[ms(now), 100], [ms(later), None]]
    latest = {row["label"]: row["text"] for row in panel["latest"]["values"]}
    assert latest == {
        "median wait": "no reservation in the interval",
        "90th percentile wait": "no reservation in the interval",
        "quota reservations in the interval": "0",
    }


def test_charts_from_real_samples_show_kueues_borrowing(
    manager, make_queue, make_workload, ui, settings
) -> None:
    settings.USAGE_SAMPLE_INTERVAL_SECONDS = 60
    start = timezone.now().replace(microsecond=0) - timedelta(minutes=5)
    make_queue("team-a", {"cpu": "4"}, cohort="org")
    make_queue("team-b", {"cpu": "4"}, cohort="org")
    make_workload("big", "lq-team-a", {"cpu": "6"})
    make_workload("waits", "lq-team-a", {"cpu": "3"})
    admission.run_admission_cycle(manager.pk, now=start)
    sample_usage(now=start + timedelta(seconds=10))

    [panel] = get_chart(ui, "clusterqueue", "team-a", "usage")["panels"]
    assert [series(panel, k)[-1][1] for k in ("within", "borrowed", "nominal")] == [4, 2, 4]
    [panel] = get_chart(ui, "clusterqueue", "team-b", "usage")["panels"]
    assert [series(panel, k)[-1][1] for k in ("within", "borrowed", "nominal")] == [0, 0, 4]
    [panel] = get_chart(ui, "clusterqueue", "team-a", "pending")["panels"]
    assert series(panel, "total")[-1][1] == 1
    [panel] = get_chart(ui, "clusterqueue", "team-a", "wait")["panels"]
    assert series(panel, "p50")[-1][1] is not None
    [panel] = get_chart(ui, "resourceflavor", "default", "usage")["panels"]
    assert [series(panel, k)[-1][1] for k in ("within", "borrowed", "nominal")] == [4, 2, 8]


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        (("clusterqueue", "a", "usage"), {"hours": "0"}, "hours"),
        (("clusterqueue", "a", "usage"), {"hours": "25"}, "hours"),
        (("clusterqueue", "a", "usage"), {"hours": "six"}, "hours"),
        (("queue", "a", "usage"), {}, "subject"),
        (("clusterqueue", "a", "temperature"), {}, "metric"),
        (("cohort", "org", "wait"), {}, "metric"),
        (("resourceflavor", "default", "pending"), {}, "metric"),
    ],
)
def test_bad_parameters_are_400_naming_the_field(
    manager, make_queue, ui, path, params, field
) -> None:
    make_queue("a", {"cpu": "1"}, cohort="org")
    subject, name, metric = path
    url = reverse(
        "ui-chart",
        kwargs={"cluster": "manager", "subject": subject, "name": name, "metric": metric},
    )
    response = ui.get(url, params)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert list(errors) == [field]
    assert errors[field][0]


def test_unknown_objects_are_404(manager, make_queue, ui) -> None:
    make_queue("a", {"cpu": "1"})
    for subject, name in (("clusterqueue", "nope"), ("cohort", "nope"), ("resourceflavor", "nope")):
        url = reverse(
            "ui-chart",
            kwargs={"cluster": "manager", "subject": subject, "name": name, "metric": "usage"},
        )
        assert ui.get(url).status_code == 404
    url = reverse(
        "ui-chart",
        kwargs={"cluster": "elsewhere", "subject": "clusterqueue", "name": "a", "metric": "usage"},
    )
    assert ui.get(url).status_code == 404


def test_charts_need_login_and_a_role(manager, make_queue, client, make_user) -> None:
    make_queue("a", {"cpu": "1"})
    for url in (
        reverse(
            "ui-chart",
            kwargs={
                "cluster": "manager",
                "subject": "clusterqueue",
                "name": "a",
                "metric": "usage",
            },
        ),
        reverse("ui-overview-history-data"),
    ):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/login/")
    client.force_login(make_user("nobody"))
    assert client.get(url).status_code == 403


def test_overview_history_sums_each_domain(manager, make_queue, ui, now) -> None:
    make_queue("a", {"cpu": "1"})
    make_queue("b", {"cpu": "1"})
    sample(manager, "a", now, pending=2, admitted=1)
    sample(manager, "b", now, pending=3, admitted=4)
    url = reverse("ui-overview-history-data")
    data = ui.get(url, {"hours": 1}).json()
    [panel] = data["panels"]
    assert panel["stepped"] == "after"
    points = {s["label"]: s["points"] for s in panel["series"]}
    assert points == {"manager: pending": [[ms(now), 5]], "manager: admitted": [[ms(now), 5]]}
    assert ui.get(url, {"hours": "x"}).json()["errors"]["hours"]
    QueueUsageSample.objects.all().delete()
    assert ui.get(url).json()["panels"] == []


def test_pages_include_the_chart_partials(manager, make_queue, ui) -> None:
    make_queue("a", {"cpu": "1"})
    html = ui.get("/?hours=3").content.decode()
    data_url = reverse("ui-overview-history-data")
    assert f'data-chart-url="{data_url}" data-chart-hours="3"' in html
    assert "js/charts.js" in html
    assert "chart.umd.min.js" in html
    html = ui.get(
        reverse("ui-clusterqueue", kwargs={"cluster": "manager", "name": "a"}), {"hours": "12"}
    ).content.decode()
    for metric in ("usage", "pending", "wait"):
        url = reverse(
            "ui-chart",
            kwargs={"cluster": "manager", "subject": "clusterqueue", "name": "a", "metric": metric},
        )
        assert f'id="cq-{metric}-chart" data-chart-url="{url}" data-chart-hours="12"' in html
    assert 'href="?hours=12#cq-charts" aria-current="true"' in html
    assert "js/charts.js" in html
