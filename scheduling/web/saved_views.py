"""Saved views: a user's named query strings of a list page (filters, grouping, columns,
sort). Each user reads, saves and deletes only their own; any role may keep views, since
a view only reads."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.views.decorators.http import require_POST

from scheduling.models import SavedView
from scheduling.web.tables import MAX_SAVED_VIEWS
from scheduling.web.workloads import reader_required

PAGE_URLS = {SavedView.Page.WORKLOADS: "ui-workloads", SavedView.Page.JOBS: "ui-jobs"}
_NAME_LENGTH = SavedView._meta.get_field("name").max_length or 100
_QUERY_LENGTH = 4000


def _owner(request: HttpRequest) -> User:
    # The views below are for signed-in users only (``reader_required``).
    return cast(User, request.user)


def _clean_query(raw: str) -> str:
    """The list's query without its page number (a view is the same view on any page)."""
    params = QueryDict(raw.lstrip("?"), mutable=True)
    params.pop("page", None)
    return params.urlencode(safe=",")


@require_POST
@reader_required
def saved_view_save(request: HttpRequest) -> HttpResponse:
    page = request.POST.get("page", "")
    if page not in SavedView.Page.values:
        raise Http404("No such list page.")
    list_url = reverse(PAGE_URLS[SavedView.Page(page)])
    name = request.POST.get("name", "").strip()
    query = _clean_query(request.POST.get("query", ""))
    back = f"{list_url}?{query}" if query else list_url
    error = ""
    if not name:
        error = "name: give the view a name"
    elif len(name) > _NAME_LENGTH:
        error = f"name: at most {_NAME_LENGTH} characters"
    elif len(query) > _QUERY_LENGTH:
        error = f"query: at most {_QUERY_LENGTH} characters"
    elif (
        SavedView.objects.filter(user=_owner(request), page=page).exclude(name=name).count()
        >= MAX_SAVED_VIEWS
    ):
        error = f"name: you keep {MAX_SAVED_VIEWS} views of this page at most; delete one first"
    if error:
        messages.error(request, f"View not saved: {error}")
        return HttpResponseRedirect(back)
    try:
        with transaction.atomic():
            _, created = SavedView.objects.update_or_create(
                user=_owner(request), page=page, name=name, defaults={"query": query}
            )
    except IntegrityError:  # saved twice at once: the other request's is kept
        created = False
    messages.success(request, f"View {name!r} {'saved' if created else 'replaced'}.")
    return HttpResponseRedirect(back)


@require_POST
@reader_required
def saved_view_delete(request: HttpRequest, pk: int) -> HttpResponse:
    # Another user's view is not found, as a missing one is.
    view = get_object_or_404(SavedView, pk=pk, user=_owner(request))
    list_url = reverse(PAGE_URLS[SavedView.Page(view.page)])
    view.delete()
    messages.success(request, f"View {view.name!r} deleted.")
    return HttpResponseRedirect(list_url)
