"""The garbage collector in web and reconciler processes: no long pauses inside requests and calls.

Much of what a request builds ends up in reference cycles: a Django REST framework
serializer and its fields point at each other and hold the page's model instances, so a
list of 100 workloads leaves thousands of objects (the instances and their JSON) that only
the cycle collector frees. With CPython's default thresholds the youngest generation is
collected every 700 allocations, several times within such a request, while those objects
are still in use: they are promoted, and only the full collections free them, the garbage of
many requests at once. Under load those full collections stop every thread about every
second, inside whichever request is running, and make most of the API's slowest responses
(``manage.py loadtest api``).

``tune()``, once the application has loaded:

* freezes what is loaded (``gc.freeze()``): it lives as long as the process and is never
  walked again;
* raises the youngest generation's threshold well above what a request allocates (a page
  of 100 workloads is the largest), so what a request builds stays young;
* collects the youngest generation when each request has finished, which Django signals
  after the response was sent. That frees the request's cycles for the cost of walking the
  request's own objects, whatever the size of the process, and little ever reaches the old
  generation.

An admission call is larger still: it reads thousands of rows and builds an engine
workload for each, nearly all of them alive until it returns. Every automatic collection
during the call walks them in vain and promotes them, and the middle and full collections
that follow walk them again: a fifth of a large call's time. ``paused()`` holds automatic
collections off for the call; what it left behind is collected after it, as after any task.

A reconciler process (a Celery worker, or the embedded loop, which also runs outside a
web server under ``manage.py bench``) has the same problem at a larger scale: an admission
call builds thousands of rows and engine workloads, the row caches keep some of them for a
few seconds, and with the default thresholds those are promoted and then walked by full
collections of the whole process, each with every thread stopped. ``tune_reconciler()`` applies the same thresholds and freeze, and collects the youngest
generation after each task (Celery's ``task_postrun``, and the embedded loop after each
call).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.signals import request_finished

# Allocations (net of frees) between automatic collections of the youngest generation; a
# request that allocates more still gets them.
YOUNG_THRESHOLD = 50_000


def collect_young(sender: Any = None, **kwargs: Any) -> None:
    """Collect the youngest generation: after a request or a task, what it allocated (a
    receiver of Django's and Celery's signals)."""
    gc.collect(0)


def _freeze_and_raise() -> None:
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def tune() -> None:
    """A web process, once the application has loaded."""
    _freeze_and_raise()
    request_finished.connect(collect_young, dispatch_uid="kueueweb.collector")


def tune_reconciler() -> None:
    """A reconciler process, once its tasks are imported. The embedded loop collects the
    young generation after each call itself; a Celery worker does it on ``task_postrun``."""
    from celery.signals import task_postrun

    _freeze_and_raise()
    task_postrun.connect(collect_young, dispatch_uid="kueueweb.collector.task",
                         weak=False)


_paused_lock = threading.Lock()
_paused_calls = 0
_was_enabled = False


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection while the block runs (in any thread: the collector is the
    process's). Blocks may overlap in several threads; collections resume when the last
    one ends, if they were enabled when the first began. Explicit ``gc.collect`` calls
    still run."""
    global _paused_calls, _was_enabled
    with _paused_lock:
        if _paused_calls == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _paused_calls += 1
    try:
        yield
    finally:
        with _paused_lock:
            _paused_calls -= 1
            if _paused_calls == 0 and _was_enabled:
                gc.enable()
