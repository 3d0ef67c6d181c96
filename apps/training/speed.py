"""Time estimates of fine-tunes from measured speed (workers.training.estimate does the arithmetic).

Every finished job records its speed (SpeedMeasurement); when nothing is known yet, the estimate
queues a short calibration run on a `gpu` worker (a few real optimizer steps and one evaluation of the
job's own config, model and rows) instead of guessing, and says so; the web request never trains.
"""

import functools
import json
import logging
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from django.db import transaction
from django.db.models import Q, Sum, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Coalesce, Length
from django.utils import timezone

from apps.core.jobs import JobRun, enqueue
from apps.registry.models import RegisteredModel
from apps.registry.weights import local_weights
from apps.training.models import SpeedMeasurement, TrainingJob
from workers.training.methods import get_method

logger = logging.getLogger(__name__)

DEFAULT_CHARS_PER_TOKEN = 4.0  # English text through a BPE tokenizer, until a run on this model measures it
CALIBRATION_WARMUP_STEPS = 3   # the first steps warm up (allocations, lazy kernels): not timed
CALIBRATION_TIMED_S = 2.0      # then steps are timed for about this long ...
CALIBRATION_MAX_STEPS = 60     # ... or this many steps, whichever comes first
CALIBRATION_PENDING_FOR = timedelta(minutes=10)  # a calibration not done by then is queued again
MAX_EVAL_ROWS = 512            # as the runner evaluates
CALIBRATION_ROWS = 256         # enough rows to measure chars per token; the steps take the first few batches


def text_chars(rows, method: str) -> int:
    """Characters of training text as the runner sees it (rows of dicts): the prompt once per sequence
    the method trains (a DPO pair carries it twice), the response and the method's extra keys (the
    rejected answer); chat messages count as their JSON."""
    reads = get_method(method).ROWS
    total = 0
    for row in rows:
        if row.get("messages") is not None:
            total += len(json.dumps(row["messages"]))
            continue
        prompt, response = row.get("prompt") or "", row.get("response") or ""
        total += len(prompt) + len(response)
        total += (reads.sequences - 1) * len(prompt) + sum(len(row.get(key) or "") for key in reads.extra)
    return total


def rows_chars(rows, method: str, fmt: str) -> int:
    """The same count, in the database, for a queryset of dataset rows."""
    if fmt == "chat":
        expression = Length(Cast("messages", TextField()))
    else:
        reads = get_method(method).ROWS
        expression = Coalesce(Length("prompt"), 0) + Coalesce(Length("response"), 0)
        for _ in range(reads.sequences - 1):
            expression = expression + Coalesce(Length("prompt"), 0)
        for key in reads.extra:
            expression = expression + Coalesce(Length(KeyTextTransform(key, "metadata")), 0)
    return rows.aggregate(chars=Sum(expression))["chars"] or 0


def speed_fields(job: TrainingJob, *, rows: list[dict], setup_s: float | None, eval_seconds: list[float],
                 steps: list[dict] | None = None) -> dict | None:
    """In a worker, after a run: its measured speed as SpeedMeasurement fields, or None when no step was
    timed. `steps` are the run's step points (calibration: the first, a warm-up, is left out); a finished
    job uses its totals."""
    from workers.training.estimate import measured_speed

    info = job.info or {}
    parameters = (job.base_model.info or {}).get("parameters") or info.get("total_params") or 0
    if steps:
        timed = steps[1:] if len(steps) > 1 else steps
        seconds = timed[-1]["elapsed_s"] - (steps[0]["elapsed_s"] if len(steps) > 1 else 0.0)
        tokens = timed[-1]["tokens_seen"] - (steps[0]["tokens_seen"] if len(steps) > 1 else 0)
        step_count = len(timed)
    else:
        last = job.points.filter(kind="train").order_by("-step").first()
        if last is None:
            return None
        seconds, tokens, step_count = last.values.get("elapsed_s", 0.0), last.values.get("tokens_seen", 0), last.step
    speed = measured_speed(parameters=parameters, method=job.method, tokens=tokens, step_seconds=seconds)
    if speed is None:
        return None
    chars, tokens_per_epoch = text_chars(rows, job.method), info.get("tokens_per_epoch")
    return {"base_model_id": job.base_model_id, "method": job.method, "parameters": parameters,
            "device": info.get("device", ""), "worker": job.worker or "", "flops_per_s": speed.flops_per_s,
            "seconds_per_step": seconds / step_count,
            "seconds_per_eval": sum(eval_seconds) / len(eval_seconds) if eval_seconds else None,
            "setup_s": setup_s, "chars_per_token": chars / tokens_per_epoch if chars and tokens_per_epoch else None}


