"""Byte streams over an upload: the plain file, a gzip file or the one data entry of a zip,
inflated with running caps, and a bounded line splitter.

Nothing here trusts sizes written in headers to bound work: every inflated byte is counted
as it is produced, so a bomb is stopped a few MiB into inflation.
Headers are still checked first where they exist (zip), so a declared bomb costs nothing.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from .errors import RATIO_CHECK_AFTER_BYTES, IngestError, Limits

# Read size for files and inflation. 64 KiB keeps syscalls few and memory flat; it also
# bounds how far past a cap one read can go before the check runs.
CHUNK = 64 * 1024

_GZIP_WBITS = 31  # zlib: gzip header and trailer (CRC-checked by zlib)
_RAW_DEFLATE_WBITS = -15  # zlib: the bare deflate stream of a zip entry
_BOM = b"\xef\xbb\xbf"

# Entries a zip may list besides its one data file.
_ZIP_NOISE = ("__MACOSX/",)
_ZIP_NOISE_NAMES = {".DS_Store", "Thumbs.db"}
# Per-entry allowance for the central directory (46 fixed bytes + name, extra, comment).
# Bounds what zipfile reads into memory before we can count entries ourselves.
_ZIP_CD_BYTES_PER_ENTRY = 4096


def human_size(n: float) -> str:
    """1536 -> '1.5 KiB'; used in messages about limits."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{int(n)} bytes" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


class _InflatingReader(io.RawIOBase):
    """Raw stream of the inflated bytes of `source`, checking the caps after every piece.

    `wbits` is a zlib window setting (gzip, raw deflate) or None for stored data.
    `input_size` limits how many compressed bytes are read (a zip entry); `declared_size` and
    `crc` are what a zip entry claims, verified while and after inflating.
    """

    def __init__(
        self,
        source: BinaryIO,
        *,
        wbits: int | None,
        limits: Limits,
        what: str,
        input_size: int | None = None,
        declared_size: int | None = None,
        crc: int | None = None,
    ) -> None:
        super().__init__()
        self._src = source
        self._wbits = wbits
        self._d = zlib.decompressobj(wbits) if wbits is not None else None
        self._limits = limits
        self._what = what
        self._input_left = input_size
        self._declared = declared_size
        self._crc_expected = crc
        self._crc = 0
        self._pending = b""
        self._finished = False
        self.bytes_in = 0
        self.bytes_out = 0

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        if not self.closed:
            self._src.close()
        super().close()

    def _read_input(self) -> bytes:
        n = CHUNK if self._input_left is None else min(CHUNK, self._input_left)
        data = self._src.read(n) if n else b""
        if self._input_left is not None:
            self._input_left -= len(data)
        self.bytes_in += len(data)
        return data

    def readinto(self, buffer) -> int:  # type: ignore[override]
        want = len(buffer)
        while not self._finished and want:
            if self._d is not None and self._d.eof:
                self._after_stream_end()
                continue
            data = self._pending or self._read_input()
            self._pending = b""
            if not data:
                if self._d is not None:
                    raise IngestError(f"{self._what} is truncated (the compressed data ends early)")
                self._finish()
                break
            if self._d is None:
                out, self._pending = data[:want], data[want:]
            else:
                try:
                    out = self._d.decompress(data, want)
                except zlib.error as exc:
                    raise IngestError(f"{self._what} is corrupt ({exc})") from None
                self._pending = self._d.unconsumed_tail
            if out:
                self._account(out)
                buffer[: len(out)] = out
                return len(out)
        return 0

    def _account(self, out: bytes) -> None:
        self.bytes_out += len(out)
        limits = self._limits
        if self._crc_expected is not None:
            self._crc = zlib.crc32(out, self._crc)
        if self._declared is not None and self.bytes_out > self._declared:
            raise IngestError(
                f"{self._what} inflates to more than the {self._declared} bytes it declares; "
                "refusing a corrupt or forged archive"
            )
        if self.bytes_out > limits.max_uncompressed_bytes:
            raise IngestError(
                f"{self._what} inflates to more than the {human_size(limits.max_uncompressed_bytes)} limit"
            )
        # Compressed bytes the inflater has consumed, not merely read: a chunk read ahead would
        # let a bomb inflate CHUNK times the ratio before this check saw it.
        consumed = self.bytes_in - len(self._pending)
        if (
            self.bytes_out >= RATIO_CHECK_AFTER_BYTES
            and self.bytes_out > limits.max_compression_ratio * max(consumed, 1)
        ):
            raise IngestError(
                f"{self._what} inflates more than {limits.max_compression_ratio:g} times its compressed "
                "size; refusing it as a likely compression bomb"
            )

    def _after_stream_end(self) -> None:
        rest = self._d.unused_data if self._d is not None else b""
        if self._wbits != _GZIP_WBITS:
            self._finish()
            return
        # gzip allows several members back to back, and zero padding after the last.
        while True:
            rest = rest.lstrip(b"\x00")
            if rest:
                break
            rest = self._read_input()
            if not rest:
                self._finish()
                return
        self._d = zlib.decompressobj(_GZIP_WBITS)
        self._pending = rest

    def _finish(self) -> None:
        self._finished = True
        if self._declared is not None and self.bytes_out != self._declared:
            raise IngestError(
                f"{self._what} holds {self.bytes_out} bytes but declares {self._declared}; "
                "refusing a corrupt or forged archive"
            )
        if self._crc_expected is not None and self._crc != self._crc_expected:
            raise IngestError(f"{self._what} is corrupt (CRC mismatch)")


