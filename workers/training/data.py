"""Rows -> tokenized examples with label masks -> rows of tokens (packed or not) -> batches.

Tokenization is by segments: the rendered text is cut at the boundaries of the trained spans
(the assistant turns), and each segment is tokenized on its own. So the prompt part of an
example is exactly the token sequence that generation later starts from (the rendered prompt
with the generation prompt, tokenized alone), and the label mask never has to guess where a
token that straddles a boundary belongs.

Order is a pure function of (seed, epoch): a resumed run rebuilds the same batches and skips
the ones it already trained on.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import TrainConfig

IGNORE = -100            # label of a token that is not trained (the cross-entropy ignore_index)
# Without packing, batches are formed by length inside chunks of this many batches of a shuffled
# epoch: little padding, and still a different mix of examples every epoch.
LENGTH_GROUP_BATCHES = 64
MAX_REASONS = 5          # skipped-row reasons quoted in messages


class TrainingDataError(ValueError):
    """The rows cannot be trained on: none is usable for the format, or the tokenizer lacks what the
    format needs. The message says what and where (row indices)."""


@dataclass
class Example:
    """One tokenized row. `labels` are aligned with `input_ids` (not shifted): IGNORE where no loss."""

    input_ids: list[int]
    labels: list[int]


@dataclass
class DataStats:
    rows: int = 0
    used: int = 0
    skipped: int = 0
    truncated: int = 0           # examples cut to max_seq_len
    unmasked: int = 0            # examples trained on every token because the chat template is not prefix-stable
    tokens: int = 0              # tokens of the used examples
    reasons: list[str] = field(default_factory=list)  # the first MAX_REASONS "row i: why" of the skipped rows


# --- rows -> examples ------------------------------------------------------------------------------

def build_examples(rows: Sequence[dict], tokenizer: Any, config: TrainConfig) -> list[Example]:
    """Tokenize `rows` for `config.format` and mask labels for `config.loss_on`.

    prompt_response rows need non-empty string `prompt` and `response`; chat rows need `messages`,
    a list of {"role", "content"} with at least one assistant turn that has content. Unusable rows
    are skipped (and counted: see tokenize_rows); examples longer than max_seq_len are truncated.
    Raises TrainingDataError when no row is usable.
    """
    return tokenize_rows(rows, tokenizer, config)[0]


def tokenize_rows(rows: Sequence[dict], tokenizer: Any, config: TrainConfig,
                  what: str = "training rows") -> tuple[list[Example], DataStats]:
    """build_examples, also returning the counts (skipped, truncated, ...). `what` names the rows
    in error messages."""
    chat_template = bool(getattr(tokenizer, "chat_template", None))
    if config.format == "chat" and not chat_template:
        raise TrainingDataError("The chat format needs a tokenizer with a chat template; this model's has none.")
    stats = DataStats(rows=len(rows))
    examples = []
    for index, row in enumerate(rows):
        try:
            segments, stable = _segments(row, tokenizer, config, chat_template)
        except _Unusable as exc:
            stats.skipped += 1
            if len(stats.reasons) < MAX_REASONS:
                stats.reasons.append(f"row {index}: {exc}")
            continue
        example = _tokenize(segments, tokenizer, config.loss_on == "response" and stable)
        if len(example.input_ids) > config.max_seq_len:
            example = Example(example.input_ids[:config.max_seq_len], example.labels[:config.max_seq_len])
            stats.truncated += 1
        # The first token is never predicted, so a trained label must come after it.
        if not any(label != IGNORE for label in example.labels[1:]):
            stats.skipped += 1
            if len(stats.reasons) < MAX_REASONS:
                stats.reasons.append(f"row {index}: nothing to learn within max_seq_len ({config.max_seq_len})")
            continue
        stats.unmasked += not stable and config.loss_on == "response"
        stats.used += 1
        stats.tokens += len(example.input_ids)
        examples.append(example)
    if not examples:
        detail = "; ".join(stats.reasons) if stats.reasons else "there are no rows"
        raise TrainingDataError(f"No usable {what} for the {config.format} format: {detail}.")
    return examples, stats


def prompt_token_ids(prompt: str, tokenizer: Any, config: TrainConfig) -> list[int]:
    """The tokens a generation for `prompt` starts from, rendered exactly as training prompts are:
    prompt_template applied (prompt_response format), then the chat template with the generation
    prompt when the tokenizer has one."""
    text = config.prompt_template.replace("{prompt}", prompt) if config.format == "prompt_response" else prompt
    if getattr(tokenizer, "chat_template", None):
        rendered = _render(tokenizer, [{"role": "user", "content": text}], generation_prompt=True)
        return _encode(tokenizer, rendered)
    return tokenizer(text)["input_ids"]


class _Unusable(Exception):
    """Why a row cannot be used (a message for the user)."""


def _segments(row: Any, tokenizer: Any, config: TrainConfig,
              chat_template: bool) -> tuple[list[tuple[str | list[int], bool]], bool]:
    """The row as [(text or token ids, trained?)] and whether the spans could be located (prefix-stable).

    Without a chat template (prompt_response only): [(prompt ids, False), (response, True), ([eos], True)],
    the prompt tokenized with the tokenizer's own special tokens (BOS), as prompt_token_ids does.
    """
    if not isinstance(row, dict):
        raise _Unusable("is not an object")
    if config.format == "prompt_response":
        prompt, response = row.get("prompt"), row.get("response")
        if not isinstance(prompt, str) or not prompt.strip():
            raise _Unusable("no prompt text")
        if not isinstance(response, str) or not response.strip():
            raise _Unusable("no response text")
        text = config.prompt_template.replace("{prompt}", prompt)
        if not chat_template:
            eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
            return [(tokenizer(text)["input_ids"], False), (response, True), (eos, True)], True
        messages = [{"role": "user", "content": text}, {"role": "assistant", "content": response}]
    else:
        messages = _messages(row.get("messages"))
    return _chat_segments(messages, tokenizer)


def _messages(messages: Any) -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise _Unusable("no messages list")
    cleaned = []
    for message in messages:
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise _Unusable("a message is not {role, content} text")
        cleaned.append({"role": message["role"], "content": message["content"]})
    if not any(m["role"] == "assistant" and m["content"].strip() for m in cleaned):
        raise _Unusable("no assistant turn with content")
    return cleaned


def _chat_segments(messages: list[dict[str, str]], tokenizer: Any) -> tuple[list[tuple[str | list[int], bool]], bool]:
    """Cut the rendered conversation at each assistant turn: the turn starts where the messages before
    it, rendered with the generation prompt, end; it ends where it ends when rendered as the last
    message (so its end-of-turn tokens are trained too). A template that is not prefix-stable (it
    renders earlier turns differently once later ones exist) gives [(full text, True)], False."""
    try:
        full = _render(tokenizer, messages)
        spans: list[tuple[int, int]] = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            if i == 0:  # nothing is rendered before it, so there is no prefix to cut at
                return [(full, True)], False
            before = _render(tokenizer, messages[:i], generation_prompt=True)
            through = _render(tokenizer, messages[: i + 1])
            previous_end = spans[-1][1] if spans else 0
            if len(before) < previous_end or not through.startswith(before) or not full.startswith(through):
                return [(full, True)], False
            spans.append((len(before), len(through)))
    except _TEMPLATE_ERRORS as exc:
        raise _Unusable(f"the chat template refused it ({str(exc)[:120]})") from None
    segments: list[tuple[str | list[int], bool]] = []
    position = 0
    for start, end in spans:
        segments += [(full[position:start], False), (full[start:end], True)]
        position = end
    segments.append((full[position:], False))
    return [(text, trained) for text, trained in segments if text], True


def _tokenize(segments: list[tuple[str | list[int], bool]], tokenizer: Any, mask: bool) -> Example:
    """Concatenate the segments' tokens (text is tokenized without added special tokens); with `mask`,
    the tokens of untrained segments get label IGNORE."""
    input_ids: list[int] = []
    labels: list[int] = []
    for piece, trained in segments:
        ids = _encode(tokenizer, piece) if isinstance(piece, str) else list(piece)
        input_ids += ids
        labels += ids if (trained or not mask) else [IGNORE] * len(ids)
    return Example(input_ids, labels)


def _render(tokenizer: Any, messages: list[dict[str, str]], *, generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def _encode(tokenizer: Any, text: str) -> list[int]:
    # Rendered chat text carries its own BOS / control tokens: add none.
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _template_errors() -> tuple[type[BaseException], ...]:
    try:
        from jinja2.exceptions import TemplateError
    except ImportError:  # transformers needs jinja2 to render at all; keep the module importable
        return (ValueError,)
    return (TemplateError, ValueError)


_TEMPLATE_ERRORS = _template_errors()


# --- examples -> rows -> batches -----------------------------------------------------------------

@dataclass
class Row:
    """One sequence the model sees: one example, or several packed. `targets[t]` is the label of the
    token after t *within the same example* (shifted per example, so no example is trained to
    predict the next one's first token); `positions` restart at 0 for every example."""

    input_ids: list[int]
    targets: list[int]
    positions: list[int]


def make_rows(examples: list[Example], config: TrainConfig, *, shuffle_seed: int | None) -> list[Row]:
    """One Row per example in the order of a shuffle by `shuffle_seed` (None: as given), or (packing)
    examples packed into rows of up to max_seq_len tokens by best-fit decreasing. Packing is done once
    per run, so the number of rows (and of steps) is fixed; the rows are reshuffled every epoch."""
    order = list(range(len(examples)))
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    groups = _best_fit_decreasing(examples, order, config.max_seq_len) if config.packing else [[i] for i in order]
    rows = []
    for group in groups:
        row = Row([], [], [])
        for index in group:
            example = examples[index]
            row.input_ids += example.input_ids
            row.targets += example.labels[1:] + [IGNORE]
            row.positions += list(range(len(example.input_ids)))
        rows.append(row)
    return rows


def _best_fit_decreasing(examples: list[Example], order: list[int], capacity: int) -> list[list[int]]:
    """Groups of example indices, each of at most `capacity` tokens: longest first, each into the row
    with the least room that still holds it (the lowest such row on a tie), else a new row. Closing a
    row as soon as the next example does not fit left 17% padding on train_lora's examples; this
    leaves about 4% (bench/README.md). Within a row the examples keep their order in `order`."""
    rank = {index: position for position, index in enumerate(order)}
    groups: list[list[int]] = []
    rooms: list[tuple[int, int]] = []  # (tokens still free, group), sorted: bisect finds the best fit
    for index in sorted(order, key=lambda i: -len(examples[i].input_ids)):  # stable: ties keep `order`
        size = len(examples[index].input_ids)
        at = bisect.bisect_left(rooms, (size, -1))
        if at < len(rooms):
            room, group = rooms.pop(at)
        else:
            room, group = capacity, len(groups)
            groups.append([])
        groups[group].append(index)
        if room - size > 0:
            bisect.insort(rooms, (room - size, group))
    return [sorted(group, key=rank.__getitem__) for group in groups]


def epoch_batches(rows: list[Row], config: TrainConfig, *, epoch: int | None) -> list[list[Row]]:
    """The micro-batches of one epoch, a pure function of (rows, seed, epoch). epoch=None: in order,
    unshuffled (evaluation). Without packing, examples of similar length share a batch."""
    order = list(range(len(rows)))
    size = config.batch_size
    if epoch is None:
        return [[rows[i] for i in order[start:start + size]] for start in range(0, len(order), size)]
    rng = random.Random(config.seed * 1_000_003 + epoch)
    rng.shuffle(order)
    if not config.packing:
        chunk = size * LENGTH_GROUP_BATCHES
        order = [i for start in range(0, len(order), chunk)
                 for i in sorted(order[start:start + chunk], key=lambda i: -len(rows[i].input_ids))]
    batches = [[rows[i] for i in order[start:start + size]] for start in range(0, len(order), size)]
    if not config.packing:
        rng.shuffle(batches)  # else every chunk would run from its longest batch to its shortest
    return batches


def collate(batch: list[Row], pad_id: int, *, packed: bool) -> dict[str, Any]:
    """Tensors for one micro-batch, right-padded to its longest row; padding has target IGNORE.

    packed: input_ids, position_ids (restarting at 0 per example, padding as one more sequence)
    and no attention_mask: transformers then builds a block-diagonal causal mask from the
    position_ids, so packed examples cannot attend to each other (it only does so with
    attention_mask=None and no KV cache: the forward must pass use_cache=False).
    Not packed: input_ids and a 2-D attention_mask. Both also carry targets.
    """
    import torch

    width = max(len(row.input_ids) for row in batch)
    input_ids, targets, positions, mask = [], [], [], []
    for row in batch:
        pad = width - len(row.input_ids)
        input_ids.append(row.input_ids + [pad_id] * pad)
        targets.append(row.targets + [IGNORE] * pad)
        positions.append(row.positions + list(range(pad)))
        mask.append([1] * len(row.input_ids) + [0] * pad)
    tensors = {"input_ids": torch.tensor(input_ids), "targets": torch.tensor(targets)}
    if packed:
        tensors["position_ids"] = torch.tensor(positions)
    else:
        tensors["attention_mask"] = torch.tensor(mask)
    return tensors
