"""Reads of versions and rows: keyset pagination and indexed full-text search."""

import re

from django.db import OperationalError, connection, transaction
from django.db.models import ExpressionWrapper, F, IntegerField, QuerySet, TextField
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from apps.core.errors import Invalid
from apps.datasets import search_index
from apps.datasets.models import DatasetRow, DatasetVersion

PAGE_ROWS = 50
_WORD = re.compile(r"\w+", re.UNICODE)


def readable_version(user, project, version_id, token=None, *, field: str = "dataset_version") -> DatasetVersion:
    """A READY version of a live dataset of `project` that the principal may read (dataset.view,
    by role or grant), for a capability that takes a version as input. Anything else is Invalid
    naming `field`, with no hint whether it exists."""
    from apps.core.errors import Invalid, NotFound
    from apps.datasets.models import Dataset
    from apps.projects import policy

    try:
        version = DatasetVersion.objects.select_related("dataset").get(
            pk=int(version_id), dataset__project=project, dataset__deleted_at__isnull=True,
            status=DatasetVersion.Status.READY)
        policy.get_object(user, Dataset, version.dataset_id, "dataset.view", token, project_id=project.pk)
    except (DatasetVersion.DoesNotExist, NotFound, ValueError, TypeError, OverflowError):
        raise Invalid("No such dataset version in this project.", field=field) from None
    return version


def with_metadata(rows: QuerySet[DatasetRow], key: str, value: str) -> QuerySet[DatasetRow]:
    """The rows whose metadata field `key` holds the text `value`."""
    # KeyTextTransform, not a `metadata__<key>` lookup: a key may hold "__" or any character.
    # The Cast: compared as plain text on every backend (SQLite would compare it as JSON).
    return rows.annotate(meta_value=Cast(KeyTextTransform(key, "metadata"), output_field=TextField())).filter(
        meta_value=value)


def ready_versions(dataset) -> QuerySet[DatasetVersion]:
    return dataset.versions.filter(status=DatasetVersion.Status.READY).select_related("author", "parent")


def history(dataset) -> QuerySet[DatasetVersion]:
    """Every finished version, purged ones included (the record of what existed stays)."""
    return dataset.versions.exclude(status=DatasetVersion.Status.BUILDING).select_related(
        "author", "parent", "purged_by")


# How long a search may scan a version whose search index is not built yet.
UNINDEXED_SEARCH_TIMEOUT_MS = 5000


def search(rows: QuerySet[DatasetRow], q: str, version: DatasetVersion, *,
           page: tuple[int | None, int] | None = None) -> QuerySet[DatasetRow]:
    """Rows whose prompt, response or reference contain every word of `q`. `page` (after, limit),
    when the search is the only filter: the page is cut inside the version's index, so that only
    its rows are read (not every match's, to sort them)."""
    words = _WORD.findall(q)[:20]
    if not words:
        return rows
    text = " ".join(words)
    if connection.vendor == "postgresql":
        if not search_index.is_indexed(version):
            return rows.extra(where=[f"{search_index.DOCUMENT} @@ plainto_tsquery('simple', %s)"], params=[text])
        # Only this version's partition is read (the planner prunes the others).
        if page is not None:
            after, limit = page
            return rows.filter(position__in=RawSQL(
                "SELECT position FROM datasets_rowsearch WHERE version_id = %s AND position > %s AND "
                "document @@ plainto_tsquery('simple', %s) ORDER BY position LIMIT %s",
                [version.pk, -1 if after is None else after, text, limit]))
        return rows.extra(where=[
            "datasets_datasetrow.id IN (SELECT row_id FROM datasets_rowsearch WHERE version_id = %s "
            "AND document @@ plainto_tsquery('simple', %s))"], params=[version.pk, text])
    # FTS5: quote each word so user input never becomes query syntax.
    fts_query = " ".join('"' + word.replace('"', '""') + '"' for word in words)
    return rows.filter(pk__in=RawSQL("SELECT rowid FROM datasets_row_fts WHERE datasets_row_fts MATCH %s",
                                     [fts_query]))


def _unindexed_search_page(rows: QuerySet[DatasetRow], version: DatasetVersion) -> list[DatasetRow]:
    """A search page over a version not indexed yet: a scan, bounded by a statement timeout,
    and the index queued so that the next searches are fast."""
    search_index.queue(version.pk)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL statement_timeout = {UNINDEXED_SEARCH_TIMEOUT_MS}")
            page = list(rows)
            # Releasing the savepoint would not end SET LOCAL inside a caller's transaction.
            cursor.execute("SET LOCAL statement_timeout TO DEFAULT")
            return page
    except OperationalError as exc:
        if getattr(getattr(exc, "__cause__", None), "sqlstate", None) != "57014":  # query_canceled
            raise
        raise Invalid("This version's search index is still being built, and searching without it took too "
                      "long. Try again in a minute.", field="q") from None


