"""Runs one comparison inside an `inference` worker: the adapter between the database, the
channel layer and the comparison engine (workers.comparison.run_grid).

The grid is generated model by model in batches through the worker's shared micro-batcher
and model cache (apps.serving.runner.batcher): a comparison reuses models the playground
already loaded and takes turns with playground requests on the device. After every batch
its cells are stored (keyed by prompt and model, so a rerun skips what is done), published to
`comparison.<id>`, and the cancel flag is read.

It runs as an apps.core.jobs.JobRun, as every job kind: a QUEUED comparison is taken at once; a
RUNNING one only once its heartbeat is stale (its worker died and the broker redelivered the
message: tasks are acked late), and it then continues with the cells not yet stored. A
message for a comparison that ended does nothing, and one whose worker was lost
TRAINING_MAX_RUNS times fails instead of looping. The heartbeat settings are the training
ones (TRAINING_HEARTBEAT_S, TRAINING_HEARTBEAT_STALE_S): one notion of a lost worker. When its
worker is told to stop (SIGTERM), the comparison is handed back after the batch in hand
(JobRun.hand_back): its stored cells are kept and another worker makes the rest.

A provider model's column is called, not generated, before the local columns (a project that
may not send its data out, or a spent budget, then fails the comparison before the device is
busy): through apps.providers.services.provider_chat_for_job, as judges and teachers are (enablement,
the launcher's `provider.use`, the project's privacy and PII redaction, budget, rate limit,
tokens and cost of each call; the client retries timeouts and 5xx with backoff up to the
provider's max_retries). COMPARISON_PROVIDER_CONCURRENCY calls are kept in flight, a rate-limit
refusal being waited out by the call that met it. A call that still fails leaves its cell
with the provider's message; a refusal that is no one call's (privacy, budget, the provider
no longer enabled) fails the comparison with its message. A cell is stored whole when its call
returns, or not at all.
"""

import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connection

from apps.comparison import events, selectors
from apps.comparison.models import Comparison, Output
from apps.core.errors import DomainError
from apps.core.jobs import JobCancelled, JobRun

logger = logging.getLogger(__name__)


def run_comparison(comparison_id: int, *, worker: str = "") -> None:
    """What the `comparison.run` task runs: claim, then generate the cells not yet stored."""
    run = JobRun.claim(Comparison, comparison_id, worker=worker, what="comparison",
                       publish=lambda comparison, **_: events.comparison_state(comparison),
                       every_s=0)  # every batch is stored, published and checks the cancel flag
    if run is None:
        return  # already ended, cancelled while queued, deleted, or running elsewhere
    with run:
        _run(run)


def _run(run: JobRun) -> None:
    from apps.providers.services import ProviderError
    from apps.registry.weights import model_paths
    from apps.serving.runner import batcher, engine_key
    from workers.comparison import GridCancelled, GridModel, GridPrompt, call_column, run_grid
    from workers.inference import SamplingParams

    comparison = run.job
    comparison_id = comparison.pk
    events.comparison_state(comparison)
    if run.stopping():  # its worker is stopping (a message it took meanwhile): not a model loaded
        run.hand_back()
        return
    contestants = selectors.contestants(comparison)
    prompts = {p.position: p for p in comparison.prompts.all()}
    by_column = {c.position: c for c in contestants}
    grid_prompts = [GridPrompt(row=p.position, text=p.text, reference=p.reference) for p in prompts.values()]
    done = set(Output.objects.filter(comparison=comparison).values_list("prompt__position", "contestant__position"))
    params = dict(comparison.params)
    params["stop"] = tuple(params.get("stop") or ())

    def on_cells(cells) -> bool:
        close_old_connections()
        if not Comparison.objects.filter(pk=comparison_id).exists():
            return True  # deleted while running
        stored = Output.objects.bulk_create(
            [Output(comparison_id=comparison_id, prompt=prompts[c.row], contestant=by_column[c.column], text=c.text,
                    error=c.error, finish_reason=c.finish_reason, prompt_tokens=c.prompt_tokens,
                    completion_tokens=c.completion_tokens, latency_s=c.latency_s, tokens_per_s=c.tokens_per_s,
                    scores=c.scores) for c in cells],
            update_conflicts=True, unique_fields=["prompt", "contestant"],
            update_fields=["text", "error", "finish_reason", "prompt_tokens", "completion_tokens", "latency_s",
                           "tokens_per_s", "scores", "created_at"])
        events.cells(comparison_id, [{**selectors.cell_payload(o), "prompt": o.prompt.pk,
                                      "contestant": o.contestant.pk} for o in stored],
                     selectors.model_summaries(Comparison(pk=comparison_id)))
        # Written and published; raises JobCancelled when a person asked to stop it.
        run.progress(Output.objects.filter(comparison_id=comparison_id).count())
        return run.stopping()  # its worker is stopping: handed back after this batch

    try:
        models = []
        for c in contestants:
            if c.provider_model_id:
                continue  # called, below
            base, adapter = model_paths(c.model)  # from the artifact bucket on a machine without them
            models.append(GridModel(column=c.position, key=engine_key(c.model, adapter), path=str(base),
                                    adapter_path=str(adapter) if adapter else None,
                                    chat=bool((c.model.info or {}).get("chat_template"))))
        for c in contestants:
            if c.provider_model_id:
                call_column(c.position, grid_prompts, _column_call(comparison, c, params), on_cells=on_cells,
                            concurrency=settings.COMPARISON_PROVIDER_CONCURRENCY, done=done,
                            cell_errors=(ProviderError,))
        run_grid(models, grid_prompts, SamplingParams(**params), batcher=batcher(), on_cells=on_cells, done=done,
                 batch_size=settings.INFERENCE_MAX_BATCH_SIZE, timeout_s=settings.INFERENCE_TIMEOUT_S)
    except JobCancelled:
        close_old_connections()
        run.cancel()
        return
    except GridCancelled:  # deleted while running (then nothing is written), or its worker is stopping
        close_old_connections()
        if not run.hand_back():
            run.cancel()
        return
    except DomainError as exc:  # a provider column refused (privacy, budget, no longer enabled), weights unavailable
        close_old_connections()
        run.fail(exc.message[:2000])
        return
    except Exception as exc:  # a model that cannot load, a timeout: the scientist sees why
        logger.exception("comparison %s failed", comparison_id)
        close_old_connections()
        run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        return
    close_old_connections()
    run.finish()


def _column_call(comparison: Comparison, contestant, params: dict):
    """The provider column's call of one prompt (as one user message), with the comparison's
    sampling (top_k has no OpenAI equivalent and is not sent), for the person who launched it;
    safe from the engine's threads: each gives its database connection back after a call."""
    from apps.providers.services import provider_chat_for_job
    from workers.comparison import Answer

    sampling = {"max_tokens": params["max_new_tokens"], "temperature": params["temperature"],
                "top_p": params.get("top_p"), "seed": params.get("seed"), "stop": list(params["stop"]) or None}
    runner_thread = threading.get_ident()

    def ask(text: str) -> Answer:
        try:
            reply = provider_chat_for_job(comparison.project, contestant.provider_model_id,
                                          [{"role": "user", "content": text}], launcher=comparison.created_by,
                                          **sampling)
        finally:
            if threading.get_ident() != runner_thread:
                connection.close()
        return Answer(text=reply.text, finish_reason=reply.finish_reason, prompt_tokens=reply.prompt_tokens,
                      completion_tokens=reply.completion_tokens)
    return ask
