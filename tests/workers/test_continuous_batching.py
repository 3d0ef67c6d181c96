"""Continuous batching (workers/inference/decode.py, batcher.py) with the real models: sequences
that join a running batch or leave it mid-way generate, under greedy decoding, exactly the tokens
they generate alone; a cancelled one frees its place at once; the key/value cache budget bounds
who joins. The tiny Llama for the fast tests, the demo model for the slow one. No database."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.workers.test_inference import PROMPTS, save_tiny_chat_model
from workers.inference import Batcher, ModelCache, SamplingParams, generate_batch, render_prompt
from workers.inference import batcher as batcher_module
from workers.inference.batcher import round_robin
from workers.inference.decode import PREFILL_PAD_SLACK, DecodeBatch, Sequence, kv_bytes_per_token, prefill_groups
from workers.inference.prompts import encode_prompt
from workers.models import load_for_inference

GREEDY = SamplingParams(max_new_tokens=24)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("continuous") / "tiny"
    save_tiny_chat_model(directory)
    return directory


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return load_for_inference(tiny_dir)


def alone(model, tokenizer, prompt: str, params: SamplingParams = GREEDY) -> list[int]:
    return generate_batch(model, tokenizer, [prompt], params)[0].token_ids


def sequence(tokenizer, prompt: str, params: SamplingParams = GREEDY, **kwargs) -> Sequence:
    return Sequence(encode_prompt(tokenizer, prompt), params, time.perf_counter(), **kwargs)


def cache_width_of_rows(batch: DecodeBatch) -> int:
    """The columns the rows' own tokens need: each row caches its prompt and all its generated
    tokens but the last (fed at the next step)."""
    return max(len(s.prompt_ids) + len(s.generated) - 1 for s in batch.rows)


# --- DecodeBatch -----------------------------------------------------------------------------------

def test_sequences_joining_mid_way_generate_what_they_generate_alone(tiny):
    model, tokenizer = tiny
    batch = DecodeBatch(model, tokenizer, max_rows=8, share_prefix=False)
    first = [sequence(tokenizer, PROMPTS[0]), sequence(tokenizer, PROMPTS[4])]
    assert batch.admit(first) == []
    for _ in range(3):
        batch.step()
    # wider than the running batch (its rows get padded) and narrower (the newcomer gets padded)
    wider, narrower = sequence(tokenizer, PROMPTS[2]), sequence(tokenizer, PROMPTS[1])
    assert len(wider.prompt_ids) > batch.width > len(narrower.prompt_ids)
    batch.admit([wider, narrower])
    assert len(batch.rows) == 4 and batch.width == cache_width_of_rows(batch)
    batch.step()
    last = sequence(tokenizer, PROMPTS[5])
    batch.admit([last])
    while batch.rows:
        batch.step()
    for prompt, seq in zip((PROMPTS[0], PROMPTS[4], PROMPTS[2], PROMPTS[1], PROMPTS[5]),
                           (*first, wider, narrower, last)):
        assert seq.result.token_ids == alone(model, tokenizer, prompt)
    assert batch.prefills == 3 and batch.cache is None and batch.mask is None


def test_prefill_groups_sort_by_length_and_split_where_padding_would_grow_past_its_share():
    assert prefill_groups([]) == []
    assert prefill_groups([7]) == [[0]]
    # serve_concurrent's lengths, shuffled: four groups of four, shortest first
    lengths = [195, 38, 273, 117, 38, 274, 196, 118, 39, 275, 119, 197, 38, 274, 198, 119]
    groups = prefill_groups(lengths)
    assert [[lengths[i] for i in g] for g in groups] == [
        [38, 38, 38, 39], [117, 118, 119, 119], [195, 196, 197, 198], [273, 274, 274, 275]]
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    # short prompts: one forward, whatever their spread, while the padding stays within the slack
    assert prefill_groups([3, 12, 5, 20]) == [[0, 2, 1, 3]]
    assert len(prefill_groups([1, 1 + PREFILL_PAD_SLACK + 1])) == 2
    # equal lengths never split
    assert prefill_groups([300] * 32) == [list(range(32))]


def test_an_admission_of_mixed_lengths_is_prefilled_shortest_group_first_and_generates_what_it_does_alone(tiny):
    model, tokenizer = tiny
    long_prompt = " ".join(f"w{i % 60}" for i in range(150))
    prompts = [long_prompt, PROMPTS[1], PROMPTS[0] + " " + long_prompt, PROMPTS[3]]
    for grouped, forwards in ((True, 2), (False, 1)):
        batch = DecodeBatch(model, tokenizer, max_rows=8, share_prefix=False, group_prefills=grouped)
        sequences = [sequence(tokenizer, p) for p in prompts]
        assert batch.admit(sequences) == []
        assert batch.prefills == forwards and len(batch.rows) == 4
        assert batch.width == cache_width_of_rows(batch)
        if grouped:  # the short prompts had their first token before the long ones' forward ran
            assert max(sequences[1].first_token_at, sequences[3].first_token_at) < min(
                sequences[0].first_token_at, sequences[2].first_token_at)
        while batch.rows:
            batch.step()
        for prompt, seq in zip(prompts, sequences):
            assert seq.result.token_ids == alone(model, tokenizer, prompt)


def test_a_cancelled_sequence_leaves_at_once_and_its_columns_are_freed(tiny):
    model, tokenizer = tiny
    steps = {"n": 0}
    long_prompt = "w20 w21 w22 w23 w24 w25 w26 w27 w28 w29 w30 w31 w32 w33 w34 w35"
    cancelled = sequence(tokenizer, long_prompt, SamplingParams(max_new_tokens=24),
                         is_cancelled=lambda: steps["n"] >= 2)
    others = [sequence(tokenizer, PROMPTS[0]), sequence(tokenizer, PROMPTS[4])]
    batch = DecodeBatch(model, tokenizer, max_rows=8, share_prefix=False)
    batch.admit([cancelled, *others])
    width_with_it = batch.width
    steps["n"] = 2
    finished = batch.step()
    assert cancelled in finished and cancelled not in batch.rows and len(batch.rows) == 2
    assert (cancelled.result.finish_reason, cancelled.result.completion_tokens) == ("cancelled", 2)
    assert cancelled.result.token_ids == alone(model, tokenizer, long_prompt)[:2]
    # the padding it forced on the others is cut: the cache is as wide as the longest row left
    assert batch.width == cache_width_of_rows(batch) < width_with_it + 1
    while batch.rows:
        batch.step()
    for prompt, seq in zip((PROMPTS[0], PROMPTS[4]), others):
        assert seq.result.token_ids == alone(model, tokenizer, prompt)


def test_a_shared_prompt_prefix_is_computed_once_and_reused_by_later_newcomers(tiny):
    model, tokenizer = tiny
    prefix = "what is the capital of france ? paris the w50 w51 "
    prompts = [prefix + suffix for suffix in ("?", "w20 w21 w22", "the capital", "w40 w41 w42 w43 w44 w45")]
    batch = DecodeBatch(model, tokenizer, max_rows=8)
    joined = [sequence(tokenizer, prompts[0])]
    batch.admit(joined)  # alone: nothing to share yet
    assert batch.prefix is None
    batch.step()
    joined.append(sequence(tokenizer, prompts[1]))
    batch.admit(joined[-1:])  # shares 11 tokens with the previous prompt: computed and kept
    kept = batch.prefix
    assert kept is not None and len(kept.ids) == 11
    batch.step()
    joined += [sequence(tokenizer, p) for p in prompts[2:]]
    batch.admit(joined[-2:])  # reuses it
    assert batch.prefix is kept
    while batch.rows:
        batch.step()
    for prompt, seq in zip(prompts, joined):
        assert seq.result.token_ids == alone(model, tokenizer, prompt)


def test_a_kept_prefix_is_extended_or_cut_to_what_later_prompts_share_and_only_the_new_part_is_computed(tiny):
    """Prompts that nest (a shared start, then more shared by some): the second admission computes only
    the tokens past the kept prefix; the third, sharing less than is kept, reuses a cut of it and
    computes no prefix at all. Every output is what the prompt generates alone."""
    model, tokenizer = tiny
    widths: list[int] = []

    class RecordingBatch(DecodeBatch):
        def _forward(self, names, **kwargs):
            widths.append(int(kwargs["input_ids"].shape[1]))
            return super()._forward(names, **kwargs)

    start = "what is the capital of france ? paris the w50 w51 "
    groups = [[start + "?", start + "w20 w21 w22"],
              [start + "w30 w31 w32 w33 the ?", start + "w30 w31 w32 w33 the capital"],
              [start + "w30 w31 w40 w41", start + "w30 w31 w42 ?"]]
    batch = RecordingBatch(model, tokenizer, max_rows=8)
    joined: list[Sequence] = []
    kept_lengths = []
    for prompts in groups:
        widths.clear()
        joined += [sequence(tokenizer, p) for p in prompts]
        batch.admit(joined[-len(prompts):])
        kept_lengths.append((len(batch.prefix.ids), list(widths)))
        batch.step()
    first, second, third = (encode_prompt(tokenizer, p) for p in (groups[0][0], groups[1][0], groups[2][0]))
    shared = [shared_length(*(encode_prompt(tokenizer, p) for p in prompts)) for prompts in groups]
    assert shared[1] > shared[0] and shared[0] < shared[2] < shared[1]
    assert first[:shared[0]] == second[:shared[0]] == third[:shared[0]]
    assert kept_lengths[0][0] == shared[0] and kept_lengths[0][1][0] == shared[0]  # computed from the start
    prefix_width, rows_width = kept_lengths[1][1]
    assert kept_lengths[1][0] == shared[1] and prefix_width == shared[1] - shared[0]  # only the extension
    assert kept_lengths[2][0] == shared[1] and len(kept_lengths[2][1]) == 1  # a cut of it: no prefix forward
    while batch.rows:
        batch.step()
    for seq, prompt in zip(joined, [p for prompts in groups for p in prompts]):
        assert seq.result.token_ids == alone(model, tokenizer, prompt), prompt


def shared_length(a: list[int], b: list[int]) -> int:
    k = 0
    while k < min(len(a), len(b)) - 1 and a[k] == b[k]:
        k += 1
    return k


def test_the_cache_budget_decides_who_fits(tiny):
    model, tokenizer = tiny
    per_token = kv_bytes_per_token(model)
    assert per_token == 2 * 2 * 2 * 8 * 4  # layers x (keys, values) x kv heads x head dim x fp32
    one = sequence(tokenizer, PROMPTS[0])
    row_bytes = (len(one.prompt_ids) + GREEDY.max_new_tokens) * per_token
    batch = DecodeBatch(model, tokenizer, max_rows=8, kv_budget_bytes=row_bytes)
    assert batch.fits([one]) and not batch.fits([one, sequence(tokenizer, PROMPTS[0])])
    huge = sequence(tokenizer, PROMPTS[0], SamplingParams(max_new_tokens=200))
    assert batch.fits([huge])  # an empty batch takes one sequence whatever its size
    batch.admit([one])
    assert not batch.fits([sequence(tokenizer, PROMPTS[1])])
    assert DecodeBatch(model, tokenizer, max_rows=1).fits([one]) and not DecodeBatch(
        model, tokenizer, max_rows=1).fits([one, one])


# --- the batcher ------------------------------------------------------------------------------------

@pytest.fixture
def admissions(monkeypatch):
    """The prefills the batcher runs: the number of requests admitted together, each."""
    sizes = []

    class CountingBatch(DecodeBatch):
        def admit(self, sequences):
            sizes.append(len(sequences))
            return super().admit(sequences)

    monkeypatch.setattr(batcher_module, "DecodeBatch", CountingBatch)
    return sizes


def runs_to_length(model, tokenizer) -> str:
    """A prompt the tiny model answers with all of GREEDY's tokens (no early end)."""
    for prompt in PROMPTS:
        if len(alone(model, tokenizer, prompt)) == GREEDY.max_new_tokens:
            return prompt
    raise AssertionError("no prompt runs to max_new_tokens")


