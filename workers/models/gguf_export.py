"""Write a Llama-architecture safetensors model directory as one GGUF file (f16 or q8_0) that
llama.cpp and Ollama load, and check an export by loading it back and generating with it.

The file follows the GGUF spec through `gguf.GGUFWriter`: the `llama.*` hyperparameters, the
tokenizer (`tokenizer.ggml.*`: tokens, token types, merges, special ids, chat template) and the
tensors under llama.cpp's names. llama.cpp applies rotary embeddings to adjacent pairs of a
head's dimensions where HF Llama rotates its two halves, so the Q and K rows of each head are
reordered here (`interleave_rotary_halves`); transformers' GGUF loader undoes exactly that.

Norm weights stay float32 (llama.cpp reads 1-D tensors as F32 whatever the file type); every
matrix is float16 or q8_0 (blocks of 32 values sharing one float16 scale, gguf's quantizer).
The file is written under a temporary name beside `out_path` and renamed when complete.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.durable import fsync_directory

from .errors import ModelFormatError

GGUF_FORMATS = ("f16", "q8_0")
ARCHITECTURE = "llama"
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5

# HF Llama parameter names (below model.layers.N.) and the llama.cpp tensor each becomes.
LAYER_TENSORS = {
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
MODEL_TENSORS = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                 "lm_head.weight": "output.weight"}


@dataclass(frozen=True)
class GGUFExport:
    path: Path
    size_bytes: int
    tensors: int
    seconds: float


def is_gguf_exportable(config: dict) -> str | None:
    """Why a model of this config.json cannot be written as GGUF, or None when it can."""
    if config.get("model_type") != ARCHITECTURE:
        return (f"GGUF export writes Llama-architecture models; this one is "
                f"{config.get('model_type') or 'of an unknown architecture'}.")
    if config.get("attention_bias") or config.get("mlp_bias"):
        return "GGUF export writes Llama models without attention or MLP biases; this one has them."
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) not in ("default", None):
        return f"GGUF export does not write rotary scaling ({rope.get('rope_type') or rope.get('type')})."
    return None


def write_gguf(model_dir: Path, out_path: Path, quantization: str, *, name: str = "",
               progress: Callable[[int, int], None] | None = None) -> GGUFExport:
    """Write the safetensors Llama model in `model_dir` (config.json, *.safetensors, tokenizer.json)
    to `out_path` as GGUF with its matrices in `quantization` ("f16" or "q8_0").

    Raises ModelFormatError for a model this cannot write (another architecture, biases, rotary
    scaling, a tensor it does not know, a tokenizer without tokenizer.json). `progress(done, total)`
    is called after each tensor; an exception it raises stops the export and leaves no file."""
    import gguf

    if quantization not in GGUF_FORMATS:
        raise ValueError(f"quantization must be one of {GGUF_FORMATS}")
    started = time.monotonic()
    model_dir, out_path = Path(model_dir), Path(out_path)
    config = _read_json(model_dir / "config.json")
    if reason := is_gguf_exportable(config):
        raise ModelFormatError(reason)
    weights = _load_weights(model_dir)
    tensors = _llama_cpp_tensors(weights, config)

    out_path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(prefix=f".{out_path.name}.tmp-", dir=out_path.parent)
    os.close(handle)
    temp = Path(temp_name)
    try:
        writer = gguf.GGUFWriter(str(temp), ARCHITECTURE)
        _write_metadata(writer, config, name or model_dir.name, quantization)
        _write_tokenizer(writer, model_dir, config, vocab_size=tensors["token_embd.weight"][0].shape[0])
        file_type = gguf.GGMLQuantizationType.Q8_0 if quantization == "q8_0" else gguf.GGMLQuantizationType.F16
        for done, (gguf_name, (array, _)) in enumerate(tensors.items(), start=1):
            _add_tensor(writer, gguf_name, array, file_type)
            if progress:
                progress(done, len(tensors))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        with temp.open("rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(temp, out_path)
        fsync_directory(out_path.parent)
    finally:
        temp.unlink(missing_ok=True)
    return GGUFExport(path=out_path, size_bytes=out_path.stat().st_size, tensors=len(tensors),
                      seconds=time.monotonic() - started)


def interleave_rotary_halves(weight: Any, heads: int) -> Any:
    """Reorder the rows of a Q or K projection ([heads * head_dim, hidden]) from HF's layout, where
    each head rotates dimension i with i + head_dim/2, to llama.cpp's, where it rotates 2i with 2i+1."""
    head_dim = weight.shape[0] // heads
    return (weight.reshape(heads, 2, head_dim // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ModelFormatError(f"{path.name} is missing or unreadable: {exc}") from None


def _load_weights(model_dir: Path) -> dict[str, Any]:
    """Every tensor of the directory's safetensors files as float32 numpy arrays."""
    import torch
    from safetensors import safe_open

    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ModelFormatError("The model directory has no safetensors weights.")
    weights = {}
    for file in files:
        with safe_open(str(file), framework="pt") as opened:
            for key in opened.keys():
                weights[key] = opened.get_tensor(key).to(torch.float32).numpy()
    return weights


def _llama_cpp_tensors(weights: dict[str, Any], config: dict) -> dict[str, tuple[Any, str]]:
    """{llama.cpp name: (array, HF name)} in llama.cpp's order; refuses a tensor it does not know."""
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads") or config["num_attention_heads"]
    out: dict[str, tuple[Any, str]] = {}
    known = set()
    out["token_embd.weight"] = (weights["model.embed_tokens.weight"], "model.embed_tokens.weight")
    known.add("model.embed_tokens.weight")
    for block in range(config["num_hidden_layers"]):
        for hf_suffix, gguf_suffix in LAYER_TENSORS.items():
            hf_name = f"model.layers.{block}.{hf_suffix}"
            if hf_name not in weights:
                raise ModelFormatError(f"The model has no tensor {hf_name}.")
            array = weights[hf_name]
            if hf_suffix.startswith("self_attn.q_proj"):
                array = interleave_rotary_halves(array, heads)
            elif hf_suffix.startswith("self_attn.k_proj"):
                array = interleave_rotary_halves(array, kv_heads)
            out[f"blk.{block}.{gguf_suffix}"] = (array, hf_name)
            known.add(hf_name)
    for hf_name in ("model.norm.weight", "lm_head.weight"):
        if hf_name in weights:
            out[MODEL_TENSORS[hf_name]] = (weights[hf_name], hf_name)
            known.add(hf_name)
    if "output_norm.weight" not in out:
        raise ModelFormatError("The model has no tensor model.norm.weight.")
    # Without output.weight llama.cpp reuses token_embd (tied embeddings), as the HF model does.
    if "output.weight" not in out and not config.get("tie_word_embeddings", False):
        raise ModelFormatError("The model has neither lm_head.weight nor tied embeddings.")
    unknown = sorted(set(weights) - known)
    if unknown:
        raise ModelFormatError(f"The model has tensors a Llama GGUF cannot hold: {', '.join(unknown[:5])}.")
    return out


def _add_tensor(writer: Any, name: str, array: Any, matrix_type: Any) -> None:
    import gguf
    import numpy as np

    if array.ndim == 1:
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))
    elif matrix_type == gguf.GGMLQuantizationType.F16:
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float16))
    else:
        if array.shape[-1] % gguf.GGML_QUANT_SIZES[matrix_type][0]:
            raise ModelFormatError(f"{name}'s rows ({array.shape[-1]} values) do not split into q8_0 blocks of 32.")
        quantized = gguf.quants.quantize(np.ascontiguousarray(array, dtype=np.float32), matrix_type)
        writer.add_tensor(name, quantized, raw_dtype=matrix_type)


