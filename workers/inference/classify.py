"""Serving a classifier trained by workers.training (method classify): the base, its LoRA adapter and
the classification head saved with it (PEFT modules_to_save), the classes from the adapter's
workbench_train_config.json. Texts are read exactly as in training (methods.classify.text_ids and
logits) and scored in batches.

    classifier = load_classifier(base_dir, adapter_dir)
    classify_texts(classifier, ["what is paris ?"])
    # [{"label": "city", "labels": ["city"], "probabilities": {"city": 0.97, ...}, "confidence": 0.97}]

A multi-label classifier (config.multi_label) scores each class on its own (sigmoid): "labels" are the
classes above one half (none, one or several), "label" the most probable, and "confidence" how sure it is
of its least sure class (max(p, 1 - p) over the classes), what least-confident-first ordering reads.

A classifier holds its own copy of the base (the generation cache's models have no head); the inference
worker keeps a few in memory (apps.serving.classify).
"""

from __future__ import annotations

import contextlib
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.models import load_for_inference

from .cache import resolve_device

# Texts scored per forward pass: padding grows with the longest text of a batch, so texts are sorted by
# length first. 32 keeps a batch of 512-token texts of the demo model under ~1 GB of activations.
BATCH_SIZE = 32


class NotAClassifier(ValueError):
    """The adapter was not trained as a classifier (its config's method is not classify)."""


@dataclass
class Classifier:
    model: Any
    tokenizer: Any
    config: Any             # its TrainConfig: classes, prompt_template, max_seq_len
    device: Any

    @property
    def classes(self) -> list[str]:
        return list(self.config.class_labels)


def load_classifier(base_dir: Path, adapter_dir: Path, *, device: str = "auto") -> Classifier:
    """The base through the safe loader, the head put on it as in training, then the adapter's LoRA and
    head weights. Raises NotAClassifier for an adapter of another method, and what the loader raises."""
    import torch
    from peft import PeftModel

    from workers.training.config import TrainConfig
    from workers.training.methods import classify

    saved = json.loads((Path(adapter_dir) / "workbench_train_config.json").read_text())
    config = TrainConfig.from_dict(saved.get("config", {}))
    if config.method != classify.NAME:
        raise NotAClassifier(f"This adapter was trained with method {config.method}, not as a classifier.")
    device = resolve_device(device)
    model, tokenizer = load_for_inference(Path(base_dir), device=device)
    classify.head(model, config)
    with warnings.catch_warnings():  # peft reads transformers 5's deprecated is_gradient_checkpointing
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False)
    model.eval()
    return Classifier(model=model, tokenizer=tokenizer, config=config, device=torch.device(device))


def classify_texts(classifier: Classifier, texts: list[str], *, batch_size: int = BATCH_SIZE) -> list[dict]:
    """For each text (in order): {"label": the most probable class, "labels": the predicted classes,
    "probabilities": {class: p}, "confidence"}."""
    import torch

    from workers.training.methods import classify

    tokenizer = classifier.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = [classify.text_ids(text, tokenizer, classifier.config)[0] for text in texts]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    results: list[dict] = [{} for _ in texts]
    classes = classifier.classes
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            scores = classify.logits(classifier.model, [ids[i] for i in chunk], pad_id=pad_id,
                                     device=classifier.device, autocast=contextlib.nullcontext)
            multi_label = classifier.config.multi_label
            probabilities = torch.sigmoid(scores) if multi_label else torch.softmax(scores, dim=-1)
            for i, row in zip(chunk, probabilities.tolist()):
                results[i] = _result(classes, row, multi_label)
    return results


def _result(classes: list[str], row: list[float], multi_label: bool) -> dict:
    best = classes[max(range(len(row)), key=row.__getitem__)]
    labels = [name for name, p in zip(classes, row) if p > 0.5] if multi_label else [best]
    confidence = min(max(p, 1 - p) for p in row) if multi_label else max(row)
    return {"label": best, "labels": labels, "probabilities": {name: round(p, 6) for name, p in zip(classes, row)},
            "confidence": round(confidence, 6)}
