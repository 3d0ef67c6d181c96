"""How long a fine-tune will take: its work counted from the method and the model's size, divided by
the speed measured on this installation's workers.

Work is counted in floating-point operations (FLOPs) per trained token, with N the model's parameters:
a forward pass is 2N per token; the backward pass of a LoRA run is about 2N more (the gradients with
respect to the activations flow through every frozen layer; the frozen weights get none). So

    sft   4N per token of the packed rows
    dpo   6N per token of the chosen and the rejected sequence: both go forward and back through the
          policy (4N), and forward once more through the reference, the base with the adapter off (2N)

A DPO pair also carries its prompt twice. Evaluation is forward only (sft 2N, dpo 4N per token).
Each method module declares its two numbers (TRAIN_FLOPS_PER_TOKEN, EVAL_FLOPS_PER_TOKEN).

Speed is what a finished job (or a short calibration run) measured: FLOPs of its optimizer steps
over their seconds, the seconds of one evaluation, and the seconds before its first step (loading,
tokenizing). The same machine running another model or method is then estimated through the FLOPs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .methods import get_method


def train_flops(*, parameters: int, tokens: float, method: str) -> float:
    return get_method(method).TRAIN_FLOPS_PER_TOKEN * parameters * tokens


def eval_flops(*, parameters: int, tokens: float, method: str) -> float:
    return get_method(method).EVAL_FLOPS_PER_TOKEN * parameters * tokens


@dataclass
class Speed:
    """What a run measured. flops_per_s: of its optimizer steps; seconds_per_eval and setup_s: as measured,
    for a model of `parameters`."""

    flops_per_s: float
    parameters: int
    seconds_per_eval: float | None = None
    setup_s: float | None = None


def measured_speed(*, parameters: int, method: str, tokens: int, step_seconds: float,
                   seconds_per_eval: float | None = None, setup_s: float | None = None) -> Speed | None:
    """The speed of a run that trained `tokens` in `step_seconds` of optimizer steps; None if it did not."""
    if tokens <= 0 or step_seconds <= 0 or parameters <= 0:
        return None
    return Speed(flops_per_s=train_flops(parameters=parameters, tokens=tokens, method=method) / step_seconds,
                 parameters=parameters, seconds_per_eval=seconds_per_eval, setup_s=setup_s)


def evaluations(*, steps: int, eval_every: int | None, eval_at_start: bool) -> int:
    """How many evaluations a run of `steps` does (train() in loop.py: at the start, every eval_every
    steps before the last, and at the end)."""
    every = (steps - 1) // eval_every if eval_every else 0
    return int(eval_at_start) + every + 1


def job_seconds(*, speed: Speed, parameters: int, method: str, train_tokens: float, evals: int,
                eval_tokens: float) -> dict:
    """Estimated seconds of a run: {"total", "steps", "evals", "setup"}. Measured evaluation and setup
    times scale with the model's size when the measurement was on another model; an evaluation's own
    forward passes count at least their FLOPs."""
    scale = parameters / speed.parameters
    steps = train_flops(parameters=parameters, tokens=train_tokens, method=method) / speed.flops_per_s
    per_eval = eval_flops(parameters=parameters, tokens=eval_tokens, method=method) / speed.flops_per_s
    if speed.seconds_per_eval is not None:
        per_eval = max(per_eval, speed.seconds_per_eval * scale)
    setup = (speed.setup_s or 0.0) * scale
    total = steps + evals * per_eval + setup
    return {"total": total, "steps": steps, "evals": evals * per_eval, "setup": setup}


def trained_tokens(*, tokens_per_epoch: float, epochs: int, max_steps: int | None, steps_per_epoch: int) -> float:
    """Tokens a run trains: whole epochs, or max_steps steps of the epoch's average step."""
    if max_steps:
        return max_steps * tokens_per_epoch / max(steps_per_epoch, 1)
    return epochs * tokens_per_epoch


def steps_per_epoch(*, method: str, examples: int, tokens_per_epoch: float, batch_size: int, grad_accum: int,
                    max_seq_len: int, packing: bool) -> int:
    """Optimizer steps of one epoch: a method that packs (sft), with packing on, fills rows of max_seq_len tokens."""
    rows = math.ceil(tokens_per_epoch / max_seq_len) if get_method(method).PACKING and packing else examples
    return max(1, math.ceil(math.ceil(rows / batch_size) / grad_accum))
