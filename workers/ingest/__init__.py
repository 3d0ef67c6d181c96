"""The dataset ingest engine: read an upload in any supported format, streaming and capped,
and turn its records into canonical rows whose hashes identify a dataset version.

Plain Python (no Django, no Celery): a thin task feeds it a path and stores what it yields.

    fmt = detect_format(path, filename="train.jsonl.gz")
    info = preview(path, fmt)                     # first rows, columns, a mapping guess
    mapping = ColumnMapping({"question": "prompt", "answer": "response"})
    hasher = VersionHasher()
    for line, record in read_records(path, fmt):
        row = canonical_row(record, mapping, line)
        split = canonical_split(record, mapping, line)  # "" unless a column is mapped to 'split'
        hasher.update(row, split)                 # store row; version hash = hasher.hexdigest()

Formats: JSON Lines, JSON arrays, CSV/TSV (any single-character delimiter), Parquet, and
folders written by datasets' save_to_disk; JSONL/JSON/CSV/TSV may come gzip-compressed or as
the one data file of a zip.

Every problem with the data is an IngestError whose str() says what and where ("line 12,
column 7: Expecting ',' delimiter"): invalid UTF-8 (line and byte offset), JSON syntax, lines
that are not objects, NUL bytes, ragged CSV rows, an open quote, too many columns, an
over-long line or field, an empty file, a header without rows, a file named for one format
holding another, Arrow extension types, and caps hit while inflating (size, ratio, entries).
See Limits for the caps.
"""

from .canonical import ROLES, ColumnMapping, VersionHasher, canonical_json, canonical_row, canonical_split, row_hash
from .detect import SourceFormat, detect_format
from .errors import BadRows, IngestError, Limits
from .records import preview, read_records, suggest_mapping

__all__ = [
    "ROLES",
    "BadRows",
    "ColumnMapping",
    "IngestError",
    "Limits",
    "SourceFormat",
    "VersionHasher",
    "canonical_json",
    "canonical_row",
    "canonical_split",
    "detect_format",
    "preview",
    "read_records",
    "row_hash",
    "suggest_mapping",
]
