"""PodSetInfo: what an admission puts on a kind's pod templates, and how it is taken out
again (Kueue's ``podset.FromAssignment``, ``Merge`` and ``RestorePodSpec``)."""

from __future__ import annotations

from scheduling import jobframework

SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {
    "spot": ({"instance-type": "spot"}, [SPOT]),
    "gpu": ({"accelerator": "a100"}, [SPOT]),
}


def test_one_info_per_assignment_from_its_flavors() -> None:
    admission = {"podSetAssignments": [
        {"name": "main", "count": 4, "flavors": {"cpu": "spot", "nvidia.com/gpu": "gpu"}},
        {"name": "side", "count": 1, "flavors": {}},
    ]}

    [main, side] = jobframework.pod_set_infos(admission, FLAVORS)

    assert (main.name, main.count) == ("main", 4)
    assert main.node_selector == {"accelerator": "a100", "instance-type": "spot"}
    assert main.tolerations == [SPOT]  # appended once, as Kueue merges them
    assert main.labels == {"kueue.x-k8s.io/podset": "main"}
    assert (side.count, side.node_selector, side.tolerations) == (1, {}, [])


def test_counts_cap_the_admitted_count() -> None:
    admission = {"podSetAssignments": [{"name": "main", "count": 4, "flavors": {}}]}

    [info] = jobframework.pod_set_infos(admission, FLAVORS, counts={"main": 2})

    assert info.count == 2


def test_merge_then_restore_gives_the_recorded_template_back() -> None:
    recorded = {"metadata": {"labels": {"app": "a"}},
                "spec": {"nodeSelector": {"disk": "ssd"}, "containers": [{"name": "c"}]}}
    info = jobframework.PodSetInfo("main", 2, {"instance-type": "spot"}, [SPOT],
                                   {"kueue.x-k8s.io/podset": "main"})

    merged = jobframework.merge_into_template(recorded, info)

    assert merged["spec"]["nodeSelector"] == {"disk": "ssd", "instance-type": "spot"}
    assert merged["spec"]["tolerations"] == [SPOT]
    assert merged["metadata"]["labels"] == {"app": "a", "kueue.x-k8s.io/podset": "main"}
    assert recorded["spec"]["nodeSelector"] == {"disk": "ssd"}  # not changed in place
    assert jobframework.restore_template(merged, recorded) == recorded