def record_job_speed(job: TrainingJob, *, rows: list[dict], setup_s: float | None,
                     eval_seconds: list[float]) -> SpeedMeasurement | None:
    """In a worker, after a job finished: its measured speed, kept for the next estimates. A data-parallel
    job's speed is several devices' and is not kept: the estimates are of one device."""
    if (job.config or {}).get("devices", 1) > 1:
        return None
    fields = speed_fields(job, rows=rows, setup_s=setup_s, eval_seconds=eval_seconds)
    if fields is None:
        return None
    return SpeedMeasurement.objects.create(job=job, kind=SpeedMeasurement.Kind.JOB,
                                           state=SpeedMeasurement.State.SUCCEEDED, finished_at=timezone.now(),
                                           **fields)


def best_measurement(model: RegisteredModel, method: str) -> SpeedMeasurement | None:
    """The most telling measurement: the same model and method, else the same model, else any (the
    newest of each); the model and method it was on are scaled for through the FLOPs."""
    done = SpeedMeasurement.objects.filter(state=SpeedMeasurement.State.SUCCEEDED, flops_per_s__isnull=False)
    for candidates in (done.filter(base_model=model, method=method), done.filter(base_model=model), done):
        found = candidates.order_by("-created_at", "-id").first()
        if found is not None:
            return found
    return None


def time_estimate(*, model: RegisteredModel, version, train_split: str, eval_split: str, train_config,
                  examples: int) -> dict:
    """{"time_s", "time_breakdown", "time_basis", "calibrating"} for a job with these inputs."""
    from apps.training.services import usable_rows
    from workers.training import estimate

    measurement = best_measurement(model, train_config.method)
    if measurement is None:
        return {"time_s": None, "time_basis": None, "time_breakdown": None,
                "calibrating": _calibrate(model, version, train_split, eval_split, train_config)}
    same_model = measurement.base_model_id == model.pk
    chars_per_token = (measurement.chars_per_token if same_model and measurement.chars_per_token
                       else DEFAULT_CHARS_PER_TOKEN)
    method, fmt = train_config.method, train_config.format
    sequences = get_method(method).ROWS.sequences
    cap = examples * train_config.max_seq_len * sequences  # every example is cut to max_seq_len tokens
    usable = functools.partial(usable_rows, version, fmt=fmt, method=method, label_column=train_config.label_column)
    tokens_per_epoch = min(rows_chars(usable(split=train_split), method, fmt)
                           / chars_per_token, cap) or examples
    per_epoch = estimate.steps_per_epoch(method=method, examples=examples, tokens_per_epoch=tokens_per_epoch,
                                         batch_size=train_config.batch_size, grad_accum=train_config.grad_accum,
                                         max_seq_len=train_config.max_seq_len, packing=train_config.packing)
    steps = train_config.max_steps or train_config.epochs * per_epoch
    eval_tokens = 0.0
    if eval_split:
        eval_rows = usable(split=eval_split).order_by("position")[:MAX_EVAL_ROWS]
        eval_tokens = rows_chars(version.rows.filter(pk__in=eval_rows.values("pk")), method, fmt) / chars_per_token
    evals = estimate.evaluations(steps=steps, eval_every=train_config.eval_every,
                                 eval_at_start=train_config.eval_at_start) \
        if eval_split or train_config.sample_prompts else 0
    parameters = (model.info or {}).get("parameters") or measurement.parameters
    seconds = estimate.job_seconds(
        speed=estimate.Speed(flops_per_s=measurement.flops_per_s, parameters=measurement.parameters or parameters,
                             seconds_per_eval=measurement.seconds_per_eval, setup_s=measurement.setup_s),
        parameters=parameters, method=method,
        train_tokens=estimate.trained_tokens(tokens_per_epoch=tokens_per_epoch, epochs=train_config.epochs,
                                             max_steps=train_config.max_steps, steps_per_epoch=per_epoch),
        evals=evals, eval_tokens=eval_tokens)
    return {"time_s": round(seconds["total"], 1), "calibrating": False,
            "time_breakdown": {key: round(value, 1) for key, value in seconds.items() if key != "total"},
            "time_basis": {"kind": measurement.kind, "job": measurement.job_id, "method": measurement.method,
                           "model": measurement.base_model_id, "device": measurement.device,
                           "flops_per_s": measurement.flops_per_s}}


