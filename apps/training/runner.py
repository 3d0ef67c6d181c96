"""Runs one fine-tune inside a worker: the adapter between the database, the channel layer
and the training engine (workers.training).

It runs as an apps.core.jobs.JobRun: a QUEUED job is taken at once, a RUNNING one only once its
heartbeat is stale (its worker died; the broker redelivered the message or the reaper re-sent
it), and the engine then resumes from the last complete checkpoint in the job's output folder.
A message for a job that already ended does nothing (the broker may redeliver it), and a job
whose worker was lost TRAINING_MAX_RUNS times fails instead of looping (an OOM kill would
otherwise be redelivered forever). When its worker is told to stop, the job checkpoints at the
next step and is handed back to the queue (JobRun.hand_back), to resume on another worker. With an
artifact bucket, each checkpoint and the final adapter are uploaded to it too, and a worker whose own
folder lacks the job's newest checkpoint takes it from there (apps.training.bucket): the other worker
may be on another machine.

A worker's writes are fenced by its claim (the row's `runs` and `worker` when it took the job): a worker
that lost the job while it ran (its heartbeat went stale in a long pause or a network partition, and
another worker took the job over) finds its next row write refused and stops (LeaseLost) without
writing more; its bucket folders carry its claim, so they never replace the new owner's
(apps.training.bucket). A checkpoint it wrote in a local folder that the owner shares (both workers on
one machine) was never recorded on the row: the engine is told the row's step (`resume_up_to`), removes
the checkpoints above it once the model is loaded, and never resumes from one of them.
"""

import logging
import time
import traceback
from pathlib import Path

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from apps.core import storage
from apps.core.jobs import JobRun, send_job
from apps.registry.weights import local_weights
from apps.training import bucket, events
from apps.training.capacity import worker_devices
from apps.training.models import MetricPoint, TrainingJob
from workers.training import ConfigError, TrainCallbacks, TrainCancelled, TrainConfig, TrainingDataError, train
from workers.training.checkpoint import checkpoints_dir_of
from workers.training.distributed import (
    DistributedTrainingError,
    RendezvousTimeout,
    ReportedElsewhere,
    follow_run,
    train_distributed,
)

logger = logging.getLogger(__name__)

LOG_TAIL_LINES = 200
MAX_EVAL_ROWS = 512  # evaluation runs at every eval step: a bounded, fixed slice of the eval split


class LeaseLost(Exception):
    """This worker's claim of the job is no longer the row's: another worker took the job over."""


def output_dir(job: TrainingJob) -> Path:
    """Server-owned: checkpoints and the final adapter. Resume reads only from here."""
    return Path(settings.ARTIFACT_ROOT) / "training" / f"job-{job.pk}"


def run_job(job_id: int, *, worker: str, pid: int) -> None:
    if _leave_for_another(job_id, worker):
        return
    run = _claim(job_id, worker=worker, pid=pid)
    if run is None:
        return
    events.job_state(run.job)
    with run:
        try:
            _train(run)
        finally:
            if run.job.nodes > 1:  # slots no worker took: nothing may start once node 0 is done
                from apps.training.nodes import close_run

                close_old_connections()
                close_run(run.job)


def run_on_cluster(job_id: int, *, worker: str, pid: int) -> bool:
    """Relay a job that a cluster's training operator runs (apps.training.manifests): claim it as a worker
    would, hand its rank 0's events from the shared volume to the row, write STOP when it is cancelled,
    and end it as a worker ends a job (the adapter registered). False when it could not be claimed."""
    run = _claim(job_id, worker=worker, pid=pid)
    if run is None:
        return False
    events.job_state(run.job)
    with run:
        _train(run, on_cluster=True)
    return True


def _claim(job_id: int, *, worker: str, pid: int) -> JobRun | None:
    """The job under this worker's (or relay's) lease, its state published on each change."""
    return JobRun.claim(TrainingJob, job_id, worker=worker, what="job", worker_pid=pid,
                        on_given_up=lambda lost: transaction.on_commit(lambda: events.job_state(lost)),
                        publish=lambda job, **_: events.job_state(job),
                        every_s=0)  # the cancel flag and the worker's stop are read at every step


