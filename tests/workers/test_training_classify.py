"""Sequence classification (a linear head over the last token, LoRA on the base) on the tiny Llama:
a keyword anywhere in the text decides the class and the classifier learns it; the metrics (accuracy,
macro-F1, the confusion matrix) flow through the same callbacks; early stopping watches macro-F1; class
weights make the rare class count; the head and the class list are saved with the adapter."""

import json
import math
import random

import pytest

from tests.workers.test_training import FAST, Recorder, adapter_weights, model_dir, tokenizer  # noqa: F401
from workers.training import ConfigError, TrainCancelled, TrainConfig, TrainingDataError, train
from workers.training.methods import classify

FILLER = ["what", "is", "the", "of", "count", "one", "two", "three", "say", "hello", "hi", "be", "brief", "q", "a"]
KEYWORDS = {"city": ["paris", "madrid", "rome", "berlin"], "colour": ["blue", "green", "sky", "grass"],
            "country": ["france", "spain", "italy", "germany"]}
CLASSES = sorted(KEYWORDS)


def keyword_rows(count: int, seed: int, weights: dict[str, int] | None = None) -> list[dict]:
    """Texts of filler words with one keyword somewhere in them; the keyword's group is the label."""
    rng = random.Random(seed)
    pool = [label for label in CLASSES for _ in range((weights or {}).get(label, 1))]
    rows = []
    for _ in range(count):
        label = rng.choice(pool)
        words = rng.choices(FILLER, k=rng.randint(1, 3))
        words.insert(rng.randint(0, len(words)), rng.choice(KEYWORDS[label]))
        rows.append({"prompt": " ".join(words), "label": label})
    return rows


# Measured on the 2-layer random Llama: eval accuracy 0.94 at step 120 (0.21 at step 0, three classes).
CLASSIFY = {**FAST, "method": "classify", "class_labels": CLASSES, "batch_size": 8, "learning_rate": 2e-2,
            "lora_r": 16, "lora_alpha": 16, "lora_dropout": 0.0, "target_modules": "all_linear"}


def run_classify(model_dir, output_dir, train_rows, eval_rows, callbacks=None, **options):  # noqa: F811
    config = TrainConfig(**{**CLASSIFY, **options})
    return train(config, model_dir=model_dir, output_dir=output_dir, train_rows=train_rows, eval_rows=eval_rows,
                 callbacks=callbacks)


@pytest.mark.parametrize("change, field", [({"class_labels": ["a"]}, "class_labels"),
                                           ({"class_labels": ["a", "a"]}, "class_labels"),
                                           ({"class_labels": "a,b"}, "class_labels"),
                                           ({"class_labels": ["a", ""]}, "class_labels"),
                                           ({"format": "chat"}, "format"),
                                           ({"sample_prompts": ["hi"]}, "sample_prompts"),
                                           ({"label_column": " "}, "label_column"),
                                           ({"label_column": 3}, "label_column"),
                                           ({"class_weights": "yes"}, "class_weights")])
def test_bad_classifier_settings_name_their_field(change, field):
    with pytest.raises(ConfigError) as error:
        TrainConfig(**{**CLASSIFY, **change}).validate()
    assert error.value.field == field


def test_rows_without_a_prompt_or_a_known_label_are_skipped_and_none_usable_is_an_error(tokenizer):  # noqa: F811
    config = TrainConfig(**CLASSIFY)
    rows = [{"prompt": "", "label": "city"}, {"prompt": "paris", "label": "planet"}, {"prompt": "rome", "label": None},
            {"prompt": "say paris", "label": "city"}]
    texts, stats = classify.prepare(rows, tokenizer, config, evaluation=False)
    assert [t.label for t in texts] == [CLASSES.index("city")] and stats.skipped == 3
    assert "row 1: label 'planet' is not one of the classes" in stats.reasons
    with pytest.raises(TrainingDataError, match="classifier"):
        classify.prepare(rows[:3], tokenizer, config, evaluation=False)


def test_class_weights_are_inverse_frequency_on_training_rows_only(tokenizer):  # noqa: F811
    rows = [{"prompt": "paris", "label": "city"}] * 6 + [{"prompt": "blue", "label": "colour"}] * 2
    config = TrainConfig(**{**CLASSIFY, "class_weights": True})
    texts, _ = classify.prepare(rows, tokenizer, config, evaluation=False)
    # n / (classes x count): city 8 / (2 x 6), colour 8 / (2 x 2); each class weighs 4 in all
    assert {t.label: t.weight for t in texts} == {CLASSES.index("city"): 8 / 12, CLASSES.index("colour"): 2.0}
    assert sum(t.weight for t in texts) == pytest.approx(len(texts))
    eval_texts, _ = classify.prepare(rows, tokenizer, config, evaluation=True)
    assert {t.weight for t in eval_texts} == {1.0}
    unweighted, _ = classify.prepare(rows, tokenizer, TrainConfig(**CLASSIFY), evaluation=False)
    assert {t.weight for t in unweighted} == {1.0}


