"""Reads of versions and rows: keyset pagination and indexed full-text search."""

import re

from django.db import connection
from django.db.models import QuerySet
from django.db.models.expressions import RawSQL

from apps.datasets.models import DatasetRow, DatasetVersion

PAGE_ROWS = 50
_WORD = re.compile(r"\w+", re.UNICODE)


def ready_versions(dataset) -> QuerySet[DatasetVersion]:
    return dataset.versions.filter(status=DatasetVersion.Status.READY).select_related("author", "parent")


def search(rows: QuerySet[DatasetRow], q: str) -> QuerySet[DatasetRow]:
    """Rows whose prompt, response or reference contain every word of `q` (indexed)."""
    words = _WORD.findall(q)[:20]
    if not words:
        return rows
    if connection.vendor == "postgresql":
        return rows.filter(pk__in=RawSQL(
            "SELECT id FROM datasets_datasetrow WHERE to_tsvector('simple', coalesce(prompt, '') || ' ' || "
            "coalesce(response, '') || ' ' || coalesce(reference, '')) @@ plainto_tsquery('simple', %s)",
            [" ".join(words)]))
    # FTS5: quote each word so user input never becomes query syntax.
    fts_query = " ".join('"' + word.replace('"', '""') + '"' for word in words)
    return rows.filter(pk__in=RawSQL("SELECT rowid FROM datasets_row_fts WHERE datasets_row_fts MATCH %s",
                                     [fts_query]))


def version_rows(*, version: DatasetVersion, after: int | None = None, q: str = "", label: str = "",
                 split: str = "", limit: int = PAGE_ROWS) -> tuple[list[DatasetRow], int | None]:
    """One page of rows after position `after`, and the cursor of the next page (or None)."""
    rows = DatasetRow.objects.filter(version=version)
    if label:
        rows = rows.filter(label=label)
    if split:
        rows = rows.filter(split=split)
    if q:
        rows = search(rows, q)
    if after is not None:
        rows = rows.filter(position__gt=after)
    page = list(rows.order_by("position")[: limit + 1])
    next_after = page[limit - 1].position if len(page) > limit else None
    return page[:limit], next_after
