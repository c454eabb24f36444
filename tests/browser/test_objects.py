"""Cohort, ResourceFlavor and YAML pages in a real browser: live updates, links, copy and
download."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.urls import reverse

from multicluster.models import Cluster
from scheduling import services
from scheduling.models import ClusterQueue, Cohort, ResourceFlavor, Workload
from tests.fixtures.browser import run_elsewhere, wait_live
from tests.fixtures.scheduling import job_manifest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

ADMIT_ELSEWHERE = (
    "from django.utils import timezone\n"
    "from scheduling.scheduler.admission import run_admission_cycle\n"
    "run_admission_cycle({id}, now=timezone.now())\n"
)


@pytest.fixture
def org(manager: Cluster, make_queue: Callable[..., ClusterQueue]) -> Cohort:
    """Cohort org under root with team-a (4 cpu, flavor on-demand) and team-b (4 cpu)."""
    make_queue("team-a", {"cpu": "4"}, cohort="org", flavor="on-demand")
    make_queue("team-b", {"cpu": "4"}, cohort="org", flavor="on-demand")
    root = Cohort.objects.create(cluster=manager, name="root")
    Cohort.objects.filter(name="org").update(parent=root)
    return Cohort.objects.get(name="org")


def _cell(page: Any, region: str, field: str) -> str:
    return str(
        page.locator(f"{region} tr[data-flavor='on-demand'] [data-field='{field}']").inner_text()
    )


def test_cohort_page_follows_admissions_live_and_links_its_tree(
    browser_page: Callable[..., Any],
    org: Cohort,
    viewer: Any,
    settings: Any,
    make_workload: Callable[..., Workload],
) -> None:
    make_workload("big", "lq-team-a", {"cpu": "6"})
    page = browser_page(viewer)
    page.goto("/")
    page.locator("[data-cohort='org'] > .q-cohort-name a").click()
    page.wait_for_url("**/c/manager/cohorts/org/")
    wait_live(page)
    assert _cell(page, "#cohort-quota", "subtreeQuota") == "8"
    assert _cell(page, "#cohort-quota", "used") == "0"
    share = page.locator("[data-share-of='ClusterQueue/team-a']")
    assert share.get_attribute("data-share") == "0"
    page.evaluate("window.__notReloaded = true")

    run_elsewhere(settings, ADMIT_ELSEWHERE.format(id=org.cluster_id))

    page.wait_for_function(
        "document.querySelector(\"#cohort-quota tr[data-flavor='on-demand'] "
        "[data-field='used']\").textContent.trim() === '6'"
    )
    # team-a borrows 2 of the 8 cpu org could lend: 250.
    assert share.get_attribute("data-share") == "250"
    assert page.evaluate("window.__notReloaded") is True

    page.locator("#cohort-tree a[data-parent='root']").click()
    page.wait_for_url("**/c/manager/cohorts/root/")
    assert page.locator("#cohort-children [data-child-cohort='org']").count() == 1


def test_flavor_page_shows_spec_nodes_and_live_usage(
    browser_page: Callable[..., Any],
    org: Cohort,
    viewer: Any,
    settings: Any,
    make_workload: Callable[..., Workload],
) -> None:
    flavor = ResourceFlavor.objects.get(name="on-demand")
    node = org.cluster.nodes.order_by("name").first()
    assert node is not None
    hostname = node.labels["kubernetes.io/hostname"]
    flavor.node_labels = {"kubernetes.io/hostname": hostname}
    flavor.node_taints = [{"key": "spot", "value": "true", "effect": "NoSchedule"}]
    flavor.save()
    make_workload("small", "lq-team-b", {"cpu": "3"})
    page = browser_page(viewer)
    page.goto("/c/manager/clusterqueues/team-b/")
    page.locator("#cq-quota a", has_text="on-demand").first.click()
    page.wait_for_url("**/c/manager/resourceflavors/on-demand/")
    wait_live(page)
    assert f"kubernetes.io/hostname={hostname}" in page.locator("#rf-node-labels").inner_text()
    assert "spot=true:NoSchedule" in page.locator("#rf-node-taints").inner_text()
    assert page.locator("#rf-nodes").get_attribute("data-matching") == "1"
    assert page.locator("#rf-node-names li").all_inner_texts() == [node.name]
    used = page.locator("#rf-usage tr[data-cq='team-b'] [data-field='used']")
    assert used.inner_text() == "0"

    run_elsewhere(settings, ADMIT_ELSEWHERE.format(id=org.cluster_id))

    page.wait_for_function(
        "document.querySelector(\"#rf-usage tr[data-cq='team-b'] [data-field='used']\")"
        ".textContent.trim() === '3'"
    )


def test_view_yaml_copies_and_downloads_the_object(
    browser_page: Callable[..., Any],
    org: Cohort,
    viewer: Any,
) -> None:
    page = browser_page(viewer)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.goto("/c/manager/clusterqueues/team-a/")
    page.get_by_role("link", name="View YAML").click()
    page.wait_for_url("**/c/manager/clusterqueues/team-a/yaml/")
    shown = page.locator("#yaml-text").inner_text()
    document = yaml.safe_load(shown)
    assert (document["kind"], document["metadata"]["name"]) == ("ClusterQueue", "team-a")
    assert document["spec"]["cohortName"] == "org"

    page.locator("#yaml-copy").click()
    page.wait_for_function(
        "document.getElementById('yaml-copy-status').textContent.includes('Copied')"
    )
    assert yaml.safe_load(page.evaluate("navigator.clipboard.readText()")) == document

    with page.expect_download() as info:
        page.locator("#yaml-download").click()
    download = info.value
    assert download.suggested_filename == "clusterqueue-team-a.yaml"
    with open(download.path(), encoding="utf-8") as handle:
        assert yaml.safe_load(handle) == document

    page.get_by_role("link", name="ClusterQueue team-a").click()
    page.wait_for_url("**/c/manager/clusterqueues/team-a/")


def test_every_object_page_offers_its_yaml(
    browser_page: Callable[..., Any],
    org: Cohort,
    viewer: Any,
    make_workload: Callable[..., Workload],
) -> None:
    job = services.submit_job(job_manifest("train", "lq-team-a"), namespace="ns")
    workload = Workload.objects.get(job=job)
    bare = make_workload("bare", "lq-team-b", {"cpu": "1"})
    pages = [
        (reverse("ui-cohort", args=("manager", "org")), "Cohort", "org"),
        (
            reverse("ui-resourceflavor", args=("manager", "on-demand")),
            "ResourceFlavor",
            "on-demand",
        ),
        (reverse("ui-localqueue", args=("manager", "ns", "lq-team-a")), "LocalQueue", "lq-team-a"),
        (reverse("ui-cluster", args=("manager",)), "Cluster", "manager"),
        (reverse("ui-workload", args=("manager", "ns", workload.name)), "Workload", workload.name),
        (reverse("ui-workload", args=("manager", "ns", "bare")), "Workload", bare.name),
        (reverse("ui-job", args=("manager", "ns", job.kind_reference, "train")), "Job", "train"),
    ]
    page = browser_page(viewer)
    for url, kind, name in pages:
        page.goto(url)
        page.get_by_role("link", name="View YAML").click()
        page.wait_for_url(f"**{url}yaml/")
        document = yaml.safe_load(page.locator("#yaml-text").inner_text())
        assert (document["kind"], document["metadata"]["name"]) == (kind, name), url


AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"


def test_cohort_flavor_and_yaml_pages_have_no_accessibility_violations(
    browser_page: Callable[..., Any], org: Cohort, viewer: Any
) -> None:
    page = browser_page(viewer)
    for url in (
        reverse("ui-cohort", args=("manager", "org")),
        reverse("ui-resourceflavor", args=("manager", "on-demand")),
        reverse("ui-cohort-yaml", args=("manager", "org")),
    ):
        page.goto(url)
        page.add_script_tag(path=str(AXE))
        violations = page.evaluate(
            # Colour contrast is the shared palette's (app.css --accent), not these pages'.
            "axe.run(document, {runOnly: ['wcag2a', 'wcag2aa'],"
            " rules: {'color-contrast': {enabled: false}}}).then(r => r.violations"
            ".map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', ')))"
        )
        assert violations == [], url
