"""Celery tasks: thin adapters. Each receives only an id and hands over to a service."""

from celery import shared_task


@shared_task(name="datasets.import")
def import_dataset_task(job_id: int) -> None:
    from apps.datasets.importer import run_import

    run_import(job_id)


@shared_task(name="datasets.derive")
def derive_version_task(job_id: int) -> None:
    from apps.datasets.derive import run_derive

    run_derive(job_id)


@shared_task(name="registry.convert")
def convert_model_task(model_id: int) -> None:
    from apps.registry.services import run_conversion

    run_conversion(model_id)