def test_a_request_submitted_mid_generation_joins_the_running_batch(tiny, tiny_dir, admissions):
    model, tokenizer = tiny
    long_prompt = runs_to_length(model, tokenizer)
    events: list[str] = []
    futures = {}
    with Batcher(ModelCache(10**9), max_batch_size=8, max_wait_ms=0) as batcher:
        def on_first_token(delta: str) -> None:
            events.append("first")
            if "second" not in futures:  # on the worker thread, between two steps
                futures["second"] = batcher.submit("tiny", tiny_dir, PROMPTS[1], GREEDY,
                                                   on_token=lambda d: events.append("second"))

        futures["first"] = batcher.submit("tiny", tiny_dir, long_prompt, GREEDY, on_token=on_first_token)
        first = futures["first"].result(timeout=60)
        second = futures["second"].result(timeout=60)
    assert admissions == [1, 1] and batcher.batches_run == 2
    assert first.token_ids == alone(model, tokenizer, long_prompt)
    assert second.token_ids == alone(model, tokenizer, PROMPTS[1])
    # the second streamed while the first was still generating: it did not wait for the batch to end
    last_of_first = max(i for i, e in enumerate(events) if e == "first")
    assert events.index("second") < last_of_first
    assert second.time_to_first_token_s < first.total_s


