"""gzip and zip uploads: caps on inflated size, ratio and entry count, checked before or
during inflation, never trusting what headers claim."""

from __future__ import annotations

import gzip
import io
import struct
import time
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from tests.workers.ingest_files import ROWS, jsonl_text
from workers.ingest import IngestError, Limits, SourceFormat, detect_format, read_records, streams

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gzip_bomb(tmp_path_factory) -> Path:
    """~1 MB of gzip that inflates to 1 GiB of zeros: one compressed MiB of zeros, repeated
    (each piece ends in a full flush, so the copies form one valid deflate stream), with the
    real CRC and size in the trailer."""
    zeros = bytes(MiB)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressor.compress(zeros)
    compressor.flush(zlib.Z_FULL_FLUSH)
    piece = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    copies = 1024
    crc = 0
    for _ in range(copies):
        crc = zlib.crc32(zeros, crc)
    path = tmp_path_factory.mktemp("bomb") / "bomb.gz"
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        for _ in range(copies):
            f.write(piece)
        f.write(compressor.flush())
        f.write(struct.pack("<II", crc, (copies * MiB) & 0xFFFFFFFF))
    assert path.stat().st_size < 1.2 * MiB
    return path


def _refused_quickly(path: Path, limits: Limits) -> tuple[IngestError, int, float]:
    started = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(IngestError) as info:
            list(read_records(path, SourceFormat("jsonl", "gzip"), limits=limits))  # the stream's own checks
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return info.value, peak, time.monotonic() - started


def test_a_gzip_bomb_stops_at_the_uncompressed_size_cap(gzip_bomb):
    limits = Limits(max_uncompressed_bytes=2 * MiB, max_compression_ratio=1_000_000)
    error, peak, seconds = _refused_quickly(gzip_bomb, limits)
    assert str(error) == "the gzip data inflates to more than the 2 MiB limit"
    assert peak < 8 * MiB
    assert seconds < 5


def test_a_gzip_bomb_stops_at_the_compression_ratio_cap(gzip_bomb):
    error, peak, seconds = _refused_quickly(gzip_bomb, Limits())
    assert str(error) == (
        "the gzip data inflates more than 100 times its compressed size; refusing it as a likely compression bomb"
    )
    assert peak < 16 * MiB
    assert seconds < 5


def test_highly_compressible_small_files_are_not_taken_for_bombs(tmp_path):
    text = '{"prompt": "same"}\n' * 20_000  # ~380 KB, compresses ~300:1, under the 1 MiB grace
    path = tmp_path / "same.jsonl.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert sum(1 for _ in read_records(path)) == 20_000


def test_multi_member_gzip_is_read_whole(tmp_path):
    path = tmp_path / "multi.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n') + gzip.compress(b'{"a": 2}\n') + b"\x00" * 8)
    assert [r for _, r in read_records(path)] == [{"a": 1}, {"a": 2}]


