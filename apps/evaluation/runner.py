"""Runs one judge run, or one eval run, inside an `inference` worker: the adapters between the
database and the judging engine (workers.judging.run_judge) or the generation of a comparison's
grid (workers.comparison.run_grid, the batcher and model cache comparisons share).

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

from django.conf import settings
from django.db import close_old_connections, connection, transaction

from apps.core.errors import DomainError, Invalid, PermissionDenied
from apps.core.jobs import JobCancelled, JobRun
from apps.evaluation import selectors
from apps.evaluation.models import EvalItem, EvalRun, Judge, JudgeRun, Verdict
from workers.comparison.run import GridCancelled
from workers.evaluation import JUDGED, aggregate, deltas, gate, judged_scores
from workers.judging import PAIRWISE, JudgeCancelled, PairItem, PointItem, Reply, answer_schema, check_rubric, run_judge
from workers.judging.run import orders

logger = logging.getLogger(__name__)


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
            run.finish(summary=selectors.summarize(
                JudgeRun.objects.select_related("comparison", "dataset_version").get(pk=run_id)))


def _judge(run: JobRun) -> None:
    job = JudgeRun.objects.select_related("comparison", "dataset_version", "project", "created_by").get(pk=run.job.pk)
    rubric = check_rubric(job.config["rubric"])
    if job.comparison_id:
        items, index = selectors.judge_items(job.comparison, rubric)
    else:  # a version's rows: a verdict points at its row
        items = selectors.dataset_judge_items(job.dataset_version, rubric, job.config)
        index = {item.key: (None, None, None) for item in items}
    done = set(Verdict.objects.filter(run=job).values_list("item", flat=True))
    per_item = len(orders(rubric))
    calls_done = len(done) * per_item
    total = len(items) * per_item
    run.progress(calls_done, total)
    call_and_close = judge_call(job.project, job.config, job.created_by, rubric)

    def on_item(verdicts) -> bool:
        nonlocal calls_done
        prompt_id, first_id, second_id = index[verdicts[0].key]
        position = None if prompt_id else int(verdicts[0].key[1:])
        with transaction.atomic():
            Verdict.objects.bulk_create([
                Verdict(run_id=job.pk, item=v.key, swapped=v.swapped, prompt_id=prompt_id, first_id=first_id,
                        second_id=second_id, position=position, raw=v.raw[:20_000], answer=v.answer, parse_error=v.error,
                        prompt_tokens=v.prompt_tokens, completion_tokens=v.completion_tokens) for v in verdicts])
        calls_done += len(verdicts)
        run.progress(calls_done, total)  # raises JobCancelled once the run is asked to stop
        return False

    run_judge(rubric, items, call=call_and_close, on_item=on_item, done=done,
              concurrency=items_in_flight(job.config, per_item))


def items_in_flight(config: dict, calls_per_item: int = 1) -> int:
    """How many items a run asks at once. A local model's calls join one batch of the worker's
    batcher, so they fill its row limit (bench judge_throughput: 1.8x over one at a time with 8
    together, 8.7x with 32); a provider's are bounded by JUDGE_CONCURRENCY, its rate limit aside."""
    if config.get("provider_model"):
        return settings.JUDGE_CONCURRENCY
    return max(1, settings.INFERENCE_MAX_BATCH_SIZE // calls_per_item)


def judge_call(project, config: dict, launcher, rubric):
    """The judge model's call for the engine (config: provider_model or local_model, max_tokens;
    `rubric` the judge's checked rubric), safe from the engine's threads: each gives its database
    connection back after a call."""
    if config.get("provider_model"):
        call = provider_call(project, config, launcher)
    else:  # a local judge's answer is constrained to its rubric's schema: a small model's parses too
        call = local_call(config, json_schema=answer_schema(rubric))
    runner_thread = threading.get_ident()

    def call_and_close(messages):
        try:
            return call(messages)
        finally:
            if threading.get_ident() != runner_thread:  # the engine's thread: give its connection back
                connection.close()
    return call_and_close


def provider_call(project, config: dict, launcher, *, temperature: float = 0.0, seed: int | None = None):
    """A call to config["provider_model"] (answers of at most config["max_tokens"]) for the person
    who launched the run (judges, eval suites, teachers); a short rate-limit refusal is waited out
    (apps.providers.services.provider_chat_for_job)."""
    from apps.providers.services import provider_chat_for_job

    sampling = {"temperature": temperature, **({"seed": seed} if seed is not None else {})}
    if launcher is None:  # refused before the first item, not at every one
        raise PermissionDenied("provider.use", "The person who launched this run is gone; launch it again.")

    def call(messages: list[dict]) -> Reply:
        reply = provider_chat_for_job(project, config["provider_model"], messages, launcher=launcher,
                                      max_tokens=config["max_tokens"], **sampling)
        return Reply(text=reply.text, prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)
    return call


def local_call(config: dict, *, temperature: float = 0.0, seed: int | None = None, json_schema: dict | None = None):
    """A call to config["local_model"] through the worker's shared batcher; with `json_schema`, its
    answer is constrained to JSON valid against it (workers.inference.constrain), unless the model's
    tokenizer cannot be constrained: then it is asked as it is, and its answers parsed as ever."""
    from dataclasses import replace

    from apps.registry.models import RegisteredModel
    from apps.registry.weights import model_paths
    from apps.serving.runner import batcher, engine_key
    from workers.inference import SamplingParams
    from workers.inference.constrain import UnconstrainableTokenizer

    model = RegisteredModel.objects.select_related("base_model").get(pk=config["local_model"])
    base, adapter = model_paths(model)
    key = engine_key(model, adapter)
    params = SamplingParams(max_new_tokens=config["max_tokens"], temperature=temperature, seed=seed,
                            json_schema=json_schema)

    def ask(sampling: SamplingParams, messages: list[dict]):
        future = batcher().submit(key, str(base), params=sampling, messages=messages,
                                  adapter_path=str(adapter) if adapter else None)
        return future.result(timeout=settings.INFERENCE_TIMEOUT_S)

    def call(messages: list[dict]) -> Reply:
        nonlocal params
        try:
            result = ask(params, messages)
        except UnconstrainableTokenizer:  # the grammar engine cannot read its tokenizer: asked as it is
            params = replace(params, json_schema=None)
            result = ask(params, messages)
        return Reply(text=result.text, prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens)
    return call


# --- eval suites ----------------------------------------------------------------------------------

CANDIDATE, BASELINE = 0, 1  # the grid's columns


def run_eval_job(run_id: int, *, worker: str = "") -> None:
    """What the `evaluation.eval_run` task runs: claim, generate and score the outputs not yet
    stored (the baseline's too, unless an earlier run of the suite has its figures), then write
    the aggregates, the delta to the baseline and the gate's verdict. When its worker is told to
    stop, the run goes back to the queue after the batch (or judged item) in hand, its stored
    items kept for whichever worker takes it next."""
    run = JobRun.claim(EvalRun, run_id, worker=worker, what="eval run", every_s=0)
    if run is None:
        return
    with run:
        if run.stopping():  # its worker is stopping (a message it took meanwhile): not a model loaded
            run.hand_back()
            return
        try:
            fields = _evaluate(run)
        except JobCancelled:
            close_old_connections()
            run.cancel()
        except (GridCancelled, JudgeCancelled):  # its worker is stopping: back to the queue, its items kept
            close_old_connections()
            if not run.hand_back():
                run.cancel()
        except DomainError as exc:  # a judge's provider's own message, a spent budget, a refused model
            close_old_connections()
            run.fail(exc.message[:2000])
        except Exception as exc:  # a model that cannot load, a timeout: the scientist sees why
            logger.exception("eval run %s failed", run_id)
            close_old_connections()
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            close_old_connections()
            run.finish(**fields)


def _baseline_figures(job: EvalRun) -> dict | None:
    """The baseline's aggregates when they need no generating: the run's model is the baseline,
    or the suite (fixed prompts, greedy decoding) already ran it, as a run's model or beside one."""
    suite = job.suite
    earlier = selectors.latest_run(suite, suite.baseline_model_id)
    if earlier is not None:
        return earlier.aggregates
    beside = (EvalRun.objects.filter(suite=suite, state=EvalRun.State.SUCCEEDED, items__baseline=True)
              .order_by("-finished_at", "-id").first())
    return beside.baseline_aggregates if beside is not None else None


def _evaluate(run: JobRun) -> dict:
    from apps.registry.weights import model_paths
    from apps.serving.runner import batcher, engine_key
    from workers.comparison import GridModel, GridPrompt, run_grid
    from workers.inference import SamplingParams

    job = EvalRun.objects.select_related("suite__dataset_version", "suite__baseline_model", "model").get(pk=run.job.pk)
    suite = job.suite
    rows = selectors.suite_rows(suite)
    baseline = None
    wins = any(m["metric"] == "win_rate" for m in suite.metrics)  # pairs need the baseline's outputs here
    if suite.baseline_model_id and suite.baseline_model_id != job.model_id and not wins:
        baseline = _baseline_figures(job)
    columns = [(CANDIDATE, job.model)]
    if suite.baseline_model_id and suite.baseline_model_id != job.model_id and baseline is None:
        columns.append((BASELINE, suite.baseline_model))
    models = []
    for column, model in columns:
        base, adapter = model_paths(model)
        models.append(GridModel(column=column, key=engine_key(model, adapter), path=str(base),
                                adapter_path=str(adapter) if adapter else None,
                                chat=bool((model.info or {}).get("chat_template"))))
    prompts = [GridPrompt(row=position, text=text, reference=reference) for position, text, reference in rows]
    by_position = {position: (text, reference) for position, text, reference in rows}
    done = {(position, BASELINE if is_baseline else CANDIDATE)
            for position, is_baseline in EvalItem.objects.filter(run=job).values_list("position", "baseline")}
    total = len(rows) * len(columns)
    run.progress(len(done), total)

    def on_cells(cells) -> bool:
        close_old_connections()
        EvalItem.objects.bulk_create(
            [EvalItem(run_id=job.pk, position=c.row, baseline=c.column == BASELINE, prompt=by_position[c.row][0],
                      reference=by_position[c.row][1] or "", output=c.text, error=c.error, scores=c.scores)
             for c in cells],
            update_conflicts=True, unique_fields=["run", "position", "baseline"],
            update_fields=["output", "error", "scores"])
        run.progress(EvalItem.objects.filter(run=job).count(), total)  # raises JobCancelled when asked to stop
        return run.stopping()  # its worker is stopping: handed back after this batch

    run_grid(models, prompts, SamplingParams(max_new_tokens=suite.max_new_tokens, temperature=0.0), batcher=batcher(),
             on_cells=on_cells, done=done, batch_size=settings.INFERENCE_MAX_BATCH_SIZE,
             timeout_s=settings.INFERENCE_TIMEOUT_S)
    close_old_connections()
    _judge_outputs(run, job, total)

    def figures(is_baseline: bool) -> dict:
        return aggregate(EvalItem.objects.filter(run=job, baseline=is_baseline).values_list("scores", flat=True),
                         suite.metrics)

    values = figures(False)
    if suite.baseline_model_id == job.model_id:
        baseline = values
    elif suite.baseline_model_id and baseline is None:
        baseline = figures(True)
    failures = gate(values, suite.metrics)
    return {"aggregates": values, "baseline_aggregates": baseline or {},
            "delta": deltas(values, baseline) if baseline else {}, "passed": not failures,
            "failures": [f.as_dict() for f in failures]}


def _judge_outputs(run: JobRun, job: EvalRun, generated: int) -> None:
    """Score the run's outputs with the suite's judges: each pointwise judge once per output (every
    criterion the suite asks of it), each pairwise judge once per (output, the baseline's output)
    pair, both orders. An item's judged scores are stored together, so a resumed run judges only
    what is missing; an unreadable answer is stored as no score (counted out of the mean)."""
    judged = [m for m in job.suite.metrics if m["metric"] in JUDGED]
    if not judged:
        return
    items = {(i.position, i.baseline): i for i in EvalItem.objects.filter(run=job)}
    work = []
    for judge_id in dict.fromkeys(m["judge"] for m in judged):
        judge = Judge.objects.filter(pk=judge_id, project_id=job.project_id).first()
        if judge is None:
            raise Invalid(f"The suite's judge {judge_id} was deleted: make the suite again without it.")
        rubric = check_rubric(judge.rubric)
        asked = [m for m in judged if m["judge"] == judge_id]
        keys = [m["key"] for m in asked]
        todo = []
        for (position, is_baseline), item in sorted(items.items()):
            if is_baseline or item.error or all(k in item.scores for k in keys):
                continue
            if rubric.kind == PAIRWISE:
                other = items.get((position, True))
                if other is None or other.error:
                    continue
                todo.append(PairItem(key=str(position), prompt=item.prompt, first=item.output, second=other.output))
            else:
                todo.append(PointItem(key=str(position), prompt=item.prompt, response=item.output))
        config = {"provider_model": judge.provider_model_id, "local_model": judge.local_model_id,
                  "max_tokens": judge.max_tokens}
        work.append((rubric, asked, todo, config))
    total = generated + sum(len(todo) for _, _, todo, _ in work)
    done = generated

    for rubric, asked, todo, config in work:
        scales = {c.name: c.scale for c in rubric.criteria}

        def on_item(verdicts, rubric=rubric, asked=asked, scales=scales) -> bool:
            nonlocal done
            item = items[(int(verdicts[0].key), False)]
            item.scores.update(judged_scores(rubric.kind, verdicts, asked, scales))
            item.save(update_fields=["scores"])
            done += 1
            run.progress(done, total)  # raises JobCancelled once the run is asked to stop
            return run.stopping()  # its worker is stopping: handed back after this item

        run_judge(rubric, todo, call=judge_call(job.project, config, job.created_by, rubric), on_item=on_item,
                  concurrency=items_in_flight(config, len(orders(rubric))))
