"""train(): one LoRA fine-tune, top to bottom — setup → fit → validate → save.

    setup     load the base model through the safe loader, add LoRA, have the method tokenize the rows,
              build AdamW + scheduler, resume from the latest complete checkpoint if there is one
    fit       optimizer steps; each is grad_accum micro-batches whose loss is the mean over the step's
              trained tokens (sft) or preference pairs (dpo): the method's weight; clip at 1.0;
              checkpoint every checkpoint_every steps
    validate  the method's loss over the eval rows, greedy samples, early stopping (also at step 0, the base)
    save      the final checkpoint and output_dir/adapter (PEFT directory + workbench_train_config.json)

This is the one skeleton for every training method. What differs between methods (which rows they
read, how those are tokenized and batched, the loss of a micro-batch, its metrics) is in one module
per method under methods/, chosen once from config.method; nothing below branches on the method.

The caller (a Celery task) sees progress through TrainCallbacks and stops the run through
`should_stop`; nothing here knows about Django, Celery or a database.

Data-parallel (config.devices > 1): distributed.py starts this same train() in N processes under
torchrun. Each process loads the model and makes the same items and batches; in every micro-batch it
trains its share (rows rank, rank + N, ...) through DistributedDataParallel, which averages the
gradients, so each optimizer step is over the same global batch as one process's and the state
(step, epoch, position) stays global. Only rank 0 evaluates, reports and writes checkpoints and the
adapter; the ranks agree on stopping (an all-reduce of should_stop) before every step.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.models import load_for_inference

from . import fused_loss
from .card import write_adapter_files
from .checkpoint import (
    TrainerState,
    checkpoints_dir_of,
    discard_after,
    latest_checkpoint,
    load_checkpoint,
    remove_incomplete,
    save_checkpoint,
)
from .config import ConfigError, TrainConfig
from .data import DataStats, prompt_token_ids
from .lora import add_lora, decoder, output_layer
from .methods import Method, get_method

MAX_GRAD_NORM = 1.0
LOSS_SMOOTHING = 0.1      # weight of the newest step in the smoothed train_loss (an EMA over ~10 steps)


class TrainCallbacks:
    """What the engine tells its caller, and how the caller stops it. Every method is a no-op here;
    the Celery task subclasses this and turns the calls into database rows and channel messages."""

    def on_start(self, *, total_steps: int, resumed_from_step: int, info: dict) -> None:
        """Once, before the first step. info: device, dtype, trainable_params, total_params, examples,
        eval_examples, tokens_per_epoch, rows_per_epoch, steps_per_epoch, skipped_rows, truncated_examples."""

    def on_step(self, point: dict) -> None:
        """After every optimizer step: step, epoch (fractional), loss, lr, grad_norm (before clipping),
        tokens_per_s (non-padding), tokens_seen, memory_mb (CUDA: peak allocated in the step; CPU: process
        RSS), elapsed_s (seconds spent in optimizer steps, summed over every run of the job), and the
        method's metrics (dpo: reward_margin, reward_accuracy, chosen_reward and rejected_reward; eval
        points carry them eval_ prefixed)."""

    def on_eval(self, point: dict, samples: list[dict]) -> None:
        """After every evaluation: point {step, eval_loss, perplexity, seconds} (None without eval rows);
        samples [{prompt, output}] for config.sample_prompts."""

    def on_checkpoint(self, *, step: int, path: str) -> None:
        """After a checkpoint directory is complete."""

    def should_stop(self) -> bool:
        """Asked before every optimizer step; True cancels the run (see TrainCancelled)."""
        return False

    def log(self, message: str) -> None:
        """A human-readable progress line."""


class TrainCancelled(Exception):
    """should_stop() returned True. The run stopped after `step` optimizer steps, with a checkpoint at
    that step (none at step 0), so train() with the same output_dir resumes from there."""

    def __init__(self, step: int) -> None:
        super().__init__(f"Training was cancelled at step {step}.")
        self.step = step


@dataclass
class TrainResult:
    final_step: int
    adapter_dir: Path        # output_dir / "adapter": PEFT adapter + workbench_train_config.json
    metrics: dict            # train_loss, eval_loss, best_eval_loss, tokens_trained, steps, stopped_early, and the
                             # method's metrics of the last evaluation (eval_-prefixed: classify's eval_accuracy ...)
    resumed_from_step: int


def train(config: TrainConfig, *, model_dir: Path, output_dir: Path, train_rows: Sequence[dict],
          eval_rows: Sequence[dict], callbacks: TrainCallbacks | None = None,
          lineage: dict | None = None, resume_up_to: int | None = None) -> TrainResult:
    """Fine-tune a LoRA adapter on `model_dir` (a safetensors directory) and save it to output_dir/adapter.

    `lineage` (base model name and content hash, dataset version, job: see card.py) is written with
    the config and the final metrics into the adapter's README.md and workbench_train_config.json.

    If output_dir/checkpoints holds a complete checkpoint, the run resumes from the latest one and
    continues exactly as the uninterrupted run would have (same batches, same RNG, same final step).
    `resume_up_to`: the newest step the caller vouches for (the one its record holds): complete
    checkpoints above it are removed once the model is loaded, right before the resume reads the folder
    (a run the caller no longer owns, sharing the folder, may have written one meanwhile).
    Raises ConfigError for a bad config (or target modules the model lacks), TrainingDataError when
    no training row (or, if eval rows are given, no eval row) is usable, ModelSafetyError /
    ModelFormatError for a model directory the safe loader refuses, TrainCancelled when
    callbacks.should_stop() says so, FloatingPointError when the loss becomes NaN or infinite
    (nothing is stepped with it; the last checkpoint is intact).
    """
    config.validate()
    callbacks = callbacks or TrainCallbacks()
    run = _setup(config, Path(model_dir), Path(output_dir), train_rows, eval_rows, callbacks, resume_up_to)
    if run.world > 1:
        _data_parallel(run)
    resumed_from = run.state.step
    callbacks.on_start(total_steps=run.total_steps, resumed_from_step=resumed_from, info=run.info)
    if config.eval_at_start and resumed_from == 0:
        _validate(run)  # step 0: what the base model does, the baseline the charts start from
    _fit(run)
    if run.state.last_eval_step != run.state.step:
        _validate(run)
    _checkpoint(run)
    state = run.state
    metrics = {"train_loss": state.train_loss, "eval_loss": state.eval_loss, "best_eval_loss": state.best_eval_loss,
               "tokens_trained": state.tokens_seen, "steps": state.step, "stopped_early": state.stopped_early,
               **state.eval_scores}
    adapter_dir = _save_adapter(run, lineage=lineage, metrics=metrics) if run.rank == 0 else run.output_dir / "adapter"
    callbacks.log(f"Finished at step {state.step}: adapter saved to {adapter_dir}.")
    return TrainResult(final_step=state.step, adapter_dir=adapter_dir, metrics=metrics, resumed_from_step=resumed_from)


# --- setup ---------------------------------------------------------------------------------------

@dataclass
class _Run:
    config: TrainConfig
    output_dir: Path
    callbacks: TrainCallbacks
    model: Any
    tokenizer: Any
    device: Any
    autocast: Any                  # a callable returning the autocast context (a no-op in fp32)
    optimizer: Any
    scheduler: Any
    method: Method                 # config.method's module: its items, batches and loss
    train_items: list              # what the method made of the rows (sft: packed rows; dpo: pairs)
    eval_items: list
    steps_per_epoch: int
    total_steps: int
    state: TrainerState
    info: dict = field(default_factory=dict)
    checkpointed_step: int | None = None   # the step of the newest checkpoint on disk
    trained_logits_only: bool = False      # logits computed at trained positions only (_logits_path_agrees)
    fused_loss: str = "off"                # config.fused_loss on this device and model: off, chunked or liger
    rank: int = 0                          # this process in a data-parallel run (torch.distributed), else 0
    world: int = 1                         # processes in the run
    ddp: Any = None                        # world > 1: DistributedDataParallel over _Shard(run)

    @property
    def checkpoints_dir(self) -> Path:
        return checkpoints_dir_of(self.output_dir)

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def batches(self, *, epoch: int | None, evaluation: bool = False) -> list[list]:
        """The micro-batches of an epoch (None: evaluation order) of the method's items."""
        return self.method.batches(self.eval_items if evaluation else self.train_items, self.config, epoch=epoch)


