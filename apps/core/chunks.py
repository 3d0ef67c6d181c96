"""Reading a large queryset in pieces without keeping a read open while the caller writes.

`QuerySet.iterator()` keeps its cursor, and so its read transaction, open between chunks. On
SQLite in WAL mode a connection whose read began before another connection's commit cannot then
write ("database is locked" at once, whatever the busy timeout): a job that streams rows and
writes its progress or its output in between fails as soon as its own heartbeat thread, or a web
request, commits meanwhile. Each piece here is a query of its own, fetched whole."""

from collections.abc import Iterator

from django.db.models import Model, QuerySet


def in_chunks(queryset: QuerySet, *, key: str, size: int) -> Iterator[Model]:
    """The rows of `queryset` in order of `key` (a field unique within it, ascending), `size` at
    a time, each batch read by its own query after the previous one's last key."""
    last = None
    while True:
        page = queryset.order_by(key)
        if last is not None:
            page = page.filter(**{f"{key}__gt": last})
        batch = list(page[:size])
        yield from batch
        if len(batch) < size:
            return
        last = getattr(batch[-1], key)
