"""`python -m bench` runs every benchmark; `python -m bench NAME...` runs some. Options after a
name are that benchmark's own (`python -m bench sync_views --only dataset_diff_page`)."""

import importlib
import sys

BENCHMARKS = {
    "cold_start": "bench.cold_start",
    "dashboard_latency": "bench.dashboard_latency",
    "policy_scale": "bench.policy_scale",
    "import_jsonl": "bench.import_jsonl",
    "browse_scale": "bench.browse_scale",
    "generate_batched": "bench.generate_batched",
    "continuous_batching": "bench.continuous_batching",
    "prefill_groups": "bench.prefill_groups",
    "constrain_overhead": "bench.constrain_overhead",
    "train_lora": "bench.train_lora",
    "train_ddp": "bench.train_ddp",
    "train_step_options": "bench.train_step_options",
    "packing": "bench.packing",
    "compare_batched": "bench.compare_batched",
    "annotate_concurrent": "bench.annotate_concurrent",
    "principal_cache": "bench.principal_cache",
    "live_latency": "bench.live_latency",
    "live_overhead": "bench.live_overhead",
    "playground_ttft": "bench.playground_ttft",
    "alias_switch": "bench.alias_switch",
    "serve_adapters": "bench.serve_adapters",
    "serve_concurrent": "bench.serve_concurrent",
    "serving_limits": "bench.serving_limits",
    "serve_fairness": "bench.serve_fairness",
    "engine_metrics_overhead": "bench.engine_metrics_overhead",
    "sync_views": "bench.sync_views",
    "pii_scan": "bench.pii_scan",
    "pii_phone_library": "bench.pii_phone_library",
    "gguf_export": "bench.gguf_export",
    "capture_overhead": "bench.capture_overhead",
    "judge_throughput": "bench.judge_throughput",
    "judge_job": "bench.judge_job",
    "scale_workers": "bench.scale_workers",
    "serve_precision": "bench.serve_precision",
    "provider_overhead": "bench.provider_overhead",
    "classify": "bench.classify",
}


def main(argv: list[str]) -> int:
    runs: list[tuple[str, list[str]]] = []  # (name, its options)
    for arg in argv:
        if arg.startswith("-") and runs:
            runs[-1][1].append(arg)
        elif runs and runs[-1][1] and runs[-1][1][-1].startswith("-") and arg not in BENCHMARKS:
            runs[-1][1].append(arg)  # an option's value
        else:
            runs.append((arg, []))
    runs = runs or [(name, []) for name in BENCHMARKS]
    unknown = [name for name, _ in runs if name not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}", file=sys.stderr)
        return 2
    failed = []
    for name, options in runs:
        module = importlib.import_module(BENCHMARKS[name])
        results = module.run(options) if options else module.run()
        failed += [r["name"] for r in results if not r["passed"]]
    if failed:
        print(f"\nbelow target: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
