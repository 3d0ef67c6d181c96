"""Runs generations inside an `inference` worker: one model cache and one continuous batcher per
worker process, shared by its task threads (the worker runs with `--pool threads`), so
concurrent requests for the same base model are decoded together, each joining the running batch
at the next step, each row through its own LoRA adapter or none (one copy of the base, adapters
loaded beside it on demand, evicted LRU under INFERENCE_ADAPTER_BUDGET_BYTES), the base in the
model's serving precision (apps.registry.selectors.serving_precision), recorded on the generation.
The batcher's observations become this worker's per model and adapter metrics
(apps.monitoring.engine_metrics), published after every generation."""

import logging
import threading
from pathlib import Path

from django.conf import settings

from apps.core.jobs import JobRun
from apps.monitoring import engine_metrics
from apps.registry.models import RegisteredModel
from apps.registry.selectors import serving_precision
from apps.registry.weights import WeightsUnavailable, model_paths
from apps.serving import events
from apps.serving.canary import canary_check
from apps.serving.captures import capture_generation
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
                               kv_cache_budget_bytes=settings.INFERENCE_KV_CACHE_BUDGET_BYTES,
                               max_prefills_between_steps=settings.INFERENCE_MAX_PREFILLS_BETWEEN_STEPS,
                               observer=engine_metrics.observer(memory=cache.memory))
        return _batcher


def engine_key(model: RegisteredModel, adapter: Path | None) -> str:
    """The batcher's key for `model` (one running batch per base model, its adapters' rows in it),
    with the model's metric labels named in this process's observer: the base's name, and the
    adapter's name for the rows of its directory `adapter` (apps.registry.weights.model_paths;
    apps.monitoring.engine_metrics)."""
    key = f"model-{model.base_model_id or model.pk}"
    if adapter is not None:
        engine_metrics.observer().name(key, model.base_model.name, str(adapter), model.name)
    else:
        engine_metrics.observer().name(key, model.name, None, model.name)
    return key


def run_generation(generation_id: int, *, worker: str = "") -> None:
    run = JobRun.claim(Generation, generation_id, worker=worker, what="generation", publish=_published,
                       every_s=CANCEL_CHECK_EVERY_S)
    if run is None:
        return  # ended, gone, or running under a live worker (a redelivered message)
    if run.job.runs > 1:
        # Its worker died mid-answer. Tokens already streamed cannot be taken back, so the answer
        # is not generated again behind the caller's back: the caller learns why and may ask again.
        run.fail("The worker generating this answer was lost; send the request again.")
        return
    with run:
        _generate(run, worker)
    if run.job.alias_id is not None:
        _judge_canary(run.job.alias_id)
        _capture(run.job.pk)


def _capture(generation_id: int) -> None:
    """Keep the answer when its alias logs traffic (apps.serving.captures). Never the answer's failure."""
    try:
        generation = Generation.objects.filter(pk=generation_id).first()
        if generation is not None:
            capture_generation(generation)
    except Exception:
        logger.exception("capturing generation %s failed", generation_id)


def _judge_canary(alias_id: int) -> None:
    """An answer through an alias may be the one that breaks its canary's threshold: judge it now
    rather than at the next periodic check. Never the answer's failure."""
    try:
        canary_check(alias_id)
    except Exception:
        logger.exception("judging the canary of alias %s failed", alias_id)


# The cancel flag (and the worker's stop) is read after the first token, then at most this often,
# so a stop lands within a fraction of a second without a query per token.
CANCEL_CHECK_EVERY_S = 0.1


def _published(generation: Generation, **_) -> None:
    if generation.state in Generation.ENDED:  # a hand-back says nothing: the caller keeps waiting
        events.finished(generation)


def _generate(run: JobRun, worker: str) -> None:
    from workers.inference import InferenceInputError, SamplingParams
    from workers.inference.cache import default_dtype, resolve_device

    generation = run.job
    generation_id = generation.pk
    if generation.cancel_requested:  # stopped while it waited for a worker: no token is generated
        run.finish(finish_reason="cancelled")
        return
    if run.stopping():  # its worker is stopping (a message it took meanwhile): another answers it
        run.hand_back()
        return
    params = dict(generation.params)
    if "stop" in params:
        params["stop"] = tuple(params["stop"])
    precision = serving_precision(generation.model) or default_dtype(resolve_device("auto"))
    stream = _Stream(run)
    try:
        base, adapter = model_paths(generation.model)  # fetched from the artifact bucket on a machine without it
        future = batcher().submit(engine_key(generation.model, adapter), base, generation.prompt, SamplingParams(**params),
                                  on_token=stream.on_token, messages=generation.messages, adapter_path=adapter,
                                  dtype=precision,
                                  is_cancelled=stream.is_cancelled, tag=f"project-{generation.project_id}")
        result = future.result(timeout=settings.INFERENCE_TIMEOUT_S)
    except (InferenceInputError, WeightsUnavailable) as exc:
        engine_metrics.publish(worker)
        run.fail(str(exc), error_field=exc.field)
        return
    except Exception as exc:  # a model that cannot load, a timeout: the caller sees why
        logger.exception("generation %s failed", generation_id)
        engine_metrics.publish(worker)
        run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        return
    # Before the answer ends: whoever reads the figures after it sees this generation counted.
    engine_metrics.publish(worker)
    if stream.handing_back:
        run.hand_back()
        return
    # Only what the run produced: a cancel requested meanwhile stays recorded.
    run.finish(output=result.text, finish_reason=result.finish_reason, prompt_tokens=result.prompt_tokens,
               logprobs=result.logprobs, precision=precision,
               completion_tokens=result.completion_tokens, time_to_first_token_s=result.time_to_first_token_s,
               total_s=result.total_s)


class _Stream:
    """The batcher's callbacks for one answer, on its thread: tokens go to the caller, and after
    each token it asks whether to stop. A cancel stops it (the answer so far is the answer). A
    stopping worker hands the answer back only while the caller has seen none of it (the model's
    first tokens may not yet make text): what was streamed cannot be taken back, so an answer
    already streaming is finished here, within its timeout."""

    def __init__(self, run: JobRun) -> None:
        self.run, self.generation_id = run, run.job.pk
        self.streamed = self.handing_back = False

    def on_token(self, text: str, logprobs: list[dict] | None = None) -> None:
        if self.handing_back:
            return  # the end of an answer handed back: another worker answers from the start
        self.streamed = True
        if logprobs is None:
            events.delta(self.generation_id, text)
        else:
            events.delta(self.generation_id, text, logprobs)

    def is_cancelled(self) -> bool:
        if self.run.cancelled():
            return True
        if not self.streamed and self.run.stopping():
            self.handing_back = True
        return self.handing_back
