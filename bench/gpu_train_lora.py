"""GPU only (bench/gpu_check.sh): the engine's LoRA fine-tune on CUDA against HF Trainer + PEFT with
SDPA attention, and the model FLOPs utilization (MFU) of both.

The model: gpu_qlora's (SmolLM2-1.7B's shape, random weights, built on the GPU by its build_model) with
the demo tokenizer passed as --tokenizer. The data: train_lora's synthetic instruction rows, tokenized
by the engine's own `tokenize_rows` (chat template, loss on the response, truncation at MAX_SEQ_LEN)
so both sides train on the same token sequences and label masks (checked by digest); STEPS x
EXAMPLES_PER_STEP rows, one epoch, so each side trains on every example once (~STEPS steps).

- ours: `workers.training.train`, device cuda, precision bf16 (bf16 base + autocast, LoRA weights
  fp32), packing (rows of up to MAX_SEQ_LEN tokens), LoRA r16/alpha32 on q/k/v/o, dropout 0. Its batch
  is counted in packed rows: as train_lora's packed_batch_size, the number of rows that holds about
  EXAMPLES_PER_STEP examples (round(EXAMPLES_PER_STEP x rows / examples)), so both sides take about
  the same number of examples per optimizer step.
- baseline: transformers `Trainer` + peft `get_peft_model`, base loaded in bf16 with
  attn_implementation="sdpa", bf16=True, EXAMPLES_PER_STEP examples a batch padded to the longest by
  `DataCollatorForSeq2Seq` (labels -100 on the padding), random sampling; the same LoRA, AdamW lr 2e-4
  cosine to 0, no warmup, no weight decay, clip 1.0, seed 42.
- the engine's step options (issue 21, faster steps), each as "ours" with one option changed, against
  "ours" (fused_loss off, eager blocks) in the same run: ours_liger (fused_loss liger: Liger-kernel's
  fused linear cross-entropy, from the wheel in .whl/), ours_chunked (fused_loss chunked), ours_compile
  (compile: torch.compile'd decoder blocks, dynamic shapes; the compilation falls in the untimed first
  steps). Reported beside the rest: tokens/s against ours ("vs ours") and the largest relative
  difference of the loss curve from ours' ("curve vs ours": the options must train the same curve up
  to bf16 rounding). The dry run has no Liger side (it needs CUDA).

Each side runs in a child process of its own, one after the other. Timed: the training steps after the
first WARMUP (the interval from the end of step WARMUP to the end of the last step, each end taken
after torch.cuda.synchronize(): the engine's on_step callback, a TrainerCallback's on_step_end), so
everything the loop does between steps counts; model load, tokenization and saving do not. Reported per
side: non-padding tokens/s over those steps (and the ratio ours / baseline; the issue's target 1.6x),
padding of the epoch's batches, the peak CUDA memory allocated within a step (the engine resets the
peak at the start of each step; the baseline's callback does the same at on_step_begin; the frozen
base's weights are included), the first and last training loss.

MFU = model FLOPs per second / the H200's dense bf16 peak (989 TFLOP/s), with model FLOPs = 6 x N x
non-padding tokens, N the frozen base's parameters (the tied embedding counted once: it is the lm_head
matmul; the LoRA weights, 0.4% of it, are not counted): the standard estimate, which counts the frozen
weights' gradients a LoRA fine-tune never computes. What the GPU executes is closer to 4N a token
(forward 2N + input gradients 2N); that figure is printed beside it. Attention's own FLOPs (a few % at
these lengths) are not counted. The same run measures the ceiling of a bf16 torch.mm of 8192^3 and
reports MFU against it too.

BENCH_GPU_DRY_RUN=1 checks the script without a GPU: device cpu, fp32, gpu_qlora's configuration at
hidden 64 x 2 layers (the tokenizer's vocabulary), 3 steps of 8 examples, 1 warm-up step, a 512^3 fp32
matmul; its numbers mean nothing.
Output: a table; $OUT/gpu_train_lora.json (bench/results/ when OUT is unset; the dry run's is
gpu_train_lora_dry_run.json and never passes); exit 1 if a side fails (not for a missed target).
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

from bench.gpu_qlora import SHAPE, build_model
from bench.train_lora import DATA_SEED, IGNORE, OPTIM, SEED, TARGET_MODULES, digest, make_rows, train_config

ROOT = Path(__file__).resolve().parent.parent
DRY_RUN = os.environ.get("BENCH_GPU_DRY_RUN") == "1"
DEVICE = "cpu" if DRY_RUN else "cuda"
PRECISION = "fp32" if DRY_RUN else "bf16"
STEPS = 3 if DRY_RUN else int(os.environ.get("BENCH_GPU_TRAIN_STEPS", "40"))
WARMUP = 1 if DRY_RUN else 3
EXAMPLES_PER_STEP = 8 if DRY_RUN else 64
MAX_SEQ_LEN = 1024
LORA = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0}
DRY_SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
             "intermediate_size": 256}
MATMUL_SIZE = 512 if DRY_RUN else 8192
H200_BF16_PEAK = 989e12  # dense (no sparsity), NVIDIA's H200 SXM datasheet
TARGET_RATIO = 1.6
# The engine's step options (issue 21, faster steps), each a side of its own against "ours", the engine with
# the full logits and eager blocks (fused_loss "off": "auto" is Liger on CUDA when it is installed).
OURS = {"ours": {"fused_loss": "off"}, "ours_liger": {"fused_loss": "liger"},
        "ours_chunked": {"fused_loss": "chunked"}, "ours_compile": {"fused_loss": "off", "compile": True}}
# Liger needs CUDA: the dry run leaves it out.
SIDES = ("baseline", *(side for side in OURS if not (DRY_RUN and side == "ours_liger")))


# --- shared by the children ------------------------------------------------------------------------

def engine_config(batch_size: int = 1, **options):
    return train_config(PRECISION, device=DEVICE, max_seq_len=MAX_SEQ_LEN, batch_size=batch_size,
                        eval_at_start=False, **LORA, **options)


def bench_rows() -> list[dict]:
    return make_rows(STEPS * EXAMPLES_PER_STEP, DATA_SEED)


def bench_examples(tokenizer) -> list:
    from workers.training.data import tokenize_rows

    return tokenize_rows(bench_rows(), tokenizer, engine_config())[0]


class StepClock:
    """Per optimizer step: when it ended and the peak CUDA memory allocated within it."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.ends: list[float] = []
        self.peaks: list[int] = []

    def begin(self) -> None:
        if DEVICE == "cuda":
            self.torch.cuda.reset_peak_memory_stats()

    def end(self) -> None:
        if DEVICE == "cuda":
            self.torch.cuda.synchronize()
            self.peaks.append(self.torch.cuda.max_memory_allocated())
        self.ends.append(time.perf_counter())

    def report(self, step_tokens: list[int]) -> dict:
        """Non-padding tokens/s over the steps after WARMUP."""
        if len(self.ends) <= WARMUP:
            raise RuntimeError(f"{len(self.ends)} steps: nothing to time after {WARMUP} warm-up steps")
        seconds = self.ends[-1] - self.ends[WARMUP - 1]
        tokens = sum(step_tokens[WARMUP:len(self.ends)])
        return {"steps": len(self.ends), "timed_steps": len(self.ends) - WARMUP, "timed_tokens": tokens,
                "timed_seconds": seconds, "tokens_per_s": tokens / seconds, "epoch_tokens": sum(step_tokens),
                "peak_bytes": max(self.peaks) if self.peaks else None}