def test_macro_f1_and_the_confusion_matrix_match_their_definitions():
    gold, predicted = [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 0, 2]
    confusion = classify.confusion_matrix(gold, predicted, 3)
    assert confusion == [[1, 1, 0], [0, 2, 0], [1, 0, 1]]
    # per class F1: 2TP / (gold + predicted) = 2/4, 4/5, 2/3 (scikit-learn's f1_score, average="macro")
    assert classify.macro_f1(confusion) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert classify.macro_f1(classify.confusion_matrix([0, 0], [0, 0], 3)) == 1.0  # absent classes are left out


@pytest.mark.slow
def test_the_classifier_learns_the_keyword_classes_and_saves_head_and_classes(model_dir, tmp_path):  # noqa: F811
    recorder = Recorder()
    result = run_classify(model_dir, tmp_path / "run", keyword_rows(320, seed=1), keyword_rows(48, seed=2),
                          recorder, max_steps=120, eval_every=40)
    evals = [point for point, _ in recorder.evals]
    assert [e["step"] for e in evals] == [0, 40, 80, 120]
    assert evals[0]["perplexity"] is None and evals[0]["eval_accuracy"] < 0.7  # the fresh head: about chance
    assert evals[-1]["eval_accuracy"] >= 0.85 and evals[-1]["eval_macro_f1"] >= 0.85
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]
    assert result.metrics["eval_macro_f1"] == evals[-1]["eval_macro_f1"] and "eval_confusion" not in result.metrics
    confusion = evals[-1]["eval_confusion"]
    assert len(confusion) == 3 and sum(map(sum, confusion)) == 48
    assert {"accuracy", "macro_f1"} <= set(recorder.steps[-1]) and "confusion" not in recorder.steps[-1]
    weights = adapter_weights(result.adapter_dir)
    assert any("classifier_head" in name and weights[name].shape == (3, 32) for name in weights)
    saved = json.loads((result.adapter_dir / "workbench_train_config.json").read_text())
    assert saved["config"]["class_labels"] == CLASSES and saved["config"]["method"] == "classify"
    # The launch estimate's count (from the weights' headers) is what the run trained: LoRA and the head.
    from workers.training import lora_trainable_parameters

    trained = recorder.starts[0]["info"]["trainable_params"]
    assert lora_trainable_parameters(model_dir, TrainConfig(**{**CLASSIFY, "max_steps": 120})) == trained
    assert trained - lora_trainable_parameters(model_dir, TrainConfig(**{**CLASSIFY, "method": "sft"})) == 3 * 32


@pytest.mark.slow
def test_early_stopping_watches_macro_f1(model_dir, tmp_path):  # noqa: F811
    # Learning rate 0: macro-F1 never improves on step 0's, so patience 2 stops at the second evaluation.
    recorder = Recorder()
    result = run_classify(model_dir, tmp_path / "run", keyword_rows(32, seed=1), keyword_rows(16, seed=2),
                          recorder, max_steps=40, eval_every=2, learning_rate=1e-12, early_stopping_patience=2)
    assert result.metrics["stopped_early"] and result.final_step == 4
    assert any("eval macro_f1 has not improved" in line for line in recorder.lines)


@pytest.mark.slow
@pytest.mark.parametrize("class_weights, rare_probability", [(False, 0.1), (True, 0.5)])
def test_class_weights_make_the_rare_class_count_as_much(model_dir, tmp_path, class_weights,  # noqa: F811
                                                         rare_probability):
    # One text, 18 times "city" and twice "country": the best the classifier can do is the prior of the
    # loss. Unweighted that is the frequencies (country 0.1); with inverse-frequency weights both classes
    # weigh the same (country 0.5). The eval loss on that text labelled "country" is -log p(country).
    rows = [{"prompt": "say hello", "label": "city"}] * 18 + [{"prompt": "say hello", "label": "country"}] * 2
    recorder = Recorder()
    run_classify(model_dir, tmp_path / "run", rows, [{"prompt": "say hello", "label": "country"}], recorder,
                 max_steps=60, eval_every=60, eval_at_start=False, class_weights=class_weights, batch_size=20)
    assert math.exp(-recorder.evals[-1][0]["eval_loss"]) == pytest.approx(rare_probability, abs=0.05)


