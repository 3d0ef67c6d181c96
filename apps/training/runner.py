"""Runs one fine-tune inside a worker: the adapter between the database, the channel layer
and the training engine (workers.training).

Claiming: a QUEUED job is taken at once. A RUNNING job is taken over only when its
heartbeat is stale, i.e. the worker that ran it died (the broker redelivered the message,
or the reaper re-sent it); the engine then resumes from the last complete checkpoint in the
job's output folder. A message for a job that already ended does nothing (SECURITY.md 40),
and a job whose worker was lost TRAINING_MAX_RUNS times fails instead of looping (37).
"""

import logging
import threading
import time
import traceback
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone

from apps.training import events
from apps.training.models import MetricPoint, TrainingJob
from workers.training import ConfigError, TrainCallbacks, TrainCancelled, TrainConfig, TrainingDataError, train

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 200
MAX_EVAL_ROWS = 512  # evaluation runs at every eval step: a bounded, fixed slice of the eval split


def output_dir(job: TrainingJob) -> Path:
    """Server-owned: checkpoints and the final adapter. Resume reads only from here."""
    return Path(settings.ARTIFACT_ROOT) / "training" / f"job-{job.pk}"


def run_job(job_id: int, *, worker: str, pid: int) -> None:
    job = claim(job_id, worker=worker, pid=pid)
    if job is None:
        return
    events.job_state(job)
    heartbeat = Heartbeat(job.pk, pid=pid, runs=job.runs)
    heartbeat.start()
    try:
        _train(job)
    finally:
        heartbeat.stop()


def claim(job_id: int, *, worker: str, pid: int) -> TrainingJob | None:
    """Take the job for this worker, or return None when it is not ours to run."""
    deadline = time.monotonic() + settings.TRAINING_HEARTBEAT_STALE_S + 5
    while True:
        with transaction.atomic():
            job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
            if job is None or job.state in TrainingJob.ENDED:
                return None
            stale_before = timezone.now() - timezone.timedelta(seconds=settings.TRAINING_HEARTBEAT_STALE_S)
            orphaned = job.state == TrainingJob.State.RUNNING and (job.heartbeat_at is None
                                                                   or job.heartbeat_at < stale_before)
            if job.state == TrainingJob.State.QUEUED or orphaned:
                if orphaned and job.runs >= settings.TRAINING_MAX_RUNS:
                    _end(job, TrainingJob.State.FAILED, error=(
                        f"The worker running this job was lost {job.runs} times (out of memory, or the machine "
                        "went away); it was not retried again. Resume it once the cause is fixed."))
                    return None
                job.state, job.runs = TrainingJob.State.RUNNING, job.runs + 1
                job.worker, job.worker_pid, job.heartbeat_at = worker[:200], pid, timezone.now()
                job.started_at = job.started_at or timezone.now()
                job.save(update_fields=["state", "runs", "worker", "worker_pid", "heartbeat_at", "started_at"])
                return job
        # RUNNING with a fresh heartbeat: its worker may have just died (a redelivery comes at
        # once), or it is alive and this message is a duplicate. Wait to find out.
        if time.monotonic() > deadline:
            return None
        time.sleep(min(1.0, settings.TRAINING_HEARTBEAT_STALE_S / 4))


class Heartbeat:
    """A thread that keeps the job's heartbeat fresh while this worker runs it, independent of
    how long one optimizer step or an evaluation takes."""

    def __init__(self, job_id: int, *, pid: int, runs: int) -> None:
        self.job_id, self.pid, self.runs = job_id, pid, runs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-job-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _beat(self) -> None:
        try:
            while not self._stop.wait(settings.TRAINING_HEARTBEAT_S):
                TrainingJob.objects.filter(pk=self.job_id, worker_pid=self.pid, runs=self.runs,
                                           state=TrainingJob.State.RUNNING).update(heartbeat_at=timezone.now())
        except Exception:  # the job goes on; a stale heartbeat only invites a takeover
            logger.exception("heartbeat of job %s stopped", self.job_id)
        finally:
            connection.close()


def _rows(job: TrainingJob, split: str, limit: int | None = None) -> list[dict]:
    rows = job.dataset_version.rows.order_by("position")
    if split:
        rows = rows.filter(split=split)
    if job.method == TrainingJob.Method.DPO:  # the rejected answer is kept as metadata by preference exports
        rows = rows.values("prompt", "response", "messages", "metadata")
        return [{"prompt": r["prompt"], "response": r["response"], "messages": r["messages"],
                 "rejected": (r["metadata"] or {}).get("rejected")} for r in (rows[:limit] if limit else rows)]
    rows = rows.values("prompt", "response", "messages")
    return list(rows[:limit] if limit else rows)


