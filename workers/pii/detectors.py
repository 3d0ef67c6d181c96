"""One detector per PII type: a regular expression finds candidates, Python validates them.

Every detector is a function text -> list of (start, end) spans, in text order and not
overlapping each other (scan.py resolves overlaps between detectors).

Linear time. Python's `re` backtracks, so every pattern here is written so that the work per
starting position is bounded by a constant and most positions are rejected at once:

- quantifiers are bounded ({1,64}); the only open-ended ones (`[...]{6,}`, `[0-9]+`) repeat a
  single character class with nothing after them that could fail, so a run is read once;
- a pattern that starts with a run of some character class looks back for that class, so a
  match can only start at the beginning of a run, not at each of its characters (this is what
  keeps 1 MB of "aaaa..." or "1.1.1..." linear);
- repeated groups always begin with a mandatory separator that the group's own characters
  cannot match, so there is exactly one way to split a run into groups;
- where it can, a pattern starts with a literal or a character class and looks back only
  after it, which lets `re` skip to candidate positions at C speed;
- a detector whose shape needs a character the text lacks ("@", ":", "+", a digit, a key
  prefix such as "AKIA") does not run its pattern at all.

The regexes are deliberately a little loose; checksums (Luhn, mod-97), the `ipaddress`
module, length tables and shape rules then decide. Validating a candidate costs time
proportional to its length (plus a bounded number of re-tries on its own groups), and the
candidates of one pattern never overlap, so a whole scan stays linear in the text length.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

Span = tuple[int, int]
_A = re.ASCII  # \d, \w and \s mean ASCII digits, word characters and whitespace only

_ANY_DIGIT = re.compile(r"\d", _A)


def has_digit(text: str) -> bool:
    return _ANY_DIGIT.search(text) is not None


def _longest_first(spans: list[Span]) -> list[Span]:
    """Spans of several patterns for one type, in text order; where two overlap, the longer
    stays (the earlier on a tie)."""
    if len(spans) < 2:
        return spans
    spans.sort()
    kept: list[Span] = []
    for sp in spans:
        if kept and sp[0] < kept[-1][1]:
            if sp[1] - sp[0] > kept[-1][1] - kept[-1][0]:
                kept[-1] = sp  # cannot overlap kept[-2], which ends before kept[-1] starts
            continue
        kept.append(sp)
    return kept


# --- e-mail ---------------------------------------------------------------------------------

_LOCAL = r"[A-Za-z0-9._%+\-]"
_DOMAIN = (
    r"((?:[A-Za-z0-9\-]{1,63}\.){1,10}(?:[A-Za-z]{2,24}|xn--[A-Za-z0-9\-]{1,59}))"
    r"(?![A-Za-z0-9\-]|\.[A-Za-z0-9])"  # a trailing "." ends the sentence, not the domain
)
_EMAIL = re.compile(rf"(?<!{_LOCAL})({_LOCAL}{{1,64}})@" + _DOMAIN, _A)
# The same in two halves, for texts with few "@": the domain after one, the local part before.
_EMAIL_DOMAIN = re.compile(_DOMAIN, _A)
_EMAIL_LOCAL = re.compile(rf"{_LOCAL}{{1,65}}\Z", _A)
_DENSE_AT = 256  # at least one "@" per this many characters: use the one-pass pattern
_SSH_REMOTE = re.compile(r":[\w~/]", _A)
# "icon@2x.png" names a file, not a mailbox: none of these is a top-level domain.
_FILE_EXTENSIONS = frozenset(
    "png jpg jpeg gif svg webp bmp ico tif tiff heic css js ts tsx jsx json yaml yml toml txt md pdf "
    "zip gz tgz py rb php html htm xml csv tsv lock log".split()
)


def _email_candidates(text: str) -> Iterator[tuple[int, str, str, int]]:
    """(start, local part, domain, end) of each local@domain with the right characters."""
    ats = text.count("@")
    if ats * _DENSE_AT > len(text):  # "@" everywhere: one pass of the whole pattern
        for m in _EMAIL.finditer(text):
            yield m.start(1), m.group(1), m.group(2), m.end()
        return
    # Few "@" (decorators, handles, addresses): look around each one only.
    at, last_end = text.find("@"), 0
    while at >= 0:
        domain = _EMAIL_DOMAIN.match(text, at + 1)
        if domain:
            local = _EMAIL_LOCAL.search(text, max(last_end, at - 65), at)
            if local and local.end() - local.start() <= 64 and (
                local.start() == 0 or text[local.start() - 1] not in _LOCAL_CHARS
            ):
                yield local.start(), local.group(), domain.group(1), domain.end()
                last_end = domain.end()
        at = text.find("@", at + 1)


_LOCAL_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")


def find_emails(text: str) -> list[Span]:
    if "@" not in text:
        return []
    spans = []
    for start, local, domain, end in _email_candidates(text):
        ellipsis = local.rfind("...")  # "and so on...john@x.org": the address starts after it
        skipped = ellipsis + 3 if ellipsis >= 0 else 0
        skipped += len(local[skipped:]) - len(local[skipped:].lstrip("."))
        local = local[skipped:]
        if not local or local[-1] == "." or ".." in local:
            continue
        if "-." in domain or ".-" in domain or domain[0] == "-":
            continue  # a label may not start or end with a hyphen
        if domain[domain.rfind(".") + 1:].lower() in _FILE_EXTENSIONS:
            continue
        if _SSH_REMOTE.match(text, end):
            continue  # "git@github.com:org/repo.git" is an SSH remote, not a mailbox
        spans.append((start + skipped, end))
    return spans


# --- phone numbers --------------------------------------------------------------------------
#
# Accepted shapes (anything else is not a phone number):
#   international  "+44 20 7946 0958", "+1 (555) 123-4567", "+49 (0)30 1234567", "+14155552671"
#   00 prefix      "0044 20 7946 0958"
#   North American "(555) 123-4567", "555-123-4567", "555.123.4567", "1-800-555-0199" (the
#                  area code starts with 2-9); "555-1234" only after a cue word such as
#                  "phone", "tel" or "call"
#   trunk prefix 0 "020 7946 0958", "030-1234567", "01 23 45 67 89", "(020) 7946 0958":
#                  9-12 digits in groups of 2+ digits, with separators
# 7-15 digits in all. Never: bare digit runs without "+", dates ("2024-01-15", "15.01.2024
# 10:30"), ranges ("1990-2000"), thousands-grouped amounts ("1,234,567", "1 234 567"), zip
# codes, versions, IP addresses, numbers after a currency sign.

_PSEP = r"(?:\ ?[\-.]\ ?|\ )"
_P_BEFORE = r"(?<![\w+\-.,/#$@\u00a3\u00a5\u20ac])"  # not glued to a word, a number or a currency sign
# Not followed by more of a word or number (".", "," end sentences), unless by an extension.
_P_AFTER = r"(?:(?=\ ?(?:[xX]|[eE][xX][tT]\.?)\ ?\d)|(?![\w@#]|[\-.,/]\d))"
_EXTENSION = re.compile(r"\ ?(?:x|ext\.?)\ ?\d{1,6}(?![\w@]|[\-.,/]\d)", re.ASCII | re.I)
_SEVEN = r"(?=(?:[\ \-.()]{0,3}\d){7})"  # at least seven digits lie ahead

_PHONE_INTL = re.compile(
    r"\+(?<![\w+\-.,/#$@\u00a3\u00a5\u20ac]\+)" + _SEVEN + r"[1-9]\d{0,14}(?:\ ?\(0\))?"
    r"(?:" + _PSEP + r"?\(\d{1,4}\)|(?:" + _PSEP + r"|(?<=\)))\d{1,12}){0,7}" + _P_AFTER,
    _A,
)
# The national shapes in one pattern (their first characters tell them apart).
_PHONE_NATIONAL = re.compile(
    _P_BEFORE + r"(?:"
    r"(?P<idd>00" + _SEVEN + r"[1-9]\d{0,3}(?:" + _PSEP + r"\d{1,10}){1,6})"
    r"|(?P<trunk>(?=\(?0[1-9])" + _SEVEN
    + r"(?:\(0[1-9]\d{0,3}\)[\ \-]?|0[1-9]\d{0,4}" + _PSEP + r")\d{1,8}(?:" + _PSEP + r"\d{1,8}){0,4})"
    r"|(?P<nanp>(?:1[\ \-.]?)?(?:\([2-9]\d\d\)\ ?|[2-9]\d\d[\ \-.])\d{3}[\ \-.]\d{4})"
    r")" + _P_AFTER,
    _A,
)
# Where a national or cued number can be: a run of 7+ digits, spaces, dashes, dots and
# parentheses (one pass that skips everything else fast; the patterns then run inside runs).
_PHONE_RUN = re.compile(r"[\d(][\d\ \-.()]{6,}", _A)
# Shapes that are phone numbers only after a cue word: "555-1234", bare "0612345678", "4155552671".
_PHONE_CUED = re.compile(_P_BEFORE + r"(?:[2-9]\d\d-\d{4}|0[1-9]\d{7,10}|1?[2-9]\d{9})" + _P_AFTER, _A)
_PHONE_CUE = re.compile(
    r"\b(?:(?:tele)?phone|tel(?:efon[oe]?)?|t\u00e9l\u00e9phone|call|mobile?|mob|cell(?:ulare)?|handy|fax"
    r"|whatsapp|sms|ph|ruf|tlf|m\u00f3vil)\b[^\d\n]{0,12}$",
    re.ASCII | re.I,
)
_CUE_HINTS = ("ph", "tel", "t\u00e9l", "call", "mob", "cell", "handy", "fax", "whatsapp", "sms", "ruf", "tlf",
              "m\u00f3vil")
_DATE_INSIDE = re.compile(
    r"(?<!\d)(?:\d{1,2}([\-./])\ ?\d{1,2}\1\ ?(?:19|20)\d\d|(?:19|20)\d\d([\-./])\ ?\d{1,2}\2\ ?\d{1,2})(?!\d)", _A
)
_GROUPS = re.compile(r"\d+", _A)
_SSN = re.compile(r"\d{3}-\d{2}-\d{4}", _A)
_CURRENCY = frozenset("$\u00a3\u00a5\u20ac\u20b9")


def _trim_last_group(s: str) -> str:
    """Drop the last digit group and the separator before it ("" when one group is left)."""
    cut = max(s.rfind(" "), s.rfind("-"), s.rfind("."), s.rfind("("))
    return s[:cut].rstrip(" -.(") if cut > 0 else ""


def _intl_ok(s: str) -> bool:
    groups = _GROUPS.findall(s.replace("(0)", ""))
    n = sum(map(len, groups))
    if not 7 <= n <= 15 or sum(len(g) == 1 for g in groups) > 2:
        return False
    return s.count("(") == s.count(")") and _DATE_INSIDE.search(s) is None


def _idd_ok(s: str) -> bool:
    return 7 <= sum(c.isdigit() for c in s) - 2 <= 15 and _DATE_INSIDE.search(s) is None


def _nanp_ok(s: str) -> bool:
    if "(" in s:
        return True
    body = s[2:] if s[0] == "1" and not s[1].isdigit() else s
    return body[3] == body[7]  # the same separator twice: "555-123-4567", not "555-123.4567"


def _trunk_ok(s: str) -> bool:
    groups = _GROUPS.findall(s)
    sizes = list(map(len, groups))
    if not 9 <= sum(sizes) <= 12 or min(sizes) < 2:
        return False
    if len(groups) == 4 and max(sizes) <= 3 and "." in s:
        return False  # "010.020.030.040" is a (zero-padded) address, not a number
    if max(sizes) == 2:
        numbers = list(map(int, groups))
        if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return False  # "01 02 03 04 05 06" counts, it does not dial
    if sizes == [3, 2, 4] and _SSN.fullmatch(s):
        return False  # "078-05-1120" is a US social security number's shape
    return _DATE_INSIDE.search(s) is None


# Per shape: the validator, and whether a failed candidate may lose trailing groups and retry.
_PHONE_RULES: dict[str, tuple[Callable[[str], bool], bool]] = {
    "intl": (_intl_ok, True),
    "idd": (_idd_ok, True),
    "trunk": (_trunk_ok, True),
    "nanp": (_nanp_ok, False),
}


def _matches(pattern: re.Pattern, text: str, runs: list[Span]) -> Iterator[re.Match]:
    """pattern.finditer(text) inside the runs only (and the few characters after each, which
    the lookaheads need to see)."""
    for run_start, run_end in runs:
        yield from pattern.finditer(text, run_start, run_end + 8)


def _phone_spans(text: str, matches: Iterable[re.Match], shape: str | None = None) -> list[Span]:
    spans = []
    for m in matches:
        s, start, end = m.group(), m.start(), m.end()
        ok, trim = _PHONE_RULES[shape or m.lastgroup]
        if start:
            before = text[max(0, start - 2):start].rstrip(" ")
            if before and before[-1] in _CURRENCY:
                continue  # "$ 555 123 4567" is an amount
        if text.startswith(":", end) and text[end + 1:end + 2].isdigit():
            s = _trim_last_group(s)  # "... 10:30": the last group starts a time of day
        while s:
            if ok(s):
                stop = start + len(s)
                if stop == end:
                    ext = _EXTENSION.match(text, stop)  # "555-123-4567 x89", "... ext. 12"
                    if ext:
                        stop = ext.end()
                spans.append((start, stop))
                break
            if not trim:
                break
            s = _trim_last_group(s)  # "+44 20 7946 0958 2024": a number glued on behind
    return spans


def find_phones(text: str) -> list[Span]:
    spans: list[Span] = []
    if "+" in text:
        spans += _phone_spans(text, _PHONE_INTL.finditer(text), "intl")
    runs = [m.span() for m in _PHONE_RUN.finditer(text)]
    if not runs:
        return spans
    spans += _phone_spans(text, _matches(_PHONE_NATIONAL, text, runs))
    lowered = text.lower()
    if any(hint in lowered for hint in _CUE_HINTS):
        for m in _matches(_PHONE_CUED, text, runs):
            if _PHONE_CUE.search(text, max(0, m.start() - 24), m.start()):
                ext = _EXTENSION.match(text, m.end())
                spans.append((m.start(), ext.end() if ext else m.end()))
    return _longest_first(spans)


# --- credit cards ---------------------------------------------------------------------------

# Plain runs of 13-19 digits, or the groupings cards are printed in (one separator kind):
# 4-4-4-4 (13-19 digits: the last groups may be shorter) and Amex/Diners 4-6-5 / 4-6-4.
_CARD = re.compile(
    r"\d(?<![\w\-.+,/]\d)"  # (a digit first, then the look back: the search skips to digits fast)
    r"(?:\d{12,18}"
    r"|\d{3}(?P<s>[\ \-])\d{4}(?P=s)\d{4}(?P=s)\d{1,4}(?:(?P=s)\d{1,3})?"
    r"|\d{3}(?P<t>[\ \-])\d{6}(?P=t)\d{4,5})"
    r"(?![\w]|[\-.,/]\d)",
    _A,
)
_DOUBLED = str.maketrans("0123456789", "0246813579")  # 2d, minus 9 when above 9


def luhn_ok(digits: str) -> bool:
    """The Luhn (mod 10) check of a string of digits."""
    return (sum(map(int, digits[-1::-2])) + sum(map(int, digits[-2::-2].translate(_DOUBLED)))) % 10 == 0


def card_brand(digits: str) -> str | None:
    """The network a card number belongs to, by IIN prefix and length; None for no network."""
    n, first = len(digits), digits[0]
    if first == "4":
        # 13-digit Visa numbers are no longer issued, while 13-digit barcodes (EAN-13) and
        # phone numbers starting with 4 are everywhere: 16 and 19 only.
        return "visa" if n in (16, 19) else None
    two = int(digits[:2])
    if first == "5" or first == "2":
        return "mastercard" if n == 16 and (51 <= two <= 55 or 2221 <= int(digits[:4]) <= 2720) else None
    if two in (34, 37):
        return "amex" if n == 15 else None
    if digits.startswith("6011") or two == 65 or 644 <= int(digits[:3]) <= 649:
        return "discover" if 16 <= n <= 19 else None
    if 3528 <= int(digits[:4]) <= 3589:
        return "jcb" if 16 <= n <= 19 else None
    if two in (36, 38, 39) or 300 <= int(digits[:3]) <= 305:
        return "diners" if n in (14, 16) else None
    return None


def find_credit_cards(text: str) -> list[Span]:
    spans = []
    for m in _CARD.finditer(text):
        digits = m.group().replace(" ", "").replace("-", "")
        if card_brand(digits) is not None and luhn_ok(digits):
            spans.append(m.span())
    return spans


# --- IP addresses ---------------------------------------------------------------------------

_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.(?:\d{1,3}\.){2}\d{1,3}(?![\w]|\.\d)", _A)
# "version 1.2.3.4", "rv:1.9.7.20", "Chrome/120.0.0.0", "sec-15.9.1.15": a version or a
# section number, not an address.
_VERSION_CUE = re.compile(
    r"(?:\b(?:v|version|ver|release|rel|rev|rv|build|firmware|fw|sec|section)[\s.:=]{0,3}|[A-Za-z][/\-])$",
    re.ASCII | re.I,
)
# Groups of up to 4 hex digits, each closed by ":" (2-7 of them), then a last group or an IPv4
# tail. Written to start with the first character (hex digit or ":") so the search skips other
# characters fast; the look back after it keeps the start at the beginning of a run, and the
# look ahead wants 6+ address characters in all, so "::1", "a::b" and "[::2]" never start.
_IPV6 = re.compile(
    r"[0-9A-Fa-f:](?<![\w:.][0-9A-Fa-f:])(?=[0-9A-Fa-f:.]{5})"
    r"(?:(?<=:)|(?<=[0-9A-Fa-f])[0-9A-Fa-f]{0,3}:)"  # the rest of the first group and its ":"
    r"(?:[0-9A-Fa-f]{0,4}:){1,6}(?:(?:\d{1,3}\.){3}\d{1,3}|[0-9A-Fa-f]{1,4})?(?![\w:]|\.\d)",
    _A,
)
_IPV6_GROUP = re.compile(r"[0-9A-Fa-f.]+", _A)


@functools.lru_cache(maxsize=4096)  # logs repeat the same few addresses
def _ipv4_ok(s: str) -> bool:
    try:
        ipaddress.IPv4Address(s)  # octets 0-255, no leading zeros
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _ipv6_ok(s: str) -> bool:
    try:
        ipaddress.IPv6Address(s)  # 8 groups, or fewer around one "::"; rejects times and MACs
    except ValueError:
        return False
    return True


def find_ipv4(text: str) -> list[Span]:
    if "." not in text:
        return []
    spans = []
    for m in _IPV4.finditer(text):
        if not _ipv4_ok(m.group()):
            continue
        start = m.start()
        if start and _VERSION_CUE.search(text, max(0, start - 12), start):
            continue  # "version 1.2.3.4"
        spans.append(m.span())
    return spans


def find_ipv6(text: str) -> list[Span]:
    if ":" not in text:
        return []
    spans = []
    for m in _IPV6.finditer(text):
        s = m.group()
        groups = _IPV6_GROUP.findall(s)
        # "12::30", "1:2::", "ab::cd" (code, clock-like) are valid addresses in theory; real
        # ones written with "::" have 3+ groups or a group of 3+ characters ("fe80::1").
        if len(groups) < 3 and not any(len(g) >= 3 for g in groups):
            continue
        if _ipv6_ok(s):
            spans.append(m.span())
    return spans


# --- IBAN -----------------------------------------------------------------------------------

# Total IBAN length by country (ISO 13616 registry).
IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}

# Upper case, as IBANs are written (ISO 13616); a lower-case one is not found.
_IBAN = re.compile(
    r"[A-Z](?<![A-Za-z0-9][A-Z])[A-Z]\d{2}(?:[A-Z0-9]{11,30}|(?:\ [A-Z0-9]{4}){2,7}(?:\ [A-Z0-9]{1,4})?)"
    r"(?![A-Za-z0-9])",
    _A,
)


def iban_ok(compact: str) -> bool:
    """The country's length and the ISO 7064 mod-97 check, for an IBAN without spaces."""
    compact = compact.upper()
    if IBAN_LENGTHS.get(compact[:2]) != len(compact) or not compact[2:4].isdigit() or not compact.isalnum():
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def find_ibans(text: str) -> list[Span]:
    spans = []
    for m in _IBAN.finditer(text):
        s = m.group()
        length = IBAN_LENGTHS.get(s[:2])
        if length is None:
            continue
        compact = s.replace(" ", "")
        if len(compact) > length and " " in s:
            # A group printed after the IBAN ("AT61 1904 3002 3457 3201 7777"): cut it off when
            # the IBAN's own length ends on a group boundary.
            cut = length + (length - 1) // 4  # characters of `length` alphanumerics in groups of 4
            if s[cut:cut + 1] != " ":
                continue
            s, compact = s[:cut], compact[:length]
        if iban_ok(compact):
            spans.append((m.start(), m.start() + len(s)))
    return spans


