"""Streaming readers for the text formats: JSON Lines, JSON arrays, CSV and TSV.

Each reader takes a binary stream (already inflated) and yields (line, record) with memory
bounded by Limits.max_line_bytes, however large the file.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import orjson

from .errors import IngestError, Limits, record_bad_row
from .streams import CHUNK, LineSplitter, decode_line, human_size


def _reject_constant(name: str) -> None:
    # Python's json accepts NaN and Infinity; they are not JSON and could not be written back.
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _json_kind(value: Any) -> str:
    return {
        list: "a JSON array", str: "a JSON string", bool: "a JSON boolean", type(None): "null",
        int: "a JSON number", float: "a JSON number",
    }.get(type(value), "a JSON value")


def _has_oversized_string(value: Any, limit: int) -> bool:
    if isinstance(value, str):
        # len() is a cheap lower bound of the UTF-8 size; encode only near the limit.
        return len(value) * 4 > limit and len(value.encode("utf-8", "surrogatepass")) > limit
    if isinstance(value, dict):
        return any(_has_oversized_string(v, limit) for v in value.values())
    if isinstance(value, list):
        return any(_has_oversized_string(v, limit) for v in value)
    return False


def check_record(record: dict, line: int, limits: Limits, size_hint: int | None = None) -> None:
    """Column-count and field-size caps for one parsed record (any format)."""
    if len(record) > limits.max_columns:
        raise IngestError(
            f"the record has {len(record)} keys; at most {limits.max_columns} columns are accepted", line=line
        )
    if size_hint is not None and size_hint <= limits.max_field_bytes:
        return  # no field can be larger than its whole line
    for key, value in record.items():
        if _has_oversized_string(value, limits.max_field_bytes):
            raise IngestError(
                f"the value is larger than the {human_size(limits.max_field_bytes)} field limit",
                line=line, column=str(key),
            )


# --- JSON Lines ---------------------------------------------------------------------------


def _parse_json_line(raw: bytes, line: int, offset: int, limits: Limits) -> dict:
    # orjson first, a few times faster. Where it could differ from json (it reads an integer
    # past 64 bits as a float, so any float at all) or refuses the line, json reads it: its
    # values, and its errors naming the line, column or byte.
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        value = None
    if type(value) is dict and not _holds_float(value):
        check_record(value, line, limits, size_hint=len(raw))
        return value
    text = decode_line(raw, line, offset)
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        message = exc.msg
        if exc.pos >= len(text.rstrip()) and text.lstrip().startswith(("{", "[")):
            message += " (the line ends inside a JSON value: JSON Lines needs one whole object per line)"
        raise IngestError(message, line=line, column=exc.colno) from None
    except ValueError as exc:  # NaN / Infinity
        raise IngestError(str(exc), line=line) from None
    except RecursionError:
        raise IngestError("the JSON is nested too deeply", line=line) from None
    if not isinstance(value, dict):
        raise IngestError(f"the line holds {_json_kind(value)}, not a JSON object", line=line)
    check_record(value, line, limits, size_hint=len(raw))
    return value


def _holds_float(container: dict | list) -> bool:
    for value in container.values() if type(container) is dict else container:
        kind = type(value)
        if kind is float or ((kind is dict or kind is list) and _holds_float(value)):
            return True
    return False


def read_jsonl(
    stream: BinaryIO, limits: Limits, *, skip_bad_rows: bool = False, bad_rows: list | None = None,
    lines_before: int = 0, offset: int = 0,
) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line of a JSON Lines stream.

    Raises IngestError naming the line for invalid UTF-8 (with its byte offset), JSON syntax
    (with the column), non-object lines and over-limit lines, unless skip_bad_rows, which logs
    them into bad_rows instead. An empty (or all-blank) file raises "the file is empty".
    `lines_before` and `offset`: where the stream starts in its file (a chunks.Part).
    """
    lines = LineSplitter(stream, limits.max_line_bytes, lines_before=lines_before, offset=offset)
    seen = False
    while True:
        try:
            raw = next(lines)
            if not raw.strip():
                continue
            seen = True
            record = _parse_json_line(raw, lines.line_no, lines.offset, limits)
        except StopIteration:
            break
        except IngestError as exc:
            seen = True
            if not skip_bad_rows:
                raise
            record_bad_row(bad_rows, exc)
            continue
        yield lines.line_no, record
    if not seen:
        raise IngestError("the file is empty")


# --- JSON arrays --------------------------------------------------------------------------

