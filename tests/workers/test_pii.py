"""The PII engine (workers/pii): per-type fixtures scored for precision and recall, overlaps
between detectors, redaction, masks, the dataset summary, patterns that cannot backtrack
super-linearly and no hang on adversarial input, and no Django import. No database."""

from __future__ import annotations

import json
import random
import re
import re._constants as sre
import re._parser as sre_parse
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.pii_inputs import ADVERSARIAL
from workers.pii import (
    PII_TYPES,
    PLACEHOLDERS,
    Finding,
    ScanSummary,
    iban_ok,
    looks_random,
    luhn_ok,
    mask_value,
    redact_text,
    scan_text,
    shannon_entropy,
)
from workers.pii.detectors import DETECTORS

REPO = Path(__file__).resolve().parents[2]

# Secrets are assembled from pieces so that this file holds no literal token shape for secret
# scanners (push protection, CI scanners) to flag. None of them is a live credential.
AWS_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"  # AWS's documented example key id
GH_TOKEN = "ghp" + "_1a2B3c4D5e6F7g8H9i0J1k2L3m4N5o6P7q8R"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM_BLOCK = (
    "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEowIBAAKCAQEA7bq+fake/=\nZm9vYmFyYmF6\n-----END RSA " + "PRIVATE KEY-----"
)
PEM_CUT = "-----BEGIN " + "PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"