# --- zip ----------------------------------------------------------------------------------


def _check_zip_directory(f: BinaryIO, limits: Limits) -> None:
    """Count entries from the end-of-central-directory record, before zipfile parses (and
    holds in memory) the directory itself."""
    size = f.seek(0, io.SEEK_END)
    tail_len = min(size, 22 + 65535)  # EOCD record + the longest archive comment
    f.seek(size - tail_len)
    tail = f.read(tail_len)
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        raise IngestError("the zip archive is corrupt (no end-of-central-directory record)")
    entries, cd_size = struct.unpack("<HL", tail[at + 10 : at + 16])
    if entries == 0xFFFF or cd_size == 0xFFFFFFFF:  # ZIP64: the real numbers are in its record
        locator = tail.rfind(b"PK\x06\x07", 0, at)
        if locator >= 0 and len(tail) - locator >= 20:
            (record_at,) = struct.unpack("<Q", tail[locator + 8 : locator + 16])
            f.seek(record_at)
            record = f.read(56)
            if len(record) == 56 and record[:4] == b"PK\x06\x06":
                entries, cd_size = struct.unpack("<QQ", record[32:48])
    if entries > limits.max_archive_entries:
        raise IngestError(
            f"the zip archive lists {entries} entries; at most {limits.max_archive_entries} are accepted "
            "(it must hold one data file)"
        )
    if cd_size > max(entries, 1) * _ZIP_CD_BYTES_PER_ENTRY:
        raise IngestError("the zip archive is corrupt (its central directory is larger than its entries need)")
    f.seek(0)


def _is_noise(name: str) -> bool:
    return name.endswith("/") or name.startswith(_ZIP_NOISE) or PurePosixPath(name).name in _ZIP_NOISE_NAMES


def _safe_member_name(name: str) -> bool:
    """A relative name with no '..' part, under either separator: nothing is extracted today, but a
    name that would escape a folder if it were is refused, as an extracting tool would refuse it."""
    parts = name.replace("\\", "/").split("/")
    return not (name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts
                or "\x00" in name)


