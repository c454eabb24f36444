"""ASGI entry point: HTTP goes to Django, WebSockets to the Channels consumers.

WebSocket connections are authenticated from the session and their Origin header must be a
page of this site, host and port (``kueueweb.origin``), before any consumer sees them. HTTP request bodies over the upload limit
are refused before they are read (``kueueweb.limits``).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kueueweb.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from kueueweb.limits import BodySizeLimit  # noqa: E402
from kueueweb.origin import SameOriginValidator  # noqa: E402
from kueueweb.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        # Bodies over the upload limit are refused before Django reads them.
        "http": BodySizeLimit(django_asgi_app),
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

from kueueweb import collector  # noqa: E402

# No long garbage-collector pauses inside requests (see the module).
collector.tune()
