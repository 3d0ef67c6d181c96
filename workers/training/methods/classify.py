"""Sequence classification: a linear head over the last token's hidden state, LoRA on the base.

A row is a prompt (rendered through prompt_template) and a class, read from config.label_column (the
runner puts it under the row's "label" key); config.class_labels are the classes in the order of the
head's outputs. The head (`classifier_head`, hidden x classes) sits on the causal LM beside its LM head
and is trained fully: it is one of PEFT's modules_to_save, so checkpoints, resume and the saved adapter
carry it with the LoRA weights, and workbench_train_config.json carries the class list.

The decoder is causal, so the last real token is the one that has seen the whole text: sequences are
padded on the right and its hidden state is picked by each row's length.

The loss is cross-entropy, optionally weighted by inverse class frequency (config.class_weights);
evaluations report accuracy, macro-F1 (the mean of the per-class F1 over the classes present in the
gold labels or the predictions) and the confusion matrix (rows: the true class, columns: the predicted one), and early stopping watches macro-F1.

Multi-label (config.multi_label): a row's "label" is a list of classes (none, one or several), each class
is a yes/no of its own (a sigmoid over its logit, predicted when above one half) and the loss is the
binary cross-entropy averaged over the classes; class_weights weighs each class's positives by its
negatives / positives among the training rows (BCE's pos_weight). Accuracy is then the exact-match ratio
(every class of the row right), macro-F1 the mean of the per-class F1, and the confusion one row per
class: its true positives, false positives, false negatives and true negatives.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ConfigError, TrainConfig
from ..data import DataStats, TrainingDataError
from ..lora import decoder
from .spec import Rows

NAME = "classify"
ROWS = Rows(formats=("prompt_response",), response=False, label=True,
            needs="a prompt and a label, which a classifier needs")
PACKING = False               # one text per sequence: its last token is what the head reads
PERPLEXITY = False            # cross-entropy over classes, no language-modelling loss
# forward 2N + LoRA backward 2N, the head is negligible; evaluation: forward only
TRAIN_FLOPS_PER_TOKEN = 4
EVAL_FLOPS_PER_TOKEN = 2
EXAMPLES = ("training texts", "eval texts")
EARLY_STOPPING = ("macro_f1", "max")   # the eval metric early stopping watches, and which way is better
EVAL_ONLY = ("confusion",)             # summarize's keys that go into eval points only
HEAD = "classifier_head"
MAX_REASONS = 5
MULTI_LABEL_OUTCOMES = ("true positive", "false positive", "false negative", "true negative")  # confusion columns


@dataclass
class Text:
    input_ids: list[int]
    label: int | tuple[int, ...]  # index into config.class_labels; multi_label: the indices of its classes
    weight: float       # of its loss: 1, or the inverse frequency of its class (training, class_weights)
    # multi_label with class_weights: each class's negatives / positives among the training rows (one
    # tuple shared by every text of the run)
    positive_weights: tuple[float, ...] | None = None


def check(config: TrainConfig) -> None:
    if config.format not in ROWS.formats:
        raise ConfigError("format", "a classifier reads each row's prompt; use the prompt_response format.")
    if len(set(config.class_labels)) < 2 or len(set(config.class_labels)) != len(config.class_labels):
        raise ConfigError("class_labels", "a classifier needs at least two distinct classes.")
    if config.sample_prompts:
        raise ConfigError("sample_prompts", "a classifier generates no samples; leave them empty.")
    if not config.label_column.strip():
        raise ConfigError("label_column", "name the column that holds each row's class.")


def head(model: Any, config: TrainConfig) -> list[str]:
    """Put a freshly initialised classifier head on `model` (before LoRA wraps it); returns its name for
    PEFT's modules_to_save. Its init draws from torch's RNG, seeded by the loop."""
    import torch

    hidden = model.config.hidden_size
    parameter = next(model.parameters())
    layer = torch.nn.Linear(hidden, len(config.class_labels), bias=False, device=parameter.device,
                            dtype=torch.float32)  # trained fully: in fp32 like the LoRA weights
    layer.weight.data.normal_(std=hidden ** -0.5)
    model.add_module(HEAD, layer)
    return [HEAD]


def prepare(rows: Sequence[dict], tokenizer: Any, config: TrainConfig, *,
            evaluation: bool) -> tuple[list[Text], DataStats]:
    """Each row's rendered prompt tokenized (truncated to max_seq_len, keeping its end: the last token
    is what the head reads) with its class index. Rows without a prompt or with a label outside
    config.class_labels are skipped (counted). Raises TrainingDataError when none is usable."""
    what = "eval rows" if evaluation else "training rows"
    index = {label: i for i, label in enumerate(config.class_labels)}
    stats = DataStats(rows=len(rows))
    texts: list[Text] = []
    for number, row in enumerate(rows):
        prompt, label = row.get("prompt"), row.get("label")
        if not isinstance(prompt, str) or not prompt.strip():
            _skip(stats, number, "no prompt")
            continue
        if (problem := _label_problem(label, index, config.multi_label)) is not None:
            _skip(stats, number, problem)
            continue
        ids, truncated = text_ids(prompt, tokenizer, config)
        stats.truncated += truncated
        stats.used += 1
        stats.tokens += len(ids)
        target = tuple(sorted({index[c] for c in label})) if config.multi_label else index[label]
        texts.append(Text(input_ids=ids, label=target, weight=1.0))
    if not texts:
        detail = "; ".join(stats.reasons) if stats.reasons else "there are no rows"
        kind = "a list of classes among" if config.multi_label else "a label among"
        raise TrainingDataError(f"No usable {what} for the classifier (a prompt and {kind} "
                                f"{', '.join(config.class_labels)}): {detail}.")
    if config.class_weights and not evaluation and config.multi_label:
        positives = Counter(c for text in texts for c in text.label)
        # negatives / positives per class; a class no training row has weighs 1 (nothing to balance)
        shared = tuple((len(texts) - positives[c]) / positives[c] if positives[c] else 1.0
                       for c in range(len(config.class_labels)))
        for text in texts:
            text.positive_weights = shared
    elif config.class_weights and not evaluation:
        counts = Counter(text.label for text in texts)
        for text in texts:  # n / (classes present x count): the mean weight over the rows stays 1
            text.weight = len(texts) / (len(counts) * counts[text.label])
    return texts, stats


def _label_problem(label: Any, index: dict[str, int], multi_label: bool) -> str | None:
    """Why a row's label cannot be trained on (None: it can)."""
    if not multi_label:
        return None if isinstance(label, str) and label in index else f"label {label!r} is not one of the classes"
    if not isinstance(label, list):
        return f"label {label!r} is not a list of classes"
    unknown = next((c for c in label if not isinstance(c, str) or c not in index), None)
    return None if unknown is None else f"label {unknown!r} is not one of the classes"


