"""Celery tasks of the model registry: inspections, conversions, merges and exports, run by a worker;
precision measurements, run by an inference worker."""

from celery import shared_task


@shared_task(name="registry.inspect")
def inspect_model_task(model_id: int) -> None:
    from apps.registry.services import run_inspection

    run_inspection(model_id)


@shared_task(name="registry.convert")
def convert_model_task(model_id: int) -> None:
    from apps.registry.services import run_conversion

    run_conversion(model_id)


@shared_task(name="registry.merge")
def merge_adapter_task(model_id: int) -> None:
    from apps.registry.services import run_merge

    run_merge(model_id)


@shared_task(name="registry.prepare_catalogue")
def prepare_catalogue_task(entry_id: int) -> None:
    from apps.registry.services import run_catalogue_preparation

    run_catalogue_preparation(entry_id)


@shared_task(name="registry.export", bind=True)
def export_model_task(self, job_id: int) -> None:
    from apps.registry.exports import run_model_export

    run_model_export(job_id, worker=self.request.hostname or "")


@shared_task(name="registry.measure_precisions", bind=True)
def measure_precisions_task(self, job_id: int) -> None:
    from apps.registry.precisions import run_precision_measurement

    run_precision_measurement(job_id, worker=self.request.hostname or "")
