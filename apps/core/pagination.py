"""Query-string integers and the API's list pagination: a value the database cannot hold (past
2^63) or that is not a whole number is a 400 naming its parameter, never a 500."""

from rest_framework.pagination import LimitOffsetPagination

from apps.core.errors import Invalid

MAX_SQL_INT = 2**63 - 1
MAX_PAGE_SIZE = 500


def query_int(params, name: str, *, default: int | None, minimum: int = 0, maximum: int = MAX_SQL_INT) -> int | None:
    """`params[name]` as an integer in [minimum, maximum]; `default` when absent or empty."""
    raw = params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(f"'{name}' is a whole number, got {str(raw)[:40]!r}.", field=name) from None
    if not minimum <= value <= maximum:
        raise Invalid(f"'{name}' must be between {minimum} and {maximum}.", field=name)
    return value


class Pagination(LimitOffsetPagination):
    """limit/offset, with limit capped at MAX_PAGE_SIZE and both checked as query_int checks."""

    max_limit = MAX_PAGE_SIZE

    def get_limit(self, request):
        limit = query_int(request.query_params, self.limit_query_param, default=self.default_limit, minimum=1,
                          maximum=MAX_SQL_INT)
        return min(limit, self.max_limit)

    def get_offset(self, request):
        return query_int(request.query_params, self.offset_query_param, default=0)
