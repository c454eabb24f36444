"""The Pod Security Standards checks, level by level, with their ids and field paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduling.core.pod_security import (
    BASELINE,
    PRIVILEGED,
    RESTRICTED,
    check_pod_template,
    check_service_account,
)


def template(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
    body.update(spec)
    return {"metadata": {}, "spec": body}


def restricted_template() -> dict[str, Any]:
    secure = {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
              "seccompProfile": {"type": "RuntimeDefault"},
              "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}
    return {"metadata": {}, "spec": {
        "containers": [{"name": "main", "image": "busybox", "securityContext": secure}],
        "volumes": [{"name": "scratch", "emptyDir": {}}],
    }}


def found(tpl: dict[str, Any], level: str = BASELINE) -> list[tuple[str, str]]:
    return [(v.check, v.path) for v in check_pod_template(tpl, level=level, path="spec.template")]


def with_container_security(**security: Any) -> dict[str, Any]:
    tpl = template()
    tpl["spec"]["containers"][0]["securityContext"] = security
    return tpl


C0 = "spec.template.spec.containers[0]"


def test_a_plain_pod_meets_baseline() -> None:
    assert found(template()) == []


def test_the_privileged_level_allows_everything() -> None:
    tpl = template(hostPID=True, hostNetwork=True, volumes=[{"name": "r", "hostPath": {"path": "/"}}])
    tpl["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert found(tpl, PRIVILEGED) == []


def test_the_escape_pod_fails_baseline_on_each_field() -> None:
    tpl = template(hostPID=True, hostNetwork=True, hostIPC=True,
                   volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    tpl["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert found(tpl) == [
        ("hostNamespaces", "spec.template.spec.hostNetwork"),
        ("hostNamespaces", "spec.template.spec.hostPID"),
        ("hostNamespaces", "spec.template.spec.hostIPC"),
        ("privileged", f"{C0}.securityContext.privileged"),
        ("hostPathVolumes", "spec.template.spec.volumes[0].hostPath"),
    ]


def test_message_names_check_and_level() -> None:
    (violation,) = check_pod_template(with_container_security(privileged=True), level=BASELINE,
                                      path="spec.template")
    assert "privileged containers are not allowed" in violation.message
    assert "'baseline'" in violation.message
    assert "check privileged" in violation.message


@pytest.mark.parametrize("key", ["initContainers", "ephemeralContainers"])
def test_init_and_ephemeral_containers_are_checked(key: str) -> None:
    tpl = template(**{key: [{"name": "x", "image": "busybox",
                             "securityContext": {"privileged": True}}]})
    assert found(tpl) == [("privileged", f"spec.template.spec.{key}[0].securityContext.privileged")]


@pytest.mark.parametrize(("security", "expected"), [
    ({"capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE", "KILL"]}}, []),
    ({"capabilities": {"add": ["SYS_ADMIN"]}},
     [("capabilities_baseline", f"{C0}.securityContext.capabilities.add")]),
    ({"windowsOptions": {"hostProcess": True}},
     [("hostProcess", f"{C0}.securityContext.windowsOptions.hostProcess")]),
    ({"procMount": "Unmasked"}, [("procMount", f"{C0}.securityContext.procMount")]),
    ({"procMount": "Default"}, []),
    ({"seccompProfile": {"type": "Unconfined"}},
     [("seccompProfile_baseline", f"{C0}.securityContext.seccompProfile.type")]),
    ({"seccompProfile": {"type": "RuntimeDefault"}}, []),
    ({"appArmorProfile": {"type": "Unconfined"}},
     [("appArmorProfile", f"{C0}.securityContext.appArmorProfile.type")]),
    ({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}, []),
    ({"seLinuxOptions": {"type": "spc_t"}},
     [("seLinuxOptions", f"{C0}.securityContext.seLinuxOptions.type")]),
    ({"seLinuxOptions": {"type": "container_init_t", "level": "s0:c1"}}, []),
    ({"seLinuxOptions": {"user": "system_u"}},
     [("seLinuxOptions", f"{C0}.securityContext.seLinuxOptions.user")]),
    ({"privileged": "true"}, [("privileged", f"{C0}.securityContext.privileged")]),
    ({"privileged": False}, []),
])
def test_baseline_container_checks(security: dict[str, Any], expected: list[Any]) -> None:
    assert found(with_container_security(**security)) == expected


def test_host_ports_and_pod_level_fields() -> None:
    tpl = template(securityContext={
        "sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"},
                    {"name": "kernel.core_pattern", "value": "|/x"}],
        "seccompProfile": {"type": "Unconfined"},
        "windowsOptions": {"hostProcess": True},
    })
    tpl["spec"]["containers"][0]["ports"] = [{"containerPort": 80},
                                             {"containerPort": 81, "hostPort": 8081}]
    tpl["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/main": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/side": "runtime/default",
    }
    assert found(tpl) == [
        ("hostProcess", "spec.template.spec.securityContext.windowsOptions.hostProcess"),
        ("hostPorts", f"{C0}.ports[1].hostPort"),
        ("appArmorProfile", "spec.template.metadata.annotations"
                            "[container.apparmor.security.beta.kubernetes.io/main]"),
        ("seccompProfile_baseline", "spec.template.spec.securityContext.seccompProfile.type"),
        ("sysctls", "spec.template.spec.securityContext.sysctls[1].name"),
    ]


def test_a_hardened_pod_meets_restricted() -> None:
    assert found(restricted_template(), RESTRICTED) == []


def test_restricted_wants_the_hardening_fields() -> None:
    assert found(template(), RESTRICTED) == [
        ("runAsNonRoot", "spec.template.spec.securityContext.runAsNonRoot"),
        ("allowPrivilegeEscalation", f"{C0}.securityContext.allowPrivilegeEscalation"),
        ("seccompProfile_restricted", "spec.template.spec.securityContext.seccompProfile.type"),
        ("capabilities_restricted", f"{C0}.securityContext.capabilities.drop"),
    ]


def test_restricted_checks_on_a_hardened_pod() -> None:
    tpl = restricted_template()
    security = tpl["spec"]["containers"][0]["securityContext"]
    security["capabilities"]["add"] = ["KILL"]  # allowed by baseline, not by restricted
    security["runAsUser"] = 0
    tpl["spec"]["volumes"].append({"name": "data", "nfs": {"server": "s", "path": "/"}})
    assert found(tpl, RESTRICTED) == [
        ("restrictedVolumes", "spec.template.spec.volumes[1].nfs"),
        ("runAsUser", f"{C0}.securityContext.runAsUser"),
        ("capabilities_restricted", f"{C0}.securityContext.capabilities.add"),
    ]
    assert found(tpl, BASELINE) == []


def test_restricted_pod_level_settings_cover_the_containers() -> None:
    tpl = restricted_template()
    security = tpl["spec"]["containers"][0]["securityContext"]
    del security["runAsNonRoot"], security["seccompProfile"]
    assert [c for c, _ in found(tpl, RESTRICTED)] == ["runAsNonRoot", "seccompProfile_restricted"]
    covered = copy.deepcopy(tpl)
    covered["spec"]["securityContext"] = {"runAsNonRoot": True,
                                          "seccompProfile": {"type": "Localhost"}}
    assert found(covered, RESTRICTED) == []
    security["runAsNonRoot"] = False
    covered["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = False
    assert found(covered, RESTRICTED) == [
        ("runAsNonRoot", f"{C0}.securityContext.runAsNonRoot")]


def test_windows_pods_skip_the_linux_only_restricted_checks() -> None:
    tpl = template(os={"name": "windows"}, securityContext={"runAsNonRoot": True})
    assert found(tpl, RESTRICTED) == []


def test_unknown_level_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown Pod Security Standards level"):
        check_pod_template(template(), level="open", path="spec.template")


def test_service_accounts() -> None:
    tpl = template(serviceAccountName="cluster-admin-sa")
    (violation,) = check_service_account(tpl, allowed=frozenset(), path="spec.template")
    assert (violation.check, violation.path) == ("serviceAccountName",
                                                 "spec.template.spec.serviceAccountName")
    assert "allowed: default" in violation.message
    assert check_service_account(tpl, allowed=frozenset({"cluster-admin-sa"}),
                                 path="spec.template") == []
    assert check_service_account(tpl, allowed=frozenset({"*"}), path="spec.template") == []
    assert check_service_account(template(serviceAccountName="default"), allowed=frozenset(),
                                 path="spec.template") == []
    legacy = template(serviceAccount="builder")
    assert [v.path for v in check_service_account(legacy, allowed=frozenset(),
                                                  path="spec.template")] == [
        "spec.template.spec.serviceAccount"]
