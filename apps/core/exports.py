"""Writing rows for people to open in spreadsheets, safely."""

import csv
import io
from collections.abc import Iterable, Iterator

# A cell starting with one of these is run as a formula by spreadsheet programs (OWASP CSV
# injection), full-width forms included.
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r", "＝", "＋", "－", "＠")


def spreadsheet_safe(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def csv_lines(header: list[str], rows: Iterable[Iterable]) -> Iterator[str]:
    """Stream CSV text line by line, every cell neutralised against formula injection."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow([spreadsheet_safe(cell) for cell in header])
    yield buffer.getvalue()
    for row in rows:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([spreadsheet_safe(cell) for cell in row])
        yield buffer.getvalue()
