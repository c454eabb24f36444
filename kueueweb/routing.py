"""WebSocket routes of every app."""

from django.urls import URLPattern, URLResolver, path

from kueueweb.consumers import LiveConsumer

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/live/", LiveConsumer.as_asgi()),
]
