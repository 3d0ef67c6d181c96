"""Masks for showing a finding to a person without showing the value itself."""

from __future__ import annotations

_MAX_STARS = 24  # long values (keys, PEM blocks) get at most this many stars


def _star(s: str) -> str:
    return "*" * min(len(s), _MAX_STARS)


def _keep_first(s: str) -> str:
    """'example' -> 'e******'; one or two characters are starred entirely."""
    return s[0] + "*" * (len(s) - 1) if len(s) > 2 else "*" * len(s)


def _keep_last_digits(value: str, keep: int) -> str:
    """Digits starred except the last `keep`; separators, '+' and parentheses stay."""
    total = sum(c.isdigit() for c in value)
    out, seen = [], 0
    for c in value:
        if c.isdigit():
            seen += 1
            out.append(c if seen > total - keep else "*")
        else:
            out.append(c)
    return "".join(out)


def _keep_ends(value: str, first: int, last: int) -> str:
    """Letters and digits starred except the first `first` and last `last` of them;
    punctuation (dots, colons, spaces) stays so the shape is recognizable."""
    positions = [i for i, c in enumerate(value) if c.isalnum()]
    hidden = set(positions[first:len(positions) - last])
    return "".join("*" if i in hidden else c for i, c in enumerate(value))


def mask_value(pii_type: str, value: str) -> str:
    """A display form of `value` that never contains it whole:

    email "john@example.com" -> "j***@e******.com"; credit_card -> "**** **** **** 4242";
    phone -> "+** ** **** **58"; iban -> "GB** **** **** **** **54 32";
    ipv4 "192.168.1.1" -> "1**.***.*.1"; secret "AKIAIOSFODNN7EXAMPLE" -> "AKIA************MPLE".
    """
    if pii_type == "email" and "@" in value:
        local, _, domain = value.rpartition("@")
        name, dot, tld = domain.rpartition(".")
        masked = f"{_keep_first(local)}@{_keep_first(name)}{dot}{tld}"
    elif pii_type == "credit_card":
        masked = _keep_last_digits(value, 4)
    elif pii_type == "phone":
        masked = _keep_last_digits(value, 2)
    elif pii_type == "iban":
        masked = _keep_ends(value, 2, 4)
    elif pii_type in ("ipv4", "ipv6"):
        masked = _keep_ends(value, 1, 1)
    elif pii_type == "secret":
        if value.startswith("-----BEGIN"):
            header_end = value.find("-----", 10) + 5
            masked = value[:header_end] + "*" * 8
        elif len(value) >= 16:
            masked = value[:4] + _star(value[4:-4]) + value[-4:]
        else:
            masked = _star(value)
    else:
        masked = _star(value)
    if value in masked:  # a value too short to show any of it
        masked = "*" * max(1, min(len(value), _MAX_STARS))
    return masked