def _setup(config: TrainConfig, model_dir: Path, output_dir: Path, train_rows: Sequence[dict],
           eval_rows: Sequence[dict], callbacks: TrainCallbacks, resume_up_to: int | None) -> _Run:
    import torch
    from transformers import get_scheduler

    method = get_method(config.method)
    _check_packing_support(config, method)
    _seed_everything(config.seed)
    rank, world = _process_group()
    device = _resolve_device(config.device, world)
    precision = _resolve_precision(config.precision, device)
    started = time.perf_counter()
    # The one safe loader: safetensors only, no remote code, no network. It hands the model back in
    # eval mode and the tokenizer padding left (for generation); training flips both where needed.
    if config.quantization != "none" and device.type != "cuda":  # device auto found no GPU
        raise ConfigError("quantization", f"{config.quantization} base weights need a CUDA GPU (bitsandbytes); "
                                          f"this worker trains on {device.type}.")
    try:  # before the model loads: liger where it cannot run is refused at once
        loss_kind = fused_loss.resolve(config.fused_loss, device.type)
    except ValueError as exc:
        raise ConfigError("fused_loss", str(exc)) from None
    try:
        model, tokenizer = load_for_inference(model_dir, device=str(device), dtype=precision,
                                              quantization=config.quantization)
    except ValueError as exc:
        if config.quantization == "none":
            raise
        raise ConfigError("quantization", str(exc)) from None
    # No prepare_model_for_kbit_training for a quantized base: its upcast of the norms and embeddings to
    # fp32 (for fp16 stability) made nf4 take more GPU memory than the bf16 base (bench/gpu_qlora.py);
    # compute runs in bf16 and non-reentrant checkpointing needs no input gradients.
    if config.gradient_checkpointing:
        # Non-reentrant checkpointing works with frozen inputs (no enable_input_require_grads needed).
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = add_lora(model, config, modules_to_save=method.head(model, config))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    callbacks.log(f"Loaded {model_dir.name} on {device} ({precision}) in {time.perf_counter() - started:.1f} s.")

    train_items, stats = method.prepare(train_rows, tokenizer, config, evaluation=False)
    _log_stats(callbacks, stats, method.EXAMPLES[0])
    eval_items: list = []
    eval_stats = DataStats()
    if len(eval_rows):
        eval_items, eval_stats = method.prepare(eval_rows, tokenizer, config, evaluation=True)
        _log_stats(callbacks, eval_stats, method.EXAMPLES[1])

    micro_batches = math.ceil(len(train_items) / config.batch_size)
    steps_per_epoch = math.ceil(micro_batches / config.grad_accum)
    total_steps = config.max_steps or config.epochs * steps_per_epoch

    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=config.weight_decay)
    # "constant" is constant_with_warmup: with warmup_steps=0 it is plain constant.
    scheduler = get_scheduler("constant_with_warmup" if config.lr_scheduler == "constant" else config.lr_scheduler,
                              optimizer, num_warmup_steps=config.warmup_steps, num_training_steps=total_steps)

    def autocast() -> Any:
        if precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    run = _Run(config=config, output_dir=output_dir, callbacks=callbacks, model=model, tokenizer=tokenizer,
               device=device, autocast=autocast, optimizer=optimizer, scheduler=scheduler,
               method=method, train_items=train_items, eval_items=eval_items, steps_per_epoch=steps_per_epoch,
               total_steps=total_steps, state=TrainerState(), rank=rank, world=world)
    run.trained_logits_only = _logits_path_agrees(run)
    run.fused_loss = _fused_loss_on_model(run, loss_kind)
    if config.compile:  # after the eager check above: the first compiled call is a training step
        _compile_blocks(model)
    callbacks.log(f"Loss: {'full logits' if run.fused_loss == 'off' else run.fused_loss + ' linear cross-entropy'}"
                  f"; {'compiled' if config.compile else 'eager'} decoder blocks.")
    if rank == 0:  # the one writer of checkpoints
        remove_incomplete(run.checkpoints_dir)
        if resume_up_to is not None and (discarded := discard_after(run.checkpoints_dir, resume_up_to)):
            callbacks.log(f"Removed the checkpoints at steps {', '.join(map(str, discarded))}: newer than step "
                          f"{resume_up_to}, the last one recorded, so written by a run whose record was refused.")
    latest = latest_checkpoint(run.checkpoints_dir, up_to=resume_up_to)  # other ranks may read before the removal
    if latest is not None:
        run.state = load_checkpoint(latest, model=model, optimizer=optimizer, scheduler=scheduler, device=device)
        run.checkpointed_step = run.state.step
        callbacks.log(f"Resumed from {latest.name}.")
    run.info = {
        "device": str(device), "dtype": "bfloat16" if precision == "bf16" else "float32",
        "trainable_params": sum(p.numel() for p in trainable),
        "total_params": sum(p.numel() for p in model.parameters()),
        "examples": stats.used, "eval_examples": eval_stats.used, "tokens_per_epoch": stats.tokens,
        "rows_per_epoch": len(train_items), "steps_per_epoch": steps_per_epoch,
        "method": config.method, "devices": world, "quantization": config.quantization,
        "skipped_rows": stats.skipped, "truncated_examples": stats.truncated,
    }
    return run