@pytest.mark.timeout(120)
def test_newcomers_arriving_during_prefills_are_prefilled_before_the_rows_step_again_up_to_a_bound(
        tiny, tiny_dir, monkeypatch):
    """Each request, at its first token (its prefill), submits the next one: a burst reaching the worker
    over a while. Their prefills run back to back, MAX_PREFILLS_BETWEEN_STEPS at most, then the
    running rows step; the outputs are what each generates alone."""
    model, tokenizer = tiny
    turns: list[str] = []

    class RecordingBatch(DecodeBatch):
        def admit(self, sequences):
            turns.append("prefill")
            return super().admit(sequences)

        def step(self):
            turns.append("step")
            return super().step()

    monkeypatch.setattr(batcher_module, "DecodeBatch", RecordingBatch)
    chain = [PROMPTS[i % len(PROMPTS)] for i in range(7)]
    futures: list = []
    with Batcher(ModelCache(10**9), max_batch_size=8, max_wait_ms=0) as batcher:
        def submit(index: int) -> None:
            submitted = False

            def on_token(delta: str) -> None:
                nonlocal submitted
                if not submitted and index + 1 < len(chain):  # on the worker thread, during this prefill
                    submitted = True
                    submit(index + 1)

            futures.append(batcher.submit("tiny", tiny_dir, chain[index], GREEDY, on_token=on_token))

        submit(0)
        first = futures[0].result(timeout=60)  # by then the whole chain was submitted, each at a prefill
        results = [first] + [future.result(timeout=60) for future in futures[1:]]
    limit = batcher.max_prefills_between_steps
    assert turns.count("prefill") == len(chain) == batcher.batches_run
    # the first `limit` prefills back to back, then one step, then the rest of the burst
    assert turns[:limit + 1] == ["prefill"] * limit + ["step"]
    assert turns[limit + 1:limit + 1 + len(chain) - limit] == ["prefill"] * (len(chain) - limit)
    assert [r.token_ids for r in results] == [alone(model, tokenizer, prompt) for prompt in chain]


