"""The demo model (SmolLM2-135M-Instruct) fine-tuned for real on a small dataset of one
distinctive style: its eval loss on held-out rows of that style falls by at least 20 %.
Slow: a conversion (cached per session) and about a minute of CPU training."""

from pathlib import Path

import pytest

from workers.training import TrainCallbacks, TrainConfig, train

pytestmark = pytest.mark.slow

WORDS = ["apple", "river", "candle", "garden", "silver", "window", "market", "pencil", "forest", "basket", "rocket",
         "mirror", "tunnel", "jacket", "lemon", "planet", "bridge", "castle", "dragon", "violin", "harbor", "meadow",
         "copper", "ticket", "anchor", "button", "saddle", "falcon", "marble", "velvet", "puzzle", "signal",
         "orange", "kitten", "ladder", "magnet", "needle", "pepper", "rabbit", "tomato", "wallet", "zipper",
         "bottle", "carpet", "dinner", "engine", "finger", "guitar", "hammer", "island", "jungle", "kettle",
         "lizard", "monkey", "napkin", "oyster", "parrot", "quartz", "ribbon", "sponge"]


def spelled(word: str) -> dict:
    """The style to learn: spell the word in capitals with dashes."""
    return {"prompt": f"Spell the word '{word}' with dashes.", "response": "-".join(word.upper())}


class EvalRecorder(TrainCallbacks):
    def __init__(self) -> None:
        self.evals: list[dict] = []

    def on_eval(self, point: dict, samples: list[dict]) -> None:
        self.evals.append(point)


def test_fine_tuning_the_demo_model_lowers_the_eval_loss_on_held_out_rows_by_20_percent(demo_model_dir: Path,
                                                                                        tmp_path):
    train_rows = [spelled(w) for w in WORDS[:48]]
    held_out = [spelled(w) for w in WORDS[48:]]
    config = TrainConfig(max_steps=24, batch_size=8, max_seq_len=64, learning_rate=1e-3, lr_scheduler="constant",
                         lora_r=16, lora_alpha=32, eval_every=12, seed=3, precision="fp32",
                         sample_prompts=["Spell the word 'doctor' with dashes."], sample_max_new_tokens=12)
    recorder = EvalRecorder()
    result = train(config, model_dir=demo_model_dir, output_dir=tmp_path / "out", train_rows=train_rows,
                   eval_rows=held_out, callbacks=recorder)
    base, tuned = recorder.evals[0], recorder.evals[-1]
    assert base["step"] == 0 and tuned["step"] == result.final_step == 24
    assert tuned["eval_loss"] <= 0.8 * base["eval_loss"], (base, tuned)