def _check_packing_support(config: TrainConfig, method: Method) -> None:
    """Packing relies on transformers deriving a block-diagonal mask from position_ids (masking_utils'
    packed-sequence detection; checked on 5.24 by the tests). Without it packed examples would attend
    to each other: refuse rather than train on a leaking mask."""
    if not config.packing or not method.PACKING:
        return
    try:
        from transformers.masking_utils import find_packed_sequence_indices  # noqa: F401
    except ImportError:
        raise ConfigError("packing", "this transformers version cannot keep packed examples apart; "
                                     "upgrade transformers or turn packing off.") from None


def _seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)  # seeds every CUDA device too


def _resolve_device(device: str, world: int = 1) -> Any:
    import torch

    if world > 1 and device in ("auto", "cuda") and torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))  # one GPU per process
    if device != "auto":
        return torch.device(device)  # availability is checked by the loader
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _resolve_precision(precision: str, device: Any) -> str:
    import torch

    if precision != "auto":
        return precision
    return "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"


def _log_stats(callbacks: TrainCallbacks, stats: DataStats, what: str) -> None:
    callbacks.log(f"{stats.used} {what} examples, {stats.tokens} tokens.")
    if stats.skipped:
        callbacks.log(f"{stats.skipped} {what} rows skipped ({'; '.join(stats.reasons)}).")
    if stats.truncated:
        callbacks.log(f"{stats.truncated} {what} examples truncated to max_seq_len.")
    if stats.unmasked:
        callbacks.log(f"{stats.unmasked} {what} examples are trained on every token: the chat template does not "
                      "render earlier turns the same way once later turns exist, so the assistant turns could not "
                      "be located.")


