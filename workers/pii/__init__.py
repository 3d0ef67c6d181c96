"""The PII engine: find e-mail addresses, phone numbers, payment cards, IP addresses, IBANs
and secrets in text, redact them, and summarize them over a dataset without keeping them.

Plain Python (no Django, no Celery, standard library only): a thin task feeds it the cells
of a dataset version and stores the summary.

    findings = scan_text("Mail j.doe@example.com or call +44 20 7946 0958")
    # [Finding("email", 5, 22, "j.doe@example.com"), Finding("phone", 31, 47, "+44 20 7946 0958")]
    redact_text(text, findings)       # "Mail [EMAIL] or call [PHONE]"
    summary = ScanSummary()
    summary.add(row_position, "prompt", text)    # -> the findings of that cell
    summary.as_dict()                 # counts, counts by column, rows with PII, masked examples

Types (PII_TYPES) and what counts:
- email: local@domain.tld, ASCII, labels checked, no trailing dot; not "icon@2x.png" or an SSH
  remote ("git@github.com:org/repo").
- phone: "+CC ..." international forms, "00CC ...", North American "(555) 123-4567" /
  "555-123-4567" / "1-800-555-0199", national forms with a trunk 0 ("020 7946 0958"), 7-15
  digits, optional extension ("x89"); "555-1234" and bare digit runs only right after a cue
  word ("phone", "tel", "call", "fax", ...). Never dates, year ranges, amounts, versions, zip
  codes, SSNs or IP addresses.
- credit_card: 13-19 digits, plain or in 4-digit groups (Amex/Diners 4-6-5/4-6-4), a known
  IIN with that network's length (Visa 16/19, Mastercard, Amex, Discover, JCB, Diners) and
  the Luhn check.
- ipv4, ipv6: validated by `ipaddress`; not version strings ("version 1.2.3.4",
  "Chrome/120.0.0.0"), parts of longer dotted runs, times ("12:30:45"), MAC addresses, or
  "::"-forms too short to tell from code ("::1", "a::b").
- iban: upper-case country code, check digits and BBAN (plain or in groups of 4), the
  country's length (IBAN_LENGTHS, 77 countries) and the mod-97 check.
- secret: AWS key ids, GitHub, Slack, Stripe live, OpenAI-style (sk-...), Hugging Face and
  Google API keys, JWTs, private key PEM blocks, and values assigned to api_key / token /
  secret / password names (or after "Bearer") that look random: 16+ characters, letters and
  digits, no placeholder words, Shannon entropy of 3.5+ bits per character (3.0 for hex).
  Only the value is a finding ("api_key=[SECRET]"). Bare UUIDs and git SHAs are not secrets.

Overlaps go to the more specific type (secret > credit_card > iban > email > ipv6 > ipv4 >
phone), then to the longer finding. Every pattern is linear-time (see detectors.py), so a scan
is linear in the text length: about 10 MB/s on source code, 1 MB of adversarial input in well
under a second.
"""

from .detectors import IBAN_LENGTHS, card_brand, iban_ok, looks_random, luhn_ok, shannon_entropy
from .findings import PII_TYPES, PLACEHOLDERS, Finding
from .mask import mask_value
from .scan import redact_text, scan_text
from .summary import ScanSummary

__all__ = [
    "IBAN_LENGTHS",
    "PII_TYPES",
    "PLACEHOLDERS",
    "Finding",
    "ScanSummary",
    "card_brand",
    "iban_ok",
    "looks_random",
    "luhn_ok",
    "mask_value",
    "redact_text",
    "scan_text",
    "shannon_entropy",
]
