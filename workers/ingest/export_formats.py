"""The export formats, in one registry: each one's name (as in URLs, API bodies and job rows),
label, file extension, content type and writers. Every place that offers, checks, names or writes
an export reads it: the dataset version page and API, export jobs, the streamed version, raw
annotation and audit-log exports. Plain Python, no Django.

Writers:
- `write(rows, path, progress, metadata_keys=...)`: a version's rows (role columns plus a
  "metadata" object each) as a file in the layout of workers.ingest.export; returns the row count.
- `lines(rows, metadata_keys)`: the same as streamed text, for the formats that stream (`stream`).
- `record_lines(columns, records)`: flat records (an audit log, raw annotations) as streamed text;
  a list or object value is JSON text in CSV.

CSV text is safe for spreadsheets: a cell that starts like a formula is neutralised.
"""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# A cell starting with one of these is run as a formula by spreadsheet programs (OWASP CSV
# injection), full-width forms included.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠")
PROGRESS_EVERY = 5000


def spreadsheet_safe(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def csv_lines(header: list[str], rows: Iterable[Iterable]) -> Iterator[str]:
    """Stream CSV text line by line, every cell neutralised against formula injection."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([spreadsheet_safe(cell) for cell in header])
    yield buffer.getvalue()
    for row in rows:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([spreadsheet_safe(cell) for cell in row])
        yield buffer.getvalue()


@dataclass(frozen=True)
class ExportFormat:
    name: str
    label: str
    extension: str  # of the file, without the dot
    content_type: str
    write: Callable[..., int]
    lines: Callable[[Iterable[dict], Iterable[str]], Iterator[str]] | None = None
    record_lines: Callable[[list[str], Iterable[dict]], Iterator[str]] | None = None

    @property
    def stream(self) -> bool:
        """Whether the format is also streamed as text (no job, no file)."""
        return self.lines is not None


# --- the text formats ------------------------------------------------------------------------

def _jsonl_lines(rows: Iterable[dict], metadata_keys: Iterable[str]) -> Iterator[str]:
    from .export import export_record, metadata_columns

    columns = metadata_columns(list(metadata_keys))
    return (json.dumps(export_record(row, columns), ensure_ascii=False) + "\n" for row in rows)


def _csv_rows_lines(rows: Iterable[dict], metadata_keys: Iterable[str]) -> Iterator[str]:
    """The role columns, then one column per metadata field; lists and objects as JSON."""
    from .export import ROLE_COLUMNS, metadata_columns, table_cell

    columns = metadata_columns(list(metadata_keys))
    header = list(ROLE_COLUMNS) + list(columns.values())

    def cells(row: dict) -> list:
        messages = json.dumps(row["messages"], ensure_ascii=False) if row.get("messages") else None
        metadata = row.get("metadata") or {}
        return ([messages if name == "messages" else row.get(name) for name in ROLE_COLUMNS]
                + [table_cell(metadata.get(key)) for key in columns])

    return csv_lines(header, (cells(row) for row in rows))


def _jsonl_records(columns: list[str], records: Iterable[dict]) -> Iterator[str]:
    return (json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def _csv_records(columns: list[str], records: Iterable[dict]) -> Iterator[str]:
    def cells(record: dict) -> list:
        return [json.dumps(v, ensure_ascii=False) if isinstance(v, (list, dict)) else v
                for v in (record.get(c) for c in columns)]

    return csv_lines(columns, (cells(r) for r in records))


def _write_jsonl(rows, path, progress=None, *, metadata_keys=()) -> int:
    count = 0
    with open(path, "w", encoding="utf-8", newline="") as handle:
        for count, line in enumerate(_jsonl_lines(rows, metadata_keys), start=1):  # noqa: B007
            handle.write(line)
            if progress and count % PROGRESS_EVERY == 0:
                progress(count)
    return count


def _write_csv(rows, path, progress=None, *, metadata_keys=()) -> int:
    count = 0
    with open(path, "w", encoding="utf-8", newline="") as handle:
        for number, line in enumerate(_csv_rows_lines(rows, metadata_keys), start=1):
            handle.write(line)
            count = number - 1  # the header is no row
            if progress and number % PROGRESS_EVERY == 0:
                progress(number)
    return count


# --- the columnar formats --------------------------------------------------------------------

def _write_parquet(rows, path, progress=None, *, metadata_keys=()) -> int:
    from .export import write_parquet

    return write_parquet(rows, path, progress, metadata_keys=metadata_keys)


def _write_datasets_zip(rows, path, progress=None, *, metadata_keys=()) -> int:
    """A `datasets` save_to_disk directory, zipped under a folder named as the file."""
    from .export import write_datasets_dir

    directory = Path(path).parent / "dataset"
    count = write_datasets_dir(rows, directory, progress, metadata_keys=metadata_keys)
    folder = Path(path).name.removesuffix(".datasets.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(directory.iterdir()):
            archive.write(file, f"{folder}/{file.name}")
    return count


# In the order the version page offers them (the first is its default).
EXPORT_FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    ExportFormat("parquet", "Parquet", "parquet", "application/vnd.apache.parquet", _write_parquet),
    ExportFormat("datasets", "datasets directory (zip)", "datasets.zip", "application/zip", _write_datasets_zip),
    ExportFormat("jsonl", "JSONL", "jsonl", "application/x-ndjson", _write_jsonl, _jsonl_lines, _jsonl_records),
    ExportFormat("csv", "CSV", "csv", "text/csv; charset=utf-8", _write_csv, _csv_rows_lines, _csv_records),
)}
STREAM_FORMATS = tuple(name for name, f in EXPORT_FORMATS.items() if f.stream)


def export_format(name: str) -> ExportFormat | None:
    return EXPORT_FORMATS.get(name)


def choices() -> list[tuple[str, str]]:
    """(name, label) pairs, e.g. for a model field's or a form's choices."""
    return [(f.name, f.label) for f in EXPORT_FORMATS.values()]


def names_in_words(names: Iterable[str], last: str = "and") -> str:
    """"jsonl and csv"-style lists for messages."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"
