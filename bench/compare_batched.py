"""A comparison of 2 models x 32 prompts, end to end through the comparison runner, against
generating the same outputs one by one.

Ours: `apps.comparison.services.comparison_create` (the API's service) then
`apps.comparison.runner.run_comparison` — what the `comparison.run` Celery task runs — in this
process, on SQLite and the embedded Redis: the demo model (SmolLM2-135M-Instruct, fp32, CPU)
and a LoRA adapter of it (PEFT, rank 8 on q/v), 32 short chat prompts, greedy, NEW_TOKENS new
tokens each; the runner generates each model's 32 prompts as one batch through the inference
worker's micro-batcher and model cache, stores every cell and publishes it.
Baseline, same run: the same 64 outputs one at a time (`generate_batch` with one prompt, the same
warm model objects from the same cache), as a runner without batching would. The two sides are
interleaved (ours, half the baseline, ours, the other half) so that a machine shared with other
work loads both alike; both start from warm models. Under greedy decoding the outputs must be
identical.

The demo GGUF is converted once into $WORKBENCH_BENCH_CACHE (default <tmp>/workbench-bench).
"""

from __future__ import annotations

import os
import tempfile
import time

TARGET_RATIO = 4.0
NEW_TOKENS = 24  # 2 x 32 x 24 tokens one by one take about 1.5 minutes on the 2-core machine


def run() -> list[dict]:
    data_dir = tempfile.mkdtemp(prefix="bench-compare-")
    os.environ.update(WORKBENCH_DATA_DIR=data_dir, DJANGO_SETTINGS_MODULE="workbench.settings")
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    import torch
    from django.conf import settings
    from django.core.management import call_command

    from bench.generate_batched import QUESTIONS, demo_model_dir
    from bench.report import publish, result
    from workbench.embedded import EmbeddedRedis

    model_dir = demo_model_dir()
    redis = EmbeddedRedis(data_dir)
    redis.start()
    try:
        call_command("migrate", verbosity=0)
        comparison, models = _seed(model_dir, settings)
        return _measure(comparison, models, QUESTIONS, torch, publish, result)
    finally:
        redis.stop()


def _seed(model_dir, settings):
    from django.contrib.auth import get_user_model
    from peft import LoraConfig, get_peft_model

    from apps.comparison.services import comparison_create
    from apps.projects.services import project_create
    from apps.registry.models import RegisteredModel
    from bench.generate_batched import QUESTIONS
    from workers.models import inspect_model, load_for_inference

    user = get_user_model().objects.create_user("bench", password="x" * 12)
    project = project_create(user=user, name="Bench")
    info = inspect_model(model_dir).as_dict()
    base = RegisteredModel.objects.create(project=project, name="SmolLM2-135M-Instruct", format="hf_dir",
                                          source_path=str(model_dir), weights_path=str(model_dir), status="ready",
                                          info=info)
    adapter_dir = settings.ARTIFACT_ROOT / "bench-adapter"
    net, _ = load_for_inference(model_dir, device="cpu", dtype="fp32")
    get_peft_model(net, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"])).save_pretrained(
        adapter_dir)
    adapter = RegisteredModel.objects.create(project=project, name="SmolLM2 + LoRA", format="peft", kind="adapter",
                                             base_model=base, source_path=str(adapter_dir),
                                             weights_path=str(adapter_dir), status="ready", info=info)
    comparison = comparison_create(user=user, project=project, name="Bench", models=[base.pk, adapter.pk],
                                   prompts=list(QUESTIONS), params={"max_new_tokens": NEW_TOKENS})
    return comparison, [base, adapter]


