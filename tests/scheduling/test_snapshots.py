"""From rows to engine specs: the domain's specs are reused only while their rows hold."""

from __future__ import annotations

import pytest
from django.db.models import F

from multicluster.models import AdmissionCheck
from scheduling import snapshots
from scheduling.models import ClusterQueue, Cohort, FlavorQuota, ResourceFlavor

pytestmark = pytest.mark.django_db


def _nominal(specs: snapshots.DomainSpecs, queue: str) -> int | None:
    cq = next(q for q in specs.cluster_queues if q.name == queue)
    return cq.resource_groups[0].flavors[0].resources["cpu"].nominal


def test_specs_are_reused_while_only_status_columns_change(manager, make_queue) -> None:
    make_queue("cq", {"cpu": "2"}, cohort="team")
    first = snapshots.load_domain_specs(manager.pk)

    # What reconcilers write all the time: generation, requeue time, conditions.
    ClusterQueue.objects.update(allocatable_generation=F("allocatable_generation") + 1,
                                conditions=[{"type": "Active", "status": "True"}])

    assert snapshots.load_domain_specs(manager.pk) is first


@pytest.mark.parametrize("change", ["quota", "queue", "cohort", "flavor", "check"])
def test_a_spec_change_through_any_write_path_is_seen_at_once(manager, make_queue,
                                                               change) -> None:
    # Queryset updates bypass save() and signals: the rows themselves are compared.
    make_queue("cq", {"cpu": "2"}, cohort="team", admission_checks=[{"name": "check"}])
    first = snapshots.load_domain_specs(manager.pk)
    assert first.inactive == {"cq": "AdmissionCheckNotFound"}
    if change == "quota":
        FlavorQuota.objects.update(nominal_quota="5")
    elif change == "queue":
        ClusterQueue.objects.update(stop_policy="Hold")
    elif change == "cohort":
        Cohort.objects.update(fair_sharing_weight="2")
    elif change == "flavor":
        ResourceFlavor.objects.update(node_labels={"zone": "a"})
    else:
        AdmissionCheck.objects.create(cluster=manager, name="check",
                                      controller_name="example.com/check")

    second = snapshots.load_domain_specs(manager.pk)

    assert second is not first
    assert second.fingerprint != first.fingerprint
    if change == "quota":
        assert (_nominal(first, "cq"), _nominal(second, "cq")) == (2000, 5000)


def test_each_domain_keeps_its_own_specs(manager, make_queue) -> None:
    from multicluster.models import Cluster

    other = Cluster.objects.create(name="other")
    make_queue("here", {"cpu": "1"})
    make_queue("there", {"cpu": "1"}, cluster=other)

    assert [q.name for q in snapshots.load_domain_specs(manager.pk).cluster_queues] == ["here"]
    assert [q.name for q in snapshots.load_domain_specs(other.pk).cluster_queues] == ["there"]
    assert [q.name for q in snapshots.load_domain_specs(manager.pk).cluster_queues] == ["here"]