@pytest.mark.slow
def test_a_cancelled_classifier_resumes_to_the_same_head_and_adapter(model_dir, tmp_path):  # noqa: F811
    rows, eval_rows = keyword_rows(32, seed=1), keyword_rows(8, seed=2)
    whole = run_classify(model_dir, tmp_path / "whole", rows, eval_rows, max_steps=6, eval_every=3)
    with pytest.raises(TrainCancelled):
        run_classify(model_dir, tmp_path / "parts", rows, eval_rows, Recorder(stop_after=4), max_steps=6,
                     eval_every=3, checkpoint_every=1)
    resumed = run_classify(model_dir, tmp_path / "parts", rows, eval_rows, max_steps=6, eval_every=3,
                           checkpoint_every=1)
    assert resumed.resumed_from_step == 4
    first, second = adapter_weights(whole.adapter_dir), adapter_weights(resumed.adapter_dir)
    assert first.keys() == second.keys() and any("classifier_head" in name for name in first)
    for name in first:
        assert (first[name] == second[name]).all(), name


@pytest.mark.slow
def test_the_saved_classifier_serves_the_same_predictions_in_batches(model_dir, tmp_path):  # noqa: F811
    from workers.inference.classify import NotAClassifier, classify_texts, load_classifier

    recorder = Recorder()
    eval_rows = keyword_rows(48, seed=2)
    result = run_classify(model_dir, tmp_path / "run", keyword_rows(320, seed=1), eval_rows, recorder,
                          max_steps=120, eval_every=120, eval_at_start=False)
    classifier = load_classifier(model_dir, result.adapter_dir)
    served = classify_texts(classifier, [row["prompt"] for row in eval_rows], batch_size=5)
    assert classifier.classes == CLASSES
    assert all(sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-4) for r in served)
    assert all(r["label"] == max(r["probabilities"], key=r["probabilities"].get) for r in served)
    # The same confusion matrix as training's last evaluation: serving reads texts as training did.
    served_confusion = classify.confusion_matrix([CLASSES.index(r["label"]) for r in eval_rows],
                                                 [CLASSES.index(r["label"]) for r in served], 3)
    assert served_confusion == recorder.evals[-1][0]["eval_confusion"]

    sft = train(TrainConfig(**FAST, max_steps=1), model_dir=model_dir, output_dir=tmp_path / "sft",
                train_rows=[{"prompt": "q", "response": "a"}], eval_rows=[])
    with pytest.raises(NotAClassifier):
        load_classifier(model_dir, sft.adapter_dir)


# --- multi-label: a row has a list of classes, each a yes/no of its own ------------------------------

