"""GGUF export: a Llama safetensors model written as f16 and q8_0 GGUF, read back with
gguf.GGUFReader (metadata, tensor names and types) and loaded back with transformers' GGUF
loader, whose greedy tokens are compared with the model's own."""

import json
import shutil

import pytest

from tests.workers.test_models import CHAT_TEMPLATE, save_tiny_model
from workers.models import ModelFormatError, load_for_inference
from workers.models.export_check import compare_greedy, load_gguf_back
from workers.models.gguf_export import interleave_rotary_halves, write_gguf

pytestmark = pytest.mark.timeout(240)

# Prompts in the tiny model's word-level vocabulary (tests/workers/test_models.py WORDS).
TINY_PROMPTS = ("what is the capital of france ?", "paris is", "<user> what is paris ?", "the capital")
MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gguf-export") / "tiny"
    save_tiny_model(directory, initializer_range=0.3)
    return directory


def fields_of(path):
    """{key: value} of a GGUF file's metadata (strings decoded, arrays as lists)."""
    from gguf import GGUFReader

    return {name: field.contents() for name, field in GGUFReader(path).fields.items()}, GGUFReader(path).tensors


def test_f16_holds_the_llama_metadata_the_tokenizer_and_llama_cpp_tensor_names(tiny_dir, tmp_path):
    from gguf import GGMLQuantizationType

    written = write_gguf(tiny_dir, tmp_path / "tiny-f16.gguf", "f16", name="Tiny")
    fields, tensors = fields_of(written.path)
    assert fields["general.architecture"] == "llama" and fields["general.name"] == "Tiny"
    assert fields["general.file_type"] == 1  # MOSTLY_F16
    expected = {"llama.context_length": 256, "llama.embedding_length": 32, "llama.block_count": 2,
                "llama.feed_forward_length": 64, "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
                "llama.rope.dimension_count": 8, "llama.vocab_size": 64}
    assert {key: fields[key] for key in expected} == expected
    assert fields["llama.rope.freq_base"] == 10000.0
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)
    assert fields["tokenizer.ggml.model"] == "gpt2" and len(fields["tokenizer.ggml.tokens"]) == 64
    assert fields["tokenizer.ggml.tokens"][:4] == ["<unk>", "<pad>", "<s>", "</s>"]
    assert fields["tokenizer.ggml.token_type"][:4] == [3, 3, 3, 3] and fields["tokenizer.ggml.token_type"][4] == 1
    assert (fields["tokenizer.ggml.bos_token_id"], fields["tokenizer.ggml.eos_token_id"],
            fields["tokenizer.ggml.padding_token_id"], fields["tokenizer.ggml.unknown_token_id"]) == (2, 3, 1, 0)
    assert fields["tokenizer.chat_template"] == CHAT_TEMPLATE
    names = {t.name: GGMLQuantizationType(t.tensor_type).name for t in tensors}
    assert set(names) == {"token_embd.weight", "output_norm.weight", "output.weight"} | {
        f"blk.{b}.{n}.weight" for b in range(2) for n in (*MATRICES, "attn_norm", "ffn_norm")}
    assert names["blk.0.attn_q.weight"] == names["output.weight"] == "F16"
    assert names["blk.1.ffn_norm.weight"] == names["output_norm.weight"] == "F32"
    assert written.tensors == len(names) and written.size_bytes == written.path.stat().st_size


def test_f16_loads_back_with_the_same_weights_and_greedy_tokens(tiny_dir, tmp_path):
    import torch

    written = write_gguf(tiny_dir, tmp_path / "tiny-f16.gguf", "f16")
    reference, tokenizer = load_for_inference(tiny_dir, dtype="fp32")
    back = load_gguf_back(written.path)
    # transformers undoes the rotary reordering: every weight is the model's, to f16 precision.
    ours = reference.state_dict()
    for name, tensor in back.state_dict().items():
        assert torch.allclose(tensor, ours[name], atol=2e-3, rtol=1e-3), name
    check = compare_greedy(back, reference, tokenizer, prompts=TINY_PROMPTS)
    # A random tiny model has near ties (0.003 apart) that f16 rounding can flip; the demo model's
    # f16 export is identical (test_the_demo_model_exports_...).
    assert check["agreement"] >= 0.95, check
    assert sum(r["reference"] == r["exported"] for r in check["prompts"]) >= 3, check


def test_q8_0_is_about_half_the_size_and_mostly_agrees(tiny_dir, tmp_path):
    from gguf import GGMLQuantizationType

    f16 = write_gguf(tiny_dir, tmp_path / "tiny-f16.gguf", "f16")
    q8 = write_gguf(tiny_dir, tmp_path / "tiny-q8_0.gguf", "q8_0")
    fields, tensors = fields_of(q8.path)
    assert fields["general.file_type"] == 7  # MOSTLY_Q8_0
    types = {t.name: GGMLQuantizationType(t.tensor_type).name for t in tensors}
    assert types["blk.0.ffn_down.weight"] == types["token_embd.weight"] == "Q8_0"
    assert types["blk.0.attn_norm.weight"] == "F32"
    assert q8.size_bytes < 0.7 * f16.size_bytes
    reference, tokenizer = load_for_inference(tiny_dir, dtype="fp32")
    check = compare_greedy(load_gguf_back(q8.path), reference, tokenizer, prompts=TINY_PROMPTS)
    assert check["agreement"] >= 0.8, check


