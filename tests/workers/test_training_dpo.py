"""Preference tuning (DPO with LoRA) on the tiny Llama: the reference is the base with the adapter
disabled (so a fresh adapter's loss is exactly log 2), the policy learns to prefer the chosen
answers, metrics flow through the same callbacks, and cancel/resume gives the same adapter."""

import math

import pytest

from tests.workers.test_training import FAST, Recorder, adapter_weights, model_dir, tokenizer  # noqa: F401
from workers.training import ConfigError, TrainConfig, TrainingDataError, train
from workers.training.methods.dpo import tokenize_pairs

PAIRS = [
    {"prompt": "what is the capital of france ?", "response": "paris", "rejected": "berlin"},
    {"prompt": "what is the capital of spain ?", "response": "madrid", "rejected": "rome"},
    {"prompt": "what is the capital of italy ?", "response": "rome", "rejected": "paris"},
    {"prompt": "what is the capital of germany ?", "response": "berlin", "rejected": "madrid"},
    {"prompt": "colour of the sky ?", "response": "blue", "rejected": "green"},
    {"prompt": "colour of the grass ?", "response": "green", "rejected": "blue"},
]
DPO = {**FAST, "method": "dpo", "dpo_beta": 0.5, "learning_rate": 2e-2}


def run_dpo(model_dir, output_dir, callbacks=None, **options):  # noqa: F811
    config = TrainConfig(**{**DPO, **options})
    return train(config, model_dir=model_dir, output_dir=output_dir, train_rows=PAIRS, eval_rows=PAIRS[:4],
                 callbacks=callbacks)


def test_pairs_share_the_prompt_and_train_only_each_answer(tokenizer):  # noqa: F811
    pairs, stats = tokenize_pairs(PAIRS[:1], tokenizer, TrainConfig(**DPO))
    chosen, rejected = pairs[0].chosen, pairs[0].rejected
    trained = lambda row: [tokenizer.convert_ids_to_tokens(row.input_ids[i + 1])  # noqa: E731
                           for i, t in enumerate(row.targets) if t != -100]
    assert trained(chosen) == ["paris", "</s>"] and trained(rejected) == ["berlin", "</s>"]
    prompt_length = chosen.targets.index(next(t for t in chosen.targets if t != -100))
    assert chosen.input_ids[:prompt_length + 1] == rejected.input_ids[:prompt_length + 1]
    assert stats.used == 1


def test_rows_without_a_rejected_answer_are_skipped_and_none_usable_is_an_error(tokenizer):  # noqa: F811
    rows = [{"prompt": "q", "response": "a"}, *PAIRS[:2]]
    pairs, stats = tokenize_pairs(rows, tokenizer, TrainConfig(**DPO))
    assert len(pairs) == 2 and stats.skipped == 1 and "row 0: no rejected response" in stats.reasons
    with pytest.raises(TrainingDataError, match="preference tuning"):
        tokenize_pairs(rows[:1], tokenizer, TrainConfig(**DPO))


@pytest.mark.parametrize("change, field", [({"dpo_beta": 0}, "dpo_beta"), ({"method": "ppo"}, "method"),
                                           ({"format": "chat"}, "format")])
def test_bad_dpo_settings_name_their_field(change, field):
    with pytest.raises(ConfigError) as error:
        TrainConfig(**{**DPO, **change}).validate()
    assert error.value.field == field


def test_a_fresh_adapter_scores_log_2_and_training_learns_the_preferences(model_dir, tmp_path):  # noqa: F811
    recorder = Recorder()
    result = run_dpo(model_dir, tmp_path / "run", recorder, max_steps=30, eval_every=10)
    first_eval = recorder.evals[0][0]
    assert first_eval["step"] == 0
    # Policy == reference before any step (LoRA's B is zero): every margin is 0, the loss log 2.
    assert first_eval["eval_loss"] == pytest.approx(math.log(2), abs=1e-6)
    assert first_eval["eval_reward_margin"] == pytest.approx(0, abs=1e-6)
    assert first_eval["perplexity"] is None
    last_eval = recorder.evals[-1][0]
    assert last_eval["eval_loss"] < 0.5 * math.log(2)
    assert last_eval["eval_reward_accuracy"] == 1.0 and last_eval["eval_reward_margin"] > 0
    step = recorder.steps[-1]
    assert {"loss", "reward_margin", "reward_accuracy", "chosen_reward", "rejected_reward"} <= set(step)
    assert recorder.starts[0]["info"]["method"] == "dpo" and recorder.starts[0]["info"]["examples"] == 6
    assert result.final_step == 30 and (result.adapter_dir / "adapter_model.safetensors").exists()


def test_a_cancelled_dpo_run_resumes_to_the_same_adapter(model_dir, tmp_path):  # noqa: F811
    from workers.training import TrainCancelled

    whole = run_dpo(model_dir, tmp_path / "whole", max_steps=12, eval_at_start=False)
    with pytest.raises(TrainCancelled):
        run_dpo(model_dir, tmp_path / "parts", Recorder(stop_after=5), max_steps=12, eval_at_start=False)
    resumed = run_dpo(model_dir, tmp_path / "parts", max_steps=12, eval_at_start=False)
    assert resumed.resumed_from_step == 5
    expected, got = adapter_weights(whole.adapter_dir), adapter_weights(resumed.adapter_dir)
    assert expected.keys() == got.keys()
    assert all((expected[k] - got[k]).abs().max().item() < 1e-5 for k in expected)
