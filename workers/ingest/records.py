"""read_records (every format, streaming) and preview (the first rows and a mapping guess)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

from .canonical import ColumnMapping, json_value
from .columnar import read_hf_dir, read_parquet
from .detect import SourceFormat, detect_format
from .errors import DEFAULT_LIMITS, IngestError, Limits
from .streams import open_payload
from .text import read_delimited, read_json_array, read_jsonl

_DELIMITED = ("csv", "tsv")


def _resolve_dialect(fmt: SourceFormat, delimiter: str | None, has_header: bool | None) -> SourceFormat:
    if delimiter is None and has_header is None:
        return fmt
    if fmt.kind not in _DELIMITED:
        raise IngestError(f"a delimiter or header setting applies to CSV/TSV, not to {fmt.kind}")
    if delimiter is not None:
        if len(delimiter) != 1 or delimiter in "\"\r\n" or delimiter.isalnum():
            raise IngestError(f"the delimiter must be one character other than a letter, digit or quote: {delimiter!r}")
        fmt = dataclasses.replace(fmt, delimiter=delimiter, kind="tsv" if delimiter == "\t" else "csv")
    if has_header is not None:
        fmt = dataclasses.replace(fmt, has_header=has_header)
    return fmt


def read_records(
    path: Path | str,
    fmt: SourceFormat | None = None,
    *,
    delimiter: str | None = None,
    has_header: bool | None = None,
    limits: Limits = DEFAULT_LIMITS,
    skip_bad_rows: bool = False,
    bad_rows: list | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (number, record) for every record of the upload at `path`, streaming.

    number: the 1-based line where the record starts (JSONL, JSON arrays, CSV/TSV) or the
    1-based row number (Parquet, datasets folders). Records are dicts of the source's values:
    strings from CSV/TSV, JSON types from JSON, Python values from Parquet/Arrow.
    `fmt` defaults to detect_format(path); `delimiter` and `has_header` override the CSV
    dialect. Memory stays bounded by `limits` whatever the file size.
    With skip_bad_rows, malformed rows (JSONL lines, CSV rows after the header, JSON array
    elements that are not objects) are logged into `bad_rows` as {line, column, message} -
    the first 100; a BadRows also counts them all - and reading goes on. File-level problems
    always raise.
    Raises IngestError (see the package docstring for the cases).
    """
    path = Path(path)
    if fmt is None:
        fmt = detect_format(path, limits=limits)
    fmt = _resolve_dialect(fmt, delimiter, has_header)
    if fmt.kind == "parquet":
        if fmt.compression:
            raise IngestError("Parquet inside an archive is not accepted")
        yield from read_parquet(path, limits)
        return
    if fmt.kind == "hf_dir":
        yield from read_hf_dir(path, limits)
        return
    with open_payload(path, fmt.compression, limits) as stream:
        if fmt.kind == "jsonl":
            yield from read_jsonl(stream, limits, skip_bad_rows=skip_bad_rows, bad_rows=bad_rows)
        elif fmt.kind == "json":
            yield from read_json_array(stream, limits, skip_bad_rows=skip_bad_rows, bad_rows=bad_rows)
        else:
            yield from read_delimited(
                stream,
                delimiter=fmt.delimiter or ("\t" if fmt.kind == "tsv" else ","),
                has_header=True if fmt.has_header is None else fmt.has_header,
                limits=limits,
                skip_bad_rows=skip_bad_rows,
                bad_rows=bad_rows,
            )


# --- preview ------------------------------------------------------------------------------

# Role -> column names that suggest it, best first (compared lower-cased, with spaces and
# dashes as underscores). The first match per role wins; a column gets one role.
SUGGESTIONS: dict[str, tuple[str, ...]] = {
    "id": ("id", "uid", "uuid", "_id", "ext_id", "example_id", "row_id", "sample_id"),
    "prompt": ("prompt", "instruction", "question", "input", "query"),
    "response": ("response", "output", "answer", "completion"),
    "messages": ("messages", "conversation", "conversations", "chat", "dialog", "dialogue"),
    "label": ("label", "class", "category", "labels"),
    "reference": ("reference", "target", "gold", "ground_truth", "expected", "expected_output"),
    "split": ("split",),
}


def _normalized(name: str) -> str:
    return re.sub(r"[\s\-]+", "_", name.strip().lower())


def suggest_mapping(columns: list[str]) -> ColumnMapping:
    """A ColumnMapping guessed from column names (SUGGESTIONS); unknown names stay metadata."""
    by_name: dict[str, str] = {}
    for column in columns:
        by_name.setdefault(_normalized(column), column)
    roles: dict[str, str] = {}
    for role, names in SUGGESTIONS.items():
        for name in names:
            column = by_name.get(name)
            if column is not None and column not in roles:
                roles[column] = role
                break
    return ColumnMapping(roles)


def _jsonable(value: Any) -> Any:
    try:
        return json_value(value, 0, "")
    except IngestError:
        return repr(value)


def preview(path: Path | str, fmt: SourceFormat | None = None, n: int = 20, **kwargs: Any) -> dict[str, Any]:
    """The first `n` records of an upload, for the import page.

    kwargs go to read_records (delimiter, has_header, limits, skip_bad_rows, bad_rows).
    Returns {"format": the SourceFormat (with overrides) as a dict, "columns": ordered union of
    the keys of those records, "records": them (JSON-ready values), "suggested_mapping": a
    ColumnMapping guess}. Raises IngestError like read_records.
    """
    path = Path(path)
    limits = kwargs.get("limits", DEFAULT_LIMITS)
    if fmt is None:
        fmt = detect_format(path, limits=limits)
    fmt = _resolve_dialect(fmt, kwargs.pop("delimiter", None), kwargs.pop("has_header", None))
    columns: dict[str, None] = {}
    records: list[dict[str, Any]] = []
    if n > 0:
        with closing(read_records(path, fmt, **kwargs)) as rows:
            for _, record in rows:
                columns.update(dict.fromkeys(map(str, record)))
                records.append({str(k): _jsonable(v) for k, v in record.items()})
                if len(records) >= n:
                    break
    return {
        "format": fmt.as_dict(),
        "columns": list(columns),
        "records": records,
        "suggested_mapping": suggest_mapping(list(columns)),
    }
