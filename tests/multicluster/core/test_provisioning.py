"""The ProvisioningRequest check's rules (Kueue ``pkg/controller/admissionchecks/provisioning``):
names and attempts, the pod sets a request covers, and the check's state from the request's
conditions."""

from __future__ import annotations

from typing import Any

import pytest

from multicluster.core import provisioning as core

CONFIG = core.Config(name="cfg", provisioning_class_name="check-capacity.autoscaling.x-k8s.io",
                     parameters={"p": "1"}, backoff_limit_count=2, backoff_base_seconds=60,
                     backoff_max_seconds=100)


def pod_set(name: str, count: int = 1, **requests: str) -> dict[str, Any]:
    return {"name": name, "count": count, "template": {"spec": {"containers": [
        {"name": "c", "resources": {"requests": dict(requests)}}]}}}


def request(name: str, *conditions: tuple[str, str], details: dict[str, str] | None = None,
            pod_sets: list[str] = ("main",)) -> dict[str, Any]:  # type: ignore[assignment]
    return {
        "metadata": {"name": name},
        "spec": {"provisioningClassName": CONFIG.provisioning_class_name,
                 "parameters": {"p": "1"},
                 "podSets": [{"podTemplateRef": {"name": core.pod_template_name(name, ps)},
                              "count": 1} for ps in pod_sets]},
        "status": {"conditions": [{"type": t, "status": "True", "message": m}
                                  for t, m in conditions],
                   "provisioningClassDetails": details or {}},
    }


def sync(state: dict[str, Any], req: dict[str, Any] | None, *, admitted: bool = False,
         config: core.Config | None = CONFIG) -> dict[str, Any]:
    return core.sync_check_state(state, config, req, workload="wl", pod_sets=[pod_set("main")],
                                 needed=True, admitted=admitted, active=True, finished=False)


PENDING = {"name": "prov", "state": "Pending", "message": ""}


def test_names_are_kueues_and_long_ones_are_cut_with_a_hash() -> None:
    assert core.request_name("wl", "prov", 3) == "wl-prov-3"
    assert core.pod_template_name("wl-prov-3", "main") == "ppt-wl-prov-3-main"
    long = core.request_name("w" * 300, "prov", 1)
    assert len(long) == 253
    assert long != core.request_name("w" * 299 + "x", "prov", 1)
    assert core.attempt_of("wl-prov-12", "wl", "prov") == 12
    assert core.attempt_of("wl-other-1", "wl", "prov") is None
    assert core.attempt_of(long, "w" * 300, "prov") is None  # the hash replaced the attempt