def _leave_for_another(job_id: int, worker: str) -> bool:
    """True when the job is not this worker's to run: a cluster runs it (apps.training.manifests: its relay
    claims it), or it needs more devices than this worker advertises (its message is sent on to the
    job's device queue, which only workers with enough devices consume). The job is not claimed, so it
    stays queued and no run is counted. A message reaches a worker with too few devices only when sent
    to plain `gpu` by hand or by an older release (apps.training.capacity routes every launch)."""
    job = TrainingJob.objects.filter(pk=job_id).only("state", "config", "info").first()
    if job is not None and job.info.get("cluster"):  # queued, or running with its relay's heartbeat stale
        logger.info("job %s runs on the cluster as %s: worker %s leaves it", job_id, job.info["cluster"], worker)
        return True
    if job is None or job.state != TrainingJob.State.QUEUED or job.devices <= worker_devices():
        return False
    logger.info("job %s needs %s devices; worker %s has %s: sent on to %s", job_id, job.devices, worker,
                worker_devices(), TrainingJob.broker_queue(job_id))
    send_job(TrainingJob, job_id)
    return True


def _rows(job: TrainingJob, split: str, limit: int | None = None) -> list[dict]:
    return version_rows(job.dataset_version, split, job.method, limit, label_column=job.config.get("label_column", "label"))


def version_rows(version, split: str, method: str, limit: int | None = None, *, label_column: str = "label") -> list[dict]:
    """A version's rows (of one split) as the engine takes them: the columns, plus the keys the method
    reads beyond them (dpo: the rejected answer), which exports keep in the row's metadata, and for a
    method that reads classes (classify) the class under "label", from the label column or, for any other
    `label_column`, the row's metadata key of that name."""
    from workers.training.methods import get_method

    rows = version.rows.order_by("position")
    if split:
        rows = rows.filter(split=split)
    spec = get_method(method).ROWS
    extra = spec.extra
    if extra or spec.label:
        rows = rows.values("prompt", "response", "messages", "label", "metadata")
        result = []
        for r in rows[:limit] if limit else rows:
            metadata = r["metadata"] or {}
            row = {"prompt": r["prompt"], "response": r["response"], "messages": r["messages"],
                   **{key: metadata.get(key) for key in extra}}
            if spec.label:
                row["label"] = r["label"] if label_column == "label" else metadata.get(label_column)
            result.append(row)
        return result
    rows = rows.values("prompt", "response", "messages")
    return list(rows[:limit] if limit else rows)


def _train(run: JobRun, *, on_cluster: bool = False) -> None:
    from apps.registry.services import adapter_lineage
    from apps.training.speed import preload_engine

    job = run.job
    if not on_cluster:
        preload_engine()  # once per worker process; not part of the setup time this job records
    callbacks = JobCallbacks(job, run)
    try:
        lineage = adapter_lineage(job)  # hashes the base's weights the first time: before the run, not after
        callbacks.start_clock()  # that hash is once per model, not part of the setup this job records
        if storage.bucket_enabled() and job.checkpoint_step:
            fetched = callbacks.with_bucket(
                "reading the checkpoints in the artifact bucket", "resuming from this machine's own checkpoints, if any",
                bucket.fetch_checkpoint, job.pk, checkpoints_dir_of(output_dir(job)), up_to_step=job.checkpoint_step,
                run=job.checkpoint_run, log=callbacks.log)
            if fetched:
                callbacks.log(f"took the checkpoint at step {fetched} from the artifact bucket")
        config, arguments = engine_arguments(job, callbacks, lineage)
        result = _run_engine(job, config, arguments, on_cluster=on_cluster)
        timing = {"rows": arguments["train_rows"], "setup_s": callbacks.setup_s,
                  "eval_seconds": callbacks.eval_seconds}
        callbacks.check_claim()
        # Where the bucket holds the adapter, for workers on other machines (None: on this machine only).
        uploaded = storage.bucket_enabled() and callbacks.with_bucket(
            "uploading the adapter to the artifact bucket", "it is on this machine only",
            bucket.upload_adapter, job.pk, run.job.runs, result.adapter_dir)
    except LeaseLost as exc:
        close_old_connections()
        logger.warning("job %s: %s; this worker stopped it without writing more", job.pk, exc)
        return
    except ReportedElsewhere:  # global rank 0 ran on another machine, whose worker ends the job
        from apps.training.nodes import wait_for_the_end

        close_old_connections()
        wait_for_the_end(job)
        return
    except TrainCancelled as exc:
        close_old_connections()
        # Across machines the ranks also stop when another machine's worker is told to stop: no cancel.
        if callbacks.handing_back or (job.nodes > 1 and not run.cancelled()):
            callbacks.log(f"handed back at step {exc.step}: its worker is stopping; another resumes it")
            run.hand_back()
            return
        callbacks.log(f"cancelled at step {exc.step}")
        run.cancel()
        return
    except (TrainingDataError, ConfigError) as exc:
        close_old_connections()
        run.fail(str(exc), traceback=traceback.format_exc())
        return
    except Exception as exc:  # the scientist sees a summary and the traceback on the job page
        logger.exception("job %s failed", job.pk)
        close_old_connections()
        if (job.nodes > 1 and not on_cluster and isinstance(exc, DistributedTrainingError)
                and not isinstance(exc, RendezvousTimeout)):
            from apps.training.nodes import run_again

            if run_again(run, callbacks, str(exc)):
                return
        run.fail(f"{type(exc).__name__}: {exc}"[:2000], traceback=traceback.format_exc())
        return
    _succeed(run, result, timing, bucket_prefix=uploaded or "")


