"""The API's list pagination, one envelope for every list: `{"results": [...], "next": URL or null}`
(plus `count` and `previous` on limit/offset lists). `limit` is honoured and capped at
MAX_PAGE_SIZE everywhere. Lists that grow while they are read are keyset-paginated: `next` carries
an opaque `cursor` naming the last item given, so an item added meanwhile is neither skipped nor
repeated. Query-string integers the database cannot hold (past 2^63), that are not whole numbers,
and cursors that do not decode are a 400 naming their parameter, never a 500."""

import base64
import binascii
import datetime
import json

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from rest_framework.pagination import BasePagination, LimitOffsetPagination
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.utils.urls import remove_query_param, replace_query_param

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


def _limit(request, name: str, default: int) -> int:
    return min(query_int(request.query_params, name, default=default, minimum=1), MAX_PAGE_SIZE)


class Pagination(LimitOffsetPagination):
    """limit/offset, for small lists that do not grow while read (projects, members, models...):
    limit capped at MAX_PAGE_SIZE and both checked as query_int checks."""

    max_limit = MAX_PAGE_SIZE

    def get_limit(self, request):
        return _limit(request, self.limit_query_param, self.default_limit)

    def get_offset(self, request):
        return query_int(request.query_params, self.offset_query_param, default=0)


class KeysetPagination(BasePagination):
    """Keyset (cursor) pagination on `key`, fields that together are unique and give the list's
    order ("-" on all of them for newest first). A page is the `limit` items after the cursor's key,
    found by an indexed range, not an OFFSET: it stays exact while items are added and as fast on
    page 1000 as on page 1. Subclasses set `key`, and `after_param` where an older release took the
    first key's raw value (`after=<position>`): that is still accepted, and deprecated."""

    key: tuple[str, ...] = ("-id",)
    after_param: str | None = None
    after_field_in_response: str | None = None  # e.g. "next_after", the older release's field, for its clients
    default_limit: int = api_settings.PAGE_SIZE or 50
    cursor_query_param = "cursor"
    limit_query_param = "limit"

    def start(self, request, model: type[models.Model]) -> tuple | None:
        """Read `limit` and the cursor (or the deprecated `after_param`) from the request; returns
        the key values to continue after, None from the start. For views whose selector fetches
        the page itself; `finish` then takes the items."""
        self.request = request
        self.limit = _limit(request, self.limit_query_param, self.default_limit)
        self.after_only_first = False
        raw = request.query_params.get(self.cursor_query_param)
        if raw not in (None, ""):
            self.after = self._decode(raw, model)
        elif self.after_param and (value := query_int(request.query_params, self.after_param, default=None)) is not None:
            self.after, self.after_only_first = (value,), True
        else:
            self.after = None
        return self.after

    def finish(self, items: list, *, more: bool | None = None) -> list:
        """The page: at most `limit` of `items`; `more` says whether items follow (by default:
        whether the selector fetched limit + 1)."""
        self.has_next = len(items) > self.limit if more is None else more
        self.page = list(items[:self.limit])
        return self.page

    def paginate_queryset(self, queryset, request, view=None):
        self.start(request, queryset.model)
        if self.after is not None:
            queryset = queryset.filter(self.after_filter())
        return self.finish(list(queryset.order_by(*self.key)[:self.limit + 1]))

    def after_filter(self) -> Q:
        """Items past `self.after` in key order: (a, b) > (x, y) as a > x OR (a = x AND b > y), with
        a >= x in front so the database walks the index from x instead of testing every row."""
        fields = [name.lstrip("-") for name in self.key]
        beyond = "lt" if self.key[0].startswith("-") else "gt"
        if self.after_only_first:
            return Q(**{f"{fields[0]}__{beyond}": self.after[0]})
        either = Q()
        for i, name in enumerate(fields):
            either |= Q(**dict(zip(fields[:i], self.after[:i])), **{f"{name}__{beyond}": self.after[i]})
        return Q(**{f"{fields[0]}__{beyond}e": self.after[0]}) & either if len(fields) > 1 else either

    def get_next_link(self) -> str | None:
        if not self.has_next or not self.page:
            return None
        last = self.page[-1]
        values = [_jsonable(getattr(last, name.lstrip("-"))) for name in self.key]
        cursor = base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")
        url = self.request.build_absolute_uri()
        if self.after_param:
            url = remove_query_param(url, self.after_param)
        return replace_query_param(url, self.cursor_query_param, cursor)

    def get_paginated_response(self, data):
        body = {"next": self.get_next_link(), "results": data}
        if self.after_field_in_response:
            body[self.after_field_in_response] = (
                getattr(self.page[-1], self.key[0].lstrip("-")) if self.has_next and self.page else None)
        return Response(body)

    def _decode(self, raw: str, model: type[models.Model]) -> tuple:
        refused = Invalid(f"'{self.cursor_query_param}' is not a cursor this list gave; follow the list's 'next' "
                          f"link or start without one.", field=self.cursor_query_param)
        try:
            values = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        except (ValueError, binascii.Error):
            raise refused from None
        if not isinstance(values, list) or len(values) != len(self.key):
            raise refused
        decoded = []
        for name, value in zip(self.key, values):
            field = model._meta.get_field(name.lstrip("-"))
            if isinstance(field, models.IntegerField):
                if not (type(value) is int and -MAX_SQL_INT - 1 <= value <= MAX_SQL_INT):
                    raise refused
            elif not isinstance(value, str):
                raise refused
            try:
                decoded.append(field.to_python(value))
            except ValidationError:
                raise refused from None
            if decoded[-1] is None:
                raise refused
        return tuple(decoded)

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["next", "results"],
            "properties": {
                "next": {"type": "string", "nullable": True, "format": "uri",
                         "description": "the next page; null on the last one"},
                "results": schema,
                **({self.after_field_in_response: {
                    "type": "integer", "nullable": True, "deprecated": True,
                    "description": f"the `{self.after_param}` of the next page; follow `next` instead"}}
                   if self.after_field_in_response else {}),
            },
        }

    def get_schema_operation_parameters(self, view):
        parameters = [
            {"name": self.cursor_query_param, "required": False, "in": "query",
             "description": "where to continue: the value from the previous page's `next` link (opaque)",
             "schema": {"type": "string"}},
            {"name": self.limit_query_param, "required": False, "in": "query",
             "description": f"items per page, at most {MAX_PAGE_SIZE} (default {self.default_limit})",
             "schema": {"type": "integer", "minimum": 1}},
        ]
        if self.after_param:
            parameters.append({
                "name": self.after_param, "required": False, "in": "query", "deprecated": True,
                "description": f"the {self.key[0].lstrip('-')} to continue after; use `{self.cursor_query_param}`",
                "schema": {"type": "integer", "minimum": 0}})
        return parameters


class NewestFirstPagination(KeysetPagination):
    """For lists of things made over time (exports, annotations): newest first."""

    key = ("-created_at", "-id")


def _jsonable(value):
    return value.isoformat() if isinstance(value, datetime.datetime) else value