# --- fit -----------------------------------------------------------------------------------------

def _fit(run: _Run) -> None:
    """Optimizer steps until total_steps (or early stopping), resuming at run.state's position."""
    config, state, callbacks = run.config, run.state, run.callbacks
    while state.step < run.total_steps and not state.stopped_early:
        batches = run.batches(epoch=state.epoch)
        steps = [batches[i:i + config.grad_accum] for i in range(0, len(batches), config.grad_accum)]
        for step_batches in steps[state.batch_in_epoch:]:
            if state.step >= run.total_steps or state.stopped_early:
                break
            if _any_rank(run, callbacks.should_stop()):
                if state.step > 0:
                    _checkpoint(run)
                callbacks.log(f"Cancelled at step {state.step}.")
                raise TrainCancelled(state.step)
            point = _train_step(run, step_batches)
            callbacks.on_step(point)
            if config.eval_every and state.step % config.eval_every == 0 and state.step < run.total_steps:
                _validate(run)
            if state.step % config.checkpoint_every == 0:
                _checkpoint(run)
        if state.batch_in_epoch >= len(steps):
            state.epoch += 1
            state.batch_in_epoch = 0


def _train_step(run: _Run, micro_batches: list[list]) -> dict:
    """One optimizer step over `micro_batches`; returns the on_step point."""
    import torch

    model, state = run.model, run.state
    started = time.perf_counter()
    if run.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(run.device)
    # The loss is the mean over the step's weight (sft: every trained token; dpo: every pair), not a
    # mean of per-micro-batch means: each micro-batch's summed loss is divided by the step's weight, so
    # grad_accum k x batch b gives the gradient of one batch of k*b.
    # Data-parallel: every rank knows the whole global batch (the same items and order everywhere), so the
    # weight and tokens are the global ones without a collective.
    method = run.method
    weight = sum(method.weight(batch) for batch in micro_batches)
    tokens = sum(method.tokens(batch) for batch in micro_batches)
    outputs = []
    for index, batch in enumerate(micro_batches):
        if run.world == 1:
            summed, output = method.loss(run, batch)
            (summed / weight).backward()
            outputs.append(output)
            continue
        # This rank's share of the micro-batch; DDP averages the gradients over the ranks (hence x world)
        # when the step's last micro-batch goes backward (no_sync before: one all-reduce per step).
        shard = batch[run.rank::run.world]
        last = index == len(micro_batches) - 1
        with contextlib.nullcontext() if last else run.ddp.no_sync():
            # A rank whose share is empty (a short last batch) still takes part in the all-reduce:
            # a row's forward and backward weighted by zero.
            summed, output = run.ddp(shard or batch[:1])
            (summed * (run.world / weight if shard else 0.0)).backward()
        if shard:
            outputs.append(_to_cpu(output))
    if run.world > 1:
        outputs = _gathered(outputs)
    extra = {key: value for key, value in method.summarize(outputs).items() if key not in method.EVAL_ONLY}
    loss = extra.pop("loss")
    if not math.isfinite(loss):
        # Stop before the optimizer writes NaNs into the adapter: the last checkpoint stays good.
        raise FloatingPointError(f"The training loss became {loss} at step {state.step + 1}; "
                                 "try a lower learning_rate.")
    parameters = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, MAX_GRAD_NORM).item()
    lr = run.scheduler.get_last_lr()[0]
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)

    seconds = time.perf_counter() - started
    state.step += 1
    state.batch_in_epoch += 1
    state.tokens_seen += tokens
    state.elapsed_s += seconds
    # Bias-corrected EMA (as Adam's moments): the stored value is the corrected one, so un-correct it
    # first. Unlike a plain EMA seeded with the first loss, a short run is not dominated by step 1.
    decay = 1 - LOSS_SMOOTHING
    previous = (state.train_loss or 0.0) * (1 - decay ** (state.step - 1))
    state.train_loss = (decay * previous + LOSS_SMOOTHING * loss) / (1 - decay ** state.step)
    return {"step": state.step, "epoch": state.epoch + state.batch_in_epoch / run.steps_per_epoch, "loss": loss,
            "lr": lr, "grad_norm": grad_norm, "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "tokens_seen": state.tokens_seen, "memory_mb": _memory_mb(run.device), "elapsed_s": state.elapsed_s,
            **extra}


