"""Writing a version's rows out: the one column layout of every export format, and the Parquet
and Hugging Face `datasets` directory writers (what `Dataset.save_to_disk` writes and
`datasets.load_from_disk` reads), streaming: rows go out in record batches, so memory stays flat
whatever the version's size. Plain pyarrow, no Django.

The layout, the same in JSONL, CSV, Parquet and `datasets` (it round-trips: an export re-imports,
with the suggested mapping, to the rows it came from, metadata under the uploaded column names):

- the role columns id, prompt, response, messages, label, reference, split, named by role;
- one column per metadata field, named as the field (the upload's own column name); a field
  named like a role column is written as `metadata.<name>` (it would otherwise be taken for
  that role on the way back in);
- in JSONL a missing value is left out and a metadata list or object stays JSON; CSV, Parquet
  and `datasets` have fixed columns, so a missing value is empty (null), messages are a list of
  {role, content} (JSON text in CSV), and a metadata list or object is written as JSON text.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

BATCH_ROWS = 5000
ROLE_COLUMNS = ("id", "prompt", "response", "messages", "label", "reference", "split")
TEXT_COLUMNS = ("id", "prompt", "response", "label", "reference", "split")
MESSAGES_TYPE = pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))
HF_DATA_FILE = "data-00000-of-00001.arrow"


def metadata_columns(metadata_keys: Iterable[str]) -> dict[str, str]:
    """{metadata field: its export column}, in the order given; see the module docstring."""
    columns: dict[str, str] = {}
    taken = set(ROLE_COLUMNS) | set(metadata_keys)
    for key in metadata_keys:
        column = key
        if column in ROLE_COLUMNS:
            column = f"metadata.{key}"
            while column in taken:  # "metadata.prompt" is itself a field: prefix again
                column = f"metadata.{column}"
            taken.add(column)
        columns[key] = column
    return columns


def export_record(row: dict, columns: dict[str, str]) -> dict:
    """A row ({role column: value} plus "metadata": {field: value}) as one flat record of the
    layout, missing values left out (JSON Lines); `columns` from metadata_columns()."""
    record = {name: row.get(name) for name in ROLE_COLUMNS}
    for key, value in (row.get("metadata") or {}).items():
        record[columns.get(key) or metadata_columns([key])[key]] = value
    return {name: value for name, value in record.items() if value is not None}


def table_cell(value):
    """A metadata value in a fixed-column format: text as it is, anything else as JSON text."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def table_schema(columns: dict[str, str]) -> pa.Schema:
    return pa.schema([
        *(pa.field(name, MESSAGES_TYPE if name == "messages" else pa.string()) for name in ROLE_COLUMNS),
        *(pa.field(column, pa.string()) for column in columns.values()),
    ])


def _batches(rows: Iterable[dict], schema: pa.Schema, columns: dict[str, str],
             progress: Callable[[int], None] | None):
    names = schema.names
    batch: dict[str, list] = {name: [] for name in names}
    done = 0
    for row in rows:
        for name in TEXT_COLUMNS:
            batch[name].append(row.get(name))
        messages = row.get("messages")
        batch["messages"].append([{"role": str(m.get("role")), "content": str(m.get("content"))}
                                  for m in messages if isinstance(m, dict)] if messages else None)
        metadata = row.get("metadata") or {}
        for key, column in columns.items():
            batch[column].append(table_cell(metadata.get(key)))
        done += 1
        if done % BATCH_ROWS == 0:
            yield pa.RecordBatch.from_pydict(batch, schema=schema)
            batch = {name: [] for name in names}
            if progress:
                progress(done)
    if batch["id"]:
        yield pa.RecordBatch.from_pydict(batch, schema=schema)
    if progress:
        progress(done)


def write_parquet(rows: Iterable[dict], path: Path, progress: Callable[[int], None] | None = None, *,
                  metadata_keys: Iterable[str] = ()) -> int:
    """Write `rows` (role columns plus a "metadata" object each) to a Parquet file in the layout
    of the module docstring, one column per metadata field of `metadata_keys` (a field missing
    from it is not written); returns the number of rows."""
    columns = metadata_columns(list(metadata_keys))
    schema = table_schema(columns)
    count = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for batch in _batches(rows, schema, columns, progress):
            writer.write_batch(batch)
            count += batch.num_rows
    return count


def write_datasets_dir(rows: Iterable[dict], directory: Path, progress: Callable[[int], None] | None = None, *,
                       metadata_keys: Iterable[str] = ()) -> int:
    """Write `rows` as a `datasets` save_to_disk directory (layout and `metadata_keys` as for
    write_parquet): one Arrow stream file, the dataset info (its features) and the state file
    that names the data file. Returns the row count."""
    directory.mkdir(parents=True, exist_ok=True)
    columns = metadata_columns(list(metadata_keys))
    schema = table_schema(columns)
    count = 0
    with pa.OSFile(str(directory / HF_DATA_FILE), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        for batch in _batches(rows, schema, columns, progress):
            writer.write_batch(batch)
            count += batch.num_rows
    # `datasets` caches map() results by this fingerprint: it must change whenever the rows do
    # (it was derived from the row count alone, so two versions of one size shared their cache).
    digest = hashlib.sha256()
    with open(directory / HF_DATA_FILE, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    value = {"dtype": "string", "_type": "Value"}
    features = {name: [{"role": value, "content": value}] if name == "messages" else value  # a list of structs,
                for name in schema.names}                                                 # in every datasets version
    (directory / "dataset_info.json").write_text(json.dumps(
        {"citation": "", "description": "Exported from Workbench", "features": features, "homepage": "",
         "license": ""}, indent=2))
    (directory / "state.json").write_text(json.dumps(
        {"_data_files": [{"filename": HF_DATA_FILE}], "_fingerprint": digest.hexdigest()[:16],
         "_format_columns": None, "_format_kwargs": {}, "_format_type": None, "_output_all_columns": False,
         "_split": None}, indent=2))
    for name in os.listdir(directory):
        with open(directory / name, "rb") as handle:
            os.fsync(handle.fileno())
    return count
