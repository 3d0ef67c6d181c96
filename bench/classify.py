"""A classifier on the demo model (SmolLM2-135M-Instruct, converted to safetensors): training and serving.

Training: method classify (a linear head over the last token, LoRA on the attention projections) on
English sentences whose topic word decides one of three classes (weather, food, sport), 96 training
and 24 held-out sentences, 20 optimizer steps of 8. Reported: the held-out accuracy after training,
against the base model's (the fresh head's, step 0) in the same run.
Serving: `workers.inference.classify.classify_texts` on 64 held-out-style texts in batches of 32
(length-sorted), against the same texts one at a time (batch_size=1), same run, warm model; the labels
must be the same either way.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from pathlib import Path

from bench.generate_batched import demo_model_dir
from bench.report import publish, result

TOPICS = {"weather": ["rain", "snow", "sunshine", "a storm", "fog", "the wind"],
          "food": ["pasta", "a sandwich", "soup", "rice", "an apple", "bread"],
          "sport": ["football", "tennis", "a marathon", "basketball", "swimming", "golf"]}
FRAMES = ["I keep thinking about {}.", "Yesterday we talked about {} for hours.", "Is {} really that common here?",
          "My neighbour told me a story about {}.", "There was {} all afternoon, or so they said.",
          "Everyone in the office mentioned {} today."]
CLASSES = sorted(TOPICS)
TARGET_ACCURACY = 0.9
TARGET_RATIO = 3.0


def sentences(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.choice(CLASSES)
        rows.append({"prompt": rng.choice(FRAMES).format(rng.choice(TOPICS[label])), "label": label})
    return rows


def run() -> list[dict]:
    import torch

    from workers.inference.classify import classify_texts, load_classifier
    from workers.training import TrainCallbacks, TrainConfig, train

    model_dir = demo_model_dir()
    evals: list[dict] = []

    class Evals(TrainCallbacks):
        def on_eval(self, point, samples):
            evals.append(point)

    config = TrainConfig(method="classify", class_labels=CLASSES, max_steps=20, batch_size=8, max_seq_len=32,
                         learning_rate=2e-3, lora_r=8, lora_alpha=16, eval_every=None, checkpoint_every=1_000_000,
                         device="cpu", precision="fp32", seed=0)
    output = Path(tempfile.mkdtemp(prefix="bench-classify-"))
    started = time.perf_counter()
    trained = train(config, model_dir=model_dir, output_dir=output, train_rows=sentences(96, 1),
                    eval_rows=sentences(24, 2), callbacks=Evals())
    train_s = time.perf_counter() - started

    classifier = load_classifier(model_dir, trained.adapter_dir, device="cpu")
    texts = [row["prompt"] for row in sentences(64, 3)]
    classify_texts(classifier, texts[:8])  # warm
    started = time.perf_counter()
    batched = classify_texts(classifier, texts, batch_size=32)
    batched_s = time.perf_counter() - started
    started = time.perf_counter()
    single = classify_texts(classifier, texts, batch_size=1)
    single_s = time.perf_counter() - started
    same = sum(a["label"] == b["label"] for a, b in zip(batched, single))

    first, last = evals[0], evals[-1]
    extra = {"train_s": round(train_s, 1), "steps": trained.final_step, "eval_points": [
        {"step": e["step"], "accuracy": round(e["eval_accuracy"], 4), "macro_f1": round(e["eval_macro_f1"], 4)}
        for e in evals], "confusion": last["eval_confusion"], "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(), "model": "SmolLM2-135M-Instruct fp32 (from Q4_1 GGUF)"}
    rate_batched, rate_single = len(texts) / batched_s, len(texts) / single_s
    return publish([
        result(name="classify_train", metric="held-out accuracy after 20 steps, 3 topics", unit="acc",
               value=last["eval_accuracy"], baseline_what="the base with a fresh head (step 0)",
               baseline_value=first["eval_accuracy"], target=f"accuracy >= {TARGET_ACCURACY:g}",
               passed=last["eval_accuracy"] >= TARGET_ACCURACY, extra=extra),
        result(name="classify_serve", metric="texts/s classified, 64 texts, batches of 32", unit="txt/s",
               value=rate_batched, baseline_what="the same texts one at a time", baseline_value=rate_single,
               target=f"ratio >= {TARGET_RATIO:g}, labels identical",
               passed=rate_batched / rate_single >= TARGET_RATIO and same == len(texts),
               extra={"identical_labels": same, "texts": len(texts), "batched_s": round(batched_s, 3),
                      "single_s": round(single_s, 3)}),
    ])


if __name__ == "__main__":
    run()
