"""The LoRA fine-tuning engine (workers/training) on a tiny random Llama: config checks, tokenization
and label masks, packing isolation, the training loop (loss, determinism, gradient accumulation),
evaluation and early stopping, cancel / resume, checkpoints and the saved adapter. Plain Python,
no database."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import pytest

from workers.training import (
    ConfigError,
    TrainCallbacks,
    TrainCancelled,
    TrainConfig,
    TrainingDataError,
    build_examples,
    check_target_modules,
    target_module_names,
    train,
)
from workers.training.checkpoint import complete_steps, discard_after
from workers.training.data import IGNORE, Example, collate, make_rows

# A word-level vocabulary that fits the tiny model's 64 embeddings, split on spaces only, so that
# the role tags and </s> are whole tokens; the template supports add_generation_prompt.
SPECIAL = ["<unk>", "<pad>", "<s>", "</s>"]
WORDS = ["<user>", "<assistant>", "<system>", "what", "is", "the", "capital", "of", "france", "spain", "italy",
         "germany", "paris", "madrid", "rome", "berlin", "?", "count", "one", "two", "three", "four", "five",
         "colour", "sky", "grass", "blue", "green", "say", "hello", "hi", "be", "brief", "answer", "q", "a"]
CHAT_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
                 "{% if add_generation_prompt %}<assistant> {% endif %}")
# Renders the last message differently from the earlier ones: not prefix-stable.
UNSTABLE_TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} "
                     "{% if loop.last %}</s> {% endif %}{% endfor %}")
ROWS = [
    {"prompt": "what is the capital of france ?", "response": "paris"},
    {"prompt": "what is the capital of spain ?", "response": "madrid"},
    {"prompt": "what is the capital of italy ?", "response": "rome"},
    {"prompt": "what is the capital of germany ?", "response": "berlin"},
    {"prompt": "count", "response": "one two three four five"},
    {"prompt": "colour of the sky ?", "response": "blue"},
    {"prompt": "colour of the grass ?", "response": "green"},
    {"prompt": "say hello", "response": "hello hello hi"},
]
# fp32 pinned: "auto" is bf16 on a GPU (bench/gpu_check.sh runs these there), whose rounding breaks the
# exact comparisons below.
FAST = {"max_seq_len": 32, "batch_size": 2, "learning_rate": 1e-2, "checkpoint_every": 1000, "precision": "fp32"}


def save_tokenizer(directory: Path, template: str | None = CHAT_TEMPLATE) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(SPECIAL + WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = template
    tokenizer.save_pretrained(directory)


def save_model(directory: Path) -> None:
    """The 2-layer Llama of test_models.save_tiny_model, initialised 10x wider: with its 0.02 init the
    frozen lm_head bounds every logit to about +-0.6, so no adapter could memorise anything."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         initializer_range=0.2, bos_token_id=2, eos_token_id=3, pad_token_id=1)
    LlamaForCausalLM(config).save_pretrained(directory)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama (vocab 64) with the word-level tokenizer above."""
    directory = tmp_path_factory.mktemp("training") / "tiny-llama"
    save_model(directory)
    save_tokenizer(directory)
    return directory


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir, local_files_only=True)


class Recorder(TrainCallbacks):
    """Keeps every callback; stops before the step after `stop_after` steps when given."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.starts, self.steps, self.evals, self.checkpoints, self.lines = [], [], [], [], []

    def on_start(self, *, total_steps, resumed_from_step, info):
        self.starts.append({"total_steps": total_steps, "resumed_from_step": resumed_from_step, "info": info})

    def on_step(self, point):
        self.steps.append(point)

    def on_eval(self, point, samples):
        self.evals.append((point, samples))

    def on_checkpoint(self, *, step, path):
        self.checkpoints.append((step, path))

    def should_stop(self):
        return self.stop_after is not None and len(self.steps) >= self.stop_after

    def log(self, message):
        self.lines.append(message)


