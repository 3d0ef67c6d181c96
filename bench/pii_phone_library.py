"""Phone detection: the PII engine's own detector (`workers.pii.detectors.find_phones`) against
the `phonenumbers` library's matcher (Google's libphonenumber, ported), in the same run, on the
labelled examples the tests hold (tests/workers/test_pii.py: POSITIVES["phone"], the exact
spans wanted, and NEGATIVES["phone"], text where no phone number may be found) and on a
megabyte of prose for speed.

The matcher needs a default region for numbers written without "+CC"; a dataset mixes
countries, so every region tried is reported, at both leniencies (POSSIBLE: the length fits;
VALID: the numbering plan allows it). This is the measurement behind keeping the engine's
detector (issue #17, item 9). Needs `pip install phonenumbers` (not a dependency of the product).
"""

from __future__ import annotations

import time

REGIONS = ("US", "GB", "DE", "FR")


def run() -> list[dict]:
    try:
        import phonenumbers
    except ImportError:
        raise SystemExit("pip install phonenumbers to run this benchmark") from None
    from bench.report import publish, result
    from tests.workers.pii_inputs import MB, plain
    from tests.workers.test_pii import NEGATIVES, POSITIVES
    from workers.pii.detectors import find_phones

    positives, negatives = POSITIVES["phone"], NEGATIVES["phone"]

    def ours(text: str) -> tuple[str, ...]:
        return tuple(text[start:end] for start, end in find_phones(text))

    def score(find) -> tuple[int, int]:
        return (sum(find(text) == wanted for text, wanted in positives), sum(bool(find(text)) for text in negatives))

    rows = [("workers.pii find_phones", *score(ours))]
    leniencies = {"POSSIBLE": phonenumbers.Leniency.POSSIBLE, "VALID": phonenumbers.Leniency.VALID}
    for region in REGIONS:
        for name, leniency in leniencies.items():
            def library(text, region=region, leniency=leniency):
                return tuple(m.raw_string for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=leniency))
            rows.append((f"phonenumbers {region} {name}", *score(library)))

    text = plain(MB)
    started = time.process_time()
    find_phones(text)
    ours_s = time.process_time() - started
    started = time.process_time()
    list(phonenumbers.PhoneNumberMatcher(text, "US", leniency=phonenumbers.Leniency.VALID))
    library_s = time.process_time() - started

    print(f"\n{'detector':<30} {'exact spans':>12} {'false alarms':>13}")
    for name, hits, alarms in rows:
        print(f"{name:<30} {hits:>5} / {len(positives):<5} {alarms:>5} / {len(negatives):<5}")
    print(f"\nCPU s on 1 MB of prose: ours {ours_s:.3f}, phonenumbers (US, VALID) {library_s:.3f}, "
          f"ratio {library_s / ours_s:.1f}\n")
    best_library = max(rows[1:], key=lambda row: row[1] - row[2])
    return publish([
        result(name="pii_phone_library", metric="labelled phone examples found exactly, minus false alarms",
               unit="examples", value=rows[0][1] - rows[0][2],
               baseline_what=f"the phonenumbers matcher's best setting ({best_library[0]})",
               baseline_value=best_library[1] - best_library[2], target="ours >= the library's best",
               passed=rows[0][1] - rows[0][2] >= best_library[1] - best_library[2],
               extra={"rows": [{"detector": n, "exact": h, "false_alarms": a} for n, h, a in rows],
                      "positives": len(positives), "negatives": len(negatives),
                      "cpu_s_ours_1mb": ours_s, "cpu_s_library_1mb": library_s}),
    ])


if __name__ == "__main__":
    run()