def multi_keyword_rows(count: int, seed: int) -> list[dict]:
    """Texts of filler words with a keyword of none, one or several of the groups; their groups are the
    row's classes."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        labels = sorted(rng.sample(CLASSES, rng.choice([0, 1, 1, 2, 2, 3])))
        words = rng.choices(FILLER, k=rng.randint(1, 3))
        for label in labels:
            words.insert(rng.randint(0, len(words)), rng.choice(KEYWORDS[label]))
        rows.append({"prompt": " ".join(words), "label": labels})
    return rows


MULTI_LABEL = {**CLASSIFY, "multi_label": True}


def test_multi_label_rows_take_lists_of_known_classes_and_an_empty_list_is_a_row_of_no_class(tokenizer):  # noqa: F811
    config = TrainConfig(**MULTI_LABEL)
    rows = [{"prompt": "paris blue", "label": ["colour", "city"]}, {"prompt": "hello", "label": []},
            {"prompt": "rome", "label": "city"}, {"prompt": "mars", "label": ["city", "planet"]},
            {"prompt": "spain", "label": ["country", 3]}, {"prompt": "", "label": ["city"]}]
    texts, stats = classify.prepare(rows, tokenizer, config, evaluation=False)
    assert [t.label for t in texts] == [(CLASSES.index("city"), CLASSES.index("colour")), ()]
    assert stats.skipped == 4 and stats.reasons == [
        "row 2: label 'city' is not a list of classes", "row 3: label 'planet' is not one of the classes",
        "row 4: label 3 is not one of the classes", "row 5: no prompt"]
    with pytest.raises(TrainingDataError, match="a list of classes among colour, city|a list of classes among city"):
        classify.prepare(rows[2:], tokenizer, config, evaluation=False)
    with pytest.raises(ConfigError) as error:
        TrainConfig(**{**MULTI_LABEL, "multi_label": "yes"}).validate()
    assert error.value.field == "multi_label"


def test_multi_label_class_weights_are_each_class_negatives_over_positives(tokenizer):  # noqa: F811
    rows = ([{"prompt": "paris", "label": ["city"]}] * 6 + [{"prompt": "blue", "label": ["colour", "city"]}] * 2
            + [{"prompt": "hi", "label": []}] * 2)
    texts, _ = classify.prepare(rows, tokenizer, TrainConfig(**{**MULTI_LABEL, "class_weights": True}),
                                evaluation=False)
    # 10 rows: city on 8 (2 / 8), colour on 2 (8 / 2), country on none (1: nothing to balance)
    assert {t.positive_weights for t in texts} == {(2 / 8, 8 / 2, 1.0)}
    assert {t.weight for t in texts} == {1.0}
    eval_texts, _ = classify.prepare(rows, tokenizer, TrainConfig(**{**MULTI_LABEL, "class_weights": True}),
                                     evaluation=True)
    assert {t.positive_weights for t in eval_texts} == {None}


def test_multi_label_scores_match_their_definitions():
    gold = [{0}, {0, 1}, set(), {2}, {1}]
    predicted = [{0}, {0}, {1}, {2, 0}, set()]
    confusion = classify.multi_label_confusion(gold, predicted, 4)
    # [TP, FP, FN, TN] per class over the 5 rows; class 3 appears nowhere
    assert confusion == [[2, 1, 0, 2], [0, 1, 2, 2], [1, 0, 0, 4], [0, 0, 0, 5]]
    # per class F1 = 2TP / (2TP + FP + FN): 4/5, 0, 1; class 3 is left out (no row has it, none predicted it)
    assert classify.multi_label_macro_f1(confusion) == pytest.approx((0.8 + 0 + 1) / 3)
    summary = classify.summarize([{"loss": 1.0, "weight": 2.0, "gold": [[0], [0, 1]], "predicted": [[0], [0]],
                                   "classes": 4, "multi_label": True},
                                  {"loss": 2.0, "weight": 3.0, "gold": [[], [2], [1]], "predicted": [[1], [0, 2], []],
                                   "classes": 4, "multi_label": True}])
    assert summary == {"loss": pytest.approx(3 / 5), "accuracy": pytest.approx(1 / 5),
                       "macro_f1": pytest.approx((0.8 + 0 + 1) / 3), "confusion": confusion}


@pytest.mark.slow
def test_a_multi_label_classifier_learns_every_class_of_a_row_and_serves_the_same_predictions(model_dir,  # noqa: F811
                                                                                               tmp_path):
    from workers.inference.classify import classify_texts, load_classifier

    recorder = Recorder()
    eval_rows = multi_keyword_rows(48, seed=2)
    # Measured on the 2-layer random Llama: eval macro-F1 0.54 -> 0.86, exact-match accuracy 0.08 -> 0.65,
    # eval loss 0.93 -> 0.35 at step 160 (learning rate 2e-2 overshoots, 5e-3 is still at 0.70 by then).
    result = run_classify(model_dir, tmp_path / "run", multi_keyword_rows(320, seed=1), eval_rows, recorder,
                          multi_label=True, max_steps=160, eval_every=80, learning_rate=1e-2)
    first, last = recorder.evals[0][0], recorder.evals[-1][0]
    assert last["eval_macro_f1"] >= 0.75 and first["eval_macro_f1"] < 0.6
    assert last["eval_accuracy"] >= 0.5 and first["eval_accuracy"] < 0.2  # every class of the row right
    assert last["eval_loss"] < first["eval_loss"] / 2
    confusion = last["eval_confusion"]
    assert len(confusion) == 3 and all(len(row) == 4 and sum(row) == 48 for row in confusion)

    classifier = load_classifier(model_dir, result.adapter_dir)
    served = classify_texts(classifier, [row["prompt"] for row in eval_rows], batch_size=7)
    for answer in served:
        assert answer["labels"] == [c for c in CLASSES if answer["probabilities"][c] > 0.5]
        assert answer["confidence"] == pytest.approx(min(max(p, 1 - p) for p in answer["probabilities"].values()),
                                                     abs=1e-5)
    # The same per-class outcomes as training's last evaluation: serving reads texts as training did.
    assert classify.multi_label_confusion([{CLASSES.index(c) for c in row["label"]} for row in eval_rows],
                                          [{CLASSES.index(c) for c in answer["labels"]} for answer in served],
                                          3) == confusion