def _logits_path_agrees(run: _Run) -> bool:
    """Whether the decoder + output layer give the model's own logits. Some architectures change
    logits after the output layer (soft-capping, scaling); for those the full forward is kept."""
    import torch

    ids = torch.arange(min(16, len(run.tokenizer)), device=run.device).unsqueeze(0)
    tensors = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    run.model.eval()  # no dropout: both paths see the same weights, and no random numbers are drawn
    try:
        with torch.no_grad():
            full = run.model(**tensors, use_cache=False).logits.float()
            hidden = decoder(run.model)(**tensors, use_cache=False).last_hidden_state
            direct = output_layer(run.model)(hidden).float()
    except (AttributeError, TypeError, NotImplementedError):
        return False
    finally:
        run.model.train()
    return bool(torch.allclose(full, direct, atol=1e-4, rtol=1e-4))


def _fused_loss_on_model(run: _Run, kind: str) -> str:
    """`kind` where the model allows it: a fused loss takes the decoder's hidden states through a Linear
    output layer, which needs the trained-positions path (_logits_path_agrees). "auto" falls back to the
    full logits; an explicit choice the model cannot take is refused."""
    import torch

    if kind == "off" or (run.trained_logits_only and isinstance(output_layer(run.model), torch.nn.Linear)):
        return kind
    if run.config.fused_loss == "auto":
        return "off"
    raise ConfigError("fused_loss", f"{kind} needs the logits to be the output layer's (this model changes them "
                                    "after it); choose auto or off.")


