"""What can go wrong when talking to a Kubernetes API server, in three kinds.

The reconcilers act on the kind, never on the client library's exceptions:

- ``KubeConfigError``: the kubeconfig cannot be loaded (Kueue's ``BadConfig``); retrying
  does not help until it is replaced;
- ``KubeUnavailable``: the server cannot be reached, timed out, is overloaded or rejects
  our credentials; the cluster is disconnected and retried with back-off
  (``ClientConnectionFailed``);
- ``KubeApiError``: the server answered a request with an error ``Status`` (not found,
  conflict, invalid, forbidden, gone): the caller decides what it means for that call.
"""

from __future__ import annotations


class KubeError(Exception):
    """Any failure of the Kubernetes backend."""


class KubeConfigError(KubeError):
    """The kubeconfig is missing, malformed or not allowed."""


class KubeUnavailable(KubeError):
    """The API server cannot be used right now."""


class KubeApiError(KubeError):
    """An error ``Status`` from the API server (``code``, ``reason``, ``message``)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def gone(self) -> bool:
        """410: a watch's resource version is too old (reason ``Expired``)."""
        return self.status == 410

    @property
    def forbidden(self) -> bool:
        return self.status == 403

    @property
    def invalid(self) -> bool:
        """The request itself is wrong (400 BadRequest, 422 Invalid): retrying cannot help."""
        return self.status in (400, 422)