def text_ids(text: str, tokenizer: Any, config: TrainConfig) -> tuple[list[int], bool]:
    """The tokens the classifier reads for `text` (rendered through prompt_template, cut to the last
    max_seq_len: the last token is what the head reads), and whether it was cut. Serving uses it too."""
    ids = tokenizer(config.prompt_template.replace("{prompt}", text), add_special_tokens=True)["input_ids"]
    if len(ids) > config.max_seq_len:
        return ids[-config.max_seq_len:], True
    return ids, False


def batches(items: list[Text], config: TrainConfig, *, epoch: int | None) -> list[list[Text]]:
    """Micro-batches for one epoch, a pure function of (seed, epoch); None: in order."""
    order = list(range(len(items)))
    if epoch is not None:
        random.Random(config.seed * 1_000_003 + epoch).shuffle(order)
    size = config.batch_size
    return [[items[i] for i in order[start:start + size]] for start in range(0, len(order), size)]


def weight(batch: list[Text]) -> float:
    """A step's loss is the (class-weighted) mean over its texts."""
    return sum(text.weight for text in batch)


def tokens(batch: list[Text]) -> int:
    return sum(len(text.input_ids) for text in batch)


def logits(model: Any, rows: list[list[int]], *, pad_id: int, device: Any, autocast: Any) -> Any:
    """The head's logits (rows x classes, fp32) for token sequences: the contract the served classifier
    shares with training."""
    import torch

    longest = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, ids in enumerate(rows):  # right padding: position length-1 is the last real token
        input_ids[i, :len(ids)] = torch.tensor(ids)
        mask[i, :len(ids)] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    with autocast():
        hidden = decoder(model)(input_ids=input_ids, attention_mask=mask, use_cache=False).last_hidden_state
    last = hidden[torch.arange(len(rows), device=device), mask.sum(dim=1) - 1]
    causal_lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    return getattr(causal_lm, HEAD)(last.float())


def loss(run: Any, batch: list[Text]) -> tuple[Any, dict]:
    import torch

    scores = logits(run.model, [text.input_ids for text in batch], pad_id=run.pad_id, device=run.device,
                    autocast=run.autocast)
    if isinstance(batch[0].label, tuple):
        return _multi_label_loss(scores, batch, run.device)
    gold = torch.tensor([text.label for text in batch], device=run.device)
    weights = torch.tensor([text.weight for text in batch], device=run.device)
    losses = torch.nn.functional.cross_entropy(scores, gold, reduction="none") * weights
    summed = losses.sum()
    return summed, {"loss": summed.item(), "weight": weight(batch), "gold": gold.tolist(),
                    "predicted": scores.argmax(dim=-1).tolist(), "classes": scores.shape[-1]}


