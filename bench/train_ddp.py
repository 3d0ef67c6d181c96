"""Data-parallel fine-tuning on the CPU: 2 gloo processes x 1 thread against 1 process x 2 threads.

Both sides run the engine on the demo model (SmolLM2-135M-Instruct, safetensors, fp32) over the same
synthetic instruction rows as train_lora (make_rows), with the same config and seed: packing, batch
BATCH packed rows a micro-batch (the global batch), grad_accum 1, LoRA r 16 / alpha 32 on q, k, v, o,
dropout 0 (so no random masks differ between the sides), AdamW 2e-4 cosine, STEPS optimizer steps,
no evaluation, no checkpoint before the end.

- one process: `workers.training.train` in a child process with torch.set_num_threads(2)
  (OMP_NUM_THREADS=2);
- two processes: `workers.training.train_distributed` with devices=2: torchrun, gloo, each rank one
  thread (OMP_NUM_THREADS=1) and half of every micro-batch; DDP all-reduces the LoRA gradients.

Reported: non-padding tokens/s over the steps (tokens trained / the steps' summed time, rank 0's
clock for the two processes; model loading, torchrun's start and the rendezvous are outside it) and
the curve difference: the largest |loss_2 - loss_1| / |loss_1| over the steps. Target (the issue):
the difference at most 1e-3 in fp32 — correctness, not speed: two CPU cores cannot show scaling
(the two sides share the same two cores). BENCH_DDP_STEPS changes the number of steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = int(os.environ.get("BENCH_DDP_STEPS", "12"))
ROWS = 96
BATCH = 4
MAX_SEQ_LEN = 256
TARGET = 1e-3


def config(devices: int):
    from workers.training import TrainConfig

    return TrainConfig(max_steps=STEPS, batch_size=BATCH, max_seq_len=MAX_SEQ_LEN, lora_r=16, lora_alpha=32,
                       lora_dropout=0.0, learning_rate=2e-4, precision="fp32", device="cpu", eval_at_start=False,
                       checkpoint_every=10_000, seed=42, devices=devices)


def side(devices: int, out: Path) -> dict:
    """One side, in this (child) process; returns its step points."""
    import torch

    from bench.train_lora import demo_model_dir, make_rows
    from workers.training import TrainCallbacks, train, train_distributed

    class Points(TrainCallbacks):
        def __init__(self) -> None:
            self.steps: list[dict] = []

        def on_step(self, point: dict) -> None:
            self.steps.append(point)

    if devices == 1:
        torch.set_num_threads(2)
    points = Points()
    started = time.perf_counter()
    engine = train if devices == 1 else train_distributed
    engine(config(devices), model_dir=demo_model_dir(), output_dir=out, train_rows=make_rows(ROWS, 7),
           eval_rows=[], callbacks=points)
    return {"steps": points.steps, "wall_s": time.perf_counter() - started}


def run_side(devices: int, work: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "2" if devices == 1 else "1", "OMP_WAIT_POLICY": "PASSIVE"}
    reply = work / f"side-{devices}.json"
    subprocess.run([sys.executable, "-m", "bench.train_ddp", "--child", str(devices), str(work / f"out-{devices}"),
                    str(reply)], cwd=ROOT, env=env, check=True)
    return json.loads(reply.read_text())


def run() -> list[dict]:
    from bench.report import publish, result
    from bench.train_lora import demo_model_dir

    demo_model_dir()  # convert once (cached) before anything is timed
    work = Path(tempfile.mkdtemp(prefix="bench-train-ddp-"))
    try:
        one, two = run_side(1, work), run_side(2, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for name, r in (("1 process x 2 threads", one), ("2 processes x 1 thread (gloo)", two)):
        tokens = r["steps"][-1]["tokens_seen"]
        seconds = r["steps"][-1]["elapsed_s"]
        r["tokens_per_s"] = tokens / seconds
        rows.append((name, len(r["steps"]), tokens, seconds, r["tokens_per_s"], r["wall_s"]))
    losses = [(a["loss"], b["loss"]) for a, b in zip(one["steps"], two["steps"])]
    assert [p["step"] for p in one["steps"]] == [p["step"] for p in two["steps"]] == list(range(1, STEPS + 1))
    difference = max(abs(b - a) / abs(a) for a, b in losses)
    print(f"\ntrain_ddp: SmolLM2-135M-Instruct fp32, LoRA r16/a32 q,k,v,o, {STEPS} steps of {BATCH} packed rows "
          f"(max {MAX_SEQ_LEN} tokens), dropout 0, seed 42")
    print(f"  {'side':<32} {'steps':>5} {'tokens':>7} {'step s':>7} {'tok/s':>7} {'wall s':>7}")
    for name, steps, tokens, seconds, speed, wall in rows:
        print(f"  {name:<32} {steps:>5} {tokens:>7,} {seconds:>7.1f} {speed:>7.1f} {wall:>7.1f}")
    print(f"  largest relative loss difference over the steps: {difference:.2e} (target <= {TARGET:g})")
    results = [
        result(name="train_ddp_curve", metric="max relative loss difference, 2 gloo processes vs 1", unit="rel",
               value=difference, baseline_what="1 process x 2 threads, same global batch and seed",
               baseline_value=0.0, ratio=difference / TARGET, target=f"<= {TARGET:g}",
               passed=difference <= TARGET, extra={"losses": losses}),
        result(name="train_ddp_tokens_per_s", metric="non-padding tokens/s, 2 processes x 1 thread (gloo)",
               unit="tok/s", value=two["tokens_per_s"], baseline_what="1 process x 2 threads",
               baseline_value=one["tokens_per_s"], target="reported", passed=True,
               extra={"wall_s": {"one": one["wall_s"], "two": two["wall_s"]}}),
    ]
    return publish(results)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        devices, out, reply = int(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
        Path(reply).write_text(json.dumps(side(devices, out)))
    else:
        publish_results = run()
        sys.exit(0 if all(r["passed"] for r in publish_results) else 1)
