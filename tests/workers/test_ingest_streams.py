"""The low-level streaming pieces, against reference results, with tiny read sizes so that
every line break, BOM and token lands on a read boundary somewhere."""

from __future__ import annotations

import io
import json
import random
import re

import pytest

from workers.ingest import IngestError, Limits, streams, text
from workers.ingest.streams import LineSplitter


def _reference_lines(data: bytes) -> list[bytes]:
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    parts = re.split(rb"\r\n|\r|\n", data)
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def test_line_splitter_matches_a_reference_at_every_read_boundary(monkeypatch):
    rng = random.Random(7)
    pieces = [b"a", b"bb", b"\r", b"\n", b"\r\n", b"xyz", b"\xef\xbb\xbf", b"0123456789"]
    for _ in range(3000):
        monkeypatch.setattr(streams, "CHUNK", rng.randint(1, 9))
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        if rng.random() < 0.3:
            data = b"\xef\xbb\xbf" + data
        limit = rng.choice([4, 1000])
        splitter = LineSplitter(io.BytesIO(data), limit)
        got, numbers = [], []
        while True:
            try:
                line = next(splitter)
            except StopIteration:
                break
            except IngestError as exc:
                got.append(None)
                numbers.append(exc.line)
                continue
            assert data[splitter.offset : splitter.offset + len(line)] == line
            got.append(line)
            numbers.append(splitter.line_no)
        expected = [line if len(line) <= limit else None for line in _reference_lines(data)]
        assert got == expected, data
        assert numbers == list(range(1, len(expected) + 1))


def test_json_array_reader_matches_json_loads_at_every_read_boundary(monkeypatch):
    rng = random.Random(11)
    for _ in range(300):
        monkeypatch.setattr(text, "CHUNK", rng.randint(1, 12))
        records = [
            {"n": rng.randint(-10**6, 10**6), "f": rng.random(), "s": "é\n" * rng.randint(0, 3), "l": [1, {"x": None}]}
            for _ in range(rng.randint(1, 6))
        ]
        document, starts, line = "[", [], 1
        for index, record in enumerate(records):
            gap = rng.choice(["", " ", "\n", "\n  "])
            document += gap
            line += gap.count("\n")
            starts.append(line)
            body = json.dumps(record, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5)
            document += body
            line += body.count("\n")
            if index < len(records) - 1:
                document += ","
        document += rng.choice(["]", "\n]\n"])
        stream = io.BytesIO(document.encode("utf-8"))
        got = list(text.read_json_array(stream, Limits()))
        assert [record for _, record in got] == json.loads(document)
        assert [number for number, _ in got] == starts


@pytest.mark.parametrize("chunk", [1, 3, 64 * 1024])
def test_json_array_syntax_error_positions_do_not_depend_on_read_size(monkeypatch, chunk):
    monkeypatch.setattr(text, "CHUNK", chunk)
    document = '[\n  {"a": 1},\n  {"b": [1, 2,, 3]}\n]'
    with pytest.raises(IngestError) as info:
        list(text.read_json_array(io.BytesIO(document.encode()), Limits()))
    assert (info.value.line, info.value.column) == (3, 15)
    with pytest.raises(json.JSONDecodeError) as reference:
        json.loads(document)
    assert (reference.value.lineno, reference.value.colno) == (3, 15)
