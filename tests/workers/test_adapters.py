"""Many LoRA adapters over one base (workers/inference/adapters.py, decode.py, batcher.py): rows of
different adapters and rows with none share one running batch and, under greedy decoding, each
generates exactly what its adapter generates alone; adapters load on demand and are evicted
least recently used under a budget without failing a request; one copy of the base stays in
memory whatever the number of adapters. The tiny Llama, adapters built here with PEFT (random,
non-zero B weights, so every adapter answers differently). No database."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.workers.test_inference import PROMPTS, CountingLoader, save_tiny_chat_model
from workers.inference import Batcher, ModelCache, SamplingParams, generate_batch
from workers.inference import batcher as batcher_module
from workers.inference.adapters import AdapterModel, AdapterSet
from workers.inference.cache import model_size_bytes
from workers.inference.decode import DecodeBatch, Sequence
from workers.inference.prompts import encode_prompt
from workers.models import ModelFormatError, load_for_inference

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft

GREEDY = SamplingParams(max_new_tokens=24)
# Three adapters that differ in rank and in the modules they change (attention only; attention
# and MLP), as adapters fine-tuned by different teams would.
ADAPTER_SHAPES = {
    "a": {"r": 8, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj"]},
    "b": {"r": 4, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]},
    "c": {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "v_proj", "gate_proj", "up_proj", "down_proj"]},
}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("adapters") / "tiny"
    save_tiny_chat_model(directory)
    return directory


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory) -> dict[str, Path]:
    """name -> adapter directory, each with its own random, non-zero weights."""
    import torch
    from peft import LoraConfig, get_peft_model

    directories = {}
    for seed, (name, shape) in enumerate(ADAPTER_SHAPES.items()):
        torch.manual_seed(seed)
        model, _ = load_for_inference(tiny_dir)
        peft_model = get_peft_model(model, LoraConfig(init_lora_weights=False, **shape))
        directories[name] = tmp_path_factory.mktemp(f"lora-{name}") / "adapter"
        peft_model.save_pretrained(directories[name])
    return directories


@pytest.fixture(scope="module")
def alone(tiny_dir, adapters):
    """alone(adapter name or None, prompt) -> the token ids it generates by itself, the adapter
    loaded the ordinary way: PeftModel.from_pretrained on a base of its own."""
    from peft import PeftModel

    models = {None: load_for_inference(tiny_dir)}
    for name, directory in adapters.items():
        base, tokenizer = load_for_inference(tiny_dir)
        models[name] = (PeftModel.from_pretrained(base, str(directory)).eval(), tokenizer)
    memo: dict = {}

    def generate(name: str | None, prompt: str, params: SamplingParams = GREEDY) -> list[int]:
        if (name, prompt, params) not in memo:
            model, tokenizer = models[name]
            memo[name, prompt, params] = generate_batch(model, tokenizer, [prompt], params)[0].token_ids
        return memo[name, prompt, params]

    return generate


def sequence(tokenizer, prompt: str, adapter: str | None) -> Sequence:
    return Sequence(encode_prompt(tokenizer, prompt), GREEDY, time.perf_counter(), adapter=adapter)


def test_every_adapter_answers_differently_from_the_base_and_from_each_other(alone):
    answers = {name: tuple(alone(name, PROMPTS[0])) for name in (None, *ADAPTER_SHAPES)}
    assert len(set(answers.values())) == len(answers)  # else the mixed-batch tests below prove nothing


# --- one running batch, rows of several adapters ---------------------------------------------------

@pytest.mark.parametrize("kernel", ["peft", "batched"])
def test_a_mixed_batch_over_three_adapters_and_the_base_matches_each_alone(tiny_dir, adapters, alone, kernel):
    model, tokenizer = load_for_inference(tiny_dir)
    served = AdapterSet(model, budget_bytes=None, kernel=kernel)
    names = {None: None, **{key: served.acquire(directory) for key, directory in adapters.items()}}
    batch = DecodeBatch(model, tokenizer, max_rows=16, adapters=served)
    first = [(key, prompt) for key, prompt in zip(["a", None, "b", "c", "a"], PROMPTS)]
    rows = [sequence(tokenizer, prompt, names[key]) for key, prompt in first]
    batch.admit(rows)
    for _ in range(3):
        batch.step()
    later = [("c", PROMPTS[0]), (None, PROMPTS[2]), ("b", PROMPTS[5])]  # join the running batch mid-way
    joined = [sequence(tokenizer, prompt, names[key]) for key, prompt in later]
    batch.admit(joined)
    while batch.rows:
        batch.step()
    assert [s.result.token_ids for s in rows + joined] == [alone(key, prompt) for key, prompt in first + later]
    # the batched kernel's stacks (3 slots of the largest rank, 16, in every LoRA layer) count as held
    from peft.tuners.lora import LoraLayer

    layers = [m for m in served.peft.modules() if isinstance(m, LoraLayer)]
    stacks = sum(3 * 16 * (layer.in_features + layer.out_features) * 4 for layer in layers)
    assert served.stack_bytes == (stacks if kernel == "batched" else 0)
    assert served.total_bytes == served.weights_bytes + served.stack_bytes


def test_a_shared_prompt_prefix_is_reused_only_by_rows_of_its_own_adapter(tiny_dir, adapters, alone):
    model, tokenizer = load_for_inference(tiny_dir)
    served = AdapterSet(model, budget_bytes=None)
    a, b = served.acquire(adapters["a"]), served.acquire(adapters["b"])
    system = "w10 w11 w12 w13 w14 w15 w16 w17 w18 w19 "  # ten shared tokens: a prefix worth keeping
    prompts = [system + "paris", system + "the", system + "? ?"]
    batch = DecodeBatch(model, tokenizer, max_rows=8, adapters=served)
    together = [sequence(tokenizer, prompts[0], a), sequence(tokenizer, prompts[1], a)]
    batch.admit(together)
    assert batch.prefix is not None and batch.prefix.adapter == a
    other = [sequence(tokenizer, prompts[2], b)]  # same prefix, other adapter: computed through b, not copied
    batch.admit(other)
    base_row = [sequence(tokenizer, prompts[2], None)]
    batch.admit(base_row)
    while batch.rows:
        batch.step()
    assert [s.result.token_ids for s in together + other + base_row] == [
        alone("a", prompts[0]), alone("a", prompts[1]), alone("b", prompts[2]), alone(None, prompts[2])]


@pytest.fixture
def admissions(monkeypatch):
    """The prefills the batcher runs: the adapters of the requests admitted together, each."""
    groups = []

    class CountingBatch(DecodeBatch):
        def admit(self, sequences):
            groups.append([s.adapter for s in sequences])
            return super().admit(sequences)

    monkeypatch.setattr(batcher_module, "DecodeBatch", CountingBatch)
    return groups


@pytest.mark.parametrize("kernel", ["peft", "batched"])
def test_the_batcher_runs_requests_for_different_adapters_of_one_base_in_one_batch(tiny_dir, adapters, alone,
                                                                                      admissions, kernel):
    loader = CountingLoader()
    cache = ModelCache(10**9, loader=loader, adapter_kernel=kernel)
    asked = [("a", PROMPTS[0]), (None, PROMPTS[1]), ("b", PROMPTS[2]), ("c", PROMPTS[3]), (None, PROMPTS[0]),
             ("c", PROMPTS[4]), ("b", PROMPTS[0])]
    with Batcher(cache, max_batch_size=16, max_wait_ms=500) as batcher:
        futures = [batcher.submit("tiny", tiny_dir, prompt, GREEDY, adapter_path=adapters[key] if key else None)
                   for key, prompt in asked]
        results = [f.result(timeout=60) for f in futures]
    assert [r.token_ids for r in results] == [alone(key, prompt) for key, prompt in asked]
    assert len(admissions) == 1 and len(set(admissions[0])) == 4  # one prefill: three adapters and the base
    assert len(loader.calls) == 1 and len(cache.keys()) == 1  # the base was loaded once


def test_one_copy_of_the_base_is_in_memory_whatever_the_number_of_adapters(tiny_dir, adapters, alone):
    cache = ModelCache(10**9, adapter_budget_bytes=None)
    entry = cache.load("tiny", tiny_dir, device="cpu")
    base_bytes = model_size_bytes(entry.model)
    base_storage = {p.data_ptr() for p in entry.model.parameters()}
    views = {key: cache.get("tiny", tiny_dir, adapter_path=directory, device="cpu")[0]
             for key, directory in adapters.items()}
    assert all(isinstance(view, AdapterModel) for view in views.values())
    assert cache.keys() == [("tiny", "cpu", "fp32")] and entry.adapters.loads == 3
    # the base's weights were not copied: every tensor the base had is still the one in use, and
    # what was added is the adapters' own LoRA weights, nothing more
    lora = [p for n, p in entry.model.named_parameters() if ".lora_" in n]
    others = [p for n, p in entry.model.named_parameters() if ".lora_" not in n]
    assert {p.data_ptr() for p in others} <= base_storage
    assert sum(p.numel() * p.element_size() for p in others) <= base_bytes
    assert entry.adapters.weights_bytes == sum(p.numel() * p.element_size() for p in lora) > 0
    assert model_size_bytes(entry.model) == base_bytes + entry.adapters.weights_bytes
    # the batched kernel's stacks (the default) are a second copy of the LoRA weights, counted by the cache
    assert entry.adapters.stack_bytes > 0
    assert cache.total_bytes == base_bytes + entry.adapters.weights_bytes + entry.adapters.stack_bytes
    # each view is its adapter alone; the base, asked again, is still itself
    for key, view in views.items():
        tokenizer = entry.tokenizer
        assert generate_batch(view, tokenizer, [PROMPTS[0]], GREEDY)[0].token_ids == alone(key, PROMPTS[0])
    base, tokenizer = cache.get("tiny", tiny_dir, device="cpu")
    assert base is entry.model
    # a plain forward of the base object would now apply PEFT's active adapter: the batcher's
    # batches go through the AdapterSet, and so does generation on the base with adapters loaded
    batch = DecodeBatch(base, tokenizer, adapters=entry.adapters)
    batch.admit([sequence(tokenizer, PROMPTS[0], None)])
    while batch.rows:
        batch.step()
    assert batch.prefills == 1


# --- loading on demand, eviction under the budget ----------------------------------------------------

def test_the_least_recently_used_adapter_no_row_uses_is_evicted_first(tiny_dir, adapters):
    # PEFT's kernel: what each adapter holds then adds up (the batched kernel's stacks are sized by
    # the largest rank loaded); the eviction test below runs both kernels
    sizes = {}
    for key, directory in adapters.items():
        alone_set = AdapterSet(load_for_inference(tiny_dir)[0], budget_bytes=None, kernel="peft")
        alone_set.acquire(directory)
        sizes[key] = alone_set.total_bytes
    served = AdapterSet(load_for_inference(tiny_dir)[0], budget_bytes=sum(sizes.values()) - 1,  # not all three
                        kernel="peft")
    a = served.acquire(adapters["a"])
    served.release(served.acquire(adapters["b"]))
    served.release(a)
    served.release(served.acquire(adapters["a"]))  # a used again: b is now the least recently used
    served.release(served.acquire(adapters["c"]))
    assert served.loaded() == [str(adapters[k].resolve()) for k in ("a", "c")] and served.evictions == 1
    assert served.total_bytes == sizes["a"] + sizes["c"]
    pinned = served.acquire(adapters["b"])  # b back: a is the least recently used now, c goes too if need be
    assert str(adapters["b"].resolve()) in served.loaded() and served.total_bytes <= served.budget_bytes
    served.release(pinned)


# An adapter budget of one byte: an adapter stays only while a row uses it.
NO_ROOM = 1


@pytest.mark.parametrize("kernel", ["peft", "batched"])
def test_the_adapter_budget_evicts_and_reloads_adapters_without_failing_requests(tiny_dir, adapters, alone, kernel):
    cache = ModelCache(10**9, adapter_budget_bytes=NO_ROOM, adapter_kernel=kernel)
    asked = [("a", PROMPTS[0]), ("b", PROMPTS[1]), ("a", PROMPTS[2]), ("c", PROMPTS[0]), (None, PROMPTS[1]),
             ("b", PROMPTS[0])]
    with Batcher(cache, max_batch_size=8, max_wait_ms=0) as batcher:
        results = []
        for key, prompt in asked:  # one after another: each adapter is evicted once its request is done
            future = batcher.submit("tiny", tiny_dir, prompt, GREEDY, adapter_path=adapters[key] if key else None)
            results.append(future.result(timeout=60))
        # and all at once, mixed in one batch: every adapter loads again, beside the others
        futures = [batcher.submit("tiny", tiny_dir, prompt, GREEDY, adapter_path=adapters[key] if key else None)
                   for key, prompt in asked]
        results += [f.result(timeout=60) for f in futures]
    assert [r.token_ids for r in results] == [alone(key, prompt) for key, prompt in asked * 2]
    served = cache.load("tiny", tiny_dir).adapters
    assert served.loads == 5 + 3 and served.evictions == 8  # a, b, a again, c, b again; then a, b, c
    assert served.loaded() == [] and served.total_bytes == 0


def test_an_adapter_a_running_row_uses_is_not_evicted(tiny_dir, adapters, alone):
    """No room for any adapter: a request for `b` arrives while `a`'s row runs; `b` loads beside
    `a` (over the budget for a while), both rows finish as they would alone, and each adapter is
    evicted once its row has left."""
    cache = ModelCache(10**9, adapter_budget_bytes=NO_ROOM)
    long_prompt = next(p for p in PROMPTS if len(alone("a", p)) == GREEDY.max_new_tokens)
    seen: dict = {}
    with Batcher(cache, max_batch_size=8, max_wait_ms=0) as batcher:
        served = cache.load("tiny", tiny_dir).adapters
        joined = threading.Event()

        def on_token_of_a(delta: str) -> None:
            if "b" not in seen:  # on the worker thread, between two steps of a's row
                seen["b"] = batcher.submit("tiny", tiny_dir, PROMPTS[1], GREEDY, adapter_path=adapters["b"],
                                           on_token=lambda d: joined.set())
            elif joined.is_set() and "both" not in seen:
                seen["both"] = len(served.loaded())

        first = batcher.submit("tiny", tiny_dir, long_prompt, GREEDY, adapter_path=adapters["a"],
                               on_token=on_token_of_a)
        results = [first.result(timeout=60), seen["b"].result(timeout=60)]
    assert seen["both"] == 2  # b loaded beside the a in use, not instead of it
    assert [r.token_ids for r in results] == [alone("a", long_prompt), alone("b", PROMPTS[1])]
    assert served.evictions == 2 and served.loaded() == []


def test_an_adapter_that_cannot_load_fails_its_request_alone(tiny_dir, adapters, alone, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 4, "target_modules": ["no_such"]}')
    (broken / "adapter_model.safetensors").write_bytes(b"not safetensors")
    with Batcher(ModelCache(10**9), max_batch_size=8, max_wait_ms=200) as batcher:
        good = batcher.submit("tiny", tiny_dir, PROMPTS[0], GREEDY, adapter_path=adapters["a"])
        bad = batcher.submit("tiny", tiny_dir, PROMPTS[1], GREEDY, adapter_path=broken)
        base = batcher.submit("tiny", tiny_dir, PROMPTS[2], GREEDY)
        with pytest.raises(ModelFormatError, match="could not be loaded"):
            bad.result(timeout=60)
        assert good.result(timeout=60).token_ids == alone("a", PROMPTS[0])
        assert base.result(timeout=60).token_ids == alone(None, PROMPTS[2])
        # the failed load left nothing behind: the adapters that load still mix with the base
        again = [batcher.submit("tiny", tiny_dir, PROMPTS[3], GREEDY, adapter_path=adapters[key]) for key in "bc"]
        assert [f.result(timeout=60).token_ids for f in again] == [alone(k, PROMPTS[3]) for k in "bc"]