# (text, the values of that type it holds). Each text holds no PII of the same type besides.
POSITIVES: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "email": [
        ("Contact john@example.com for details.", ("john@example.com",)),
        ("Write to first.last@sub.example.co.uk.", ("first.last@sub.example.co.uk",)),
        ("tags: x_y%z+tag@ex-ample.org", ("x_y%z+tag@ex-ample.org",)),
        ("<JOHN.DOE@EXAMPLE.COM>", ("JOHN.DOE@EXAMPLE.COM",)),
        ("mailto:user123@mail.example.io?subject=hi", ("user123@mail.example.io",)),
        ("and so on...jane@example.net", ("jane@example.net",)),
        ("punycode user@xn--bcher-kva.example", ("user@xn--bcher-kva.example",)),
        ('{"from": "a.b-c@d-e.fr",}', ("a.b-c@d-e.fr",)),
        ("Reply-To: support+ticket-42@help.example.com", ("support+ticket-42@help.example.com",)),
        ("CEO: Ana Ruiz <ana.ruiz@empresa.es>", ("ana.ruiz@empresa.es",)),
        ("alice_smith99@university.edu;bob@x.org", ("alice_smith99@university.edu", "bob@x.org")),
    ],
    "phone": [
        ("Call +44 20 7946 0958 today", ("+44 20 7946 0958",)),
        ("US office: +1 (555) 123-4567.", ("+1 (555) 123-4567",)),
        ("Berlin +49 (0)30 1234567", ("+49 (0)30 1234567",)),
        ("tel:+14155552671", ("+14155552671",)),
        ("Paris +33 1 23 45 67 89", ("+33 1 23 45 67 89",)),
        ("Tokyo +81 3-1234-5678", ("+81 3-1234-5678",)),
        ("mobile +91 98765 43210", ("+91 98765 43210",)),
        ("Fax: 0044 20 7946 0958.", ("0044 20 7946 0958",)),
        ("(555) 123-4567", ("(555) 123-4567",)),
        ("Order 12 shipped, call 555-123-4567", ("555-123-4567",)),
        ("555.123.4567", ("555.123.4567",)),
        ("toll free 1-800-555-0199", ("1-800-555-0199",)),
        ("London 020 7946 0958", ("020 7946 0958",)),
        ("Zentrale 030-1234567", ("030-1234567",)),
        ("Tél. 01 23 45 67 89", ("01 23 45 67 89",)),
        ("Mobile 07700 900123", ("07700 900123",)),
        ("phone: 555-1234", ("555-1234",)),
        ("+44 20 7946 0958 2024", ("+44 20 7946 0958",)),
        ("Call 555-123-4567 x89 please", ("555-123-4567 x89",)),
        ("Tel 0612345678", ("0612345678",)),
    ],
    "credit_card": [
        ("Visa 4111 1111 1111 1111 exp 12/25", ("4111 1111 1111 1111",)),
        ("card=4111-1111-1111-1111", ("4111-1111-1111-1111",)),
        ("pan 4111111111111111.", ("4111111111111111",)),
        ("MC 5555 5555 5555 4444", ("5555 5555 5555 4444",)),
        ("MC 2-series 2223 0031 2200 3222", ("2223 0031 2200 3222",)),
        ("Amex 3782 822463 10005", ("3782 822463 10005",)),
        ("Amex 371449635398431", ("371449635398431",)),
        ("Discover 6011 1111 1111 1117", ("6011 1111 1111 1117",)),
        ("Discover 6500000000000002", ("6500000000000002",)),
        ("JCB 3530 1113 3330 0000", ("3530 1113 3330 0000",)),
        ("Diners 3056 930902 5904", ("3056 930902 5904",)),
        ("Order 12 paid with 4242 4242 4242 4242 2025", ("4242 4242 4242 4242",)),
    ],
    "ipv4": [
        ("ping 192.168.1.1", ("192.168.1.1",)),
        ("gateway 10.0.0.1.", ("10.0.0.1",)),
        ("server at 8.8.8.8:53", ("8.8.8.8",)),
        ("mask 255.255.255.255", ("255.255.255.255",)),
        ("bind 0.0.0.0", ("0.0.0.0",)),
        ("from 172.16.254.1/24", ("172.16.254.1",)),
        ("ip=203.0.113.42,", ("203.0.113.42",)),
        ("[100.64.0.1]", ("100.64.0.1",)),
        ("range 10.0.0.1-10.0.0.255", ("10.0.0.1", "10.0.0.255")),
        ("1.1.1.1 and 9.9.9.9", ("1.1.1.1", "9.9.9.9")),
        ("X-Forwarded-For: 198.51.100.7", ("198.51.100.7",)),
    ],
    "ipv6": [
        ("2001:db8::1", ("2001:db8::1",)),
        ("link fe80::1%eth0", ("fe80::1",)),
        ("full 2001:0db8:85a3:0000:0000:8a2e:0370:7334", ("2001:0db8:85a3:0000:0000:8a2e:0370:7334",)),
        ("mapped ::ffff:192.0.2.128", ("::ffff:192.0.2.128",)),
        ("https://[2001:db8::ff00:42:8329]:443/", ("2001:db8::ff00:42:8329",)),
        ("FE80::0202:B3FF:FE1E:8329", ("FE80::0202:B3FF:FE1E:8329",)),
        ("2001:db8:0:0:1:0:0:1.", ("2001:db8:0:0:1:0:0:1",)),
        ("dead:beef::cafe", ("dead:beef::cafe",)),
        ("dns 2606:4700:4700::1111", ("2606:4700:4700::1111",)),
        ("client=2a00:1450:4001:81b::200e;", ("2a00:1450:4001:81b::200e",)),
    ],
    "iban": [
        ("IBAN GB82 WEST 1234 5698 7654 32", ("GB82 WEST 1234 5698 7654 32",)),
        ("GB82WEST12345698765432", ("GB82WEST12345698765432",)),
        ("DE89 3704 0044 0532 0130 00", ("DE89 3704 0044 0532 0130 00",)),
        ("FR14 2004 1010 0505 0001 3M02 606", ("FR14 2004 1010 0505 0001 3M02 606",)),
        ("NL91 ABNA 0417 1643 00", ("NL91 ABNA 0417 1643 00",)),
        ("ES91 2100 0418 4502 0005 1332", ("ES91 2100 0418 4502 0005 1332",)),
        ("IT60 X054 2811 1010 0000 0123 456", ("IT60 X054 2811 1010 0000 0123 456",)),
        ("BE68 5390 0754 7034", ("BE68 5390 0754 7034",)),
        ("CH93 0076 2011 6238 5295 7", ("CH93 0076 2011 6238 5295 7",)),
        ("PL61 1090 1014 0000 0712 1981 2874", ("PL61 1090 1014 0000 0712 1981 2874",)),
        ("NO93 8601 1117 947", ("NO93 8601 1117 947",)),
        ("IBAN: SE45 5000 0000 0583 9825 7466.", ("SE45 5000 0000 0583 9825 7466",)),
        ("AT61 1904 3002 3457 3201 7777", ("AT61 1904 3002 3457 3201",)),
    ],
    "secret": [
        ("key id " + AWS_KEY_ID, (AWS_KEY_ID,)),
        ("ASIA" + "Y34FZKBOKMUTVV7A temp", ("ASIA" + "Y34FZKBOKMUTVV7A",)),
        ("token " + GH_TOKEN, (GH_TOKEN,)),
        ("github_pat_" + "11ABCDEFG0" + "123456789abcdefghij_KLMNOPQRSTUVWXYZ0123456789",
         ("github_pat_" + "11ABCDEFG0" + "123456789abcdefghij_KLMNOPQRSTUVWXYZ0123456789",)),
        ("slack " + "xox" + "b-2345678901-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
         ("xox" + "b-2345678901-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",)),
        ("sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc", ("sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc",)),
        ("rk" + "_live_" + "51H8xYz2eZvKYlo2Cq7W9bN3", ("rk" + "_live_" + "51H8xYz2eZvKYlo2Cq7W9bN3",)),
        ("OPENAI_API_KEY=" + "sk-" + "proj-Abc123Def456Ghi789Jkl012Mno345",
         ("sk-" + "proj-Abc123Def456Ghi789Jkl012Mno345",)),
        ("AIza" + "SyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", ("AIza" + "SyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe",)),
        ("Authorization: Bearer " + JWT, (JWT,)),
        ("key file:\n" + PEM_BLOCK + "\nend of file", (PEM_BLOCK,)),
        (PEM_CUT + "\n(truncated)", (PEM_CUT,)),
        ('api_key = "' + "f3Kq9ZpL2xVb7NcR4tWm8YhJ" + '"', ("f3Kq9ZpL2xVb7NcR4tWm8YhJ",)),
        ('{"token": "' + "a9F2kQ7zLp3XwR8vN1bT6yHc" + '"}', ("a9F2kQ7zLp3XwR8vN1bT6yHc",)),
        ("export GITHUB_TOKEN=" + "Zx81Kq0PlMn2Bv7Cx3Dz9Fa", ("Zx81Kq0PlMn2Bv7Cx3Dz9Fa",)),
        ("client_secret: " + "7f9c2ba4e88f827d616045507605853e", ("7f9c2ba4e88f827d616045507605853e",)),
        ("X-Api-Key: " + "Xk92JdLq81MzPw0sVb4TnR7c", ("Xk92JdLq81MzPw0sVb4TnR7c",)),
        ("DB_PASSWORD='" + "q8R7m2Xz9LkP4vWn" + "'", ("q8R7m2Xz9LkP4vWn",)),
        ("HF_TOKEN=" + "hf_" + "94wBhPGp6KrrTH3KDchhKpRxZwd6dmHWLL", ("hf_" + "94wBhPGp6KrrTH3KDchhKpRxZwd6dmHWLL",)),
    ],
}

