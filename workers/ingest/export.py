"""Writing a version's rows as Parquet or as a Hugging Face `datasets` directory (what
`Dataset.save_to_disk` writes and `datasets.load_from_disk` reads), streaming: rows go out in
record batches, so memory stays flat whatever the version's size. Plain pyarrow, no Django.

Every row has the same columns: id, prompt, response, label, reference, split (strings or
null), messages (a list of {role, content}, or null) and metadata (the row's metadata object
as JSON text: its keys differ from row to row).
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
TEXT_COLUMNS = ("id", "prompt", "response", "label", "reference", "split")
SCHEMA = pa.schema([
    *(pa.field(name, pa.string()) for name in TEXT_COLUMNS),
    pa.field("messages", pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))),
    pa.field("metadata", pa.string()),
])
HF_DATA_FILE = "data-00000-of-00001.arrow"


def _batches(rows: Iterable[dict], progress: Callable[[int], None] | None):
    columns: dict[str, list] = {field.name: [] for field in SCHEMA}
    done = 0
    for row in rows:
        for name in TEXT_COLUMNS:
            columns[name].append(row.get(name))
        messages = row.get("messages")
        columns["messages"].append([{"role": str(m.get("role")), "content": str(m.get("content"))}
                                    for m in messages if isinstance(m, dict)] if messages else None)
        columns["metadata"].append(json.dumps(row.get("metadata") or {}, ensure_ascii=False, sort_keys=True))
        done += 1
        if done % BATCH_ROWS == 0:
            yield pa.RecordBatch.from_pydict(columns, schema=SCHEMA)
            columns = {field.name: [] for field in SCHEMA}
            if progress:
                progress(done)
    if columns["id"]:
        yield pa.RecordBatch.from_pydict(columns, schema=SCHEMA)
    if progress:
        progress(done)


def write_parquet(rows: Iterable[dict], path: Path, progress: Callable[[int], None] | None = None) -> int:
    """Write `rows` to a Parquet file; returns the number of rows."""
    count = 0
    with pq.ParquetWriter(path, SCHEMA, compression="zstd") as writer:
        for batch in _batches(rows, progress):
            writer.write_batch(batch)
            count += batch.num_rows
    return count


def write_datasets_dir(rows: Iterable[dict], directory: Path, progress: Callable[[int], None] | None = None) -> int:
    """Write `rows` as a `datasets` save_to_disk directory: one Arrow stream file, the dataset
    info (its features) and the state file that names the data file. Returns the row count."""
    directory.mkdir(parents=True, exist_ok=True)
    count = 0
    with pa.OSFile(str(directory / HF_DATA_FILE), "wb") as sink, pa.ipc.new_stream(sink, SCHEMA) as writer:
        for batch in _batches(rows, progress):
            writer.write_batch(batch)
            count += batch.num_rows
    # `datasets` caches map() results by this fingerprint: it must change whenever the rows do
    # (it was derived from the row count alone, so two versions of one size shared their cache).
    digest = hashlib.sha256()
    with open(directory / HF_DATA_FILE, "rb") as data:
        for block in iter(lambda: data.read(1 << 20), b""):
            digest.update(block)
    value = {"dtype": "string", "_type": "Value"}
    features = {**{name: value for name in TEXT_COLUMNS},
                "messages": [{"role": value, "content": value}],  # a list of structs, in every datasets version
                "metadata": value}
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
