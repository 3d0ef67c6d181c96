"""The PII engine on adversarial input: `workers.pii.scan_text` over each adversarial megabyte of
tests/workers/pii_inputs.py (runs of a quantified class, separators that split many ways,
prefixes that never finish), against a plain megabyte of prose with some PII, in the same run.

CPU time of this process (`time.process_time`: other work on a shared machine counts less
than on the wall clock), the median of REPEATS scans per input, a plain scan between any two
adversarial ones. Also each input at 4 MB against 4x its 1 MB time: a linear scan stays near
1 there. Target: no adversarial megabyte costs more than 4x a plain one; linear growth reported.
Plain Python, no Django, no services.
"""

from __future__ import annotations

import statistics
import time

REPEATS = 5
BIG = 4  # the growth check's size, in megabytes
TARGET_RATIO = 4.0


def _cpu_s(scan, text: str) -> float:
    started = time.process_time()
    scan(text)
    return time.process_time() - started


def run() -> list[dict]:
    from bench.report import publish, result
    from tests.workers.pii_inputs import MB, adversarial, plain
    from workers.pii import scan_text

    plain_mb, plain_big = plain(MB), plain(BIG * MB)
    inputs, big_inputs = adversarial(MB), adversarial(BIG * MB)
    scan_text(plain_mb)  # warm-up: lazily built tables, the allocator
    plain_samples: list[float] = []
    rows = []
    for name, text in inputs.items():
        samples = []
        for _ in range(REPEATS):
            plain_samples.append(_cpu_s(scan_text, plain_mb))
            samples.append(_cpu_s(scan_text, text))
        big = statistics.median(_cpu_s(scan_text, big_inputs[name]) for _ in range(max(REPEATS // 2, 1)))
        rows.append({"input": name, "median_ms": statistics.median(samples) * 1000, "max_ms": max(samples) * 1000,
                     "big_median_ms": big * 1000})
    plain_big_ms = statistics.median(_cpu_s(scan_text, plain_big) for _ in range(max(REPEATS // 2, 1))) * 1000
    plain_ms = statistics.median(plain_samples) * 1000
    for row in rows:
        row["ratio"] = row["median_ms"] / plain_ms
        row["growth"] = row["big_median_ms"] / (BIG * row["median_ms"]) if row["median_ms"] else None

    print(f"\n{'input (1 MB)':<24} {'CPU ms median / max':>20} {'vs plain':>9} {f'{BIG} MB ms':>9} {'growth':>7}")
    for row in sorted(rows, key=lambda r: -r["ratio"]):
        growth = "—" if row["growth"] is None else f"{row['growth']:.2f}"
        print(f"{row['input']:<24} {row['median_ms']:>10.1f} / {row['max_ms']:<7.1f} {row['ratio']:>9.2f} "
              f"{row['big_median_ms']:>9.1f} {growth:>7}")
    print(f"{'plain text (baseline)':<24} {plain_ms:>10.1f} / {max(plain_samples) * 1000:<7.1f} {1:>9.2f} "
          f"{plain_big_ms:>9.1f} {plain_big_ms / (BIG * plain_ms):>7.2f}\n")

    worst = max(rows, key=lambda r: r["ratio"])
    growths = [r["growth"] for r in rows if r["growth"] is not None]
    extra = {"inputs": rows, "plain_median_ms": plain_ms, "plain_big_median_ms": plain_big_ms,
             "repeats": REPEATS, "size_chars": MB, "big_size_chars": BIG * MB, "clock": "time.process_time"}
    return publish([
        result(name="pii_scan_adversarial", metric=f"CPU ms of scan_text on the worst adversarial megabyte "
               f"({worst['input']})", unit="ms", value=worst["median_ms"],
               baseline_what="scan_text on a plain megabyte of prose with PII (same run, interleaved)",
               baseline_value=plain_ms, target=f"ratio <= {TARGET_RATIO:g}", passed=worst["ratio"] <= TARGET_RATIO,
               extra={**extra, "worst_growth": max(growths)}),
    ])


if __name__ == "__main__":
    run()