# Texts that must yield no finding of that type (other types may appear).
NEGATIVES: dict[str, list[str]] = {
    "email": [
        "user@localhost",
        "john.doe@",
        "@example.com",
        "a@b.c",
        "john..doe@example.com",
        "john.@example.com",
        "name@example..com",
        "retina icon@2x.png",
        "npm install package@1.2.3",
        "price: 5 @ $3.99",
        "user@example.c0m",
        "user@-example.com",
        "follow @example.com_fan",
        "git clone git@github.com:org/repo.git",
    ],
    "phone": [
        "released 2024-01-15",
        "version 1.2.3.4",
        "revenue 1,234,567",
        "the years 1990-2000",
        "the years 1990 - 2000",
        "Beverly Hills 90210",
        "zip 90210-1234",
        "ISBN 978-3-16-148410-0",
        "ISBN 0-306-40615-2",
        "pi is 3.14159265",
        "at 10:30:45",
        "host 192.168.1.1",
        "price $1 234 567",
        "population 1 234 567",
        "2024/01/15 and 12/31/2023",
        "on 01.02.2024",
        "15.01.2024 10:30",
        "01-02-2024 10:30",
        "id 1234567890",
        "pages 250-1234",
        "€ 555 123 4567",
        "SSN 078-05-1120",
        "Meeting 2024-01-15 10:30-11:45",
        "Invoice INV-2024-000123",
        "Lat 51.5074, lon -0.1278",
        "order 0612345678",
        "SKU 4155552671",
        "# 00 01 02 03 04 05 06 07",
    ],
    "credit_card": [
        "Luhn fails: 4111 1111 1111 1112",
        "Order 1234567890123456",
        "ISBN 978-3-16-148410-0",
        "ISBN 9780306406157",
        "15 digits 4111 1111 1111 111",
        "no such IIN 5611 1111 1111 1111",
        "ms timestamp 1700000000000",
        "odd grouping 4242-4242-42424242",
        "mixed separators 4111 1111-1111 1111",
        "17 digits 41111111111111111",
        "tracking 1Z999AA10123456784",
        "IMEI 490154203237518",
        "phone +44 20 7946 0958",
        "13 digits (EAN-13, retired Visa length) 4222222222222",
        "msisdn 4380345090155",
        "18 digits from 36: 364903757423277758",
    ],
    "ipv4": [
        "999.1.1.1",
        "v 1.2.3",
        "1.2.3.4.5",
        "256.256.256.256",
        "version 1.2.3.4",
        "v1.2.3.4",
        "01.02.03.04",
        "10.0.0",
        "192.168.1.1.1",
        "3.14.15.926",
        "OID 1.3.6.1.4.1",
        "release 10.4.2.1",
        "Mozilla/5.0 (X11; rv:1.9.7.20) Gecko",
        "Chrome/120.0.0.0 Safari/537.36",
        "see sec-15.9.1.15",
        "host-10.1.2.3",
    ],
    "ipv6": [
        "at 12:30:45",
        "MAC 00:1A:2B:3C:4D:5E",
        "mac ab:cd:ef:01:23:45",
        "std::vector<int>",
        "a::b",
        "12::30",
        "x[::2]",
        "::1",
        "1:2::",
        "2001:db8::12345",
        "Foo::Bar::baz",
        "1:2:3:4:5:6:7",
        "10:30::",
    ],
    "iban": [
        "wrong check digits GB83 WEST 1234 5698 7654 32",
        "too short GB82 WEST 1234 5698 7654 3",
        "too short DE89 3704 0044 0532 0130 0",
        "no such country XX82 WEST 1234 5698 7654 32",
        "US12 3456 7890 1234 5678",
        "dashes GB82-WEST-1234-5698-7654-32",
        "AB12CDEFGHIJKLMNOP",
        "too long NL91ABNA041716430012",
        "SKU AB12 CD34 EF56 GH78",
        "flight LH12 4455 6677 8899",
        "DE00 0000 0000 0000 0000 00",
        "lower case (not how IBANs are written) gb82 west 1234 5698 7654 32",
    ],
    "secret": [
        "internationalization and pneumonoultramicroscopicsilicovolcanoconiosis",
        "id 550e8400-e29b-41d4-a716-446655440000",
        "commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
        "api_key=YOUR_API_KEY_HERE",
        "api_key: your-api-key-goes-here-123",
        "password=changeme_changeme",
        "password: correcthorsebatterystaple",
        "token: xxxxxxxxxxxxxxxxxxxxxxxx",
        "token: abcdefghijklmnop1",
        "token = 1234567890123456",
        "max_tokens=4096",
        "tokenizer: bert-base-uncased-whole-word-masking",
        "api_key = os.environ['OPENAI_API_KEY']",
        "secret_key: ${SECRET_KEY}",
        "token_type=Bearer",
        "short AKIA1234",
        "AKIA" + "IOSFODNN7EXAMPLEX",
        "scikit-learn is sk-learn-is-a-popular-python-library",
        "ghp_short",
        "-----BEGIN PUBLIC KEY-----",
        "-----BEGIN CERTIFICATE-----",
        "header only eyJhbGciOiJIUzI1NiJ9",
        "model_name=meta-llama/Llama-2-7b-chat-hf",
        "token = Sam3TrackerVideoAttention(config)",
        "hf_hub_download_for_model_weights_v2",
    ],
}


