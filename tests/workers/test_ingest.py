"""The ingest engine on the text formats: detection, reading, bad input, streaming, and the
same version hash for the same table in every format."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.workers.ingest_files import MAPPING, ROWS, csv_text, jsonl_text
from workers.ingest import (
    BadRows,
    ColumnMapping,
    IngestError,
    Limits,
    SourceFormat,
    VersionHasher,
    canonical_row,
    detect_format,
    preview,
    read_records,
)

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def version_hash(path: Path, fmt: SourceFormat | None = None, **kwargs) -> tuple[str, list[dict]]:
    mapping = ColumnMapping(MAPPING)
    hasher = VersionHasher()
    rows = []
    for line, record in read_records(path, fmt, **kwargs):
        row = canonical_row(record, mapping, line)
        hasher.update(row)
        rows.append(row)
    return hasher.hexdigest(), rows


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def error_of(path: Path, **kwargs) -> IngestError:
    with pytest.raises(IngestError) as info:
        list(read_records(path, **kwargs))
    return info.value


# --- every format, one hash ---------------------------------------------------------------


def test_the_same_table_has_the_same_version_hash_in_every_format(all_formats):
    digests = {}
    for name, path in all_formats.items():
        digest, rows = version_hash(path)
        assert len(rows) == 3, name
        digests[name] = digest
    assert len(set(digests.values())) == 1, digests


def test_formats_are_detected_from_content(all_formats):
    kinds = {name: detect_format(path) for name, path in all_formats.items()}
    assert kinds["jsonl"] == SourceFormat("jsonl")
    assert kinds["json"] == SourceFormat("json")
    assert kinds["csv"] == SourceFormat("csv", delimiter=",", has_header=True)
    assert kinds["tsv"] == SourceFormat("tsv", delimiter="\t", has_header=True)
    assert kinds["csv_semicolon"] == SourceFormat("csv", delimiter=";", has_header=True)
    assert kinds["parquet"] == SourceFormat("parquet")
    assert kinds["hf_dir"] == SourceFormat("hf_dir")
    assert kinds["jsonl_gz"] == SourceFormat("jsonl", compression="gzip")
    assert kinds["csv_zip"] == SourceFormat(
        "csv", compression="zip", delimiter=",", has_header=True, member="export/rows.csv"
    )


def test_html_and_script_text_is_kept_verbatim(all_formats):
    for path in all_formats.values():
        _, rows = version_hash(path)
        assert rows[0]["prompt"] == "What is <b>2+2</b>?"
        assert rows[1]["response"] == "<script>alert('x')</script>"
        assert rows[1]["messages"][1]["content"] == "<img src=x onerror=alert(1)>"


def test_canonical_rows_normalize_types_newlines_and_unicode(all_formats):
    _, rows = version_hash(all_formats["csv"])  # CSV writer used \r\n inside the quoted field
    first, second, third = rows
    assert first == {
        "ext_id": "1",
        "prompt": "What is <b>2+2</b>?",
        "response": "4",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "label": "math",
        "reference": None,
        "metadata": {"score": "0.5"},
    }
    assert second["prompt"] == 'Line one\nline two, with "quotes"; and\ta tab'
    assert second["label"] is None  # empty text is missing, in every format
    assert third["prompt"] == "caf\u00e9 \u2014 \u65e5\u672c\u8a9e"  # NFC


def test_preview_gives_format_columns_records_and_a_mapping_guess(all_formats):
    info = preview(all_formats["json"], n=2)
    assert info["format"] == {
        "kind": "json", "compression": None, "delimiter": None, "has_header": None, "member": None,
    }
    assert info["columns"] == ["id", "question", "answer", "label", "score", "messages"]
    assert [r["id"] for r in info["records"]] == [1, 2]
    assert info["suggested_mapping"] == ColumnMapping(MAPPING)
    parquet = preview(all_formats["parquet"], n=1)
    assert parquet["records"][0]["messages"][0] == {"role": "user", "content": "hi"}
    json.dumps(parquet["records"])  # JSON-ready


def test_preview_suggests_roles_from_common_column_names(tmp_path):
    path = write(tmp_path, "a.jsonl", json.dumps(
        {"UID": 1, "Instruction": "a", "input": "b", "output": "c", "Category": "d", "gold": "e", "x": 1,
         "Split": "train"}
    ) + "\n")
    guess = preview(path)["suggested_mapping"]
    assert guess.roles == {
        "UID": "id", "Instruction": "prompt", "output": "response", "Category": "label", "gold": "reference",
        "Split": "split",
    }
    chat = write(tmp_path, "c.jsonl", '{"conversation": [{"role": "user", "content": "hi"}]}\n')
    assert preview(chat)["suggested_mapping"].roles == {"conversation": "messages"}


# --- detection ----------------------------------------------------------------------------


def test_a_file_named_parquet_holding_json_lines_is_refused(tmp_path):
    path = write(tmp_path, "upload.bin", jsonl_text(ROWS))
    with pytest.raises(IngestError) as info:
        detect_format(path, filename="train.parquet")
    assert str(info.value) == "the file is named .parquet but its content is JSON Lines"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("data.csv", gzip.compress(b"a,b\n1,2\n"), "the file is named .csv but its content is gzip-compressed"),
        ("data.jsonl", b"a,b\n1,2\n", "the file is named .jsonl but its content is CSV"),
        ("data.jsonl.gz", gzip.compress(b"a,b\n1,2\n"), "the file is named .jsonl but its content is CSV"),
        ("data.zip", b"PAR1....", "the file is named .zip but its content is Parquet"),
        ("data.csv", b"\xff\xfea\x00,\x00b\x00", "the file is UTF-16 encoded; save it as UTF-8"),
        ("data.csv", b"", "the file is empty"),
        ("data.jsonl", b"\n  \n\t\n", "the file is empty"),
    ],
)
def test_detection_refuses_mislabelled_or_unusable_files(tmp_path, name, content, message):
    path = write(tmp_path, name, content)
    with pytest.raises(IngestError) as info:
        detect_format(path)
    assert str(info.value) == message


def test_json_and_json_lines_may_be_named_for_each_other(tmp_path):
    assert detect_format(write(tmp_path, "a.json", '{"a": 1}\n')).kind == "jsonl"
    assert detect_format(write(tmp_path, "a.jsonl", '[{"a": 1}]')).kind == "json"


def test_delimiter_and_header_can_be_overridden(tmp_path):
    path = write(tmp_path, "data.txt", "1|2|3\n4|5|6\n")
    fmt = detect_format(path)
    assert (fmt.kind, fmt.delimiter, fmt.has_header) == ("csv", "|", False)
    assert list(read_records(path)) == [
        (1, {"column_1": "1", "column_2": "2", "column_3": "3"}),
        (2, {"column_1": "4", "column_2": "5", "column_3": "6"}),
    ]
    assert list(read_records(path, has_header=True)) == [(2, {"1": "4", "2": "5", "3": "6"})]
    assert list(read_records(path, delimiter=",", has_header=False)) == [
        (1, {"column_1": "1|2|3"}), (2, {"column_1": "4|5|6"}),
    ]
    semi = write(tmp_path, "semi.csv", "a;b\n1,5;2\n")
    assert list(read_records(semi)) == [(2, {"a": "1,5", "b": "2"})]
    assert error_of(semi, delimiter=",", has_header=True).line == 2  # now ragged: 1 column, 2 fields
    with pytest.raises(IngestError, match="delimiter or header setting applies to CSV/TSV"):
        list(read_records(write(tmp_path, "x.jsonl", '{"a": 1}\n'), delimiter=";"))


def test_a_text_only_header_is_detected(tmp_path):
    path = write(tmp_path, "data.csv", "question,answer\nwhat is up,not much\nhello,hi\n")
    assert detect_format(path).has_header is True
    assert preview(path)["suggested_mapping"].roles == {"question": "prompt", "answer": "response"}


# --- bad input: each names where ----------------------------------------------------------


def test_a_megabyte_line_of_invalid_utf8_names_the_line_and_byte_offset(tmp_path):
    bad = b'{"prompt": "' + b"\xff" * MiB + b'"}\n'
    good = b'{"prompt": "ok"}\n'
    path = write(tmp_path, "bad.jsonl", good + good + bad + good)
    error = error_of(path)
    assert error.line == 3
    assert str(error).startswith(f"line 3: invalid UTF-8 at byte offset {2 * len(good) + 12} ")


def test_invalid_utf8_in_csv_names_the_line(tmp_path):
    error = error_of(write(tmp_path, "bad.csv", b"a,b\n1,2\n3,\xe9t\xe9\n"))
    assert (error.line, error.message.startswith("invalid UTF-8 at byte offset 10 (byte 3 of the line)")) == (3, True)


def test_a_byte_order_mark_is_accepted_and_stripped(tmp_path):
    bom = b"\xef\xbb\xbf"
    csv_path = write(tmp_path, "bom.csv", bom + b"id,prompt\n1,hi\n")
    assert list(read_records(csv_path)) == [(2, {"id": "1", "prompt": "hi"})]
    jsonl_path = write(tmp_path, "bom.jsonl", bom + b'{"prompt": "hi"}\n')
    assert list(read_records(jsonl_path)) == [(1, {"prompt": "hi"})]
    json_path = write(tmp_path, "bom.json", bom + b'[{"prompt": "hi"}]')
    assert list(read_records(json_path)) == [(1, {"prompt": "hi"})]


def test_nul_bytes_in_csv_name_the_line(tmp_path):
    error = error_of(write(tmp_path, "nul.csv", b"a,b\n1,2\n3,4\x005\n"))
    assert error.line == 3
    assert "NUL byte" in str(error)


def test_a_ragged_csv_row_names_the_line(tmp_path):
    error = error_of(write(tmp_path, "ragged.csv", "a,b\n1,2\n3,4\n5,6,7\n8,9\n"))
    assert str(error) == (
        "line 4: the row has 3 fields but the header has 2 (check the delimiter and the quoting)"
    )


def test_an_open_quote_running_to_the_end_names_the_line_where_it_opens(tmp_path):
    error = error_of(write(tmp_path, "quote.csv", 'a,b\n1,2\n3,"never\nclosed\nat all\n'))
    assert error.line == 3
    assert "never closed" in error.message


def test_text_after_a_closing_quote_names_the_line(tmp_path):
    error = error_of(write(tmp_path, "quote.csv", 'a,b\n1,"x"y\n'))
    assert error.line == 2
    assert "after a closing quote" in error.message


def test_cr_only_line_endings_are_read(tmp_path):
    path = write(tmp_path, "mac.csv", 'id,prompt\r1,"two\rlines"\r2,b\r')
    assert list(read_records(path)) == [(2, {"id": "1", "prompt": "two\nlines"}), (4, {"id": "2", "prompt": "b"})]


def test_too_many_columns_are_refused(tmp_path):
    wide = ",".join(f"c{i}" for i in range(10_000)) + "\n" + ",".join("1" * 10_000) + "\n"
    error = error_of(write(tmp_path, "wide.csv", wide))
    assert str(error) == "line 1: the header has 10000 columns; at most 1000 are accepted"
    record = json.dumps({f"k{i}": i for i in range(1001)})
    error = error_of(write(tmp_path, "wide.jsonl", '{"a": 1}\n' + record + "\n"))
    assert (error.line, "1001 keys" in error.message) == (2, True)


def test_an_over_long_jsonl_line_is_refused_without_reading_it_whole(tmp_path):
    path = tmp_path / "long.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"prompt": "ok"}\n{"prompt": "')
        f.writelines(b"x" * MiB for _ in range(40))
        f.write(b'"}\n{"prompt": "after"}\n')
    tracemalloc.start()
    try:
        error = error_of(path, limits=Limits(max_line_bytes=MiB))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(error) == "line 2: the line is longer than the 1 MiB limit"
    assert peak < 8 * MiB
    bad = BadRows()
    assert list(read_records(path, limits=Limits(max_line_bytes=MiB), skip_bad_rows=True, bad_rows=bad)) == [
        (1, {"prompt": "ok"}), (3, {"prompt": "after"}),
    ]
    assert [b["line"] for b in bad] == [2]


def test_a_50_mb_csv_field_is_refused_with_bounded_memory(tmp_path):
    path = tmp_path / "field.csv"
    with open(path, "wb") as f:
        f.write(b'a,b\n1,"')
        f.writelines((b"y" * 1023 + b"\n") * 1024 for _ in range(50))  # a quoted field spanning many short lines
        f.write(b'"\n')
    tracemalloc.start()
    try:
        error = error_of(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert error.line == 2
    assert "field is larger than the 8 MiB limit" in error.message
    assert peak < 40 * MiB  # the 8 MiB field cap, as a str (1 byte/char) plus the csv buffer


def test_a_field_over_the_field_limit_names_the_line(tmp_path):
    path = write(tmp_path, "f.jsonl", '{"a": "x"}\n{"a": "' + "é" * 600 + '"}\n')
    error = error_of(path, limits=Limits(max_field_bytes=1000))
    assert (error.line, error.column) == (2, "a")
    error = error_of(write(tmp_path, "f.csv", "a\nx\n" + "é" * 600 + "\n"), limits=Limits(max_field_bytes=1000))
    assert (error.line, error.column) == (3, "a")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("empty.jsonl", "", "the file is empty"),
        ("empty.csv", "\n\n", "the file is empty"),
        ("header.csv", "id,prompt\n", "the file has a header but no rows"),
        ("header.csv", "id,prompt\n\n\n", "the file has a header but no rows"),
        ("empty.json", " [ ] ", "the file holds an empty JSON array"),
    ],
)
def test_empty_inputs_are_refused(tmp_path, name, content, message):
    path = write(tmp_path, name, content)
    fmt = SourceFormat("csv", delimiter=",", has_header=True) if name.endswith(".csv") else None
    fmt = SourceFormat("jsonl") if name == "empty.jsonl" else fmt
    assert str(error_of(path, fmt=fmt)) == message


def test_json_syntax_errors_name_line_and_column(tmp_path):
    lines = [json.dumps({"prompt": f"p{i}"}) for i in range(11)] + ['{"a": 1 "b": 2}']
    error = error_of(write(tmp_path, "syntax.jsonl", "\n".join(lines) + "\n"))
    assert str(error) == "line 12, column 9: Expecting ',' delimiter"
    assert (error.line, error.column) == (12, 9)


def test_json_lines_that_are_not_objects_name_the_line(tmp_path):
    error = error_of(write(tmp_path, "x.jsonl", '{"a": 1}\n[1, 2]\n'))
    assert str(error) == "line 2: the line holds a JSON array, not a JSON object"
    error = error_of(write(tmp_path, "y.jsonl", '{"a": 1}\n"text"\n'), fmt=SourceFormat("jsonl"))
    assert error.line == 2
    error = error_of(write(tmp_path, "z.jsonl", '{"a": NaN}\n'))
    assert str(error) == "line 1: NaN is not valid JSON"


def test_json_lines_values_are_those_json_reads_exactly(tmp_path):
    # Lines are parsed by orjson where it reads exactly what json reads; integers past 64 bits
    # (orjson makes them floats) and floats are read by json.
    lines = ['{"n": 123456789012345678901234567890, "s": "a\\u00e9\\n"}', '{"f": 0.1, "e": 1e16, "x": [1, {"y": 2.5}]}',
             '{"t": true, "z": null, "i": -7, "d": {"k": "v"}, "k": 1, "k": 2}', '{"big": [99999999999999999999]}',
             '{"a": 1E400}']  # orjson refuses it; json reads infinity (the canonical row refuses that later)
    path = write(tmp_path, "values.jsonl", "\n".join(lines) + "\n")
    found = [record for _, record in read_records(path)]
    assert found == [json.loads(line) for line in lines]
    assert type(found[0]["n"]) is int and type(found[3]["big"][0]) is int


def test_a_pretty_printed_object_is_explained(tmp_path):
    error = error_of(write(tmp_path, "pretty.jsonl", '{\n  "a": 1\n}\n'))
    assert error.line == 1
    assert "JSON Lines needs one whole object per line" in error.message


def test_json_array_errors_name_line_and_column(tmp_path):
    error = error_of(write(tmp_path, "a.json", '[\n  {"a": 1},\n  {"a": 2,,}\n]'))
    assert (error.line, error.column) == (3, 11)
    assert error.message == "Expecting property name enclosed in double quotes"
    error = error_of(write(tmp_path, "b.json", '[\n  {"a": 1},\n  42\n]'))
    assert str(error) == "line 3: the array element is a JSON number, not a JSON object"
    error = error_of(write(tmp_path, "c.json", '[{"a": 1}\n {"a": 2}]'))
    assert str(error) == "line 2, column 2: Expecting ',' delimiter"
    error = error_of(write(tmp_path, "d.json", '[{"a": 1}] x'))
    assert str(error) == "line 1, column 12: unexpected text after the end of the JSON array"
    error = error_of(write(tmp_path, "e.json", '[{"a": 1},\n'))
    assert error.line == 2
    error = error_of(write(tmp_path, "f.json", '[{"a": 1}, {"a": "\xff"}]'.encode("latin-1")))
    assert (error.line, "invalid UTF-8" in error.message) == (1, True)


def test_a_large_json_array_element_is_refused(tmp_path):
    path = write(tmp_path, "big.json", '[{"a": "' + "x" * (2 * MiB) + '"}]')
    error = error_of(path, limits=Limits(max_line_bytes=MiB))
    assert error.line == 1
    assert "larger than the 1 MiB limit" in error.message


def test_a_minified_json_array_streams_across_reads(tmp_path):
    rows = [{"i": i, "text": "é" * (i % 50)} for i in range(20_000)]
    path = write(tmp_path, "min.json", json.dumps(rows, ensure_ascii=False, separators=(",", ":")))
    assert [record for _, record in read_records(path)] == rows


def test_skip_bad_rows_logs_them_capped_at_100_and_counts_all(tmp_path):
    lines = [json.dumps({"prompt": f"ok {i}"}) if i % 2 else "{not json" for i in range(300)]
    path = write(tmp_path, "bad.jsonl", "\n".join(lines) + "\n")
    bad = BadRows()
    good = list(read_records(path, skip_bad_rows=True, bad_rows=bad))
    assert len(good) == 150
    assert (len(bad), bad.total) == (100, 150)
    assert bad[0] == {"line": 1, "column": 2, "message": "Expecting property name enclosed in double quotes"}
    plain: list = []
    list(read_records(path, skip_bad_rows=True, bad_rows=plain))
    assert len(plain) == 100


def test_skip_bad_rows_skips_ragged_csv_rows(tmp_path):
    path = write(tmp_path, "r.csv", "a,b\n1,2\n3\n4,5\n6,\x00\n")
    bad = BadRows()
    assert list(read_records(path, skip_bad_rows=True, bad_rows=bad)) == [
        (2, {"a": "1", "b": "2"}), (4, {"a": "4", "b": "5"}),
    ]
    assert [b["line"] for b in bad] == [3, 5]


def test_a_malformed_row_near_the_end_of_100k_rows_names_its_line(tmp_path):
    lines = [json.dumps({"prompt": f"row {i}"}) for i in range(100_000)]
    lines[99_998] = '{"prompt": "row" oops}'
    error = error_of(write(tmp_path, "big.jsonl", "\n".join(lines) + "\n"))
    assert error.line == 99_999


# --- streaming ----------------------------------------------------------------------------


def test_200k_jsonl_lines_stream_with_flat_memory(tmp_path):
    path = tmp_path / "many.jsonl"
    with open(path, "w") as f:
        f.writelines(
            json.dumps({"id": i, "prompt": f"question number {i}", "response": f"answer {i}"}) + "\n"
            for i in range(200_000)
        )
    assert path.stat().st_size > 12 * MiB
    count = 0
    started = time.monotonic()
    tracemalloc.start()
    try:
        for _ in read_records(path):
            count += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 200_000
    assert peak < 50 * MiB
    assert peak < 4 * MiB  # in practice: one 64 KiB chunk and one line at a time
    assert time.monotonic() - started < 30


def test_the_engine_does_not_import_django_or_pyarrow_on_import():
    code = "import sys, workers.ingest; print('django' in sys.modules, 'pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_no_module_of_the_engine_imports_django():
    pattern = re.compile(r"^\s*(import|from)\s+(django|celery|apps)\b", re.MULTILINE)
    for path in (REPO / "workers" / "ingest").glob("*.py"):
        assert not pattern.search(path.read_text()), path


def test_csv_and_jsonl_rows_hash_alike_when_csv_text_matches(tmp_path):
    jsonl = write(tmp_path, "a.jsonl", jsonl_text(ROWS))
    csv_path = write(tmp_path, "a.csv", csv_text(ROWS))
    assert version_hash(jsonl)[0] == version_hash(csv_path)[0]
    changed = [dict(ROWS[0], answer="5"), *ROWS[1:]]
    assert version_hash(write(tmp_path, "b.jsonl", jsonl_text(changed)))[0] != version_hash(jsonl)[0]


def test_a_source_format_round_trips_through_a_dict(all_formats):
    fmt = detect_format(all_formats["csv_zip"])
    assert SourceFormat.from_dict(json.loads(json.dumps(fmt.as_dict()))) == fmt
    with pytest.raises(ValueError):
        SourceFormat("xlsx")


def test_a_json_array_syntax_error_is_reported_where_it_is_even_in_a_big_file(tmp_path):
    filler = ",\n".join(json.dumps({"prompt": "x" * 100}) for _ in range(30_000))  # ~3 MB
    path = write(tmp_path, "err.json", '[\n{"prompt": "a"},\n{"prompt": "b" "c"},\n' + filler + "\n]")
    error = error_of(path, limits=Limits(max_line_bytes=MiB))
    assert str(error) == "line 3, column 16: Expecting ',' delimiter"