def _train(job: TrainingJob) -> None:
    callbacks = JobCallbacks(job)
    try:
        config = TrainConfig.from_dict(job.config)
        train_rows = _rows(job, job.train_split)
        eval_rows = _rows(job, job.eval_split, MAX_EVAL_ROWS) if job.eval_split else []
        result = train(config, model_dir=Path(job.base_model.weights_path), output_dir=output_dir(job),
                       train_rows=train_rows, eval_rows=eval_rows, callbacks=callbacks)
    except TrainCancelled as exc:
        close_old_connections()
        callbacks.log(f"cancelled at step {exc.step}")
        _end(job, TrainingJob.State.CANCELLED)
        return
    except (TrainingDataError, ConfigError) as exc:
        close_old_connections()
        _end(job, TrainingJob.State.FAILED, error=str(exc), trace=traceback.format_exc())
        return
    except Exception as exc:  # the scientist sees a summary and the traceback on the job page
        logger.exception("job %s failed", job.pk)
        close_old_connections()
        _end(job, TrainingJob.State.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000],
             trace=traceback.format_exc())
        return
    _succeed(job, result)


def _succeed(job: TrainingJob, result) -> None:
    from apps.registry.services import adapter_register

    close_old_connections()
    with transaction.atomic():
        job.refresh_from_db()
        adapter = adapter_register(job=job, adapter_dir=result.adapter_dir, metrics=result.metrics)
        job.adapter, job.metrics, job.current_step = adapter, result.metrics, result.final_step
        job.tokens_trained = result.metrics.get("tokens_trained", job.tokens_trained)
        job.save(update_fields=["adapter", "metrics", "current_step", "tokens_trained"])
        _end(job, TrainingJob.State.SUCCEEDED)


def _end(job: TrainingJob, state: str, *, error: str = "", trace: str = "") -> None:
    job.state, job.error, job.traceback, job.finished_at = state, error, trace, timezone.now()
    job.save(update_fields=["state", "error", "traceback", "finished_at"])
    transaction.on_commit(lambda: events.job_state(job))


class JobCallbacks(TrainCallbacks):
    """The engine's callbacks: each metric point is upserted by (job, kind, step) and published."""

    def __init__(self, job: TrainingJob) -> None:
        self.job = job
        self._lines: list[str] = job.log_tail.splitlines()[-LOG_TAIL_LINES:]

    def on_start(self, *, total_steps: int, resumed_from_step: int, info: dict) -> None:
        self.job.total_steps = total_steps
        self.job.info = {**self.job.info, **info, "resumed_from_step": resumed_from_step}
        self.job.save(update_fields=["total_steps", "info"])
        self.log(f"resumed from the checkpoint at step {resumed_from_step}" if resumed_from_step
                 else f"started: {total_steps} steps on {info.get('device', '?')}")
        events.job_state(self.job)

    def on_step(self, point: dict) -> None:
        self._upsert(MetricPoint.Kind.TRAIN, point)
        self.job.current_step, self.job.tokens_trained = point["step"], point.get("tokens_seen", 0)
        TrainingJob.objects.filter(pk=self.job.pk).update(current_step=self.job.current_step,
                                                          tokens_trained=self.job.tokens_trained)

    def on_eval(self, point: dict, samples: list[dict]) -> None:
        self._upsert(MetricPoint.Kind.EVAL, {**point, "samples": samples})

    def on_checkpoint(self, *, step: int, path: str) -> None:
        self.job.checkpoint_step = step
        TrainingJob.objects.filter(pk=self.job.pk).update(checkpoint_step=step)

    def should_stop(self) -> bool:
        return TrainingJob.objects.filter(pk=self.job.pk, cancel_requested=True).exists()

    def log(self, message: str) -> None:
        line = f"{timezone.now():%H:%M:%S} {message}"
        self._lines = [*self._lines, line][-LOG_TAIL_LINES:]
        self.job.log_tail = "\n".join(self._lines)
        TrainingJob.objects.filter(pk=self.job.pk).update(log_tail=self.job.log_tail)
        events.log_line(self.job.pk, line)

    def _upsert(self, kind: str, point: dict) -> None:
        MetricPoint.objects.bulk_create(
            [MetricPoint(job_id=self.job.pk, kind=kind, step=point["step"], values=point)],
            update_conflicts=True, unique_fields=["job", "kind", "step"], update_fields=["values", "recorded_at"])
        events.metric_point(self.job.pk, kind, point)


def reap_stale_jobs() -> int:
    """Re-send the message of every RUNNING job whose worker went silent (a whole worker
    machine lost, so no redelivery came); the claim above takes it over. Returns how many."""
    from apps.training.services import _enqueue

    stale_before = timezone.now() - timezone.timedelta(seconds=settings.TRAINING_HEARTBEAT_STALE_S)
    stale = list(TrainingJob.objects.filter(state=TrainingJob.State.RUNNING, heartbeat_at__lt=stale_before)
                 .values_list("pk", flat=True))
    for job_id in stale:
        _enqueue(job_id)
    return len(stale)
