"""A thread-based micro-batcher: requests for one model that arrive close together are
generated in one batch.

    batcher = Batcher(cache, max_batch_size=32, max_wait_ms=20)
    future = batcher.submit("smollm2", path, prompt, SamplingParams(max_new_tokens=64))
    result = future.result()

One worker thread runs the batches one after another (one device, one batch at a time). It
takes the model whose oldest request waits longest, waits until that request is `max_wait_ms`
old or `max_batch_size` requests for the model are queued, and generates them together;
requests for other models wait for their own batch.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from .cache import ModelCache
from .errors import InferenceInputError
from .generate import generate_batch, prepare
from .params import SamplingParams
from .prompts import render_prompt

logger = logging.getLogger(__name__)


@dataclass
class _Request:
    prompt: str | None
    messages: list[dict] | None
    params: SamplingParams
    on_token: Callable[[str], None] | None
    future: Future
    is_cancelled: Callable[[], bool] | None = None
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    def __init__(self, cache: ModelCache, max_batch_size: int = 32, max_wait_ms: float = 20):
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1.")
        self.cache = cache
        self.max_batch_size = int(max_batch_size)
        self.max_wait_s = max(0.0, max_wait_ms / 1000)
        self.batches_run = 0  # generate_batch calls made
        self._pending: dict[tuple, list[_Request]] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="inference-batcher", daemon=True)
        self._thread.start()

    def submit(self, model_key: str, path: os.PathLike | str, prompt: str | None = None,
               params: SamplingParams | None = None, on_token: Callable[[str], None] | None = None, *,
               messages: list[dict] | None = None, adapter_path: os.PathLike | str | None = None,
               device: str = "auto", dtype: Any = None, is_cancelled: Callable[[], bool] | None = None) -> Future:
        """Queue one request; its Future resolves to a GenerationResult.

        `prompt` is the prompt text, or give chat `messages` instead (rendered with the model's
        chat template in the worker). `on_token(text_delta)` streams this request's text; it is
        called on the worker thread, and an exception it raises is logged, not propagated.
        `is_cancelled()`, asked after each generated token (on the worker thread), ends this
        request early with finish_reason "cancelled"; keep it cheap.
        Values that are wrong whatever the model (SamplingParams, message shape) raise
        InferenceInputError here; a prompt too long for the model's context fails the Future
        with InferenceInputError(field="prompt"); a model that cannot be loaded fails it with
        the loader's error.
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
        group = (model_key, str(path), str(adapter_path) if adapter_path is not None else None, device,
                 str(dtype) if dtype is not None else None)
        request = _Request(prompt, messages, params, on_token, Future(), is_cancelled)
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
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return  # closed and drained
                group = min(self._pending, key=lambda g: self._pending[g][0].arrived)
                queue = self._pending[group]
                deadline = queue[0].arrived + self.max_wait_s
                while len(queue) < self.max_batch_size and not self._closed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                batch = queue[:self.max_batch_size]
                del queue[:self.max_batch_size]
                if not queue:
                    del self._pending[group]
            try:
                self._run(group, batch)
            except BaseException as exc:  # never let the worker die with futures left pending
                logger.exception("inference batch failed")
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)

    def _run(self, group: tuple, batch: list[_Request]) -> None:
        batch = [r for r in batch if r.future.set_running_or_notify_cancel()]
        if not batch:
            return
        model_key, path, adapter_path, device, dtype = group
        try:
            model, tokenizer = self.cache.get(model_key, path, adapter_path=adapter_path, device=device, dtype=dtype)
        except Exception as exc:
            for request in batch:
                request.future.set_exception(exc)
            return
        ready: list[tuple[_Request, str]] = []
        for request in batch:  # a bad request fails alone, not its batch
            try:
                text = render_prompt(tokenizer, messages=request.messages, prompt=request.prompt)
                prepare(model, tokenizer, [text], request.params)
            except InferenceInputError as exc:
                request.future.set_exception(exc)
                continue
            ready.append((request, text))
        if not ready:
            return

        def on_token(index: int, delta: str) -> None:
            callback = ready[index][0].on_token
            if callback is not None:
                try:
                    callback(delta)
                except Exception:
                    logger.exception("on_token callback failed")

        def is_cancelled(index: int) -> bool:
            check = ready[index][0].is_cancelled
            try:
                return check is not None and bool(check())
            except Exception:
                logger.exception("is_cancelled callback failed")
                return False

        self.batches_run += 1
        try:
            results = generate_batch(model, tokenizer, [text for _, text in ready],
                                     [request.params for request, _ in ready], on_token=on_token,
                                     is_cancelled=is_cancelled)
        except Exception as exc:
            for request, _ in ready:
                request.future.set_exception(exc)
            return
        for (request, _), result in zip(ready, results):
            request.future.set_result(result)