_NOT_WS = re.compile(r"[^ \t\n\r]")
# How close to the end of the buffer a JSON error may be and still mean "the element goes on
# in the next read" (a cut number, literal or \\u escape is shorter than this).
_TOKEN_MARGIN = 16


class _JsonArrayReader:
    """Streams the elements of a top-level JSON array, one record in memory at a time.

    The text is decoded incrementally; each element is parsed with the C scanner
    (raw_decode) from a buffer that holds the current element and one read ahead. An element
    that does not parse yet is retried with twice the data, so a long one costs O(n log n),
    and refused once it passes max_line_bytes.
    """

    def __init__(self, stream: BinaryIO, limits: Limits) -> None:
        self._stream = stream
        self._limits = limits
        self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self._buf = ""
        self._pos = 0
        self._line = 1  # line and 0-based column of _pos
        self._col = 0
        self._eof = False
        self._bytes = 0
        self._first = True

    # position bookkeeping

    def _advance(self, new: int) -> None:
        newlines = self._buf.count("\n", self._pos, new)
        if newlines:
            self._line += newlines
            self._col = new - self._buf.rfind("\n", self._pos, new) - 1
        else:
            self._col += new - self._pos
        self._pos = new

    def _where(self, at: int) -> tuple[int, int]:
        """(line, 1-based column) of buffer index `at` (at >= _pos)."""
        newlines = self._buf.count("\n", self._pos, at)
        if newlines:
            return self._line + newlines, at - self._buf.rfind("\n", self._pos, at)
        return self._line, self._col + (at - self._pos) + 1

    def _error(self, message: str, at: int | None = None) -> IngestError:
        line, column = self._where(self._pos if at is None else at)
        return IngestError(message, line=line, column=column)

    def _more(self) -> bool:
        """Append the next piece of text (at least as much as is buffered); False at EOF."""
        if self._eof:
            return False
        if self._pos > CHUNK:
            self._buf = self._buf[self._pos :]
            self._pos = 0
        data = self._stream.read(max(CHUNK, len(self._buf) - self._pos))
        try:
            text = self._decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            good = data[: max(exc.start, 0)].decode("utf-8", "replace")
            line = self._line + self._buf.count("\n", self._pos) + good.count("\n")
            raise IngestError(
                f"invalid UTF-8 near byte offset {self._bytes + max(exc.start, 0)}; save the file as UTF-8",
                line=line,
            ) from None
        self._bytes += len(data)
        if not data:
            self._eof = True
        if self._first and text:
            self._first = False
            text = text.removeprefix("\ufeff")
        self._buf += text
        return True

    def _skip_ws(self) -> str | None:
        """Advance past whitespace; return the next character, or None at the end."""
        while True:
            m = _NOT_WS.search(self._buf, self._pos)
            if m:
                self._advance(m.start())
                return self._buf[self._pos]
            self._advance(len(self._buf))
            if not self._more():
                return None

    def _value(self) -> Any:
        limit = self._limits.max_line_bytes
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as exc:
                # Input that merely stops too early fails at its end (or, for a string, at the
                # string's start); anything else is a real syntax error, reported at once.
                cut_short = exc.pos >= len(self._buf) - _TOKEN_MARGIN or exc.msg.startswith("Unterminated")
                if cut_short and not self._eof:
                    if len(self._buf) - self._pos > limit:
                        raise self._error(f"the record is larger than the {human_size(limit)} limit") from None
                    self._more()
                    continue
                raise self._error(exc.msg, exc.pos) from None
            except ValueError as exc:
                raise self._error(str(exc)) from None
            except RecursionError:
                raise self._error("the JSON is nested too deeply") from None
            if end == len(self._buf) and self._more():
                continue  # a number may go on in the next piece
            if end - self._pos > limit:
                raise self._error(f"the record is larger than the {human_size(limit)} limit")
            self._advance(end)
            return value

    def records(self, skip_bad_rows: bool, bad_rows: list | None) -> Iterator[tuple[int, dict]]:
        char = self._skip_ws()
        if char is None:
            raise IngestError("the file is empty")
        if char != "[":
            raise self._error("a JSON file must hold an array of objects (or use JSON Lines)")
        self._advance(self._pos + 1)
        char = self._skip_ws()
        if char == "]":
            self._advance(self._pos + 1)
            self._expect_end()
            raise IngestError("the file holds an empty JSON array")
        while True:
            if char is None:
                raise self._error("the file ends inside the JSON array (no closing ']')")
            line = self._line
            value = self._value()
            try:
                if not isinstance(value, dict):
                    raise IngestError(f"the array element is {_json_kind(value)}, not a JSON object", line=line)
                check_record(value, line, self._limits)
            except IngestError as exc:
                if not skip_bad_rows:
                    raise
                record_bad_row(bad_rows, exc)
            else:
                yield line, value
            char = self._skip_ws()
            if char == ",":
                self._advance(self._pos + 1)
                char = self._skip_ws()
            elif char == "]":
                self._advance(self._pos + 1)
                self._expect_end()
                return
            elif char is None:
                raise self._error("the file ends inside the JSON array (no closing ']')")
            else:
                raise self._error("Expecting ',' delimiter")

    def _expect_end(self) -> None:
        if self._skip_ws() is not None:
            raise self._error("unexpected text after the end of the JSON array")


