"""The inference engine (workers/inference) on a tiny Llama built here: batched greedy generation
identical to one prompt at a time, streaming, stop sequences, sampling, input validation, the
model cache (LRU, adapters) and the micro-batcher. Plain Python, no database. The demo model's
test is marked slow."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.workers.test_models import CHAT_TEMPLATE, WORDS, save_tiny_model
from workers.inference import (
    Batcher,
    GenerationResult,
    InferenceInputError,
    ModelCache,
    SamplingParams,
    generate_batch,
    render_prompt,
)
from workers.inference import batcher as batcher_module
from workers.inference.cache import default_dtype, model_size_bytes, resolve_device
from workers.inference.decode import DecodeBatch
from workers.inference.decode import Sequence as DecodeSequence
from workers.inference.detokenize import IncrementalText
from workers.inference.generate import shared_prefix_length
from workers.inference.prompts import encode_prompt
from workers.models import ModelFormatError, ModelSafetyError, load_for_inference

EOS = 3
PROMPTS = ["what is the capital of france ?", "paris", "w20 w21 w22 w23 w24 w25 w26 w27 w28 w29 w30", "the",
           "w40 w41 w42 w43 w44", "? ? ? ?"]
GREEDY = SamplingParams(max_new_tokens=24)


# --- the tiny model ---------------------------------------------------------------------------------

def save_tiny_chat_model(directory: Path) -> None:
    """save_tiny_model's Llama (vocab 64, context 256) with a word-level tokenizer that has a word
    for each of the 64 ids (any generated id decodes to text), split on whitespace."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    save_tiny_model(directory, tokenizer=False)
    words = ["<unk>", "<pad>", "<s>", "</s>", *WORDS]
    words += [f"w{i}" for i in range(len(words), 64)]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<s>", eos_token="</s>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("inference") / "tiny"
    save_tiny_chat_model(directory)
    return directory


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_for_inference(tiny_dir)


def solo(tiny, prompt: str, params: SamplingParams = GREEDY) -> GenerationResult:
    model, tokenizer = tiny
    return generate_batch(model, tokenizer, [prompt], params)[0]


# --- batched greedy == one at a time --------------------------------------------------------------

def test_greedy_batch_is_identical_to_one_at_a_time(tiny):
    model, tokenizer = tiny
    results = generate_batch(model, tokenizer, PROMPTS, GREEDY)
    assert {r.finish_reason for r in results} == {"stop", "length"}  # rows that end early leave the batch
    for prompt, result in zip(PROMPTS, results):
        alone = solo(tiny, prompt)
        assert result.token_ids == alone.token_ids
        assert (result.text, result.finish_reason) == (alone.text, alone.finish_reason)
        assert result.prompt_tokens == len(encode_prompt(tokenizer, prompt))
        assert result.completion_tokens == len(result.token_ids) > 0
        assert 0 < result.time_to_first_token_s <= result.total_s


def test_one_at_a_time_matches_transformers_generate(tiny):
    import torch

    model, tokenizer = tiny
    for prompt in PROMPTS:
        ids = encode_prompt(tokenizer, prompt)
        with torch.no_grad():
            output = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                    max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        assert solo(tiny, prompt).token_ids == output[0, len(ids):].tolist()


def test_shared_prompt_prefix_runs_once_with_the_same_tokens(tiny):
    model, tokenizer = tiny
    prefix = "what is the capital of france ? paris the w50 w51 "
    prompts = [prefix + suffix for suffix in ("?", "w20 w21 w22", "the capital", "w40 w41 w42 w43 w44 w45")]
    assert shared_prefix_length([encode_prompt(tokenizer, p) for p in prompts]) == 11
    shared = generate_batch(model, tokenizer, prompts, GREEDY)
    padded = generate_batch(model, tokenizer, prompts, GREEDY, share_prefix=False)
    for prompt, a, b in zip(prompts, shared, padded):
        assert a.token_ids == b.token_ids == solo(tiny, prompt).token_ids


