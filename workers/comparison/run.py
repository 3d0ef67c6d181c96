"""Generating a comparison's grid: every model's output for every prompt, model by model, in
batches through the inference engine's micro-batcher (so the models come from its cache and
a comparison shares the device fairly with playground requests). Plain Python, no Django.

    run_grid(models, prompts, params, batcher=batcher, on_cells=save_and_ask_whether_to_stop)

After each batch, `on_cells(cells)` gets that batch's finished cells (text, timings, scores)
and answers whether to stop; the run stops between batches, never in the middle of one.

A column answered by an outside model is called instead (call_column): one call per prompt,
up to `concurrency` in flight at once, each cell handed to `on_cells` as soon as it is back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from workers.inference import InferenceInputError, SamplingParams
from workers.inference.prompts import render_prompt

from .perplexity import reference_perplexity
from .scores import score_output

DEFAULT_BATCH_SIZE = 32  # the batcher's default batch: the demo model's throughput flattens out above it
DEFAULT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class GridModel:
    column: int  # the model's position in the comparison
    key: str  # the model cache's key of its base weights
    path: str  # base weights directory
    adapter_path: str | None = None  # a LoRA adapter on top, or None
    chat: bool = True  # prompt through the model's chat template (as one user message)


@dataclass(frozen=True)
class GridPrompt:
    row: int  # the prompt's position in the comparison
    text: str
    reference: str | None = None


@dataclass(frozen=True)
class Answer:
    """What an outside model's call gives back for one prompt."""

    text: str
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class Cell:
    """One model's answer to one prompt. `latency_s`: seconds from the start of its batch to
    its last token; `tokens_per_s`: its completion tokens over that time. `error` is set (and
    the text empty) when this one prompt could not be generated (too long for the context...)."""

    row: int
    column: int
    text: str = ""
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    latency_s: float | None = None
    tokens_per_s: float | None = None
    scores: dict = field(default_factory=dict)


class GridCancelled(Exception):
    """on_cells asked to stop."""


def run_grid(models: list[GridModel], prompts: list[GridPrompt], params: SamplingParams, *, batcher: Any,
             on_cells: Callable[[list[Cell]], bool], batch_size: int = DEFAULT_BATCH_SIZE,
             done: Collection[tuple[int, int]] = (), timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Generate every (prompt, model) cell not in `done` ((row, column) pairs already stored).
    Raises GridCancelled when on_cells asks to stop; a model that cannot load raises its error."""
    for model in models:
        todo = [p for p in prompts if (p.row, model.column) not in done]
        for start in range(0, len(todo), batch_size):
            cells = generate_cells(model, todo[start:start + batch_size], params, batcher=batcher,
                                   timeout_s=timeout_s)
            if on_cells(cells):
                raise GridCancelled()


def generate_cells(model: GridModel, prompts: list[GridPrompt], params: SamplingParams, *, batcher: Any,
                   timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Cell]:
    """One batch: submitted together, so the batcher runs them as one generate_batch call."""
    def request(prompt: GridPrompt) -> dict:
        if model.chat:
            return {"messages": [{"role": "user", "content": prompt.text}]}
        return {"prompt": prompt.text}

    futures = [batcher.submit(model.key, model.path, params=params, adapter_path=model.adapter_path, **request(p))
               for p in prompts]
    cells = []
    for prompt, future in zip(prompts, futures):
        cell = Cell(row=prompt.row, column=model.column)
        try:
            result = future.result(timeout=timeout_s)
        except InferenceInputError as exc:  # this prompt alone: too long for the context, ...
            cell.error = str(exc)
        else:
            cell.text, cell.finish_reason = result.text, result.finish_reason
            cell.prompt_tokens, cell.completion_tokens = result.prompt_tokens, result.completion_tokens
            cell.latency_s = round(result.total_s, 4)
            cell.tokens_per_s = round(result.completion_tokens / result.total_s, 2) if result.total_s > 0 else None
            cell.scores = score_output(result.text, prompt.reference)
        cells.append(cell)
    with_reference = [(p, c) for p, c in zip(prompts, cells) if p.reference]
    if with_reference:
        net, tokenizer = batcher.cache.get(model.key, model.path, adapter_path=model.adapter_path)
        texts = [render_prompt(tokenizer, **request(p)) for p, _ in with_reference]
        measured = reference_perplexity(net, tokenizer, texts, [p.reference for p, _ in with_reference])
        for (_, cell), value in zip(with_reference, measured):
            if value is not None:
                cell.scores = {**cell.scores, "perplexity": round(value["perplexity"], 4),
                               "reference_nll": value["nll"], "reference_tokens": value["tokens"]}
    return cells


def call_column(column: int, prompts: list[GridPrompt], call: Callable[[str], Answer], *,
                on_cells: Callable[[list[Cell]], bool], concurrency: int, done: Collection[tuple[int, int]] = (),
                cell_errors: tuple[type[Exception], ...] = ()) -> None:
    """Fill one column by calling `call(prompt text)` for every prompt not in `done`, with up to
    `concurrency` calls in flight: a new one starts as soon as one comes back, so a slow provider
    is kept busy rather than waited on one call at a time. Each cell goes to `on_cells` (in this
    thread) when its call returns; an exception of `cell_errors` becomes that cell's error, any
    other ends the column and is raised. When on_cells asks to stop, or a call raises, no new
    call starts, the ones in flight are awaited and dropped (never stored), and GridCancelled (or
    the call's exception) is raised."""
    todo = iter([p for p in prompts if (p.row, column) not in done])

    def timed(prompt: GridPrompt) -> tuple[Answer | None, str, float]:
        started = time.monotonic()
        try:
            return call(prompt.text), "", time.monotonic() - started
        except cell_errors as exc:
            return None, str(exc) or type(exc).__name__, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix=f"column-{column}") as pool:
        in_flight = {}

        def start_next() -> None:
            prompt = next(todo, None)
            if prompt is not None:
                in_flight[pool.submit(timed, prompt)] = prompt

        for _ in range(max(1, concurrency)):
            start_next()
        try:
            while in_flight:
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    prompt = in_flight.pop(future)
                    answer, error, seconds = future.result()
                    if on_cells([_answered(prompt, column, answer, error, seconds)]):
                        raise GridCancelled()
                    start_next()
        finally:
            wait(in_flight)  # the calls already sent end before the column does; their answers are dropped


def _answered(prompt: GridPrompt, column: int, answer: Answer | None, error: str, seconds: float) -> Cell:
    cell = Cell(row=prompt.row, column=column, latency_s=round(seconds, 4))
    if answer is None:
        cell.error = error
        return cell
    cell.text, cell.finish_reason = answer.text, answer.finish_reason
    cell.prompt_tokens, cell.completion_tokens = answer.prompt_tokens, answer.completion_tokens
    cell.tokens_per_s = round(answer.completion_tokens / seconds, 2) if seconds > 0 else None
    cell.scores = score_output(answer.text, prompt.reference)
    return cell
