"""Column mapping and the canonical row: the one shape every format is normalized into, and
the hashes that make dataset versions content-addressed.

Why a canonical row: a version's hash must depend on the data, not on the container. The same
table exported as JSONL, CSV, Parquet or a datasets folder must hash the same, so values are
normalized before hashing by these rules:

- Text roles (id -> ext_id, prompt, response, label, reference) become strings: strings as
  they are, numbers and booleans as JSON writes them (1 -> "1", 0.5 -> "0.5", true -> "true"),
  dates as ISO 8601. CSV cannot tell an empty cell from a missing one, so an empty string is
  None (missing) in every format. Lists and objects are refused in a text role.
- messages: a list of {"role", "content"} (a JSON string holding that list is parsed, which
  is how CSV carries it); an empty list is None.
- metadata: every unmapped column. Top-level scalars follow the text rule (strings; numbers
  and booleans as JSON text), because CSV has no types; null and empty values are left out,
  because CSV cannot express them and JSONL rows often omit keys. Lists and objects (JSON,
  Parquet structs) are kept as JSON values, their strings normalized like all text.
- All text: line breaks \\r\\n and lone \\r become \\n, then Unicode NFC. Nothing else: no
  trimming and no HTML escaping (pages escape when they render). NUL characters and unpaired
  surrogates are refused: PostgreSQL text cannot store them.
- Floats that are NaN (pandas' missing value) are None; infinities are refused.

A row's split (train, validation, ...) is not part of the row: the row hash is the content's
alone, so a row keeps its hash when it moves to another split and diffs can tell a move from
an edit. The split is part of the version: its content hash mixes each row's split in
(VersionHasher), so two versions that differ only in split assignment hash differently.
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import orjson

from .errors import IngestError

ROLES = ("id", "prompt", "response", "messages", "label", "reference", "split")
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
# Role -> key of the canonical row ("id" is the source's own id, kept as ext_id).
# "split" is no key of the row: canonical_split() reads it (see the module docstring).
_ROW_KEYS = {"id": "ext_id", "prompt": "prompt", "response": "response", "messages": "messages",
             "label": "label", "reference": "reference"}
# A split name is stored in a 16-character indexed column and appears in page addresses.
SPLIT_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,16}")
ROW_KEYS = ("ext_id", "prompt", "response", "messages", "label", "reference", "metadata")

_FORBIDDEN = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True)
class ColumnMapping:
    """Which source column plays which role: {column name: role}, role in ROLES.

    Each role is given to at most one column; unmapped columns become metadata.
    Raises IngestError (column = the offending column) for an unknown role or a role given
    twice. A mapping need not name prompt or messages; check_columns() demands it.
    """

    roles: dict[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        roles = dict(self.roles)  # a private copy: the instance is meant to be immutable
        seen: dict[str, str] = {}
        for column, role in roles.items():
            if not isinstance(column, str) or not column:
                raise IngestError(f"column names must be non-empty strings, not {column!r}")
            if role not in ROLES:
                raise IngestError(f"unknown role {role!r}; the roles are {', '.join(ROLES)}", column=column)
            if role in seen:
                raise IngestError(
                    f"the role '{role}' is given to two columns, '{seen[role]}' and '{column}'", column=column
                )
            seen[role] = column
        object.__setattr__(self, "roles", roles)

    def column_for(self, role: str) -> str | None:
        """The column mapped to `role`, or None."""
        return next((column for column, r in self.roles.items() if r == role), None)

    def check_columns(self, columns: list[str]) -> None:
        """Raise IngestError unless every mapped column is among `columns` and a prompt or
        messages column is mapped (a row needs one of them)."""
        for column in self.roles:
            if column not in columns:
                raise IngestError("the mapped column is not in the file", column=column)
        if self.column_for("prompt") is None and self.column_for("messages") is None:
            raise IngestError("map a column to 'prompt' or to 'messages'")

    def as_dict(self) -> dict[str, str]:
        return dict(self.roles)


# --- values -------------------------------------------------------------------------------


def _text(value: str, line: int, column: str) -> str:
    if value.isascii():  # the common case: ASCII is NFC and has no surrogates
        if "\x00" in value:
            raise IngestError("the text contains a NUL character", line=line, column=column)
        return value.replace("\r\n", "\n").replace("\r", "\n") if "\r" in value else value
    bad = _FORBIDDEN.search(value)
    if bad:
        what = "a NUL character" if bad.group() == "\x00" else "an unpaired surrogate (invalid Unicode)"
        raise IngestError(f"the text contains {what}", line=line, column=column)
    if "\r" in value:
        value = value.replace("\r\n", "\n").replace("\r", "\n")
    if not unicodedata.is_normalized("NFC", value):
        value = unicodedata.normalize("NFC", value)
    return value


def _scalar_text(value: Any, line: int, column: str) -> str | None:
    """A scalar as canonical text, None for missing; lists/objects raise."""
    if type(value) is str:
        return _text(value, line, column) or None
    if value is None:
        return None
    if isinstance(value, str):
        return _text(value, line, column) or None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            raise IngestError("infinite numbers are not accepted", line=line, column=column)
        return json.dumps(value)
    if isinstance(value, decimal.Decimal):
        if value.is_nan():
            return None
        if value.is_infinite():
            raise IngestError("infinite numbers are not accepted", line=line, column=column)
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value.total_seconds())
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return _text(bytes(value).decode("utf-8"), line, column) or None
        except UnicodeDecodeError:
            raise IngestError("the column holds binary data, not text", line=line, column=column) from None
    if isinstance(value, (list, tuple, dict)):
        kind = "an object" if isinstance(value, dict) else "a list"
        raise IngestError(f"the value is {kind}, not text", line=line, column=column)
    raise IngestError(f"values of type {type(value).__name__} are not accepted", line=line, column=column)


def json_value(value: Any, line: int, column: str) -> Any:
    """A nested metadata value as JSON: containers kept, strings normalized, other scalars
    turned into JSON types (Parquet can hold dates, decimals, bytes, map entries)."""
    if isinstance(value, dict):
        return {str(key): json_value(item, line, column) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(item, tuple) and len(item) == 2 for item in value):
            # pyarrow returns a map column as a list of (key, value) pairs
            return {str(key): json_value(item, line, column) for key, item in value}
        return [json_value(item, line, column) for item in value]
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) else _finite(value, line, column)
    if isinstance(value, str):
        return _text(value, line, column)
    return _scalar_text(value, line, column)


def _finite(value: float, line: int, column: str) -> float:
    if math.isinf(value):
        raise IngestError("infinite numbers are not accepted", line=line, column=column)
    return value


def _messages(value: Any, line: int, column: str) -> list[dict[str, str]] | None:
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise IngestError(f"the messages are not valid JSON ({exc})", line=line, column=column) from None
    if not isinstance(value, (list, tuple)):
        raise IngestError("messages must be a list of {role, content} objects", line=line, column=column)
    if not value:
        return None
    messages = []
    for number, message in enumerate(value, start=1):
        if not isinstance(message, dict):
            raise IngestError(f"message {number} is not an object with role and content", line=line, column=column)
        extra = sorted(k for k, v in message.items() if k not in ("role", "content") and v is not None)
        if extra:
            raise IngestError(
                f"message {number} has keys other than role and content: {', '.join(map(str, extra))}",
                line=line, column=column,
            )
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or role not in MESSAGE_ROLES:
            raise IngestError(
                f"message {number} has role {role!r}; it must be one of {', '.join(MESSAGE_ROLES)}",
                line=line, column=column,
            )
        if not isinstance(content, str):
            raise IngestError(f"message {number} has no text content", line=line, column=column)
        messages.append({"role": role, "content": _text(content, line, column)})
    return messages


def canonical_row(record: dict[str, Any], mapping: ColumnMapping, line: int) -> dict[str, Any]:
    """The canonical row of one source record (rules in the module docstring).

    Returns a dict with exactly the keys ext_id, prompt, response, messages, label,
    reference, metadata. A mapped column absent from the record gives None for its role.
    Raises IngestError naming `line` and the column for a value that breaks the rules, and
    for a row with neither prompt nor messages.
    """
    row: dict[str, Any] = dict.fromkeys(ROW_KEYS)
    roles = mapping.roles
    for column, role in roles.items():
        value = record.get(column)
        if role == "split":
            continue  # canonical_split()
        if role == "messages":
            row["messages"] = _messages(value, line, column)
        elif type(value) is str and value.isascii() and "\x00" not in value and "\r" not in value:
            row[_ROW_KEYS[role]] = value or None  # plain ASCII text, the common case: already canonical
        else:
            row[_ROW_KEYS[role]] = _scalar_text(value, line, column)
    metadata: dict[str, Any] = {}
    for column, value in record.items():
        if column in roles:
            continue
        column = str(column)
        if type(value) is str and value.isascii() and "\x00" not in value and "\r" not in value:
            value = value or None
        elif isinstance(value, (dict, list, tuple)):
            value = json_value(value, line, column)
        else:
            value = _scalar_text(value, line, column)
        if value is not None:
            metadata[column if column.isascii() and "\x00" not in column else _text(column, line, column)] = value
    row["metadata"] = metadata
    if row["prompt"] is None and row["messages"] is None:
        column = mapping.column_for("prompt") or mapping.column_for("messages")
        if column is None:
            raise IngestError("no column is mapped to 'prompt' or 'messages'", line=line)
        raise IngestError("the row has no prompt (or messages)", line=line, column=column)
    return row


def canonical_split(record: dict[str, Any], mapping: ColumnMapping, line: int) -> str:
    """The split named by the record's column mapped to 'split' ("" when none is mapped or the
    cell is empty). Raises IngestError naming `line` and the column for a name that is not 1 to
    16 letters, digits, '_', '-' or '.', or for a list or object."""
    column = mapping.column_for("split")
    if column is None:
        return ""
    name = _scalar_text(record.get(column), line, column)
    if name is None:
        return ""
    if not SPLIT_NAME.fullmatch(name):
        raise IngestError(f"the split {name[:40]!r} is not a split name (1 to 16 letters, digits, '_', '-' or '.')",
                          line=line, column=column)
    return name


# --- hashing ------------------------------------------------------------------------------


# One encoder for every row: json.dumps with options builds a new one per call.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


_ROW_KEY_SET = frozenset(ROW_KEYS)
_TEXT_KEYS = tuple(_ROW_KEY_SET - {"messages", "metadata"})
_TEXT_TYPES = frozenset({str, type(None)})
_STR = frozenset({str})


def canonical_json(row: dict[str, Any]) -> bytes:
    """The row as canonical JSON bytes: sorted keys, no spaces, UTF-8 (not \\u-escaped).
    Byte-identical for equal rows, so it is what row hashes are taken over."""
    if _text_only(row):
        # orjson writes text, None and containers of them byte for byte as the encoder below
        # does (tested), five times faster; numbers it may write differently, so never those.
        try:
            return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # e.g. a lone surrogate: the encoder's own error, below
            pass
    return _CANONICAL_ENCODER.encode(row).encode("utf-8")


def _text_only(row: dict[str, Any]) -> bool:
    """A canonical row whose values are all text or None (metadata and messages included)."""
    # Sets of types: one pass in C per container, as this runs once per row of every import.
    if row.keys() != _ROW_KEY_SET or not {type(row[key]) for key in _TEXT_KEYS} <= _TEXT_TYPES:
        return False
    metadata, messages = row["metadata"], row["messages"]
    if type(metadata) is not dict or not set(map(type, metadata.values())) <= _STR:
        return False
    return messages is None or (type(messages) is list and all(
        type(message) is dict and set(map(type, message.values())) <= _STR for message in messages))


def row_hash(row: dict[str, Any]) -> str:
    """sha256 hex digest of canonical_json(row)."""
    return hashlib.sha256(canonical_json(row)).hexdigest()


def split_entry(digest: bytes, split: str) -> bytes:
    """What a row adds to its version's hash: its 32-byte row digest when it has no split (so
    the hash of a version without splits is what it always was), else the sha256 of the split
    name and the digest (a version's split assignment is part of its identity)."""
    if not split:
        return digest
    return hashlib.sha256(b"split\x00" + split.encode("utf-8") + b"\x00" + digest).digest()


class VersionHasher:
    """The content hash of a dataset version: sha256 over one 32-byte entry per canonical row,
    in order (split_entry: the row's digest, mixed with its split when it has one). It depends
    only on the rows and their splits (not on the source format), and can be recomputed from
    stored row hashes and splits with update_row_hash(). No rows: sha256 of nothing.

    Versions made before splits counted kept their stored hash (their parent's, for a split).
    """

    def __init__(self, digests_to: BinaryIO | None = None) -> None:
        self._hash = hashlib.sha256()
        self.count = 0
        # A part of a version read elsewhere writes its row digests out, in order, for the
        # whole's hasher (update_digests): on disk, so that memory does not grow with the rows.
        self._digests_to = digests_to

    def update(self, row: dict[str, Any], split: str = "") -> str:
        """Add the next row, in `split` ("" for none); return its row hash (to store beside it)."""
        digest = hashlib.sha256(canonical_json(row)).digest()
        self._add(split_entry(digest, split))
        return digest.hex()

    def update_row_hash(self, digest: str, split: str = "") -> None:
        """Add the next row by its row_hash() hex digest and its split."""
        self._add(split_entry(bytes.fromhex(digest), split))

    def update_digests(self, entries: bytes) -> None:
        """Add rows by their 32-byte entries, in order (what another wrote to digests_to)."""
        self._hash.update(entries)
        self.count += len(entries) // 32

    def _add(self, digest: bytes) -> None:
        self._hash.update(digest)
        self.count += 1
        if self._digests_to is not None:
            self._digests_to.write(digest)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
