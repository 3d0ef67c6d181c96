"""ScanSummary: PII counts and masked examples over many cells of a dataset."""

from __future__ import annotations

from typing import Any

from .findings import PII_TYPES, Finding
from .mask import mask_value
from .scan import scan_text

MAX_EXAMPLES = 5


class ScanSummary:
    """Accumulates the findings of many `add(position, column, text)` calls, one per cell.

        summary = ScanSummary()
        for position, row in enumerate(rows):
            for column, value in row.items():
                summary.add(position, column, value)
        summary.as_dict()   # counts, counts_by_column, rows_with_pii, examples

    Attributes:
        counts: {type: findings} for every type in PII_TYPES (zeros included).
        counts_by_column: {column: {type: findings}}, only columns and types with findings.
        rows_with_pii: how many distinct rows had at least one finding.
        rows_scanned, cells_scanned: how many rows and cells were given.
        examples: {type: [{"position", "column", "masked"}]}, at most `max_examples` per type,
            the first ones seen; `masked` is mask_value(), never the raw value.

    Rows are counted by position: calls for one row are expected to come together (as a
    row-by-row scan makes them), so no set of every position is kept.
    """

    def __init__(self, max_examples: int = MAX_EXAMPLES) -> None:
        self.max_examples = max_examples
        self.counts: dict[str, int] = dict.fromkeys(PII_TYPES, 0)
        self.counts_by_column: dict[str, dict[str, int]] = {}
        self.examples: dict[str, list[dict[str, Any]]] = {t: [] for t in PII_TYPES}
        self.rows_with_pii = 0
        self.rows_scanned = 0
        self.cells_scanned = 0
        self._last_row: object = _NO_ROW
        self._last_flagged_row: object = _NO_ROW

    def add(self, position: Any, column: Any, text: Any) -> list[Finding]:
        """Scan one cell and count what it holds. `text` may be None (nothing to scan) or a
        number (card numbers often arrive as integers); other values are scanned as str()."""
        self.cells_scanned += 1
        if position != self._last_row:
            self._last_row = position
            self.rows_scanned += 1
        if text is None:
            return []
        findings = scan_text(text if isinstance(text, str) else str(text))
        if not findings:
            return findings
        if position != self._last_flagged_row:
            self._last_flagged_row = position
            self.rows_with_pii += 1
        by_type = self.counts_by_column.setdefault(str(column), {})
        for f in findings:
            self.counts[f.type] += 1
            by_type[f.type] = by_type.get(f.type, 0) + 1
            examples = self.examples[f.type]
            if len(examples) < self.max_examples:
                examples.append({"position": position, "column": column, "masked": mask_value(f.type, f.value)})
        return findings

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy: counts, counts_by_column, rows_with_pii, rows_scanned,
        cells_scanned, total and examples (types without examples left out)."""
        return {
            "counts": dict(self.counts),
            "counts_by_column": {
                column: {t: counts[t] for t in PII_TYPES if t in counts}
                for column, counts in self.counts_by_column.items()
            },
            "rows_with_pii": self.rows_with_pii,
            "rows_scanned": self.rows_scanned,
            "cells_scanned": self.cells_scanned,
            "total": self.total,
            "examples": {t: [dict(e) for e in ex] for t, ex in self.examples.items() if ex},
        }


_NO_ROW = object()
