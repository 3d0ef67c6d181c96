"""What an upload is: its format, compression and CSV dialect, from its content first.

The content decides; the file name only serves as a cross-check (a mismatch is an error,
so that a mislabelled upload is caught before import rather than imported as garbage) and as
a tie-breaker for the CSV delimiter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .columnar import HF_MARKERS, hf_dir_files
from .errors import DEFAULT_LIMITS, RATIO_CHECK_AFTER_BYTES, IngestError, Limits
from .streams import CHUNK, human_size, open_payload, zip_data_entry
from .text import sniff_delimited

# Inflated at upload to check the compression ratio early (a few milliseconds).
INFLATION_PROBE_BYTES = 4 * 2**20

KINDS = ("jsonl", "json", "csv", "tsv", "parquet", "hf_dir")
COMPRESSIONS = (None, "gzip", "zip")
SNIFF_BYTES = 64 * 1024  # what csv.Sniffer and the content checks look at

_KIND_NAMES = {
    "jsonl": "JSON Lines", "json": "a JSON array", "csv": "CSV", "tsv": "TSV", "parquet": "Parquet",
    "hf_dir": "a datasets folder", "gzip": "gzip-compressed", "zip": "a zip archive",
}
# Extension -> the content kinds it may hold. JSON and JSON Lines are often named for each
# other, and a ".csv" is often tab- or semicolon-separated, so those pairs are compatible.
_EXTENSIONS: dict[str, set[str]] = {
    ".jsonl": {"jsonl", "json"}, ".ndjson": {"jsonl", "json"}, ".json": {"json", "jsonl"},
    ".csv": {"csv", "tsv"}, ".tsv": {"tsv", "csv"}, ".tab": {"tsv", "csv"},
    ".txt": {"jsonl", "json", "csv", "tsv"},
    ".parquet": {"parquet"}, ".pq": {"parquet"},
    ".gz": {"gzip"}, ".gzip": {"gzip"}, ".zip": {"zip"},
}
_PREFERRED_DELIMITER = {".csv": ",", ".tsv": "\t", ".tab": "\t"}


@dataclass(frozen=True)
class SourceFormat:
    """How to read an upload.

    kind: "jsonl", "json" (a top-level array of objects), "csv", "tsv", "parquet" or "hf_dir"
        (a folder written by datasets' save_to_disk).
    compression: None, "gzip" or "zip" (the archive's one data entry is read).
    delimiter, has_header: the CSV/TSV dialect (None for other kinds); read_records can
        override both.
    member: the name of the zip entry read, for messages (None otherwise).
    """

    kind: str
    compression: str | None = None
    delimiter: str | None = None
    has_header: bool | None = None
    member: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown format kind {self.kind!r}")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression {self.compression!r}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceFormat:
        return cls(**{key: data.get(key) for key in ("kind", "compression", "delimiter", "has_header", "member")})


def _extension(name: str | None) -> str:
    return PurePosixPath(name).suffix.lower() if name else ""


def _check_name(name: str | None, content: str) -> None:
    ext = _extension(name)
    allowed = _EXTENSIONS.get(ext)
    if allowed is not None and content not in allowed:
        raise IngestError(f"the file is named {ext} but its content is {_KIND_NAMES[content]}")


def _binary_kind(head: bytes) -> str | None:
    if head.startswith(b"\x1f\x8b"):
        return "gzip"
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return "zip"
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith((b"ARROW1", b"\xff\xff\xff\xff")):
        raise IngestError(
            "a bare Arrow file is not accepted; import the folder written by datasets' save_to_disk, "
            "or a Parquet file"
        )
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise IngestError("the file is UTF-16 encoded; save it as UTF-8")
    return None


def _text_format(stream, name: str | None) -> SourceFormat:
    """JSON array, JSON Lines or delimited text, from the first non-blank character and a
    64 KiB sample."""
    sample = stream.read(SNIFF_BYTES)
    if sample.startswith(b"\xef\xbb\xbf"):
        sample = sample[3:]
    head = sample.lstrip()
    while not head:  # leading blank space longer than the sample: read on, bounded
        more = stream.read(SNIFF_BYTES)
        if not more:
            raise IngestError("the file is empty")
        sample = more
        head = sample.lstrip()
    complete = len(sample) < SNIFF_BYTES and not stream.read(1)
    if head[:1] == b"[":
        kind = "json"
    elif head[:1] == b"{":
        kind = "jsonl"
    else:
        text = sample.decode("utf-8", "replace")
        ext = _extension(name)
        delimiter, has_header = sniff_delimited(text, complete, _PREFERRED_DELIMITER.get(ext))
        kind = "tsv" if delimiter == "\t" else "csv"
        _check_name(name, kind)
        return SourceFormat(kind, delimiter=delimiter, has_header=has_header)
    _check_name(name, kind)
    return SourceFormat(kind)


def detect_format(
    path: Path | str, filename: str | None = None, *, limits: Limits = DEFAULT_LIMITS
) -> SourceFormat:
    """Detect how to read `path` (a file, or a folder saved with datasets' save_to_disk).

    `filename` is the name the person uploaded (the stored file may be named otherwise); its
    extension is cross-checked against the content. gzip and zip contents are detected
    through their (capped) inflation; the inner name (data.jsonl.gz -> data.jsonl, the zip
    entry name) is cross-checked too.
    Raises IngestError for an empty file, a name that disagrees with the content, nested
    compression, Parquet inside an archive, UTF-16 text, a bare Arrow file, or a folder that
    is not a saved dataset.
    """
    path = Path(path)
    name = filename or path.name
    if path.is_dir():
        if not any((path / marker).is_file() for marker in HF_MARKERS) and not (path / "dataset_dict.json").is_file():
            raise IngestError(
                "the folder is not a dataset saved with datasets' save_to_disk (no state.json or dataset_info.json)"
            )
        hf_dir_files(path)
        return SourceFormat("hf_dir")
    if path.stat().st_size == 0:
        raise IngestError("the file is empty")
    with open(path, "rb") as f:
        head = f.read(8)
    outer = _binary_kind(head)
    if outer == "parquet" or outer is None:
        if outer == "parquet":
            _check_name(name, "parquet")
            return SourceFormat("parquet")
        with open(path, "rb") as f:
            return _text_format(f, name)
    _check_name(name, outer)
    if outer == "gzip":
        inner_name = PurePosixPath(name).stem if _extension(name) in (".gz", ".gzip") else None
        member = None
    else:
        with open(path, "rb") as f:
            member = zip_data_entry(f, limits).filename
        inner_name = member
    with open_payload(path, outer, limits) as stream:
        inner_head = stream.read(8)
        if not inner_head:
            raise IngestError("the file is empty" if outer == "gzip" else f"the archive entry '{member}' is empty")
        inner = _binary_kind(inner_head)
        if inner in ("gzip", "zip"):
            raise IngestError("a compressed file inside a compressed file is not accepted")
        if inner == "parquet":
            raise IngestError(
                "Parquet inside an archive is not accepted: Parquet is compressed already, upload the .parquet file"
            )
    with open_payload(path, outer, limits) as stream:
        fmt = _text_format(stream, inner_name)
    if outer == "gzip":
        _check_gzip_declared_size(path, limits)
    with open_payload(path, outer, limits) as stream:
        # Inflate a head sample now, at upload: a bomb trips the ratio cap within its first MiB
        # instead of half-way through an import (it was found after 436,000 rows were written).
        inflated = 0
        while inflated < INFLATION_PROBE_BYTES and (piece := stream.read(CHUNK)):
            inflated += len(piece)
    return SourceFormat(fmt.kind, outer, fmt.delimiter, fmt.has_header, member)


def _check_gzip_declared_size(path: Path, limits: Limits) -> None:
    """The trailer's ISIZE (the inflated size modulo 2^32 of the last member) against the ratio
    and size caps: a file whose own trailer announces a bomb is refused without inflating."""
    compressed = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(compressed - 4, 0))
        declared = int.from_bytes(f.read(4), "little")
    if declared >= RATIO_CHECK_AFTER_BYTES and declared > limits.max_compression_ratio * compressed:
        raise IngestError(
            f"the gzip data declares {human_size(declared)} inflated from {human_size(compressed)}, over "
            f"{limits.max_compression_ratio:g} times its size; refusing it as a likely compression bomb"
        )
