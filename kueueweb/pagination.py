from rest_framework.pagination import LimitOffsetPagination


class ListPagination(LimitOffsetPagination):
    """``?limit=&offset=`` like the Kueue visibility API; every list is paginated."""

    default_limit = 100
    max_limit = 1000
