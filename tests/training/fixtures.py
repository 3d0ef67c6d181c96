"""A tiny registered model and a small split dataset version, for fine-tune jobs and generation.
The fixtures are exported to every test through tests/conftest.py."""

import uuid

import pytest
from django.conf import settings

from apps.datasets.models import Dataset, DatasetRow, DatasetVersion

# Only words of the tiny model's vocabulary (tests/workers/test_models.py WORDS).
QA = [
    ("what is the capital of france ?", "paris"),
    ("what is paris ?", "the capital of france"),
    ("what is the capital of paris ?", "france"),
    ("paris is the capital of what ?", "france"),
    ("is paris the capital of france ?", "paris is the capital of france"),
    ("what of france ?", "paris"),
]


@pytest.fixture
def tiny_model(project, owner):
    """The tiny Llama with a word-level tokenizer, registered READY in `project` (inspected here
    by the function the worker's task runs)."""
    from apps.registry.services import model_register, run_inspection
    from tests.workers.test_models import save_tiny_model

    directory = settings.MODEL_ROOTS[0] / f"tiny-{uuid.uuid4().hex[:8]}"
    directory.mkdir(parents=True)
    # Initialised wider than transformers' default (0.02): with it, the frozen output layer of so
    # small a model cannot make any token likely, and no LoRA could lower the loss much.
    save_tiny_model(directory, initializer_range=0.3)
    model = model_register(user=owner, project=project, name=f"Tiny {directory.name}", path=str(directory))
    run_inspection(model.pk)
    model.refresh_from_db()
    assert model.status == "ready", model.error
    return model


def make_version(project, owner, *, rows=QA * 4, eval_rows=QA, name="QA") -> DatasetVersion:
    dataset = Dataset.objects.create(project=project, name=name, created_by=owner)
    version = DatasetVersion.objects.create(dataset=dataset, number=1, status="ready", author=owner,
                                            row_count=len(rows) + len(eval_rows), content_hash="c" * 64)
    DatasetRow.objects.bulk_create(
        [DatasetRow(version=version, position=i, row_hash=f"{i:064d}", prompt=p, response=r, split="train",
                    metadata={}) for i, (p, r) in enumerate(rows)]
        + [DatasetRow(version=version, position=len(rows) + i, row_hash=f"{len(rows) + i:064d}", prompt=p,
                      response=r, split="validation", metadata={}) for i, (p, r) in enumerate(eval_rows)])
    return version


@pytest.fixture
def qa_version(project, owner):
    return make_version(project, owner)


FAST = {"max_steps": 30, "batch_size": 4, "max_seq_len": 32, "learning_rate": 1e-2, "eval_every": 10,
        "checkpoint_every": 10, "lora_r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "sample_max_new_tokens": 4}


def launch_body(model, version, **config) -> dict:
    return {"name": "QA run", "base_model": model.pk, "dataset_version": version.pk, "train_split": "train",
            "eval_split": "validation", "config": {**FAST, **config}}


def make_job(project, owner, *, state="running", config=None, **fields):
    """A job row on a placeholder model, for tests of what surrounds a run (sockets, pages)."""
    from apps.registry.models import RegisteredModel
    from apps.training.models import TrainingJob

    version = make_version(project, owner, name=f"Data {uuid.uuid4().hex[:6]}")
    model = RegisteredModel.objects.create(project=project, name=f"Base {uuid.uuid4().hex[:6]}", format="hf_dir",
                                           source_path="/nonexistent", weights_path="/nonexistent", status="ready",
                                           info={})
    return TrainingJob.objects.create(project=project, name="Run", base_model=model, dataset_version=version,
                                      config=config or {"format": "prompt_response"}, state=state, created_by=owner,
                                      **fields)
