"""Pagination of every API list."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.views import APIView

# From this offset on, a page is found by its ids first (see ``paginate_queryset``).
DEFERRED_FROM_OFFSET = 500
# The largest offset a pager hands the database: far past any list's end, and far below the
# 64-bit integers an OFFSET or LIMIT holds (a larger one is a database error, not a page).
MAX_OFFSET = 2**40


def page_number(value: object, page_size: int) -> int:
    """The 1-based page number in a query parameter: 1 for anything that is no whole number,
    and no later than the page at ``MAX_OFFSET`` (an empty one)."""
    try:
        number = int(str(value))
    except ValueError:
        return 1
    return min(max(1, number), MAX_OFFSET // page_size + 1)


class ListPagination(LimitOffsetPagination):
    """``?limit=&offset=`` like the Kueue visibility API; every list is paginated."""

    default_limit = 100
    max_limit = 1000

    def paginate_queryset(
        self, queryset: Any, request: Request, view: APIView | None = None
    ) -> list[Any] | None:
        """As DRF's, but a late page reads the ordered ids up to it and then only its own
        rows: OFFSET over whole rows (JSON columns, joined tables) made page 400 of the
        workloads cost ten times page 1."""
        self.request = request
        limit = self.get_limit(request)
        if limit is None or not isinstance(queryset, QuerySet):
            return super().paginate_queryset(queryset, request, view)
        self.limit = limit
        self.count = self.get_count(queryset)
        self.offset = self.get_offset(request)
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        if self.count == 0 or self.offset > self.count:
            return []
        if self.offset < DEFERRED_FROM_OFFSET:
            return list(queryset[self.offset:self.offset + self.limit])
        ids = list(queryset.values_list("pk", flat=True)[self.offset:self.offset + self.limit])
        rows = queryset.model._default_manager.filter(pk__in=ids)
        if queryset.query.select_related:
            related = queryset.query.select_related
            rows = rows.select_related(*_paths(related)) if isinstance(related, dict) \
                else rows.select_related()
        prefetch = getattr(queryset, "_prefetch_related_lookups", ())
        if prefetch:
            rows = rows.prefetch_related(*prefetch)
        found = {obj.pk: obj for obj in rows}
        return [found[pk] for pk in ids if pk in found]


def _paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """``select_related`` paths from the nested dict a query keeps them in."""
    paths = []
    for name, sub in tree.items():
        path = f"{prefix}{name}"
        nested = _paths(sub, f"{path}__") if sub else []
        paths.extend(nested or [path])
    return paths