def test_a_cancelled_request_frees_its_place_for_a_waiting_one(tiny, tiny_dir, admissions):
    model, tokenizer = tiny
    long_prompt = runs_to_length(model, tokenizer)
    events: list[str] = []
    stop = threading.Event()
    futures = {}
    with Batcher(ModelCache(10**9), max_batch_size=2, max_wait_ms=200) as batcher:
        def on_token_of_first(delta: str) -> None:
            events.append("first")
            if "waiting" not in futures:  # the batch is full (2 rows): this one must wait
                futures["waiting"] = batcher.submit("tiny", tiny_dir, PROMPTS[1], GREEDY,
                                                    on_token=lambda d: events.append("waiting"))
            elif events.count("first") == 3:
                stop.set()

        futures["first"] = batcher.submit("tiny", tiny_dir, long_prompt, GREEDY, on_token=on_token_of_first)
        futures["cancelled"] = batcher.submit("tiny", tiny_dir, long_prompt, GREEDY, is_cancelled=stop.is_set)
        results = {"first": futures["first"].result(timeout=60)}
        results.update((name, futures[name].result(timeout=60)) for name in ("cancelled", "waiting"))
    assert admissions == [2, 1]  # first + cancelled together, then the waiting one in the freed row
    cancelled = results["cancelled"]
    assert cancelled.finish_reason == "cancelled" and cancelled.completion_tokens < GREEDY.max_new_tokens
    assert cancelled.token_ids == alone(model, tokenizer, long_prompt)[:cancelled.completion_tokens]
    assert results["first"].token_ids == alone(model, tokenizer, long_prompt)
    assert results["waiting"].token_ids == alone(model, tokenizer, PROMPTS[1])
    assert events.index("waiting") < max(i for i, e in enumerate(events) if e == "first")


