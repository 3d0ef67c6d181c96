"""A thread-based continuous batcher: requests for one model share a running batch, joining it at
the next decoding step and leaving it as soon as they finish.

    batcher = Batcher(cache, max_batch_size=32, max_wait_ms=2)
    future = batcher.submit("smollm2", path, prompt, SamplingParams(max_new_tokens=64))
    result = future.result()

One worker thread drives every model's DecodeBatch (one device: one forward at a time). Each
turn it admits what has arrived — prefilled together, then decoded with the rows already
there — and then runs one decoding step of every model that has rows, in turn, so a model
with a long queue never holds up another one. A model with nothing running waits up to
`max_wait_ms` after its first request for companions to prefill with it (a comparison submits
its prompts together); once rows run, newcomers join at the next step without waiting. Prefills
go first: while requests keep arriving during prefills (a burst of clients reaching the worker over
some hundreds of milliseconds), up to `max_prefills_between_steps` admissions run back to back before
the running rows take their next step, so the last of a burst waits for the prefills before it but
not for decoding steps between them, and the running rows' next token is held back by at most that
many prefills. A batch
holds at most `max_batch_size` rows, and newcomers join only while the key/value cache, at
the widest it can grow, stays within `kv_cache_budget_bytes`; the others wait their turn.

Fair admission: each request carries a tag (the project it is for). When rows free up, waiting
requests are admitted round-robin across tags, starting after the tag admitted last, and in order
of arrival within a tag: a tag that floods the queue cannot starve another, whose request is
admitted within the next round. A long generation keeps its row until it ends, but newcomers
join the other rows at every step, so it never holds up the queue.

Adapters: a batch is one base model's. Requests for LoRA adapters over that base join the same
running batch as the base's own requests, each row through its own adapter (the base's
AdapterSet: loaded on demand, pinned while a row uses it, evicted LRU under the adapter budget
once no row does). An adapter that cannot be loaded fails its request alone.

Observation: an Observer (observe.py) hears, per model key and adapter, each request's wait for
admission, its first token and every later token's gap, its end, and after each prefill or step
how full the batch is and how large its key/value cache.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .cache import ModelCache, resolve_device
from .decode import DecodeBatch, SharedPrefix
from .decode import Sequence as DecodeSequence
from .errors import InferenceInputError
from .generate import prepare
from .observe import Observer
from .params import SamplingParams
from .precision import PRECISIONS, check_precision
from .prompts import render_prompt

logger = logging.getLogger(__name__)

# The key/value cache a model's running batch may grow to. The demo model (SmolLM2-135M, fp32)
# takes 46 KB a token: 2 GiB hold 32 rows of about 1,400 tokens.
DEFAULT_KV_CACHE_BUDGET_BYTES = 2 * 2**30
KEPT_PREFIXES = 16  # idle models whose shared prompt prefix is kept for their next batch
MAX_PREFILLS_BETWEEN_STEPS = 4  # admissions run back to back while newcomers wait, before the rows step again
# (1: every admission is followed by a step, as before prefills went first)


@dataclass(eq=False)
class _Request:
    prompt: str | None
    messages: list[dict] | None
    params: SamplingParams
    on_token: Callable[[str], None] | None
    future: Future
    is_cancelled: Callable[[], bool] | None = None
    arrived: float = field(default_factory=time.perf_counter)
    running: bool = False  # its Future is running: it can no longer be cancelled through the Future
    sequence: DecodeSequence | None = None  # set once rendered and tokenized
    adapter_path: str | None = None
    adapters: Any = None  # the AdapterSet holding this request's adapter pinned (sequence.adapter)
    tag: str = ""  # whose request it is (a project): admission is round-robin across tags
    tokens_seen: int = 0  # tokens the observer has heard of
    last_token_at: float | None = None  # time.perf_counter() of the latest of them


@dataclass(eq=False)
class _Running:
    """A model's running batch and the requests of its rows."""

    batch: DecodeBatch
    requests: dict[int, _Request] = field(default_factory=dict)  # id(sequence) -> request