def read_json_array(
    stream: BinaryIO, limits: Limits, *, skip_bad_rows: bool = False, bad_rows: list | None = None
) -> Iterator[tuple[int, dict]]:
    """Yield (line where the element starts, object) for each element of a JSON array.

    Syntax errors name the line and column and are fatal even with skip_bad_rows (the reader
    cannot find the next element reliably); elements that are not objects or break the caps
    are skippable.
    """
    yield from _JsonArrayReader(stream, limits).records(skip_bad_rows, bad_rows)


# --- CSV / TSV ----------------------------------------------------------------------------


class _CsvLines:
    """Feeds csv.reader decoded physical lines; refuses NUL bytes and invalid UTF-8 per line."""

    def __init__(self, splitter: LineSplitter) -> None:
        self.splitter = splitter

    def __iter__(self) -> _CsvLines:
        return self

    def __next__(self) -> str:
        raw = next(self.splitter)
        if b"\x00" in raw:
            raise IngestError(
                f"the line contains a NUL byte at byte offset {self.splitter.offset + raw.index(0)} "
                "(is this a binary file?)",
                line=self.splitter.line_no,
            )
        # A uniform "\n" terminator: csv keeps it inside quoted fields, canonical_row maps any
        # line break to "\n" anyway.
        return decode_line(raw, self.splitter.line_no, self.splitter.offset) + "\n"


def _check_field_bytes(columns: list[str], fields: list[str], line: int, limits: Limits) -> None:
    for column, field in zip(columns, fields):
        if len(field) * 4 > limits.max_field_bytes and len(field.encode("utf-8")) > limits.max_field_bytes:
            raise IngestError(
                f"the value is larger than the {human_size(limits.max_field_bytes)} field limit",
                line=line, column=column,
            )


def _csv_error(exc: csv.Error, start: int, current: int, limits: Limits) -> tuple[IngestError, bool]:
    """Translate a csv.Error; the flag says whether the reader can go on after it."""
    text = str(exc)
    if "field larger than field limit" in text:
        return IngestError(
            f"a field is larger than the {human_size(limits.max_field_bytes)} limit (is a quote left open?)",
            line=start,
        ), True
    if "unexpected end of data" in text:
        return IngestError(
            "a quoted field that starts on this line is never closed (the quote runs to the end of the file)",
            line=start,
        ), False
    if "expected after" in text:
        return IngestError(
            "unexpected character after a closing quote (a quote inside a quoted field must be doubled)",
            line=current,
        ), True
    return IngestError(text, line=current), True


def _header_names(fields: list[str], line: int) -> list[str]:
    names: list[str] = []
    for index, field in enumerate(fields, start=1):
        name = field.strip() or f"column_{index}"  # pandas writes an unnamed index column
        if name in names:
            raise IngestError(f"the header names column '{name}' twice", line=line, column=name)
        names.append(name)
    return names


