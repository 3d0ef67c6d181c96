"""Writing many dataset rows at once, and counting over them where they are stored.

On PostgreSQL rows go in with COPY: per row, the ORM's bulk_create builds a model instance and
a parameterised INSERT, which was half of an import's time; COPY streams plain tuples. Other
databases (the embedded SQLite) take bulk_create.

RowWriter also overlaps the two halves of an import on PostgreSQL: while the server indexes
one batch (the full-text GIN index is most of its work), the worker parses the next.

Labels, exact duplicates and repeated ids are counted by the database once the rows are in, so
a writer holds nothing per row and its memory stays the same whatever the size of the version.
"""

import json
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import orjson
from django.db import connection, connections, transaction

from apps.datasets.models import DatasetRow
from workers.ingest import VersionHasher
from workers.ingest.stats import MAX_EXAMPLES, MAX_LABELS, VersionStats

# The order of the tuples given to insert_rows.
COLUMNS = ("version_id", "position", "row_hash", "ext_id", "prompt", "response", "messages", "label", "reference",
           "metadata", "split")
_COPY = f"COPY datasets_datasetrow ({', '.join(COLUMNS)}) FROM STDIN"
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _json_text(value) -> str:
    # jsonb reads the text, so orjson's own number spelling is fine; an integer past 64 bits,
    # which it cannot write, goes through json.
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return _JSON.encode(value)


def row_tuple(version_id: int, position: int, row_hash: str, row: dict, split: str = "") -> tuple:
    """A canonical row (workers.ingest.canonical_row) as the tuple insert_rows takes."""
    return (version_id, position, row_hash, row["ext_id"], row["prompt"], row["response"], row["messages"],
            row["label"], row["reference"], row["metadata"], split)


# Metadata fields listed in a version's schema (its filters): rows whose keys all differ would
# otherwise make the list, and a writer's memory, grow with the rows.
MAX_METADATA_KEYS = 1000


class VersionTally:
    """What a version's writer keeps while its rows go by, in memory that does not grow with
    them: the content hash, the one-pass statistics and the metadata fields."""

    def __init__(self, digests_to: BinaryIO | None = None) -> None:
        self.hasher = VersionHasher(digests_to=digests_to)
        self.stats = VersionStats()
        self.metadata_keys: set[str] = set()

    def row(self, version_id: int, position: int, row: dict, split: str = "") -> tuple:
        """Count a canonical row in; its tuple for insert_rows."""
        if len(self.metadata_keys) < MAX_METADATA_KEYS:
            self.metadata_keys.update(row["metadata"])
        self.stats.add(row)
        return row_tuple(version_id, position, self.hasher.update(row, split), row, split)

    def part(self) -> tuple:
        """This tally as merge_part takes it (it crosses a process boundary; its rows' hash
        entries, splits mixed in, went to the digests_to file)."""
        return self.stats, self.metadata_keys

    def merge_part(self, part: tuple, digests: Path) -> None:
        """Add the tally of the rows that come next: another's part() and its digests file."""
        stats, metadata_keys = part
        with open(digests, "rb") as handle:
            while block := handle.read(32 * 32 * 1024):
                self.hasher.update_digests(block)
        self.stats.merge(stats)
        self.metadata_keys |= metadata_keys


def insert_rows(rows: list[tuple]) -> None:
    if not rows:
        return
    if connection.vendor == "postgresql":
        # The raw psycopg cursor (Django has no COPY); its errors wrapped as Django's own.
        with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(_COPY) as copy:
            for row in rows:
                copy.write_row(row[:6] + (None if row[6] is None else _json_text(row[6]),) + row[7:9]
                               + (_json_text(row[9]), row[10]))
    else:
        DatasetRow.objects.bulk_create([DatasetRow(**dict(zip(COLUMNS, row, strict=True))) for row in rows])