class Batcher:
    def __init__(self, cache: ModelCache, max_batch_size: int = 32, max_wait_ms: float = 20,
                 kv_cache_budget_bytes: int | None = DEFAULT_KV_CACHE_BUDGET_BYTES, observer: Observer | None = None,
                 max_prefills_between_steps: int = MAX_PREFILLS_BETWEEN_STEPS):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1.")
        if max_prefills_between_steps < 1:
            raise ValueError("max_prefills_between_steps must be at least 1.")
        self.max_prefills_between_steps = int(max_prefills_between_steps)
        self.cache = cache
        self.max_batch_size = int(max_batch_size)
        self.max_wait_s = max(0.0, max_wait_ms / 1000)
        self.kv_cache_budget_bytes = kv_cache_budget_bytes
        self.batches_run = 0  # prefills run: groups of requests admitted together, each one forward
        self.observer = observer if observer is not None else Observer()
        self._pending: dict[tuple, list[_Request]] = {}
        self._running: dict[tuple, _Running] = {}  # only the worker thread touches it
        self._last_tag: dict[tuple, str] = {}  # per model, the tag admitted last (round-robin resumes after it)
        # group -> (the model, weakly: a prefix is only valid for the model object it came from,
        # and holding it would defeat the model cache's eviction; the prefix; the last prompt)
        self._prefixes: OrderedDict[tuple, tuple[weakref.ref, SharedPrefix | None, list[int] | None, str | None]] = (
            OrderedDict())
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="inference-batcher", daemon=True)
        self._thread.start()

    def submit(self, model_key: str, path: os.PathLike | str, prompt: str | None = None,
               params: SamplingParams | None = None, on_token: Callable[[str], None] | None = None, *,
               messages: list[dict] | None = None, adapter_path: os.PathLike | str | None = None,
               device: str = "auto", dtype: Any = None, is_cancelled: Callable[[], bool] | None = None,
               tag: str = "") -> Future:
        """Queue one request; its Future resolves to a GenerationResult.

        `prompt` is the prompt text, or give chat `messages` instead (rendered with the model's
        chat template in the worker). `on_token(text_delta)` streams this request's text; it is
        called on the worker thread, and an exception it raises is logged, not propagated; with
        params.logprobs it is `on_token(text_delta, logprobs)` (the entries since the last call).
        `is_cancelled()`, asked after each generated token (on the worker thread), ends this
        request early with finish_reason "cancelled" and frees its place in the batch; keep it
        cheap. `tag` names whose request it is (a project): when the batch is full, waiting
        requests are admitted round-robin across tags. The result's times count from this call.
        Values that are wrong whatever the model (SamplingParams, message shape) raise
        InferenceInputError here; a prompt too long for the model's context fails the Future
        with InferenceInputError(field="prompt"); a model that cannot be loaded fails it with
        the loader's error. `dtype` may be a serving precision (fp32, bf16, int8: precision.py):
        one the device cannot run, or int8 under an adapter, raises InferenceInputError("precision").
        """
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise InferenceInputError("params", "must be SamplingParams.")
        params.validate()
        if (messages is None) == (prompt is None):
            raise InferenceInputError("messages", "send either chat messages or a prompt, not both and not neither.")
        if prompt is not None and not isinstance(prompt, str):
            raise InferenceInputError("prompt", "must be a string.")
        if messages is not None:
            from .prompts import validate_messages

            validate_messages(messages)
        if dtype in PRECISIONS:  # a serving precision the device cannot run, or int8 under an adapter, is refused here
            check_precision(dtype, resolve_device(device), adapter=adapter_path is not None)
        group = (model_key, str(path), device, str(dtype) if dtype is not None else None)  # one batch per base
        request = _Request(prompt, messages, params, on_token, Future(), is_cancelled,
                           adapter_path=str(adapter_path) if adapter_path is not None else None, tag=str(tag))
        with self._cond:
            if self._closed:
                raise RuntimeError("The batcher is closed.")
            self._pending.setdefault(group, []).append(request)
            self._cond.notify_all()
        return request.future

    def close(self, wait: bool = True) -> None:
        """Stop accepting requests; queued ones are still generated (at once, without waiting)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            self._thread.join()

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the worker thread ------------------------------------------------------------------

    def _work(self) -> None:
        prefills_in_a_row = 0  # admissions since the rows last stepped
        while True:
            with self._cond:
                while True:
                    taken, wait_s = self._take()
                    if taken or self._running:
                        break
                    if not self._pending and self._closed:
                        return  # closed and drained
                    self._cond.wait(wait_s)
            prefilled = self.batches_run
            for group, requests in taken.items():
                self._guard(group, requests, self._admit)
            if self.batches_run > prefilled and prefills_in_a_row < self.max_prefills_between_steps - 1:
                with self._cond:
                    newcomers = bool(self._pending)  # arrived during that prefill: theirs runs first
                if newcomers:
                    prefills_in_a_row += 1
                    continue
            prefills_in_a_row = 0
            for group in list(self._running):
                self._guard(group, [], self._step)

    def _take(self) -> tuple[dict[tuple, list[_Request]], float | None]:
        """Under the lock: the queued requests to admit now, per model, up to the free rows of
        its batch; and how long to wait for the next model whose companions are still awaited."""
        now = time.perf_counter()
        taken: dict[tuple, list[_Request]] = {}
        wait_s = None
        for group, queue in list(self._pending.items()):
            running = self._running.get(group)
            if running is None:  # idle: wait a moment for companions to prefill with
                due = queue[0].arrived + self.max_wait_s
                if not (self._closed or len(queue) >= self.max_batch_size or now >= due):
                    wait_s = due - now if wait_s is None else min(wait_s, due - now)
                    continue
            free = self.max_batch_size - (len(running.batch.rows) if running else 0)
            if free > 0:
                taken[group], queue[:] = round_robin(queue, free, self._last_tag.get(group))
                self._last_tag[group] = taken[group][-1].tag
                if not queue:
                    del self._pending[group]
        return taken, wait_s

    def _guard(self, group: tuple, requests: list[_Request], work: Callable) -> None:
        try:
            work(group, requests)
        except BaseException as exc:  # never let the worker die with futures left pending
            logger.exception("inference batch failed")
            running = self._running.pop(group, None)
            for request in [*requests, *(running.requests.values() if running else ())]:
                _unpin(request)
                if not request.future.done():
                    request.future.set_exception(exc)

    def _admit(self, group: tuple, requests: list[_Request]) -> None:
        for request in requests:
            request.running = request.running or request.future.set_running_or_notify_cancel()
        requests = [r for r in requests if r.running]
        if not requests:
            return
        model_key, path, device, dtype = group
        running = self._running.get(group)
        if running is None:
            try:
                entry = self.cache.load(model_key, path, device=device, dtype=dtype)
            except Exception as exc:
                for request in requests:
                    request.future.set_exception(exc)
                return
            running = _Running(self._new_batch(group, entry.model, entry.tokenizer, entry.adapters))
        batch = running.batch  # newcomers join the model object (and adapters) the batch runs on
        model, tokenizer = batch.model, batch.tokenizer
        admitted: list[_Request] = []
        for index, request in enumerate(requests):
            if request.sequence is None:
                try:  # a bad request, or an adapter that cannot load, fails alone, not its batch
                    text = render_prompt(tokenizer, messages=request.messages, prompt=request.prompt)
                    [ids], _ = prepare(model, tokenizer, [text], request.params)
                    constraint = (batch.constrain(request.params.json_schema)
                                  if request.params.json_schema is not None else None)
                    adapter = None
                    if request.adapter_path is not None:
                        adapter = batch.adapters.acquire(request.adapter_path)
                        request.adapters = batch.adapters
                except Exception as exc:
                    if not isinstance(exc, InferenceInputError):
                        logger.warning("request failed to start: %s", exc)
                    request.future.set_exception(exc)
                    continue
                request.sequence = DecodeSequence(ids, request.params, request.arrived,
                                                  on_token=_logged_on_token(request.on_token),
                                                  is_cancelled=_logged_is_cancelled(request.is_cancelled),
                                                  adapter=adapter, constraint=constraint)
            elif request.adapters is not None and request.adapters is not batch.adapters:
                # requeued, and its model was reloaded meanwhile: pin the adapter on the new one
                _unpin(request)
                try:
                    request.sequence.adapter = batch.adapters.acquire(request.adapter_path)
                except Exception as exc:
                    request.future.set_exception(exc)
                    continue
                request.adapters = batch.adapters
            if not batch.fits([r.sequence for r in admitted] + [request.sequence]):
                self._requeue(group, requests[index:])  # in order: no later request overtakes it
                break
            admitted.append(request)
        if not admitted:
            return
        self._running[group] = running
        running.requests.update((id(r.sequence), r) for r in admitted)
        now = time.perf_counter()
        for request in admitted:
            self._observe("admitted", model_key, request.adapter_path, now - request.arrived)
        self.batches_run += 1
        started = time.perf_counter()
        finished = batch.admit([r.sequence for r in admitted])
        self._resolve(group, running, finished, time.perf_counter() - started)

    def _step(self, group: tuple, _: list[_Request]) -> None:
        running = self._running[group]
        started = time.perf_counter()
        finished = running.batch.step()
        self._resolve(group, running, finished, time.perf_counter() - started)

    def _resolve(self, group: tuple, running: _Running, finished: list[DecodeSequence], seconds: float) -> None:
        """After a prefill or step that took `seconds`: observe it, hand the finished their results."""
        model_key = group[0]
        for request in running.requests.values():  # the rows that ran, those that finished included
            self._observe_tokens(model_key, request)
        batch = running.batch
        rows_run = len(batch.rows) + len(finished)
        tokens_run = batch.tokens_in_flight + sum(len(s.prompt_ids) + len(s.generated) for s in finished)
        for sequence in finished:
            request = running.requests.pop(id(sequence))
            _unpin(request)
            self._observe("finished", model_key, request.adapter_path, tokens=len(sequence.generated),
                          reason=sequence.result.finish_reason)
            request.future.set_result(sequence.result)
        per_token = batch.kv_bytes_per_token
        self._observe("step", model_key, rows=rows_run, max_rows=batch.max_rows, tokens=tokens_run,
                      token_budget=self.kv_cache_budget_bytes // per_token if self.kv_cache_budget_bytes and per_token
                      else None, kv_cache_bytes=batch.kv_cache_bytes, seconds=seconds)
        if not running.batch.rows:  # nothing left: let go of the model, keep its prefix
            del self._running[group]
            batch = running.batch
            self._prefixes[group] = (weakref.ref(batch.model), batch.prefix, batch.last_prompt, batch.last_adapter)
            self._prefixes.move_to_end(group)
            while len(self._prefixes) > KEPT_PREFIXES:
                self._prefixes.popitem(last=False)

    def _observe_tokens(self, model_key: str, request: _Request) -> None:
        sequence = request.sequence
        fresh = len(sequence.generated) - request.tokens_seen
        if fresh <= 0:
            return
        if request.tokens_seen == 0:
            self._observe("first_token", model_key, request.adapter_path, sequence.first_token_at)
            fresh -= 1
        # One token per row per step: the gap since the row's previous token is this step's time.
        if fresh and request.last_token_at is not None:
            self._observe("next_token", model_key, request.adapter_path, sequence.last_token_at - request.last_token_at)
        request.tokens_seen = len(sequence.generated)
        request.last_token_at = sequence.last_token_at

    def _observe(self, what: str, *args: Any, **kwargs: Any) -> None:
        try:
            getattr(self.observer, what)(*args, **kwargs)
        except Exception:  # figures never fail a generation
            logger.exception("inference observer failed on %s", what)

    def _new_batch(self, group: tuple, model: Any, tokenizer: Any, adapters: Any) -> DecodeBatch:
        kept = self._prefixes.pop(group, None)
        prefix, last_prompt, last_adapter = kept[1:] if kept is not None and kept[0]() is model else (None, None, None)
        return DecodeBatch(model, tokenizer, max_rows=self.max_batch_size, kv_budget_bytes=self.kv_cache_budget_bytes,
                           prefix=prefix, last_prompt=last_prompt, last_adapter=last_adapter, adapters=adapters)

    def _requeue(self, group: tuple, requests: list[_Request]) -> None:
        with self._cond:
            self._pending[group] = requests + self._pending.get(group, [])


def round_robin(queue: list, count: int, last_tag: str | None) -> tuple[list, list]:
    """(up to `count` requests to admit, the rest in their order). One request per tag in turn,
    the tags in order of their first request, starting after `last_tag`; oldest first within a
    tag. Requests are anything with a `tag`."""
    by_tag: dict[str, list] = {}
    for request in queue:
        by_tag.setdefault(request.tag, []).append(request)
    tags = list(by_tag)
    if last_tag in by_tag:
        start = tags.index(last_tag) + 1
        tags = tags[start:] + tags[:start]
    picked: list = []
    while len(picked) < count and tags:
        for tag in list(tags):
            if len(picked) == count:
                break
            picked.append(by_tag[tag].pop(0))
            if not by_tag[tag]:
                tags.remove(tag)
    chosen = set(map(id, picked))
    return picked, [r for r in queue if id(r) not in chosen]


def _unpin(request: _Request) -> None:
    """Let go of the request's adapter (it may be evicted once no row uses it)."""
    if request.adapters is not None:
        adapters, request.adapters = request.adapters, None
        adapters.release(request.sequence.adapter)


def _logged_on_token(callback: Callable[[str], None] | None) -> Callable[[str], None] | None:
    if callback is None:
        return None

    def on_token(delta: str, *logprobs) -> None:
        try:
            callback(delta, *logprobs)
        except Exception:
            logger.exception("on_token callback failed")

    return on_token


def _logged_is_cancelled(check: Callable[[], bool] | None) -> Callable[[], bool] | None:
    if check is None:
        return None

    def is_cancelled() -> bool:
        try:
            return bool(check())
        except Exception:
            logger.exception("is_cancelled callback failed")
            return False

    return is_cancelled
