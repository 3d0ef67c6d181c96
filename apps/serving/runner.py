"""Runs generations inside an `inference` worker: one model cache and one continuous batcher per
worker process, shared by its task threads (the worker runs with `--pool threads`), so
concurrent requests for the same base model are decoded together, each joining the running batch
at the next step, each row through its own LoRA adapter or none (one copy of the base, adapters
loaded beside it on demand, evicted LRU under INFERENCE_ADAPTER_BUDGET_BYTES)."""

import logging
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.core.jobs import Heartbeat, claim
from apps.registry.models import RegisteredModel
from apps.serving import events
from apps.serving.models import Generation

logger = logging.getLogger(__name__)

_engine_lock = threading.Lock()
_batcher = None


def batcher():
    global _batcher
    with _engine_lock:
        if _batcher is None:
            from workers.inference import Batcher, ModelCache

            cache = ModelCache(memory_budget_bytes=settings.INFERENCE_MEMORY_BUDGET_BYTES,
                               adapter_budget_bytes=settings.INFERENCE_ADAPTER_BUDGET_BYTES)
            _batcher = Batcher(cache, max_batch_size=settings.INFERENCE_MAX_BATCH_SIZE,
                               max_wait_ms=settings.INFERENCE_MAX_WAIT_MS,
                               kv_cache_budget_bytes=settings.INFERENCE_KV_CACHE_BUDGET_BYTES)
        return _batcher


def model_paths(model: RegisteredModel) -> tuple[Path, Path | None]:
    """(base weights directory, adapter directory or None)."""
    if model.kind == RegisteredModel.Kind.ADAPTER:
        return Path(model.base_model.weights_path), Path(model.weights_path)
    return Path(model.weights_path), None


def run_generation(generation_id: int, *, worker: str = "") -> None:
    claimed = claim(Generation, generation_id, worker=worker, what="generation")
    if claimed is None:
        return  # ended, gone, or running under a live worker (a redelivered message)
    generation = Generation.objects.select_related("model__base_model").get(pk=generation_id)
    if generation.runs > 1:
        # Its worker died mid-answer. Tokens already streamed cannot be taken back, so the answer
        # is not generated again behind the caller's back: the caller learns why and may ask again.
        _end(generation, error="The worker generating this answer was lost; send the request again.")
        return
    with Heartbeat(claimed):
        _generate(generation)


def _generate(generation: Generation) -> None:
    from workers.inference import InferenceInputError, SamplingParams

    generation_id = generation.pk
    if generation.cancel_requested:  # stopped while it waited for a worker: no token is generated
        generation.finish_reason = "cancelled"
        _end(generation)
        return
    params = dict(generation.params)
    if "stop" in params:
        params["stop"] = tuple(params["stop"])
    base, adapter = model_paths(generation.model)
    try:
        future = batcher().submit(f"model-{generation.model.base_model_id or generation.model_id}", base,
                                  generation.prompt, SamplingParams(**params),
                                  on_token=lambda text: events.delta(generation_id, text),
                                  messages=generation.messages, adapter_path=adapter,
                                  is_cancelled=CancelCheck(generation_id))
        result = future.result(timeout=settings.INFERENCE_TIMEOUT_S)
    except InferenceInputError as exc:
        _end(generation, error=str(exc), field=exc.field)
        return
    except Exception as exc:  # a model that cannot load, a timeout: the caller sees why
        logger.exception("generation %s failed", generation_id)
        _end(generation, error=f"{type(exc).__name__}: {exc}"[:2000])
        return
    generation.output, generation.finish_reason = result.text, result.finish_reason
    generation.prompt_tokens, generation.completion_tokens = result.prompt_tokens, result.completion_tokens
    generation.time_to_first_token_s, generation.total_s = result.time_to_first_token_s, result.total_s
    _end(generation)


class CancelCheck:
    """Asked after every token by the batcher's thread: reads the cancel flag after the first
    token, then at most every CHECK_EVERY_S, so a stop lands within a fraction of a second
    without a query per token."""

    CHECK_EVERY_S = 0.1

    def __init__(self, generation_id: int) -> None:
        self.generation_id = generation_id
        self.checked_at = -self.CHECK_EVERY_S  # the first token checks at once
        self.cancelled = False

    def __call__(self) -> bool:
        now = time.monotonic()
        if not self.cancelled and now - self.checked_at >= self.CHECK_EVERY_S:
            self.checked_at = now
            try:  # on the batcher's own thread: one connection, kept, dropped if it broke
                self.cancelled = Generation.objects.filter(pk=self.generation_id, cancel_requested=True).exists()
            except Exception:
                connection.close()
                raise
        return self.cancelled


def _end(generation: Generation, *, error: str = "", field: str = "") -> None:
    generation.state = Generation.State.FAILED if error else Generation.State.SUCCEEDED
    generation.error, generation.error_field, generation.finished_at = error, field, timezone.now()
    # Only what the run produced: a cancel requested meanwhile stays recorded.
    generation.save(update_fields=["state", "error", "error_field", "finished_at", "output", "finish_reason",
                                   "prompt_tokens", "completion_tokens", "time_to_first_token_s", "total_s"])
    events.finished(generation)
