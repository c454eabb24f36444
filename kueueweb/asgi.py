"""ASGI entry point: HTTP goes to Django, WebSockets to the Channels consumers.

WebSocket connections are authenticated from the session and their Origin header is checked
against ALLOWED_HOSTS before any consumer sees them. HTTP request bodies over the upload limit
are refused before they are read (``kueueweb.limits``).
"""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kueueweb.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from kueueweb.limits import BodySizeLimit  # noqa: E402
from kueueweb.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Bodies over the upload limit are refused before Django reads them.
        "http": BodySizeLimit(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

# Everything loaded so far (Django, the apps, their modules) lives as long as the process:
# move it out of the collector's generations, so that a full collection walks only what
# requests allocate. Measured at 50,000 workloads: p99 of a workloads page 107 ms → 46 ms,
# p50 unchanged (``manage.py loadtest api``).
gc.freeze()