def test_a_cache_budget_for_one_row_runs_requests_one_after_another(tiny, tiny_dir, admissions):
    model, tokenizer = tiny
    prompts = PROMPTS[:3]
    widest = max(len(encode_prompt(tokenizer, p)) for p in prompts)
    budget = (widest + GREEDY.max_new_tokens) * kv_bytes_per_token(model)
    with Batcher(ModelCache(10**9), max_batch_size=8, max_wait_ms=200, kv_cache_budget_bytes=budget) as batcher:
        futures = [batcher.submit("tiny", tiny_dir, p, GREEDY) for p in prompts]
        results = [f.result(timeout=60) for f in futures]
    assert admissions == [1, 1, 1]
    assert [r.token_ids for r in results] == [alone(model, tokenizer, p) for p in prompts]
    # the ones that waited count their wait in their time to first token
    assert results[0].time_to_first_token_s < results[1].time_to_first_token_s < results[2].time_to_first_token_s


# --- fair admission ------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_round_robin_takes_one_request_per_tag_in_turn_after_the_last_tag_admitted():
    queue = [SimpleNamespace(tag=tag, name=f"{tag}{i}") for i, tag in enumerate("AAAABAC")]
    picked, rest = round_robin(queue, 4, last_tag="A")
    assert [r.name for r in picked] == ["B4", "C6", "A0", "A1"]
    assert [r.name for r in rest] == ["A2", "A3", "A5"]
    picked, rest = round_robin(queue, 10, last_tag=None)
    assert [r.name for r in picked] == ["A0", "B4", "C6", "A1", "A2", "A3", "A5"] and rest == []
    assert round_robin([], 3, last_tag="A") == ([], [])


def first_tokens(order: list[str], name: str):
    """An is_cancelled callback recording when `name` produced its first token (it is asked after each)."""
    def is_cancelled() -> bool:
        if name not in order:
            order.append(name)
        return False
    return is_cancelled


