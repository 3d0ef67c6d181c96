"""A JSON Lines file cut into byte ranges at line ends, so that several processes can each read
one part (apps.datasets.importer reads a large uncompressed JSONL this way).

Each part knows how many lines come before it, so a part's reader numbers lines as reading the
whole file would; its records are counted first (count_records) so that positions can be given
out in file order before any part is written.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

_BLOCK = 8 * 1024 * 1024


@dataclass(frozen=True)
class Part:
    start: int  # byte offset of its first line
    end: int  # byte offset just past its last line
    lines_before: int  # lines of the file before `start` (terminators \n, \r\n and a lone \r)


def split_lines(path: Path | str, parts: int) -> list[Part]:
    """`path` cut into at most `parts` byte ranges of about equal size, each ending just after
    a \\n. Fewer parts when the file has too few line ends."""
    size = Path(path).stat().st_size
    cuts = [0]
    with open(path, "rb") as handle:
        for index in range(1, parts):
            target = max(size * index // parts, cuts[-1])
            handle.seek(target)
            while block := handle.read(64 * 1024):
                found = block.find(b"\n")
                if found >= 0:
                    cut = target + found + 1
                    if cut < size and cut > cuts[-1]:
                        cuts.append(cut)
                    break
                target += len(block)
    cuts.append(size)
    result, lines = [], 0
    with open(path, "rb") as handle:
        for start, end in zip(cuts, cuts[1:], strict=False):
            result.append(Part(start=start, end=end, lines_before=lines))
            lines += _count_line_ends(handle, start, end)
    return result


def _count_line_ends(handle, start: int, end: int) -> int:
    # \n and \r\n end a line, and so does a lone \r (as LineSplitter reads them). A part ends just
    # after a \n, so no \r\n straddles two parts; one may straddle two blocks (carried over).
    handle.seek(start)
    count, left, previous = 0, end - start, b""
    while left > 0:
        block = handle.read(min(_BLOCK, left))
        if not block:
            break
        left -= len(block)
        joined = previous + block
        count += block.count(b"\n") + joined.count(b"\r") - joined.count(b"\r\n") - previous.count(b"\r")
        previous = block[-1:] if block.endswith(b"\r") else b""
    return count


class Window(io.RawIOBase):
    """The bytes start..end of a file, as a readable stream."""

    def __init__(self, path: Path | str, part: Part) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 (closed with the window)
        self._file.seek(part.start)
        self._left = part.end - part.start

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = self._left if size is None or size < 0 else min(size, self._left)
        data = self._file.read(size)
        self._left -= len(data)
        return data

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def count_records(path: Path | str, part: Part) -> int:
    """The non-blank lines of a part: the records a JSON Lines reader yields from it."""
    count = 0
    with Window(path, part) as window:
        carry = b""
        while block := window.read(_BLOCK):
            lines = (carry + block).splitlines()
            carry = lines.pop() if lines and not block.endswith((b"\n", b"\r")) else b""
            count += sum(1 for line in lines if line.strip())
        if carry.strip():
            count += 1
    return count
