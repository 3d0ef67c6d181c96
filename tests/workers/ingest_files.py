"""Builders for ingest test files: one table written in every supported format."""

from __future__ import annotations

import csv
import gzip
import io
import json
import zipfile
from pathlib import Path
from typing import Any

# One small table, typed as JSON would type it. It carries what normalization must survive
# across formats: an int id, floats, an empty label, a messages list, HTML and a script tag,
# quotes, commas, semicolons, tabs and a line break inside text, a decomposed accent (NFD),
# and non-ASCII text.
ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "question": "What is <b>2+2</b>?",
        "answer": "4",
        "label": "math",
        "score": 0.5,
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    },
    {
        "id": 2,
        "question": 'Line one\nline two, with "quotes"; and\ta tab',
        "answer": "<script>alert('x')</script>",
        "label": "",
        "score": 1.5,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "<img src=x onerror=alert(1)>"},
        ],
    },
    {
        "id": 3,
        "question": "cafe\u0301 \u2014 \u65e5\u672c\u8a9e",
        "answer": "ok",
        "label": "misc",
        "score": 2.25,
        "messages": [{"role": "user", "content": "x"}],
    },
]
MAPPING = {"id": "id", "question": "prompt", "answer": "response", "label": "label", "messages": "messages"}


def csv_text(rows: list[dict[str, Any]], delimiter: str = ",") -> str:
    """The rows as CSV text: values as a spreadsheet would hold them (JSON for lists)."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\r\n")
    writer.writerow(list(rows[0]))
    for row in rows:
        writer.writerow([json.dumps(v) if isinstance(v, (list, dict)) else v for v in row.values()])
    return out.getvalue()


def jsonl_text(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_hf_dir(rows: list[dict[str, Any]], folder: Path) -> Path:
    """A `datasets.save_to_disk` folder: with the real library when it is installed, else the
    same layout by hand (an Arrow IPC stream file, state.json, dataset_info.json)."""
    try:
        import datasets
    except ImportError:
        import pyarrow as pa

        folder.mkdir(parents=True)
        table = pa.Table.from_pylist(rows)
        arrow_file = folder / "data-00000-of-00001.arrow"
        with pa.OSFile(str(arrow_file), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=2)
        (folder / "state.json").write_text(
            json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": None})
        )
        (folder / "dataset_info.json").write_text(json.dumps({"features": {}}))
        return folder
    datasets.disable_progress_bars()
    datasets.Dataset.from_list(rows).save_to_disk(str(folder))
    return folder


def write_all_formats(rows: list[dict[str, Any]], folder: Path) -> dict[str, Path]:
    """The same rows in every supported format and container."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "jsonl": folder / "rows.jsonl",
        "json": folder / "rows.json",
        "csv": folder / "rows.csv",
        "tsv": folder / "rows.tsv",
        "csv_semicolon": folder / "rows_semicolon.csv",
        "parquet": folder / "rows.parquet",
        "jsonl_gz": folder / "rows.jsonl.gz",
        "csv_zip": folder / "rows.zip",
    }
    files["jsonl"].write_text(jsonl_text(rows), "utf-8")
    files["json"].write_text(json.dumps(rows, indent=2, ensure_ascii=False), "utf-8")
    files["csv"].write_text(csv_text(rows), "utf-8", newline="")
    files["tsv"].write_text(csv_text(rows, "\t"), "utf-8", newline="")
    files["csv_semicolon"].write_text(csv_text(rows, ";"), "utf-8", newline="")
    pq.write_table(pa.Table.from_pylist(rows), files["parquet"], row_group_size=2)
    files["jsonl_gz"].write_bytes(gzip.compress(jsonl_text(rows).encode("utf-8")))
    with zipfile.ZipFile(files["csv_zip"], "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("export/", b"")
        archive.writestr("__MACOSX/._rows.csv", b"\x00\x05\x16\x07")
        archive.writestr("export/rows.csv", csv_text(rows).encode("utf-8"))
    files["hf_dir"] = write_hf_dir(rows, folder / "hf")
    return files
