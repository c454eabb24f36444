"""A pause after a dependency failed: callers skip it for a while instead of paying its
timeout again on every request (the broker, the channel layer)."""

from __future__ import annotations

import threading
import time


class Cooldown:
    """``active`` for ``seconds`` after each ``trip``; shared by the threads of a process."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until = 0.0
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return time.monotonic() < self._until

    def trip(self) -> None:
        with self._lock:
            self._until = time.monotonic() + self.seconds

    def reset(self) -> None:
        """Over now: the dependency is known to be back."""
        with self._lock:
            self._until = 0.0
