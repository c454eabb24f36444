"""The URL map of the test suite: the site's, and a page that fails, to see the 500 page."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from kueueweb.urls import urlpatterns as site_urlpatterns

handler500 = "kueueweb.views.server_error"


def failing_view(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a failure the test provoked")


urlpatterns = [
    *site_urlpatterns,
    path("__tests__/server-error/", failing_view),
]
