"""The inference engine: batched generation with streaming, a model cache, a continuous batcher.

Plain Python (no Django). Importing this package imports neither torch nor transformers; they
are imported when a model is loaded or run, in worker processes.

    cache = ModelCache(memory_budget_bytes=8 * 2**30, adapter_budget_bytes=2**30)
    model, tokenizer = cache.get("smollm2", directory)            # workers.models.load_for_inference
    tuned, _ = cache.get("smollm2", directory, adapter_path=lora)  # the same base, a LoRA adapter beside it
    prompt = render_prompt(tokenizer, messages=[{"role": "user", "content": "Hi"}])
    [result] = generate_batch(model, tokenizer, [prompt], SamplingParams(max_new_tokens=64),
                              on_token=lambda index, delta: print(delta, end=""))

    with Batcher(cache, max_batch_size=32, max_wait_ms=2) as batcher:   # many callers, one model:
        future = batcher.submit("smollm2", directory, prompt, SamplingParams(max_new_tokens=64))
        result = future.result()       # each request joins the model's running batch at its next step
        batcher.submit("smollm2", directory, prompt, adapter_path=lora)  # same batch, its row through the adapter

Pass `observer=` (an Observer, observe.py) to hear each request's queue wait, first token,
token gaps and end, and each step's batch occupancy and cache size, per model key and adapter.

Bad input (sampling values, message shape, a prompt beyond the context) raises
InferenceInputError(field, message) before the model runs.
"""

from .batcher import Batcher
from .cache import ModelCache
from .errors import InferenceInputError
from .generate import GenerationResult, generate_batch
from .observe import Observer
from .params import SamplingParams
from .prompts import render_prompt

__all__ = [
    "Batcher",
    "GenerationResult",
    "InferenceInputError",
    "ModelCache",
    "Observer",
    "SamplingParams",
    "generate_batch",
    "render_prompt",
]