def version_rows(*, version: DatasetVersion, after: int | None = None, q: str = "", label: str = "",
                 split: str = "", limit: int = PAGE_ROWS,
                 meta: tuple[str, str] | None = None,
                 rows_in: tuple[QuerySet, bool] | None = None) -> tuple[list[DatasetRow], int | None]:
    """One page of rows after position `after`, and the cursor of the next page (or None).
    `meta`: (metadata field, text) keeps the rows whose field holds that text. `rows_in`:
    (a query of row ids, True to keep them / False to leave them out), e.g. annotated rows."""
    rows = DatasetRow.objects.filter(version=version)
    if rows_in is not None:
        rows = rows.filter(pk__in=rows_in[0]) if rows_in[1] else rows.exclude(pk__in=rows_in[0])
    if meta is not None:
        rows = with_metadata(rows, *meta)
    if label:
        rows = rows.filter(label=label)
    if split:
        rows = rows.filter(split=split)
    if q:
        alone = not (label or split or meta or rows_in)
        rows = search(rows, q, version, page=(after, limit + 1) if alone else None)
    if after is not None:
        rows = rows.filter(position__gt=after)
    # When searching, order by an expression rather than the (version, position) index: walking
    # that index in order and testing every row is what made rare words slow on big versions.
    order = ExpressionWrapper(F("position") + 0, output_field=IntegerField()) if q else F("position")
    rows = rows.order_by(order)[: limit + 1]
    unindexed = q and _WORD.search(q) and not search_index.is_indexed(version)
    page = _unindexed_search_page(rows, version) if unindexed else list(rows)
    next_after = page[limit - 1].position if len(page) > limit else None
    return page[:limit], next_after


DIFF_EXAMPLES = 10


def version_diff(*, old: DatasetVersion, new: DatasetVersion) -> dict:
    """Rows added, removed, changed and moved between splits from `old` to `new`, with a few
    examples of each.

    A row is identified by its content hash; a "changed" row keeps its id but not its hash
    (only when the rows have ids); a "moved" row keeps its hash but not its split. Set operations
    run in the database."""
    old_rows = DatasetRow.objects.filter(version=old)
    new_rows = DatasetRow.objects.filter(version=new)
    added = new_rows.exclude(row_hash__in=old_rows.values("row_hash"))
    removed = old_rows.exclude(row_hash__in=new_rows.values("row_hash"))
    changed_ids = (added.filter(ext_id__isnull=False)
                   .filter(ext_id__in=removed.filter(ext_id__isnull=False).values("ext_id")))
    changed_examples = []
    for after in changed_ids.order_by("position")[:DIFF_EXAMPLES]:
        before = removed.filter(ext_id=after.ext_id).first()
        changed_examples.append({"id": after.ext_id, "before": before, "after": after,
                                 "fields": changed_fields(before, after)})
    changed_count = changed_ids.count()
    moved = _split_moves(old_rows, new_rows)
    return {
        "old": old, "new": new,
        "added": added.count() - changed_count, "removed": removed.count() - changed_count,
        "changed": changed_count,
        "added_examples": list(added.exclude(ext_id__in=changed_ids.values("ext_id")).order_by("position")
                               [:DIFF_EXAMPLES]) if changed_count else list(added.order_by("position")[:DIFF_EXAMPLES]),
        "removed_examples": list(removed.exclude(ext_id__in=changed_ids.values("ext_id")).order_by("position")
                                 [:DIFF_EXAMPLES]) if changed_count else list(removed.order_by("position")
                                                                              [:DIFF_EXAMPLES]),
        "changed_examples": changed_examples,
        **moved,
    }


def _field_texts(row: DatasetRow) -> dict[str, str | None]:
    """The fields of a row a diff compares, as text (chat turns one per line, metadata as JSON)."""
    import json

    return {"prompt": row.prompt,
            "messages": "\n".join(f"{turn.get('role')}: {turn.get('content')}" for turn in row.messages
                                  if isinstance(turn, dict)) if row.messages else None,
            "response": row.response, "reference": row.reference, "label": row.label,
            "metadata": json.dumps(row.metadata, ensure_ascii=False, sort_keys=True) if row.metadata else None}


def changed_fields(before: DatasetRow, after: DatasetRow) -> list[dict]:
    """[{"name", "hunks"}] for each field that differs: its word diff, every change in context."""
    from apps.datasets.worddiff import word_diff

    old, new = _field_texts(before), _field_texts(after)
    return [{"name": name, "hunks": word_diff(old[name], new[name])} for name in old if old[name] != new[name]]


def _split_moves(old_rows: QuerySet, new_rows: QuerySet) -> dict:
    """Rows of `new` whose content is in `old` but never in the same split there: moved between
    splits (a split version's rows all move from none to theirs). Keys: moved (the count),
    moved_examples ([{"row", "before", "after"}], split names, "" for none)."""
    from django.db.models import CharField, Value
    from django.db.models.functions import Concat

    def keyed(rows: QuerySet) -> QuerySet:  # content and split in one value: one IN test per row
        return rows.annotate(split_key=Concat("row_hash", Value(":"), "split", output_field=CharField()))

    moved = keyed(new_rows.filter(row_hash__in=old_rows.values("row_hash"))).exclude(
        split_key__in=keyed(old_rows).values("split_key"))
    examples = []
    for row in moved.order_by("position")[:DIFF_EXAMPLES]:
        before = old_rows.filter(row_hash=row.row_hash).order_by("position").values_list("split", flat=True).first()
        examples.append({"row": row, "before": before or "", "after": row.split})
    return {"moved": moved.count(), "moved_examples": examples}
