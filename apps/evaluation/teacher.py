"""Runs one teacher run inside an `inference` worker: the adapter between the database and the
teacher engine (workers.teaching.run_teacher), then the answers into the dataset's next version
through the import pipeline.

A provider teacher is called through apps.providers.services.provider_chat (enablement, the
launcher's `provider.use`, the project's policy and PII redaction, budget, rate limit; the client
retries 5xx and timeouts with backoff): its ProviderError ends the run failed with the provider's
message. A local teacher generates through the worker's shared batcher and model cache. Answers
are stored a round at a time, so a run taken over goes on with the rows not yet answered. The run
waits for its import and ends with it: a version exists only when the run succeeds.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
import time
from decimal import Decimal

from django.core.files import File
from django.db import connection, transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce

from apps.core.errors import DomainError, PermissionDenied
from apps.core.jobs import JobCancelled, JobRun
from apps.datasets.models import ImportJob
from apps.datasets.services import import_cancel, import_create, import_start
from apps.evaluation import selectors
from apps.evaluation.models import TeacherAnswer, TeacherRun
from apps.evaluation.runner import items_in_flight, local_call, provider_call
from apps.providers.models import ProviderModel
from apps.providers.services import call_cost
from workers.teaching import MESSAGES, TeacherCancelled, run_teacher

logger = logging.getLogger(__name__)

IMPORT_POLL_S = 0.5


def run_teacher_job(run_id: int, *, worker: str = "") -> None:
    """What the `evaluation.teacher_run` task runs: claim, ask for the rows not yet answered, import."""
    run = JobRun.claim(TeacherRun, run_id, worker=worker, what="teacher run")
    if run is None:
        return  # ended, cancelled while queued, deleted, or running elsewhere
    with run:
        try:
            _ask(run)
            version = _import(run)
        except (JobCancelled, TeacherCancelled):
            run.cancel()
        except DomainError as exc:  # the provider's own message, a spent budget, a refused model, a failed import
            run.fail(exc.message[:2000])
        except Exception as exc:
            logger.exception("teacher run %s failed", run_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            run.finish(version=version)


def _ask(run: JobRun) -> None:
    job = TeacherRun.objects.select_related("project", "created_by", "source_version").get(pk=run.job.pk)
    if job.created_by is None:  # the teacher and the import act for the person who launched the run
        raise PermissionDenied("dataset.import", "The person who launched this run is gone; launch it again.")
    items = selectors.teacher_items(job.source_version, job.config["prompt_column"])
    done = set(job.answers.values_list("position", flat=True))
    rows_done, total = len(done), len(items)
    run.progress(rows_done, total)
    sampling = {"temperature": job.config["temperature"], "seed": job.config["seed"]}
    priced = None
    if job.config.get("provider_model"):
        call = provider_call(job.project, job.config, job.created_by, **sampling)
        priced = ProviderModel.objects.get(pk=job.config["provider_model"])
    else:
        call = local_call(job.config, **sampling)
    runner_thread = threading.get_ident()

    def call_and_close(messages):
        try:
            return call(messages)
        finally:
            if threading.get_ident() != runner_thread:  # the engine's thread: give its connection back
                connection.close()

    def on_answers(answers) -> bool:
        nonlocal rows_done
        stored = [TeacherAnswer(run_id=job.pk, position=a.position, response=a.text, prompt_tokens=a.prompt_tokens,
                                completion_tokens=a.completion_tokens,
                                cost=call_cost(a.prompt_tokens, a.completion_tokens, priced) if priced else None)
                  for a in answers]
        totals = {"prompt_tokens": F("prompt_tokens") + sum(a.prompt_tokens for a in stored),
                  "completion_tokens": F("completion_tokens") + sum(a.completion_tokens for a in stored)}
        if any(a.cost is not None for a in stored):
            totals["cost"] = Coalesce(F("cost"), Value(Decimal(0))) + sum(a.cost or 0 for a in stored)
        with transaction.atomic():
            TeacherAnswer.objects.bulk_create(stored)
            TeacherRun.objects.filter(pk=job.pk).update(**totals)
        rows_done += len(stored)
        run.progress(rows_done, total)  # raises JobCancelled once the run is asked to stop
        return False

    run_teacher(items, call=call_and_close, on_answers=on_answers, done=done, concurrency=items_in_flight(job.config))


def _import(run: JobRun):
    """The answers as the dataset's next version, through the import pipeline; waits for it."""
    job = TeacherRun.objects.select_related("source_version__dataset", "created_by", "import_job").get(pk=run.job.pk)
    imported = job.import_job
    if imported is None or imported.state in (ImportJob.State.FAILED, ImportJob.State.CANCELLED):
        imported = _queue_import(job)
        TeacherRun.objects.filter(pk=job.pk).update(import_job=imported)
    while imported.state not in ImportJob.ENDED:
        if run.cancelled():
            import_cancel(user=job.created_by, job=imported)
            raise JobCancelled()
        time.sleep(IMPORT_POLL_S)
        imported.refresh_from_db(fields=["state", "error", "version"])
    if imported.state != ImportJob.State.SUCCEEDED:
        raise DomainError(f"The import of the answers {imported.state}: {imported.error}"[:2000])
    return imported.version


def _queue_import(job: TeacherRun) -> ImportJob:
    """One JSON line a row answered: the row's prompt (or its messages without the last assistant
    turn), the teacher's response and the row's split; the teacher, tokens and cost as metadata."""
    version, column = job.source_version, job.config["prompt_column"]
    answers = {a.position: a for a in job.answers.all()}
    asked = {item.position: item.messages for item in selectors.teacher_items(version, column)}
    answered = [(position, split) for position, split in version.rows.order_by("position")
                .values_list("position", "split").iterator() if position in answers and position in asked]
    roles = {"id": "id", "response": "response", **({"split": "split"} if any(s for _, s in answered) else {})}
    roles.update({"messages": "messages"} if column == MESSAGES else {"prompt": "prompt"})
    with tempfile.NamedTemporaryFile("w+b", suffix=".jsonl") as spool:
        for position, split in answered:
            answer = answers[position]
            prompt = {"messages": asked[position]} if column == MESSAGES else {"prompt": asked[position][-1]["content"]}
            spool.write(json.dumps({
                "id": f"row-{position}", **prompt, "response": answer.response,
                **({"split": split or None} if "split" in roles else {}),
                "teacher": job.config["teacher"], "teacher_run": job.pk, "source_version": version.number,
                "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                "cost": str(answer.cost) if answer.cost is not None else None}, ensure_ascii=False).encode() + b"\n")
        spool.flush()
        spool.seek(0)
        imported = import_create(user=job.created_by, dataset=version.dataset,
                                 upload=File(spool, name=f"teacher-run-{job.pk}.jsonl"))
    return import_start(user=job.created_by, job=imported, mapping=roles,
                        message=f"{len(answers)} answers of {job.config['teacher']} to v{version.number}")