@pytest.mark.parametrize(("parameters", "configs", "want"), [
    ({"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "c"},
     {"c"}, ("True", "Active", "The admission check is active")),
    (None, set(), ("False", "BadParametersRef", "missing parameters reference")),
    ({"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "c"}, {"c"},
     ("False", "BadParametersRef", 'wrong kind "MultiKueueConfig", expecting '
      '"ProvisioningRequestConfig": bad parameters reference')),
    ({"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "c"}, set(),
     ("False", "BadParametersRef",
      'provisioningrequestconfigs.kueue.x-k8s.io "c" not found')),
])
def test_active_condition(parameters: dict[str, str] | None, configs: set[str],
                          want: tuple[str, str, str]) -> None:
    assert core.active_condition(parameters, frozenset(configs)) == want


def test_managed_resources_choose_the_pod_sets_and_merge_policies_join_alike_ones() -> None:
    sets = [pod_set("driver", 1, cpu="1"), pod_set("a", 2, cpu="1", **{"nvidia.com/gpu": "1"}),
            pod_set("b", 3, cpu="1", **{"nvidia.com/gpu": "1"})]
    assignments = [{"name": "driver", "count": 1}, {"name": "a", "count": 2},
                   {"name": "b", "count": 1}]
    gpu = ("nvidia.com/gpu",)
    assert core.request_is_needed(sets, assignments, gpu)
    assert not core.request_is_needed(sets[:1], assignments, gpu)
    assert [(m.name, m.count) for m in core.merge_pod_sets(sets, assignments, gpu)] == [
        ("a", 2), ("b", 1)]
    assert [(m.name, m.count) for m in core.merge_pod_sets(
        sets, assignments, gpu, "IdenticalWorkloadSchedulingRequirements")] == [("a", 3)]
    # A label makes the templates differ, not what the pods need to be scheduled.
    sets[2]["template"]["metadata"] = {"labels": {"role": "b"}}
    assert [(m.name, m.count) for m in core.merge_pod_sets(
        sets, assignments, (), "IdenticalPodTemplates")] == [
        ("driver", 1), ("a", 2), ("b", 1)]
    assert [(m.name, m.count) for m in core.merge_pod_sets(
        sets, assignments, (), "IdenticalWorkloadSchedulingRequirements")] == [
        ("driver", 1), ("a", 3)]


def test_failures_retry_with_backoff_until_the_limit_then_reject() -> None:
    first = sync(PENDING, request("wl-prov-1", ("Failed", "no capacity")))
    assert first == {"name": "prov", "state": "Retry", "requeueAfterSeconds": 60,
                     "message": "Retrying after failure: no capacity"}
    # After the eviction: Pending with one retry; the old failure does not retry again.
    again = {"name": "prov", "state": "Pending", "message": "", "retryCount": 1}
    assert sync(again, request("wl-prov-1", ("Failed", "no capacity")))["state"] == "Pending"
    second = sync(again, request("wl-prov-2", ("Failed", "no capacity")))
    assert (second["state"], second["requeueAfterSeconds"]) == ("Retry", 100)  # capped
    third = sync({**again, "retryCount": 2}, request("wl-prov-3", ("Failed", "still none")))
    assert (third["state"], third["message"]) == ("Rejected", "still none")


def test_booking_expired_retries_before_admission_only_and_revoked_capacity_rejects() -> None:
    expired = request("wl-prov-1", ("Provisioned", "ok"), ("BookingExpired", "expired"))
    assert sync(PENDING, expired)["state"] == "Retry"
    ready = {**PENDING, "state": "Ready"}
    assert sync(ready, expired, admitted=True) == ready
    revoked = sync(ready, request("wl-prov-1", ("CapacityRevoked", "nodes gone")),
                   admitted=True)
    assert (revoked["state"], revoked["message"]) == ("Rejected", "nodes gone")


def test_provisioned_gives_the_pod_set_updates_with_the_class_details() -> None:
    config = core.Config(name="cfg", provisioning_class_name=CONFIG.provisioning_class_name,
                         parameters={"p": "1"},
                         node_selector_updates=(("pool", "poolName"), ("zone", "absent")))
    ready = core.sync_check_state(
        PENDING, config, request("wl-prov-1", ("Provisioned", "done"),
                                 details={"poolName": "gpu-pool"}),
        workload="wl", pod_sets=[pod_set("main")], needed=True, admitted=False, active=True,
        finished=False)
    assert ready == {"name": "prov", "state": "Ready", "message": "done", "podSetUpdates": [{
        "name": "main",
        "annotations": {core.CONSUME_ANNOTATION: "wl-prov-1",
                        core.CLASS_ANNOTATION: CONFIG.provisioning_class_name},
        "nodeSelector": {"pool": "gpu-pool"}}]}


def test_accepted_reports_the_estimate_and_inactive_or_unneeded_checks() -> None:
    accepted = request("wl-prov-1", ("Accepted", ""))
    accepted["status"]["conditions"].append(
        {"type": "Provisioned", "status": "False", "message": "ETA 5m"})
    assert sync(PENDING, accepted)["message"] == "ETA 5m"
    assert sync(PENDING, None, config=None)["message"] == core.CHECK_INACTIVE_MESSAGE
    unneeded = core.sync_check_state(PENDING, CONFIG, None, workload="wl", pod_sets=[],
                                     needed=False, admitted=False, active=True, finished=False)
    assert (unneeded["state"], unneeded["message"]) == ("Ready", core.NO_REQUEST_NEEDED)


def test_next_attempt() -> None:
    assert core.next_attempt(PENDING, None, workload="wl", check="prov", admitted=False) == 1
    assert core.next_attempt({**PENDING, "retryCount": 2}, None, workload="wl", check="prov",
                             admitted=False) == 3
    failed = request("wl-prov-2", ("Failed", "x"))
    assert core.next_attempt(PENDING, failed, workload="wl", check="prov", admitted=False) == 3
    assert core.next_attempt({**PENDING, "state": "Retry"}, failed, workload="wl",
                             check="prov", admitted=False) is None
    assert core.next_attempt(PENDING, request("wl-prov-1"), workload="wl", check="prov",
                             admitted=False) is None
    # A request of another config is stale: the check's request is the latest in line.
    stale = request("wl-prov-4")
    stale["spec"]["provisioningClassName"] = "other"
    assert core.active_or_last([request("wl-prov-1"), stale, request("wl-prov-2")], "wl", "prov",
                               CONFIG, needed=True) == request("wl-prov-2")


def test_limits_stand_for_missing_requests_and_annotations_become_parameters() -> None:
    template = {"spec": {"containers": [{"name": "c", "resources": {
        "limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1"}}}]}}
    assert core.use_limits_as_missing_requests(template)["spec"]["containers"][0][
        "resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert core.request_parameters(CONFIG, {"provreq.kueue.x-k8s.io/ValidUntilSeconds": "60",
                                            "other": "x"}) == {"p": "1", "ValidUntilSeconds": "60"}
