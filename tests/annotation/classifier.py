"""A classifier adapter trained for real, for suggestions from a classifier: the tiny model learns the
city / country keyword classes of the classify tests (tests/training/test_classify_jobs.py) through the
training engine, and the adapter is registered ready as a fine-tune registers its own."""

from pathlib import Path

from apps.registry.models import RegisteredModel
from tests.training.test_classify_jobs import keyword_records
from workers.training import TrainConfig, train

CLASSES = ["city", "country"]
# As tests/serving/test_classify_api.py's classifier: it labels every keyword text right after 40 steps.
CONFIG = {"method": "classify", "class_labels": CLASSES, "max_seq_len": 32, "batch_size": 8, "learning_rate": 2e-2,
          "lora_r": 8, "lora_alpha": 8, "target_modules": "all_linear", "max_steps": 40, "eval_every": 40,
          "checkpoint_every": 1000, "precision": "fp32", "sample_prompts": []}


def trained_classifier(project, owner, tiny_model, output_dir: Path, name: str = "Topic classifier") -> RegisteredModel:
    config = TrainConfig(**CONFIG)
    rows = [{"prompt": text, "label": label} for text, label in keyword_records(96, seed=1)]
    evaluation = [{"prompt": text, "label": label} for text, label in keyword_records(24, seed=2)]
    result = train(config, model_dir=Path(tiny_model.weights_path), output_dir=output_dir, train_rows=rows,
                   eval_rows=evaluation)
    return RegisteredModel.objects.create(
        project=project, name=name, format=RegisteredModel.Format.PEFT, kind=RegisteredModel.Kind.ADAPTER,
        base_model=tiny_model, source_path=str(result.adapter_dir), weights_path=str(result.adapter_dir),
        status=RegisteredModel.Status.READY, info=tiny_model.info, created_by=owner,
        lineage={"method": "classify", "config": config.as_dict(), "metrics": result.metrics})


def classifier_stub(project, owner, tiny_model, classes: list[str]) -> RegisteredModel:
    """A ready adapter whose lineage says it is a classifier of `classes` (its files are never read:
    for the checks made when a campaign is created)."""
    return RegisteredModel.objects.create(
        project=project, name="Stub classifier", format="hf_dir", kind="adapter", base_model=tiny_model,
        source_path="/x", weights_path="/x", status="ready", info=tiny_model.info, created_by=owner,
        lineage={"config": {"method": "classify", "class_labels": classes}})
