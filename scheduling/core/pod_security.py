"""Kubernetes' Pod Security Standards, checked on a pod template before kueueweb accepts it.

The three levels are cumulative: ``privileged`` allows everything, ``baseline`` prevents the
known privilege escalations, ``restricted`` adds the hardening best practices. Every check
carries the id the Pod Security admission controller gives it (``hostNamespaces``,
``capabilities_baseline``, ...) and is applied to the pod spec and to every container,
init container and ephemeral container; a violation names the field path at fault, e.g.
``spec.template.spec.containers[0].securityContext.privileged``.

The input is a PodTemplateSpec as submitted (``metadata`` + ``spec``), read as plain JSON:
values of the wrong type count as set (a string ``"true"`` for ``privileged`` is refused
here rather than trusted to fail later).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "BASELINE",
    "LEVELS",
    "PRIVILEGED",
    "RESTRICTED",
    "SYSTEM_NAMESPACES",
    "Violation",
    "check_pod_template",
    "check_service_account",
]

PRIVILEGED: Final = "privileged"
BASELINE: Final = "baseline"
RESTRICTED: Final = "restricted"
LEVELS: Final = (PRIVILEGED, BASELINE, RESTRICTED)
_RANK: Final = {PRIVILEGED: 0, BASELINE: 1, RESTRICTED: 2}

# Capabilities a baseline container may add (the defaults of container runtimes).
BASELINE_CAPABILITIES: Final = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
RESTRICTED_CAPABILITIES: Final = frozenset({"NET_BIND_SERVICE"})
# Sysctls namespaced in the pod and isolated from other pods on the node.
SAFE_SYSCTLS: Final = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
})
SELINUX_TYPES: Final = frozenset({
    "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t",
})
ALLOWED_PROFILE_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
RESTRICTED_VOLUME_SOURCES: Final = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
    "projected", "secret",
})
APPARMOR_ANNOTATION_PREFIX: Final = "container.apparmor.security.beta.kubernetes.io/"
DEFAULT_SERVICE_ACCOUNT: Final = "default"
# Kubernetes' own namespaces: kueueweb never creates them, nor anything in them.
SYSTEM_NAMESPACES: Final = frozenset({"kube-system", "kube-public", "kube-node-lease"})

_CONTAINER_LISTS: Final = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True)
class Violation:
    """One check a pod template fails: the PSS check id, the field path and why."""

    check: str
    path: str
    message: str


@dataclass(frozen=True)
class _Container:
    path: str
    security: Mapping[str, Any]
    body: Mapping[str, Any]


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _set(value: Any) -> bool:
    """A boolean field that is set to anything but false."""
    return value is not None and value is not False


def _containers(spec: Mapping[str, Any], spec_path: str) -> Iterator[_Container]:
    for key in _CONTAINER_LISTS:
        for index, container in enumerate(_seq(spec.get(key))):
            body = _map(container)
            path = f"{spec_path}.{key}[{index}]"
            yield _Container(path, _map(body.get("securityContext")), body)


def check_pod_template(
    template: Mapping[str, Any], *, level: str, path: str
) -> list[Violation]:
    """Every check of ``level`` that ``template`` (a PodTemplateSpec at ``path``) fails."""
    if level not in _RANK:
        raise ValueError(f"unknown Pod Security Standards level {level!r}")
    if _RANK[level] == 0:
        return []
    metadata = _map(template.get("metadata"))
    spec = _map(template.get("spec"))
    spec_path = f"{path}.spec"
    pod = _map(spec.get("securityContext"))
    pod_path = f"{spec_path}.securityContext"
    containers = list(_containers(spec, spec_path))
    found: list[Violation] = []
    found += _host_process(pod, pod_path, containers)
    found += _host_namespaces(spec, spec_path)
    found += _privileged(containers)
    found += _capabilities_baseline(containers)
    found += _host_path_volumes(spec, spec_path)
    found += _host_ports(containers)
    found += _app_armor(metadata, f"{path}.metadata", pod, pod_path, containers)
    found += _se_linux(pod, pod_path, containers)
    found += _proc_mount(containers)
    found += _seccomp_baseline(pod, pod_path, containers)
    found += _sysctls(pod, pod_path)
    if _RANK[level] >= _RANK[RESTRICTED]:
        windows = _map(spec.get("os")).get("name") == "windows"
        found += _restricted_volumes(spec, spec_path)
        found += _run_as_non_root(pod, pod_path, containers)
        found += _run_as_user(pod, pod_path, containers)
        if not windows:  # these three do not apply to Windows pods
            found += _allow_privilege_escalation(containers)
            found += _seccomp_restricted(pod, pod_path, containers)
            found += _capabilities_restricted(containers)
    return [Violation(v.check, v.path, f"{v.message} (Pod Security Standards, level "
                                       f"{level!r}, check {v.check})") for v in found]


def check_service_account(
    template: Mapping[str, Any], *, allowed: frozenset[str], path: str
) -> list[Violation]:
    """The pod's service account must be ``default`` or one of ``allowed`` ("*": any)."""
    spec = _map(template.get("spec"))
    found: list[Violation] = []
    for key in ("serviceAccountName", "serviceAccount"):
        name = spec.get(key)
        if name in (None, "", DEFAULT_SERVICE_ACCOUNT) or "*" in allowed or name in allowed:
            continue
        permitted = ", ".join(sorted(allowed | {DEFAULT_SERVICE_ACCOUNT}))
        found.append(Violation("serviceAccountName", f"{path}.spec.{key}",
                               f"service account {name!r} is not allowed in this namespace "
                               f"(allowed: {permitted})"))
    return found