def zip_data_entry(f: BinaryIO, limits: Limits) -> zipfile.ZipInfo:
    """The one data entry of the zip archive open as `f`, after every check that needs no
    inflation: entry count, exactly one data file, method, encryption, declared size and ratio.
    """
    _check_zip_directory(f, limits)
    try:
        archive = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise IngestError(f"the zip archive is corrupt ({exc})") from None
    infos = archive.infolist()
    if len(infos) > limits.max_archive_entries:  # the EOCD count can lie; the directory cannot
        raise IngestError(
            f"the zip archive lists {len(infos)} entries; at most {limits.max_archive_entries} are accepted"
        )
    data = [info for info in infos if not _is_noise(info.filename)]
    if len(data) != 1:
        names = ", ".join(info.filename for info in data[:5]) + (", ..." if len(data) > 5 else "")
        raise IngestError(
            f"a zip archive must contain exactly one data file; this one contains {len(data)}"
            + (f" ({names})" if data else "")
        )
    info = data[0]
    what = f"the archive entry '{info.filename}'"
    if not _safe_member_name(info.filename):
        raise IngestError(f"{what} has an unsafe name (an absolute path, a drive, or a '..' part); "
                          "zip the data file at the top of the archive")
    if info.flag_bits & 0x1:
        raise IngestError(f"{what} is encrypted")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise IngestError(f"{what} uses a compression method other than deflate (method {info.compress_type})")
    if info.file_size > limits.max_uncompressed_bytes:
        raise IngestError(
            f"{what} declares {human_size(info.file_size)}, over the "
            f"{human_size(limits.max_uncompressed_bytes)} limit"
        )
    if (
        info.file_size >= RATIO_CHECK_AFTER_BYTES
        and info.file_size > limits.max_compression_ratio * max(info.compress_size, 1)
    ):
        raise IngestError(
            f"{what} declares a compression ratio over {limits.max_compression_ratio:g}; "
            "refusing it as a likely compression bomb"
        )
    return info


def _open_zip_entry(f: BinaryIO, info: zipfile.ZipInfo, limits: Limits) -> _InflatingReader:
    """Inflate the entry ourselves from its local header, so every byte passes the caps."""
    f.seek(info.header_offset)
    header = f.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise IngestError(f"the zip archive is corrupt (bad local header for '{info.filename}')")
    name_len, extra_len = struct.unpack("<HH", header[26:30])
    f.seek(info.header_offset + 30 + name_len + extra_len)
    return _InflatingReader(
        f,
        wbits=_RAW_DEFLATE_WBITS if info.compress_type == zipfile.ZIP_DEFLATED else None,
        limits=limits,
        what=f"the archive entry '{info.filename}'",
        input_size=info.compress_size,
        declared_size=info.file_size,
        crc=info.CRC,
    )


@contextmanager
def open_payload(path: Path, compression: str | None, limits: Limits) -> Iterator[BinaryIO]:
    """Open the data bytes of `path`: the file itself, its gzip content, or its zip entry.

    Yields a buffered binary stream; closes everything on exit.
    Raises IngestError for archive problems, including caps hit while reading.
    """
    raw = open(path, "rb")  # noqa: SIM115 - closed by `stream` below, or in the except
    try:
        if compression is None:
            stream: BinaryIO = raw
        elif compression == "gzip":
            stream = io.BufferedReader(
                _InflatingReader(raw, wbits=_GZIP_WBITS, limits=limits, what="the gzip data"), CHUNK
            )
        elif compression == "zip":
            info = zip_data_entry(raw, limits)
            stream = io.BufferedReader(_open_zip_entry(raw, info, limits), CHUNK)
        else:
            raise IngestError(f"unknown compression {compression!r}")
    except BaseException:
        raw.close()
        raise
    with stream:
        yield stream


# --- lines --------------------------------------------------------------------------------

_EOL = re.compile(rb"\r\n|\r|\n")


