"""A request refused for the client's fault is logged on one line; a server error keeps its
traceback."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from kueueweb.log import ClientErrorsOnOneLine


@pytest.fixture
def log_output() -> Iterator[io.StringIO]:
    """What every console handler on django.request's way to the root writes, in one buffer
    (pytest's capturing handlers left alone)."""
    out = io.StringIO()
    swapped: list[tuple[logging.StreamHandler[Any], Any]] = []
    logger: logging.Logger | None = logging.getLogger("django.request")
    while logger is not None:
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler:
                swapped.append((handler, handler.setStream(out)))
        logger = logger.parent if logger.propagate else None
    yield out
    for handler, stream in swapped:
        handler.setStream(stream)


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_a_refused_ui_action_is_one_log_line(make_queue: Any, make_workload: Any,
                                             viewer_ui: Client, log_output: io.StringIO,
                                             settings: Any, debug: bool) -> None:
    settings.DEBUG = debug
    make_queue("team-a", {"cpu": "4"})
    wl = make_workload("w-1", "lq-team-a", {"cpu": "1"})
    url = reverse("ui-workload-action", kwargs={"cluster": "manager", "namespace": wl.namespace,
                                                "name": wl.name, "action": "deactivate"})

    response = viewer_ui.post(url)

    assert response.status_code == 403
    lines = [line for line in log_output.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1, log_output.getvalue()
    assert "Forbidden" in lines[0]
    assert url in lines[0]


def _record(status: int) -> logging.LogRecord:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "m", (),
                                   (type(exc), exc, exc.__traceback__))
    record.status_code = status
    return record


def test_server_errors_keep_their_traceback() -> None:
    server, client = _record(500), _record(404)

    assert ClientErrorsOnOneLine().filter(server)
    assert ClientErrorsOnOneLine().filter(client)
    assert server.exc_info is not None
    assert client.exc_info is None
