"""Merging a LoRA adapter into its base: the standalone model computes what base + adapter do."""

import pytest

from tests.workers.test_models import save_tiny_model
from workers.models import ModelFormatError, load_for_inference
from workers.models.merge import MARKER, merge_adapter


def save_adapter(base_dir, adapter_dir, *, seed=1):
    """A LoRA adapter with non-zero B (init_lora_weights=False), so it changes the outputs."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model, _ = load_for_inference(base_dir)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    peft_model.save_pretrained(adapter_dir, safe_serialization=True)


def logits(model, ids):
    import torch

    with torch.no_grad():
        return model(input_ids=torch.tensor([ids])).logits


@pytest.fixture(scope="module")
def base_and_adapter(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    save_tiny_model(root / "base", initializer_range=0.3)
    save_adapter(root / "base", root / "adapter")
    return root


def test_the_merged_model_equals_base_plus_adapter_and_differs_from_the_base(base_and_adapter, tmp_path):
    from peft import PeftModel

    root = base_and_adapter
    out = merge_adapter(root / "base", root / "adapter", tmp_path / "merged")
    assert (out / MARKER).is_file() and (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert not list(out.glob("adapter_*"))  # standalone: no adapter files
    ids = [2, 7, 8, 9, 10, 11, 12]
    merged, _ = load_for_inference(out)
    base, _ = load_for_inference(root / "base")
    expected = logits(PeftModel.from_pretrained(base, str(root / "adapter")), ids)
    got = logits(merged, ids)
    assert (got - expected).abs().max().item() < 1e-4
    plain, _ = load_for_inference(root / "base")
    assert (got - logits(plain, ids)).abs().max().item() > 1e-3
    assert merge_adapter(root / "base", root / "adapter", tmp_path / "merged") == out  # done once


def test_a_pickle_adapter_or_one_of_another_shape_is_refused(base_and_adapter, tmp_path):
    root = base_and_adapter
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "adapter_config.json").write_text((root / "adapter" / "adapter_config.json").read_text())
    (pickled / "adapter_model.bin").write_bytes(b"not opened")
    with pytest.raises(ModelFormatError, match="pickle"):
        merge_adapter(root / "base", pickled, tmp_path / "out1")
    other = tmp_path / "other-base"
    from transformers import LlamaConfig, LlamaForCausalLM

    LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2)).save_pretrained(other)
    from tests.workers.test_models import save_tiny_tokenizer

    save_tiny_tokenizer(other)
    with pytest.raises(ModelFormatError, match="does not fit"):
        merge_adapter(other, root / "adapter", tmp_path / "out2")
    assert not (tmp_path / "out1").exists() and not (tmp_path / "out2").exists()
