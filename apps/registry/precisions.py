"""Serving precisions of a model: the per-model option (auto, fp32, bf16, int8) and the job that
measures each precision on an inference worker (decode tokens/s, perplexity on a fixed reference
text: workers.inference.precision), whose latest result `auto` follows (selectors.serving_precision)."""

import logging

from django.db import transaction
from django.utils import timezone

from apps.core.errors import Invalid
from apps.core.jobs import JobCancelled, JobRun, ask_to_cancel, enqueue
from apps.projects import policy
from apps.projects.audit import audit_record
from apps.registry import selectors
from apps.registry.models import PrecisionMeasurement, RegisteredModel, ServingPrecision
from apps.registry.tasks import measure_precisions_task
from apps.registry.weights import local_weights

logger = logging.getLogger(__name__)


def serving_precision_set(*, user, model: RegisteredModel, precision, token=None,
                          ip_address: str | None = None) -> RegisteredModel:
    """Set what the inference workers load `model` in (model.register, as registering it). Refused:
    an unknown value; int8 for an adapter (PEFT's LoRA layers wrap the linear layers int8 replaces);
    bf16 where the latest measurement found the inference worker's hardware without it."""
    policy.require(user, "model.register", model, token)
    if not isinstance(precision, str) or precision not in ServingPrecision.values:
        raise Invalid(f"The serving precision is one of {', '.join(ServingPrecision.values)}.",
                      field="serving_precision")
    if precision == ServingPrecision.INT8 and model.kind == RegisteredModel.Kind.ADAPTER:
        raise Invalid("An adapter is not served over int8 weights (PEFT's LoRA layers wrap the linear layers int8 "
                      "replaces); choose fp32 or bf16.", field="serving_precision")
    measurement = selectors.latest_precision_measurement(model)
    unsupported = {row["precision"]: row.get("error") for row in (measurement.results if measurement else [])
                   if row.get("error")}
    if precision in unsupported:
        raise Invalid(f"{precision} cannot run on the inference worker ({measurement.device}): "
                      f"{unsupported[precision]}", field="serving_precision")
    with transaction.atomic():
        before = model.serving_precision
        model.serving_precision = precision
        model.save(update_fields=["serving_precision"])
        audit_record(actor=user, action="model.serving_precision", project=model.project, target=model,
                     ip_address=ip_address, before={"serving_precision": before},
                     after={"serving_precision": precision})
    return model


def precision_measurement_start(*, user, model: RegisteredModel, token=None,
                                ip_address: str | None = None) -> PrecisionMeasurement:
    """Queue the measurement of `model` in each precision on an inference worker (an adapter is
    measured over its base, alone: adapters are not served over int8)."""
    policy.require(user, "model.register", model, token)
    if model.status != RegisteredModel.Status.READY or (model.base_model_id and
                                                        model.base_model.status != RegisteredModel.Status.READY):
        raise Invalid(f"The model “{model.name}” is {model.status}; measure it once it is ready.", field="model")
    with transaction.atomic():
        job = PrecisionMeasurement.objects.create(model=model, created_by=user)
        audit_record(actor=user, action="model.measure_precisions", project=model.project, target=model,
                     ip_address=ip_address, after={"job": job.pk})
        transaction.on_commit(lambda: _enqueue(job.pk))
    return job


def precision_measurement_cancel(*, user, job: PrecisionMeasurement, token=None,
                                 ip_address: str | None = None) -> PrecisionMeasurement:
    """A queued measurement ends at once; a running one stops before its next precision."""
    policy.require(user, "model.register", job.model, token)
    with transaction.atomic():
        job = ask_to_cancel(PrecisionMeasurement, job.pk, what="measurement")
        audit_record(actor=user, action="model.measure_precisions.cancel", project=job.model.project,
                     target=job.model, ip_address=ip_address, after={"job": job.pk})
    return job


def _enqueue(job_id: int) -> None:
    enqueue(measure_precisions_task, job_id, queue=PrecisionMeasurement.QUEUE,
            on_failure=lambda reason: PrecisionMeasurement.objects.filter(pk=job_id).update(
                state=PrecisionMeasurement.State.FAILED, finished_at=timezone.now(), error=reason))


def run_precision_measurement(job_id: int, *, worker: str = "") -> None:
    """On an inference worker: load the model's base in each precision and measure it."""
    from workers.inference.cache import resolve_device
    from workers.inference.precision import measure_precisions

    device = resolve_device("auto")
    run = JobRun.claim(PrecisionMeasurement, job_id, worker=worker, what="measurement", device=device)
    if run is None:
        return  # ended, gone, or measured by a live worker (apps.core.jobs.JobRun.claim)
    model = RegisteredModel.objects.select_related("base_model").get(pk=run.job.model_id)
    base = model.base_model if model.kind == RegisteredModel.Kind.ADAPTER else model

    def on_progress(done: int, total: int) -> bool:
        try:
            run.progress(done, total)
        except JobCancelled:  # a person asked to stop: the engine stops before its next precision
            return True
        return False

    with run:
        try:
            measured = measure_precisions(local_weights(base), device=device, on_progress=on_progress)
        except Exception as exc:
            logger.exception("precision measurement %s failed", job_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
            return
        results = [m.as_dict() for m in measured]
        if run.cancelled():
            run.cancel(results=results)
        else:
            run.finish(results=results)
