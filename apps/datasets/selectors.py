"""Reads of versions and rows: keyset pagination and indexed full-text search."""

import re

from django.db import OperationalError, connection, transaction
from django.db.models import (
    Exists,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
)
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


DIFF_EXAMPLES = 10  # per kind on the diff's overview
DIFF_PAGE_ROWS = 50  # per page when one kind is listed
DIFF_KINDS = ("changed", "added", "removed", "moved")


class _Diff:
    """The rows of each kind of change from `old` to `new`, as queries.

    A row is identified by its content hash; a "changed" row keeps its id but not its hash (only
    when the rows have ids); a "moved" row keeps its hash but not its split. Each test of a row
    against the other version is an EXISTS probe of the (version, row_hash) index, so a query
    reads the rows of its own side once and never the whole other version per row; an id
    matched across versions goes through the (version, ext_id) index."""

    def __init__(self, old: DatasetVersion, new: DatasetVersion):
        self.old_rows = DatasetRow.objects.filter(version=old)
        self.new_rows = DatasetRow.objects.filter(version=new)
        in_old = Exists(self.old_rows.filter(row_hash=OuterRef("row_hash")))
        in_new = Exists(self.new_rows.filter(row_hash=OuterRef("row_hash")))
        self.only_new = self.new_rows.filter(~in_old)  # not in old: added or changed
        self.only_old = self.old_rows.filter(~in_new)  # not in new: removed or changed
        # "changed": one id on both sides, a row of each side not in the other.
        changed_new = Exists(self.only_old.filter(ext_id=OuterRef("ext_id")))
        changed_old = Exists(self.only_new.filter(ext_id=OuterRef("ext_id")))
        with_id = Q(ext_id__isnull=False)
        self.rows = {
            "changed": self.only_new.filter(with_id & changed_new),
            "added": self.only_new.filter(~with_id | ~changed_new),
            "removed": self.only_old.filter(~with_id | ~changed_old),
            # In old with the same content, but never in the same split there.
            "moved": self.new_rows.filter(in_old, ~Exists(self.old_rows.filter(row_hash=OuterRef("row_hash"),
                                                                                  split=OuterRef("split")))),
        }

    def counts(self) -> dict[str, int]:
        # Each count a filter, not an EXISTS in the select list: PostgreSQL turns a filter into
        # a hash (anti) join, but runs a selected EXISTS once per row (1.3 s for 100,000 rows).
        only_new, only_old, moved = self.only_new.count(), self.only_old.count(), self.rows["moved"].count()
        # Ids are unique within a version (an import refuses a repeated one): each changed row
        # is one row only in new and one only in old. The rows only in new are found first (by
        # the index alone), then their ids: SQLite would otherwise read every row of the
        # version from the table for its hash.
        changed = DatasetRow.objects.filter(pk__in=self.only_new.values("pk"), ext_id__isnull=False).filter(
            Exists(self.only_old.filter(ext_id=OuterRef("ext_id")))).count() if only_new and only_old else 0
        return {"added": only_new - changed, "removed": only_old - changed, "changed": changed, "moved": moved}

    def page(self, kind: str, after: int | None, limit: int, counts: dict[str, int]) -> tuple[list, int | None]:
        """Rows of one kind after position `after` (positions of `new`, of `old` for "removed"),
        in position order, and the cursor of the next page (or None). Changed and moved rows come
        as {"id", "before", "after", "fields"} and {"row", "before", "after"}."""
        if not counts[kind]:
            return [], None  # a kind with no rows would be a scan of the whole version to find none
        rows = self.rows[kind]
        if kind == "moved":  # the split the content had in old (its first row there)
            # position + 0: ordered by the (version, position) index, SQLite would walk the
            # whole old version for each row instead of the few rows with that hash.
            first = ExpressionWrapper(F("position") + 0, output_field=IntegerField())
            rows = rows.annotate(split_before=Subquery(
                self.old_rows.filter(row_hash=OuterRef("row_hash")).order_by(first).values("split")[:1]))
        if after is not None:
            rows = rows.filter(position__gt=after)
        page = list(rows.order_by("position")[: limit + 1])
        next_after = page[limit - 1].position if len(page) > limit else None
        page = page[:limit]
        if kind == "moved":
            return [{"row": row, "before": row.split_before or "", "after": row.split} for row in page], next_after
        if kind == "changed":
            before = {}
            for row in self.only_old.filter(ext_id__in=[r.ext_id for r in page]).order_by("-position"):
                before[row.ext_id] = row  # the first by position wins
            return [{"id": row.ext_id, "before": before[row.ext_id], "after": row,
                     "fields": changed_fields(before[row.ext_id], row)} for row in page], next_after
        return page, next_after


def diff_counts(*, old: DatasetVersion, new: DatasetVersion) -> dict[str, int]:
    """Rows added, removed, changed and moved between splits from `old` to `new`. Versions never
    change, so the counts are kept (apps.core.memo) under both versions' ids and content hashes."""
    from apps.core.memo import memoized

    return memoized(DIFF_COUNTS_MEMO, diff_counts_inputs(old, new), lambda: _Diff(old, new).counts())


DIFF_COUNTS_MEMO = "dataset-diff-counts"


def diff_counts_inputs(old: DatasetVersion, new: DatasetVersion) -> list:
    return [old.pk, old.content_hash, new.pk, new.content_hash]


def version_diff(*, old: DatasetVersion, new: DatasetVersion) -> dict:
    """Rows added, removed, changed and moved between splits from `old` to `new` (counts), with
    the first DIFF_EXAMPLES of each kind (`<kind>_examples`). Set operations run in the database."""
    diff, counts = _Diff(old, new), diff_counts(old=old, new=new)
    return {"old": old, "new": new, **counts,
            **{f"{kind}_examples": diff.page(kind, None, DIFF_EXAMPLES, counts)[0] for kind in DIFF_KINDS}}


def version_diff_page(*, old: DatasetVersion, new: DatasetVersion, kind: str, after: int | None = None,
                      limit: int = DIFF_PAGE_ROWS) -> dict:
    """One page of one kind of change (see DIFF_KINDS), after position `after`: the counts,
    `items` and `next_after` (None on the last page)."""
    if kind not in DIFF_KINDS:
        raise Invalid(f"No such kind of change: choose one of {', '.join(DIFF_KINDS)}.", field="show")
    counts = diff_counts(old=old, new=new)
    items, next_after = _Diff(old, new).page(kind, after, limit, counts)
    return {"old": old, "new": new, **counts, "kind": kind, "items": items, "after": after,
            "next_after": next_after}


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