# --- baseline -----------------------------------------------------------------------------


def _host_process(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> Iterator[Violation]:
    message = "Windows HostProcess containers are not allowed"
    if _set(_map(pod.get("windowsOptions")).get("hostProcess")):
        yield Violation("hostProcess", f"{pod_path}.windowsOptions.hostProcess", message)
    for c in containers:
        if _set(_map(c.security.get("windowsOptions")).get("hostProcess")):
            yield Violation("hostProcess", f"{c.path}.securityContext.windowsOptions.hostProcess",
                            message)


def _host_namespaces(spec: Mapping[str, Any], spec_path: str) -> Iterator[Violation]:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if _set(spec.get(key)):
            yield Violation("hostNamespaces", f"{spec_path}.{key}",
                            "sharing the host's namespaces is not allowed")


def _privileged(containers: list[_Container]) -> Iterator[Violation]:
    for c in containers:
        if _set(c.security.get("privileged")):
            yield Violation("privileged", f"{c.path}.securityContext.privileged",
                            "privileged containers are not allowed")


def _added_capabilities(c: _Container, allowed: frozenset[str], check: str) -> Iterator[Violation]:
    added = _seq(_map(c.security.get("capabilities")).get("add"))
    refused = [str(cap) for cap in added if cap not in allowed]
    if refused:
        yield Violation(check, f"{c.path}.securityContext.capabilities.add",
                        f"adding capabilities {', '.join(refused)} is not allowed (allowed: "
                        f"{', '.join(sorted(allowed))})")


def _capabilities_baseline(containers: list[_Container]) -> Iterator[Violation]:
    for c in containers:
        yield from _added_capabilities(c, BASELINE_CAPABILITIES, "capabilities_baseline")


def _host_path_volumes(spec: Mapping[str, Any], spec_path: str) -> Iterator[Violation]:
    for index, volume in enumerate(_seq(spec.get("volumes"))):
        if _map(volume).get("hostPath") is not None:
            yield Violation("hostPathVolumes", f"{spec_path}.volumes[{index}].hostPath",
                            "hostPath volumes are not allowed")


def _host_ports(containers: list[_Container]) -> Iterator[Violation]:
    for c in containers:
        for index, port in enumerate(_seq(c.body.get("ports"))):
            if _map(port).get("hostPort") not in (None, 0):
                yield Violation("hostPorts", f"{c.path}.ports[{index}].hostPort",
                                "host ports are not allowed")


def _app_armor(
    metadata: Mapping[str, Any], metadata_path: str, pod: Mapping[str, Any], pod_path: str,
    containers: list[_Container],
) -> Iterator[Violation]:
    message = "the AppArmor profile must be RuntimeDefault or Localhost"
    profiles = [(f"{pod_path}.appArmorProfile.type", _map(pod.get("appArmorProfile")))]
    profiles += [(f"{c.path}.securityContext.appArmorProfile.type",
                  _map(c.security.get("appArmorProfile"))) for c in containers]
    for path, profile in profiles:
        if profile and profile.get("type") not in ALLOWED_PROFILE_TYPES:
            yield Violation("appArmorProfile", path, message)
    for key, value in sorted(_map(metadata.get("annotations")).items(), key=lambda kv: str(kv[0])):
        if not str(key).startswith(APPARMOR_ANNOTATION_PREFIX):
            continue
        if value == "runtime/default" or str(value).startswith("localhost/"):
            continue
        yield Violation("appArmorProfile", f"{metadata_path}.annotations[{key}]",
                        'the AppArmor profile must be "runtime/default" or "localhost/*"')


def _se_linux(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> Iterator[Violation]:
    options = [(f"{pod_path}.seLinuxOptions", _map(pod.get("seLinuxOptions")))]
    options += [(f"{c.path}.securityContext.seLinuxOptions",
                 _map(c.security.get("seLinuxOptions"))) for c in containers]
    for path, option in options:
        if option.get("type") not in (None, *SELINUX_TYPES):
            yield Violation("seLinuxOptions", f"{path}.type",
                            f"the SELinux type must be one of "
                            f"{', '.join(sorted(t for t in SELINUX_TYPES if t))} or empty")
        for key in ("user", "role"):
            if option.get(key) not in (None, ""):
                yield Violation("seLinuxOptions", f"{path}.{key}",
                                f"setting the SELinux {key} is not allowed")


def _proc_mount(containers: list[_Container]) -> Iterator[Violation]:
    for c in containers:
        if c.security.get("procMount") not in (None, "Default"):
            yield Violation("procMount", f"{c.path}.securityContext.procMount",
                            'the /proc mount type must be "Default"')


def _seccomp_profiles(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> list[tuple[str, Any]]:
    """(path of the type, type or None) for the pod, then each container."""
    found = [(f"{pod_path}.seccompProfile.type", _map(pod.get("seccompProfile")).get("type")
              if pod.get("seccompProfile") is not None else None)]
    for c in containers:
        profile = c.security.get("seccompProfile")
        found.append((f"{c.path}.securityContext.seccompProfile.type",
                      _map(profile).get("type") if profile is not None else None))
    return found


def _seccomp_baseline(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> Iterator[Violation]:
    for path, kind in _seccomp_profiles(pod, pod_path, containers):
        if kind == "Unconfined":
            yield Violation("seccompProfile_baseline", path,
                            "the seccomp profile must not be Unconfined")


def _sysctls(pod: Mapping[str, Any], pod_path: str) -> Iterator[Violation]:
    for index, sysctl in enumerate(_seq(pod.get("sysctls"))):
        name = _map(sysctl).get("name")
        if name not in SAFE_SYSCTLS:
            yield Violation("sysctls", f"{pod_path}.sysctls[{index}].name",
                            f"sysctl {name!r} is not in the safe set")


# --- restricted ---------------------------------------------------------------------------


def _restricted_volumes(spec: Mapping[str, Any], spec_path: str) -> Iterator[Violation]:
    for index, volume in enumerate(_seq(spec.get("volumes"))):
        for key in sorted(str(k) for k in _map(volume) if k != "name"):
            if key not in RESTRICTED_VOLUME_SOURCES:
                yield Violation("restrictedVolumes", f"{spec_path}.volumes[{index}].{key}",
                                f"volume type {key!r} is not allowed (allowed: "
                                f"{', '.join(sorted(RESTRICTED_VOLUME_SOURCES))})")


def _allow_privilege_escalation(containers: list[_Container]) -> Iterator[Violation]:
    for c in containers:
        if c.security.get("allowPrivilegeEscalation") is not False:
            yield Violation("allowPrivilegeEscalation",
                            f"{c.path}.securityContext.allowPrivilegeEscalation",
                            "must be set to false")


def _run_as_non_root(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> Iterator[Violation]:
    pod_value = pod.get("runAsNonRoot")
    if pod_value is not None and pod_value is not True:
        yield Violation("runAsNonRoot", f"{pod_path}.runAsNonRoot", "must be true")
    unset = False
    for c in containers:
        value = c.security.get("runAsNonRoot")
        if value is None:
            unset = True
        elif value is not True:
            yield Violation("runAsNonRoot", f"{c.path}.securityContext.runAsNonRoot",
                            "must be true")
    if pod_value is None and (unset or not containers):
        yield Violation("runAsNonRoot", f"{pod_path}.runAsNonRoot",
                        "must be true (here, or on every container)")


def _run_as_user(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> Iterator[Violation]:
    users = [(f"{pod_path}.runAsUser", pod.get("runAsUser"))]
    users += [(f"{c.path}.securityContext.runAsUser", c.security.get("runAsUser"))
              for c in containers]
    for path, user in users:
        if user is not None and not isinstance(user, bool) and user == 0:
            yield Violation("runAsUser", path, "must not be 0 (root)")


def _seccomp_restricted(
    pod: Mapping[str, Any], pod_path: str, containers: list[_Container]
) -> Iterator[Violation]:
    profiles = _seccomp_profiles(pod, pod_path, containers)
    pod_type = profiles[0][1]
    message = "the seccomp profile must be RuntimeDefault or Localhost"
    if pod_type is not None and pod_type not in ALLOWED_PROFILE_TYPES:
        yield Violation("seccompProfile_restricted", profiles[0][0], message)
    unset = False
    for path, kind in profiles[1:]:
        if kind is None:
            unset = True
        elif kind not in ALLOWED_PROFILE_TYPES:
            yield Violation("seccompProfile_restricted", path, message)
    if pod_type is None and (unset or not containers):
        yield Violation("seccompProfile_restricted", profiles[0][0],
                        f"{message} (here, or on every container)")


def _capabilities_restricted(containers: list[_Container]) -> Iterator[Violation]:
    for c in containers:
        capabilities = _map(c.security.get("capabilities"))
        if "ALL" not in _seq(capabilities.get("drop")):
            yield Violation("capabilities_restricted",
                            f"{c.path}.securityContext.capabilities.drop",
                            'must include "ALL"')
        yield from _added_capabilities(c, RESTRICTED_CAPABILITIES, "capabilities_restricted")