# --- secrets --------------------------------------------------------------------------------

# Key shapes with a fixed prefix: (a string the text must contain, the pattern). Each pattern
# starts with its literal prefix, so the search skips to candidates fast, and looks back from
# there: the prefix must not continue a longer word.
_SECRET_SHAPES = [
    (("AKIA", "ASIA"), re.compile(r"(?:AKIA|ASIA)(?<![A-Za-z0-9]....)[A-Z0-9]{16}(?![A-Za-z0-9])", _A)),  # AWS key id
    (("gh",), re.compile(r"gh[pousr]_(?<![\w\-]....)[A-Za-z0-9]{36,255}(?![\w\-])", _A)),  # GitHub
    (("github_pat_",), re.compile(r"github_pat_(?<![\w\-]github_pat_)[A-Za-z0-9_]{22,255}(?![\w\-])", _A)),
    (("xox",), re.compile(r"xox[abpr]-(?<![\w\-].....)[A-Za-z0-9\-]{10,255}(?![\w\-])", _A)),  # Slack
    (("k_live_",), re.compile(r"[rs]k_live_(?<![\w\-]........)[A-Za-z0-9]{16,255}(?![\w\-])", _A)),  # Stripe live
    (("AIza",), re.compile(r"AIza(?<![\w\-]AIza)[A-Za-z0-9_\-]{35}(?![\w\-])", _A)),  # Google API key
    (("eyJ",), re.compile(  # JWT: base64url JSON header, payload, signature
        r"eyJ(?<![\w\-]eyJ)[A-Za-z0-9_\-]{5,8192}\.eyJ[A-Za-z0-9_\-]{5,8192}\.[A-Za-z0-9_\-]{0,8192}(?![\w\-])", _A)),
]
# Checked for a mix of digits, upper and lower case, which real keys have and slugs lack.
_MIXED_SHAPES = [
    ("sk-", re.compile(r"sk-(?<![\w\-]sk-)[A-Za-z0-9_\-]{20,255}(?![\w\-])", _A)),  # OpenAI-style, sk-proj-, sk-ant-
    ("hf_", re.compile(r"hf_(?<![\w\-]hf_)[A-Za-z0-9]{34,40}(?![\w\-])", _A)),  # Hugging Face token
]
# A private key block. Its body may not contain "--", so it stops at the END line (or at the
# first "--" when the END line is missing: then the header and the base64 lines after it).
_PEM = re.compile(
    r"-----BEGIN\ (?:[A-Z0-9]{1,20}\ ){0,3}PRIVATE\ KEY(?:\ BLOCK)?-----"
    r"(?P<end>(?:[A-Za-z0-9+/=\s:,]|-(?!-)){0,65536}-----END\ (?:[A-Z0-9]{1,20}\ ){0,3}PRIVATE\ KEY(?:\ BLOCK)?-----)?",
    re.ASCII | re.VERBOSE,
)
_PEM_BODY = re.compile(r"[A-Za-z0-9+/=\r\n]{0,65536}", _A)
# `api_key = "..."`, `"token": "..."`, `GITHUB_TOKEN=...`, `X-Api-Key: ...`, `Bearer ...`: the
# keyword ends the name (so "tokenizer:" and "max_tokens=" are not assignments); only the value
# is reported, and only when it looks random (see looks_random). Matched in the lower-cased
# text (keywords lead the patterns, so the search skips to them fast); values come from the text.
_VALUE = r"(?P<value>[a-z0-9_\-+/=.~]{16,1024})"
_ASSIGNED = re.compile(
    r"(?:api[_\-]?key|access[_\-]?key|secret[_\-]?key|signing[_\-]?key|token|secret|passw(?:or)?d|pwd)"
    r"[\"']?\ {0,3}(?::=|=>|[:=])\s{0,3}[\"']?" + _VALUE,
    _A,
)
_BEARER = re.compile(r"bearer(?<![a-z0-9_]bearer)\ {1,3}" + _VALUE, _A)
_KEYWORDS = ("key", "token", "secret", "passw", "pwd", "bearer")
_HEX = frozenset("0123456789abcdefABCDEF")
ENTROPY_MIN = 3.5  # bits per character, for values of mixed alphabets
ENTROPY_MIN_HEX = 3.0  # hex digits carry at most 4 bits each
# Words that make a value a placeholder or a description rather than a credential.
_PLACEHOLDER = re.compile(
    r"your|here|example|sample|dummy|placeholder|changeme|redacted|insert|replace|xxxx|secret|passw|token|api.?key",
    re.ASCII | re.IGNORECASE,
)


