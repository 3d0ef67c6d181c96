"""scan_text runs every detector and keeps non-overlapping findings; redact_text replaces them."""

from __future__ import annotations

from collections.abc import Iterable

from .detectors import DETECTORS, has_digit
from .findings import PLACEHOLDERS, PRIORITY, Finding


def scan_text(text: str) -> list[Finding]:
    """Every piece of PII in `text`, in text order, no two overlapping.

    Where findings of different detectors overlap, the more specific type wins (PRIORITY:
    secret, credit card, IBAN, e-mail, IPv6, IPv4, then phone), then the longer finding.
    Linear in len(text).
    """
    if not isinstance(text, str):
        raise TypeError(f"scan_text expects str, not {type(text).__name__}")
    digits = has_digit(text)
    candidates = [
        Finding(pii_type, start, end, text[start:end])
        for pii_type, (detect, needs_digit) in DETECTORS.items()
        if digits or not needs_digit
        for start, end in detect(text)
    ]
    if len(candidates) < 2:
        return candidates
    candidates.sort(key=lambda f: (PRIORITY[f.type], f.start - f.end, f.start))
    taken = bytearray(len(text))  # 1 where an accepted finding lies
    kept = []
    for f in candidates:
        if taken.find(1, f.start, f.end) == -1:
            taken[f.start:f.end] = b"\x01" * (f.end - f.start)
            kept.append(f)
    kept.sort(key=lambda f: f.start)
    return kept


def redact_text(text: str, findings: Iterable[Finding] | None = None) -> str:
    """`text` with each finding replaced by its type's placeholder ("[EMAIL]", "[PHONE]", ...).

    `findings` defaults to scan_text(text); pass the list you already have to avoid scanning
    twice. Findings that overlap an earlier one are skipped.
    """
    if findings is None:
        findings = scan_text(text)
    parts, pos = [], 0
    for f in sorted(findings, key=lambda f: (f.start, -f.end)):
        if f.start < pos:
            continue
        parts.append(text[pos:f.start])
        parts.append(PLACEHOLDERS[f.type])
        pos = f.end
    parts.append(text[pos:])
    return "".join(parts)