def run(model_dir: Path, output_dir: Path, callbacks: Recorder | None = None, eval_rows=(), rows=ROWS,
        resume_up_to: int | None = None, **options):
    config = TrainConfig(**{**FAST, **options})
    return train(config, model_dir=model_dir, output_dir=output_dir, train_rows=rows, eval_rows=list(eval_rows),
                 callbacks=callbacks, resume_up_to=resume_up_to)


def adapter_weights(adapter_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(adapter_dir / "adapter_model.safetensors")


def decode_trained(tokenizer, example) -> str:
    return " ".join(tokenizer.convert_ids_to_tokens([t for t, label in zip(example.input_ids, example.labels)
                                                     if label != IGNORE]))


# --- config --------------------------------------------------------------------------------------

def test_default_config_is_valid_and_round_trips_through_a_dict():
    config = TrainConfig(sample_prompts=["hi"], target_modules=["q_proj", "v_proj"])
    config.validate()
    data = json.loads(json.dumps(config.as_dict()))
    assert TrainConfig.from_dict(data) == config
    assert data["format"] == "prompt_response" and data["lora_r"] == 16


@pytest.mark.parametrize("field, value", [
    ("batch_size", 0), ("learning_rate", -1e-4), ("learning_rate", 0), ("lora_r", 0), ("lora_dropout", 1.0),
    ("max_seq_len", 4), ("epochs", 0), ("max_steps", 0), ("grad_accum", 0), ("warmup_steps", -1),
    ("checkpoint_every", 0), ("eval_every", 0), ("format", "alpaca"), ("loss_on", "prompt"),
    ("lr_scheduler", "step"), ("precision", "fp8"), ("device", "tpu"), ("target_modules", "mlp"),
    ("target_modules", []), ("batch_size", "8"), ("packing", "yes"), ("prompt_template", "no placeholder"),
    ("quantization", "fp4"), ("quantization", 4),
])
def test_config_error_names_the_bad_field(field, value):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(**{field: value}).validate()
    assert caught.value.field == field and caught.value.message
    assert isinstance(caught.value, ValueError)


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("device", ["cpu", "mps"])
def test_a_quantized_base_on_a_device_without_cuda_is_refused_naming_quantization(device):
    with pytest.raises(ConfigError) as caught:
        TrainConfig(quantization="nf4", device=device).validate()
    assert caught.value.field == "quantization" and "CUDA" in caught.value.message


@pytest.mark.skipif(torch_cuda_available(), reason="checks the refusal on a machine without CUDA")
def test_a_quantized_base_where_auto_finds_no_gpu_is_refused_before_anything_is_written(model_dir, tmp_path):
    with pytest.raises(ConfigError) as caught:
        run(model_dir, tmp_path / "out", max_steps=1, quantization="int8")
    assert caught.value.field == "quantization" and "cpu" in caught.value.message
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.skipif(not torch_cuda_available() or importlib.util.find_spec("bitsandbytes") is None,
                    reason="QLoRA needs a CUDA GPU and bitsandbytes (bench/gpu_check.sh runs it on one)")
@pytest.mark.parametrize("quantization", ["nf4", "int8"])
def test_qlora_trains_on_a_quantized_base_and_the_loss_falls(model_dir, tmp_path, quantization):
    record = Recorder()
    result = run(model_dir, tmp_path / "out", record, max_steps=12, batch_size=8, lr_scheduler="constant",
                 learning_rate=2e-2, lora_dropout=0.0, quantization=quantization, device="cuda", precision="bf16",
                 gradient_checkpointing=True)
    losses = [p["loss"] for p in record.steps]
    assert result.final_step == 12 and losses[-1] < losses[0], losses
    assert record.starts[0]["info"]["quantization"] == quantization
    assert (result.adapter_dir / "adapter_model.safetensors").is_file()


def test_from_dict_refuses_unknown_keys_by_name():
    with pytest.raises(ConfigError) as caught:
        TrainConfig.from_dict({"batch_size": 4, "learnin_rate": 1e-3})
    assert caught.value.field == "learnin_rate"


def test_target_module_names_come_from_the_headers_and_check_custom_lists(model_dir):
    assert target_module_names(model_dir) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"}
    check_target_modules(TrainConfig(target_modules=["q_proj", "down_proj"]), model_dir)
    check_target_modules(TrainConfig(target_modules="all_linear"), model_dir)
    with pytest.raises(ConfigError) as caught:
        check_target_modules(TrainConfig(target_modules=["q_proj", "c_attn"]), model_dir)
    assert caught.value.field == "target_modules" and "c_attn" in caught.value.message


# --- examples ------------------------------------------------------------------------------------

def test_prompt_response_trains_only_the_response_and_its_end_of_turn(tokenizer):
    config = TrainConfig()
    [example] = build_examples([ROWS[0]], tokenizer, config)
    tokens = tokenizer.convert_ids_to_tokens(example.input_ids)
    assert tokens == ["<user>", "what", "is", "the", "capital", "of", "france", "?", "</s>", "<assistant>",
                      "paris", "</s>"]
    assert example.labels[:10] == [IGNORE] * 10
    assert decode_trained(tokenizer, example) == "paris </s>"
    [everything] = build_examples([ROWS[0]], tokenizer, TrainConfig(loss_on="all"))
    assert everything.labels == everything.input_ids


def test_prompt_template_and_no_chat_template_give_prompt_then_response_then_eos(tokenizer):
    plain = tokenizer.__class__.from_pretrained(tokenizer.name_or_path, local_files_only=True)
    plain.chat_template = None
    config = TrainConfig(prompt_template="q {prompt} a")
    [example] = build_examples([{"prompt": "count", "response": "one two"}], plain, config)
    assert plain.convert_ids_to_tokens(example.input_ids) == ["q", "count", "a", "one", "two", "</s>"]
    assert decode_trained(plain, example) == "one two </s>"


def test_chat_rows_train_every_assistant_turn_and_nothing_else(tokenizer):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "capital of france ?"},
                {"role": "assistant", "content": "paris"}, {"role": "user", "content": "capital of italy ?"},
                {"role": "assistant", "content": "rome"}]
    [example] = build_examples([{"messages": messages}], tokenizer, TrainConfig(format="chat"))
    assert decode_trained(tokenizer, example) == "paris </s> rome </s>"
    assert tokenizer.decode(example.input_ids) == tokenizer.apply_chat_template(messages, tokenize=False).strip()


