"""Training methods as recipes: the registry holds one module per method, and a method defined
elsewhere (tests/workers/training_method_example.py) trains through the one skeleton in loop.py,
with its own rows, loss and metrics, checkpoints and resume, without a change to the loop."""

import pytest

from tests.workers import training_method_example as every_token
from tests.workers.test_training import FAST, ROWS, Recorder, adapter_weights, model_dir  # noqa: F401
from workers.training import ConfigError, TrainCancelled, TrainConfig, train
from workers.training.methods import METHODS, classify, dpo, get_method, sft

OPTIONS = {**FAST, "method": "every_token", "eval_every": 2, "lora_dropout": 0.0}


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(METHODS, every_token.NAME, every_token)


def test_the_registry_lists_sft_dpo_and_classify_by_name():
    assert set(METHODS) == {"sft", "dpo", "classify"}
    assert get_method("sft") is sft and get_method("dpo") is dpo and get_method("classify") is classify
    assert dpo.ROWS.extra == ("rejected",) and sft.ROWS.extra == ()


def test_an_unregistered_method_is_refused_and_a_method_checks_its_own_settings(registered):
    TrainConfig(method="every_token").validate()
    with pytest.raises(ConfigError) as caught:
        TrainConfig(method="every_token", format="chat").validate()
    assert caught.value.field == "format"
    with pytest.raises(ConfigError) as caught:
        TrainConfig(method="orpo").validate()
    assert caught.value.field == "method"


def test_a_method_defined_outside_the_engine_trains_through_the_skeleton(model_dir, tmp_path, registered):  # noqa: F811
    def run(output_dir, callbacks=None, **options):
        return train(TrainConfig(**{**OPTIONS, **options}), model_dir=model_dir, output_dir=output_dir,
                     train_rows=ROWS, eval_rows=ROWS[:4], callbacks=callbacks)

    record = Recorder()
    result = run(tmp_path / "whole", record, max_steps=8)
    assert record.starts[0]["info"]["method"] == "every_token" and record.starts[0]["info"]["rows_per_epoch"] == 8
    assert [p["step"] for p in record.steps] == list(range(1, 9))
    assert all("worst_row_loss" in p for p in record.steps)  # the method's metrics reach every step point
    evals = [point for point, _ in record.evals]
    assert [p["step"] for p in evals] == [0, 2, 4, 6, 8]
    assert "eval_worst_row_loss" in evals[-1] and evals[-1]["perplexity"] is None
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]  # it learns
    assert result.metrics["steps"] == 8 and (result.adapter_dir / "adapter_model.safetensors").exists()

    # Cancel and resume through the skeleton's checkpoints: the same adapter as the whole run.
    with pytest.raises(TrainCancelled):
        run(tmp_path / "parts", Recorder(stop_after=3), max_steps=8, checkpoint_every=1)
    resumed = run(tmp_path / "parts", max_steps=8, checkpoint_every=1)
    assert resumed.resumed_from_step == 3
    whole, parts = adapter_weights(result.adapter_dir), adapter_weights(resumed.adapter_dir)
    assert whole.keys() == parts.keys()
    for name in whole:
        assert (whole[name] == parts[name]).all(), name


def test_the_method_choices_people_see_are_the_registered_methods():
    from workers.training.config import METHOD_CHOICES
    from workers.training.methods import METHODS

    assert {value for value, _ in METHOD_CHOICES} == set(METHODS)