def _multi_label_loss(scores: Any, batch: list[Text], device: Any) -> tuple[Any, dict]:
    """Each text's binary cross-entropy averaged over the classes, summed over the batch; a class is
    predicted when its logit is above 0 (its sigmoid above one half)."""
    import torch

    targets = torch.zeros_like(scores)
    for row, text in enumerate(batch):
        targets[row, list(text.label)] = 1.0
    weights = batch[0].positive_weights
    pos_weight = torch.tensor(weights, device=device) if weights else None
    losses = torch.nn.functional.binary_cross_entropy_with_logits(scores, targets, pos_weight=pos_weight,
                                                                  reduction="none").mean(dim=-1)
    summed = losses.sum()
    predicted = [[c for c, above in enumerate(row) if above] for row in (scores > 0).tolist()]
    return summed, {"loss": summed.item(), "weight": float(len(batch)), "gold": [list(t.label) for t in batch],
                    "predicted": predicted, "classes": scores.shape[-1], "multi_label": True}


def summarize(outputs: list[dict]) -> dict:
    """Over every text of the given micro-batches: the (weighted) mean loss, accuracy, macro-F1 and the
    confusion matrix (multi-label: the exact-match ratio, the per-class F1's mean, per-class outcomes)."""
    if outputs[0].get("multi_label"):
        return _summarize_multi_label(outputs)
    gold = [g for output in outputs for g in output["gold"]]
    predicted = [p for output in outputs for p in output["predicted"]]
    confusion = confusion_matrix(gold, predicted, outputs[0]["classes"])
    return {"loss": sum(o["loss"] for o in outputs) / sum(o["weight"] for o in outputs),
            "accuracy": sum(int(g == p) for g, p in zip(gold, predicted)) / len(gold),
            "macro_f1": macro_f1(confusion), "confusion": confusion}


def _summarize_multi_label(outputs: list[dict]) -> dict:
    gold = [set(g) for output in outputs for g in output["gold"]]
    predicted = [set(p) for output in outputs for p in output["predicted"]]
    confusion = multi_label_confusion(gold, predicted, outputs[0]["classes"])
    return {"loss": sum(o["loss"] for o in outputs) / sum(o["weight"] for o in outputs),
            "accuracy": sum(int(g == p) for g, p in zip(gold, predicted)) / len(gold),
            "macro_f1": multi_label_macro_f1(confusion), "confusion": confusion}


def multi_label_confusion(gold: list[set[int]], predicted: list[set[int]], classes: int) -> list[list[int]]:
    """counts[class] = [true positives, false positives, false negatives, true negatives] (MULTI_LABEL_OUTCOMES)."""
    counts = [[0, 0, 0, 0] for _ in range(classes)]
    for g, p in zip(gold, predicted):
        for c in range(classes):
            counts[c][(0 if c in p else 2) if c in g else (1 if c in p else 3)] += 1
    return counts


def multi_label_macro_f1(confusion: list[list[int]]) -> float:
    """The mean F1 over the classes some row has or some prediction names (scikit-learn's
    f1_score(average="macro") on the label indicator matrix, over those classes)."""
    scores = [2 * tp / (2 * tp + fp + fn) for tp, fp, fn, _ in confusion if tp + fp + fn]
    return sum(scores) / len(scores) if scores else 0.0


def confusion_matrix(gold: list[int], predicted: list[int], classes: int) -> list[list[int]]:
    """counts[true class][predicted class]."""
    counts = [[0] * classes for _ in range(classes)]
    for g, p in zip(gold, predicted):
        counts[g][p] += 1
    return counts


def macro_f1(confusion: list[list[int]]) -> float:
    """The mean F1 over the classes that occur in the gold labels or the predictions (scikit-learn's
    f1_score(average="macro", labels=those classes)); a class with no true positive scores 0."""
    scores = []
    for c in range(len(confusion)):
        true_positive = confusion[c][c]
        gold = sum(confusion[c])
        predicted = sum(row[c] for row in confusion)
        if gold == 0 and predicted == 0:
            continue
        scores.append(2 * true_positive / (gold + predicted))
    return sum(scores) / len(scores) if scores else 0.0


def _skip(stats: DataStats, index: int, reason: str) -> None:
    stats.skipped += 1
    if len(stats.reasons) < MAX_REASONS:
        stats.reasons.append(f"row {index}: {reason}")