def score(pii_type: str) -> tuple[float, float, list[str]]:
    """Precision, recall and the failures of one type's detector over its fixtures."""
    tp = fp = fn = 0
    failures = []
    for text, expected in POSITIVES[pii_type]:
        found = [f.value for f in scan_text(text) if f.type == pii_type]
        for value in expected:
            if value in found:
                tp += 1
            else:
                fn += 1
                failures.append(f"missed {value!r} in {text!r} (found {found})")
        for value in found:
            if value not in expected:
                fp += 1
                failures.append(f"extra {value!r} in {text!r}")
    for text in NEGATIVES[pii_type]:
        found = [f.value for f in scan_text(text) if f.type == pii_type]
        fp += len(found)
        failures += [f"false positive {value!r} in {text!r}" for value in found]
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    return precision, recall, failures


# --- fixtures: precision and recall ---------------------------------------------------------


def test_fixture_lists_are_large_enough():
    assert tuple(POSITIVES) == PII_TYPES == tuple(NEGATIVES)
    for pii_type in PII_TYPES:
        assert len(POSITIVES[pii_type]) >= 10, pii_type
        assert len(NEGATIVES[pii_type]) >= 10, pii_type


@pytest.mark.parametrize("pii_type", PII_TYPES)
def test_precision_and_recall_on_fixtures(pii_type):
    precision, recall, failures = score(pii_type)
    report = "\n".join(
        f"  {t:12} precision {p:6.1%}  recall {r:6.1%}" for t, (p, r, _) in ((t, score(t)) for t in PII_TYPES)
    )
    assert (precision, recall) == (1.0, 1.0), (
        f"{pii_type}: precision {precision:.1%}, recall {recall:.1%}\n"
        + "\n".join(failures)
        + "\nall types:\n"
        + report
    )


