"""What the batcher tells its Observer (workers/inference/observe.py), with the tiny Llama and no
database: one admission, one first token and tokens-1 gaps per request, under its own model key
and adapter; one step report per prefill or decoding step, with its occupancy; an observer that
raises never fails a generation."""

from __future__ import annotations

import threading
from collections import defaultdict
from pathlib import Path

import pytest

from tests.workers.test_inference import PROMPTS, save_tiny_chat_model
from workers.inference import Batcher, ModelCache, Observer, SamplingParams

pytestmark = pytest.mark.timeout(120)


class Recorder(Observer):
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, list] = defaultdict(list)

    def _add(self, what, *values) -> None:
        with self.lock:
            self.events[what].append(values)

    def admitted(self, model_key, adapter, queue_wait_s):
        self._add("admitted", model_key, adapter, queue_wait_s)

    def first_token(self, model_key, adapter, seconds):
        self._add("first_token", model_key, adapter, seconds)

    def next_token(self, model_key, adapter, gap_s):
        self._add("next_token", model_key, adapter, gap_s)

    def finished(self, model_key, adapter, *, tokens, reason):
        self._add("finished", model_key, adapter, tokens, reason)

    def step(self, model_key, *, rows, max_rows, tokens, token_budget, kv_cache_bytes, seconds):
        self._add("step", model_key, rows, max_rows, tokens, token_budget, kv_cache_bytes, seconds)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("observed") / "tiny"
    save_tiny_chat_model(directory)
    return directory


def test_every_request_is_observed_once_per_token_under_its_model_key(tiny_dir):
    recorder = Recorder()
    params = SamplingParams(max_new_tokens=7)
    with Batcher(ModelCache(memory_budget_bytes=2**30), max_batch_size=2, max_wait_ms=50,
                 kv_cache_budget_bytes=2**24, observer=recorder) as batcher:
        futures = [batcher.submit("tiny", tiny_dir, prompt, params) for prompt in PROMPTS[:3]]
        results = [future.result(timeout=60) for future in futures]
    events = recorder.events
    assert [e[:2] for e in events["admitted"]] == [("tiny", None)] * 3
    assert len(events["first_token"]) == 3
    assert sorted(e[2] for e in events["finished"]) == sorted(r.completion_tokens for r in results)
    assert len(events["next_token"]) == sum(r.completion_tokens - 1 for r in results)
    # Plausible times: the third request waited for a row (batch of 2), every first token came
    # after its own admission, and no gap is longer than the whole generation.
    waits = sorted(e[2] for e in events["admitted"])
    assert waits[0] >= 0 and waits[-1] > waits[0]
    assert all(0 < e[2] <= max(r.total_s for r in results) for e in events["first_token"] + events["next_token"])
    assert sorted(e[2] for e in events["first_token"]) == pytest.approx(
        sorted(r.time_to_first_token_s for r in results))
    steps = events["step"]
    assert all(key == "tiny" and 1 <= rows <= max_rows == 2 and tokens > 0 and budget > 0 and seconds > 0
               for key, rows, max_rows, tokens, budget, _, seconds in steps)
    assert any(rows == 2 for _, rows, *_ in steps)  # two rows ran together
    assert steps[-1][-2] == 0  # the batch emptied: its cache is gone
    assert sum(step[-1] for step in steps) < sum(r.total_s for r in results)  # steps run one at a time


def test_an_observer_that_raises_does_not_fail_the_generation(tiny_dir):
    class Broken(Observer):
        def first_token(self, model_key, adapter, seconds):
            raise RuntimeError("figures are down")

    with Batcher(ModelCache(memory_budget_bytes=2**30), observer=Broken()) as batcher:
        result = batcher.submit("tiny", tiny_dir, PROMPTS[0], SamplingParams(max_new_tokens=4)).result(timeout=60)
    assert result.completion_tokens > 0


def test_the_model_cache_reports_base_and_adapter_bytes_per_model_key(tiny_dir):
    cache = ModelCache(memory_budget_bytes=2**30)
    cache.load("tiny", tiny_dir)
    [(key, (base, adapters))] = cache.memory().items()
    assert key == "tiny" and base > 0 and adapters == 0