def _measure(comparison, models, questions, torch, publish, result):
    from apps.comparison.models import Comparison, Output
    from apps.comparison.runner import run_comparison
    from apps.serving.runner import batcher, model_paths
    from workers.inference import SamplingParams, generate_batch, render_prompt

    params = SamplingParams(max_new_tokens=NEW_TOKENS)
    loaded = []
    for model in models:  # warm both models in the runner's cache: both sides start from them
        base, adapter = model_paths(model)
        net, tokenizer = batcher().cache.get(f"model-{model.base_model_id or model.pk}", base, adapter_path=adapter)
        prompts = [render_prompt(tokenizer, messages=[{"role": "user", "content": q}]) for q in questions]
        generate_batch(net, tokenizer, prompts[:2], SamplingParams(max_new_tokens=4))
        loaded.append((net, tokenizer, prompts))

    def ours() -> tuple[float, dict]:
        Output.objects.filter(comparison=comparison).delete()
        Comparison.objects.filter(pk=comparison.pk).update(state="queued", cells_done=0)
        started = time.perf_counter()
        run_comparison(comparison.pk, worker="bench")
        seconds = time.perf_counter() - started
        state = Comparison.objects.get(pk=comparison.pk).state
        assert state == "succeeded", Comparison.objects.get(pk=comparison.pk).error
        cells = {(o.contestant.position, o.prompt.position): o for o in
                 Output.objects.filter(comparison=comparison).select_related("contestant", "prompt")}
        return seconds, cells

    solo: dict[tuple[int, int], object] = {}

    def baseline(part: int) -> float:
        started = time.perf_counter()
        for column, (net, tokenizer, prompts) in enumerate(loaded):
            half = len(prompts) // 2
            for row in range(part * half, (part + 1) * half):
                solo[(column, row)] = generate_batch(net, tokenizer, [prompts[row]], params)[0]
        return time.perf_counter() - started

    ours_s, baseline_s, runs = 0.0, 0.0, []
    for part in (0, 1):
        seconds, cells = ours()
        ours_s += seconds
        runs.append(cells)
        baseline_s += baseline(part)
    ours_s /= 2
    ours_tokens = sum(o.completion_tokens for o in runs[-1].values())
    solo_tokens = sum(r.completion_tokens for r in solo.values())
    identical = min(sum(cells[k].text == solo[k].text for k in solo) for cells in runs)
    ratio = baseline_s / ours_s
    print(f"compare_batched: 2 models (demo model and a LoRA adapter of it) x {len(questions)} chat prompts x "
          f"{NEW_TOKENS} new tokens, greedy, fp32 on {torch.get_num_threads()} CPU threads")
    print(f"  {'run':<58} {'cells':>5} {'tokens':>6} {'seconds':>8} {'tok/s':>7} {'ratio':>6}")
    print(f"  {'one by one (generate_batch of 1 prompt, same warm models)':<58} {len(solo):>5} {solo_tokens:>6} "
          f"{baseline_s:>8.2f} {solo_tokens / baseline_s:>7.1f} {1:>6.2f}")
    print(f"  {'comparison runner (run_comparison), mean of 2':<58} {len(runs[-1]):>5} {ours_tokens:>6} "
          f"{ours_s:>8.2f} {ours_tokens / ours_s:>7.1f} {ratio:>6.2f}")
    print(f"  outputs identical to one by one: {identical}/{len(solo)}")
    extra = {"models": 2, "prompts": len(questions), "new_tokens": NEW_TOKENS, "cells": len(solo),
             "ours_s": round(ours_s, 3), "ours_tokens": ours_tokens, "baseline_s": round(baseline_s, 3),
             "baseline_tokens": solo_tokens, "identical": identical, "torch_threads": torch.get_num_threads(),
             "load_average": os.getloadavg(), "model": "SmolLM2-135M-Instruct fp32 (from Q4_1 GGUF) + LoRA r8"}
    return publish([
        result(name="compare_batched", metric="seconds for a 2-model x 32-prompt comparison (speed-up over one by one)",
               unit="x", value=ratio, baseline_what="the same 64 outputs generated one at a time",
               baseline_value=1.0, target=f"ratio >= {TARGET_RATIO:g}, outputs identical",
               passed=ratio >= TARGET_RATIO and identical == len(solo), ratio=ratio, extra=extra),
    ])


if __name__ == "__main__":
    run()