class LineSplitter:
    """Iterates the lines of a binary stream as bytes, without their terminator.

    Terminators are \\n, \\r\\n and a lone \\r (old Mac files). A UTF-8 BOM at the start is
    dropped. Each chunk is split at once (bytes.splitlines, which breaks at exactly those
    three); only the unfinished last line is carried over. A line longer than
    `max_line_bytes` raises IngestError once that much of it is buffered, never holding more;
    the splitter stays usable and the next call resumes after the end of that line (so
    callers can skip it).

    Attributes: line_no (1-based number of the line last returned or refused) and offset
    (byte offset of its start in the stream).
    """

    def __init__(self, stream: BinaryIO, max_line_bytes: int, *, lines_before: int = 0, offset: int = 0) -> None:
        """`lines_before` and `offset`: for a stream that starts inside a file (a Part of it),
        the lines before it and its byte offset, so that numbers and offsets are the file's."""
        self._stream = stream
        self._max = max_line_bytes
        self._ready: list[bytes] = []  # complete lines (with terminators) of the last chunk
        self._index = 0
        self._next_at = 0  # stream offset of _ready[_index]
        self._partial = bytearray()  # the unfinished line
        self._partial_at = 0
        self._read = offset  # bytes read from the file
        self._eof = False
        self._first = offset == 0  # only a file's start may hold a BOM
        self._overlong = False  # _partial passed the limit: refuse it, then skip its rest
        self._skipping = False
        self._drop_lf = False  # a skipped line ended in \r at a chunk end: a \n may follow
        self.line_no = lines_before
        self.offset = offset

    def __iter__(self) -> LineSplitter:
        return self

    def __next__(self) -> bytes:
        while True:
            if self._index < len(self._ready):
                raw = self._ready[self._index]
                self._index += 1
                self.line_no += 1
                self.offset = self._next_at
                self._next_at += len(raw)
                line = raw.rstrip(b"\r\n")  # a line cannot end in \r or \n other than its terminator
                if len(line) > self._max:
                    raise self._too_long()
                return line
            if self._overlong:
                self._overlong = False
                if self._partial.endswith(b"\r"):  # its end is here already; a \n may follow
                    self._drop_lf = True
                else:
                    self._skipping = True
                self.line_no += 1
                self.offset = self._partial_at
                self._partial = bytearray()
                raise self._too_long()
            if self._eof:
                if not self._partial:
                    raise StopIteration
                line = self._partial.rstrip(b"\r")
                self._partial = bytearray()
                self.line_no += 1
                self.offset = self._partial_at
                if len(line) > self._max:
                    raise self._too_long()
                return bytes(line)
            self._fill()

    def _fill(self) -> None:
        data = self._stream.read(CHUNK)
        if self._first:
            while 0 < len(data) < 3 and (more := self._stream.read(CHUNK)):
                data += more
        start = self._read
        self._read += len(data)
        if not data:
            self._eof = True
            self._skipping = False
            return
        if self._first:
            self._first = False
            if data.startswith(_BOM):
                data, start = data[3:], start + 3
        if self._drop_lf:
            self._drop_lf = False
            if data.startswith(b"\n"):
                data, start = data[1:], start + 1
        if self._skipping:
            m = _EOL.search(data)
            if m is None:
                return
            self._skipping = False
            self._drop_lf = m.group() == b"\r" and m.end() == len(data)
            data, start = data[m.end() :], start + m.end()
        if not self._partial:
            self._partial_at = start
        if b"\n" not in data and b"\r" not in data and not self._partial.endswith(b"\r"):
            self._partial += data
            self._overlong = len(self._partial) > self._max
            return
        lines = (bytes(self._partial) + data).splitlines(keepends=True)
        self._next_at = self._partial_at
        self._index = 0
        if lines[-1].endswith(b"\n"):
            self._ready = lines
            self._partial = bytearray()
        else:  # unfinished, or ending in \r that may be the first half of \r\n
            self._ready = lines[:-1]
            self._partial = bytearray(lines[-1])
            self._partial_at = self._next_at + sum(map(len, self._ready))
            self._overlong = len(self._partial.rstrip(b"\r")) > self._max

    def _too_long(self) -> IngestError:
        return IngestError(f"the line is longer than the {human_size(self._max)} limit", line=self.line_no)


def decode_line(raw: bytes, line_no: int, offset: int) -> str:
    """UTF-8 text of one line, or IngestError naming the line and the byte offset."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(
            f"invalid UTF-8 at byte offset {offset + exc.start} (byte {exc.start + 1} of the line); "
            "save the file as UTF-8",
            line=line_no,
        ) from None


__all__ = ["CHUNK", "LineSplitter", "decode_line", "human_size", "open_payload", "zip_data_entry"]