def _compile_blocks(model: Any) -> None:
    """torch.compile each decoder block in place (nn.Module.compile: the module tree, its parameter names
    and the PEFT LoRA layers inside stay as they are, so checkpoints and the adapter are unchanged). The
    embeddings, the packed-sequence mask and the loss stay eager. dynamic=True: packed rows of any
    length run through one graph instead of one compilation per new length; the blocks share their code
    and (with torch's default inlining of modules) their graph."""
    import torch

    blocks = getattr(decoder(model), "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList) or not len(blocks):
        raise ConfigError("compile", "this model's decoder has no list of blocks (layers) to compile; turn it off.")
    for block in blocks:
        block.compile(dynamic=True)


def _memory_mb(device: Any) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    if device.type == "mps":
        return torch.mps.current_allocated_memory() / 2**20
    try:  # the process's resident memory: the model, the activations and everything else
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # peak, KiB on Linux


# --- data parallel -------------------------------------------------------------------------------

def _process_group() -> tuple[int, int]:
    """(rank, world size) of the torch.distributed run this process is in, else (0, 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _make_shard_module(run: _Run) -> Any:
    import torch

    class _Shard(torch.nn.Module):
        """What DDP wraps: the method's loss of a micro-batch (or a share of one) on the model. The
        method reaches the model as it always does (run.model, its decoder, disable_adapter); DDP sees
        the forward and the trainable parameters and all-reduces their gradients in backward."""

        def __init__(self) -> None:
            super().__init__()
            self.model = run.model

        def forward(self, batch: list) -> Any:
            return run.method.loss(run, batch)

    return _Shard()


def _data_parallel(run: _Run) -> None:
    """Wrap the model for data parallelism. Every rank loaded the same base, the same seeded LoRA init
    and the same checkpoint; rank 0's trainable weights are broadcast all the same (the frozen base is
    not sent: init_sync=False)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    for parameter in run.model.parameters():
        if parameter.requires_grad:
            dist.broadcast(parameter.data, src=0)
    with warnings.catch_warnings():  # its replacement still syncs buffers at init, which init_sync=False avoids
        warnings.filterwarnings("ignore", "`broadcast_buffers` is deprecated", FutureWarning)
        run.ddp = DistributedDataParallel(_make_shard_module(run), device_ids=None, broadcast_buffers=False,
                                          init_sync=False)


