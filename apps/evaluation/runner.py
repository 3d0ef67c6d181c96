"""Runs one judge run inside an `inference` worker: the adapter between the database and the
judging engine (workers.judging.run_judge).

A provider judge is called through apps.providers.services.provider_chat (enablement, the
launcher's `provider.use`, budget, rate limit, the address; the client retries 5xx and timeouts
with backoff up to the provider's max_retries): its ProviderError ends the run failed with the
provider's message. A local judge generates through the worker's shared batcher and model cache.
Each item's verdicts are stored in one transaction, so a run taken over after its worker died
goes on with the items not yet stored; the summary is written only when the run succeeds.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.db import connection, transaction

from apps.core.errors import DomainError, PermissionDenied, QuotaExceeded
from apps.core.jobs import JobCancelled, JobRun
from apps.evaluation import selectors
from apps.evaluation.models import JudgeRun, TeacherRun, Verdict
from workers.judging import JudgeCancelled, Reply, check_rubric, run_judge
from workers.judging.run import orders

logger = logging.getLogger(__name__)

# A rate-limit refusal shorter than this is waited out (the provider's window is a minute);
# a spent daily budget is not.
MAX_QUOTA_WAIT_S = 65


def run_judge_job(run_id: int, *, worker: str = "") -> None:
    """What the `evaluation.judge_run` task runs: claim, judge the items not yet stored, summarize."""
    run = JobRun.claim(JudgeRun, run_id, worker=worker, what="judge run")
    if run is None:
        return  # ended, cancelled while queued, deleted, or running elsewhere
    with run:
        try:
            _judge(run)
        except (JobCancelled, JudgeCancelled):
            run.cancel()
        except DomainError as exc:  # the provider's own message, a spent budget, a refused model
            run.fail(exc.message[:2000])
        except Exception as exc:
            logger.exception("judge run %s failed", run_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            run.finish(summary=selectors.summarize(JudgeRun.objects.select_related("comparison").get(pk=run_id)))


def _judge(run: JobRun) -> None:
    job = JudgeRun.objects.select_related("comparison", "project", "created_by").get(pk=run.job.pk)
    rubric = check_rubric(job.config["rubric"])
    items, index = selectors.judge_items(job.comparison, rubric)
    done = set(Verdict.objects.filter(run=job).values_list("item", flat=True))
    per_item = len(orders(rubric))
    calls_done = len(done) * per_item
    total = len(items) * per_item
    run.progress(calls_done, total)
    call = provider_call(job) if job.config.get("provider_model") else local_call(job)
    runner_thread = threading.get_ident()

    def call_and_close(messages):
        try:
            return call(messages)
        finally:
            if threading.get_ident() != runner_thread:  # the engine's thread: give its connection back
                connection.close()

    def on_item(verdicts) -> bool:
        nonlocal calls_done
        prompt_id, first_id, second_id = index[verdicts[0].key]
        with transaction.atomic():
            Verdict.objects.bulk_create([
                Verdict(run_id=job.pk, item=v.key, swapped=v.swapped, prompt_id=prompt_id, first_id=first_id,
                        second_id=second_id, raw=v.raw[:20_000], answer=v.answer, parse_error=v.error,
                        prompt_tokens=v.prompt_tokens, completion_tokens=v.completion_tokens) for v in verdicts])
        calls_done += len(verdicts)
        run.progress(calls_done, total)  # raises JobCancelled once the run is asked to stop
        return False

    run_judge(rubric, items, call=call_and_close, on_item=on_item, done=done,
              concurrency=settings.JUDGE_CONCURRENCY)


def provider_call(job: JudgeRun | TeacherRun, *, temperature: float = 0.0, seed: int | None = None):
    """A call to the run's provider model (config["provider_model"], answers of at most
    config["max_tokens"]) for the person who launched it; a short rate-limit refusal is waited out."""
    from apps.providers.services import provider_chat

    sampling = {"temperature": temperature, **({"seed": seed} if seed is not None else {})}

    if job.created_by is None:  # provider_chat checks `provider.use` of whom the run is for
        raise PermissionDenied("provider.use", "The person who launched this run is gone; launch it again.")

    def call(messages: list[dict]) -> Reply:
        while True:
            try:
                reply = provider_chat(job.project, job.config["provider_model"], messages, user=job.created_by,
                                      max_tokens=job.config["max_tokens"], **sampling)
            except QuotaExceeded as exc:
                if exc.retry_after_s > MAX_QUOTA_WAIT_S:
                    raise
                time.sleep(exc.retry_after_s)
                continue
            return Reply(text=reply.text, prompt_tokens=reply.prompt_tokens,
                         completion_tokens=reply.completion_tokens)
    return call


def local_call(job: JudgeRun | TeacherRun, *, temperature: float = 0.0, seed: int | None = None):
    """A call to the run's local model (config["local_model"]) through the worker's shared batcher."""
    from apps.registry.models import RegisteredModel
    from apps.serving.runner import batcher, model_paths
    from workers.inference import SamplingParams

    model = RegisteredModel.objects.select_related("base_model").get(pk=job.config["local_model"])
    base, adapter = model_paths(model)
    key = f"model-{model.base_model_id or model.pk}"
    params = SamplingParams(max_new_tokens=job.config["max_tokens"], temperature=temperature, seed=seed)

    def call(messages: list[dict]) -> Reply:
        future = batcher().submit(key, str(base), params=params, adapter_path=str(adapter) if adapter else None,
                                  messages=messages)
        result = future.result(timeout=settings.INFERENCE_TIMEOUT_S)
        return Reply(text=result.text, prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens)
    return call