def test_findings_are_ordered_exact_and_disjoint():
    for fixtures in POSITIVES.values():
        for text, _ in fixtures:
            findings = scan_text(text)
            for f in findings:
                assert isinstance(f, Finding) and f.type in PII_TYPES
                assert text[f.start:f.end] == f.value
            for a, b in zip(findings, findings[1:]):
                assert a.end <= b.start, (text, findings)


def test_text_without_pii_has_no_findings():
    text = (
        "The quick brown fox jumps over the lazy dog. Version 3.11.7 shipped on 2024-01-15 at 10:30; "
        "it costs $1,299.99 (or 1 234,50 EUR) and weighs 2.5 kg. See chapter 12, pages 120-145, and "
        "run `pip install torch==2.6.0`. Ratio 16:9, score 98.6%, id 550e8400-e29b-41d4-a716-446655440000."
    )
    assert scan_text(text) == []
    assert redact_text(text) == text


def test_scan_text_rejects_non_strings():
    with pytest.raises(TypeError):
        scan_text(b"john@example.com")  # type: ignore[arg-type]


def test_helpers():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert iban_ok("GB82WEST12345698765432") and not iban_ok("GB83WEST12345698765432")
    assert not iban_ok("GB82WEST1234569876543")  # one character short for GB
    assert shannon_entropy("aaaa") == 0.0 and shannon_entropy("abcd") == 2.0
    assert looks_random("q8R7m2Xz9LkP4vWn") and not looks_random("YOUR_API_KEY_HERE")


def test_both_email_paths_agree(monkeypatch):
    """Texts with few "@" are searched around each "@", others in one pass: same answers."""
    from workers.pii import detectors

    rng = random.Random(5)
    texts = [
        "".join(rng.choice("ab.-_@ x1%+:") for _ in range(rng.randint(1, 40)))
        + rng.choice(["@ex.com", "@a.co ", "", "@b.org.", "@x..y.com"])
        + "".join(rng.choice("ab.-_@ x1") for _ in range(rng.randint(0, 10)))
        for _ in range(3000)
    ] + [text for text, _ in POSITIVES["email"]] + NEGATIVES["email"]
    monkeypatch.setattr(detectors, "_DENSE_AT", 0)  # always around each "@"
    sparse = [detectors.find_emails(t) for t in texts]
    monkeypatch.setattr(detectors, "_DENSE_AT", 10**9)  # always one pass
    dense = [detectors.find_emails(t) for t in texts]
    assert sparse == dense


# --- overlaps -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected", "also_seen_by"),
    [
        # The IBAN's digits also read as a "0044 ..." phone number.
        ("IBAN DE89 3704 0044 0532 0130 00", [("iban", "DE89 3704 0044 0532 0130 00")], "phone"),
        # A card number after a "+1" also reads as an international phone number.
        ("+1 4111 1111 1111 1111", [("credit_card", "4111 1111 1111 1111")], "phone"),
        # The IPv4 tail of a mapped IPv6 address.
        ("src ::ffff:192.0.2.128 ok", [("ipv6", "::ffff:192.0.2.128")], "ipv4"),
        # A token in a URL's user-info also reads as an e-mail address.
        (f"https://x:{GH_TOKEN}@github.com/o/r", [("secret", GH_TOKEN)], "email"),
        # A bearer JWT is seen by the JWT shape and the bearer rule: one finding.
        ("Authorization: Bearer " + JWT, [("secret", JWT)], "secret"),
    ],
)
def test_overlapping_detectors_keep_the_more_specific(text, expected, also_seen_by):
    detect = DETECTORS[also_seen_by][0]
    assert detect(text), f"{also_seen_by} should also see something in {text!r}"
    assert [(f.type, f.value) for f in scan_text(text)] == expected


# --- redaction ------------------------------------------------------------------------------


def test_redaction_replaces_each_type_and_keeps_the_rest():
    text = (
        f"Mail john@example.com, call +44 20 7946 0958, card 4111 1111 1111 1111, from 10.0.0.1 or "
        f"2001:db8::1, IBAN GB82 WEST 1234 5698 7654 32, key {AWS_KEY_ID}. Thanks!"
    )
    assert redact_text(text) == (
        "Mail [EMAIL], call [PHONE], card [CREDIT_CARD], from [IPV4] or [IPV6], IBAN [IBAN], key [SECRET]. Thanks!"
    )
    assert set(PLACEHOLDERS) == set(PII_TYPES)