def child_baseline(model_dir: Path, reply: Path) -> None:
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        DataCollatorForSeq2Seq,
        PrinterCallback,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "right"
    examples = bench_examples(tokenizer)
    transformers.set_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.bfloat16 if PRECISION == "bf16" else torch.float32, attn_implementation="sdpa")
    model = get_peft_model(model, LoraConfig(r=LORA["lora_r"], lora_alpha=LORA["lora_alpha"],
                                             lora_dropout=LORA["lora_dropout"], target_modules=TARGET_MODULES,
                                             bias="none", task_type="CAUSAL_LM"))
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)

    pad = DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=IGNORE)
    step_tokens: list[int] = []
    padded: list[int] = []

    def collate(features):
        # One call per step, in step order (one micro-batch a step, no dataloader workers).
        batch = pad(features)
        step_tokens.append(int(batch["attention_mask"].sum()))
        padded.append(batch["input_ids"].numel())
        return batch

    clock = StepClock()

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.begin()

        def on_step_end(self, args, state, control, **kwargs):
            clock.end()

    args = TrainingArguments(
        output_dir=str(reply.parent / "baseline"), per_device_train_batch_size=EXAMPLES_PER_STEP,
        gradient_accumulation_steps=1, num_train_epochs=1, learning_rate=OPTIM["learning_rate"],
        lr_scheduler_type=OPTIM["lr_scheduler"], warmup_steps=OPTIM["warmup_steps"],
        weight_decay=OPTIM["weight_decay"], max_grad_norm=1.0, optim="adamw_torch", seed=SEED, data_seed=SEED,
        logging_steps=1, save_strategy="no", eval_strategy="no", report_to=[], use_cpu=DEVICE == "cpu",
        bf16=PRECISION == "bf16", dataloader_num_workers=0, remove_unused_columns=False, disable_tqdm=True)
    dataset = [{"input_ids": e.input_ids, "labels": e.labels} for e in examples]
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate, callbacks=[Steps()])
    trainer.remove_callback(PrinterCallback)  # a printed dict per step; the losses stay in log_history
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    reply.write_text(json.dumps({
        **clock.report(step_tokens), "side": "baseline", "batch": f"{EXAMPLES_PER_STEP} examples",
        "padding_fraction": 1 - sum(step_tokens) / sum(padded), "frozen_params": frozen,
        "first_loss": float(losses[0]), "last_loss": float(losses[-1]), "data_digest": digest(examples)}))


