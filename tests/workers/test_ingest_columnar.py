"""Parquet files and datasets' save_to_disk folders: reading, and refusing extension types
(CVE-2023-47248: they could unpickle attacker data) before any data is read."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.workers.ingest_files import ROWS, write_hf_dir
from workers.ingest import IngestError, Limits, SourceFormat, columnar, detect_format, read_records


class CanaryType(pa.ExtensionType):
    """An extension type whose deserializer would be attacker-reachable code."""

    def __init__(self) -> None:
        super().__init__(pa.binary(), "workbench.test.canary")

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()


@pytest.fixture
def canary_type():
    pa.register_extension_type(CanaryType())
    yield CanaryType()
    pa.unregister_extension_type("workbench.test.canary")


def _table_with_extension(ext_type) -> pa.Table:
    storage = pa.array([b"payload", b"payload"], pa.binary())
    return pa.table({
        "prompt": ["a", "b"],
        "blob": pa.ExtensionArray.from_storage(ext_type, storage),
    })


def _forbid_reading_data(monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("data was read")

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", forbidden)


def test_parquet_with_a_registered_extension_type_is_refused_before_reading_data(tmp_path, canary_type, monkeypatch):
    path = tmp_path / "ext.parquet"
    pq.write_table(_table_with_extension(canary_type), path)
    assert isinstance(pq.read_schema(path).field("blob").type, CanaryType)
    _forbid_reading_data(monkeypatch)
    with pytest.raises(IngestError) as info:
        list(read_records(path))
    assert info.value.column == "blob"
    assert str(info.value) == (
        "column 'blob': the Parquet file uses Arrow extension types, which are not accepted (security); "
        "save the columns as plain types"
    )


def test_parquet_with_an_unregistered_extension_type_is_refused(tmp_path, canary_type, monkeypatch):
    path = tmp_path / "ext.parquet"
    nested = pa.StructArray.from_arrays(
        [pa.array(["x", "y"]), pa.ExtensionArray.from_storage(canary_type, pa.array([b"1", b"2"]))],
        ["text", "hidden"],
    )
    pq.write_table(pa.table({"prompt": ["a", "b"], "meta": nested}), path)
    pa.unregister_extension_type("workbench.test.canary")
    try:
        assert not isinstance(pq.read_schema(path).field("meta").type.field(1).type, pa.ExtensionType)
        _forbid_reading_data(monkeypatch)
        with pytest.raises(IngestError) as info:
            list(read_records(path))
        assert info.value.column == "meta.hidden"
    finally:
        pa.register_extension_type(CanaryType())


def test_parquet_limits_are_checked_from_metadata(tmp_path):
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "x" * 1000}] * 100), path, row_group_size=50)
    with pytest.raises(IngestError, match=r"^row group 1 of the Parquet file holds .* over the 1000 bytes limit"):
        list(read_records(path, limits=Limits(max_row_group_bytes=1000)))
    wide = tmp_path / "wide.parquet"
    pq.write_table(pa.table({f"c{i}": [1] for i in range(20)}), wide)
    with pytest.raises(IngestError, match="has 20 columns; at most 10"):
        list(read_records(wide, limits=Limits(max_columns=10)))
    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"prompt": pa.array([], pa.string())}), empty)
    with pytest.raises(IngestError, match="^the file has no rows$"):
        list(read_records(empty))


def test_a_corrupt_parquet_file_is_refused(tmp_path):
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 100 + b"PAR1")
    with pytest.raises(IngestError, match="not a readable Parquet file"):
        list(read_records(path))


def test_parquet_values_become_json_ready_in_canonical_rows(tmp_path):
    import datetime as dt
    import decimal

    from workers.ingest import ColumnMapping, canonical_row

    path = tmp_path / "types.parquet"
    pq.write_table(pa.table({
        "prompt": ["p"],
        "when": [dt.datetime(2024, 1, 2, 3, 4, 5)],
        "amount": pa.array([decimal.Decimal("1.50")], pa.decimal128(5, 2)),
        "tags": pa.array([{"k": 1}], pa.map_(pa.string(), pa.int64())),
        "missing": pa.array([float("nan")]),
    }), path)
    [(line, record)] = list(read_records(path))
    row = canonical_row(record, ColumnMapping({"prompt": "prompt"}), line)
    assert row["metadata"] == {"when": "2024-01-02T03:04:05", "amount": "1.50", "tags": {"k": 1}}


def test_a_datasets_folder_is_read_in_state_json_order(tmp_path):
    folder = write_hf_dir(ROWS, tmp_path / "hf")
    assert detect_format(folder) == SourceFormat("hf_dir")
    assert [record["id"] for _, record in read_records(folder)] == [1, 2, 3]
    assert [line for line, _ in read_records(folder)] == [1, 2, 3]


def _manual_hf_dir(folder: Path, tables: dict[str, pa.Table], state_names: list[str] | None = None) -> Path:
    folder.mkdir()
    for name, table in tables.items():
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    names = list(tables) if state_names is None else state_names
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))
    (folder / "dataset_info.json").write_text("{}")
    return folder


def test_a_datasets_folder_with_several_files_and_ipc_file_format(tmp_path):
    folder = _manual_hf_dir(
        tmp_path / "hf",
        {
            "data-00001-of-00002.arrow": pa.table({"prompt": ["c"]}),
            "data-00000-of-00002.arrow": pa.table({"prompt": ["a", "b"]}),
        },
        state_names=["data-00000-of-00002.arrow", "data-00001-of-00002.arrow"],
    )
    assert [(n, r["prompt"]) for n, r in read_records(folder)] == [(1, "a"), (2, "b"), (3, "c")]
    filed = tmp_path / "filed"
    filed.mkdir()
    table = pa.table({"prompt": ["x"]})
    with pa.OSFile(str(filed / "data.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    (filed / "dataset_info.json").write_text("{}")
    assert [r for _, r in read_records(filed)] == [{"prompt": "x"}]


def test_a_datasets_folder_with_an_extension_type_is_refused(tmp_path, canary_type):
    folder = _manual_hf_dir(tmp_path / "hf", {"data.arrow": _table_with_extension(canary_type)})
    with pytest.raises(IngestError) as info:
        list(read_records(folder))
    assert info.value.column == "blob"
    assert "extension types" in info.value.message


def test_state_json_cannot_point_outside_the_folder(tmp_path):
    outside = tmp_path / "secret.arrow"
    outside.write_bytes(b"")
    folder = _manual_hf_dir(tmp_path / "hf", {"data.arrow": pa.table({"prompt": ["a"]})}, ["../secret.arrow"])
    with pytest.raises(IngestError, match="outside the folder"):
        list(read_records(folder, SourceFormat("hf_dir")))
    (folder / "link.arrow").symlink_to(outside)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "link.arrow"}]}))
    with pytest.raises(IngestError, match="outside the folder"):
        detect_format(folder)


def test_folders_that_are_not_one_saved_dataset_are_refused(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.arrow").write_bytes(b"")
    with pytest.raises(IngestError, match="not a dataset saved with datasets' save_to_disk"):
        detect_format(plain)
    splits = tmp_path / "dict"
    splits.mkdir()
    (splits / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    with pytest.raises(IngestError) as info:
        detect_format(splits)
    assert str(info.value) == "the folder holds a DatasetDict (splits: train, test); import one split's folder"


def test_a_bare_arrow_file_is_refused_with_advice(tmp_path):
    path = tmp_path / "data.arrow"
    table = pa.table({"prompt": ["x"]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    with pytest.raises(IngestError, match="bare Arrow file is not accepted"):
        detect_format(path)


def test_old_pyarrow_is_refused(monkeypatch):
    monkeypatch.setattr(pa, "__version__", "14.0.0")
    with pytest.raises(IngestError, match="CVE-2023-47248"):
        columnar._pyarrow()