def _any_rank(run: _Run, flag: bool) -> bool:
    """Whether `flag` is true on any rank (every rank gets the same answer)."""
    if run.world == 1:
        return flag
    import torch
    import torch.distributed as dist

    device = run.device if dist.get_backend() == "nccl" else "cpu"
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def _to_cpu(value: Any) -> Any:
    """A method's step outputs with their tensors on the CPU (to be pickled to the other ranks)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(item) for item in value)
    return value


def _gathered(outputs: list) -> list:
    """Every rank's step outputs, rank by rank: summarize then gives the whole global batch's metrics."""
    import torch.distributed as dist

    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, outputs)
    return [output for rank_outputs in everyone for output in rank_outputs]


def _share_state(run: _Run) -> None:
    import dataclasses

    import torch.distributed as dist

    box = [dataclasses.asdict(run.state)]
    dist.broadcast_object_list(box, src=0)
    for name, value in box[0].items():  # in place: the loop holds the state object
        setattr(run.state, name, value)


# --- validate ------------------------------------------------------------------------------------

def _validate(run: _Run) -> None:
    """Eval loss over the eval rows, greedy samples, early-stopping bookkeeping; reports on_eval."""
    config = run.config
    if not run.eval_items and not config.sample_prompts:
        return
    if run.rank == 0:
        _evaluate(run)
    if run.world > 1:  # rank 0 evaluated: the others take its state (eval loss, early stopping)
        _share_state(run)


def _evaluate(run: _Run) -> None:
    import torch

    config, state = run.config, run.state
    has_eval = bool(run.eval_items)
    run.model.eval()
    started = time.perf_counter()
    eval_loss = None
    extra: dict = {}
    # Compiled blocks run eagerly here: evaluation and generation (a KV cache, one token at a time) would
    # each compile graphs of their own, for a few forward passes.
    with torch.no_grad(), torch.compiler.set_stance("force_eager") if config.compile else contextlib.nullcontext():
        if has_eval:
            extra = run.method.summarize([run.method.loss(run, batch)[1]
                                          for batch in run.batches(epoch=None, evaluation=True)])
            eval_loss = extra.pop("loss")
            extra = {f"eval_{key}": value for key, value in extra.items()}
        samples = [{"prompt": prompt, "output": _generate(run, prompt)} for prompt in config.sample_prompts]
    run.model.train()

    state.last_eval_step = state.step
    if eval_loss is not None:
        state.eval_loss = eval_loss
        # The final metrics carry the method's last evaluation (classify: eval_accuracy, eval_macro_f1).
        state.eval_scores = {key: value for key, value in extra.items() if isinstance(value, (int, float))}
        if state.best_eval_loss is None or eval_loss < state.best_eval_loss:
            state.best_eval_loss = eval_loss
        # What early stopping watches is the method's (sft, dpo: the eval loss; classify: macro-F1).
        watched, direction = run.method.EARLY_STOPPING
        value = eval_loss if watched == "loss" else extra[f"eval_{watched}"]
        score = value if direction == "min" else -value
        if state.best_eval_score is None or score < state.best_eval_score:
            state.best_eval_score = score
            state.evals_without_improvement = 0
        else:
            state.evals_without_improvement += 1
            if config.early_stopping_patience and state.evals_without_improvement >= config.early_stopping_patience:
                state.stopped_early = True
                what = "eval loss" if watched == "loss" else f"eval {watched}"
                run.callbacks.log(f"Early stopping at step {state.step}: {what} has not improved for "
                                  f"{state.evals_without_improvement} evaluations.")
    # None rather than inf when exp overflows: points are stored as JSON, which has no infinity.
    # Perplexity is a language-modelling number: a DPO loss has none.
    perplexity = math.exp(eval_loss) if eval_loss is not None and eval_loss < 700 and run.method.PERPLEXITY else None
    run.callbacks.on_eval({"step": state.step, "eval_loss": eval_loss, "perplexity": perplexity, **extra,
                           "seconds": time.perf_counter() - started}, samples)
    if eval_loss is not None:
        run.callbacks.log(f"Step {state.step}: eval loss {eval_loss:.4f}.")


def _generate(run: _Run, prompt: str) -> str:
    """Greedy continuation of `prompt`, rendered like the training prompts, up to eos or
    sample_max_new_tokens."""
    import torch
    from transformers import GenerationConfig

    tokenizer = run.tokenizer
    ids = prompt_token_ids(prompt, tokenizer, run.config)
    input_ids = torch.tensor([ids], device=run.device)
    eos = run.model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos:
        eos.append(tokenizer.eos_token_id)
    # A fresh GenerationConfig: the checkpoint's sampling defaults (temperature, top_p) do not apply.
    generation = GenerationConfig(max_new_tokens=run.config.sample_max_new_tokens, do_sample=False,
                                  eos_token_id=eos or None, pad_token_id=tokenizer.pad_token_id)
    with run.autocast():
        output = run.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                    generation_config=generation)
    return tokenizer.decode(output[0, len(ids):], skip_special_tokens=True)


# --- save ----------------------------------------------------------------------------------------

def _checkpoint(run: _Run) -> None:
    # At step 0 nothing is trained yet: resuming from no checkpoint is the same run.
    if run.state.step == 0 or run.checkpointed_step == run.state.step:
        return
    run.checkpointed_step = run.state.step
    if run.rank != 0:  # every rank holds the same weights and optimizer state: rank 0 writes them
        return
    path = save_checkpoint(run.checkpoints_dir, model=run.model, optimizer=run.optimizer, scheduler=run.scheduler,
                           state=run.state)
    run.callbacks.on_checkpoint(step=run.state.step, path=str(path))


def _save_adapter(run: _Run, *, lineage: dict | None, metrics: dict) -> Path:
    """Write output_dir/adapter (PEFT save_pretrained, workbench_train_config.json and the model card),
    replacing an older one only once the new one is complete."""
    target = run.output_dir / "adapter"
    run.output_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".adapter.tmp-", dir=run.output_dir))
    try:
        run.model.save_pretrained(work)
        write_adapter_files(work, config=run.config.as_dict(), lineage=lineage, metrics=metrics)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".adapter.old-", dir=run.output_dir))
            os.rename(target, old / "adapter")
            os.rename(work, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target