def read_delimited(
    stream: BinaryIO,
    *,
    delimiter: str,
    has_header: bool,
    limits: Limits,
    skip_bad_rows: bool = False,
    bad_rows: list | None = None,
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield (line where the row starts, {column: text}) for each row of a CSV/TSV stream.

    RFC 4180 quoting ('"', doubled inside quotes), strict: text after a closing quote or a
    quote open at the end of the file is an error. Blank lines are skipped. Without a header,
    columns are named column_1, column_2, ... from the first row's width.
    Raises IngestError naming the line for: invalid UTF-8, NUL bytes, over-long lines or
    fields, more than max_columns, rows whose width differs from the header (ragged), an open
    quote at the end, an empty file, a header without rows. With skip_bad_rows, row-level
    errors after the header go to bad_rows instead.
    """
    splitter = LineSplitter(stream, limits.max_line_bytes)
    reader = csv.reader(_CsvLines(splitter), delimiter=delimiter, quotechar='"', doublequote=True, strict=True)
    columns: list[str] | None = None
    rows = skipped = 0
    while True:
        start = splitter.line_no + 1
        fatal = columns is None  # nothing can be read without the header
        try:
            # csv's field limit is process-wide (default 128 Ki characters): set ours only
            # around each read, so other code in the worker never sees it. Characters <= bytes,
            # so this is a pre-filter; the exact byte check follows.
            previous_limit = csv.field_size_limit(limits.max_field_bytes)
            try:
                fields = next(reader)
            except csv.Error as exc:
                error, can_go_on = _csv_error(exc, start, splitter.line_no, limits)
                fatal = fatal or not can_go_on
                raise error from None
            finally:
                csv.field_size_limit(previous_limit)
            if not fields:
                continue
            if columns is None:
                if len(fields) > limits.max_columns:
                    raise IngestError(
                        f"the {'header' if has_header else 'first row'} has {len(fields)} columns; "
                        f"at most {limits.max_columns} are accepted",
                        line=start,
                    )
                if has_header:
                    columns = _header_names(fields, start)
                    continue
                columns = [f"column_{i}" for i in range(1, len(fields) + 1)]
            if len(fields) != len(columns):
                raise IngestError(
                    f"the row has {len(fields)} fields but the {'header' if has_header else 'first row'} "
                    f"has {len(columns)} (check the delimiter and the quoting)",
                    line=start,
                )
            if max(map(len, fields)) * 4 > limits.max_field_bytes:
                _check_field_bytes(columns, fields, start, limits)
            record = dict(zip(columns, fields))
        except StopIteration:
            break
        except IngestError as exc:
            if fatal or not skip_bad_rows:
                raise
            skipped += 1
            record_bad_row(bad_rows, exc)
            continue
        rows += 1
        yield start, record
    if columns is None:
        raise IngestError("the file is empty")
    if rows == 0 and skipped == 0:
        raise IngestError("the file has a header but no rows")


# --- sniffing (used by detect_format) -------------------------------------------------------

DELIMITERS = (",", "\t", ";", "|")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?%?")


def _sample_rows(sample: str, delimiter: str, complete: bool) -> list[list[str]]:
    try:
        rows = [r for r in csv.reader(io.StringIO(sample), delimiter=delimiter, quotechar='"') if r]
    except csv.Error:
        return []
    return rows if complete else rows[:-1] or rows  # the last row of a cut sample may be partial


def _width_if_consistent(rows: list[list[str]]) -> int:
    widths = {len(r) for r in rows}
    return widths.pop() if len(widths) == 1 else 0


def looks_like_header(first: list[str]) -> bool:
    """A first row of unique, short, non-numeric names (the first may be empty: an index)."""
    cells = [c.strip() for c in first]
    if len(set(cells)) != len(cells):
        return False
    for index, cell in enumerate(cells):
        if not cell:
            if index == 0 and len(cells) > 1:
                continue
            return False
        if len(cell) > 128 or "\n" in cell or _NUMBER.fullmatch(cell):
            return False
    return True


def sniff_delimited(sample: str, complete: bool, preferred: str | None = None) -> tuple[str, bool]:
    """(delimiter, has_header) for a text sample (the first 64 KiB; `complete` if that is the
    whole file).

    csv.Sniffer proposes a delimiter among , TAB ; | and the choice is kept when the sample
    parses into rows of one width above 1; otherwise the first candidate that does (the
    file-name hint first, then , TAB ; |). Header: csv.Sniffer's vote, or a first row that
    looks like names (looks_like_header) - datasets of text columns usually fool the Sniffer.
    """
    if not complete and "\n" in sample:
        sample = sample[: sample.rindex("\n") + 1]
    sniffer = csv.Sniffer()
    try:
        sniffed: str | None = sniffer.sniff(sample, delimiters="".join(DELIMITERS)).delimiter
    except csv.Error:
        sniffed = None
    order = list(dict.fromkeys(d for d in (sniffed, preferred, *DELIMITERS) if d))
    delimiter = next(
        (d for d in order if _width_if_consistent(_sample_rows(sample, d, complete)) > 1),
        preferred or sniffed or ",",
    )
    rows = _sample_rows(sample, delimiter, complete)
    if not rows:
        return delimiter, True
    try:
        sniffer_says = len(rows) > 1 and sniffer.has_header(sample)
    except csv.Error:
        sniffer_says = False
    return delimiter, bool(sniffer_says or looks_like_header(rows[0]))
