"""Limits every reader enforces, the one error type the engine raises, and the bad-row log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# The compression-ratio cap only applies once this much has been inflated: tiny, highly
# repetitive files (a few KB of identical rows) legitimately compress far better than 100:1,
# while a bomb is caught after at most a few MiB of output.
RATIO_CHECK_AFTER_BYTES = 1 * MiB

# How many bad rows `skip_bad_rows` keeps in detail; all are counted (BadRows.total).
MAX_BAD_ROWS_KEPT = 100


@dataclass(frozen=True)
class Limits:
    """Caps on what one import may make the worker read, inflate or hold in memory.

    The defaults fit a multi-GB dataset on an ordinary worker; tests pass lower ones.
    """

    # One physical line (JSONL, CSV) or one record of a JSON array, in bytes. Lines are read
    # in bounded chunks, so a longer one is refused without being held whole.
    max_line_bytes: int = 8 * MiB
    # One field (CSV cell, JSON string value), in UTF-8 bytes.
    max_field_bytes: int = 8 * MiB
    # Columns of a CSV header or Parquet/Arrow schema, keys of one JSON record.
    max_columns: int = 1000
    # Total bytes a compressed file (gzip, zip entry) may inflate to; counted while
    # inflating, never taken from headers alone.
    max_uncompressed_bytes: int = 10 * GiB
    # Inflated bytes per compressed byte, checked once RATIO_CHECK_AFTER_BYTES were inflated.
    # Text datasets compress 3-15x; a zip bomb reaches ~1000x.
    max_compression_ratio: float = 100
    # Entries of a zip archive, counted from its end-of-central-directory record before the
    # directory itself is parsed.
    max_archive_entries: int = 1000
    # One Parquet row group, uncompressed (metadata): pyarrow holds a row group's column
    # chunks while it reads them, so this bounds Parquet memory.
    max_row_group_bytes: int = 1 * GiB

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not value or value <= 0:
                raise ValueError(f"Limits.{name} must be positive, not {value!r}")


# The default caps, shared as a default argument (Limits is frozen, so sharing is safe).
DEFAULT_LIMITS = Limits()


class IngestError(Exception):
    """A problem with the uploaded data, phrased for the person who uploaded it.

    Attributes:
        message: what is wrong, without the location.
        line: 1-based line number (JSONL, CSV, JSON arrays: the line where the record
            starts) or row number (Parquet, datasets folders); None for file-level problems.
        column: 1-based character column (JSON syntax errors) or a column name (CSV header,
            mapping and value problems); None when not applicable.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | str | None = None) -> None:
        self.message = message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if isinstance(self.column, int):
            where.append(f"column {self.column}")
        elif self.column is not None:
            where.append(f"column '{self.column}'")
        return f"{', '.join(where)}: {self.message}" if where else self.message

    def __reduce__(self):
        # Keep line and column when the error crosses a process boundary (Celery results).
        return (self.__class__, (self.message,), {"line": self.line, "column": self.column})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form for a job row or an API error body."""
        return {"message": self.message, "line": self.line, "column": self.column, "text": str(self)}


class BadRows(list):
    """A list of skipped rows ({line, column, message}) that keeps the first MAX_BAD_ROWS_KEPT and
    counts all of them in `total`. A plain list passed as `bad_rows` is capped the same way
    but cannot carry the total."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0


def record_bad_row(bad_rows: list | None, error: IngestError) -> None:
    """Log one skipped row into `bad_rows` (capped, counted)."""
    if bad_rows is None:
        return
    if isinstance(bad_rows, BadRows):
        bad_rows.total += 1
    if len(bad_rows) < MAX_BAD_ROWS_KEPT:
        bad_rows.append({"line": error.line, "column": error.column, "message": error.message})
