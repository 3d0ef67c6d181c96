"""Cutting a JSON Lines file into parts: every line in exactly one part, line numbers and
record counts as one reader of the whole file sees them."""

import pytest

from workers.ingest import IngestError
from workers.ingest.chunks import Window, count_records, split_lines
from workers.ingest.errors import DEFAULT_LIMITS
from workers.ingest.text import read_jsonl


def read_whole(path):
    with open(path, "rb") as handle:
        return list(read_jsonl(handle, DEFAULT_LIMITS))


def read_parts(path, parts):
    found = []
    for part in split_lines(path, parts):
        assert count_records(path, part) == len(records := _records(path, part))
        found += records
    return found


def _records(path, part):
    with Window(path, part) as window:
        try:
            return list(read_jsonl(window, DEFAULT_LIMITS, lines_before=part.lines_before, offset=part.start))
        except IngestError as exc:
            if exc.message == "the file is empty":  # a part of blank lines only
                return []
            raise


@pytest.mark.parametrize("content", [
    b'{"a": 1}\n{"a": 2}\n\n  \n{"a": 3}\n{"a": 4}',  # blank lines, no final newline
    b'\xef\xbb\xbf{"a": 1}\r\n{"a": 2}\r\n{"a": 3}\r\n',  # a BOM and CRLF
    b'{"a": 1}\r{"a": 2}\r{"a": 3}\n{"a": 4}\r\n{"a": 5}\n',  # lone CRs count as line ends
    b'{"a": "x"}\n' * 50,
])
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_parts_hold_every_record_once_with_the_whole_files_line_numbers(tmp_path, content, parts):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(content)
    cut = split_lines(path, parts)
    assert cut[0].start == 0 and cut[-1].end == len(content)
    assert all(a.end == b.start for a, b in zip(cut, cut[1:], strict=False))
    assert read_parts(path, parts) == read_whole(path)


def test_a_bad_line_in_a_part_is_named_by_its_line_and_byte_offset_in_the_file(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 10 + b'{"a": "\xff"}\n' + b'{"a": 1}\n' * 10)
    with pytest.raises(IngestError) as whole:
        read_whole(path)
    with pytest.raises(IngestError) as in_part:
        read_parts(path, 2)
    assert str(in_part.value) == str(whole.value)
    assert in_part.value.line == 11 and "byte offset 97" in str(in_part.value)