def test_truncated_gzip_is_refused(tmp_path):
    data = gzip.compress(jsonl_text(ROWS * 200).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(IngestError, match="truncated"):
        list(read_records(path, SourceFormat("jsonl", "gzip")))


def test_a_zip_with_10001_entries_is_refused_before_parsing_or_inflating(tmp_path, monkeypatch):
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for i in range(10_001):
            archive.writestr(f"f{i}.jsonl", b'{"a": 1}\n')

    def forbidden(*args, **kwargs):
        raise AssertionError("the archive was parsed or inflated")

    monkeypatch.setattr(zipfile, "ZipFile", forbidden)
    monkeypatch.setattr(zlib, "decompressobj", forbidden)
    for call in (lambda: detect_format(path), lambda: list(read_records(path, SourceFormat("jsonl", "zip")))):
        with pytest.raises(IngestError) as info:
            call()
        assert str(info.value) == (
            "the zip archive lists 10001 entries; at most 1000 are accepted (it must hold one data file)"
        )


def test_a_zip_entry_declaring_more_than_the_cap_is_refused_before_inflating(tmp_path, monkeypatch):
    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("big.jsonl", jsonl_text(ROWS * 5000))
    monkeypatch.setattr(zlib, "decompressobj", lambda *a: pytest.fail("inflated"))
    with pytest.raises(IngestError, match=r"^the archive entry 'big.jsonl' declares .* over the 1 MiB limit$"):
        list(read_records(path, SourceFormat("jsonl", "zip"), limits=Limits(max_uncompressed_bytes=MiB)))


def test_a_zip_entry_declaring_a_bomb_ratio_is_refused_before_inflating(tmp_path, monkeypatch):
    path = tmp_path / "zeros.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("zeros.csv", b"a\n" + b"0\n" * (4 * MiB))
    monkeypatch.setattr(zlib, "decompressobj", lambda *a: pytest.fail("inflated"))
    with pytest.raises(IngestError, match="declares a compression ratio over 100"):
        list(read_records(path, SourceFormat("csv", "zip", ",", True)))


def _patch_declared_size(data: bytes, size: int) -> bytes:
    """Rewrite the uncompressed size in the local header and the central directory."""
    data = bytearray(data)
    local = data.index(b"PK\x03\x04")
    data[local + 22 : local + 26] = struct.pack("<I", size)
    central = data.index(b"PK\x01\x02")
    data[central + 24 : central + 28] = struct.pack("<I", size)
    return bytes(data)


def test_a_zip_entry_that_lies_about_its_size_is_stopped_while_inflating(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("rows.jsonl", jsonl_text(ROWS * 2000))  # ~1 MB, declared as 1000 bytes
    path = tmp_path / "liar.zip"
    path.write_bytes(_patch_declared_size(buffer.getvalue(), 1000))
    with pytest.raises(IngestError) as info:
        list(read_records(path, SourceFormat("jsonl", "zip")))
    assert str(info.value) == (
        "the archive entry 'rows.jsonl' inflates to more than the 1000 bytes it declares; "
        "refusing a corrupt or forged archive"
    )


def test_a_zip_entry_claiming_more_than_it_holds_is_refused(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("rows.jsonl", jsonl_text(ROWS))
    path = tmp_path / "short.zip"
    path.write_bytes(_patch_declared_size(buffer.getvalue(), 5000))
    with pytest.raises(IngestError, match="holds .* bytes but declares 5000"):
        list(read_records(path, SourceFormat("jsonl", "zip")))


def test_a_zip_must_hold_exactly_one_data_file(tmp_path):
    path = tmp_path / "two.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.jsonl", b'{"a": 1}\n')
        archive.writestr("b.jsonl", b'{"a": 1}\n')
        archive.writestr("__MACOSX/._a.jsonl", b"junk")
    with pytest.raises(IngestError) as info:
        detect_format(path)
    assert str(info.value) == "a zip archive must contain exactly one data file; this one contains 2 (a.jsonl, b.jsonl)"
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("folder/", b"")
    with pytest.raises(IngestError, match="contains 0"):
        detect_format(empty)


def test_a_stored_zip_entry_is_read(tmp_path):
    path = tmp_path / "stored.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("rows.jsonl", jsonl_text(ROWS))
    assert detect_format(path) == SourceFormat("jsonl", "zip", member="rows.jsonl")
    assert [r["id"] for _, r in read_records(path)] == [1, 2, 3]


def test_a_corrupted_zip_entry_fails_its_crc(tmp_path):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("rows.jsonl", b'{"a": 1}\n{"a": 2}\n')
    data = bytearray(buffer.getvalue())
    data[data.index(b'{"a": 2}') + 6] = ord("3")
    path = tmp_path / "crc.zip"
    path.write_bytes(bytes(data))
    with pytest.raises(IngestError, match="CRC mismatch"):
        list(read_records(path))


def test_nested_archives_and_parquet_inside_archives_are_refused(tmp_path):
    nested = tmp_path / "nested.gz"
    nested.write_bytes(gzip.compress(gzip.compress(b'{"a": 1}\n')))
    with pytest.raises(IngestError, match="compressed file inside a compressed file"):
        detect_format(nested)
    parquet = tmp_path / "p.zip"
    with zipfile.ZipFile(parquet, "w") as archive:
        archive.writestr("p.parquet", b"PAR1" + b"\x00" * 16 + b"PAR1")
    with pytest.raises(IngestError, match="Parquet inside an archive is not accepted"):
        detect_format(parquet)


def test_the_zip_entry_name_is_checked_against_its_content(tmp_path):
    path = tmp_path / "x.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data.parquet", jsonl_text(ROWS))
    with pytest.raises(IngestError, match="^the file is named .parquet but its content is JSON Lines$"):
        detect_format(path)


def test_human_sizes_in_messages():
    assert streams.human_size(1000) == "1000 bytes"
    assert streams.human_size(8 * MiB) == "8 MiB"
    assert streams.human_size(10 * 1024 * MiB) == "10 GiB"


@pytest.mark.parametrize("name", ["../../x.jsonl", "/etc/x.jsonl", "..\\x.jsonl", "data/../../x.jsonl",
                                  "C:\\x.jsonl", "\\\\server\\share\\x.jsonl"])
def test_a_zip_entry_with_an_unsafe_name_is_refused_naming_it(tmp_path, name):
    path = tmp_path / "unsafe.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo(name), jsonl_text(ROWS).encode())
    stored = zipfile.ZipFile(path).infolist()[0].filename
    with pytest.raises(IngestError, match="has an unsafe name") as info:
        detect_format(path)
    assert f"'{stored}'" in str(info.value)


def test_a_zip_entry_in_a_folder_is_read(tmp_path):
    path = tmp_path / "folder.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("export/2026/rows.jsonl", jsonl_text(ROWS).encode())
    source = detect_format(path)
    assert source.member == "export/2026/rows.jsonl"
    assert len(list(read_records(path, source))) == len(ROWS)


def _rows_bomb(path: Path, copies: int, *, trailer_size: int | None = None) -> Path:
    """gzip of tiny JSON rows repeated `copies` MiB times (a few hundred times smaller than it
    inflates), built from one compressed piece as the zeros bomb is."""
    block = b'{"prompt": "a"}\n' * (MiB // 16)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressor.compress(block)
    compressor.flush(zlib.Z_FULL_FLUSH)
    piece = compressor.compress(block) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(copies):
        crc = zlib.crc32(block, crc)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff")
        for _ in range(copies):
            f.write(piece)
        f.write(compressor.flush())
        size = copies * len(block) if trailer_size is None else trailer_size
        f.write(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return path


def test_a_gzip_bomb_of_tiny_rows_is_refused_at_upload_by_its_declared_size(tmp_path):
    bomb = _rows_bomb(tmp_path / "rows.jsonl.gz", 512)
    with pytest.raises(IngestError, match="declares 512 MiB inflated from .* refusing it as a likely compression bomb"):
        detect_format(bomb)


def test_a_gzip_bomb_hiding_its_size_is_refused_at_upload_by_its_first_mebibytes(tmp_path):
    bomb = _rows_bomb(tmp_path / "rows.jsonl.gz", 512, trailer_size=1000)  # a forged, harmless-looking trailer
    started = time.monotonic()
    with pytest.raises(IngestError, match="inflates more than 100 times its compressed size"):
        detect_format(bomb)
    assert time.monotonic() - started < 2  # a head sample, not the whole bomb


def test_the_ratio_counts_compressed_bytes_consumed_not_read_ahead(gzip_bomb):
    inflated = 0
    with pytest.raises(IngestError, match="inflates more than 100 times"):
        with streams.open_payload(gzip_bomb, "gzip", Limits()) as stream:
            while piece := stream.read(64 * 1024):
                inflated += len(piece)
    assert inflated < 2 * MiB  # tripped just past the 1 MiB grace, not at 100 x a 64 KiB read-ahead
