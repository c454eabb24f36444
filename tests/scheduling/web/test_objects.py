"""Cohort and ResourceFlavor pages, and every object page's YAML: real quota trees, the
engine's numbers, access by role, and no secrets."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from multicluster.models import Cluster, Node
from scheduling.manifests.yamlio import dump_documents
from scheduling.models import ClusterQueue, Cohort, FlavorQuota, Job, ResourceFlavor, Workload
from scheduling.scheduler import admission
from tests.fixtures.accounts import ui_client_for
from tests.fixtures.scheduling import job_manifest

pytestmark = pytest.mark.django_db


def _row(html: str, attribute: str, value: str) -> str:
    """The <tr> whose ``attribute`` is ``value``."""
    match = re.search(rf'<tr[^>]*\b{attribute}="{re.escape(value)}"[^>]*>.*?</tr>', html, re.S)
    assert match, f"no row {attribute}={value}"
    return match.group(0)


def _cell(row: str, field: str) -> str:
    match = re.search(rf'data-field="{field}">([^<]*)<', row)
    assert match, f"no {field} cell"
    return match.group(1)


@pytest.fixture
def org(
    manager: Cluster,
    make_queue: Callable[..., ClusterQueue],
    make_workload: Callable[..., Workload],
    t0: Any,
) -> Cohort:
    """Cohort org under root: team-a (4 cpu, weight 2) borrows 2 cpu that team-b (4 cpu,
    lendingLimit 2) lends; child cohort lab holds team-c."""
    make_queue("team-a", {"cpu": "4"}, cohort="org", fair_sharing_weight="2")
    make_queue("team-b", {"cpu": ("4", None, "2")}, cohort="org")
    make_queue("team-c", {"cpu": "1"}, cohort="lab")
    root = Cohort.objects.create(cluster=manager, name="root")
    Cohort.objects.filter(name="org").update(parent=root)
    Cohort.objects.filter(name="lab").update(parent=Cohort.objects.get(name="org"))
    make_workload("big", "lq-team-a", {"cpu": "6"})
    admission.run_admission_cycle(manager.pk, now=t0)
    assert Workload.objects.get(name="big").phase == "Admitted"
    return Cohort.objects.get(name="org")


def test_cohort_page_shows_its_tree_with_links(org: Cohort, viewer_ui: Client) -> None:
    response = viewer_ui.get(reverse("ui-cohort", args=("manager", "org")))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-parent="root"' in html
    assert f'href="{reverse("ui-cohort", args=("manager", "root"))}"' in html
    children = re.search(r'id="cohort-children">(.*?)</ul>', html, re.S)
    assert children
    assert re.findall(r'data-child-cohort="([^"]+)"', children.group(1)) == ["lab"]
    members = re.search(r'id="cohort-members">(.*?)</ul>', html, re.S)
    assert members
    assert re.findall(r'data-member-cq="([^"]+)"', members.group(1)) == ["team-a", "team-b"]
    assert f'href="{reverse("ui-clusterqueue", args=("manager", "team-a"))}"' in html
    assert f'href="{reverse("ui-cohort", args=("manager", "lab"))}"' in html
    assert f'data-live-clusters="{org.cluster_id}"' in html


def test_cohort_page_aggregates_the_subtree_quota_as_the_engine_does(
    org: Cohort, viewer_ui: Client
) -> None:
    html = viewer_ui.get(reverse("ui-cohort", args=("manager", "org"))).content.decode()
    row = _row(html, "data-flavor", "default")
    # team-a's 4, what team-b lends (2 of its 4) and what lab lends (team-c's 1).
    assert _cell(row, "subtreeQuota") == "7"
    # team-a uses 6, all of it reaches the cohort; none comes from outside org.
    assert _cell(row, "used") == "6"
    assert _cell(row, "borrowed") == "0"
    assert _cell(row, "lendable") == "7"
    assert 'data-used="6"' in row
    assert 'data-nominal="7"' in row
    assert f'href="{reverse("ui-resourceflavor", args=("manager", "default"))}"' in row


def test_cohort_page_shows_weights_and_dominant_resource_shares(
    org: Cohort, viewer_ui: Client
) -> None:
    html = viewer_ui.get(reverse("ui-cohort", args=("manager", "org"))).content.decode()
    # team-a borrows 2 cpu above its 4; org could lend 7: 2/7 × 1000 = 285.7, weight 2.
    team_a = _row(html, "data-share-of", "ClusterQueue/team-a")
    assert 'data-weight="2"' in team_a
    assert 'data-share="143"' in team_a
    assert "cpu" in team_a
    team_b = _row(html, "data-share-of", "ClusterQueue/team-b")
    assert 'data-weight="1"' in team_b
    assert 'data-share="0"' in team_b
    # org itself does not borrow from root; lab neither.
    assert 'data-share="0"' in _row(html, "data-share-of", "Cohort/org")
    assert 'data-share="0"' in _row(html, "data-share-of", "Cohort/lab")


def test_cohort_partial_is_the_live_region(org: Cohort, viewer_ui: Client) -> None:
    url = reverse("ui-cohort-summary", args=("manager", "org"))
    body = viewer_ui.get(url).content.decode().strip()
    assert body.startswith('<section id="cohort-summary"')
    assert "data-live-refresh" in body
    assert f'hx-get="{url}"' in body
    assert _cell(_row(body, "data-flavor", "default"), "used") == "6"


def test_a_cohort_in_a_loop_says_so(org: Cohort, viewer_ui: Client) -> None:
    lab = Cohort.objects.get(name="lab")
    Cohort.objects.filter(name="root").update(parent=lab)
    html = viewer_ui.get(reverse("ui-cohort", args=("manager", "org"))).content.decode()
    assert 'id="cohort-cycle"' in html
    assert "HasCycle" in html


def test_pages_need_a_role(org: Cohort, client: Client, make_user: Callable[..., User]) -> None:
    urls = [
        reverse("ui-cohort", args=("manager", "org")),
        reverse("ui-resourceflavor", args=("manager", "default")),
        reverse("ui-cohort-yaml", args=("manager", "org")),
        reverse("ui-clusterqueue-yaml", args=("manager", "team-a")),
        reverse("ui-cluster-yaml", args=("manager",)),
    ]
    nobody = ui_client_for(make_user("nora", None))
    for url in urls:
        anonymous = client.get(url)
        assert anonymous.status_code == 302, url
        assert "/login/" in anonymous["Location"], url
        assert nobody.get(url).status_code == 403, url


def test_unknown_objects_are_not_found(org: Cohort, viewer_ui: Client) -> None:
    for name in ("ui-cohort", "ui-resourceflavor", "ui-cohort-yaml", "ui-resourceflavor-yaml"):
        assert viewer_ui.get(reverse(name, args=("manager", "nope"))).status_code == 404
        assert viewer_ui.get(reverse(name, args=("nowhere", "org"))).status_code == 404


# --- ResourceFlavor ----------------------------------------------------------------------------


@pytest.fixture
def gpu(org: Cohort, make_queue: Callable[..., ClusterQueue]) -> ResourceFlavor:
    """Flavor gpu-a100 (labels, a taint, a toleration, a topology) used by team-g and by
    cohort org's own quota; two of the manager's nodes carry its labels."""
    make_queue("team-g", {"nvidia.com/gpu": "8", "cpu": "16"}, flavor="gpu-a100", cohort="org")
    flavor = ResourceFlavor.objects.get(name="gpu-a100")
    flavor.node_labels = {"pool": "a100", "zone": "z1"}
    flavor.node_taints = [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]
    flavor.tolerations = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    flavor.topology_name = "default-topology"
    flavor.save()
    FlavorQuota.objects.create(
        cohort=org, flavor=flavor, resource="nvidia.com/gpu", nominal_quota="2"
    )
    for name, labels in [
        ("a100-1", {"pool": "a100", "zone": "z1"}),
        ("a100-2", {"pool": "a100", "zone": "z1", "extra": "x"}),
        ("a100-3", {"pool": "a100", "zone": "z2"}),
    ]:
        Node.objects.create(
            cluster=org.cluster, name=name, labels=labels, capacity={"nvidia.com/gpu": "8"}
        )
    return flavor


def test_flavor_page_shows_its_spec_and_matching_nodes(
    gpu: ResourceFlavor, viewer_ui: Client
) -> None:
    response = viewer_ui.get(reverse("ui-resourceflavor", args=("manager", "gpu-a100")))
    assert response.status_code == 200
    html = response.content.decode()
    assert "pool=a100" in html
    assert "zone=z1" in html
    assert "gpu=true:NoSchedule" in html
    assert 'data-toleration="gpu"' in html
    assert "gpu exists:NoSchedule" in html
    assert 'id="rf-topology">default-topology<' in html
    total = Node.objects.filter(cluster=gpu.cluster).count()
    assert f'data-matching="2" data-total="{total}"' in html
    names = re.search(r'id="rf-node-names">(.*?)</ul>', html, re.S)
    assert names
    assert re.findall(r"<li>([^<]+)</li>", names.group(1)) == ["a100-1", "a100-2"]


def test_flavor_page_lists_the_queues_using_it_with_quota_and_usage(
    gpu: ResourceFlavor,
    viewer_ui: Client,
    make_workload: Callable[..., Workload],
    t0: Any,
) -> None:
    make_workload("train", "lq-team-g", {"nvidia.com/gpu": "3", "cpu": "2"})
    admission.run_admission_cycle(gpu.cluster_id, now=t0)
    html = viewer_ui.get(
        reverse("ui-resourceflavor", args=("manager", "gpu-a100"))
    ).content.decode()
    gpus = re.search(r'<tr data-cq="team-g" data-resource="nvidia.com/gpu">.*?</tr>', html, re.S)
    assert gpus
    assert _cell(gpus.group(0), "nominalQuota") == "8"
    assert _cell(gpus.group(0), "used") == "3"
    assert f'href="{reverse("ui-cohort", args=("manager", "org"))}"' in gpus.group(0)
    assert 'data-cq="team-a"' not in html  # its quota is in the default flavor only
    assert re.search(r'data-cohort="org".*?nvidia.com/gpu nominalQuota 2', html, re.S)
    # The live region answers the same rows.
    body = (
        viewer_ui.get(reverse("ui-resourceflavor-usage", args=("manager", "gpu-a100")))
        .content.decode()
        .strip()
    )
    assert body.startswith('<section id="rf-usage"')
    assert "data-live-refresh" in body
    assert 'data-cq="team-g" data-resource="cpu"' in body


def test_cohort_and_flavor_names_link_to_their_pages(
    gpu: ResourceFlavor, viewer_ui: Client
) -> None:
    cohort = f'href="{reverse("ui-cohort", args=("manager", "org"))}"'
    flavor = f'href="{reverse("ui-resourceflavor", args=("manager", "gpu-a100"))}"'
    overview = viewer_ui.get("/").content.decode()
    queue_page = viewer_ui.get(reverse("ui-clusterqueue", args=("manager", "team-g")))
    for html in (overview, queue_page.content.decode()):
        assert cohort in html
        assert flavor in html


# --- YAML --------------------------------------------------------------------------------------


def _yaml_of(ui: Client, url: str) -> dict[str, Any]:
    """The page (with its download link) and the download, which must agree."""
    page = ui.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="yaml-copy"' in html
    assert 'href="?download=1"' in html
    download = ui.get(url, {"download": "1"})
    assert download.status_code == 200
    assert download["Content-Type"].startswith("application/yaml")
    assert download["Content-Disposition"].startswith("attachment; filename=")
    document = yaml.safe_load(download.content)
    assert isinstance(document, dict)
    text = download.content.decode()
    # The page shows the same text, escaped.
    assert text.split("\n")[2].replace('"', "&quot;").replace("'", "&#x27;") in html
    return document


def test_quota_objects_yaml_is_kueues_v1beta2_with_status(
    gpu: ResourceFlavor, viewer_ui: Client
) -> None:
    cq = _yaml_of(viewer_ui, reverse("ui-clusterqueue-yaml", args=("manager", "team-a")))
    assert (cq["apiVersion"], cq["kind"]) == ("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert cq["spec"]["cohortName"] == "org"
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "4"
    assert cq["status"]["admittedWorkloads"] == 1
    lq = _yaml_of(viewer_ui, reverse("ui-localqueue-yaml", args=("manager", "ns", "lq-team-a")))
    assert (lq["kind"], lq["metadata"]["namespace"], lq["spec"]["clusterQueue"]) == (
        "LocalQueue",
        "ns",
        "team-a",
    )
    cohort = _yaml_of(viewer_ui, reverse("ui-cohort-yaml", args=("manager", "org")))
    assert (cohort["kind"], cohort["spec"]["parentName"]) == ("Cohort", "root")
    flavor = _yaml_of(viewer_ui, reverse("ui-resourceflavor-yaml", args=("manager", "gpu-a100")))
    assert flavor["kind"] == "ResourceFlavor"
    assert flavor["spec"]["nodeLabels"] == {"pool": "a100", "zone": "z1"}
    assert flavor["spec"]["topologyName"] == "default-topology"


def test_download_names_the_file_after_the_object(org: Cohort, viewer_ui: Client) -> None:
    url = reverse("ui-localqueue-yaml", args=("manager", "ns", "lq-team-a"))
    response = viewer_ui.get(url, {"download": "1"})
    assert response["Content-Disposition"] == 'attachment; filename="localqueue-ns-lq-team-a.yaml"'


def test_workload_and_job_yaml_are_what_the_api_returns(
    operator: User,
    make_queue: Callable[..., ClusterQueue],
    admin_client_api: Any,
) -> None:
    make_queue("cq", {"cpu": "4"}, namespace="team-a")
    ui = ui_client_for(operator)
    ui.post(
        "/jobs/new/",
        {"namespace": "team-a", "manifest": dump_documents([job_manifest("train", "lq-cq")])},
    )
    job = Job.objects.get(namespace="team-a", name="train")
    wl = Workload.objects.get(job=job)
    workload = _yaml_of(ui, reverse("ui-workload-yaml", args=(job.cluster.name, "team-a", wl.name)))
    api = admin_client_api.get(f"/api/v1/namespaces/team-a/workloads/{wl.name}/")
    assert api.status_code == 200, api.content
    assert workload == api.json()
    assert (workload["apiVersion"], workload["kind"]) == ("kueue.x-k8s.io/v1beta2", "Workload")
    kind = job.kind_reference
    manifest = _yaml_of(
        ui, reverse("ui-job-yaml", args=(job.cluster.name, "team-a", kind, "train"))
    )
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch/v1", "Job")
    assert manifest == admin_client_api.get("/api/v1/namespaces/team-a/jobs/train/").json()
    assert manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq-cq"
    # Both pages offer the YAML.
    detail = ui.get(reverse("ui-workload", args=(job.cluster.name, "team-a", wl.name)))
    assert reverse("ui-workload-yaml", args=(job.cluster.name, "team-a", wl.name)) in (
        detail.content.decode()
    )
    detail = ui.get(reverse("ui-job", args=(job.cluster.name, "team-a", kind, "train")))
    assert reverse("ui-job-yaml", args=(job.cluster.name, "team-a", kind, "train")) in (
        detail.content.decode()
    )


def test_cluster_yaml_never_shows_the_kubeconfig(manager: Cluster, viewer_ui: Client) -> None:
    secret = "token-do-not-print-7f3a9c"
    worker = Cluster.objects.create(name="worker-1", role="worker", connection_type="kubernetes")
    worker.set_kubeconfig(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster: {server: https://w}\n"
        f"users:\n- name: u\n  user: {{token: {secret}}}\n"
        "contexts:\n- name: c\n  context: {cluster: w, user: u}\ncurrent-context: c\n"
    )
    worker.save()
    url = reverse("ui-cluster-yaml", args=("worker-1",))
    document = _yaml_of(viewer_ui, url)
    assert document["spec"]["connection"] == {
        "type": "kubernetes",
        "hasKubeconfig": True,
        "createNamespaces": worker.create_namespaces,
    }
    for response in (viewer_ui.get(url), viewer_ui.get(url, {"download": "1"})):
        body = response.content.decode()
        assert secret not in body
        assert worker.kubeconfig_encrypted not in body
        assert "server: https://w" not in body
    page = viewer_ui.get(reverse("ui-cluster", args=("worker-1",))).content.decode()
    assert f'href="{url}"' in page


def test_cohort_and_flavor_pages_cost_the_same_queries_however_many_workloads(
    org: Cohort, viewer_ui: Client, make_workload: Callable[..., Workload], t0: Any
) -> None:
    urls = [
        reverse("ui-cohort", args=("manager", "org")),
        reverse("ui-resourceflavor", args=("manager", "default")),
    ]

    def queries() -> list[int]:
        counts = []
        for url in urls:
            with CaptureQueriesContext(connection) as captured:
                assert viewer_ui.get(url).status_code == 200
            counts.append(len(captured))
        return counts

    make_workload("too-big", "lq-team-b", {"cpu": "20"})  # stays pending
    before = queries()
    for index in range(12):  # of different sizes: no two share a usage or pod-set hash
        make_workload(f"w-{index}", "lq-team-b", {"cpu": f"{index + 1}00m"})
    admission.run_admission_cycle(org.cluster_id, now=t0)
    assert Workload.objects.filter(phase="Admitted").count() > 2
    assert Workload.objects.filter(phase="Pending").count() > 1
    assert queries() == before