def _run_engine(job: TrainingJob, config: TrainConfig, arguments: dict, *, on_cluster: bool):
    if on_cluster:  # the cluster's pods train (apps.training.manifests); this process relays their events
        return follow_run(output_dir(job) / "ddp", arguments["callbacks"],
                          silent_after_s=settings.TRAINING_CLUSTER_SILENCE_S)
    if config.nodes > 1:  # this worker is node 0: it opens the run's rendezvous and its slots
        from apps.training.nodes import open_run

        arguments["rendezvous"] = open_run(job)
    if config.devices > 1 or config.nodes > 1:
        return train_distributed(config, devices_here=worker_devices(),
                                 rendezvous_timeout_s=settings.TRAINING_RENDEZVOUS_TIMEOUT_S, **arguments)
    return train(config, **arguments)


def engine_arguments(job: TrainingJob, callbacks: TrainCallbacks, lineage: dict) -> tuple[TrainConfig, dict]:
    """The job's config and the engine's keyword arguments on this machine (its weights, its output folder)."""
    config = TrainConfig.from_dict(job.config)
    train_rows = _rows(job, job.train_split)
    eval_rows = _rows(job, job.eval_split, MAX_EVAL_ROWS) if job.eval_split else []
    # devices or nodes > 1: torchrun's processes train, this one relays rank 0's events to the callbacks.
    # A checkpoint the row never recorded was written by a claim that lost the job (or was cut off before
    # its record): the engine removes it and resumes from the row's, as a worker elsewhere does from the bucket.
    return config, dict(model_dir=local_weights(job.base_model), output_dir=output_dir(job), train_rows=train_rows,
                        eval_rows=eval_rows, callbacks=callbacks, lineage=lineage,
                        resume_up_to=job.checkpoint_step or 0)


def _succeed(run: JobRun, result, timing: dict, *, bucket_prefix: str) -> None:
    from apps.evaluation.services import eval_runs_after_fine_tune
    from apps.registry.services import adapter_register
    from apps.training.speed import record_job_speed

    job = run.job
    close_old_connections()
    with transaction.atomic():
        if not _claimed(run).filter(state=TrainingJob.State.RUNNING).select_for_update().exists():
            logger.warning("job %s: taken over by another worker before its adapter was registered; this "
                           "worker's is not", job.pk)
            if bucket_prefix:  # its own upload, which nothing will point to
                try:
                    storage.delete_folder(bucket_prefix)
                except Exception:
                    logger.exception("job %s: removing this worker's adapter from the artifact bucket failed", job.pk)
            return
        job.refresh_from_db()
        adapter = adapter_register(job=job, adapter_dir=result.adapter_dir, metrics=result.metrics,
                                   bucket_prefix=bucket_prefix)
        job.adapter, job.metrics, job.current_step = adapter, result.metrics, result.final_step
        job.tokens_trained = result.metrics.get("tokens_trained", job.tokens_trained)
        job.save(update_fields=["adapter", "metrics", "current_step", "tokens_trained"])
        run.finish()
    try:  # the project's auto-run suites: a failure to queue them must not undo the fine-tune's success
        with transaction.atomic():
            eval_runs_after_fine_tune(job)
    except Exception:
        logger.exception("job %s: queueing its auto-run eval suites failed", job.pk)
    try:  # the next estimates learn this machine's speed; a failure here must not fail the job
        record_job_speed(job, **timing)
    except Exception:
        logger.exception("job %s: recording its speed failed", job.pk)


def _claimed(run: JobRun):
    """The job's row while it is still `run`'s claim (the fencing token: its count of claims and worker)."""
    return TrainingJob.objects.filter(pk=run.job.pk, runs=run.job.runs, worker=run.job.worker)


