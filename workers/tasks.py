"""Celery tasks: thin adapters. Each receives only an id and hands over to a service."""

from celery import shared_task


@shared_task(name="datasets.import", bind=True)
def import_dataset_task(self, job_id: int) -> None:
    from apps.datasets.importer import run_import

    run_import(job_id, worker=self.request.hostname or "")


@shared_task(name="datasets.index_search")
def index_search_task(version_id: int) -> None:
    from apps.datasets.search_index import build

    build(version_id)


@shared_task(name="datasets.derive")
def derive_version_task(job_id: int) -> None:
    from apps.datasets.derive import run_derive

    run_derive(job_id)


@shared_task(name="datasets.export")
def export_version_task(job_id: int) -> None:
    from apps.datasets.exports import run_export_job

    run_export_job(job_id)


@shared_task(name="registry.convert")
def convert_model_task(model_id: int) -> None:
    from apps.registry.services import run_conversion

    run_conversion(model_id)


@shared_task(name="registry.merge")
def merge_adapter_task(model_id: int) -> None:
    from apps.registry.services import run_merge

    run_merge(model_id)


@shared_task(name="training.run", bind=True)
def train_task(self, job_id: int) -> None:
    import os

    from apps.training.runner import run_job

    run_job(job_id, worker=self.request.hostname or "", pid=os.getpid())


@shared_task(name="training.reap_stale")
def reap_stale_jobs_task() -> None:
    from apps.training.runner import reap_stale_jobs

    reap_stale_jobs()


@shared_task(name="serving.generate")
def generate_task(generation_id: int) -> None:
    from apps.serving.runner import run_generation

    run_generation(generation_id)


@shared_task(name="annotation.export")
def annotation_export_task(export_id: int) -> None:
    from apps.annotation.exports import run_export

    run_export(export_id)


@shared_task(name="annotation.suggest")
def suggest_task(campaign_id: int) -> None:
    from apps.annotation.suggestions import run_suggestions

    run_suggestions(campaign_id)


@shared_task(name="comparison.run", bind=True)
def compare_task(self, comparison_id: int) -> None:
    from apps.comparison.runner import run_comparison

    run_comparison(comparison_id, worker=self.request.hostname or "")


@shared_task(name="comparison.reap_stale")
def reap_stale_comparisons_task() -> None:
    from apps.comparison.runner import reap_stale_comparisons

    reap_stale_comparisons()