def child_ours(model_dir: Path, reply: Path, side: str = "ours") -> None:
    from transformers import AutoTokenizer

    from workers.training import TrainCallbacks, train
    from workers.training.data import epoch_batches
    from workers.training.data import make_rows as pack_rows

    examples = bench_examples(AutoTokenizer.from_pretrained(model_dir))
    packed = pack_rows(examples, engine_config(), shuffle_seed=SEED)  # what the engine packs (same seed)
    config = engine_config(max(1, round(EXAMPLES_PER_STEP * len(packed) / len(examples))), **OURS[side])
    batches = epoch_batches(packed, config, epoch=0)
    padded = sum(max(len(row.input_ids) for row in batch) * len(batch) for batch in batches)
    clock = StepClock()
    points: list[dict] = []
    run_info: dict = {}

    class Callbacks(TrainCallbacks):
        def on_start(self, *, total_steps, resumed_from_step, info):
            run_info.update(info)

        def on_step(self, point):  # the engine reset the CUDA peak at the start of this step
            clock.end()
            points.append(point)

    # A folder per side: in a shared one the next side would resume from the last side's final checkpoint.
    result = train(config, model_dir=model_dir, output_dir=reply.parent / side, train_rows=bench_rows(),
                   eval_rows=[], callbacks=Callbacks())
    step_tokens = [b - a for a, b in zip([0] + [p["tokens_seen"] for p in points], [p["tokens_seen"] for p in points])]
    reply.write_text(json.dumps({
        **clock.report(step_tokens), "side": side, "batch": f"{config.batch_size} packed rows",
        "padding_fraction": 1 - result.metrics["tokens_trained"] / padded,
        "frozen_params": run_info["total_params"] - run_info["trainable_params"],
        "first_loss": points[0]["loss"], "last_loss": points[-1]["loss"], "losses": [p["loss"] for p in points],
        "data_digest": digest(examples)}))


# --- the benchmark ---------------------------------------------------------------------------------

