"""Readers for the columnar formats: Parquet files and `datasets.save_to_disk` folders.

pyarrow is imported lazily: importing the engine stays cheap for code that only needs text.
Both readers refuse schemas with extension types before any data is read (CVE-2023-47248
let a Parquet/Arrow extension type unpickle attacker data), and refuse to run
on a pyarrow older than the fixed release.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .errors import IngestError, Limits
from .streams import human_size
from .text import check_record

MIN_PYARROW = (14, 0, 1)  # CVE-2023-47248
# Rows converted to Python at a time: small enough to keep memory flat, large enough that
# the per-batch overhead vanishes.
BATCH_ROWS = 1024
_EXTENSION_KEY = b"ARROW:extension:name"


def _pyarrow():
    import pyarrow

    version = tuple(int(part) for part in pyarrow.__version__.split(".")[:3] if part.isdigit())
    if version < MIN_PYARROW:
        raise IngestError(
            f"pyarrow {pyarrow.__version__} is too old to read Parquet/Arrow safely (CVE-2023-47248); "
            "the worker needs pyarrow >= 14.0.1"
        )
    return pyarrow


def _extension_columns(schema) -> list[str]:
    """Names (dotted paths) of fields that are, or contain, extension types - registered in
    this process or not (an unregistered one keeps its name in the field metadata)."""
    pa = _pyarrow()
    found: list[str] = []

    def walk(path: str, field) -> None:
        metadata = field.metadata or {}
        if isinstance(field.type, pa.ExtensionType) or _EXTENSION_KEY in metadata:
            found.append(path)
            return
        typ = field.type
        if pa.types.is_dictionary(typ):
            walk(path, pa.field("values", typ.value_type))
            return
        for i in range(typ.num_fields):
            child = typ.field(i)
            walk(f"{path}.{child.name}", child)

    for field in schema:
        walk(field.name, field)
    return found


def _check_schema(schema, limits: Limits, what: str) -> None:
    extension = _extension_columns(schema)
    if extension:
        raise IngestError(
            f"{what} uses Arrow extension types, which are not accepted (security); "
            "save the columns as plain types",
            column=extension[0],
        )
    if len(schema) > limits.max_columns:
        raise IngestError(f"{what} has {len(schema)} columns; at most {limits.max_columns} are accepted")


def read_parquet(path: Path, limits: Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based row number, record) from a Parquet file, one batch of rows in memory.

    Raises IngestError for a file pyarrow cannot open, extension types, too many columns,
    row groups over Limits.max_row_group_bytes, more than max_uncompressed_bytes in all, and
    a file with no rows.
    """
    pa = _pyarrow()
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise IngestError(f"the file is not a readable Parquet file ({exc})") from None
    with parquet:
        _check_schema(schema, limits, "the Parquet file")
        metadata = parquet.metadata
        total = 0
        for index in range(metadata.num_row_groups):
            size = metadata.row_group(index).total_byte_size
            total += size
            if size > limits.max_row_group_bytes:
                raise IngestError(
                    f"row group {index + 1} of the Parquet file holds {human_size(size)} uncompressed, over the "
                    f"{human_size(limits.max_row_group_bytes)} limit; write it with smaller row groups"
                )
        if total > limits.max_uncompressed_bytes:
            raise IngestError(
                f"the Parquet file holds {human_size(total)} uncompressed, over the "
                f"{human_size(limits.max_uncompressed_bytes)} limit"
            )
        if metadata.num_rows == 0:
            raise IngestError("the file has no rows")
        number = 0
        try:
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, use_threads=False):
                for record in batch.to_pylist():
                    number += 1
                    check_record(record, number, limits)
                    yield number, record
        except (pa.ArrowException, OSError) as exc:
            raise IngestError(f"the Parquet file is corrupt ({exc})", line=number + 1) from None


# --- datasets.save_to_disk folders ----------------------------------------------------------

HF_MARKERS = ("state.json", "dataset_info.json")


def hf_dir_files(folder: Path) -> list[Path]:
    """The Arrow files of a `datasets.save_to_disk` folder, in order.

    state.json's `_data_files` gives the order; names must be plain files inside the folder
    (no path parts, no symlinks leading out). Without state.json, the *.arrow files sorted.
    Raises IngestError for a DatasetDict folder, a folder that is not a saved dataset, or a
    bad file list.
    """
    if (folder / "dataset_dict.json").is_file():
        try:
            splits = json.loads((folder / "dataset_dict.json").read_text("utf-8")).get("splits", [])
        except (ValueError, OSError, AttributeError):
            splits = []
        raise IngestError(
            "the folder holds a DatasetDict"
            + (f" (splits: {', '.join(map(str, splits))})" if splits else "")
            + "; import one split's folder"
        )
    if not any((folder / marker).is_file() for marker in HF_MARKERS):
        raise IngestError(
            "the folder is not a dataset saved with datasets' save_to_disk (no state.json or dataset_info.json)"
        )
    root = folder.resolve()
    state_file = folder / "state.json"
    if state_file.is_file():
        try:
            state = json.loads(state_file.read_text("utf-8"))
            names = [entry["filename"] for entry in state["_data_files"]]
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise IngestError(f"state.json is not a valid datasets state file ({exc})") from None
    else:
        names = sorted(p.name for p in folder.glob("*.arrow"))
    if not names:
        raise IngestError("the dataset folder has no .arrow files")
    files = []
    for name in names:
        if not isinstance(name, str) or not name or os.path.basename(name) != name or name in (".", ".."):
            raise IngestError(f"state.json names a data file outside the folder: {name!r}")
        path = folder / name
        if path.resolve().parent != root or not path.is_file():
            raise IngestError(f"the data file {name!r} is missing or lies outside the folder")
        files.append(path)
    return files


def read_hf_dir(folder: Path, limits: Limits) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based row number, record) from a `datasets.save_to_disk` folder: its Arrow IPC
    stream files (or IPC files) read one record batch at a time, every schema checked before
    its data."""
    pa = _pyarrow()
    from pyarrow import ipc

    number = 0
    for path in hf_dir_files(folder):
        source = pa.OSFile(str(path), "rb")
        try:
            magic = source.read(6)
            source.seek(0)
            try:
                reader = ipc.open_file(source) if magic == b"ARROW1" else ipc.open_stream(source)
            except (pa.ArrowException, OSError) as exc:
                raise IngestError(f"{path.name} is not a readable Arrow file ({exc})") from None
            _check_schema(reader.schema, limits, f"the data file {path.name}")
            if magic == b"ARROW1":
                batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
            else:
                batches = iter(reader)
            try:
                for batch in batches:
                    for record in batch.to_pylist():
                        number += 1
                        check_record(record, number, limits)
                        yield number, record
            except (pa.ArrowException, OSError) as exc:
                raise IngestError(f"{path.name} is corrupt ({exc})", line=number + 1) from None
        finally:
            source.close()
    if number == 0:
        raise IngestError("the dataset has no rows")
