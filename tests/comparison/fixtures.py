"""Fixtures of comparison tests, also imported by the browser test (tests/e2e/test_comparison.py)."""

import uuid

import pytest
from django.conf import settings


@pytest.fixture(name="adapter_model")
def adapter_model_fixture(tiny_model, owner):
    """A LoRA adapter (non-zero weights, so it answers differently) on the tiny model, registered
    READY in the project as a fine-tune would register it."""
    from peft import LoraConfig, get_peft_model

    from apps.registry.models import RegisteredModel
    from workers.models import load_for_inference

    model, _ = load_for_inference(tiny_model.weights_path)
    peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj"],
                                                  init_lora_weights=False))
    directory = settings.ARTIFACT_ROOT / "adapters" / f"lora-{uuid.uuid4().hex[:8]}"
    peft_model.save_pretrained(directory)
    return RegisteredModel.objects.create(
        project=tiny_model.project, name=f"{tiny_model.name} tuned", format=RegisteredModel.Format.PEFT,
        kind=RegisteredModel.Kind.ADAPTER, base_model=tiny_model, source_path=str(directory),
        weights_path=str(directory), status=RegisteredModel.Status.READY, info=tiny_model.info, created_by=owner)
