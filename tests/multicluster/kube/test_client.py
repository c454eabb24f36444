"""One client per cluster from its kubeconfig: cached by kubeconfig, a timeout on every call,
errors sorted into kinds, kubeconfigs that would run commands or read files refused."""

from __future__ import annotations

import socket
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from multicluster.kube import client
from multicluster.kube.backend import KubeBackend
from multicluster.kube.errors import KubeApiError, KubeConfigError, KubeUnavailable
from multicluster.models import Cluster
from tests.fixtures.kube_api import TOKEN, kubeconfig_for

pytestmark = pytest.mark.django_db


def _with_user(kubeconfig: str, **user: Any) -> str:
    data = yaml.safe_load(kubeconfig)
    data["users"][0]["user"] = user
    return yaml.safe_dump(data)


def _with_cluster(kubeconfig: str, **cluster: Any) -> str:
    data = yaml.safe_load(kubeconfig)
    data["clusters"][0]["cluster"].update(cluster)
    return yaml.safe_dump(data)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in accepted:
        conn.close()
    listener.close()


def test_each_cluster_gets_its_own_client_from_its_kubeconfig(
    kube_api: Any, kube_cluster: Cluster,
) -> None:
    other = Cluster(name="other", role="worker", connection_type="kubernetes")
    other.set_kubeconfig(kubeconfig_for("http://127.0.0.1:9", "other-token"))
    other.save()

    mine = client.client_for(kube_cluster)
    theirs = client.client_for(other)

    assert mine is not theirs
    assert mine.host == yaml.safe_load(kube_api.kubeconfig)["clusters"][0]["cluster"]["server"]
    assert theirs.host == "http://127.0.0.1:9"
    assert KubeBackend(mine).server_version()["major"] == "1"


def test_the_client_is_cached_until_the_kubeconfig_changes(kube_cluster: Cluster) -> None:
    first = client.client_for(kube_cluster)
    assert client.client_for(Cluster.objects.get(pk=kube_cluster.pk)) is first

    kube_cluster.set_kubeconfig(kubeconfig_for("http://127.0.0.1:9", "new-token"))
    kube_cluster.save()
    second = client.client_for(kube_cluster)

    assert second is not first
    assert second.host == "http://127.0.0.1:9"


def test_requests_carry_the_kubeconfig_token(kube_api: Any, kube_cluster: Cluster) -> None:
    kube_api.require_fake()
    KubeBackend(client.client_for(kube_cluster)).list_nodes()

    [request] = kube_api.requests_to("GET", "/api/v1/nodes")
    assert request.query == {"limit": "500"}
    assert request.authorization == f"Bearer {TOKEN}"


def test_a_wrong_token_makes_the_server_unavailable(kube_api: Any) -> None:
    kube_api.require_fake()
    kube = client.build_client(kubeconfig_for(kube_api.url, "wrong"))

    with pytest.raises(KubeUnavailable, match="401 Unauthorized"):
        KubeBackend(kube).list_nodes()


def test_an_error_status_is_an_api_error_with_its_reason(
    kube_api: Any, kube_cluster: Cluster,
) -> None:
    backend = KubeBackend(client.client_for(kube_cluster))

    with pytest.raises(KubeApiError) as caught:
        backend.kube.call(backend.kube.custom.get_namespaced_custom_object, "batch", "v1",
                          kube_api.namespace, "jobs", "missing")

    assert caught.value.status == 404
    assert caught.value.not_found
    assert caught.value.reason == "NotFound"