def test_a_template_that_is_not_prefix_stable_trains_every_token(tokenizer):
    unstable = tokenizer.__class__.from_pretrained(tokenizer.name_or_path, local_files_only=True)
    unstable.chat_template = UNSTABLE_TEMPLATE
    [example] = build_examples([ROWS[0]], unstable, TrainConfig())
    assert example.labels == example.input_ids


def test_unusable_rows_are_skipped_and_none_usable_is_an_error_naming_the_rows(tokenizer):
    rows = [{"prompt": "", "response": "paris"}, {"prompt": "count"}, ROWS[0], "not a row"]
    assert len(build_examples(rows, tokenizer, TrainConfig())) == 1
    with pytest.raises(TrainingDataError, match=r"row 0: no prompt text; row 1: no response text"):
        build_examples(rows[:2], tokenizer, TrainConfig())
    chat_rows = [{"messages": [{"role": "user", "content": "hi"}]}, {"messages": "hi"}, ROWS[0]]
    with pytest.raises(TrainingDataError, match=r"row 0: no assistant turn.*row 1: no messages.*row 2: no messages"):
        build_examples(chat_rows, tokenizer, TrainConfig(format="chat"))


def test_long_examples_are_truncated_and_examples_with_nothing_left_to_learn_are_skipped(tokenizer):
    from workers.training.data import tokenize_rows

    long_response = {"prompt": "count", "response": " ".join(["one two three four five"] * 4)}
    long_prompt = {"prompt": " ".join(["what is"] * 10), "response": "paris"}
    examples, stats = tokenize_rows([long_response, long_prompt, ROWS[0]], tokenizer, TrainConfig(max_seq_len=12))
    assert [len(e.input_ids) for e in examples] == [12, 12]
    assert (stats.used, stats.skipped, stats.truncated) == (2, 1, 2)
    assert "row 1: nothing to learn" in stats.reasons[0]


