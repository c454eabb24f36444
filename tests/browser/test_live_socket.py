"""The live-update WebSocket, from a real browser."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.production, pytest.mark.slow]

OPEN_SOCKET = """() => new Promise((resolve) => {
  const socket = new WebSocket("ws://" + location.host + "/ws/live/");
  let opened = false;
  socket.onopen = () => { opened = true; socket.send(JSON.stringify({subscribe: [1]})); };
  socket.onmessage = (event) => resolve({message: JSON.parse(event.data)});
  socket.onclose = (event) => resolve({closed: event.code, opened: opened});
})"""


def test_anonymous_socket_is_refused(browser_page: Callable[..., Any]) -> None:
    page = browser_page(None)
    page.goto("/login/")
    # The handshake itself is refused (HTTP 403): the socket never opens.
    assert page.evaluate(OPEN_SOCKET) == {"closed": 1006, "opened": False}


def test_signed_in_socket_subscribes(browser_page: Callable[..., Any], manager: Any,
                                     viewer: Any) -> None:
    page = browser_page(viewer)
    result = page.evaluate(OPEN_SOCKET.replace("[1]", f"[{manager.pk}]"))
    assert result == {"message": {"type": "subscribed", "clusters": [manager.pk]}}