def tiny_model(tokenizer_dir: Path, out: Path) -> Path:
    """The dry run's model: gpu_qlora's configuration narrowed to DRY_SHAPE, fp32 on the CPU."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    LlamaForCausalLM(LlamaConfig(**{**SHAPE, **DRY_SHAPE, "vocab_size": len(tokenizer)})).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def matmul_ceiling() -> float:
    """FLOP/s of the best of 3 rounds of 20 torch.mm of MATMUL_SIZE^3 (bf16 on CUDA, fp32 in the dry run)."""
    import torch

    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    a, b = (torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=DEVICE, dtype=dtype) for _ in range(2))

    def sync():
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        torch.mm(a, b)
    sync()
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(20):
            torch.mm(a, b)
        sync()
        best = max(best, 20 * 2 * MATMUL_SIZE**3 / (time.perf_counter() - started))
    del a, b
    if DEVICE == "cuda":
        torch.cuda.empty_cache()  # the children need the memory, not this process
    return best


def child_env() -> dict:
    return {**os.environ, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def run(tokenizer_dir: Path) -> bool:
    from bench.report import result

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="bench-gpu-train-lora-"))
    try:
        model_dir = (tiny_model if DRY_RUN else build_model)(tokenizer_dir, work / "model")
        ceiling = matmul_ceiling()
        reports = {}
        for side in SIDES:
            reply = work / f"{side}.json"
            done = subprocess.run([sys.executable, "-m", "bench.gpu_train_lora", "--child", side, str(model_dir),
                                   str(reply)], cwd=ROOT, env=child_env())
            reports[side] = (json.loads(reply.read_text()) if done.returncode == 0 and reply.exists()
                             else {"side": side, "failed": done.returncode})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total_s = time.perf_counter() - started

    failed = [side for side, r in reports.items() if "failed" in r]
    trained = {side: r for side, r in reports.items() if "failed" not in r}
    if len({(r["data_digest"], r["epoch_tokens"]) for r in trained.values()}) > 1:
        print("gpu_train_lora: the sides trained on different examples or token counts: "
              + ", ".join(f"{s} {r['data_digest']} {r['epoch_tokens']} tokens" for s, r in trained.items()))
        failed = list(SIDES)
    peak_name = "CPU fp32 (dry run)" if DRY_RUN else "bf16"
    print(f"\ngpu_train_lora{' DRY RUN (CPU, tiny model: the numbers mean nothing)' if DRY_RUN else ''}: "
          f"{'tiny' if DRY_RUN else 'SmolLM2-1.7B'} shape (random), {PRECISION}, LoRA r16/a32 q/k/v/o, dropout 0, "
          f"max_seq_len {MAX_SEQ_LEN}, ~{EXAMPLES_PER_STEP} examples a step, one epoch of "
          f"{STEPS * EXAMPLES_PER_STEP} rows, timed after the first {WARMUP} step{'s' if WARMUP > 1 else ''}")
    print(f"  torch.mm {MATMUL_SIZE}^3 {peak_name}: {ceiling / 1e12:.3g} TFLOP/s measured "
          f"({ceiling / H200_BF16_PEAK:.1%} of the H200's {H200_BF16_PEAK / 1e12:.0f} TFLOP/s dense bf16 peak)")
    labels = {"baseline": "HF Trainer + PEFT, SDPA, pad to longest", "ours": "workers.training, packed rows",
              "ours_liger": "  + fused_loss liger", "ours_chunked": "  + fused_loss chunked",
              "ours_compile": "  + compile"}
    print(f"  {'side':<40} {'batch':>16} {'steps':>5} {'padding':>7} {'timed tok':>9} {'seconds':>7} {'tok/s':>8} "
          f"{'ratio':>6} {'vs ours':>7} {'peak GiB':>8} {'MFU 6N':>7} {'4N':>6} {'6N/mm':>6} {'loss first':>10} "
          f"{'last':>6} {'curve vs ours':>13}")
    base, plain = reports["baseline"], reports["ours"]
    for side, r in reports.items():
        if "failed" in r:
            print(f"  {labels[side]:<40} failed (exit {r['failed']})")
            continue
        if "failed" not in base:
            r["ratio"] = r["tokens_per_s"] / base["tokens_per_s"]
        if side in OURS and "failed" not in plain:
            # The options must train the same curve (bf16 rounding apart): the largest relative difference.
            r["vs_ours"] = r["tokens_per_s"] / plain["tokens_per_s"]
            r["curve_vs_ours"] = max(abs(a - b) / abs(b) for a, b in zip(r["losses"], plain["losses"]))
        flops_per_s = r["tokens_per_s"] * r["frozen_params"]
        r["mfu_6n"] = 6 * flops_per_s / H200_BF16_PEAK
        r["mfu_4n"] = 4 * flops_per_s / H200_BF16_PEAK
        r["mfu_6n_vs_matmul"] = 6 * flops_per_s / ceiling
        peak = f"{r['peak_bytes'] / 2**30:.2f}" if r["peak_bytes"] else "-"
        print(f"  {labels[side]:<40} {r['batch']:>16} {r['steps']:>5} {r['padding_fraction']:>7.1%} "
              f"{r['timed_tokens']:>9,} {r['timed_seconds']:>7.2f} {r['tokens_per_s']:>8.0f} "
              f"{r.get('ratio', float('nan')):>6.2f} {r.get('vs_ours', float('nan')):>7.2f} {peak:>8} "
              f"{r['mfu_6n']:>7.1%} {r['mfu_4n']:>6.1%} {r['mfu_6n_vs_matmul']:>6.1%} {r['first_loss']:>10.3f} "
              f"{r['last_loss']:>6.3f} {r.get('curve_vs_ours', float('nan')):>13.1e}")
    print(f"  (MFU = N x FLOPs a token x tokens/s / {H200_BF16_PEAK / 1e12:.0f} TFLOP/s; 6N/mm: against the "
          f"measured torch.mm ceiling; N = frozen base parameters; total {total_s:.0f} s)\n")

    setup = {"dry_run": DRY_RUN, "device": DEVICE, "precision": PRECISION, "steps_target": STEPS,
             "untimed_first_steps": WARMUP, "examples_per_step": EXAMPLES_PER_STEP, "max_seq_len": MAX_SEQ_LEN,
             "rows": STEPS * EXAMPLES_PER_STEP, "seed": SEED, "target_modules": TARGET_MODULES, **LORA, **OPTIM,
             "matmul_size": MATMUL_SIZE, "matmul_flops_per_s": ceiling, "peak_flops_per_s": H200_BF16_PEAK,
             "total_s": round(total_s, 1)}
    if "baseline" in failed or "ours" in failed:
        summary = {"name": "gpu_train_lora", "failed": failed, "passed": False, "setup": setup, "sides": reports}
    else:
        ours = reports["ours"]
        summary = result(
            name="gpu_train_lora", metric=f"LoRA fine-tune non-padding tokens/s on {DEVICE}, {PRECISION}, packed",
            unit="tok/s", value=ours["tokens_per_s"],
            baseline_what=f"HF Trainer + PEFT, {PRECISION}, SDPA, padding to the longest in the batch",
            baseline_value=base["tokens_per_s"], target=f"ratio >= {TARGET_RATIO:g}",
            passed=not DRY_RUN and ours["ratio"] >= TARGET_RATIO, extra={"setup": setup, "sides": reports})
        print(f"gpu_train_lora: ours / baseline {ours['ratio']:.2f} (target >= {TARGET_RATIO:g}: "
              f"{'dry run, not judged' if DRY_RUN else 'yes' if summary['passed'] else 'NO'})")
    out = Path(os.environ.get("OUT") or ROOT / "bench" / "results")
    out.mkdir(parents=True, exist_ok=True)
    # A dry run's numbers never replace a GPU run's.
    (out / f"gpu_train_lora{'_dry_run' if DRY_RUN else ''}.json").write_text(json.dumps(summary, indent=1) + "\n")
    return not failed


CHILDREN = {"baseline": child_baseline, **{side: lambda d, r, side=side: child_ours(d, r, side) for side in OURS}}

if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        CHILDREN[sys.argv[2]](Path(sys.argv[3]), Path(sys.argv[4]))
    else:
        assert sys.argv[1:2] == ["--tokenizer"], "usage: python -m bench.gpu_train_lora --tokenizer DIR"
        sys.exit(0 if run(Path(sys.argv[2])) else 1)
