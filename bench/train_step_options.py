"""The training step options on this CPU (issue 21, faster steps): the engine's LoRA step with the full
logits (fused_loss off, eager: the baseline), with the chunked linear cross-entropy (fused_loss chunked),
and with torch.compile'd decoder blocks (compile), each against the baseline in the same run.

The demo model (SmolLM2-135M-Instruct, converted as bench.train_lora does), fp32 (what precision "auto"
is on a CPU), train_lora's synthetic rows, packing into rows of MAX_SEQ_LEN, BATCH packed rows a step,
LoRA r16/a32 on q/k/v/o, dropout 0, STEPS optimizer steps. Each variant in a child process of its own,
one after another, with the same thread count and OMP_WAIT_POLICY=PASSIVE (bench.train_lora says why).
Reported: non-padding tokens/s over the steps after the first WARMUP (the first compiles), the first
step's seconds (the compilation is in it), the child's peak resident memory (VmHWM: the model load
included, so the differences are what the step holds), and the largest relative difference of the
loss curve from the baseline's (the options must not change the training).
Output: a table and bench/results/train_step_options.json. "Passed" means every variant trained the
baseline's curve (relative difference <= 1e-3); whether an option is faster is what the table says,
and what the defaults follow (bench/README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.train_lora import DATA_SEED, OMP_WAIT_POLICY, THREADS, demo_model_dir, make_rows, train_config

ROOT = Path(__file__).resolve().parent.parent
STEPS = int(os.environ.get("BENCH_STEP_OPTIONS_STEPS", "6"))
WARMUP = 2
BATCH = 4
MAX_SEQ_LEN = 256
VARIANTS = {"plain": {"fused_loss": "off"}, "chunked": {"fused_loss": "chunked"},
            "compile": {"fused_loss": "off", "compile": True}}
LABELS = {"plain": "full logits, eager (baseline)", "chunked": "fused_loss chunked", "compile": "compile"}
CURVE_TOLERANCE = 1e-3


def child(variant: str, reply: Path) -> None:
    import torch

    from workers.training import TrainCallbacks, train

    torch.set_num_threads(THREADS)
    points: list[dict] = []

    class Points(TrainCallbacks):
        def on_step(self, point):
            points.append(point)

    config = train_config("fp32", batch_size=BATCH, max_seq_len=MAX_SEQ_LEN, max_steps=STEPS, lora_dropout=0.0,
                          eval_at_start=False, **VARIANTS[variant])
    rows = make_rows(STEPS * BATCH * 4, DATA_SEED)  # more than STEPS steps of packed rows
    with tempfile.TemporaryDirectory(prefix="bench-step-options-") as out:
        train(config, model_dir=demo_model_dir(), output_dir=Path(out), train_rows=rows, eval_rows=[],
              callbacks=Points())
    peak_kib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmHWM:"))
    tokens = [b - a for a, b in zip([0] + [p["tokens_seen"] for p in points], [p["tokens_seen"] for p in points])]
    seconds = [t / p["tokens_per_s"] for t, p in zip(tokens, points)]
    reply.write_text(json.dumps({
        "variant": variant, "steps": len(points), "timed_tokens": sum(tokens[WARMUP:]),
        "timed_seconds": sum(seconds[WARMUP:]), "tokens_per_s": sum(tokens[WARMUP:]) / sum(seconds[WARMUP:]),
        "first_step_s": seconds[0], "peak_rss_mib": peak_kib / 1024, "losses": [p["loss"] for p in points]}))


def run(options: list[str] | None = None) -> list[dict]:
    from bench.report import publish, result

    demo_model_dir()  # converted once, before the children (not timed)
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": OMP_WAIT_POLICY,
           "TOKENIZERS_PARALLELISM": "false", "TRANSFORMERS_VERBOSITY": "error"}
    started = time.perf_counter()
    reports: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-step-options-") as work:
        for variant in VARIANTS:
            reply = Path(work) / f"{variant}.json"
            done = subprocess.run([sys.executable, "-m", "bench.train_step_options", "--child", variant, str(reply)],
                                  cwd=ROOT, env=env)
            if done.returncode != 0 or not reply.exists():
                raise RuntimeError(f"train_step_options: the {variant} child failed (exit {done.returncode})")
            reports[variant] = json.loads(reply.read_text())
    base = reports["plain"]
    print(f"\ntrain_step_options: demo model (SmolLM2-135M), CPU fp32, {THREADS} threads, {BATCH} packed rows of "
          f"<= {MAX_SEQ_LEN} tokens a step, {STEPS} steps, timed after the first {WARMUP}")
    print(f"  {'variant':<30} {'tok/s':>7} {'ratio':>6} {'first step s':>12} {'peak RSS MiB':>12} {'vs base':>8} "
          f"{'max loss diff':>13}")
    for name, r in reports.items():
        r["ratio"] = r["tokens_per_s"] / base["tokens_per_s"]
        r["peak_vs_baseline_mib"] = r["peak_rss_mib"] - base["peak_rss_mib"]
        r["max_loss_rel_diff"] = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], base["losses"]))
        print(f"  {LABELS[name]:<30} {r['tokens_per_s']:>7.0f} {r['ratio']:>6.2f} {r['first_step_s']:>12.1f} "
              f"{r['peak_rss_mib']:>12.0f} {r['peak_vs_baseline_mib']:>+8.0f} {r['max_loss_rel_diff']:>13.2e}")
    print(f"  (total {time.perf_counter() - started:.0f} s)\n")
    same_curve = all(r["max_loss_rel_diff"] <= CURVE_TOLERANCE for r in reports.values())
    best = max(reports.values(), key=lambda r: r["tokens_per_s"])
    return publish([result(
        name="train_step_options", metric="LoRA step non-padding tokens/s, the fastest option (CPU fp32)",
        unit="tok/s", value=best["tokens_per_s"], baseline_what="full logits, eager blocks",
        baseline_value=base["tokens_per_s"], target=f"same curve (<= {CURVE_TOLERANCE:g})", passed=same_curve,
        extra={"fastest": best["variant"], "variants": reports,
               "setup": {"steps": STEPS, "warmup": WARMUP, "batch": BATCH, "max_seq_len": MAX_SEQ_LEN,
                         "threads": THREADS}})])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], Path(sys.argv[3]))
    else:
        run(sys.argv[1:])