# --- packing -------------------------------------------------------------------------------------

def test_packed_examples_do_not_attend_to_each_other(model_dir, tokenizer):
    """The logits of every example inside a packed row equal its logits alone."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True).eval()
    config = TrainConfig(max_seq_len=64)
    examples = build_examples(ROWS[:4], tokenizer, config)
    [row] = make_rows(examples, config, shuffle_seed=None)
    assert len(row.input_ids) == sum(len(e.input_ids) for e in examples)
    batch = collate([row], tokenizer.pad_token_id, packed=True)
    with torch.no_grad():
        packed = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits[0]
        unmasked = model(input_ids=batch["input_ids"], use_cache=False).logits[0]
        start = 0
        for example in examples:
            alone = model(input_ids=torch.tensor([example.input_ids]), use_cache=False).logits[0]
            end = start + len(example.input_ids)
            torch.testing.assert_close(packed[start:end], alone, atol=1e-4, rtol=0)
            start = end
    # The check has teeth: without the position_ids the later examples see the earlier ones.
    later = len(examples[0].input_ids)
    assert not torch.allclose(unmasked[later:], packed[later:], atol=1e-4)


def test_packed_rows_shift_targets_within_each_example(tokenizer):
    config = TrainConfig(max_seq_len=64)
    examples = build_examples(ROWS[:2], tokenizer, config)
    [row] = make_rows(examples, config, shuffle_seed=None)
    first = len(examples[0].input_ids)
    assert row.positions == list(range(first)) + list(range(len(examples[1].input_ids)))
    assert row.targets[first - 1] == IGNORE  # the first example never predicts the second one's first token
    assert row.targets[:first - 1] == examples[0].labels[1:]


def test_packing_fills_rows_best_fit_longest_first_and_keeps_the_order_inside_a_row():
    config = TrainConfig(max_seq_len=10)
    lengths = [4, 6, 2, 5, 3]  # closing a row when the next does not fit: [4] [6,2] [5,3] -> 3 rows
    examples = [Example(input_ids=[n * 10 + k for k in range(n)], labels=[n * 10 + k for k in range(n)])
                for n in lengths]
    rows = make_rows(examples, config, shuffle_seed=None)
    # 6 opens a row (4 free), 5 another (5 free), 4 fills the first, 3 then 2 fill the second.
    assert [[ids[0] // 10 for ids in _examples_in(row)] for row in rows] == [[4, 6], [2, 5, 3]]
    assert all(len(row.input_ids) == 10 for row in rows)  # no room left: no padding at all
    assert sorted(len(e) for row in rows for e in _examples_in(row)) == sorted(lengths)  # every example once
    unpacked = make_rows(examples, TrainConfig(max_seq_len=10, packing=False), shuffle_seed=None)
    assert [len(row.input_ids) for row in unpacked] == lengths  # one row per example, in order


def _examples_in(row) -> list[list[int]]:
    starts = [t for t, position in enumerate(row.positions) if position == 0] + [len(row.positions)]
    return [row.input_ids[a:b] for a, b in zip(starts, starts[1:])]


# --- the loop ------------------------------------------------------------------------------------

def test_loss_falls_on_a_memorisation_set(model_dir, tmp_path):
    record = Recorder()
    result = run(model_dir, tmp_path / "out", record, max_steps=24, batch_size=8, lr_scheduler="constant",
                 learning_rate=2e-2, lora_dropout=0.0, target_modules="all_linear")
    losses = [p["loss"] for p in record.steps]
    assert result.final_step == 24 and [p["step"] for p in record.steps] == list(range(1, 25))
    assert losses[-1] < 0.5 * losses[0], losses
    info = record.starts[0]["info"]
    assert info["examples"] == len(ROWS) and 0 < info["trainable_params"] < info["total_params"]
    assert set(record.steps[0]) == {"step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "tokens_seen",
                                    "memory_mb", "elapsed_s"}
    assert result.metrics["tokens_trained"] == record.steps[-1]["tokens_seen"] == 24 * info["tokens_per_epoch"]
    assert min(losses) <= result.metrics["train_loss"] < 0.5 * losses[0]  # smoothed, recent steps weigh most


def test_two_runs_of_the_same_config_give_the_same_losses(model_dir, tmp_path):
    first, second = Recorder(), Recorder()
    run(model_dir, tmp_path / "a", first, max_steps=4, packing=False)
    run(model_dir, tmp_path / "b", second, max_steps=4, packing=False)
    assert [p["loss"] for p in first.steps] == [p["loss"] for p in second.steps]
    assert [p["grad_norm"] for p in first.steps] == [p["grad_norm"] for p in second.steps]


def test_gradient_accumulation_equals_the_larger_batch(model_dir, tmp_path):
    """4 rows in one micro-batch and 2 micro-batches of 2: the same steps, the same loss and weights
    (the loss is the mean over all trained tokens of the step, not a mean of micro-batch means)."""
    import torch

    options = {"max_steps": 3, "lora_dropout": 0.0, "max_seq_len": 16}
    big, accumulated = Recorder(), Recorder()
    a = run(model_dir, tmp_path / "big", big, batch_size=4, grad_accum=1, **options)
    b = run(model_dir, tmp_path / "acc", accumulated, batch_size=2, grad_accum=2, **options)
    assert [p["loss"] for p in big.steps] == pytest.approx([p["loss"] for p in accumulated.steps], abs=1e-5)
    # The gradients agree to float rounding (two backward passes sum in another order); Adam divides
    # by the gradient's own scale, so after 3 steps a weight may differ by ~1e-4 of its 1e-2 step size.
    for name, weight in adapter_weights(a.adapter_dir).items():
        torch.testing.assert_close(adapter_weights(b.adapter_dir)[name], weight, atol=2e-4, rtol=0)


def test_eval_samples_and_early_stopping(model_dir, tmp_path):
    # Trained to answer "paris", evaluated on "rome" for the same prompt: eval loss soon stops improving.
    rows = [ROWS[0]] * 4
    eval_rows = [{"prompt": ROWS[0]["prompt"], "response": "rome"}]
    record = Recorder()
    result = run(model_dir, tmp_path / "out", record, rows=rows, eval_rows=eval_rows, max_steps=40, eval_every=1,
                 early_stopping_patience=2, learning_rate=5e-2, lr_scheduler="constant",
                 sample_prompts=["what is the capital of france ?"], sample_max_new_tokens=3)
    assert result.metrics["stopped_early"] and result.final_step < 40
    points = [point for point, _ in record.evals]
    assert [p["step"] for p in points] == list(range(0, result.final_step + 1))  # step 0: the base model
    assert all(math.isclose(p["perplexity"], math.exp(p["eval_loss"])) for p in points)
    assert result.metrics["best_eval_loss"] == min(p["eval_loss"] for p in points)
    assert result.metrics["eval_loss"] == points[-1]["eval_loss"] > result.metrics["best_eval_loss"]
    samples = record.evals[-1][1]
    assert [s["prompt"] for s in samples] == ["what is the capital of france ?"]
    assert samples[0]["output"].split()[0] == "paris"  # greedy, after the generation prompt, stops at </s>
    assert any("Early stopping" in line for line in record.lines)


def test_the_base_model_is_evaluated_at_step_0_unless_switched_off(model_dir, tmp_path):
    eval_rows = [ROWS[0]]
    on, off = Recorder(), Recorder()
    run(model_dir, tmp_path / "on", on, eval_rows=eval_rows, max_steps=2)
    run(model_dir, tmp_path / "off", off, eval_rows=eval_rows, max_steps=2, eval_at_start=False)
    assert [point["step"] for point, _ in on.evals] == [0, 2]
    assert [point["step"] for point, _ in off.evals] == [2]


def test_cancel_writes_a_checkpoint_and_resume_matches_the_uninterrupted_run(model_dir, tmp_path):
    import torch

    # 8 rows, batch 2, no packing: 4 steps an epoch, so the run crosses an epoch; dropout on, so the
    # RNG state must be restored too.
    options = {"max_steps": 6, "packing": False, "lora_dropout": 0.1, "checkpoint_every": 2}
    whole = run(model_dir, tmp_path / "whole", Recorder(), **options)

    cancelled = Recorder(stop_after=3)
    with pytest.raises(TrainCancelled) as caught:
        run(model_dir, tmp_path / "resumed", cancelled, **options)
    assert caught.value.step == 3
    checkpoints = tmp_path / "resumed" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-2", "step-3"]
    assert (checkpoints / "step-3" / "COMPLETE").exists()
    state = json.loads((checkpoints / "step-3" / "trainer_state.json").read_text())
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (3, 0, 3)

    resumed = Recorder()
    result = run(model_dir, tmp_path / "resumed", resumed, **options)
    assert resumed.starts[0]["resumed_from_step"] == result.resumed_from_step == 3
    assert [p["step"] for p in resumed.steps] == [4, 5, 6]
    assert result.final_step == whole.final_step == 6
    final, expected = adapter_weights(result.adapter_dir), adapter_weights(whole.adapter_dir)
    assert final.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(final[name], expected[name], atol=1e-5, rtol=0)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-4", "step-6"]  # the last two kept


def test_a_partial_checkpoint_is_ignored_and_removed(model_dir, tmp_path):
    checkpoints = tmp_path / "out" / "checkpoints"
    for partial in ("step-5", ".tmp-step-7-abc"):
        (checkpoints / partial / "adapter").mkdir(parents=True)
        (checkpoints / partial / "trainer_state.json").write_text('{"step": 5}')
    record = Recorder()
    chat = [{"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["response"]}]}
            for r in ROWS]
    result = run(model_dir, tmp_path / "out", record, rows=chat, max_steps=2, format="chat")
    assert result.resumed_from_step == 0 and [p["step"] for p in record.steps] == [1, 2]
    assert not (checkpoints / ".tmp-step-7-abc").exists() and not (checkpoints / "step-5").exists()
    assert (checkpoints / "step-2" / "COMPLETE").exists()


def test_discard_after_removes_only_the_complete_checkpoints_past_the_step_vouched_for(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    for name in ("step-10", "step-20", "step-30", "step-40", "step-50"):
        (checkpoints / name / "adapter").mkdir(parents=True)
        (checkpoints / name / "COMPLETE").write_text("")
    (checkpoints / "step-50" / "COMPLETE").unlink()  # incomplete: not a checkpoint; remove_incomplete's
    assert discard_after(checkpoints, 20) == [30, 40]
    assert complete_steps(checkpoints) == [10, 20]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-10", "step-20", "step-50"]
    assert discard_after(checkpoints, 20) == [] and discard_after(tmp_path / "none", 0) == []
    assert discard_after(checkpoints, 0) == [10, 20] and complete_steps(checkpoints) == []


class PlantingRecorder(Recorder):
    """Plants a complete checkpoint `ahead` steps past `source` at its first log line, which the engine
    writes once the model is loaded: what a run that lost its claim, sharing the folder, can publish
    while the new owner loads the model."""

    def __init__(self, source: Path, ahead: int) -> None:
        super().__init__()
        self.source, self.ahead, self.planted = source, ahead, None

    def log(self, message):
        if self.planted is None:
            step = json.loads((self.source / "trainer_state.json").read_text())["step"] + self.ahead
            self.planted = self.source.with_name(f"step-{step}")
            shutil.copytree(self.source, self.planted)
            state = json.loads((self.planted / "trainer_state.json").read_text())
            (self.planted / "trainer_state.json").write_text(json.dumps({**state, "step": step}))
        super().log(message)


@pytest.mark.parametrize("resume_up_to", [3, None])
def test_a_checkpoint_written_while_the_model_loads_is_not_resumed_from_past_the_step_vouched_for(
        model_dir, tmp_path, resume_up_to):
    options = {"max_steps": 8, "packing": False, "checkpoint_every": 1000}
    with pytest.raises(TrainCancelled):
        run(model_dir, tmp_path / "out", Recorder(stop_after=3), **options)
    checkpoints = tmp_path / "out" / "checkpoints"
    planting = PlantingRecorder(checkpoints / "step-3", ahead=2)

    result = run(model_dir, tmp_path / "out", planting, resume_up_to=resume_up_to, **options)

    assert planting.planted == checkpoints / "step-5"
    if resume_up_to is None:  # the caller vouches for nothing: the newest complete checkpoint is taken
        assert result.resumed_from_step == 5 and [p["step"] for p in planting.steps] == [6, 7, 8]
        return
    assert result.resumed_from_step == 3 and [p["step"] for p in planting.steps] == [4, 5, 6, 7, 8]
    assert ("Removed the checkpoints at steps 5: newer than step 3, the last one recorded, so written by a run "
            "whose record was refused.") in planting.lines
    assert complete_steps(checkpoints) == [3, 8]  # the planted one went before step 5 was trained again


def test_a_checkpoint_installed_from_elsewhere_resumes_the_run_and_a_bad_one_is_refused(model_dir, tmp_path):
    import shutil

    from workers.training.checkpoint import install_checkpoint

    with pytest.raises(TrainCancelled):
        run(model_dir, tmp_path / "first-machine", Recorder(stop_after=3), max_steps=6)
    written = tmp_path / "first-machine" / "checkpoints" / "step-3"
    checkpoints = tmp_path / "second-machine" / "checkpoints"

    def partial(directory):  # an upload cut short: no COMPLETE
        shutil.copytree(written / "adapter", directory / "adapter")

    def copied(directory):
        shutil.copytree(written, directory, dirs_exist_ok=True)

    def failing(directory):
        copied(directory)
        raise OSError("the connection dropped")

    with pytest.raises(ValueError, match="not a complete checkpoint"):
        install_checkpoint(checkpoints, 3, partial)
    with pytest.raises(ValueError, match="another step's"):
        install_checkpoint(checkpoints, 5, copied)

    def listed_state(directory):
        copied(directory)
        (directory / "trainer_state.json").write_text("[3]")

    with pytest.raises(ValueError, match="another step's"):
        install_checkpoint(checkpoints, 3, listed_state)
    with pytest.raises(OSError, match="dropped"):
        install_checkpoint(checkpoints, 3, failing)
    assert list(checkpoints.iterdir()) == []  # nothing half-written left behind

    assert install_checkpoint(checkpoints, 3, copied) == checkpoints / "step-3"
    assert complete_steps(checkpoints) == [3]
    resumed = Recorder()
    result = run(model_dir, tmp_path / "second-machine", resumed, max_steps=6)
    assert result.resumed_from_step == 3 and [p["step"] for p in resumed.steps] == [4, 5, 6]


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft 0.21 on transformers 5
def test_the_adapter_loads_with_peft_and_carries_the_config(model_dir, tmp_path):
    import torch
    from peft import PeftModel

    from workers.models import load_for_inference

    result = run(model_dir, tmp_path / "out", max_steps=3, target_modules=["q_proj", "v_proj"])
    saved = json.loads((result.adapter_dir / "workbench_train_config.json").read_text())
    assert TrainConfig.from_dict(saved["config"]).target_modules == ["q_proj", "v_proj"]
    assert json.loads((result.adapter_dir / "adapter_config.json").read_text())["target_modules"] in (
        ["q_proj", "v_proj"], ["v_proj", "q_proj"])

    base, _ = load_for_inference(model_dir)
    ids = torch.tensor([[4, 7, 8, 9]])
    with torch.no_grad():
        before = base(input_ids=ids).logits
        model = PeftModel.from_pretrained(base, result.adapter_dir)
        after = model(input_ids=ids).logits
    assert not torch.allclose(before, after)  # the trained adapter changes the output


def test_train_refuses_target_modules_the_model_lacks_and_rows_it_cannot_use(model_dir, tmp_path):
    with pytest.raises(ConfigError) as caught:
        run(model_dir, tmp_path / "a", max_steps=1, target_modules=["c_attn"])
    assert caught.value.field == "target_modules"
    with pytest.raises(TrainingDataError, match="row 0"):
        run(model_dir, tmp_path / "b", max_steps=1, rows=[{"messages": []}])


def test_a_diverging_loss_stops_the_run_before_the_adapter_is_stepped(model_dir, tmp_path, monkeypatch):
    import torch

    from workers.training.methods import sft

    real = sft.summed_loss
    monkeypatch.setattr(sft, "summed_loss", lambda run, batch: real(run, batch) * (
        torch.tensor(float("nan")) if run.state.step == 2 else 1))
    record = Recorder()
    with pytest.raises(FloatingPointError, match="step 3"):
        run(model_dir, tmp_path / "out", record, max_steps=4, checkpoint_every=1)
    assert [p["step"] for p in record.steps] == [1, 2]
    last_good = adapter_weights(tmp_path / "out" / "checkpoints" / "step-2" / "adapter")
    assert all(torch.isfinite(weight).all() for weight in last_good.values())


def test_logits_at_trained_positions_only_give_the_same_training(model_dir, tmp_path, monkeypatch):
    """The output layer runs only where a token is trained; losses and weights are those of the
    full forward (which the engine keeps for architectures that change logits after the layer)."""
    import torch

    from workers.training import loop

    options = {"max_steps": 3, "lora_dropout": 0.0, "max_seq_len": 16, "batch_size": 4}
    fast, full = Recorder(), Recorder()
    agreed = []
    check = loop._logits_path_agrees
    monkeypatch.setattr(loop, "_logits_path_agrees", lambda r: agreed.append(check(r)) or agreed[-1])
    a = run(model_dir, tmp_path / "fast", fast, **options)
    assert agreed == [True]  # the Llama's output layer is all there is after the decoder
    monkeypatch.setattr(loop, "_logits_path_agrees", lambda r: False)
    b = run(model_dir, tmp_path / "full", full, **options)
    assert [p["loss"] for p in fast.steps] == pytest.approx([p["loss"] for p in full.steps], abs=1e-5)
    for name, weight in adapter_weights(a.adapter_dir).items():
        torch.testing.assert_close(adapter_weights(b.adapter_dir)[name], weight, atol=2e-4, rtol=0)


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft 0.21 on transformers 5
@pytest.mark.parametrize("targets", ["attention", "all_linear", ["q_proj", "v_proj"], ["down_proj"]])
def test_the_trainable_parameters_counted_from_the_headers_are_what_peft_trains(model_dir, targets):
    from workers.models import load_for_inference
    from workers.training import lora_trainable_parameters
    from workers.training.lora import add_lora

    config = TrainConfig(lora_r=8, target_modules=targets)
    model, _ = load_for_inference(model_dir)
    trainable, _ = add_lora(model, config).get_nb_trainable_parameters()
    assert lora_trainable_parameters(model_dir, config) == trainable
