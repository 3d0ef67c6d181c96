"""Serving precisions (workers/inference/precision.py) on the tiny Llama: int8 (weight-only) and
bf16 models generate, their perplexity on the reference text is computed and
close to fp32's; the measurement, what `auto` chooses, the model cache keyed by precision, fp32
greedy output unchanged, adapters refused over int8 and served over bf16. No database."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workers.test_inference import save_tiny_chat_model
from workers.inference import Batcher, InferenceInputError, ModelCache, SamplingParams, generate_batch
from workers.inference.int8 import Int8WeightOnlyLinear
from workers.inference.precision import (
    check_precision,
    choose_precision,
    load_in_precision,
    measure_precisions,
    perplexity,
    precision_unsupported,
)
from workers.models import load_for_inference

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

GREEDY = SamplingParams(max_new_tokens=12)
PROMPTS = ["what is the capital of france ?", "paris", "the"]
# The tiny model's word-level tokenizer knows few words: a reference text made of them.
TEXTS = ("what is the capital of france ? paris . the capital of france is paris .",
         "the ? paris what is the capital")
BF16 = precision_unsupported("bf16", "cpu") is None


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("precision") / "tiny"
    save_tiny_chat_model(directory)
    return directory


def test_int8_quantizes_the_blocks_linear_layers_generates_and_keeps_perplexity_close(tiny_dir):
    import torch

    fp32, tokenizer = load_in_precision(tiny_dir, "fp32")
    int8, _ = load_in_precision(tiny_dir, "int8")
    quantized = [m for m in int8.modules() if isinstance(m, Int8WeightOnlyLinear)]
    assert len(quantized) == 2 * 7  # q, k, v, o, gate, up, down in each of the 2 layers
    assert isinstance(int8.get_output_embeddings(), torch.nn.Linear)  # the head stays in float
    [result] = generate_batch(int8, tokenizer, [PROMPTS[0]], GREEDY)
    assert result.completion_tokens > 0 and result.finish_reason in ("length", "stop")
    reference = perplexity(fp32, tokenizer, TEXTS)
    assert 30 < reference < 100  # a random model: about uniform over its 64-word vocabulary
    assert perplexity(int8, tokenizer, TEXTS) == pytest.approx(reference, rel=0.02)


@pytest.mark.skipif(not BF16, reason="this CPU has no native bf16")
def test_bf16_loads_in_bf16_generates_and_keeps_perplexity_close(tiny_dir):
    import torch

    fp32, tokenizer = load_in_precision(tiny_dir, "fp32")
    bf16, _ = load_in_precision(tiny_dir, "bf16")
    assert {p.dtype for p in bf16.parameters()} == {torch.bfloat16}
    [result] = generate_batch(bf16, tokenizer, [PROMPTS[0]], GREEDY)
    assert result.completion_tokens > 0
    assert perplexity(bf16, tokenizer, TEXTS) == pytest.approx(perplexity(fp32, tokenizer, TEXTS), rel=0.02)


def test_a_precision_the_device_cannot_run_is_refused_by_name():
    assert precision_unsupported("fp16", "cpu").startswith("Unknown precision")
    assert "mps" in precision_unsupported("int8", "mps")
    with pytest.raises(InferenceInputError) as refused:
        check_precision("int8", "cpu", adapter=True)
    assert refused.value.field == "precision" and "adapter" in str(refused.value)
    check_precision("fp32", "cpu", adapter=True)


def test_measuring_records_each_precision_and_stops_when_asked(tiny_dir):
    measured = measure_precisions(tiny_dir, precisions=("fp32", "int8"))
    assert [m.precision for m in measured] == ["fp32", "int8"]
    for m in measured:
        assert m.tokens_per_s > 0 and m.perplexity > 1 and m.load_s >= 0 and not m.error
    calls = []
    stopped = measure_precisions(tiny_dir, precisions=("fp32", "bf16", "int8"),
                                 on_progress=lambda done, total: calls.append((done, total)) or done == 1)
    assert [m.precision for m in stopped] == ["fp32"] and calls == [(0, 3), (1, 3)]


def test_auto_takes_the_fastest_within_the_perplexity_allowance():
    rows = [{"precision": "fp32", "tokens_per_s": 10, "perplexity": 20.0},
            {"precision": "bf16", "tokens_per_s": 30, "perplexity": 20.3},
            {"precision": "int8", "tokens_per_s": 40, "perplexity": 20.2}]
    assert choose_precision(rows) == "int8"
    assert choose_precision(rows, adapter=True) == "bf16"  # never int8 under an adapter
    rows[2]["perplexity"] = 60.0  # over +2%: too costly, however fast
    assert choose_precision(rows) == "bf16"
    rows[1]["perplexity"] = 20.5
    assert choose_precision(rows) == "fp32"
    assert choose_precision([]) == "fp32"
    assert choose_precision([{"precision": "fp32", "error": "x"}, rows[1]]) == "fp32"  # fp32 not measured


def test_the_cache_keeps_one_copy_per_precision_and_fp32_greedy_output_is_unchanged(tiny_dir):

    model, tokenizer = load_for_inference(tiny_dir)
    expected = [r.token_ids for r in generate_batch(model, tokenizer, PROMPTS, GREEDY)]
    cache = ModelCache(memory_budget_bytes=2**30)
    with Batcher(cache, max_batch_size=8, max_wait_ms=2) as batcher:
        answers = [batcher.submit("tiny", tiny_dir, prompt, GREEDY, device="cpu", dtype="fp32") for prompt in PROMPTS]
        assert [a.result(timeout=60).token_ids for a in answers] == expected
        batcher.submit("tiny", tiny_dir, PROMPTS[0], GREEDY, device="cpu", dtype="int8").result(timeout=60)
    assert cache.keys() == [("tiny", "cpu", "fp32"), ("tiny", "cpu", "int8")]
    int8 = cache.load("tiny", tiny_dir, device="cpu", dtype="int8").model
    assert any(isinstance(m, Int8WeightOnlyLinear) for m in int8.modules())


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir, tmp_path_factory) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    model, _ = load_for_inference(tiny_dir)
    tuned = get_peft_model(model, LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                             init_lora_weights=False))
    directory = tmp_path_factory.mktemp("precision-lora") / "adapter"
    tuned.save_pretrained(directory)
    return directory


def test_an_adapter_is_refused_over_int8_and_served_over_fp32_and_bf16(tiny_dir, adapter_dir):
    from peft import PeftModel

    cache = ModelCache(memory_budget_bytes=2**30)
    with Batcher(cache, max_batch_size=8, max_wait_ms=2) as batcher:
        with pytest.raises(InferenceInputError) as refused:
            batcher.submit("tiny", tiny_dir, PROMPTS[0], GREEDY, device="cpu", dtype="int8", adapter_path=adapter_dir)
        assert refused.value.field == "precision"
        with pytest.raises(InferenceInputError):
            cache.get("tiny", tiny_dir, adapter_path=adapter_dir, device="cpu", dtype="int8")
        base, tokenizer = load_for_inference(tiny_dir)
        alone = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
        [expected] = generate_batch(alone, tokenizer, [PROMPTS[0]], GREEDY)
        served = batcher.submit("tiny", tiny_dir, PROMPTS[0], GREEDY, device="cpu", dtype="fp32",
                                adapter_path=adapter_dir).result(timeout=60)
        assert served.token_ids == expected.token_ids
        if BF16:
            in_bf16 = batcher.submit("tiny", tiny_dir, PROMPTS[0], GREEDY, device="cpu", dtype="bf16",
                                     adapter_path=adapter_dir).result(timeout=60)
            assert in_bf16.completion_tokens > 0


def test_an_int8_weight_only_linear_layer_matches_its_float_layer_within_the_rounding():
    import torch

    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    x = torch.randn(2, 5, 64)
    quantized = Int8WeightOnlyLinear(linear)
    assert quantized.weight_int8.dtype == torch.int8 and quantized.scale.shape == (48,)
    expected = linear(x)
    # Each weight is off by at most half a step (scale / 2): the output by at most that times sum |x|.
    bound = (quantized.scale / 2)[None, None, :] * x.abs().sum(-1, keepdim=True)
    assert ((quantized(x) - expected).abs() <= bound + 1e-5).all()