def test_shared_prefix_leaves_each_prompt_a_token():
    assert shared_prefix_length([list(range(10)), list(range(10))]) == 9
    assert shared_prefix_length([list(range(12)), list(range(5)) + [99] * 7]) == 0  # below the minimum
    assert shared_prefix_length([list(range(12))]) == 0


# --- streaming, stop sequences, lengths ----------------------------------------------------------

def test_streamed_deltas_concatenate_to_the_final_text(tiny):
    model, tokenizer = tiny
    params = [GREEDY, SamplingParams(max_new_tokens=20, temperature=0.8, seed=3), GREEDY,
              SamplingParams(max_new_tokens=24, stop=("w20",)), GREEDY, SamplingParams(max_new_tokens=3)]
    deltas: dict[int, list[str]] = {}
    results = generate_batch(model, tokenizer, PROMPTS, params,
                             on_token=lambda i, delta: deltas.setdefault(i, []).append(delta))
    for i, result in enumerate(results):
        assert "".join(deltas[i]) == result.text
        assert all(deltas[i]) and len(deltas[i]) > 1
        if params[i].stop == ():
            kept = [t for t in result.token_ids if t != EOS]
            assert result.text == tokenizer.decode(kept, skip_special_tokens=True)


def byte_tokenizer():
    """A byte-level tokenizer with one token per byte: a multi-byte character spans tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    backend = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def stream(tokenizer, text: str, stop: tuple[str, ...] = ()) -> tuple[list[str], IncrementalText]:
    incremental = IncrementalText(tokenizer, stop)
    deltas = []
    for token in tokenizer(text)["input_ids"]:
        deltas.append(incremental.push(token))
        if incremental.stopped:
            break
    deltas.append(incremental.finish())
    return deltas, incremental


def test_partial_multibyte_characters_are_held_back():
    tokenizer = byte_tokenizer()
    text = "héllo 😀 wörld €"
    assert len(tokenizer(text)["input_ids"]) == len(text.encode())
    deltas, incremental = stream(tokenizer, text)
    assert "".join(deltas) == incremental.text == text
    assert not any("\ufffd" in d for d in deltas)
    assert "" in deltas  # the bytes of 😀 before its last one released nothing


def test_stop_sequence_text_is_never_streamed():
    tokenizer = byte_tokenizer()
    deltas, incremental = stream(tokenizer, "héllo 😀 wörld", stop=("lo 😀", "xyz"))
    assert incremental.stopped and incremental.text == "hél" == "".join(deltas)
    deltas, incremental = stream(tokenizer, "héllo 😀 wörld", stop=("lo x",))  # a false start is released
    assert not incremental.stopped and "".join(deltas) == "héllo 😀 wörld"


def test_stop_sequence_cuts_the_text(tiny):
    model, tokenizer = tiny
    base = solo(tiny, PROMPTS[0])
    word = base.text.split()[4]
    cut = base.text[:base.text.index(word)]
    results = generate_batch(model, tokenizer, PROMPTS[:3],
                             [SamplingParams(max_new_tokens=24, stop=("zzz", word)), GREEDY, GREEDY])
    stopped = results[0]
    assert stopped.text == cut and stopped.finish_reason == "stop"
    assert stopped.completion_tokens < base.completion_tokens
    assert stopped.token_ids == base.token_ids[:stopped.completion_tokens]
    assert results[1].token_ids == solo(tiny, PROMPTS[1]).token_ids  # the other rows go on


def test_max_new_tokens_gives_length(tiny):
    base = solo(tiny, PROMPTS[0])
    short = solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=5))
    assert (short.finish_reason, short.completion_tokens) == ("length", 5)
    assert short.token_ids == base.token_ids[:5]
    assert base.text.startswith(short.text)


def test_a_cancelled_row_ends_after_its_next_token_and_the_others_go_on(tiny):
    model, tokenizer = tiny
    params = SamplingParams(max_new_tokens=20)
    counts = {0: 0}

    def is_cancelled(index):
        if index == 0:
            counts[0] += 1
            return counts[0] >= 3
        return False

    results = generate_batch(model, tokenizer, [PROMPTS[0], PROMPTS[1]], params, is_cancelled=is_cancelled)
    full = solo(tiny, PROMPTS[0], params)
    assert full.completion_tokens > 3  # uncancelled, it goes further
    assert (results[0].finish_reason, results[0].completion_tokens) == ("cancelled", 3)
    assert results[0].token_ids == full.token_ids[:3]
    assert results[1].token_ids == solo(tiny, PROMPTS[1], params).token_ids


def test_end_of_sequence_gives_stop(tiny):
    result = solo(tiny, "the")
    assert result.finish_reason == "stop" and result.token_ids[-1] == EOS
    assert result.completion_tokens < GREEDY.max_new_tokens and "</s>" not in result.text


# --- sampling ----------------------------------------------------------------------------------------

def test_seeded_sampling_is_reproducible_alone_and_in_a_batch(tiny):
    model, tokenizer = tiny
    seeded = SamplingParams(max_new_tokens=16, temperature=1.0, seed=7)
    first = solo(tiny, PROMPTS[0], seeded)
    assert solo(tiny, PROMPTS[0], seeded).token_ids == first.token_ids
    batch = generate_batch(model, tokenizer, [PROMPTS[1], PROMPTS[0], PROMPTS[0]],
                           [SamplingParams(max_new_tokens=16, temperature=1.0, seed=1), seeded, GREEDY])
    assert batch[1].token_ids == first.token_ids  # its own generator: the neighbours do not matter
    assert batch[2].token_ids == solo(tiny, PROMPTS[0]).token_ids[:len(batch[2].token_ids)]
    other = solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=16, temperature=1.0, seed=8))
    assert other.token_ids != first.token_ids
    assert first.token_ids != solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=16)).token_ids


def test_top_k_one_and_a_tiny_top_p_are_greedy(tiny):
    greedy = solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=12)).token_ids
    for params in (SamplingParams(max_new_tokens=12, temperature=2.0, top_k=1, seed=5),
                   SamplingParams(max_new_tokens=12, temperature=2.0, top_p=1e-6, seed=5)):
        assert solo(tiny, PROMPTS[0], params).token_ids == greedy
    unseeded = [solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=12, temperature=1.5)).token_ids
                for _ in range(2)]
    assert unseeded[0] != unseeded[1]


# --- penalties and logprobs -------------------------------------------------------------------------

def reference_steps(tiny, prompt: str, params: SamplingParams, steps: int) -> tuple[list[int], list]:
    """Greedy decoding by hand, the whole sequence through the model at each step, with OpenAI's
    penalties on the tokens generated so far: (tokens, log-softmax of the raw logits at each step)."""
    import torch

    model, tokenizer = tiny
    ids, generated, raw = encode_prompt(tokenizer, prompt), [], []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(torch.tensor([ids + generated])).logits[0, -1].float()
        raw.append(torch.log_softmax(logits, dim=-1))
        counts = torch.bincount(torch.tensor(generated, dtype=torch.long), minlength=logits.shape[-1]).float()
        scores = logits - counts * params.frequency_penalty - (counts > 0).float() * params.presence_penalty
        generated.append(int(scores.argmax()))
        if generated[-1] == EOS:
            break
    return generated, raw


def test_penalties_change_greedy_decoding_as_openai_defines_them(tiny):
    model, tokenizer = tiny
    penalized = [SamplingParams(max_new_tokens=16, frequency_penalty=2.0),
                 SamplingParams(max_new_tokens=16, presence_penalty=1.5, frequency_penalty=-0.5)]
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[0]]
    batch = generate_batch(model, tokenizer, prompts, [penalized[0], GREEDY, penalized[1]])
    for result, prompt, params in zip(batch, prompts, [penalized[0], GREEDY, penalized[1]]):
        expected, _ = reference_steps(tiny, prompt, params, params.max_new_tokens)
        assert result.token_ids == expected
        assert solo(tiny, prompt, params).token_ids == expected  # alone or in a batch
    # the greedy neighbour is untouched, and a penalty does change what a greedy row says
    assert batch[1].token_ids == solo(tiny, PROMPTS[2]).token_ids
    plain = solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=16)).token_ids
    assert batch[0].token_ids != plain and len(set(batch[0].token_ids)) > len(set(plain))
    # zero penalties are no penalties: token for token what the plain parameters give
    zero = SamplingParams(max_new_tokens=16, presence_penalty=0.0, frequency_penalty=0.0)
    assert solo(tiny, PROMPTS[0], zero).token_ids == plain
    sampled = SamplingParams(max_new_tokens=16, temperature=1.0, seed=4, frequency_penalty=2.0)
    assert solo(tiny, PROMPTS[0], sampled).token_ids == solo(tiny, PROMPTS[0], sampled).token_ids


def test_logprobs_are_the_models_own_and_stream_with_their_text(tiny):
    import math

    model, tokenizer = tiny
    asked = SamplingParams(max_new_tokens=12, logprobs=True, top_logprobs=3)
    streamed: dict[int, list] = {}

    def on_token(i, delta, *entries):
        streamed.setdefault(i, []).append((delta, *entries))

    results = generate_batch(model, tokenizer, [PROMPTS[0], PROMPTS[1]], [asked, GREEDY], on_token=on_token)
    result = results[0]
    expected, raw = reference_steps(tiny, PROMPTS[0], asked, 12)
    assert result.token_ids == expected == solo(tiny, PROMPTS[0]).token_ids[:12]  # logprobs change nothing
    kept = [t for t in result.token_ids if t != EOS]
    assert len(result.logprobs) == len(kept)
    for token, entry, logprobs in zip(kept, result.logprobs, raw):
        assert entry["token"] == tokenizer.decode([token]) and entry["bytes"] == list(entry["token"].encode())
        assert math.isclose(entry["logprob"], float(logprobs[token]), abs_tol=1e-4)
        top = entry["top_logprobs"]
        assert len(top) == 3 and [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert top[0]["token"] == entry["token"]  # greedy: the chosen token is the likeliest
    assert "".join(d for d, _ in streamed[0]) == result.text
    assert [e for _, entries in streamed[0] for e in entries] == result.logprobs
    assert results[1].logprobs is None and all(len(call) == 1 for call in streamed[1])  # not asked: text only
    just_logprobs = solo(tiny, PROMPTS[0], SamplingParams(max_new_tokens=12, logprobs=True))
    assert all(entry["top_logprobs"] == [] for entry in just_logprobs.logprobs)


# --- validation --------------------------------------------------------------------------------------

@pytest.mark.parametrize("field, kwargs", [
    ("max_new_tokens", {"max_new_tokens": 0}),
    ("max_new_tokens", {"max_new_tokens": 8193}),
    ("max_new_tokens", {"max_new_tokens": 2.5}),
    ("max_new_tokens", {"max_new_tokens": True}),
    ("temperature", {"temperature": -0.1}),
    ("temperature", {"temperature": 5.5}),
    ("temperature", {"temperature": float("nan")}),
    ("temperature", {"temperature": "hot"}),
    ("top_p", {"top_p": 0.0}),
    ("top_p", {"top_p": 1.01}),
    ("top_k", {"top_k": -1}),
    ("top_k", {"top_k": 1.5}),
    ("stop", {"stop": tuple(f"s{i}" for i in range(9))}),
    ("stop", {"stop": ("x" * 201,)}),
    ("stop", {"stop": ("",)}),
    ("stop", {"stop": (3,)}),
    ("seed", {"seed": -1}),
    ("seed", {"seed": "7"}),
    ("presence_penalty", {"presence_penalty": 2.5}),
    ("frequency_penalty", {"frequency_penalty": -2.01}),
    ("frequency_penalty", {"frequency_penalty": "high"}),
    ("logprobs", {"logprobs": 1}),
    ("top_logprobs", {"logprobs": True, "top_logprobs": 21}),
    ("top_logprobs", {"logprobs": True, "top_logprobs": 1.5}),
    ("top_logprobs", {"top_logprobs": 2}),
])
def test_bad_sampling_params_name_the_field(field, kwargs):
    with pytest.raises(InferenceInputError) as caught:
        SamplingParams(**kwargs).validate()
    assert caught.value.field == field


def test_good_sampling_params_pass():
    SamplingParams().validate()
    SamplingParams(max_new_tokens=8192, temperature=5, top_p=1, top_k=50, stop=["a"] * 8, seed=0).validate()
    assert SamplingParams(stop="END").stop == ("END",) and SamplingParams(stop=["a", "b"]).stop == ("a", "b")


def test_context_limits():
    SamplingParams(max_new_tokens=100).validate(context_length=256, prompt_tokens=156)
    with pytest.raises(InferenceInputError) as caught:
        SamplingParams(max_new_tokens=100).validate(context_length=256, prompt_tokens=157)
    assert caught.value.field == "prompt"
    with pytest.raises(InferenceInputError) as caught:
        SamplingParams(max_new_tokens=256).validate(context_length=256)
    assert caught.value.field == "max_new_tokens"


def test_a_prompt_too_long_is_refused_before_the_model_runs(tiny):
    _, tokenizer = tiny

    class Untouchable:
        config = SimpleNamespace(max_position_embeddings=256)

        def __getattr__(self, name):
            raise AssertionError(f"the model was used ({name})")

        def __call__(self, *args, **kwargs):
            raise AssertionError("the model ran")

    long_prompt = " ".join(["paris"] * 250)
    with pytest.raises(InferenceInputError) as caught:
        generate_batch(Untouchable(), tokenizer, [long_prompt], SamplingParams(max_new_tokens=10))
    assert caught.value.field == "prompt" and caught.value.index is None
    with pytest.raises(InferenceInputError) as caught:
        generate_batch(Untouchable(), tokenizer, ["paris", long_prompt], SamplingParams(max_new_tokens=10))
    assert (caught.value.field, caught.value.index) == ("prompt", 1) and "request 1" in str(caught.value)
    with pytest.raises(InferenceInputError) as caught:
        generate_batch(Untouchable(), tokenizer, ["paris", ""], GREEDY)
    assert (caught.value.field, caught.value.index) == ("prompt", 1)
    with pytest.raises(InferenceInputError) as caught:
        generate_batch(Untouchable(), tokenizer, ["paris", "the"], [GREEDY, SamplingParams(max_new_tokens=10, top_p=0)])
    assert (caught.value.field, caught.value.index) == ("top_p", 1)
    with pytest.raises(InferenceInputError) as caught:
        generate_batch(Untouchable(), tokenizer, ["paris", "the"], [GREEDY])
    assert caught.value.field == "params"
    assert generate_batch(Untouchable(), tokenizer, [], GREEDY) == []


def test_render_prompt(tiny):
    _, tokenizer = tiny
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is paris ?"}]
    assert render_prompt(tokenizer, messages=messages) == "<system>be brief</s><user>what is paris ?</s>"
    assert render_prompt(tokenizer, prompt="paris the") == "paris the"
    for kwargs in ({}, {"messages": messages, "prompt": "x"}):
        with pytest.raises(InferenceInputError):
            render_prompt(tokenizer, **kwargs)


@pytest.mark.parametrize("messages, field", [
    ([], "messages"),
    ("hello", "messages"),
    ([{"role": "user", "content": "hi"}, "hi"], "messages[1]"),
    ([{"role": "user", "content": "hi"}, {"role": "robot", "content": "hi"}], "messages[1].role"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}, {"role": "user"}],
     "messages[2].content"),
    ([{"role": "user", "content": 5}], "messages[0].content"),
    ([{"role": "user", "content": "hi", "tool_calls": []}], "messages[0]"),
])
def test_bad_messages_name_the_index(tiny, messages, field):
    with pytest.raises(InferenceInputError) as caught:
        render_prompt(tiny[1], messages=messages)
    assert caught.value.field == field


def test_a_model_without_chat_template_refuses_messages(tiny):
    tokenizer = SimpleNamespace(chat_template=None)
    with pytest.raises(InferenceInputError) as caught:
        render_prompt(tokenizer, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.field == "messages"


# --- the model cache -------------------------------------------------------------------------------

class CountingLoader:
    def __init__(self, delay: float = 0.0):
        self.calls: list[tuple] = []
        self.delay = delay
        self._lock = threading.Lock()

    def __call__(self, path, device="cpu", dtype=None):
        with self._lock:
            self.calls.append((Path(path).name, device, dtype))
        time.sleep(self.delay)
        return load_for_inference(path, device=device, dtype=dtype)


def test_model_cache_evicts_the_least_recently_used(tiny_dir, tiny):
    size = model_size_bytes(tiny[0])
    assert size == sum(p.numel() for p in tiny[0].parameters()) * 4 + sum(
        b.numel() * b.element_size() for b in tiny[0].buffers())
    loader = CountingLoader()
    cache = ModelCache(int(size * 2.5), loader=loader)
    a, _ = cache.get("a", tiny_dir, device="cpu")
    cache.get("b", tiny_dir, device="cpu")
    assert cache.get("a", tiny_dir, device="cpu")[0] is a and len(loader.calls) == 2  # a is now the most recent
    cache.get("c", tiny_dir, device="cpu")  # over budget: b goes
    assert [k[0] for k in cache.keys()] == ["a", "c"] and len(loader.calls) == 3
    assert cache.total_bytes == 2 * size
    assert cache.get("a", tiny_dir, device="cpu")[0] is a and len(loader.calls) == 3
    cache.get("b", tiny_dir, device="cpu")  # loaded again; c is now the least recent
    assert [k[0] for k in cache.keys()] == ["a", "b"] and len(loader.calls) == 4
    small = ModelCache(size // 2, loader=loader)  # one model over the budget stays, alone
    small.get("a", tiny_dir, device="cpu")
    small.get("b", tiny_dir, device="cpu")
    assert [k[0] for k in small.keys()] == ["b"]


def test_model_cache_loads_once_for_concurrent_gets(tiny_dir):
    loader = CountingLoader(delay=0.3)
    cache = ModelCache(10**9, loader=loader)
    models, barrier = [], threading.Barrier(4)

    def get():
        barrier.wait()
        models.append(cache.get("m", tiny_dir)[0])

    threads = [threading.Thread(target=get) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loader.calls) == 1 and len({id(m) for m in models}) == 1
    assert loader.calls[0][1:] == (resolve_device("auto"), default_dtype(resolve_device("auto")))


def test_device_and_dtype_defaults(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and default_dtype("cpu") == "fp32"
    assert resolve_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == "mps" and default_dtype("mps") == "fp32"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_device("auto") == "cuda" and default_dtype("cuda") == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert default_dtype("cuda:0") == "fp32"


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir, tmp_path_factory) -> Path:
    """A LoRA adapter with non-zero weights (B initialised at random, not zero) for the tiny model."""
    from peft import LoraConfig, get_peft_model

    model, _ = load_for_inference(tiny_dir)
    config = LoraConfig(r=8, lora_alpha=32, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    directory = tmp_path_factory.mktemp("adapter") / "lora"
    peft_model.save_pretrained(directory)
    assert (directory / "adapter_model.safetensors").is_file()
    return directory


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # inside peft
def test_model_cache_loads_an_adapter_beside_its_shared_base(tiny_dir, adapter_dir):
    from peft import PeftModel

    from workers.inference.adapters import AdapterModel

    loader = CountingLoader()
    cache = ModelCache(10**9, loader=loader)
    base, tokenizer = cache.get("tiny", tiny_dir, device="cpu")
    base_bytes = model_size_bytes(base)
    before = generate_batch(base, tokenizer, PROMPTS, GREEDY)
    tuned, tuned_tokenizer = cache.get("tiny", tiny_dir, adapter_path=adapter_dir, device="cpu")
    assert isinstance(tuned, AdapterModel) and tuned.get_base_model() is base and len(loader.calls) == 1
    assert cache.get("tiny", tiny_dir, adapter_path=adapter_dir, device="cpu")[0] is tuned
    assert len(cache.keys()) == 1 and base_bytes < cache.total_bytes < 2 * base_bytes
    after = generate_batch(tuned, tuned_tokenizer, PROMPTS, GREEDY)
    assert [r.token_ids for r in after] != [r.token_ids for r in before]
    # the same answers as the adapter loaded the ordinary way, on a base of its own
    own, _ = load_for_inference(tiny_dir)
    reference = PeftModel.from_pretrained(own, str(adapter_dir)).eval()
    assert [r.token_ids for r in after] == [generate_batch(reference, tokenizer, [p], GREEDY)[0].token_ids
                                            for p in PROMPTS]
    # the base's rows, through its AdapterSet, still generate what they did
    served = cache.load("tiny", tiny_dir, device="cpu")
    batch = DecodeBatch(base, tokenizer, max_rows=len(PROMPTS), adapters=served.adapters)
    rows = [DecodeSequence(encode_prompt(tokenizer, p), GREEDY, time.perf_counter()) for p in PROMPTS]
    batch.admit(rows)
    while batch.rows:
        batch.step()
    assert [s.result.token_ids for s in rows] == [r.token_ids for r in before]


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_model_cache_refuses_a_pickle_adapter(tiny_dir, adapter_dir, tmp_path):
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "adapter_config.json").write_bytes((adapter_dir / "adapter_config.json").read_bytes())
    (pickled / "adapter_model.bin").write_bytes(b"\x80\x04 not to be unpickled")
    loader = CountingLoader()
    cache = ModelCache(10**9, loader=loader)
    for directory in (pickled, tmp_path / "missing"):
        with pytest.raises(ModelFormatError):
            cache.get("x", tiny_dir, adapter_path=directory, device="cpu")
    assert loader.calls == [] and cache.keys() == []


# --- the micro-batcher ------------------------------------------------------------------------------

@pytest.fixture
def counted_batches(monkeypatch):
    """The prefills the batcher runs (requests admitted together into a model's running batch):
    (model, number of requests) each."""
    calls = []

    class CountingBatch(batcher_module.DecodeBatch):
        def admit(self, sequences):
            calls.append((self.model, len(sequences)))
            return super().admit(sequences)

    monkeypatch.setattr(batcher_module, "DecodeBatch", CountingBatch)
    return calls


def submit_concurrently(batcher: Batcher, jobs: list[tuple]) -> list:
    barrier = threading.Barrier(len(jobs))
    futures = [None] * len(jobs)

    def submit(i, args, kwargs):
        barrier.wait()
        futures[i] = batcher.submit(*args, **kwargs)

    threads = [threading.Thread(target=submit, args=(i, *job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [future.result(timeout=60) for future in futures]


def test_batcher_groups_concurrent_requests(tiny, tiny_dir, counted_batches):
    prompts = PROMPTS + ["paris the", "what is"]
    streamed: dict[int, list[str]] = {i: [] for i in range(8)}
    with Batcher(ModelCache(10**9), max_batch_size=32, max_wait_ms=300) as batcher:
        results = submit_concurrently(batcher, [
            (("tiny", tiny_dir, prompt, GREEDY), {"on_token": streamed[i].append}) for i, prompt in enumerate(prompts)])
        assert batcher.batches_run == len(counted_batches)
    assert len(counted_batches) < 8 and sum(n for _, n in counted_batches) == 8
    for i, (prompt, result) in enumerate(zip(prompts, results)):
        assert result.token_ids == solo(tiny, prompt).token_ids
        assert "".join(streamed[i]) == result.text


def test_batcher_keeps_models_apart_and_fails_a_bad_request_alone(tiny, tiny_dir, counted_batches):
    too_long = " ".join(["paris"] * 250)
    with Batcher(ModelCache(10**9), max_batch_size=3, max_wait_ms=300) as batcher:
        futures = [batcher.submit("one", tiny_dir, p, GREEDY) for p in PROMPTS[:4]]  # 4 > max_batch_size
        futures += [batcher.submit("two", tiny_dir, p, GREEDY) for p in PROMPTS[4:]]
        bad = batcher.submit("one", tiny_dir, too_long, GREEDY)
        chat = batcher.submit("two", tiny_dir, messages=[{"role": "user", "content": "what is paris ?"}],
                              params=GREEDY)
        results = [f.result(timeout=60) for f in futures]
        with pytest.raises(InferenceInputError) as caught:
            bad.result(timeout=60)
        assert caught.value.field == "prompt"
        assert chat.result(timeout=60).token_ids == solo(tiny, "<user>what is paris ?</s>").token_ids
        with pytest.raises(InferenceInputError):
            batcher.submit("one", tiny_dir, "paris", SamplingParams(temperature=9))
        with pytest.raises(InferenceInputError):
            batcher.submit("one", tiny_dir, "paris", GREEDY, messages=[{"role": "user", "content": "x"}])
        missing = batcher.submit("three", tiny_dir.parent / "missing", "paris", GREEDY)
        with pytest.raises(ModelSafetyError):  # the loader's error, on this request's future
            missing.result(timeout=60)
    for prompt, result in zip(PROMPTS, results):
        assert result.token_ids == solo(tiny, prompt).token_ids
    assert all(n <= 3 for _, n in counted_batches)
    assert len(counted_batches) >= 3  # "one" in two batches (4 requests, 3 at most), "two" apart
    with pytest.raises(RuntimeError):
        batcher.submit("one", tiny_dir, "paris", GREEDY)


# --- the demo model ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory) -> Path:
    from workers.models import DemoModelMissing, convert_gguf_to_safetensors, demo_model_gguf

    try:
        gguf = demo_model_gguf()
    except DemoModelMissing as exc:
        pytest.skip(str(exc))
    return convert_gguf_to_safetensors(gguf, tmp_path_factory.mktemp("model-cache") / "smollm2-135m-instruct")


@pytest.mark.slow
def test_demo_model_answers_paris_in_a_batch(demo_dir):
    model, tokenizer = load_for_inference(demo_dir)
    questions = ["What is the capital of France?", "Name three primary colors.", "What is 7 times 8?"]
    prompts = [render_prompt(tokenizer, messages=[{"role": "user", "content": q}]) for q in questions]
    streamed = []
    results = generate_batch(model, tokenizer, prompts, SamplingParams(max_new_tokens=20),
                             on_token=lambda i, delta: streamed.append(delta) if i == 0 else None)
    print(f"answer: {results[0].text!r}")
    assert "Paris" in results[0].text and "".join(streamed) == results[0].text
    assert results[0].token_ids == generate_batch(model, tokenizer, prompts[:1], SamplingParams(max_new_tokens=20))[
        0].token_ids