class RowWriter:
    """Batches of row tuples written in order by a thread of its own (PostgreSQL, outside any
    transaction: each batch commits as it lands), else at once by the caller. At most two
    batches wait, so memory stays bounded. An error in the thread is raised by the next call."""

    def __init__(self) -> None:
        self._threaded = connection.vendor == "postgresql" and not connection.in_atomic_block
        self._error: BaseException | None = None
        if self._threaded:
            self._queue: queue.Queue = queue.Queue(maxsize=2)
            self._thread = threading.Thread(target=self._run, name="row-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            while (rows := self._queue.get()) is not None:
                insert_rows(rows)
        except BaseException as exc:  # handed to the caller
            self._error = exc
            while self._queue.get() is not None:  # unblock the caller until it closes
                pass
        finally:
            connections.close_all()  # this thread's own connection

    def write(self, rows: list[tuple]) -> None:
        self._raise()
        if self._threaded:
            self._queue.put(rows)
        else:
            insert_rows(rows)

    def close(self) -> None:
        """Wait until every batch is written; raise what went wrong in the thread."""
        if self._threaded and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "RowWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# What makes two rows exact duplicates: their content, not their id or metadata.
_CONTENT = "prompt, response, messages, label, reference"
# Memory for the hash aggregates below: at 1M rows the default 4 MB spills them to disk.
_READ_WORK_MEM = "64MB"


def _content_sort_key() -> str:
    # To sort by content, PostgreSQL sorts the md5 of the row value (NULL and "" differ in it)
    # instead of the long texts.
    if connection.vendor == "postgresql":
        return f"md5(row({_CONTENT})::text)"
    return _CONTENT


@contextmanager
def _aggregating():
    """A cursor for reads that group a whole version."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET LOCAL work_mem = '{_READ_WORK_MEM}'")
        yield cursor


def stored_tallies(version_id: int) -> dict:
    """The labels (top MAX_LABELS and how many distinct) and the exact duplicates (count, first
    positions) of a version's stored rows: VersionStats.as_dict's keys for them; and "splits",
    the rows per split, when some rows have one."""
    labels, duplicates, splits = concurrently(lambda: _labels(version_id), lambda: _duplicates(version_id),
                                              lambda: _splits(version_id))
    return {**labels, **duplicates, **({"splits": splits} if splits else {})}


def _splits(version_id: int) -> dict[str, int]:
    with _aggregating() as cursor:  # the partial split index holds only the rows that have one
        cursor.execute("SELECT split, count(*) FROM datasets_datasetrow WHERE version_id = %s AND split <> '' "
                       "GROUP BY split ORDER BY split LIMIT %s", [version_id, MAX_LABELS])
        return dict(cursor.fetchall())


def _labels(version_id: int) -> dict:
    with _aggregating() as cursor:
        # count(*) OVER (): how many labels there are, counted before LIMIT keeps the top ones.
        cursor.execute("SELECT label, count(*), count(*) OVER () FROM datasets_datasetrow "
                       "WHERE version_id = %s AND label IS NOT NULL "
                       "GROUP BY label ORDER BY count(*) DESC, label LIMIT %s", [version_id, MAX_LABELS])
        found = cursor.fetchall()
    return {"labels": {label: count for label, count, _ in found}, "labels_distinct": found[0][2] if found else 0}


def _duplicates(version_id: int) -> dict:
    with _aggregating() as cursor:
        # How many first (a hash aggregate on the columns); where, only when there are some (a
        # window, sorted).
        cursor.execute(f"""
            SELECT coalesce(sum(copies - 1), 0) FROM (
                SELECT count(*) AS copies FROM datasets_datasetrow WHERE version_id = %s
                GROUP BY {_CONTENT} HAVING count(*) > 1) repeated""", [version_id])
        (count,) = cursor.fetchone()
        examples = []
        if count:
            cursor.execute(f"""
                SELECT position FROM (
                    SELECT position, row_number() OVER (PARTITION BY {_content_sort_key()} ORDER BY position) AS nth
                    FROM datasets_datasetrow WHERE version_id = %s) numbered
                WHERE nth > 1 ORDER BY position LIMIT %s""", [version_id, MAX_EXAMPLES])
            examples = [position for (position,) in cursor.fetchall()]
    return {"duplicates": int(count), "duplicate_examples": examples}


def first_repeated_id(version_id: int) -> tuple[str, int] | None:
    """The id seen again earliest in a version's rows, and the position where it comes again."""
    with _aggregating() as cursor:
        # Whether any id repeats first (a hash aggregate): which one comes again first is asked
        # only then, since only a failing import needs it.
        cursor.execute("SELECT 1 FROM datasets_datasetrow WHERE version_id = %s AND ext_id IS NOT NULL "
                       "GROUP BY ext_id HAVING count(*) > 1 LIMIT 1", [version_id])
        if cursor.fetchone() is None:
            return None
        cursor.execute("""
            SELECT ext_id, position FROM (
                SELECT ext_id, position, row_number() OVER (PARTITION BY ext_id ORDER BY position) AS nth
                FROM datasets_datasetrow WHERE version_id = %s AND ext_id IS NOT NULL) numbered
            WHERE nth = 2 ORDER BY position LIMIT 1""", [version_id])
        found = cursor.fetchone()
    return (found[0], found[1]) if found else None


def concurrently(*reads) -> list:
    """The results of independent reads: on PostgreSQL outside a transaction, each on a
    connection of its own at the same time (the server works on them in parallel), else in turn."""
    if connection.vendor != "postgresql" or connection.in_atomic_block:
        return [read() for read in reads]

    def on_own_connection(read):
        try:
            return read()
        finally:
            connections.close_all()  # this thread's

    with ThreadPoolExecutor(max_workers=len(reads), thread_name_prefix="stored-read") as pool:
        return [future.result() for future in [pool.submit(on_own_connection, read) for read in reads]]