def _calibrate(model: RegisteredModel, version, train_split: str, eval_split: str, train_config) -> bool:
    """Queue one calibration run for this model and method unless one is already on its way."""
    from apps.training.tasks import calibrate_task

    # A running one is the lease's to see through (the reaper re-sends it if its worker is lost); a queued
    # one whose message never arrived is queued again after a while.
    recent = timezone.now() - CALIBRATION_PENDING_FOR
    on_its_way = (Q(state=SpeedMeasurement.State.QUEUED, created_at__gte=recent)
                  | Q(state=SpeedMeasurement.State.RUNNING))
    if SpeedMeasurement.objects.filter(on_its_way, base_model=model, method=train_config.method).exists():
        return True
    measurement = SpeedMeasurement.objects.create(
        kind=SpeedMeasurement.Kind.CALIBRATION, state=SpeedMeasurement.State.QUEUED, base_model=model,
        method=train_config.method, parameters=(model.info or {}).get("parameters") or 0,
        request={"dataset_version": version.pk, "train_split": train_split, "eval_split": eval_split,
                 "config": train_config.as_dict()})
    transaction.on_commit(lambda: enqueue(
        calibrate_task, measurement.pk, queue="gpu",
        on_failure=lambda reason: SpeedMeasurement.objects.filter(pk=measurement.pk).update(
            state=SpeedMeasurement.State.FAILED, error=reason, finished_at=timezone.now())))
    return True


def preload_engine() -> None:
    """Import torch, transformers and peft before anything is timed: a worker pays that once, not per job."""
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401


def run_calibration(measurement_id: int, *, worker: str) -> None:
    """In a worker: a few real optimizer steps and one evaluation of the requested config on its
    model and rows, timed, then thrown away. Claimed under the lease (apps.core.jobs.JobRun.claim): a
    redelivered message for a calibration done or running under a live worker does nothing."""
    run = JobRun.claim(SpeedMeasurement, measurement_id, worker=worker, what="calibration")
    if run is None:
        return
    with run:
        try:
            measured = _calibrate_on_worker(run.job, worker=worker)
        except Exception as exc:  # the estimate says it could not measure; a later one tries again
            logger.exception("calibration %s failed", measurement_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
        else:
            if measured is None:
                run.fail("no step was timed")
            else:
                run.finish(**measured)


def _calibrate_on_worker(measurement: SpeedMeasurement, *, worker: str) -> dict | None:
    """Run the calibration: its measured speed's fields, or None when no step was timed."""
    from apps.datasets.models import DatasetVersion
    from apps.training.runner import MAX_EVAL_ROWS as RUNNER_EVAL_ROWS
    from apps.training.runner import version_rows
    from workers.training import TrainCallbacks, TrainCancelled, TrainConfig, train

    if measurement.base_model is None:
        raise ValueError("its model was deleted")
    request = measurement.request
    # One evaluation at the start (the base model's: the same work as any later one), then steps.
    config = TrainConfig.from_dict({**request["config"], "max_steps": CALIBRATION_MAX_STEPS, "eval_every": None,
                                    "eval_at_start": True, "checkpoint_every": 10_000, "early_stopping_patience": 0})
    version = DatasetVersion.objects.get(pk=request["dataset_version"])
    method = config.method
    rows = version_rows(version, request["train_split"], method, CALIBRATION_ROWS, label_column=config.label_column)
    eval_rows = (version_rows(version, request["eval_split"], method, RUNNER_EVAL_ROWS, label_column=config.label_column)
                 if request["eval_split"] else [])

    class Timing(TrainCallbacks):
        def __init__(self) -> None:
            self.created, self.setup_s, self.info, self.steps, self.evals = time.perf_counter(), None, {}, [], []

        def on_start(self, *, total_steps, resumed_from_step, info) -> None:
            self.setup_s, self.info = time.perf_counter() - self.created, info

        def on_step(self, point) -> None:
            self.steps.append(point)

        def on_eval(self, point, samples) -> None:
            self.evals.append(point.get("seconds", 0.0))

        def should_stop(self) -> bool:
            timed = self.steps[CALIBRATION_WARMUP_STEPS - 1:]
            return len(timed) > 1 and timed[-1]["elapsed_s"] - timed[0]["elapsed_s"] >= CALIBRATION_TIMED_S

    preload_engine()
    timing = Timing()
    try:
        with tempfile.TemporaryDirectory(prefix="calibration-") as scratch:
            train(config, model_dir=local_weights(measurement.base_model), output_dir=Path(scratch),
                  train_rows=rows, eval_rows=eval_rows, callbacks=timing)
    except TrainCancelled:
        pass  # enough steps timed
    probe = TrainingJob(base_model=measurement.base_model, method=method, info=timing.info, worker=worker)
    return speed_fields(probe, rows=rows, setup_s=timing.setup_s, eval_seconds=timing.evals,
                        steps=timing.steps[CALIBRATION_WARMUP_STEPS - 1:])
