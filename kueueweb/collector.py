"""The garbage collector in a web process: no pauses of tens of milliseconds in requests.

Much of what a request builds ends up in reference cycles: a Django REST framework
serializer and its fields point at each other and hold the page's model instances, so a
list of 100 workloads leaves about 5,000 objects (the instances and their JSON) that only
the cycle collector frees. With CPython's default thresholds the youngest generation is
collected every 700 allocations, several times within such a request, while those objects
are still in use: they are promoted, and only the full collections free them, the garbage of
many requests at once. Under load that was a 30 to 90 ms pause about every second, inside
whichever request was running, and most of the API's p99 (``manage.py loadtest api``).

``tune()``, once the application has loaded:

* freezes what is loaded (``gc.freeze()``): it lives as long as the process and is never
  walked again;
* raises the youngest generation's threshold above what a request allocates (at most about
  7,000 objects net for a page of 100 workloads), so what a request builds stays young;
* collects the youngest generation when each request has finished, which Django signals
  after the response was sent. That frees the request's cycles for the cost of walking the
  request's own objects (1.4 ms for that page, 0.1 to 0.5 ms for most), whatever the size of
  the process, and little ever reaches the old generation.
"""

from __future__ import annotations

import gc
from typing import Any

from django.core.signals import request_finished

# Allocations (net of frees) between automatic collections of the youngest generation; a
# request that allocates more still gets them.
YOUNG_THRESHOLD = 50_000


def _collect_young(sender: Any, **kwargs: Any) -> None:
    gc.collect(0)


def tune() -> None:
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    request_finished.connect(_collect_young, dispatch_uid="kueueweb.collector")
