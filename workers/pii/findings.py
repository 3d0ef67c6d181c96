"""The PII types, their redaction placeholders, and the Finding a detector reports."""

from __future__ import annotations

from dataclasses import dataclass

# Every type the engine detects, in the order reports list them.
PII_TYPES = ("email", "phone", "credit_card", "ipv4", "ipv6", "iban", "secret")

# What redact_text puts in place of a finding of each type.
PLACEHOLDERS = {
    "email": "[EMAIL]",
    "phone": "[PHONE]",
    "credit_card": "[CREDIT_CARD]",
    "ipv4": "[IPV4]",
    "ipv6": "[IPV6]",
    "iban": "[IBAN]",
    "secret": "[SECRET]",
}

# When two findings overlap, the one whose type comes first here wins: the more specific
# shape (a checksum-validated card or IBAN, a key with a fixed prefix) over the looser one
# (a run of digits that also reads as a phone number). Ties go to the longer finding.
PRIORITY = {t: i for i, t in enumerate(("secret", "credit_card", "iban", "email", "ipv6", "ipv4", "phone"))}


@dataclass(frozen=True, slots=True)
class Finding:
    """One piece of PII in a text: its type, where it is (character offsets, end exclusive,
    so text[start:end] == value) and the matched text itself."""

    type: str
    start: int
    end: int
    value: str