def shannon_entropy(s: str) -> float:
    """Shannon entropy of the characters of `s`, in bits per character."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values()) if n else 0.0


def _mostly_sequential(s: str) -> bool:
    """'abcdefgh1234', '0123456789abcdef': more than half of the neighbours are successive."""
    steps = sum(abs(ord(b) - ord(a)) == 1 for a, b in zip(s, s[1:]))
    return steps * 2 > len(s) - 1


def looks_random(value: str) -> bool:
    """Whether an assigned value looks like a generated credential: 16+ characters, letters
    and digits both, no placeholder words ("your_api_key_here_1", "changeme123..."), not a
    run like "abcdefghijklmnop1", and Shannon entropy of at least ENTROPY_MIN bits per
    character (ENTROPY_MIN_HEX for hex strings)."""
    if len(value) < 16:
        return False
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    if _PLACEHOLDER.search(value) or _mostly_sequential(value):
        return False
    threshold = ENTROPY_MIN_HEX if set(value) <= _HEX else ENTROPY_MIN
    return shannon_entropy(value) >= threshold


def find_secrets(text: str) -> list[Span]:
    spans: list[Span] = []
    for prefixes, pattern in _SECRET_SHAPES:
        if any(p in text for p in prefixes):
            spans += (m.span() for m in pattern.finditer(text))
    for prefix, pattern in _MIXED_SHAPES:
        if prefix in text:
            for m in pattern.finditer(text):
                body = m.group()[3:]
                # "sk-this-is-a-long-slug" is not a key: keys mix digits, upper and lower case.
                if any(c.isdigit() for c in body) and any(c.isupper() for c in body) and any(c.islower() for c in body):
                    spans.append(m.span())
    if "-----BEGIN" in text:
        for m in _PEM.finditer(text):
            end = m.end()
            if m.group("end") is None:
                end = _PEM_BODY.match(text, end).end()
                while end > m.end() and text[end - 1] in "\r\n":
                    end -= 1
            spans.append((m.start(), end))
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters lower-case to two ("İ"): offsets would shift
        lowered = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
    if any(k in lowered for k in _KEYWORDS):
        for pattern in (_ASSIGNED, _BEARER):
            for m in pattern.finditer(lowered):
                start = m.start("value")
                value = text[start:m.end("value")].rstrip(".")
                if text.startswith("(", start + len(value)):
                    continue  # `token = Tokenizer2(...)` calls code, it assigns no literal
                if looks_random(value):
                    spans.append((start, start + len(value)))
    return _longest_first(spans)


# Each type's detector, and whether it can only find something in a text with a digit.
DETECTORS: dict[str, tuple[Callable[[str], list[Span]], bool]] = {
    "email": (find_emails, False),
    "phone": (find_phones, True),
    "credit_card": (find_credit_cards, True),
    "ipv4": (find_ipv4, True),
    "ipv6": (find_ipv6, False),
    "iban": (find_ibans, True),
    "secret": (find_secrets, False),
}