def test_redaction_of_every_positive_fixture():
    for pii_type, fixtures in POSITIVES.items():
        for text, values in fixtures:
            findings = scan_text(text)
            redacted = redact_text(text, findings)
            assert redacted.count(PLACEHOLDERS[pii_type]) == len(values), (text, redacted)
            for value in values:
                assert value not in redacted, (text, redacted)
            # Everything outside the findings is unchanged and in place.
            pos, rest = 0, redacted
            for f in findings:
                before = text[pos:f.start]
                assert rest.startswith(before + PLACEHOLDERS[f.type]), (text, redacted)
                rest = rest[len(before) + len(PLACEHOLDERS[f.type]):]
                pos = f.end
            assert rest == text[pos:]


def test_redaction_with_given_findings_only_replaces_those():
    text = "a@example.com and b@example.com"
    first = scan_text(text)[:1]
    assert redact_text(text, first) == "[EMAIL] and b@example.com"
    assert redact_text(text, []) == text
    assert redact_text("", None) == ""


def test_redaction_keeps_multiline_text_around_a_key():
    text = "before\n" + PEM_BLOCK + "\nafter"
    assert redact_text(text) == "before\n[SECRET]\nafter"


# --- masks ----------------------------------------------------------------------------------


def test_masks_match_the_documented_forms():
    assert mask_value("email", "john@example.com") == "j***@e******.com"
    assert mask_value("credit_card", "4242 4242 4242 4242") == "**** **** **** 4242"
    assert mask_value("credit_card", "4242424242424242") == "************4242"
    assert mask_value("secret", AWS_KEY_ID) == "AKIA************MPLE"
    assert mask_value("phone", "+44 20 7946 0958") == "+** ** **** **58"
    assert mask_value("iban", "GB82 WEST 1234 5698 7654 32") == "GB** **** **** **** **54 32"
    assert mask_value("ipv4", "192.168.1.1") == "1**.***.*.1"
    assert mask_value("secret", PEM_BLOCK) == "-----BEGIN RSA PRIVATE KEY-----********"
    assert mask_value("email", "a@b.co") == "*@*.co"


def test_masks_never_contain_the_raw_value():
    for pii_type, fixtures in POSITIVES.items():
        for _, values in fixtures:
            for value in values:
                masked = mask_value(pii_type, value)
                assert value not in masked, (pii_type, value, masked)
                assert "*" in masked
                if pii_type in ("credit_card", "phone"):
                    digits = "".join(c for c in value if c.isdigit())
                    assert digits not in "".join(c for c in masked if c.isdigit())


# --- summary --------------------------------------------------------------------------------


def test_summary_counts_columns_rows_and_masked_examples():
    summary = ScanSummary()
    rows = [
        {"prompt": "mail john@example.com", "response": "ok"},
        {"prompt": "nothing here", "response": "call +44 20 7946 0958 or jane@example.org"},
        {"prompt": "card 4111 1111 1111 1111", "response": None},
        {"prompt": "clean", "response": "clean"},
    ]
    rows += [{"prompt": f"user{i}@example.com", "response": "x"} for i in range(6)]
    for position, row in enumerate(rows):
        for column, value in row.items():
            summary.add(position, column, value)
    assert summary.add(len(rows), "card_number", 4111111111111111) == [
        Finding("credit_card", 0, 16, "4111111111111111")
    ]  # an integer cell

    data = summary.as_dict()
    assert data["counts"] == {
        "email": 8, "phone": 1, "credit_card": 2, "ipv4": 0, "ipv6": 0, "iban": 0, "secret": 0,
    }
    assert data["counts_by_column"] == {
        "prompt": {"email": 7, "credit_card": 1},
        "response": {"email": 1, "phone": 1},
        "card_number": {"credit_card": 1},
    }
    assert data["rows_with_pii"] == 10  # rows 0, 1, 2, 4-9 and the integer row; not row 3
    assert data["rows_scanned"] == 11 and data["cells_scanned"] == 21 and data["total"] == 11
    assert len(data["examples"]["email"]) == 5  # capped
    assert data["examples"]["email"][0] == {"position": 0, "column": "prompt", "masked": "j***@e******.com"}
    assert data["examples"]["phone"] == [{"position": 1, "column": "response", "masked": "+** ** **** **58"}]
    assert data["examples"]["credit_card"][0]["masked"] == "**** **** **** 1111"
    assert set(data["examples"]) == {"email", "phone", "credit_card"}

    dumped = json.dumps(data)
    for raw in ("john@example.com", "jane@example.org", "7946 0958", "4111 1111 1111 1111", "4111111111111111"):
        assert raw not in dumped