@pytest.mark.timeout(120)
def test_a_project_flooding_the_queue_does_not_starve_another(tiny, tiny_dir):
    model, tokenizer = tiny
    long_prompt = runs_to_length(model, tokenizer)
    order: list[str] = []
    futures = {}
    with Batcher(ModelCache(10**9), max_batch_size=2, max_wait_ms=200) as batcher:
        def submit(name: str, tag: str, prompt: str = PROMPTS[1]) -> None:
            futures[name] = batcher.submit("tiny", tiny_dir, prompt, GREEDY, tag=tag,
                                           is_cancelled=first_tokens(order, name))

        def on_token_of_a0(delta: str) -> None:
            if "b0" not in futures:  # on the worker thread: the batch is full, all of these wait
                for i in range(2, 22):
                    submit(f"a{i}", "project-a")
                submit("b0", "project-b")

        futures["a0"] = batcher.submit("tiny", tiny_dir, long_prompt, GREEDY, tag="project-a",
                                       on_token=on_token_of_a0, is_cancelled=first_tokens(order, "a0"))
        submit("a1", "project-a", long_prompt)
        futures["a0"].result(timeout=60)  # by then every other one was submitted
        for future in futures.values():
            future.result(timeout=60)
    assert len(order) == 23 and set(order[:2]) == {"a0", "a1"}
    # b0 came last, behind 20 of project A's, and is admitted in the next round (first come, first
    # served, it would have been the 23rd)
    assert order.index("b0") in (2, 3)
    assert [name for name in order if name.startswith("a")][2:] == [f"a{i}" for i in range(2, 22)]  # in order


@pytest.mark.timeout(120)
def test_a_long_generation_keeps_its_row_but_short_ones_pass_through_the_other(tiny, tiny_dir):
    model, tokenizer = tiny
    long_prompt = runs_to_length(model, tokenizer)
    short = SamplingParams(max_new_tokens=2)
    futures = {}
    with Batcher(ModelCache(10**9), max_batch_size=2, max_wait_ms=0) as batcher:
        def on_token_of_long(delta: str) -> None:
            if "short0" not in futures:
                for i in range(4):  # one row is free: they take it one after another
                    futures[f"short{i}"] = batcher.submit("tiny", tiny_dir, PROMPTS[1], short, tag="b")

        futures["long"] = batcher.submit("tiny", tiny_dir, long_prompt, GREEDY, tag="a", on_token=on_token_of_long)
        long = futures["long"].result(timeout=60)
        shorts = [futures[f"short{i}"].result(timeout=60) for i in range(4)]
    assert long.completion_tokens == GREEDY.max_new_tokens
    # every short one ran and ended while the long one was still generating
    assert all(s.completion_tokens <= 2 and s.total_s < long.total_s for s in shorts)


# --- the demo model ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_demo_model_join_and_cancel_mid_batch_match_one_at_a_time(demo_model_dir):
    model, tokenizer = load_for_inference(demo_model_dir, device="cpu", dtype="fp32")
    questions = ["What is the capital of France?", "Name three primary colors.", "What is 7 times 8?",
                 "Why is the sky blue?"]
    prompts = [render_prompt(tokenizer, messages=[{"role": "user", "content": q}]) for q in questions]
    params = SamplingParams(max_new_tokens=16)
    cancel_after = {"n": 0}
    batch = DecodeBatch(model, tokenizer, max_rows=8)
    running = [sequence(tokenizer, prompts[0], params),
               sequence(tokenizer, prompts[1], params, is_cancelled=lambda: cancel_after["n"] >= 4)]
    batch.admit(running)
    for cancel_after["n"] in range(1, 6):
        batch.step()
    joined = [sequence(tokenizer, p, params) for p in prompts[2:]]
    batch.admit(joined)  # mid-way, reusing the system prompt the first two shared
    assert batch.prefix is not None
    while batch.rows:
        batch.step()
    assert running[1].result.finish_reason == "cancelled"
    solo = [alone(model, tokenizer, p, params) for p in prompts]
    assert running[1].result.token_ids == solo[1][:running[1].result.completion_tokens]
    assert [running[0].result.token_ids, joined[0].result.token_ids, joined[1].result.token_ids] == [
        solo[0], solo[2], solo[3]]
    assert "Paris" in running[0].result.text
