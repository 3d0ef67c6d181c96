"""Megabyte inputs for the PII engine: adversarial ones aimed at each pattern's weak spot, and a
plain text of the same size. Shared by tests/workers/test_pii.py (the hang guard) and
bench/pii_scan.py (the speed, as a ratio to the plain text)."""

from __future__ import annotations

MB = 1_000_000


def repeat(unit: str, size: int = MB) -> str:
    """`unit` repeated to exactly `size` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def adversarial(size: int = MB) -> dict[str, str]:
    """Inputs of `size` characters aimed at the patterns: long runs of a quantified class,
    separators that could be split many ways, prefixes that start a match and never finish it."""
    return {
        "letters": "a" * size,
        "digits": "1" * size,
        "dotted digits": repeat("1.", size),
        "spaced digits": repeat("1 ", size),
        "dashed digits": repeat("1-", size),
        "dotted words then @": repeat("a.", size)[:-1] + "@",
        "at signs": repeat("a@", size),
        "almost domains": repeat("x@x.", size),
        # A local part, then a long label that ends in "-": no top-level domain can close it.
        "long labels": repeat("a@" + "b" * 200 + "- ", size),
        "colons": ":" * size,
        "hex and colons": repeat("ab:", size),
        "almost ipv6": repeat("::1 ", size),
        "plus signs": repeat("+1 ", size),
        "parentheses": repeat("(1) ", size),
        "zeros": repeat("0 ", size),
        "card groups": repeat("4111 ", size),
        "iban groups": repeat("GB82 ", size),
        "aws prefix": repeat("AKIA", size),
        "jwt prefix": "eyJ" + "a" * (size - 3),
        "jwt parts": repeat("eyJa.", size),
        "assignments": repeat("api_key: ", size),
        "assignment run": "token=" + "A1" * ((size - 6) // 2),
        "pem header without end": "-----BEGIN PRIVATE KEY-----" + "A" * (size - 27),
        "dashes": "-" * size,
    }


ADVERSARIAL = adversarial(MB)

# What the scanner usually reads: prose with a little PII in it (the baseline of the bench).
PLAIN_UNIT = (
    "The support team answered 42 tickets on Monday; most asked how to reset a password or where "
    "the invoice for order 1187 went. Write to help@example.com or call +44 20 7946 0958 between "
    "nine and five. Version 3.11.7 fixed the export bug reported from 10.0.0.1 last week.\n"
)


def plain(size: int = MB) -> str:
    return repeat(PLAIN_UNIT, size)