class JobCallbacks(TrainCallbacks):
    """The engine's callbacks: each metric point is upserted by (job, kind, step) and published."""

    def __init__(self, job: TrainingJob, run: JobRun | None = None) -> None:
        self.job = job
        self.run = run or JobRun(job, every_s=0)  # its cancel and stop checks
        self.handing_back = False
        self._lines: list[str] = job.log_tail.splitlines()[-LOG_TAIL_LINES:]
        # Timings for the speed this run records (apps.training.speed): loading until the first step, evals.
        self._created = time.perf_counter()
        self.setup_s: float | None = None
        self.eval_seconds: list[float] = []

    def start_clock(self) -> None:
        self._created = time.perf_counter()

    def on_start(self, *, total_steps: int, resumed_from_step: int, info: dict) -> None:
        self.setup_s = time.perf_counter() - self._created
        self.job.total_steps = total_steps
        self.job.info = {**self.job.info, **info, "resumed_from_step": resumed_from_step}
        self._write(total_steps=total_steps, info=self.job.info)
        self.log(f"resumed from the checkpoint at step {resumed_from_step}" if resumed_from_step
                 else f"started: {total_steps} steps on {info.get('device', '?')}")
        events.job_state(self.job)

    def on_step(self, point: dict) -> None:
        self._write(current_step=point["step"], tokens_trained=point.get("tokens_seen", 0))
        self.job.current_step, self.job.tokens_trained = point["step"], point.get("tokens_seen", 0)
        self._upsert(MetricPoint.Kind.TRAIN, point)

    def on_eval(self, point: dict, samples: list[dict]) -> None:
        self.eval_seconds.append(point.get("seconds", 0.0))
        self.check_claim()
        self._upsert(MetricPoint.Kind.EVAL, {**point, "samples": samples})

    def on_checkpoint(self, *, step: int, path: str) -> None:
        # Uploaded under this claim's tag before the row records it: a worker on another machine trusts the
        # row's step and claim. A claim that lost the job has its row write refused: its upload is removed.
        claim = self.run.job.runs
        uploaded = storage.bucket_enabled() and self.with_bucket(
            f"uploading the checkpoint at step {step} to the artifact bucket", "another machine cannot resume from it",
            bucket.upload_checkpoint, self.job.pk, step, claim, Path(path))
        try:
            self._write(checkpoint_step=step, checkpoint_run=claim)
        except LeaseLost:
            if uploaded:
                self.with_bucket(f"removing this worker's checkpoint at step {step} from the artifact bucket",
                                 "it stays there, unused", bucket.delete_checkpoint, self.job.pk, step, claim)
            raise
        self.job.checkpoint_step, self.job.checkpoint_run = step, claim
        if uploaded:
            self.with_bucket("pruning the checkpoints in the artifact bucket", "older ones stay there",
                             bucket.prune_checkpoints, self.job.pk, step, claim)
        events.job_state(self.job)  # open pages show the new checkpoint

    def check_claim(self) -> None:
        """LeaseLost unless the row is still this run's claim."""
        if not _claimed(self.run).exists():
            raise LeaseLost(f"its claim {self.run.job.runs} by {self.run.job.worker} was taken over")

    def _write(self, **fields) -> None:
        """Write `fields` on the job's row while it is this run's claim; LeaseLost when it no longer is."""
        if not _claimed(self.run).update(**fields):
            raise LeaseLost(f"its claim {self.run.job.runs} by {self.run.job.worker} was taken over")

    def should_stop(self) -> bool:
        """A person cancelled the job, or its worker is stopping (then the job is handed back:
        the engine's stop checkpoints either way)."""
        if self.run.cancelled():
            return True
        self.handing_back = self.run.stopping()
        return self.handing_back

    def with_bucket(self, what: str, meaning: str, action, *args, **kwargs):
        """`action(*args, **kwargs)`'s result, or None when the artifact bucket failed it: that is logged
        (`what` failed, `meaning`) and the run goes on with this machine's files, as without a bucket;
        the next checkpoint is uploaded whole again."""
        try:
            return action(*args, **kwargs)
        except Exception as exc:
            logger.exception("job %s: %s failed", self.job.pk, what)
            self.log(f"{what} failed ({type(exc).__name__}: {exc}); {meaning}")
            return None

    def log(self, message: str) -> None:
        line = f"{timezone.now():%H:%M:%S} {message}"
        self._lines = [*self._lines, line][-LOG_TAIL_LINES:]
        self.job.log_tail = "\n".join(self._lines)
        if _claimed(self.run).update(log_tail=self.job.log_tail):  # a worker that lost the job writes no more
            events.log_line(self.job.pk, line)

    def _upsert(self, kind: str, point: dict) -> None:
        MetricPoint.objects.bulk_create(
            [MetricPoint(job_id=self.job.pk, kind=kind, step=point["step"], values=point)],
            update_conflicts=True, unique_fields=["job", "kind", "step"], update_fields=["values", "recorded_at"])
        events.metric_point(self.job.pk, kind, point)