def test_the_rotary_reordering_pairs_each_heads_halves():
    import numpy as np

    # One head of dimension 4 (rows 0..3): HF rotates (0, 2) and (1, 3); llama.cpp rotates adjacent rows.
    rows = np.arange(8).reshape(8, 1)  # two heads
    assert interleave_rotary_halves(rows, heads=2).ravel().tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_tied_embeddings_write_no_output_tensor(tmp_path):
    from gguf import GGUFReader

    save_tiny_model(tmp_path / "tied", tie=True)
    written = write_gguf(tmp_path / "tied", tmp_path / "tied.gguf", "f16")
    assert "output.weight" not in {t.name for t in GGUFReader(written.path).tensors}
    reference, _ = load_for_inference(tmp_path / "tied", dtype="fp32")
    back = load_gguf_back(written.path)
    import torch

    ids = torch.tensor([[2, 4, 5, 6]])
    with torch.no_grad():
        assert torch.allclose(back(input_ids=ids).logits, reference(input_ids=ids).logits, atol=1e-2)


@pytest.mark.parametrize("change, message", [
    ({"model_type": "mistral"}, "Llama-architecture models; this one is mistral"),
    ({"attention_bias": True}, "without attention or MLP biases"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0}}, "rotary scaling (llama3)"),
])
def test_what_a_llama_gguf_cannot_hold_is_refused_and_no_file_is_left(tiny_dir, tmp_path, change, message):
    directory = tmp_path / "other"
    shutil.copytree(tiny_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **change}))
    with pytest.raises(ModelFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        write_gguf(directory, tmp_path / "out" / "x.gguf", "f16")
    assert not (tmp_path / "out").exists()


def test_a_stopped_export_leaves_no_file(tiny_dir, tmp_path):
    def stop(done, total):
        if done == 3:
            raise InterruptedError("stopped")

    with pytest.raises(InterruptedError):
        write_gguf(tiny_dir, tmp_path / "x.gguf", "q8_0", progress=stop)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_demo_model_exports_to_f16_with_identical_greedy_tokens_and_to_q8_0(demo_model_dir, tmp_path):
    """SmolLM2-135M-Instruct: its GGUF tokenizer encodes as the model's own does, f16 generates the
    same greedy tokens, q8_0 (recorded) agrees on nearly all of them."""
    from transformers import AutoTokenizer

    reference, tokenizer = load_for_inference(demo_model_dir, dtype="fp32")
    prompts = ("The capital of France is", "def add(a, b):")
    f16 = write_gguf(demo_model_dir, tmp_path / "demo-f16.gguf", "f16", name="SmolLM2 demo")
    fields, tensors = fields_of(f16.path)
    assert (fields["llama.block_count"], fields["llama.embedding_length"], fields["llama.attention.head_count"],
            fields["llama.attention.head_count_kv"], fields["llama.context_length"]) == (30, 576, 9, 3, 8192)
    assert fields["llama.rope.freq_base"] == 100000.0 and fields["tokenizer.ggml.pre"] == "gpt-2"
    assert len(fields["tokenizer.ggml.tokens"]) == 49152 and len(fields["tokenizer.ggml.merges"]) > 40_000
    assert (fields["tokenizer.ggml.bos_token_id"], fields["tokenizer.ggml.eos_token_id"]) == (1, 2)
    assert fields["tokenizer.chat_template"] == tokenizer.chat_template
    assert "output.weight" not in {t.name for t in tensors}  # tied embeddings
    back_tokenizer = AutoTokenizer.from_pretrained(str(f16.path.parent), gguf_file=f16.path.name)
    text = "Hello, world! 12345 <|im_start|>user\nWhat is Paris?<|im_end|>"
    assert back_tokenizer(text)["input_ids"] == tokenizer(text)["input_ids"]

    check = compare_greedy(load_gguf_back(f16.path), reference, tokenizer, prompts=prompts, count=8)
    assert check["identical"] and check["agreement"] == 1.0, check
    q8 = write_gguf(demo_model_dir, tmp_path / "demo-q8_0.gguf", "q8_0")
    assert q8.size_bytes < 0.6 * f16.size_bytes
    check = compare_greedy(load_gguf_back(q8.path), reference, tokenizer, prompts=prompts, count=8)
    print(f"demo q8_0 agreement {check['agreement']}, identical {check['identical']}")  # recorded in bench/README.md
    assert check["agreement"] >= 0.9, check
