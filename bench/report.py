"""Shared result format: a printed table and bench/results/NAME.json per measurement."""

import json
import os
import statistics
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    memory_kib = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    except OSError:
        pass
    return {"cores": os.cpu_count(), "memory_gib": round(memory_kib / 1024 / 1024, 1)}


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=RESULTS.parent.parent).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]


def result(*, name: str, metric: str, unit: str, value: float, baseline_what: str, baseline_value: float,
           target: str, passed: bool, ratio: float | None = None, extra: dict | None = None) -> dict:
    if ratio is None:
        ratio = value / baseline_value if baseline_value else float("inf")
    return {
        "name": name, "metric": metric, "unit": unit, "value": round(value, 4),
        "baseline": {"what": baseline_what, "value": round(baseline_value, 4)},
        "ratio": round(ratio, 3), "target": target, "passed": bool(passed),
        "commit": commit(), "machine": machine(), **(extra or {}),
    }


def publish(results: list[dict]) -> list[dict]:
    RESULTS.mkdir(exist_ok=True)
    header = f"{'benchmark':<34} {'value':>10} {'unit':<6} {'baseline':>10}  {'ratio':>6}  {'target':<22} ok"
    print(header)
    print("-" * len(header))
    for r in results:
        # A baseline that could not be measured in this run has value and ratio None: "—".
        baseline = "—" if r["baseline"]["value"] is None else f"{r['baseline']['value']:.3f}"
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
        print(f"{r['name']:<34} {r['value']:>10.3f} {r['unit']:<6} {baseline:>10}  "
              f"{ratio:>6}  {r['target']:<22} {'yes' if r['passed'] else 'NO'}")
        (RESULTS / f"{r['name']}.json").write_text(json.dumps(r, indent=2) + "\n")
    return results