def _write_metadata(writer: Any, config: dict, name: str, quantization: str) -> None:
    import gguf

    heads = config["num_attention_heads"]
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // heads
    rope = config.get("rope_parameters") or {}
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantization == "q8_0" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads") or heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_freq_base(float(rope.get("rope_theta", config.get("rope_theta", 10000.0))))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(config["vocab_size"])


def _write_tokenizer(writer: Any, model_dir: Path, config: dict, *, vocab_size: int) -> None:
    """The tokenizer of tokenizer.json as llama.cpp's `gpt2` (byte-level BPE) tokenizer. A
    vocabulary of another kind (word-level) is written as its tokens with no merges: the ids
    and the special tokens are exact, but llama.cpp would split text differently."""
    spec = _read_json(model_dir / "tokenizer.json")
    tokenizer_config = _read_json(model_dir / "tokenizer_config.json") \
        if (model_dir / "tokenizer_config.json").is_file() else {}
    vocab: dict[str, int] = dict(spec.get("model", {}).get("vocab") or {})
    if not vocab:
        raise ModelFormatError("tokenizer.json has no vocabulary.")
    types: dict[int, int] = {}
    for added in spec.get("added_tokens") or []:
        vocab[added["content"]] = added["id"]
        types[added["id"]] = TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED
    by_id = {index: token for token, index in vocab.items()}
    if max(by_id) >= vocab_size:
        raise ModelFormatError(f"The tokenizer has ids up to {max(by_id)} but the model only {vocab_size} embeddings.")
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)]  # embeddings rows past the tokenizer: unused
    token_types = [types.get(i, TOKEN_NORMAL if i in by_id else TOKEN_UNUSED) for i in range(vocab_size)]
    merges = [" ".join(m) if isinstance(m, list) else m for m in spec["model"].get("merges") or []]

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer_name(spec.get("pre_tokenizer")))
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    for field, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                       ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
        token_id = _special_id(field, config, tokenizer_config, vocab)
        if token_id is not None:
            add(token_id)
    if isinstance(tokenizer_config.get("add_bos_token"), bool):
        writer.add_add_bos_token(tokenizer_config["add_bos_token"])
    template = tokenizer_config.get("chat_template")
    if not template and (model_dir / "chat_template.jinja").is_file():
        template = (model_dir / "chat_template.jinja").read_text()
    if isinstance(template, str) and template:
        writer.add_chat_template(template)


def _pre_tokenizer_name(pre_tokenizer: dict | None) -> str:
    """llama.cpp's name for the text splitting tokenizer.json does before BPE: GPT-2's regex, or
    that regex after splitting every digit (SmolLM's); "default" for anything else."""
    steps = (pre_tokenizer or {}).get("pretokenizers") if (pre_tokenizer or {}).get("type") == "Sequence" \
        else [pre_tokenizer or {}]
    kinds = [(step.get("type"), step.get("individual_digits"), step.get("use_regex")) for step in steps or []]
    if kinds == [("ByteLevel", None, True)]:
        return "gpt-2"
    if kinds == [("Digits", True, None), ("ByteLevel", None, True)]:
        return "smollm"
    return "default"


def _special_id(field: str, config: dict, tokenizer_config: dict, vocab: dict[str, int]) -> int | None:
    token = tokenizer_config.get(f"{field}_token")
    if isinstance(token, dict):
        token = token.get("content")
    if isinstance(token, str) and token in vocab:
        return vocab[token]
    token_id = config.get(f"{field}_token_id")
    if isinstance(token_id, list):
        token_id = token_id[0] if token_id else None
    return token_id if isinstance(token_id, int) else None