def test_a_token_that_cannot_be_a_header_is_unavailable_without_the_token(
    kube_api: Any, settings: Any, tmp_path: Path,
) -> None:
    # A token file written with echo ends in a line break, which the client library sends
    # on in the Authorization header; the kubeconfig check cannot see into the file.
    kube_api.require_fake()
    planted = "PLANTEDheadertoken9f2"
    token_file = tmp_path / "token"
    token_file.write_text(f"{planted}\n")
    settings.KUEUEWEB = {**settings.KUEUEWEB, "KUBE_ALLOW_LOCAL_CREDENTIALS": True}
    kube = client.build_client(_with_user(kube_api.kubeconfig, tokenFile=str(token_file)))

    with pytest.raises(KubeUnavailable, match="not a valid HTTP header value") as caught:
        KubeBackend(kube).server_version()

    assert planted not in "".join(traceback.format_exception(caught.value))
    assert kube_api.requests_to("GET", "/version") == []


def test_a_refused_connection_makes_the_server_unavailable(kube_api: Any) -> None:
    kube_api.require_fake()
    kube = client.build_client(kube_api.kubeconfig)
    kube_api.refuse_connections()

    with pytest.raises(KubeUnavailable, match="(?i)refused"):
        KubeBackend(kube).server_version()


def test_every_call_times_out(silent_server: int, settings: Any) -> None:
    settings.KUEUEWEB = {**settings.KUEUEWEB, "KUBE_REQUEST_TIMEOUT_SECONDS": 0.3}
    kube = client.build_client(kubeconfig_for(f"http://127.0.0.1:{silent_server}", "t"))
    assert kube.timeout == 0.3

    def timed_out_after() -> float:
        started = time.monotonic()
        with pytest.raises(KubeUnavailable, match="(?i)timed out"):
            KubeBackend(kube).server_version()
        return time.monotonic() - started

    # The best of three: the default timeout (10 s) would show in every run, a stall of the
    # machine in one.
    assert min(timed_out_after() for _ in range(3)) < 2.0


@pytest.mark.parametrize(
    ("kubeconfig", "want_message"),
    [
        ("", "no kubeconfig is stored"),
        ("clusters: [unclosed", "not valid YAML"),
        ("apiVersion: v1\nkind: Config\n", "expected a YAML mapping with a 'clusters' list"),
        (_with_user(kubeconfig_for("http://127.0.0.1:9", "t"),
                    exec={"command": "touch", "args": ["/tmp/pwned"],
                          "apiVersion": "client.authentication.k8s.io/v1"}),
         r"users\[0\]\.user\.exec: not accepted"),
        (_with_user(kubeconfig_for("http://127.0.0.1:9", "t"),
                    **{"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}),
         r"users\[0\]\.user\.auth-provider: not accepted"),
        (_with_user(kubeconfig_for("http://127.0.0.1:9", "t"), tokenFile="/etc/passwd"),
         r"users\[0\]\.user\.tokenFile: not accepted"),
        (_with_cluster(kubeconfig_for("https://127.0.0.1:9", "t"),
                       **{"certificate-authority": "/etc/ssl/ca.pem"}),
         r"clusters\[0\]\.cluster\.certificate-authority: not accepted"),
        (yaml.safe_dump({**yaml.safe_load(kubeconfig_for("http://127.0.0.1:9", "t")),
                         "current-context": "nowhere"}), "cannot be loaded"),
    ],
    ids=["empty", "bad-yaml", "no-clusters", "exec", "auth-provider", "token-file",
         "ca-file", "unknown-context"],
)
def test_refuses_kubeconfigs_it_cannot_or_must_not_load(kubeconfig: str,
                                                         want_message: str) -> None:
    with pytest.raises(KubeConfigError, match=want_message):
        client.build_client(kubeconfig)


def test_local_credentials_are_read_when_allowed(
    kube_api: Any, settings: Any, tmp_path: Path,
) -> None:
    kube_api.require_fake()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    kubeconfig = _with_user(kube_api.kubeconfig, tokenFile=str(token_file))
    settings.KUEUEWEB = {**settings.KUEUEWEB, "KUBE_ALLOW_LOCAL_CREDENTIALS": True}

    assert KubeBackend(client.build_client(kubeconfig)).list_nodes() == []
    [request] = kube_api.requests_to("GET", "/api/v1/nodes")
    assert request.authorization == f"Bearer {TOKEN}"