def test_summary_of_nothing():
    data = ScanSummary().as_dict()
    assert data["counts"] == dict.fromkeys(PII_TYPES, 0)
    assert data["rows_with_pii"] == 0 and data["examples"] == {} and data["counts_by_column"] == {}
    json.dumps(data)


# --- linear time ----------------------------------------------------------------------------
#
# Speed is measured in bench/pii_scan.py (each adversarial megabyte against a plain one); here
# two guards that do not read the clock: the patterns' structure (read with re._parser, the
# parser `re` itself uses: private, but the same from 3.11 on), and a hang guard.

HANG_S = 60  # a linear scan of 1 MB takes well under a second; a quadratic one, hours


def _engine_patterns() -> dict[str, re.Pattern]:
    """Every compiled pattern the engine holds, by name (module globals, and inside their lists,
    tuples and dicts): a new detector's patterns are checked without being listed here."""
    found: dict[str, re.Pattern] = {}

    def visit(name: str, value) -> None:
        if isinstance(value, re.Pattern):
            found[name] = value
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                visit(f"{name}[{i}]", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                visit(f"{name}[{key!r}]", item)

    for module_name, module in sorted(sys.modules.items()):
        if module_name == "workers.pii" or module_name.startswith("workers.pii."):
            for name, value in vars(module).items():
                visit(f"{module_name}.{name}", value)
    return found


_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
_CHARS = range(0x3000)  # enough of Unicode for the engine's classes (ASCII, Latin-1, currency signs)


def _in_category(category, c: str, ascii_only: bool) -> bool:
    name = str(category).removeprefix("CATEGORY_")
    negated = name.startswith("NOT_")
    kind = name.removeprefix("NOT_")
    if ascii_only and not c.isascii():
        hit = False
    elif kind == "DIGIT":
        hit = c.isdecimal()
    elif kind == "WORD":
        hit = c.isalnum() or c == "_"
    elif kind == "SPACE":
        hit = c.isspace()
    else:
        raise AssertionError(f"unknown category {category}")
    return hit != negated


def _char_set(op, av, flags: int) -> frozenset[str] | None:
    """The characters one single-character item matches (both cases under IGNORECASE), or None
    when the item is not a single character."""
    ascii_only = bool(flags & re.ASCII)
    if op == sre.LITERAL:
        chars = {chr(av)}
    elif op == sre.NOT_LITERAL:
        chars = {c for c in map(chr, _CHARS) if c != chr(av)}
    elif op == sre.ANY:
        chars = set(map(chr, _CHARS))
    elif op == sre.CATEGORY:
        chars = {c for c in map(chr, _CHARS) if _in_category(av, c, ascii_only)}
    elif op == sre.IN:
        negate, chars = False, set()
        for item_op, item in av:
            if item_op == sre.NEGATE:
                negate = True
            elif item_op == sre.LITERAL:
                chars.add(chr(item))
            elif item_op == sre.RANGE:
                chars.update(map(chr, range(item[0], item[1] + 1)))
            elif item_op == sre.CATEGORY:
                chars.update(c for c in map(chr, _CHARS) if _in_category(item, c, ascii_only))
            else:
                raise AssertionError(f"unknown class item {item_op}")
        if negate:
            chars = set(map(chr, _CHARS)) - chars
    else:
        return None
    if flags & re.IGNORECASE:
        chars |= {c.swapcase() for c in chars}
    return frozenset(chars)


def _delimited(seq, chars: frozenset[str], flags: int) -> bool:
    """Whether every way through `seq` takes one character outside `chars` (or looks back at
    one): then a run of `chars` can be cut into repetitions of `seq` in one way only."""
    for op, av in seq:
        own = _char_set(op, av, flags)
        if own is not None and not own & chars:
            return True
        if op == sre.SUBPATTERN and _delimited(av[3], chars, flags):
            return True
        if op == sre.BRANCH and all(_delimited(branch, chars, flags) for branch in av[1]):
            return True
        if op in _REPEATS and av[0] >= 1 and _delimited(av[2], chars, flags):
            return True
        if op == sre.ASSERT and av[0] == -1 and len(av[1]) == 1:  # (?<=x): the character before
            (look_op, look_av), = av[1]
            looked = _char_set(look_op, look_av, flags)
            if looked is not None and not looked & chars:
                return True
    return False


def _variable_runs(seq, flags: int):
    """The repeats of one character with a variable count in `seq` (groups included)."""
    for op, av in seq:
        if op in _REPEATS:
            low, high, body = av
            if low != high and len(body) == 1 and _char_set(*body[0], flags) is not None:
                yield _char_set(*body[0], flags), (low, high)
            else:
                yield from _variable_runs(body, flags)
        elif op == sre.SUBPATTERN:
            yield from _variable_runs(av[3], flags)
        elif op == sre.BRANCH:
            for branch in av[1]:
                yield from _variable_runs(branch, flags)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            yield from _variable_runs(av[1], flags)


def backtracking_hazards(pattern: re.Pattern) -> list[str]:
    """What in `pattern` can make Python's backtracking `re` super-linear, by the rules of
    workers/pii/detectors.py: an open-ended repeat only of one character and only at the very
    end; a repeated group only when each repetition takes a separator its runs cannot match
    (then a text splits into repetitions one way only)."""
    flags = pattern.flags
    hazards = []

    def walk(seq, top: bool) -> None:
        for index, (op, av) in enumerate(seq):
            if op in _REPEATS:
                low, high, body = av
                single = len(body) == 1 and _char_set(*body[0], flags) is not None
                if high == sre.MAXREPEAT and not (single and top and index == len(seq) - 1):
                    hazards.append(f"open-ended repeat {'of a group' if not single else 'not at the end'}"
                                   f" at item {index}: {list(body)!r:.120}")
                if not single and high > 1:
                    for chars, bounds in _variable_runs(body, flags):
                        if not _delimited(body, chars, flags):
                            hazards.append(f"repeated group {low, high} whose run {bounds} has no separator "
                                           f"of its own: {list(body)!r:.120}")
                walk(body, False)
            elif op == sre.SUBPATTERN:
                walk(av[3], top and index == len(seq) - 1)
            elif op == sre.BRANCH:
                for branch in av[1]:
                    walk(branch, top and index == len(seq) - 1)
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                walk(av[1], False)
            elif op in (sre.ATOMIC_GROUP, sre.GROUPREF_EXISTS):
                hazards.append(f"{op} is not covered by this check")

    walk(sre_parse.parse(pattern.pattern, pattern.flags), True)
    return hazards


def test_the_engines_patterns_cannot_backtrack_super_linearly():
    patterns = _engine_patterns()
    assert len(patterns) >= 30  # the walk found the detectors' patterns
    hazards = {name: found for name, p in patterns.items() if (found := backtracking_hazards(p))}
    assert hazards == {}


@pytest.mark.parametrize(("pattern", "hazard"), [
    (r"(a+)+b", "open-ended repeat of a group"),
    (r"[a-z]+@", "open-ended repeat not at the end"),
    (r"(?:[a-z0-9\-]{1,63}\.?){1,10}[a-z]{2,24}", "has no separator"),
    (r"(?:\d{1,4}[ -]?){2,7}", "has no separator"),
])
def test_the_structure_check_sees_catastrophic_shapes(pattern, hazard):
    found = backtracking_hazards(re.compile(pattern, re.ASCII))
    assert any(hazard in text for text in found), found
    # Each is also a shape the guard lets through once it is written the engine's way.
    assert backtracking_hazards(re.compile(r"(?:[a-z0-9\-]{1,63}\.){1,10}[a-z]{2,24}|[\d(][\d -]{6,}")) == []


_SCAN_ONE = """
import sys
from tests.workers.pii_inputs import ADVERSARIAL
from workers.pii import scan_text
scan_text(ADVERSARIAL[sys.argv[1]])
"""


@pytest.mark.parametrize("name", list(ADVERSARIAL))
def test_an_adversarial_megabyte_is_scanned_without_hanging(name):
    # A hang guard, not a speed limit (bench/pii_scan.py measures the speed): in a child process,
    # because a regex stuck in C cannot be interrupted, and because a hang must not take the run with it.
    try:
        result = subprocess.run([sys.executable, "-c", _SCAN_ONE, name], cwd=REPO, capture_output=True, text=True,
                                timeout=HANG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scanning {len(ADVERSARIAL[name]):,} characters of {name!r} did not end in {HANG_S} s: "
                    "a detector is super-linear on it")
    assert result.returncode == 0, result.stderr


# --- no Django ------------------------------------------------------------------------------


def test_importing_the_engine_imports_no_django_and_no_third_party_package():
    code = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import workers.pii\n"
        "loaded = {name.split('.')[0] for name in set(sys.modules) - before}\n"
        "foreign = sorted(n for n in loaded if n not in sys.stdlib_module_names and n != 'workers')\n"
        "print(foreign)\n"
        "sys.exit(1 if 'django' in sys.modules or foreign else 0)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
