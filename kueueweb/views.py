"""Site-wide views: the health check and sign-in (the overview at "/" lives in
scheduling.web)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.db import connection
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseServerError,
    JsonResponse,
)
from django.template import loader
from django.templatetags.static import static
from django.views import defaults
from django.views.decorators.http import require_GET

from kueueweb.throttling import LOGIN_FAILURES, login_identity, wait_message


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness and database reachability; the only page open without login."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """Browsers ask for /favicon.ico whatever the page links: the SVG icon answers."""
    return HttpResponsePermanentRedirect(static("favicon.svg"))


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 page inside the app's layout, with the navigation of the signed-in user.

    Rendering with the request runs the context processors (the user, read from the session
    and the database), which may fail for the very reason the view did: then the page is
    rendered as Django's own handler does, without the request.
    """
    try:
        body = loader.render_to_string(defaults.ERROR_500_TEMPLATE_NAME, request=request)
    except Exception:  # the error page must not fail in turn
        return defaults.server_error(request)
    return HttpResponseServerError(body)


class LoginThrottled(forms.ValidationError):
    """Too many failed sign-ins for this username from this address."""

    def __init__(self, wait: int) -> None:
        super().__init__(
            "Too many failed sign-ins for this username from your address; "
            + wait_message(wait) + ".", code="throttled")
        self.wait = wait


class RateLimitedAuthenticationMixin:
    """Counts failed sign-ins per username and address (``kueueweb.throttling``) and refuses
    further attempts, without checking the password, once there were too many."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        identity = login_identity(self.request, username)
        wait = LOGIN_FAILURES.retry_after(identity)
        if wait:
            raise LoginThrottled(wait)
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            LOGIN_FAILURES.failed(identity)
            raise
        LOGIN_FAILURES.reset(identity)
        return cleaned


class RateLimitedAuthenticationForm(RateLimitedAuthenticationMixin, AuthenticationForm):
    pass


class RateLimitedAdminAuthenticationForm(RateLimitedAuthenticationMixin,
                                         AdminAuthenticationForm):
    pass


def throttled_wait(form: forms.Form) -> int:
    """Seconds to wait when the form was refused for too many failures, else 0."""
    for error in form.non_field_errors().as_data():
        if isinstance(error, LoginThrottled):
            return error.wait
    return 0


def answer_throttled(response: HttpResponse, form: forms.Form) -> HttpResponse:
    """429 with ``Retry-After`` when the sign-in form was refused for too many failures."""
    wait = throttled_wait(form)
    if wait:
        response.status_code = 429
        response["Retry-After"] = str(wait)
        # The template says why, instead of "didn't match" (rendered lazily).
        context = getattr(response, "context_data", None)
        if context is not None:
            context["throttled"] = form.non_field_errors()[0]
    return response


class LoginView(auth_views.LoginView):
    """Django's sign-in page, answering 429 with ``Retry-After`` to a throttled client."""

    authentication_form = RateLimitedAuthenticationForm

    def form_invalid(self, form: Any) -> HttpResponse:
        return answer_throttled(super().form_invalid(form), form)


def throttled_admin_login(
        site_login: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The admin site's sign-in view, answering a throttled client as ``LoginView`` does."""

    @wraps(site_login)
    def login(request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        response = site_login(request, extra_context)
        form = (getattr(response, "context_data", None) or {}).get("form")
        if isinstance(form, forms.Form) and form.is_bound:
            return answer_throttled(response, form)
        return response

    return login

