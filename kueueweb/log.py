"""Logging: a request refused for the client's fault is one line, not a traceback.

Django logs every 4xx answer that came from an exception (``PermissionDenied``,
``SuspiciousOperation``, ...) with that exception's traceback; a refused action is expected
and its message (status, path) says all there is. Server errors (5xx) keep theirs.
"""

from __future__ import annotations

import logging


class ClientErrorsOnOneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
