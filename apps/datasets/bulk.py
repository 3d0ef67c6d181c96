"""Writing many dataset rows at once.

On PostgreSQL rows go in with COPY: per row, the ORM's bulk_create builds a model instance and
a parameterised INSERT, which was half of an import's time; COPY streams plain tuples. Other
databases (the embedded SQLite) take bulk_create.

RowWriter also overlaps the two halves of an import on PostgreSQL: while the server indexes
one batch (the full-text GIN index is most of its work), the worker parses the next.
"""

import json
import queue
import threading

from django.db import connection, connections

from apps.datasets.models import DatasetRow

# The order of the tuples given to insert_rows.
COLUMNS = ("version_id", "position", "row_hash", "ext_id", "prompt", "response", "messages", "label", "reference",
           "metadata", "split")
_COPY = f"COPY datasets_datasetrow ({', '.join(COLUMNS)}) FROM STDIN"
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def row_tuple(version_id: int, position: int, row_hash: str, row: dict, split: str = "") -> tuple:
    """A canonical row (workers.ingest.canonical_row) as the tuple insert_rows takes."""
    return (version_id, position, row_hash, row["ext_id"], row["prompt"], row["response"], row["messages"],
            row["label"], row["reference"], row["metadata"], split)


def insert_rows(rows: list[tuple]) -> None:
    if not rows:
        return
    if connection.vendor == "postgresql":
        # The raw psycopg cursor (Django has no COPY); its errors wrapped as Django's own.
        with connection.cursor() as cursor, connection.wrap_database_errors, cursor.cursor.copy(_COPY) as copy:
            for row in rows:
                copy.write_row(row[:6] + (None if row[6] is None else _JSON.encode(row[6]),) + row[7:9]
                               + (_JSON.encode(row[9]), row[10]))
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
