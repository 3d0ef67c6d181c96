"""GPU only (bench/gpu_check.sh): LoRA on a bf16 base against QLoRA (nf4 and int8 bases through
bitsandbytes), on one CUDA device, through the engine (`workers.training.train`).

The model: SmolLM2-1.7B's shape (hidden 2048, 24 layers, 32 heads, intermediate 8192, vocab 49,152,
tied embeddings), randomly initialised (the device machine cannot download weights; speed and memory
do not depend on the values), with the demo model's tokenizer (passed as --tokenizer: the files of
the converted demo model). Each variant runs in its own process: bf16 compute, LoRA r16/alpha32 on
q/k/v/o, batches of 8 packed rows of up to 512 tokens, STEPS steps over train_lora's synthetic rows.
Reported per variant: peak CUDA memory (torch.cuda.max_memory_allocated after the run: the engine resets
the counter every step, so it is the last step's peak, the base's weights included) against
the engine's own estimate (workers.models.memory_estimate with the same quantization), non-padding
tokens/s after the first 3 steps, first and last loss. Target: nf4's peak memory well under bf16's
(the frozen base at ~0.52 bytes a parameter instead of 2); its speed is reported, not targeted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = int(os.environ.get("BENCH_QLORA_STEPS", "30"))
SHAPE = {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "num_key_value_heads": 32,
         "intermediate_size": 8192, "vocab_size": 49152, "max_position_embeddings": 2048,
         "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
VARIANTS = ("none", "nf4", "int8")


def build_model(tokenizer_dir: Path, out: Path) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(LlamaConfig(**SHAPE)).to(torch.bfloat16)
    model.save_pretrained(out)
    for name in os.listdir(tokenizer_dir):
        if name.startswith("tokenizer") or name.endswith(".jinja"):
            shutil.copy(tokenizer_dir / name, out / name)
    return out


def child(model_dir: Path, quantization: str, reply: Path) -> None:
    import time

    import torch

    from bench.train_lora import make_rows
    from workers.models import inspect_model, memory_estimate
    from workers.training import TrainCallbacks, TrainConfig, train

    class Steps(TrainCallbacks):
        def __init__(self):
            self.points, self.marks = [], []

        def on_step(self, point):
            self.points.append(point)
            self.marks.append(time.perf_counter())

    config = TrainConfig(precision="bf16", quantization=quantization, device="cuda", max_steps=STEPS, batch_size=8,
                         max_seq_len=512, packing=True, lora_r=16, lora_alpha=32, lora_dropout=0.0,
                         target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], learning_rate=1e-3,
                         checkpoint_every=100_000, eval_at_start=False, seed=42)
    torch.cuda.reset_peak_memory_stats()
    steps = Steps()
    train(config, model_dir=model_dir, output_dir=Path(tempfile.mkdtemp()), train_rows=make_rows(800, 7),
          eval_rows=[], callbacks=steps)
    warm = 3
    tokens = steps.points[-1]["tokens_seen"] - steps.points[warm - 1]["tokens_seen"]
    estimate = memory_estimate(inspect_model(model_dir), precision="bf16", batch_size=8, seq_len=512, lora_rank=16,
                               mode="lora", lora_targets="attention", quantization=quantization)
    reply.write_text(json.dumps({
        "quantization": quantization, "peak_bytes": torch.cuda.max_memory_allocated(),
        "estimate_bytes": estimate["total_bytes"], "estimate_weights_bytes": estimate["weights_bytes"],
        "tokens_per_s": tokens / (steps.marks[-1] - steps.marks[warm - 1]),
        "first_loss": steps.points[0]["loss"], "last_loss": steps.points[-1]["loss"], "steps": len(steps.points)}))


def run(tokenizer_dir: Path) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="bench-qlora-"))
    model_dir = build_model(tokenizer_dir, work / "model")
    results = []
    for quantization in VARIANTS:
        reply = work / f"{quantization}.json"
        done = subprocess.run([sys.executable, "-m", "bench.gpu_qlora", "--child", str(model_dir), quantization,
                               str(reply)], cwd=Path(__file__).resolve().parent.parent)
        results.append(json.loads(reply.read_text()) if done.returncode == 0 and reply.exists()
                       else {"quantization": quantization, "failed": done.returncode})
    base = next((r for r in results if r["quantization"] == "none" and "peak_bytes" in r), None)
    print(f"\ngpu_qlora: SmolLM2-1.7B shape (random), bf16 compute, LoRA r16 q/k/v/o, 8 x 512 packed, {STEPS} steps")
    print(f"  {'base':<6} {'peak GiB':>9} {'estimate GiB':>13} {'vs bf16':>8} {'tok/s':>9} {'vs bf16':>8} "
          f"{'loss first':>11} {'last':>7}")
    for r in results:
        if "failed" in r:
            print(f"  {r['quantization']:<6} failed (exit {r['failed']})")
            continue
        memory = r["peak_bytes"] / base["peak_bytes"] if base else float("nan")
        speed = r["tokens_per_s"] / base["tokens_per_s"] if base else float("nan")
        print(f"  {r['quantization']:<6} {r['peak_bytes'] / 2**30:>9.2f} {r['estimate_bytes'] / 2**30:>13.2f} "
              f"{memory:>8.2f} {r['tokens_per_s']:>9.0f} {speed:>8.2f} {r['first_loss']:>11.3f} {r['last_loss']:>7.3f}")
    out = Path(os.environ.get("OUT") or Path(__file__).resolve().parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_qlora.json").write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]))
    else:
        assert sys.argv[1] == "--tokenizer", "usage: python -m bench.gpu_qlora --tokenizer DIR"
        found = run(Path(sys.argv[2]))
        sys.exit(0 if all("failed" not in r for r in found) else 1)
